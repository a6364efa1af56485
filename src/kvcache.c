/*
 * flashcl_forward_kvcache: attention against a contiguous or paged KV cache,
 * after appending new rows (with rotary) in the same call. Every table and
 * length is checked on the host before anything is enqueued; the tables go to
 * the device through the context's scratch (src/kvcache_state.c: copied first,
 * so the caller's arrays may change as soon as the call returns). A contiguous cache becomes the
 * one-page-per-sequence case of the page table, so one kernel serves both.
 */
#include "backends/decode/decode.h"
#include "kvcache_appends.h"
#include "kvcache_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first flashcl_kv_cache (FlashCL 0.2) ends with scale_per_head. */
#define CACHE_MIN_SIZE (offsetof(flashcl_kv_cache, scale_per_head) + sizeof(int))

/* What the checks resolve for the launch. */
typedef struct kv_plan {
    flashcl_kv_cache c; /* the caller's cache, defaults applied */
    int paged, max_pages;
    long page_size;
    size_t pool_batch, pool_rows; /* pages x page_size, or sequences x capacity */
    int32_t *table, *seqinfo;     /* host copies: [batch, max_pages] and [batch][4] */
    size_t max_kv;                /* the longest sequence's keys */
    flashcl_tensor views[6];      /* q, o, cache k, cache v, k_new, v_new, resolved */
} kv_plan;

static void kv_plan_free(kv_plan *p) {
    free(p->table);
    free(p->seqinfo);
}

static flashcl_status copy_cache(flashcl_context *ctx, const flashcl_kv_cache *in, flashcl_kv_cache *c) {
    if (!in) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "cache is NULL");
    if (in->struct_size < CACHE_MIN_SIZE)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_STRUCT_SIZE,
                             "cache->struct_size (%zu) is 0 or too small: start the cache from FLASHCL_KV_CACHE_INIT",
                             in->struct_size);
    memset(c, 0, sizeof *c);
    memcpy(c, in, in->struct_size < sizeof *c ? in->struct_size : sizeof *c);
    const unsigned char *extra = (const unsigned char *)in;
    for (size_t i = sizeof *c; i < in->struct_size; ++i)
        if (extra[i])
            return flashcl__fail(ctx, FLASHCL_ERR_UNSUPPORTED_FIELD,
                                 "cache sets a field at byte %zu, past the %zu bytes this FlashCL knows", i, sizeof *c);
    return FLASHCL_SUCCESS;
}

/* The descriptor fields a KV-cache call cannot take. */
static flashcl_status refuse_variants(flashcl_context *ctx, const flashcl_attention_desc *d) {
    const char *field = flashcl__is_varlen(d)           ? "cu_seqlens_q/cu_seqlens_k (varlen)"
                        : d->bias.buffer                ? "bias"
                        : d->mask.buffer                ? "mask"
                        : d->block_mask.buffer          ? "block_mask"
                        : d->dropout_p > 0.0f           ? "dropout_p"
                        : d->path != FLASHCL_PATH_FLASH ? "path (the KV-cache call has no standard path)"
                                                        : NULL;
    if (field)
        return flashcl__fail(ctx, FLASHCL_ERR_UNSUPPORTED_VARIANT, "flashcl_forward_kvcache does not take %s", field);
    return FLASHCL_SUCCESS;
}

/* Page tables, lengths and their device forms. */
static flashcl_status check_tables(flashcl_context *ctx, const flashcl_attention_desc *d, kv_plan *p) {
    const flashcl_kv_cache *c = &p->c;
    const size_t b = d->batch;
    p->paged = c->block_table != NULL;
    if (p->paged) {
        if (c->num_pages == 0 || c->page_size == 0 || c->max_pages == 0)
            return flashcl__fail(
                ctx, FLASHCL_ERR_INVALID_SHAPE,
                "cache: a paged cache needs num_pages, page_size and max_pages >= 1 (got %zu, %zu, %zu)", c->num_pages,
                c->page_size, c->max_pages);
        if (c->cache_batch_idx)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT,
                                 "cache->cache_batch_idx: a paged cache picks its pages through block_table instead");
        if (c->num_pages > INT32_MAX || c->max_pages > INT32_MAX / b || c->page_size > (size_t)INT32_MAX / c->max_pages)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_SHAPE,
                                 "cache: num_pages, max_pages or page_size is too large");
        p->max_pages = (int)c->max_pages;
        p->page_size = (long)c->page_size;
        p->pool_batch = c->num_pages;
        p->pool_rows = c->page_size;
    } else {
        const size_t seqs = c->batch_cache ? c->batch_cache : b;
        if (c->capacity == 0) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_SHAPE, "cache->capacity is 0");
        if (c->capacity > INT32_MAX || seqs > INT32_MAX)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_SHAPE, "cache->capacity or batch_cache is too large");
        p->max_pages = 1;
        p->page_size = (long)c->capacity;
        p->pool_batch = seqs;
        p->pool_rows = c->capacity;
    }
    const size_t capacity = p->paged ? c->max_pages * c->page_size : c->capacity;
    /* The kernels index new rows with 32-bit ints; bounded here, the sums below cannot overflow. */
    if (c->seqlen_new > INT32_MAX)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_SHAPE, "cache->seqlen_new (%zu) is larger than %d", c->seqlen_new,
                             INT32_MAX);
    if (c->seqlen_new && !c->cache_seqlens)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT,
                             "cache->cache_seqlens is NULL: appending (seqlen_new %zu) needs each sequence's length",
                             c->seqlen_new);
    p->table = malloc(b * (size_t)p->max_pages * sizeof *p->table);
    p->seqinfo = malloc(b * 4 * sizeof *p->seqinfo);
    if (!p->table || !p->seqinfo)
        return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory (cache tables)");
    p->max_kv = 0;
    for (size_t s = 0; s < b; ++s) {
        const long len = c->cache_seqlens ? c->cache_seqlens[s] : (long)capacity;
        const long pad = c->cache_leftpad ? c->cache_leftpad[s] : 0;
        const long long end = (long long)len + (long long)c->seqlen_new; /* long may be 32 bits */
        if (len < 0)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_SHAPE, "cache->cache_seqlens[%zu] = %ld is negative", s, len);
        if (end > (long long)capacity)
            return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_BOUNDS,
                                 p->paged
                                     ? "cache->cache_seqlens[%zu] + seqlen_new = %ld + %zu exceeds the block_table's "
                                       "max_pages x page_size = %zu rows"
                                     : "cache->cache_seqlens[%zu] + seqlen_new = %ld + %zu exceeds the cache's "
                                       "capacity of %zu rows",
                                 s, len, c->seqlen_new, capacity);
        if (pad < 0 || pad > len)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_SHAPE,
                                 "cache->cache_leftpad[%zu] = %ld must be in 0..cache_seqlens[%zu] (%ld)", s, pad, s,
                                 len);
        if (p->paged) {
            const long pages = (long)((end + p->page_size - 1) / p->page_size); /* end <= capacity here */
            for (long j = 0; j < p->max_pages; ++j) {
                const int32_t page = c->block_table[s * (size_t)p->max_pages + (size_t)j];
                /* Pages past the sequence's end are never read: any value is fine there. */
                if (j < pages && (page < 0 || (size_t)page >= c->num_pages))
                    return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_BOUNDS,
                                         "cache->block_table[%zu][%ld] = %d is outside the pool's pages 0..%zu", s, j,
                                         (int)page, c->num_pages - 1);
                p->table[s * (size_t)p->max_pages + (size_t)j] = j < pages ? page : 0;
            }
        } else {
            const long seq = c->cache_batch_idx ? c->cache_batch_idx[s] : (long)s;
            if (seq < 0 || (size_t)seq >= p->pool_batch)
                return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_BOUNDS,
                                     "cache->cache_batch_idx[%zu] = %ld is outside the cache's sequences 0..%zu", s,
                                     seq, p->pool_batch - 1);
            p->table[s] = (int32_t)seq;
        }
        p->seqinfo[4 * s] = (int32_t)pad;             /* the sequence's first key row */
        p->seqinfo[4 * s + 1] = (int32_t)(end - pad); /* its keys after the append */
        p->seqinfo[4 * s + 2] = (int32_t)len;         /* where the new rows go */
        p->seqinfo[4 * s + 3] = (int32_t)len;         /* the rotary position of the first new row: its cache row, as
                                                 FlashAttention rotates (cache_leftpad does not shift it) */
        if ((size_t)(end - pad) > p->max_kv) p->max_kv = (size_t)(end - pad);
    }
    return FLASHCL_SUCCESS;
}

static flashcl_status check_rotary_and_scales(flashcl_context *ctx, const flashcl_attention_desc *d, const kv_plan *p) {
    const flashcl_kv_cache *c = &p->c;
    if (c->rotary_cos || c->rotary_sin) {
        if (!c->rotary_cos || !c->rotary_sin)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_BUFFER, "cache->rotary_%s is NULL: rotary needs both tables",
                                 c->rotary_cos ? "sin" : "cos");
        if (c->rotary_dim == 0 || c->rotary_dim % 2 || c->rotary_dim > d->head_dim)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_VARIANT,
                                 "cache->rotary_dim (%zu) must be even, at least 2 and at most head_dim (%zu)",
                                 c->rotary_dim, d->head_dim);
        /* The highest position rotated: a new row, or a query row when they are counted per row. */
        const int per_row = d->causal || d->window;
        long need = 0;
        for (size_t s = 0; s < d->batch; ++s) {
            const long first = p->seqinfo[4 * s + 3];
            const long last_new = c->seqlen_new ? first + (long)c->seqlen_new : 0;
            const long last_q = first + (per_row ? (long)d->seqlen_q : 1);
            if (last_new > need) need = last_new;
            if (last_q > need) need = last_q;
        }
        if ((size_t)need > c->seqlen_ro)
            return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_BOUNDS,
                                 "cache->seqlen_ro (%zu), the rows of rotary_cos and rotary_sin: the call rotates "
                                 "positions up to %ld",
                                 c->seqlen_ro, need - 1);
        /* seqlen_ro is the caller's: a product that wraps would let any buffer pass. */
        if (c->seqlen_ro > SIZE_MAX / (c->rotary_dim / 2))
            return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_BOUNDS,
                                 "cache->seqlen_ro (%zu) x rotary_dim / 2 (%zu) overflows", c->seqlen_ro,
                                 c->rotary_dim / 2);
        const size_t count = c->seqlen_ro * (c->rotary_dim / 2);
        flashcl_status st =
            flashcl__validate_small(ctx, "cache->rotary_cos", c->rotary_cos, sizeof(float), c->rotary_offset, count);
        if (st == FLASHCL_SUCCESS)
            st = flashcl__validate_small(ctx, "cache->rotary_sin", c->rotary_sin, sizeof(float), c->rotary_offset,
                                         count);
        if (st != FLASHCL_SUCCESS) return st;
    }
    if (c->dtype != FLASHCL_CACHE_DTYPE_SAME && c->dtype != FLASHCL_CACHE_DTYPE_FP8_E4M3 &&
        c->dtype != FLASHCL_CACHE_DTYPE_FP8_E5M2)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_DTYPE, "cache->dtype: unknown value %d", (int)c->dtype);
    const size_t nscale = c->scale_per_head ? d->heads_kv : 1;
    if (c->k_scale) {
        flashcl_status st = flashcl__validate_small(ctx, "cache->k_scale", c->k_scale, sizeof(float), 0, nscale);
        if (st != FLASHCL_SUCCESS) return st;
    }
    if (c->v_scale) return flashcl__validate_small(ctx, "cache->v_scale", c->v_scale, sizeof(float), 0, nscale);
    return FLASHCL_SUCCESS;
}

/* q and o like flashcl_forward's, the cache pools, and the new rows; the cache is written when appending. */
static flashcl_status check_views(flashcl_context *ctx, const flashcl_attention_desc *d, const flashcl_tensor *q,
                                  const flashcl_tensor *o, cl_mem lse, size_t lse_offset, cl_uint num_wait,
                                  const cl_event *wait_list, kv_plan *p) {
    const flashcl_kv_cache *c = &p->c;
    const int append = c->seqlen_new > 0;
    if (append && (!c->k_new.buffer || !c->v_new.buffer))
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_BUFFER, "cache->%s.buffer is NULL with seqlen_new %zu",
                             c->k_new.buffer ? "v_new" : "k_new", c->seqlen_new);
    const size_t elem = c->dtype == FLASHCL_CACHE_DTYPE_SAME ? 0 : 1;
    const flashcl__view_spec specs[6] = {
        {"q", q, d->heads_q, d->seqlen_q, d->head_dim, 0, 0, 0},
        {"o", o, d->heads_q, d->seqlen_q, d->head_dim_v, 1, 0, 0},
        {"cache->k", &c->k, d->heads_kv, p->pool_rows, d->head_dim, append ? FLASHCL__READ_WRITE : 0, p->pool_batch,
         elem},
        {"cache->v", &c->v, d->heads_kv, p->pool_rows, d->head_dim_v, append ? FLASHCL__READ_WRITE : 0, p->pool_batch,
         elem},
        {"cache->k_new", &c->k_new, d->heads_kv, c->seqlen_new, d->head_dim, 0, 0, 0},
        {"cache->v_new", &c->v_new, d->heads_kv, c->seqlen_new, d->head_dim_v, 0, 0, 0},
    };
    const flashcl__lse_spec lse_spec = {lse, lse_offset, 0, 1};
    const int count = append ? 6 : 4;
    flashcl_status st = flashcl__validate_views(ctx, d, specs, count, &lse_spec, num_wait, wait_list, p->views);
    if (st == FLASHCL_SUCCESS) st = flashcl__validate_variant_buffers(ctx, d, 0, num_wait, wait_list);
    if (st != FLASHCL_SUCCESS) return st;
    /* The rotary tables and the scales (their bounds checked by check_rotary_and_scales). */
    flashcl__ranges extra = {0};
    const size_t table = c->rotary_cos ? c->seqlen_ro * (c->rotary_dim / 2) * sizeof(float) : 0;
    flashcl__range_add(&extra, "cache->rotary_cos", c->rotary_cos, c->rotary_offset * sizeof(float), table, 0);
    flashcl__range_add(&extra, "cache->rotary_sin", c->rotary_sin, c->rotary_offset * sizeof(float), table, 0);
    const size_t scales = (c->scale_per_head ? d->heads_kv : 1) * sizeof(float);
    flashcl__range_add(&extra, "cache->k_scale", c->k_scale, 0, scales, 0);
    flashcl__range_add(&extra, "cache->v_scale", c->v_scale, 0, scales, 0);
    return flashcl__validate_apart(ctx, d, 0, specs, count, p->views, &lse_spec, &extra);
}

/* The append (and rotary) kernels for this call's shapes. */
static flashcl_status append_kernels(flashcl_context *ctx, const flashcl_attention_desc *d, const flashcl_kv_cache *c,
                                     cl_kernel *append, cl_kernel *rotate) {
    char variants[256], options[400];
    flashcl__variant_options(d, variants, sizeof variants);
    snprintf(options, sizeof options,
             "-D HEAD_DIM=%zu -D ROTARY_DIM=%zu -D INTERLEAVED=%d -D CACHE_DTYPE=%d -D PAGED=1 %s", d->head_dim,
             c->rotary_cos ? c->rotary_dim : (size_t)0, c->rotary_interleaved != 0, (int)c->dtype, variants);
    return flashcl__kv_kernels(ctx, options, append, rotate);
}

static flashcl_status enqueue(flashcl_context *ctx, const flashcl_attention_desc *d, const kv_plan *p, cl_mem lse,
                              size_t lse_offset, cl_uint num_wait, const cl_event *wait_list, cl_event *event) {
    const flashcl_kv_cache *c = &p->c;
    const int append = c->seqlen_new > 0, rotary = c->rotary_cos != NULL;
    cl_mem table = NULL, seqinfo = NULL, one = NULL, qrot = NULL;
    cl_kernel k_append = NULL, k_rotate = NULL;
    flashcl_status st = FLASHCL_SUCCESS;
    /* A scale of 1 for an fp8 cache given none (the kernels always read one). */
    if (c->dtype != FLASHCL_CACHE_DTYPE_SAME && (!c->k_scale || !c->v_scale)) st = flashcl__kv_unit_scale(ctx, &one);
    if (st == FLASHCL_SUCCESS && (append || rotary))
        st = append_kernels(ctx, d, c, append ? &k_append : NULL, rotary ? &k_rotate : NULL);
    flashcl_tensor qview = p->views[0];
    if (st == FLASHCL_SUCCESS && rotary) {
        const size_t bytes = d->batch * d->seqlen_q * d->heads_q * d->head_dim * flashcl_dtype_size(d->dtype);
        st = flashcl__scratch(ctx, FLASHCL__SCRATCH_GRADS, bytes, "kvcache: the rotated query", &qrot);
        qview = flashcl_tensor_bshd(qrot, d->seqlen_q, d->heads_q, d->head_dim);
    }
    if (st != FLASHCL_SUCCESS) return st;
    flashcl__chain chain;
    st = flashcl__chain_begin(&chain, ctx, num_wait, wait_list, 1);
    if (st != FLASHCL_SUCCESS) return st;
    int last = FLASHCL__AFTER_START;
    st = flashcl__kv_upload_tables(ctx, &chain, p->table, d->batch * (size_t)p->max_pages, p->seqinfo, d->batch * 4,
                                   FLASHCL__AFTER_START, &table, &seqinfo, &last);
    const int uploaded = last; /* the last table write enqueued (also when a later one failed), or none */
    const cl_mem dummy = p->views[0].buffer;
    cl_mem kscale = c->k_scale ? c->k_scale : (one ? one : dummy),
           vscale = c->v_scale ? c->v_scale : (one ? one : dummy);
    if (st == FLASHCL_SUCCESS && append) {
        flashcl__args a = flashcl__args_for(k_append, "kv_append");
        flashcl__arg_view(&a, &p->views[4]);
        flashcl__arg_view(&a, &p->views[5]);
        flashcl__arg_view(&a, &p->views[2]);
        flashcl__arg_view(&a, &p->views[3]);
        flashcl__arg_mem(&a, table);
        flashcl__arg_int(&a, p->max_pages);
        flashcl__arg(&a, sizeof(cl_long), &(cl_long){(cl_long)p->page_size});
        flashcl__arg_mem(&a, seqinfo);
        flashcl__arg_mem(&a, rotary ? c->rotary_cos : dummy);
        flashcl__arg_mem(&a, rotary ? c->rotary_sin : dummy);
        flashcl__arg_ulong(&a, c->rotary_offset);
        flashcl__arg_mem(&a, kscale);
        flashcl__arg_mem(&a, vscale);
        flashcl__arg_int(&a, c->scale_per_head != 0);
        flashcl__arg_int(&a, (cl_int)c->seqlen_new);
        st = flashcl__args_check(ctx, &a);
        const size_t dmax = d->head_dim > d->head_dim_v ? d->head_dim : d->head_dim_v;
        const size_t global[3] = {c->seqlen_new * dmax, d->heads_kv, d->batch};
        if (st == FLASHCL_SUCCESS) last = flashcl__chain_launch(&chain, k_append, "kv_append", 3, global, NULL, last);
    }
    if (st == FLASHCL_SUCCESS && rotary) {
        flashcl__args a = flashcl__args_for(k_rotate, "rotate_q");
        flashcl__arg_view(&a, &p->views[0]);
        flashcl__arg_view(&a, &qview);
        flashcl__arg_mem(&a, seqinfo);
        flashcl__arg_mem(&a, c->rotary_cos);
        flashcl__arg_mem(&a, c->rotary_sin);
        flashcl__arg_ulong(&a, c->rotary_offset);
        flashcl__arg_int(&a, (cl_int)d->seqlen_q);
        flashcl__arg_int(&a, d->causal || d->window);
        st = flashcl__args_check(ctx, &a);
        const size_t global[3] = {d->seqlen_q * d->head_dim, d->heads_q, d->batch};
        if (st == FLASHCL_SUCCESS) last = flashcl__chain_launch(&chain, k_rotate, "rotate_q", 3, global, NULL, last);
    }
    if (st == FLASHCL_SUCCESS) {
        flashcl_attention_desc dd = *d;
        dd.seqlen_k = dd.max_seqlen_k = p->max_kv ? p->max_kv : 1;
        const flashcl__decode_keys keys = {1,
                                           c->dtype,
                                           &p->views[2],
                                           &p->views[3],
                                           table,
                                           seqinfo,
                                           p->max_pages,
                                           p->page_size,
                                           dd.max_seqlen_k,
                                           kscale,
                                           vscale,
                                           c->scale_per_head != 0};
        st = flashcl__decode_enqueue(ctx, &chain, last, &dd, &qview, &keys, &p->views[1], lse, lse_offset, &last);
    }
    if (st == FLASHCL_SUCCESS) st = flashcl__chain_end(&chain, 1, &last, event);
    if (st == FLASHCL_SUCCESS) return st;
    /* Writes already enqueued still run: the next call waits for them (on an out-of-order queue they
       could otherwise land after its own writes) and, the content forgotten, writes the tables again. */
    if (uploaded >= 0 && chain.count > 0) flashcl__scratch_used_by(ctx, flashcl__chain_event(&chain, uploaded));
    flashcl__kv_forget_tables(ctx);
    return flashcl__chain_abort(&chain, st);
}

/* q and o alone, before the tables: o (an output, its rows never overlap) bounds the batch, so
   the host tables check_tables allocates per sequence stay the size of o's rows; a huge batch
   with a small o is refused here instead of costing gigabytes of host memory. check_views
   checks them again with the rest. */
static flashcl_status check_query_views(flashcl_context *ctx, const flashcl_attention_desc *d, const flashcl_tensor *q,
                                        const flashcl_tensor *o, kv_plan *p) {
    const flashcl__view_spec specs[2] = {
        {"q", q, d->heads_q, d->seqlen_q, d->head_dim, 0, 0, 0},
        {"o", o, d->heads_q, d->seqlen_q, d->head_dim_v, 1, 0, 0},
    };
    const flashcl__lse_spec no_lse = {NULL, 0, 0, 0};
    return flashcl__validate_views(ctx, d, specs, 2, &no_lse, 0, NULL, p->views);
}

/* Every check flashcl_forward_kvcache makes before it enqueues: *d and *p (freed by the caller) resolved. */
static flashcl_status prepare(flashcl_context *ctx, const flashcl_attention_desc *desc, const flashcl_tensor *q,
                              const flashcl_kv_cache *cache, const flashcl_tensor *o, cl_mem lse, size_t lse_offset,
                              cl_uint num_wait, const cl_event *wait_list, flashcl_attention_desc *d, kv_plan *p) {
    memset(p, 0, sizeof *p);
    flashcl_status st = flashcl__resolve_desc(ctx, desc, d);
    if (st == FLASHCL_SUCCESS) st = refuse_variants(ctx, d);
    if (st != FLASHCL_SUCCESS) return st;
    /* The lengths come from the cache, not seqlen_k: undo resolve's "a left bound past every key
       (of seqlen_k) is no bound". */
    if (d->window) d->window_left = desc->window_left;
    if (!q || !o) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "%s is NULL", q ? "o" : "q");
    st = copy_cache(ctx, cache, &p->c);
    if (st == FLASHCL_SUCCESS) st = check_query_views(ctx, d, q, o, p);
    if (st == FLASHCL_SUCCESS) st = check_tables(ctx, d, p);
    if (st == FLASHCL_SUCCESS)
        st = flashcl__kv_appends_disjoint(ctx, p->paged, p->table, p->max_pages, p->page_size, p->seqinfo, d->batch,
                                          p->c.seqlen_new);
    if (st == FLASHCL_SUCCESS) st = check_rotary_and_scales(ctx, d, p);
    /* The views' checks need the lengths: seqlen_k is the longest sequence's. */
    if (st == FLASHCL_SUCCESS) {
        d->seqlen_k = d->max_seqlen_k = p->max_kv ? p->max_kv : 1;
        st = check_views(ctx, d, q, o, lse, lse_offset, num_wait, wait_list, p);
    }
    return st;
}

flashcl_status flashcl_forward_kvcache(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                       const flashcl_tensor *q, const flashcl_kv_cache *cache, const flashcl_tensor *o,
                                       cl_mem lse, size_t lse_offset, cl_uint num_wait, const cl_event *wait_list,
                                       cl_event *event) {
    if (!ctx) return FLASHCL_ERR_INVALID_CONTEXT;
    flashcl__clear_error(ctx);
    if (event) *event = NULL;
    flashcl_attention_desc d;
    kv_plan p;
    flashcl_status st = prepare(ctx, desc, q, cache, o, lse, lse_offset, num_wait, wait_list, &d, &p);
    if (st == FLASHCL_SUCCESS) st = enqueue(ctx, &d, &p, lse, lse_offset, num_wait, wait_list, event);
    kv_plan_free(&p);
    return st;
}

flashcl_status flashcl__check_forward_kvcache(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                              const flashcl_tensor *q, const flashcl_kv_cache *cache,
                                              const flashcl_tensor *o, cl_mem lse, size_t lse_offset, cl_uint num_wait,
                                              const cl_event *wait_list, flashcl_kv_cache *resolved,
                                              flashcl_tensor views[6]) {
    flashcl__clear_error(ctx);
    flashcl_attention_desc d;
    kv_plan p;
    flashcl_status st = prepare(ctx, desc, q, cache, o, lse, lse_offset, num_wait, wait_list, &d, &p);
    if (st == FLASHCL_SUCCESS) {
        *resolved = p.c;
        memcpy(views, p.views, sizeof p.views);
    }
    kv_plan_free(&p);
    return st;
}
