/* The KV cache of a bench path; see bench_cache.h. */
#include "bench_cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_problem.h"
#include "storage_codec.h"
#include "tool_errors.h"

/* Fixed, so every run deals the pages out the same way. */
#define PAGE_SHUFFLE_SEED 0x2545f4914f6cdd1du

static bool is_fp8(flashcl_cache_dtype dtype) { return dtype != FLASHCL_CACHE_DTYPE_SAME; }

size_t bench_cache_elem(const bench_cache_spec *spec, flashcl_dtype dtype) {
    return is_fp8(spec->dtype) ? 1 : flashcl_dtype_size(dtype ? dtype : FLASHCL_DTYPE_F32);
}

static size_t heads_kv_of(const flashcl_attention_desc *d) { return d->heads_kv ? d->heads_kv : d->heads_q; }

/* Pool slots (sequences or pages) and rows per slot. */
static void pool_shape(const bench_cache_spec *spec, const flashcl_attention_desc *d, size_t *slots, size_t *rows) {
    if (spec->page_size) {
        *slots = d->batch * ((d->seqlen_k + spec->page_size - 1) / spec->page_size);
        *rows = spec->page_size;
    } else {
        *slots = d->batch;
        *rows = d->seqlen_k;
    }
}

/* Fisher-Yates over the pool's pages with xorshift64: page j of sequence s is order[s * max_pages + j]. */
static void deal_pages(int32_t *table, size_t pages) {
    for (size_t i = 0; i < pages; ++i) table[i] = (int32_t)i;
    uint64_t x = PAGE_SHUFFLE_SEED;
    for (size_t i = pages; i > 1; --i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t j = (size_t)(x % i);
        int32_t t = table[i - 1];
        table[i - 1] = table[j];
        table[j] = t;
    }
}

int bench_cache_layout(const bench_cache_spec *spec, const flashcl_attention_desc *d, bench_cache *c) {
    memset(c, 0, sizeof *c);
    c->kv = (flashcl_kv_cache)FLASHCL_KV_CACHE_INIT;
    size_t slots, rows;
    pool_shape(spec, d, &slots, &rows);
    if (slots > INT32_MAX || d->seqlen_k > INT32_MAX)
        return tool_usage_error("bench: a cache of %zu pages or %zu rows is more than its int32 tables can address",
                                slots, d->seqlen_k);
    c->elem = bench_cache_elem(spec, d->dtype);
    c->seqlens = malloc(d->batch * sizeof *c->seqlens);
    if (c->seqlens == NULL) return tool_failure("bench: out of host memory for the cache tables");
    for (size_t s = 0; s < d->batch; ++s) c->seqlens[s] = (int32_t)d->seqlen_k;
    c->kv.cache_seqlens = c->seqlens;
    c->kv.dtype = spec->dtype;
    if (spec->page_size) {
        c->block_table = malloc(slots * sizeof *c->block_table);
        if (c->block_table == NULL) return tool_failure("bench: out of host memory for the block table");
        deal_pages(c->block_table, slots);
        c->kv.block_table = c->block_table;
        c->kv.num_pages = slots;
        c->kv.page_size = spec->page_size;
        c->kv.max_pages = slots / d->batch;
    } else {
        c->kv.capacity = d->seqlen_k;
        c->kv.batch_cache = d->batch;
    }
    return 0;
}

/* Where row j of sequence s lives in the pool, in rows from its start. */
static size_t pool_row(const bench_cache_spec *spec, const bench_cache *c, const flashcl_attention_desc *d, size_t s,
                       size_t j) {
    if (!spec->page_size) return s * d->seqlen_k + j;
    size_t page = (size_t)c->block_table[s * c->kv.max_pages + j / spec->page_size];
    return page * spec->page_size + j % spec->page_size;
}

/* The largest magnitude: fp8 stores x / (amax / max) so that the values span the format. */
static float fp8_scale(const float *values, size_t n, int e4m3) {
    float amax = 0.0f;
    for (size_t i = 0; i < n; ++i) amax = fabsf(values[i]) > amax ? fabsf(values[i]) : amax;
    return amax > 0.0f && isfinite(amax) ? amax / codec_fp8_max(e4m3) : 1.0f;
}

/* n values of one row into the cache's storage at dst. */
static void encode_row(const bench_cache_spec *spec, flashcl_dtype dtype, float scale, const float *src, size_t n,
                       unsigned char *dst) {
    if (!is_fp8(spec->dtype)) {
        flashcl__to_storage(dtype ? dtype : FLASHCL_DTYPE_F32, src, dst, n);
        return;
    }
    const int e4m3 = spec->dtype == FLASHCL_CACHE_DTYPE_FP8_E4M3;
    const float inverse = 1.0f / scale;
    for (size_t i = 0; i < n; ++i) dst[i] = codec_float_to_fp8(src[i] * inverse, e4m3);
}

static int make_buffer(flashcl_context *ctx, const char *what, const void *data, size_t bytes, cl_mem *out) {
    cl_int err = CL_SUCCESS;
    *out = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes,
                          (void *)(uintptr_t)data, &err);
    if (err != CL_SUCCESS) {
        *out = NULL;
        return tool_failure("bench: cannot allocate the %s (%zu bytes) on the device: %s", what, bytes,
                            flashcl_status_name(err));
    }
    return 0;
}

int bench_cache_upload(flashcl_context *ctx, const bench_cache_spec *spec, const flashcl_attention_desc *d, int which,
                       const float *values, bench_cache *c) {
    const size_t hkv = heads_kv_of(d), dim = which ? d->head_dim_v : d->head_dim, row = hkv * dim;
    size_t slots, rows;
    pool_shape(spec, d, &slots, &rows);
    const size_t pool_elems = bench_tensor_bytes(slots, rows, hkv, dim, 1);
    const size_t bytes = bench_tensor_bytes(pool_elems, 1, 1, 1, c->elem);
    if (pool_elems == 0 || bytes == 0)
        return tool_usage_error("bench: the cache of this shape is too large to address");
    /* Zeroed: the rows past a sequence's end in its last page hold 0 in every format. */
    unsigned char *host = calloc(bytes, 1);
    if (host == NULL) return tool_failure("bench: out of host memory for the cache (%zu bytes)", bytes);
    float scale = 1.0f;
    if (is_fp8(spec->dtype)) {
        scale = fp8_scale(values, d->batch * d->seqlen_k * row, spec->dtype == FLASHCL_CACHE_DTYPE_FP8_E4M3);
        c->scale_value[which] = scale;
    }
    for (size_t s = 0; s < d->batch; ++s)
        for (size_t j = 0; j < d->seqlen_k; ++j)
            encode_row(spec, d->dtype, scale, values + (s * d->seqlen_k + j) * row, row,
                       host + pool_row(spec, c, d, s, j) * row * c->elem);
    const char *what = which ? "V cache" : "K cache";
    int rc = make_buffer(ctx, what, host, bytes, &c->pool[which]);
    free(host);
    if (rc == 0 && is_fp8(spec->dtype)) rc = make_buffer(ctx, "cache scale", &scale, sizeof scale, &c->scale[which]);
    if (rc != 0) return rc;
    flashcl_tensor view = flashcl_tensor_bshd(c->pool[which], rows, hkv, dim);
    if (which) {
        c->kv.v = view;
        c->kv.v_scale = c->scale[1];
    } else {
        c->kv.k = view;
        c->kv.k_scale = c->scale[0];
    }
    return 0;
}

void bench_cache_describe(const bench_cache_spec *spec, const bench_cache *c, char *buf, size_t size) {
    int used;
    if (spec->page_size)
        used = snprintf(buf, size, "paged, %zu rows a page, %zu pages dealt out in a shuffled order", spec->page_size,
                        c->kv.num_pages);
    else
        used = snprintf(buf, size, "contiguous, %zu rows a sequence", c->kv.capacity);
    if (used < 0 || (size_t)used >= size) return;
    if (is_fp8(spec->dtype))
        snprintf(buf + used, size - (size_t)used, ", %s (per-tensor scales K %.3g, V %.3g: amax / %g)",
                 spec->dtype == FLASHCL_CACHE_DTYPE_FP8_E4M3 ? "fp8_e4m3" : "fp8_e5m2", (double)c->scale_value[0],
                 (double)c->scale_value[1], (double)codec_fp8_max(spec->dtype == FLASHCL_CACHE_DTYPE_FP8_E4M3));
    else
        snprintf(buf + used, size - (size_t)used, ", in the storage type");
}

void bench_cache_release(bench_cache *c) {
    for (int i = 0; i < 2; ++i) {
        if (c->pool[i]) clReleaseMemObject(c->pool[i]);
        if (c->scale[i]) clReleaseMemObject(c->scale[i]);
        c->pool[i] = c->scale[i] = NULL;
    }
    free(c->block_table);
    free(c->seqlens);
    c->block_table = NULL;
    c->seqlens = NULL;
}
