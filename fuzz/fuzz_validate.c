/*
 * libFuzzer target for the argument checks alone, at host speed. The input
 * bytes pick one call (flashcl_forward, flashcl_backward,
 * flashcl_forward_kvcache, flashcl_merge_states) and every field it takes:
 * the descriptor (struct_size, sizes, each variant field, num_splits), the
 * views, the KV cache (contiguous or paged, block table, lengths, leftpad,
 * batch index, new rows, rotary tables, fp8 dtype and scales), the merge
 * descriptor. Sizes, offsets and strides are mostly small, sometimes extreme
 * (INT_MAX, SIZE_MAX, ...) so that the overflow checks are reached too.
 *
 * The call's own checks run (src/internal.h: flashcl__prepare_forward and
 * friends, exactly what the public call runs before its first enqueue), and
 * nothing is launched. So that no buffer is created per input, every cl_mem
 * comes from a pool made once: buffers of many sizes, a parent with
 * sub-buffers (aliasing through a parent), one buffer of another cl_context.
 *
 * Checked on every input: a refusal has a message and a known status, a
 * success none; every view validation accepted lies inside its buffer
 * (recomputed here in 128-bit arithmetic, independently of the library's).
 *
 * FLASHCL_FUZZ_LAUNCH=N (N >= 1) also runs the real public call on one
 * accepted input in N and checks that no byte of any pool buffer changed
 * outside what the call may write (its output views, LSE, dsinks, the cache
 * views when appending): what validation accepts must be safe to launch.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input under test, for fail(). */
static const uint8_t *g_input;
static size_t g_input_size;

/* A failed check: the input goes to ./fuzz_validate-crash and stderr (hex), then abort. libFuzzer's
   own crash artifact cannot be relied on: the OpenCL runtime (POCL) takes the signal handlers
   over from it, and an abort then leaves no file. */
static void fail(void) {
    FILE *f = fopen("fuzz_validate-crash", "wb");
    if (f) {
        fwrite(g_input, 1, g_input_size, f);
        fclose(f);
    }
    fprintf(stderr, "\nfuzz_validate: failing input (%zu bytes, also in ./fuzz_validate-crash):", g_input_size);
    for (size_t i = 0; i < g_input_size; ++i) fprintf(stderr, "%s%02x", i % 32 ? "" : "\n  ", g_input[i]);
    fprintf(stderr, "\n");
    abort();
}
#define FAIL() fail()

/* ---------------------------------------------------------------- the buffer pool */

static const size_t k_plain_bytes[] = {1,   2,   3,   4,   6,   8,   12,   16,   24,   32,   48,   64,   96,
                                       128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 4096, 8192, 16384};
#define PLAIN_COUNT (sizeof k_plain_bytes / sizeof k_plain_bytes[0])
#define SUB_COUNT 3
/* Roots: the plain buffers, the parent of the sub-buffers, the foreign buffer. */
#define ROOT_COUNT (PLAIN_COUNT + 2)
#define POOL_COUNT (ROOT_COUNT + SUB_COUNT)

typedef struct pool_entry {
    cl_mem mem;
    int root;     /* index of the root buffer it lives in (itself for a root) */
    size_t shift; /* its first byte within the root */
    size_t bytes;
} pool_entry;

static flashcl_context *g_ctx;
static cl_context g_foreign;
static pool_entry g_pool[POOL_COUNT];
static unsigned char *g_init[ROOT_COUNT]; /* each root's contents at rest */
static cl_event g_done;                   /* a completed user event, for wait lists */
static unsigned long g_launch_every, g_accepted;

static cl_mem make_buffer(cl_context cl, size_t bytes, unsigned salt, unsigned char **init) {
    *init = malloc(bytes);
    if (!*init) FAIL();
    /* Floats where 4 bytes fit (finite inputs for the launches), else varied bytes. */
    fuzz_fill_floats((float *)(void *)*init, bytes / sizeof(float), salt);
    for (size_t j = bytes / sizeof(float) * sizeof(float); j < bytes; ++j) (*init)[j] = (unsigned char)(j + salt);
    cl_int err;
    cl_mem m = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, *init, &err);
    if (err != CL_SUCCESS) FAIL();
    return m;
}

static void pool_init(void) {
    char err[256];
    if (flashcl_context_create(&g_ctx, NULL, err, sizeof err) != FLASHCL_SUCCESS) {
        fprintf(stderr, "fuzz_validate: no OpenCL device: %s\n", err);
        FAIL();
    }
    cl_context cl = flashcl_context_cl_context(g_ctx);
    cl_device_id dev = flashcl_context_device(g_ctx);
    for (size_t i = 0; i < PLAIN_COUNT; ++i)
        g_pool[i] =
            (pool_entry){make_buffer(cl, k_plain_bytes[i], (unsigned)i, &g_init[i]), (int)i, 0, k_plain_bytes[i]};
    /* Sub-buffers start at multiples of the device's base address alignment. */
    cl_uint align_bits = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, NULL) != CL_SUCCESS) FAIL();
    const size_t align = align_bits / 8 ? align_bits / 8 : 1, parent = PLAIN_COUNT;
    const size_t parent_bytes = (SUB_COUNT + 1) * align + 1024;
    g_pool[parent] = (pool_entry){make_buffer(cl, parent_bytes, 99, &g_init[parent]), (int)parent, 0, parent_bytes};
    cl_int e = CL_SUCCESS;
    g_foreign = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    if (e != CL_SUCCESS) FAIL();
    g_pool[parent + 1] = (pool_entry){make_buffer(g_foreign, 4096, 98, &g_init[parent + 1]), (int)parent + 1, 0, 4096};
    for (size_t s = 0; s < SUB_COUNT; ++s) {
        /* Overlapping windows of the parent: sub-buffer s covers [s*align, s*align + 2*align + 512). */
        const cl_buffer_region region = {s * align, 2 * align + 512};
        cl_mem sub =
            clCreateSubBuffer(g_pool[parent].mem, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &e);
        if (e != CL_SUCCESS) FAIL();
        g_pool[ROOT_COUNT + s] = (pool_entry){sub, (int)parent, region.origin, region.size};
    }
    g_done = clCreateUserEvent(cl, &e);
    if (e != CL_SUCCESS || clSetUserEventStatus(g_done, CL_COMPLETE) != CL_SUCCESS) FAIL();
    const char *every = getenv("FLASHCL_FUZZ_LAUNCH");
    g_launch_every = every ? strtoul(every, NULL, 10) : 0;
}

/* A pool buffer or NULL (one value in POOL_COUNT + 1). */
static cl_mem pick_buffer(fuzz_reader *r) {
    unsigned i = fuzz_next(r) % (POOL_COUNT + 1);
    return i == POOL_COUNT ? NULL : g_pool[i].mem;
}

static const pool_entry *entry_of(cl_mem m) {
    for (size_t i = 0; i < POOL_COUNT; ++i)
        if (g_pool[i].mem == m) return &g_pool[i];
    return NULL;
}

/* ---------------------------------------------------------------- values */

/* Mostly 0..`small`-1; the top bytes give the values overflow checks are about. */
static size_t next_size(fuzz_reader *r, unsigned small) {
    static const size_t extremes[] = {
        64, 100, 576, 577, (size_t)INT_MAX, (size_t)INT_MAX + 1, (size_t)UINT32_MAX + 1, SIZE_MAX / 2 + 1, SIZE_MAX};
    const unsigned n = sizeof extremes / sizeof extremes[0], v = fuzz_next(r);
    return v < 256 - n ? v % small : extremes[v - (256 - n)];
}

static int32_t next_i32(fuzz_reader *r, int small) {
    const unsigned v = fuzz_next(r);
    return v == 255 ? INT32_MAX : v == 254 ? INT32_MIN : v == 253 ? -1 : v == 252 ? 1 << 20 : (int32_t)(v % small);
}

/* A window bound: mostly -2..7 (-2 is invalid, -1 unbounded), else an extreme. */
static int next_bound(fuzz_reader *r) {
    const int32_t x = next_i32(r, 10);
    return x >= 0 && x < 10 ? x - 2 : x;
}

static float next_float(fuzz_reader *r, float unit) {
    const unsigned v = fuzz_next(r);
    return v < 128 ? 0.0f : v < 250 ? (float)(v - 127) * unit : v == 250 ? -1.0f : v == 251 ? NAN : INFINITY;
}

static const size_t k_head_dims[] = {0, 1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 576, 577};

static size_t next_head_dim(fuzz_reader *r) {
    return k_head_dims[fuzz_next(r) % (sizeof k_head_dims / sizeof k_head_dims[0])];
}

/* A view into a pool buffer: packed (all strides 0) half the time. */
static flashcl_tensor next_view(fuzz_reader *r) {
    flashcl_tensor t = {pick_buffer(r), next_size(r, 64), 0, 0, 0};
    if (fuzz_next(r) & 1) {
        t.stride_batch = next_size(r, 250);
        t.stride_head = next_size(r, 64);
        t.stride_row = next_size(r, 40);
    }
    return t;
}

static flashcl_matrix next_matrix(fuzz_reader *r) {
    const flashcl_tensor t = next_view(r);
    return (flashcl_matrix){t.buffer, t.offset, t.stride_batch, t.stride_head, t.stride_row};
}

/* struct_size: the caller's sizeof mostly, else 0, too small, or larger with a field set past the end. */
static size_t next_struct_size(fuzz_reader *r, size_t own, unsigned char *tail) {
    const unsigned v = fuzz_next(r);
    if (v < 240) return own;
    if (v < 244) return 0;
    if (v < 248) return own - 1 - v % 16;
    if (v < 252) return own + 8; /* tail zero: a newer header's fields left off */
    tail[v % 8] = 1;             /* a newer header's field set */
    return own + 8;
}

/* ---------------------------------------------------------------- one input */

/* A descriptor with room after it for a newer header's fields. */
typedef struct padded_desc {
    flashcl_attention_desc d;
    unsigned char tail[8];
} padded_desc;

static void read_variants(fuzz_reader *r, flashcl_attention_desc *d) {
    const unsigned f = fuzz_next(r) | fuzz_next(r) << 8;
    d->dtype = (flashcl_dtype)(fuzz_next(r) % 5); /* 4 is unknown */
    d->path = (flashcl_path)(fuzz_next(r) % 8 == 7 ? 2 : fuzz_next(r) % 2 == 1);
    d->head_dim_v = f & 1 ? next_head_dim(r) : 0;
    if (f & 2) {
        d->window = 1;
        d->window_left = next_bound(r);
        d->window_right = next_bound(r);
    }
    if (f & 4) d->softcap = next_float(r, 0.25f);
    if (f & 8) {
        d->alibi_slopes = pick_buffer(r);
        d->alibi_offset = next_size(r, 8);
        d->alibi_stride_batch = next_size(r, 10);
    }
    if (f & 16) d->sinks = pick_buffer(r), d->sinks_offset = next_size(r, 8);
    if (f & 32) d->dsinks = pick_buffer(r), d->dsinks_offset = next_size(r, 8);
    if (f & 64) {
        d->dropout_p = next_float(r, 1.0f / 128);
        d->dropout_seed = fuzz_next(r);
    }
    if (f & 128) d->bias = next_matrix(r);
    if (f & 256) d->mask = next_matrix(r);
    if (f & 512) d->block_mask = next_matrix(r), d->block_q = next_size(r, 5), d->block_k = next_size(r, 5);
    if (f & 1024) d->cu_seqlens_q = pick_buffer(r);
    if (f & 2048) d->cu_seqlens_k = pick_buffer(r);
    if (f & 4096) d->max_seqlen_q = next_size(r, 12), d->max_seqlen_k = next_size(r, 12);
    if (f & 8192) d->num_splits = next_size(r, 6);
}

static void read_desc(fuzz_reader *r, padded_desc *p) {
    memset(p, 0, sizeof *p);
    flashcl_attention_desc *d = &p->d;
    d->struct_size = next_struct_size(r, sizeof *d, p->tail);
    d->batch = next_size(r, 4);
    d->heads_q = next_size(r, 5);
    d->heads_kv = next_size(r, 4);
    d->seqlen_q = next_size(r, 8);
    d->seqlen_k = next_size(r, 8);
    d->head_dim = next_head_dim(r);
    d->causal = fuzz_next(r) & 1;
    d->scale = next_float(r, 1.0f / 64);
    read_variants(r, d);
}

/* A wait list: usually none, sometimes consistent, sometimes not. */
static void read_waits(fuzz_reader *r, cl_uint *num_wait, const cl_event **wait_list) {
    const unsigned v = fuzz_next(r) % 8;
    *num_wait = v == 5 || v == 6 ? 1 : 0;
    *wait_list = v == 6 || v == 7 ? &g_done : NULL;
}

/* ---------------------------------------------------------------- what accepted means */

/* A view of a root buffer that a call may write: [batch, heads, rows, dim] elements of elem bytes. */
typedef struct region {
    int root;
    size_t shift; /* bytes from the root's start to the view's buffer */
    flashcl_tensor t;
    size_t batch, heads, rows, dim, elem;
} region;
#define MAX_REGIONS 16

typedef struct accepted {
    region out[MAX_REGIONS];
    int count;
} accepted;

/* The last byte (+1) a resolved [batch, heads, rows, dim] view reaches, in 128 bits: no wrap. */
static unsigned __int128 view_end_bytes(const flashcl_tensor *t, size_t batch, size_t heads, size_t rows, size_t dim,
                                        size_t elem) {
    typedef unsigned __int128 u128;
    const u128 last = (u128)t->offset + (u128)(batch - 1) * t->stride_batch + (u128)(heads - 1) * t->stride_head +
                      (u128)(rows - 1) * t->stride_row + dim;
    return last * elem;
}

/* Aborts unless the accepted view lies inside its buffer; records it as written when `output`. */
static void require_inside(accepted *a, const char *name, const flashcl_tensor *t, size_t batch, size_t heads,
                           size_t rows, size_t dim, size_t elem, int output) {
    const pool_entry *e = entry_of(t->buffer);
    if (!e) {
        fprintf(stderr, "fuzz_validate: %s accepted with a buffer outside the pool\n", name);
        FAIL();
    }
    if (batch == 0 || heads == 0 || rows == 0 || dim == 0 || elem == 0) {
        fprintf(stderr, "fuzz_validate: %s accepted with an empty shape\n", name);
        FAIL();
    }
    const unsigned __int128 end = view_end_bytes(t, batch, heads, rows, dim, elem);
    if (end > e->bytes) {
        fprintf(stderr, "fuzz_validate: %s accepted but reaches byte %.0f of a %zu-byte buffer\n", name, (double)end,
                e->bytes);
        FAIL();
    }
    if (output && a->count >= MAX_REGIONS) FAIL();
    if (output) a->out[a->count++] = (region){e->root, e->shift, *t, batch, heads, rows, dim, elem};
}

/* The same for a float range [offset, offset + count). */
static void require_floats(accepted *a, const char *name, cl_mem buf, size_t offset, size_t count, int output) {
    const flashcl_tensor t = {buf, offset, 0, 0, 0};
    require_inside(a, name, &t, 1, 1, 1, count, sizeof(float), output);
}

/* A [batch|1, heads|1, rows, cols] bias or mask, with the library's packed default. */
static void require_matrix(accepted *a, const char *name, const flashcl_attention_desc *d, const flashcl_matrix *m,
                           size_t rows, size_t cols, size_t elem) {
    cl_ulong v[4];
    flashcl__matrix_strides(d, m, rows, cols, v);
    const flashcl_tensor t = {m->buffer, (size_t)v[0], (size_t)v[1], (size_t)v[2], (size_t)v[3]};
    require_inside(a, name, &t, v[1] ? d->batch : 1, v[2] ? d->heads_q : 1, rows, cols, elem, 0);
}

/* The variant buffers of an accepted call (resolved descriptor): every one the kernels may read. */
static void require_variant_buffers(accepted *a, const flashcl_attention_desc *d) {
    if (d->alibi_slopes) {
        const flashcl_tensor t = {d->alibi_slopes, d->alibi_offset, d->alibi_stride_batch, 0, 0};
        require_inside(a, "alibi_slopes", &t, d->batch, 1, 1, d->heads_q, sizeof(float), 0);
    }
    if (d->sinks) require_floats(a, "sinks", d->sinks, d->sinks_offset, d->heads_q, 0);
    if (d->bias.buffer) require_matrix(a, "bias", d, &d->bias, d->max_seqlen_q, d->max_seqlen_k, sizeof(float));
    if (d->mask.buffer) require_matrix(a, "mask", d, &d->mask, d->max_seqlen_q, d->max_seqlen_k, 1);
    if (d->block_mask.buffer)
        require_matrix(a, "block_mask", d, &d->block_mask, flashcl__block_rows(d), flashcl__block_cols(d), 1);
    if (flashcl__is_varlen(d)) {
        const flashcl_tensor q = {d->cu_seqlens_q, 0, 0, 0, 0}, k = {d->cu_seqlens_k, 0, 0, 0, 0};
        require_inside(a, "cu_seqlens_q", &q, 1, 1, 1, d->batch + 1, sizeof(cl_int), 0);
        require_inside(a, "cu_seqlens_k", &k, 1, 1, 1, d->batch + 1, sizeof(cl_int), 0);
    }
}

/* ---------------------------------------------------------------- the calls */

typedef struct call {
    int kind; /* 0 forward, 1 backward, 2 KV cache, 3 merge */
    padded_desc desc;
    flashcl_tensor views[8];
    cl_mem lse;
    size_t lse_offset;
    cl_uint num_wait;
    const cl_event *wait_list;
    /* KV cache */
    struct {
        flashcl_kv_cache c;
        unsigned char tail[8];
    } cache;
    int32_t *tables[4]; /* block_table, cache_seqlens, cache_batch_idx, cache_leftpad */
    /* merge */
    struct {
        flashcl_merge_desc m;
        unsigned char tail[8];
    } merge;
    cl_mem lse_states;
    size_t lse_states_offset;
} call;

/* A host int32 table of exactly n entries (ASan sees any read past it), or NULL when n is too big.
   Once the input runs out the entries are 0, as fuzz_next would give, without reading them one
   by one: tables of thousands of entries were most of the time per input. */
static int32_t *read_table(fuzz_reader *r, size_t n, int small) {
    if (n == 0 || n > 4096) return NULL;
    int32_t *t = calloc(n, sizeof *t);
    if (!t) FAIL();
    for (size_t i = 0; i < n && r->n; ++i) t[i] = next_i32(r, small);
    return t;
}

static void read_cache(fuzz_reader *r, call *c) {
    flashcl_kv_cache *k = &c->cache.c;
    const size_t batch = c->desc.d.batch;
    memset(&c->cache, 0, sizeof c->cache);
    k->struct_size = next_struct_size(r, sizeof *k, c->cache.tail);
    k->k = next_view(r);
    k->v = fuzz_next(r) % 4 ? next_view(r) : k->k;
    const unsigned f = fuzz_next(r);
    if (f & 1) { /* paged */
        k->num_pages = next_size(r, 6);
        k->page_size = next_size(r, 5);
        k->max_pages = next_size(r, 4);
        c->tables[0] = read_table(r, batch * k->max_pages, 7);
        k->block_table = c->tables[0];
    } else {
        k->capacity = next_size(r, 10);
        k->batch_cache = next_size(r, 4);
    }
    if (f & 2) k->cache_seqlens = c->tables[1] = read_table(r, batch, 10);
    if (f & 4) k->cache_batch_idx = c->tables[2] = read_table(r, batch, 5);
    if (f & 8) k->cache_leftpad = c->tables[3] = read_table(r, batch, 4);
    if (f & 16) {
        k->k_new = next_view(r);
        k->v_new = next_view(r);
        k->seqlen_new = next_size(r, 4);
    }
    if (f & 32) {
        k->rotary_cos = pick_buffer(r);
        k->rotary_sin = fuzz_next(r) % 4 ? pick_buffer(r) : k->rotary_cos;
        k->rotary_offset = next_size(r, 8);
        k->seqlen_ro = next_size(r, 16);
        k->rotary_dim = next_size(r, 10);
        k->rotary_interleaved = fuzz_next(r) & 1;
    }
    if (f & 64) {
        k->dtype = (flashcl_cache_dtype)(fuzz_next(r) % 4); /* 3 is unknown */
        k->k_scale = pick_buffer(r);
        k->v_scale = pick_buffer(r);
        k->scale_per_head = fuzz_next(r) & 1;
    }
}

static void read_merge(fuzz_reader *r, call *c) {
    flashcl_merge_desc *m = &c->merge.m;
    memset(&c->merge, 0, sizeof c->merge);
    m->struct_size = next_struct_size(r, sizeof *m, c->merge.tail);
    m->num_states = next_size(r, 4);
    m->batch = next_size(r, 3);
    m->heads = next_size(r, 4);
    m->seqlen = next_size(r, 5);
    m->head_dim = next_head_dim(r);
    m->dtype = (flashcl_dtype)(fuzz_next(r) % 5);
    m->o_state_stride = next_size(r, 200);
    m->lse_state_stride = next_size(r, 40);
    c->lse_states = pick_buffer(r);
    c->lse_states_offset = next_size(r, 16);
}

static void read_call(fuzz_reader *r, call *c) {
    memset(c, 0, sizeof *c);
    c->kind = (int)(fuzz_next(r) % 4);
    if (c->kind == 3)
        read_merge(r, c);
    else
        read_desc(r, &c->desc);
    const int nviews = c->kind == 1 ? 8 : c->kind == 0 ? 4 : c->kind == 2 ? 2 : 2;
    for (int i = 0; i < nviews; ++i) c->views[i] = next_view(r);
    if (fuzz_next(r) & 1) c->lse = pick_buffer(r), c->lse_offset = next_size(r, 16);
    read_waits(r, &c->num_wait, &c->wait_list);
    if (c->kind == 2) read_cache(r, c);
}

static void free_call(call *c) {
    for (int i = 0; i < 4; ++i) free(c->tables[i]);
}

/* ---------------------------------------------------------------- checks only */

static size_t rows_batch(const flashcl_attention_desc *d) { return flashcl__is_varlen(d) ? 1 : d->batch; }

static flashcl_status check_forward(const call *c, accepted *a) {
    flashcl_attention_desc d;
    flashcl_tensor v[4];
    const flashcl_tensor *t = c->views;
    flashcl__clear_error(g_ctx);
    flashcl_status st = flashcl__prepare_forward(g_ctx, &c->desc.d, &t[0], &t[1], &t[2], &t[3], c->lse, c->lse_offset,
                                                 c->num_wait, c->wait_list, &d, v);
    if (st != FLASHCL_SUCCESS) return st;
    const size_t b = rows_batch(&d), e = flashcl_dtype_size(d.dtype);
    require_inside(a, "q", &v[0], b, d.heads_q, d.seqlen_q, d.head_dim, e, 0);
    require_inside(a, "k", &v[1], b, d.heads_kv, d.seqlen_k, d.head_dim, e, 0);
    require_inside(a, "v", &v[2], b, d.heads_kv, d.seqlen_k, d.head_dim_v, e, 0);
    require_inside(a, "o", &v[3], b, d.heads_q, d.seqlen_q, d.head_dim_v, e, 1);
    if (c->lse) require_floats(a, "lse", c->lse, c->lse_offset, b * d.heads_q * d.seqlen_q, 1);
    require_variant_buffers(a, &d);
    return st;
}

static flashcl_status check_backward(const call *c, accepted *a) {
    flashcl_attention_desc d;
    flashcl_tensor v[8];
    const flashcl_tensor *const in[8] = {&c->views[0], &c->views[1], &c->views[2], &c->views[3],
                                         &c->views[4], &c->views[5], &c->views[6], &c->views[7]};
    flashcl__clear_error(g_ctx);
    flashcl_status st =
        flashcl__prepare_backward(g_ctx, &c->desc.d, in, c->lse, c->lse_offset, c->num_wait, c->wait_list, &d, v);
    if (st != FLASHCL_SUCCESS) return st;
    const size_t b = rows_batch(&d), e = flashcl_dtype_size(d.dtype), hq = d.heads_q, hk = d.heads_kv;
    static const char *const names[8] = {"q", "k", "v", "o", "dout", "dq", "dk", "dv"};
    for (int i = 0; i < 8; ++i) {
        const int q_side = i == 0 || i == 3 || i == 4 || i == 5, v_dim = i == 2 || i == 3 || i == 4 || i == 7;
        require_inside(a, names[i], &v[i], b, q_side ? hq : hk, q_side ? d.seqlen_q : d.seqlen_k,
                       v_dim ? d.head_dim_v : d.head_dim, e, i >= 5);
    }
    require_floats(a, "lse", c->lse, c->lse_offset, b * hq * d.seqlen_q, 0);
    if (d.dsinks) require_floats(a, "dsinks", d.dsinks, d.dsinks_offset, hq, 1);
    require_variant_buffers(a, &d);
    return st;
}

static flashcl_status check_kvcache(const call *c, accepted *a) {
    flashcl_kv_cache k;
    flashcl_tensor v[6];
    flashcl_status st = flashcl__check_forward_kvcache(g_ctx, &c->desc.d, &c->views[0], &c->cache.c, &c->views[1],
                                                       c->lse, c->lse_offset, c->num_wait, c->wait_list, &k, v);
    if (st != FLASHCL_SUCCESS) return st;
    flashcl_attention_desc d; /* the sizes as the call resolved them (struct_size may hide fields) */
    if (flashcl__resolve_desc(g_ctx, &c->desc.d, &d) != FLASHCL_SUCCESS) FAIL();
    flashcl__clear_error(g_ctx);
    const size_t e = flashcl_dtype_size(d.dtype), ce = k.dtype == FLASHCL_CACHE_DTYPE_SAME ? e : 1;
    require_inside(a, "q", &v[0], d.batch, d.heads_q, d.seqlen_q, d.head_dim, e, 0);
    require_inside(a, "o", &v[1], d.batch, d.heads_q, d.seqlen_q, d.head_dim_v, e, 1);
    const int paged = k.block_table != NULL, append = k.seqlen_new > 0;
    const size_t pool_batch = paged ? k.num_pages : k.batch_cache ? k.batch_cache : d.batch;
    const size_t pool_rows = paged ? k.page_size : k.capacity;
    require_inside(a, "cache->k", &v[2], pool_batch, d.heads_kv, pool_rows, d.head_dim, ce, append);
    require_inside(a, "cache->v", &v[3], pool_batch, d.heads_kv, pool_rows, d.head_dim_v, ce, append);
    if (append) {
        require_inside(a, "cache->k_new", &v[4], d.batch, d.heads_kv, k.seqlen_new, d.head_dim, e, 0);
        require_inside(a, "cache->v_new", &v[5], d.batch, d.heads_kv, k.seqlen_new, d.head_dim_v, e, 0);
    }
    if (k.rotary_cos) {
        require_floats(a, "rotary_cos", k.rotary_cos, k.rotary_offset, k.seqlen_ro * (k.rotary_dim / 2), 0);
        require_floats(a, "rotary_sin", k.rotary_sin, k.rotary_offset, k.seqlen_ro * (k.rotary_dim / 2), 0);
    }
    const size_t nscale = k.scale_per_head ? d.heads_kv : 1;
    if (k.k_scale) require_floats(a, "k_scale", k.k_scale, 0, nscale, 0);
    if (k.v_scale) require_floats(a, "v_scale", k.v_scale, 0, nscale, 0);
    if (c->lse) require_floats(a, "lse", c->lse, c->lse_offset, d.batch * d.heads_q * d.seqlen_q, 1);
    require_variant_buffers(a, &d); /* ALiBi and sinks: the others are refused with a cache */
    return st;
}

static flashcl_status check_merge(const call *c, accepted *a) {
    flashcl_tensor o;
    flashcl_status st =
        flashcl__check_merge_states(g_ctx, &c->merge.m, &c->views[0], c->lse_states, c->lse_states_offset, &c->views[1],
                                    c->lse, c->lse_offset, c->num_wait, c->wait_list, &o);
    if (st != FLASHCL_SUCCESS) return st;
    const flashcl_merge_desc *m = &c->merge.m;
    const size_t rows = m->batch * m->heads * m->seqlen;
    const size_t ostride = m->o_state_stride ? m->o_state_stride : rows * m->head_dim;
    const size_t lstride = m->lse_state_stride ? m->lse_state_stride : rows;
    const flashcl_dtype dt = m->dtype ? m->dtype : FLASHCL_DTYPE_F32;
    /* Every state, not only the first and the last. */
    flashcl_tensor s = c->views[0];
    if (!s.stride_batch && !s.stride_head && !s.stride_row)
        s = flashcl_tensor_bshd(s.buffer, m->seqlen, m->heads, m->head_dim), s.offset = c->views[0].offset;
    for (size_t i = 0; i < m->num_states; ++i) {
        flashcl_tensor si = s;
        const unsigned __int128 off = (unsigned __int128)s.offset + (unsigned __int128)i * ostride;
        if (off > SIZE_MAX) {
            fprintf(stderr, "fuzz_validate: merge accepted with state %zu at element %llu\n", i,
                    (unsigned long long)(off >> 64));
            FAIL();
        }
        si.offset = (size_t)off;
        require_inside(a, "o_states", &si, m->batch, m->heads, m->seqlen, m->head_dim, sizeof(float), 0);
        const unsigned __int128 loff = (unsigned __int128)c->lse_states_offset + (unsigned __int128)i * lstride;
        if (loff > SIZE_MAX) FAIL();
        require_floats(a, "lse_states", c->lse_states, (size_t)loff, rows, 0);
    }
    require_inside(a, "o", &o, m->batch, m->heads, m->seqlen, m->head_dim, flashcl_dtype_size(dt), 1);
    if (c->lse) require_floats(a, "lse", c->lse, c->lse_offset, rows, 1);
    return st;
}

/* ---------------------------------------------------------------- the real call, guarded */

static flashcl_status launch(const call *c) {
    const flashcl_tensor *t = c->views;
    switch (c->kind) {
    case 0:
        return flashcl_forward(g_ctx, &c->desc.d, &t[0], &t[1], &t[2], &t[3], c->lse, c->lse_offset, c->num_wait,
                               c->wait_list, NULL);
    case 1:
        return flashcl_backward(g_ctx, &c->desc.d, &t[0], &t[1], &t[2], &t[3], &t[4], c->lse, c->lse_offset, &t[5],
                                &t[6], &t[7], c->num_wait, c->wait_list, NULL);
    case 2:
        return flashcl_forward_kvcache(g_ctx, &c->desc.d, &t[0], &c->cache.c, &t[1], c->lse, c->lse_offset, c->num_wait,
                                       c->wait_list, NULL);
    default:
        return flashcl_merge_states(g_ctx, &c->merge.m, &t[0], c->lse_states, c->lse_states_offset, &t[1], c->lse,
                                    c->lse_offset, c->num_wait, c->wait_list, NULL);
    }
}

/* Marks the bytes of an output view (accepted, so inside its buffer and small). */
static void cover(const region *g, unsigned char *covered) {
    const flashcl_tensor *t = &g->t;
    for (size_t b = 0; b < g->batch; ++b)
        for (size_t h = 0; h < g->heads; ++h)
            for (size_t i = 0; i < g->rows; ++i) {
                const size_t at = t->offset + b * t->stride_batch + h * t->stride_head + i * t->stride_row;
                memset(covered + g->shift + at * g->elem, 1, g->dim * g->elem);
            }
}

/* Runs the public call and aborts if a byte outside a.out changed in any root buffer of the
   library's context; then restores every root for the next input. */
static void launch_guarded(const call *c, const accepted *a) {
    flashcl_status st = launch(c);
    if (getenv("FLASHCL_FUZZ_TRACE"))
        fprintf(stderr, "fuzz_validate: launched: %s %s\n", flashcl_status_name(st), flashcl_last_error(g_ctx));
    if ((st == FLASHCL_SUCCESS) != (*flashcl_last_error(g_ctx) == '\0')) FAIL();
    cl_command_queue q = flashcl_context_queue(g_ctx);
    if (clFinish(q) != CL_SUCCESS) FAIL();
    for (int root = 0; root < (int)ROOT_COUNT - 1; ++root) { /* the foreign buffer is never accepted */
        const size_t bytes = g_pool[root].bytes;
        unsigned char *now = malloc(bytes), *covered = calloc(bytes, 1);
        if (!now || !covered) FAIL();
        if (clEnqueueReadBuffer(q, g_pool[root].mem, CL_TRUE, 0, bytes, now, 0, NULL, NULL) != CL_SUCCESS) FAIL();
        if (st == FLASHCL_SUCCESS)
            for (int i = 0; i < a->count; ++i)
                if (a->out[i].root == root) cover(&a->out[i], covered);
        const fuzz_buffer b = {g_pool[root].mem, bytes, g_init[root]};
        fuzz_buffer_check_guard(&b, now, covered, "pool buffer", st);
        if (memcmp(now, g_init[root], bytes) != 0 &&
            clEnqueueWriteBuffer(q, g_pool[root].mem, CL_TRUE, 0, bytes, g_init[root], 0, NULL, NULL) != CL_SUCCESS)
            FAIL();
        free(now);
        free(covered);
    }
}

/* The context is made here, before libFuzzer installs its signal handlers: made later, the
   OpenCL runtime's own SIGABRT handler replaced libFuzzer's and a failed check left no artifact. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    pool_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    g_input = data;
    g_input_size = size;
    fuzz_reader r = {data, size};
    call c;
    read_call(&r, &c);
    accepted a = {.count = 0};
    static flashcl_status (*const checks[4])(const call *, accepted *) = {check_forward, check_backward, check_kvcache,
                                                                          check_merge};
    flashcl_status st = checks[c.kind](&c, &a);
    const char *msg = flashcl_last_error(g_ctx);
    if ((st == FLASHCL_SUCCESS) != (*msg == '\0') || !strcmp(flashcl_status_name(st), "UNKNOWN")) {
        fprintf(stderr, "fuzz_validate: status %d (%s) with message \"%s\"\n", (int)st, flashcl_status_name(st), msg);
        FAIL();
    }
    if (getenv("FLASHCL_FUZZ_TRACE"))
        fprintf(stderr, "fuzz_validate: call %d: %s %s\n", c.kind, flashcl_status_name(st), msg);
    if (st == FLASHCL_SUCCESS && g_launch_every && ++g_accepted % g_launch_every == 0) launch_guarded(&c, &a);
    free_call(&c);
    return 0;
}
