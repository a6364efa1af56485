/*
 * flashcl_forward_kvcache against the double-precision reference: contiguous
 * and paged caches (pages shuffled in the pool, sizes 1 to 256), append with
 * and without rotary (GPT-NeoX and GPT-J), left padding, cache_batch_idx, GQA
 * ratios 1/4/8, query lengths 1 to 16, every storage type and both fp8
 * caches, causal, windows, softcap, ALiBi, sinks, and the split count
 * (automatic, 1, 7). Then: the appended rows are in the cache bit for bit as
 * the host encodes them; a fixed split count gives bitwise-identical rows
 * whatever the batch; flashcl_merge_states (device and host) against a direct
 * merge, rows whose every LSE is -inf included.
 *
 * The reference sees exactly what the device holds: the inputs rounded to the
 * storage type, an fp8 cache decoded from its bytes, the query rotated and
 * rounded as the library stores it. Each sequence's keys (leftpad .. end) go
 * to rv_forward as one sequence of a varlen batch (its causal mask, windows
 * and ALiBi are bottom-right per sequence, as the KV-cache call's).
 *   test_kvcache [--quick] [--case N]... [--list] [--storage bf16|f16] [--fresh-context]
 *   (--quick: the Oclgrind subset; --case: the cases of those indices, in list
 *   order, in one context (repeat it to run a sequence: the scratch and tables
 *   earlier cases leave behind); --storage: every case in that 16-bit type, as
 *   test_kvcache_mma runs them through the tensor-core decode; --fresh-context:
 *   every case, and the checks after them, in a context of its own, for
 *   Oclgrind: see main)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference_variants.h"
#include "storage_types.h"
#include "testutil.h"
#include "variant_compare.h"

#define MAXB 4

typedef struct kv_case {
    const char *name;
    flashcl_dtype dtype;
    flashcl_cache_dtype cdtype;
    size_t b, hq, hkv, sq, d, dv;
    size_t page_size;           /* 0: contiguous */
    size_t capacity;            /* rows per sequence */
    int seqlens[MAXB];          /* cache rows before the append */
    int leftpad[MAXB];          /* used when has_leftpad */
    int has_leftpad, batch_idx; /* batch_idx: contiguous cache entries in reverse order */
    size_t seqlen_new;
    size_t rotary_dim; /* 0: no rotary */
    int interleaved;
    int causal, window, wl, wr;
    float softcap;
    int alibi, sinks, scale_per_head;
    size_t num_splits;
} kv_case;

static const kv_case k_cases[] = {
    {"decode 1 key",
     FLASHCL_DTYPE_F32,
     0,
     1,
     4,
     4,
     1,
     64,
     64,
     0,
     8,
     {1},
     {0},
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0},
    {"decode sk=2 GQA4",
     FLASHCL_DTYPE_F32,
     0,
     1,
     8,
     2,
     1,
     64,
     64,
     0,
     8,
     {2},
     {0},
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0},
    {"decode 63/64/65",
     FLASHCL_DTYPE_F32,
     0,
     3,
     8,
     1,
     1,
     32,
     32,
     0,
     80,
     {63, 64, 65},
     {0},
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0},
    {"decode 1000 GQA8 splits 7",
     FLASHCL_DTYPE_F32,
     0,
     2,
     16,
     2,
     1,
     64,
     64,
     0,
     1024,
     {1000, 700},
     {0},
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     7},
    {"decode 4097 split 1",
     FLASHCL_DTYPE_F32,
     0,
     1,
     4,
     1,
     1,
     128,
     128,
     0,
     4100,
     {4097},
     {0},
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     1},
    {"paged p1", FLASHCL_DTYPE_F32, 0, 2, 4, 2, 2, 32, 32, 1, 40, {33, 17}, {0}, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
     0},
    {"paged p3 append",
     FLASHCL_DTYPE_F32,
     0,
     2,
     4,
     4,
     1,
     64,
     64,
     3,
     60,
     {20, 41},
     {0},
     0,
     0,
     1,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0},
    {"paged p16 sq5 causal",
     FLASHCL_DTYPE_F32,
     0,
     2,
     8,
     2,
     5,
     64,
     64,
     16,
     200,
     {150, 77},
     {0},
     0,
     0,
     5,
     0,
     0,
     1,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0},
    {"paged p256 sq16 causal GQA4",
     FLASHCL_DTYPE_F32,
     0,
     1,
     8,
     2,
     16,
     64,
     64,
     256,
     1024,
     {700},
     {0},
     0,
     0,
     16,
     0,
     0,
     1,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0},
    {"append + NeoX rotary",
     FLASHCL_DTYPE_F32,
     0,
     2,
     4,
     2,
     1,
     64,
     64,
     0,
     64,
     {30, 5},
     {0},
     0,
     0,
     1,
     32,
     0,
     1,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0},
    {"append + GPT-J rotary, causal sq4",
     FLASHCL_DTYPE_F32,
     0,
     2,
     4,
     2,
     4,
     64,
     64,
     16,
     96,
     {50, 11},
     {0},
     0,
     0,
     4,
     64,
     1,
     1,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0},
    {"rotary without append, not causal",
     FLASHCL_DTYPE_F32,
     0,
     1,
     4,
     4,
     2,
     64,
     64,
     0,
     64,
     {40},
     {0},
     0,
     0,
     0,
     16,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0},
    {"leftpad + batch_idx",
     FLASHCL_DTYPE_F32,
     0,
     3,
     4,
     2,
     1,
     32,
     32,
     0,
     50,
     {40, 12, 33},
     {5, 0, 30},
     1,
     1,
     1,
     0,
     0,
     1,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0},
    {"window + softcap + alibi + sinks",
     FLASHCL_DTYPE_F32,
     0,
     2,
     8,
     2,
     3,
     64,
     64,
     16,
     160,
     {130, 60},
     {0},
     0,
     0,
     3,
     0,
     0,
     1,
     1,
     40,
     0,
     20.0f,
     1,
     1,
     0,
     0},
    {"sinks split 7",
     FLASHCL_DTYPE_F32,
     0,
     1,
     4,
     1,
     1,
     64,
     64,
     0,
     600,
     {520},
     {0},
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     1,
     0,
     7},
    {"f16 append rotary",
     FLASHCL_DTYPE_F16,
     0,
     2,
     8,
     2,
     1,
     128,
     128,
     16,
     128,
     {100, 3},
     {0},
     0,
     0,
     1,
     128,
     0,
     1,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0},
    {"bf16 paged GQA8 causal",
     FLASHCL_DTYPE_BF16,
     0,
     2,
     8,
     1,
     2,
     64,
     64,
     16,
     300,
     {280, 31},
     {0},
     0,
     0,
     2,
     0,
     0,
     1,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0},
    {"d_v != d", FLASHCL_DTYPE_F32, 0, 1, 4, 2, 1, 48, 80, 0, 70, {65}, {0}, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
    /* f16 rows of 72 bytes: only 8-byte aligned (POCL's vload_half16 crashed the CPU kernel there). */
    {"f16 d=36", FLASHCL_DTYPE_F16, 0, 1, 2, 1, 2, 36, 36, 0, 40, {33}, {0}, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"fp8 e4m3 per tensor, append",
     FLASHCL_DTYPE_BF16,
     FLASHCL_CACHE_DTYPE_FP8_E4M3,
     2,
     8,
     2,
     1,
     64,
     64,
     16,
     200,
     {150, 40},
     {0},
     0,
     0,
     1,
     0,
     0,
     1,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0},
    {"fp8 e5m2 per head, rotary",
     FLASHCL_DTYPE_F16,
     FLASHCL_CACHE_DTYPE_FP8_E5M2,
     1,
     4,
     2,
     1,
     64,
     64,
     0,
     100,
     {90},
     {0},
     0,
     0,
     1,
     32,
     1,
     1,
     0,
     0,
     0,
     0,
     0,
     0,
     1,
     0},
    {"fp8 e4m3 f32 q, paged p3",
     FLASHCL_DTYPE_F32,
     FLASHCL_CACHE_DTYPE_FP8_E4M3,
     2,
     4,
     4,
     2,
     32,
     32,
     3,
     40,
     {30, 9},
     {0},
     0,
     0,
     0,
     0,
     0,
     1,
     0,
     0,
     0,
     0,
     0,
     0,
     1,
     0},
    /* Head dims the tensor-core form takes (d % 16, d_v % 32; fp8 d % 32, d_v % 64) with d_v != d. */
    {"d 64, d_v 96, splits 3",
     FLASHCL_DTYPE_F32,
     0,
     2,
     8,
     2,
     1,
     64,
     96,
     0,
     300,
     {200, 77},
     {0},
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     3},
    {"fp8 e5m2 d 64, d_v 128, paged p16",
     FLASHCL_DTYPE_F32,
     FLASHCL_CACHE_DTYPE_FP8_E5M2,
     2,
     4,
     2,
     1,
     64,
     128,
     16,
     160,
     {150, 33},
     {0},
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0},
    /* Head dims past 256 (flashcl.h said the cache call stopped there; it runs up to FLASHCL_MAX_HEAD_DIM).
       Last: --quick picks cases by index (a case inserted mid-list shifts the subset). */
    {"MLA d 576, d_v 512, paged p3, append, rotary, causal",
     FLASHCL_DTYPE_F32,
     0,
     1,
     2,
     1,
     2,
     576,
     512,
     3,
     21,
     {10},
     {0},
     0,
     0,
     2,
     64,
     0,
     1,
     0,
     0,
     0,
     0,
     0,
     0,
     0,
     0},
};
#define CASE_COUNT (sizeof k_cases / sizeof k_cases[0])

/* ---------------------------------------------------------------- fp8 on the host */

static float fp8_value(unsigned char x, int e4m3) {
    const int sign = x & 0x80, mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    const int e = (x & 0x7f) >> mbits, m = x & ((1 << mbits) - 1);
    double v;
    if (e4m3 && e == 15 && m == 7) return NAN;
    if (!e4m3 && e == 31) return m ? NAN : (sign ? -INFINITY : INFINITY);
    if (e == 0)
        v = ldexp((double)m, 1 - bias - mbits);
    else
        v = ldexp(1.0 + (double)m / (1 << mbits), e - bias);
    return (float)(sign ? -v : v);
}

/* Round to nearest even over all finite codes (a search: slow and obviously right). */
static unsigned char fp8_code(float f, int e4m3) {
    if (isnan(f)) return (unsigned char)(e4m3 ? 0x7f : 0x7e);
    const unsigned char sign = signbit(f) ? 0x80 : 0;
    const double a = fabs((double)f), max = e4m3 ? 448.0 : 57344.0;
    if (a > max) {
        if (e4m3) return (unsigned char)(sign | 0x7e);
        /* e5m2: values at or past max + half an ulp overflow to inf */
        if (a >= 61440.0) return (unsigned char)(sign | 0x7c);
        return (unsigned char)(sign | 0x7b);
    }
    int best = 0;
    double best_err = INFINITY;
    for (int c = 0; c < 0x80; ++c) {
        const float v = fp8_value((unsigned char)c, e4m3);
        if (!isfinite(v)) continue;
        const double err = fabs((double)v - a);
        if (err < best_err || (err == best_err && (c & 1) == 0)) best = c, best_err = err;
    }
    return (unsigned char)(sign | best);
}

/* ---------------------------------------------------------------- a case on the device */

typedef struct kv_run {
    kv_case c;
    size_t pool_batch, pool_rows, max_pages, num_pages;
    size_t elem; /* bytes per cache element */
    int32_t table[MAXB * 4096], seqlens[MAXB], leftpad[MAXB], bidx[MAXB];
    float *q, *knew, *vnew;         /* rounded to the storage type */
    unsigned char *kcache, *vcache; /* the pools as bytes (storage type or fp8) */
    float *cosv, *sinv, *slopes, *sinks, kscale[8], vscale[8];
    size_t seqlen_ro;
    cl_mem qb, ob, lseb, kb, vb, knb, vnb, cosb, sinb, slopeb, sinkb, ksb, vsb;
    flashcl_attention_desc d;
    flashcl_kv_cache cache;
} kv_run;

static size_t cache_elems(const kv_run *r, size_t dim) { return r->pool_batch * r->pool_rows * r->c.hkv * dim; }

/* Where row j of sequence s lives in a pool of `dim` ([pages|seqs, rows, hkv, dim], packed). */
static size_t cache_at(const kv_run *r, size_t s, size_t j, size_t h, size_t dim) {
    size_t page, row;
    if (r->c.page_size)
        page = (size_t)r->table[s * r->max_pages + j / r->c.page_size], row = j % r->c.page_size;
    else
        page = (size_t)r->bidx[s], row = j;
    return ((page * r->pool_rows + row) * r->c.hkv + h) * dim;
}

static float cache_value(const kv_run *r, const unsigned char *pool, size_t at, int is_v, size_t h) {
    if (r->c.cdtype == FLASHCL_CACHE_DTYPE_SAME) {
        float f;
        flashcl__from_storage(r->c.dtype, pool + at * r->elem, &f, 1);
        return f;
    }
    const float scale = is_v ? r->vscale[r->c.scale_per_head ? h : 0] : r->kscale[r->c.scale_per_head ? h : 0];
    return fp8_value(pool[at], r->c.cdtype == FLASHCL_CACHE_DTYPE_FP8_E4M3) * scale;
}

static void cache_store(const kv_run *r, unsigned char *pool, size_t at, float x, int is_v, size_t h) {
    if (r->c.cdtype == FLASHCL_CACHE_DTYPE_SAME) {
        flashcl__to_storage(r->c.dtype, &x, pool + at * r->elem, 1);
        return;
    }
    const float scale = is_v ? r->vscale[r->c.scale_per_head ? h : 0] : r->kscale[r->c.scale_per_head ? h : 0];
    pool[at] = fp8_code(x * (1.0f / scale), r->c.cdtype == FLASHCL_CACHE_DTYPE_FP8_E4M3);
}

/* Element c of `row` turned to position pos, in float as the kernel does it. */
static float rotate(const kv_run *r, const float *row, size_t c, long pos) {
    const size_t rd = r->c.rotary_dim, half = rd / 2;
    if (c >= rd) return row[c];
    if (r->c.interleaved) {
        const size_t i = c / 2;
        const float cs = r->cosv[pos * half + i], sn = r->sinv[pos * half + i];
        return (c & 1) ? row[c] * cs + row[c - 1] * sn : row[c] * cs - row[c + 1] * sn;
    }
    const size_t i = c < half ? c : c - half;
    const float cs = r->cosv[pos * half + i], sn = r->sinv[pos * half + i];
    return c < half ? row[c] * cs - row[c + half] * sn : row[c] * cs + row[c - half] * sn;
}

static cl_mem bytes_buffer(cl_context cl, const void *data, size_t bytes) {
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(cl, CL_MEM_READ_WRITE | (data ? CL_MEM_COPY_HOST_PTR : 0), bytes ? bytes : 4,
                              (void *)(uintptr_t)data, &err);
    REQUIRE_CL(err);
    return m;
}

static cl_mem storage_buffer(cl_context cl, flashcl_dtype t, const float *x, size_t n) {
    void *packed = malloc(n * flashcl_dtype_size(t) + 4);
    REQUIRE(packed != NULL);
    flashcl__to_storage(t, x, packed, n);
    cl_mem m = bytes_buffer(cl, packed, n * flashcl_dtype_size(t));
    free(packed);
    return m;
}

static void random_storage(tu_rng *rng, flashcl_dtype t, float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; ++i) x[i] = st_round(t, tu_rng_float(rng, lo, hi));
}

/* nan_unheld: NaN in every pool row no sequence holds (below). */
static void kv_init(kv_run *r, cl_context cl, const kv_case *c, uint64_t seed, int nan_unheld) {
    memset(r, 0, sizeof *r);
    r->c = *c;
    tu_rng rng = tu_rng_seed(seed);
    r->elem = c->cdtype == FLASHCL_CACHE_DTYPE_SAME ? flashcl_dtype_size(c->dtype) : 1;
    for (size_t s = 0; s < c->b; ++s) {
        r->seqlens[s] = c->seqlens[s];
        r->leftpad[s] = c->has_leftpad ? c->leftpad[s] : 0;
        r->bidx[s] = c->batch_idx ? (int32_t)(c->b - 1 - s) : (int32_t)s;
    }
    if (c->page_size) {
        r->max_pages = (c->capacity + c->page_size - 1) / c->page_size;
        r->num_pages = c->b * r->max_pages + 3; /* spare pages nobody owns */
        REQUIRE(c->b * r->max_pages <= sizeof r->table / sizeof r->table[0]);
        /* Pages dealt out in a shuffled order: neighbours in a sequence are far apart in the pool. */
        size_t *order = malloc(r->num_pages * sizeof *order);
        REQUIRE(order != NULL);
        for (size_t i = 0; i < r->num_pages; ++i) order[i] = i;
        for (size_t i = r->num_pages - 1; i > 0; --i) {
            size_t j = (size_t)(tu_rng_next(&rng) % (i + 1)), t = order[i];
            order[i] = order[j], order[j] = t;
        }
        for (size_t i = 0; i < c->b * r->max_pages; ++i) r->table[i] = (int32_t)order[i];
        free(order);
        r->pool_batch = r->num_pages;
        r->pool_rows = c->page_size;
    } else {
        r->pool_batch = c->b;
        r->pool_rows = c->capacity;
    }
    for (size_t h = 0; h < 8; ++h) r->kscale[h] = 0.5f + 0.125f * (float)h, r->vscale[h] = 0.25f + 0.0625f * (float)h;
    /* The pools: random values of the storage in the rows the sequences hold (leftpad .. seqlen), NaN in
       every other row (before leftpad, past the length, the rows the append writes, the pages and cache
       entries no sequence owns): a real cache may hold anything there, NaN and Inf included, and the
       output must not change (a kernel that reads such a row and masks its score still gets
       0 * NaN = NaN in P V). */
    const size_t nk = cache_elems(r, c->d), nv = cache_elems(r, c->dv);
    r->kcache = malloc(nk * r->elem + 4), r->vcache = malloc(nv * r->elem + 4);
    REQUIRE(r->kcache && r->vcache);
    for (size_t i = 0; i < nk; ++i) cache_store(r, r->kcache, i, tu_rng_float(&rng, -1, 1), 0, (i / c->d) % c->hkv);
    for (size_t i = 0; i < nv; ++i) cache_store(r, r->vcache, i, tu_rng_float(&rng, -1, 1), 1, (i / c->dv) % c->hkv);
    const size_t pool_rows = r->pool_batch * r->pool_rows;
    unsigned char *held = calloc(pool_rows, 1);
    REQUIRE(held != NULL);
    for (size_t s = 0; s < c->b; ++s)
        for (size_t j = (size_t)r->leftpad[s]; j < (size_t)r->seqlens[s]; ++j)
            held[cache_at(r, s, j, 0, 1) / c->hkv] = 1;
    for (size_t row = 0; row < pool_rows; ++row)
        for (size_t h = 0; nan_unheld && !held[row] && h < c->hkv; ++h) {
            for (size_t e = 0; e < c->d; ++e) cache_store(r, r->kcache, (row * c->hkv + h) * c->d + e, NAN, 0, h);
            for (size_t e = 0; e < c->dv; ++e) cache_store(r, r->vcache, (row * c->hkv + h) * c->dv + e, NAN, 1, h);
        }
    free(held);
    const size_t nq = c->b * c->sq * c->hq * c->d, nnew = c->b * (c->seqlen_new ? c->seqlen_new : 1) * c->hkv;
    r->q = malloc(nq * sizeof(float)), r->knew = malloc(nnew * c->d * sizeof(float));
    r->vnew = malloc(nnew * c->dv * sizeof(float));
    REQUIRE(r->q && r->knew && r->vnew);
    random_storage(&rng, c->dtype, r->q, nq, -1, 1);
    random_storage(&rng, c->dtype, r->knew, nnew * c->d, -1, 1);
    random_storage(&rng, c->dtype, r->vnew, nnew * c->dv, -1, 1);
    r->seqlen_ro = c->capacity + c->sq + 1;
    const size_t nro = r->seqlen_ro * (c->rotary_dim / 2 + 1);
    r->cosv = malloc(nro * sizeof(float)), r->sinv = malloc(nro * sizeof(float));
    REQUIRE(r->cosv && r->sinv);
    for (size_t p = 0; p < r->seqlen_ro; ++p)
        for (size_t i = 0; i < c->rotary_dim / 2; ++i) {
            const double theta = (double)p * pow(10000.0, -2.0 * (double)i / (double)c->rotary_dim);
            r->cosv[p * (c->rotary_dim / 2) + i] = (float)cos(theta);
            r->sinv[p * (c->rotary_dim / 2) + i] = (float)sin(theta);
        }
    r->slopes = malloc(c->hq * sizeof(float)), r->sinks = malloc(c->hq * sizeof(float));
    REQUIRE(r->slopes && r->sinks);
    rv_alibi_standard_slopes(c->hq, r->slopes);
    for (size_t h = 0; h < c->hq; ++h) r->sinks[h] = tu_rng_float(&rng, -1, 2);

    r->qb = storage_buffer(cl, c->dtype, r->q, nq);
    r->ob = bytes_buffer(cl, NULL, c->b * c->sq * c->hq * c->dv * flashcl_dtype_size(c->dtype));
    r->lseb = bytes_buffer(cl, NULL, c->b * c->hq * c->sq * sizeof(float));
    r->kb = bytes_buffer(cl, r->kcache, nk * r->elem);
    r->vb = bytes_buffer(cl, r->vcache, nv * r->elem);
    r->knb = storage_buffer(cl, c->dtype, r->knew, nnew * c->d);
    r->vnb = storage_buffer(cl, c->dtype, r->vnew, nnew * c->dv);
    r->cosb = bytes_buffer(cl, r->cosv, nro * sizeof(float));
    r->sinb = bytes_buffer(cl, r->sinv, nro * sizeof(float));
    r->slopeb = bytes_buffer(cl, r->slopes, c->hq * sizeof(float));
    r->sinkb = bytes_buffer(cl, r->sinks, c->hq * sizeof(float));
    r->ksb = bytes_buffer(cl, r->kscale, sizeof r->kscale);
    r->vsb = bytes_buffer(cl, r->vscale, sizeof r->vscale);

    flashcl_attention_desc *d = &r->d;
    *d = (flashcl_attention_desc)FLASHCL_ATTENTION_DESC_INIT;
    d->dtype = c->dtype;
    d->batch = c->b, d->heads_q = c->hq, d->heads_kv = c->hkv, d->seqlen_q = c->sq;
    d->head_dim = c->d, d->head_dim_v = c->dv;
    d->causal = c->causal;
    d->window = c->window, d->window_left = c->wl, d->window_right = c->wr;
    d->softcap = c->softcap;
    d->alibi_slopes = c->alibi ? r->slopeb : NULL;
    d->sinks = c->sinks ? r->sinkb : NULL;
    d->num_splits = c->num_splits;
    flashcl_kv_cache *k = &r->cache;
    *k = (flashcl_kv_cache)FLASHCL_KV_CACHE_INIT;
    k->k = flashcl_tensor_bshd(r->kb, r->pool_rows, c->hkv, c->d);
    k->v = flashcl_tensor_bshd(r->vb, r->pool_rows, c->hkv, c->dv);
    if (c->page_size) {
        k->num_pages = r->num_pages, k->page_size = c->page_size;
        k->block_table = r->table, k->max_pages = r->max_pages;
    } else {
        k->capacity = c->capacity;
        k->cache_batch_idx = c->batch_idx ? r->bidx : NULL;
    }
    k->cache_seqlens = r->seqlens;
    k->cache_leftpad = c->has_leftpad ? r->leftpad : NULL;
    if (c->seqlen_new) {
        k->k_new = flashcl_tensor_bshd(r->knb, c->seqlen_new, c->hkv, c->d);
        k->v_new = flashcl_tensor_bshd(r->vnb, c->seqlen_new, c->hkv, c->dv);
        k->seqlen_new = c->seqlen_new;
    }
    if (c->rotary_dim) {
        k->rotary_cos = r->cosb, k->rotary_sin = r->sinb;
        k->seqlen_ro = r->seqlen_ro, k->rotary_dim = c->rotary_dim, k->rotary_interleaved = c->interleaved;
    }
    k->dtype = c->cdtype;
    if (c->cdtype) k->k_scale = r->ksb, k->v_scale = r->vsb, k->scale_per_head = c->scale_per_head;
}

static void kv_free(kv_run *r) {
    cl_mem m[] = {r->qb,   r->ob,   r->lseb,   r->kb,    r->vb,  r->knb, r->vnb,
                  r->cosb, r->sinb, r->slopeb, r->sinkb, r->ksb, r->vsb};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; ++i)
        if (m[i]) clReleaseMemObject(m[i]);
    void *h[] = {r->q, r->knew, r->vnew, r->kcache, r->vcache, r->cosv, r->sinv, r->slopes, r->sinks};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; ++i) free(h[i]);
}

/* The host's cache after the append (rows rotated, then stored as the cache stores them). */
static void host_append(kv_run *r) {
    const kv_case *c = &r->c;
    for (size_t s = 0; s < c->b; ++s)
        for (size_t t = 0; t < c->seqlen_new; ++t)
            for (size_t h = 0; h < c->hkv; ++h) {
                const float *krow = r->knew + ((s * c->seqlen_new + t) * c->hkv + h) * c->d;
                const float *vrow = r->vnew + ((s * c->seqlen_new + t) * c->hkv + h) * c->dv;
                const long pos = r->seqlens[s] + (long)t; /* the cache row, as FlashAttention rotates */
                const size_t j = (size_t)r->seqlens[s] + t;
                for (size_t e = 0; e < c->d; ++e)
                    cache_store(r, r->kcache, cache_at(r, s, j, h, c->d) + e,
                                c->rotary_dim ? rotate(r, krow, e, pos) : krow[e], 0, h);
                for (size_t e = 0; e < c->dv; ++e)
                    cache_store(r, r->vcache, cache_at(r, s, j, h, c->dv) + e, vrow[e], 1, h);
            }
}

/* One unit in the last place of the cache's storage, relative. */
static double cache_ulp(const kv_run *r) {
    switch (r->c.cdtype) {
    case FLASHCL_CACHE_DTYPE_FP8_E4M3:
        return 0x1p-3;
    case FLASHCL_CACHE_DTYPE_FP8_E5M2:
        return 0x1p-2;
    default:
        return 2.0 * st_epsilon(r->c.dtype);
    }
}

/*
 * The cache after the call equals the host's after its append: untouched rows byte for byte
 * (compared as values), appended rows within one unit of the storage (the device rotates in
 * float with its own operation order, and a value on a rounding boundary may go either way).
 * Then the host takes the device's bytes, so the reference attends over exactly what the device did.
 */
static int check_cache(kv_run *r, cl_command_queue queue, const char *label) {
    const kv_case *c = &r->c;
    int ok = 1;
    for (int is_v = 0; is_v < 2; ++is_v) {
        const size_t dim = is_v ? c->dv : c->d, n = cache_elems(r, dim), bytes = n * r->elem;
        unsigned char *host = is_v ? r->vcache : r->kcache, *dev = malloc(bytes + 4);
        REQUIRE(dev != NULL);
        REQUIRE_CL(clEnqueueReadBuffer(queue, is_v ? r->vb : r->kb, CL_TRUE, 0, bytes, dev, 0, NULL, NULL));
        for (size_t e = 0; e < n && ok; ++e) {
            const size_t h = (e / dim) % c->hkv;
            const double a = cache_value(r, host, e, is_v, h), b = cache_value(r, dev, e, is_v, h);
            /* 1e-6: rotation's a*cos - b*sin may cancel, so its float error is relative to the terms (<= 1). */
            if (!(fabs(a - b) <= cache_ulp(r) * fabs(a) + 1e-6) && !(isnan(a) && isnan(b))) {
                fprintf(stderr, "FAIL %s: cache %s element %zu is %g on the device, %g on the host\n", label,
                        is_v ? "V" : "K", e, b, a);
                tu_fail_count();
                ok = 0;
            }
        }
        memcpy(host, dev, bytes);
        free(dev);
    }
    return ok;
}

/* Each sequence's keys as one varlen sequence for rv_forward, the query rotated as the library stores it. */
static int check_output(kv_run *r, cl_command_queue queue, const char *label) {
    const kv_case *c = &r->c;
    int32_t cu_q[MAXB + 1], cu_k[MAXB + 1];
    cu_q[0] = cu_k[0] = 0;
    size_t total_k = 0, max_k = 0;
    for (size_t s = 0; s < c->b; ++s) {
        const size_t len = (size_t)(r->seqlens[s] + (int)c->seqlen_new - r->leftpad[s]);
        total_k += len;
        max_k = len > max_k ? len : max_k;
        cu_q[s + 1] = (int32_t)((s + 1) * c->sq);
        cu_k[s + 1] = (int32_t)total_k;
    }
    float *q = malloc(c->b * c->sq * c->hq * c->d * sizeof(float));
    float *k = malloc((total_k + 1) * c->hkv * c->d * sizeof(float)),
          *v = malloc((total_k + 1) * c->hkv * c->dv * sizeof(float));
    REQUIRE(q && k && v);
    const int per_row = c->causal || c->window;
    for (size_t s = 0; s < c->b; ++s)
        for (size_t i = 0; i < c->sq; ++i)
            for (size_t h = 0; h < c->hq; ++h) {
                const float *row = r->q + ((s * c->sq + i) * c->hq + h) * c->d;
                const long pos = r->seqlens[s] + (per_row ? (long)i : 0);
                for (size_t e = 0; e < c->d; ++e)
                    q[((s * c->sq + i) * c->hq + h) * c->d + e] =
                        c->rotary_dim ? st_round(c->dtype, rotate(r, row, e, pos)) : row[e];
            }
    for (size_t s = 0; s < c->b; ++s)
        for (size_t j = 0; j < (size_t)(cu_k[s + 1] - cu_k[s]); ++j)
            for (size_t h = 0; h < c->hkv; ++h) {
                const size_t src = (size_t)r->leftpad[s] + j, dst = (size_t)cu_k[s] + j;
                for (size_t e = 0; e < c->d; ++e)
                    k[(dst * c->hkv + h) * c->d + e] =
                        cache_value(r, r->kcache, cache_at(r, s, src, h, c->d) + e, 0, h);
                for (size_t e = 0; e < c->dv; ++e)
                    v[(dst * c->hkv + h) * c->dv + e] =
                        cache_value(r, r->vcache, cache_at(r, s, src, h, c->dv) + e, 1, h);
            }
    rv_problem p;
    memset(&p, 0, sizeof p);
    p.batch = c->b, p.heads_q = c->hq, p.heads_kv = c->hkv;
    p.seqlen_q = c->b * c->sq, p.seqlen_k = total_k;
    p.head_dim = c->d, p.head_dim_v = c->dv;
    p.scale = 1.0 / sqrt((double)c->d);
    p.causal = c->causal;
    p.window = c->window || c->causal;
    p.window_left = c->window ? c->wl : -1;
    p.window_right = c->causal ? 0 : (c->window ? c->wr : -1);
    p.softcap = c->softcap;
    p.alibi_slopes = c->alibi ? r->slopes : NULL;
    p.sinks = c->sinks ? r->sinks : NULL;
    p.cu_q = cu_q, p.cu_k = cu_k;
    p.max_seqlen_q = c->sq, p.max_seqlen_k = max_k;
    const size_t no = c->b * c->sq * c->hq * c->dv, nl = rv_lse_count(&p);
    double *ref_o = malloc(no * sizeof(double)), *ref_lse = malloc(nl * sizeof(double));
    REQUIRE(ref_o && ref_lse);
    rv_forward(&p, q, k, v, ref_o, ref_lse);

    float *o = malloc(no * sizeof(float)), *lse = malloc(c->b * c->hq * c->sq * sizeof(float));
    void *raw = malloc(no * flashcl_dtype_size(c->dtype));
    REQUIRE(o && lse && raw);
    REQUIRE_CL(clEnqueueReadBuffer(queue, r->ob, CL_TRUE, 0, no * flashcl_dtype_size(c->dtype), raw, 0, NULL, NULL));
    flashcl__from_storage(c->dtype, raw, o, no);
    REQUIRE_CL(
        clEnqueueReadBuffer(queue, r->lseb, CL_TRUE, 0, c->b * c->hq * c->sq * sizeof(float), lse, 0, NULL, NULL));
    /* rv's varlen LSE is [hq, total_q]; the KV-cache call's [b, hq, sq]. */
    double *ref_lse_b = malloc(c->b * c->hq * c->sq * sizeof(double));
    REQUIRE(ref_lse_b != NULL);
    for (size_t s = 0; s < c->b; ++s)
        for (size_t h = 0; h < c->hq; ++h)
            for (size_t i = 0; i < c->sq; ++i)
                ref_lse_b[(s * c->hq + h) * c->sq + i] = ref_lse[rv_lse_index(&p, s, h, i)];
    int ok;
    if (c->dtype != FLASHCL_DTYPE_F32) {
        rv_problem base = p;
        base.round = c->dtype == FLASHCL_DTYPE_F16 ? st_round_f16 : st_round_bf16;
        double *base_o = malloc(no * sizeof(double)), *base_lse = malloc(nl * sizeof(double));
        REQUIRE(base_o && base_lse);
        rv_forward(&base, q, k, v, base_o, base_lse);
        ok = vcmp_lowp(label, "O", o, ref_o, base_o, no);
        free(base_o);
        free(base_lse);
    } else {
        ok = vcmp_elementwise(label, "O", o, ref_o, no, 2e-5, 1e-4);
    }
    ok &= vcmp_elementwise(label, "LSE", lse, ref_lse_b, c->b * c->hq * c->sq, 2e-5, 1e-5);
    free(q), free(k), free(v), free(ref_o), free(ref_lse), free(o), free(lse), free(raw), free(ref_lse_b);
    return ok;
}

/* --expect-mma (test_kvcache_mma, FLASHCL_DECODE_MMA=1): the decode plan of every case whose shape
   the tensor-core form takes (16-bit Q, d % 16 == 0, d_v % 32 == 0, both <= 256) must be that form,
   so that a change to its legality or to the variable's parsing cannot quietly test the lane kernel.
   The plan query describes the 16-bit cache; fp8 caches (d % 32, d_v % 64) are not checked here. */
static int expect_mma = 0;

static int check_mma_plan(flashcl_context *ctx, const kv_run *r, const char *label) {
    const kv_case *c = &r->c;
    if (!expect_mma || c->cdtype != FLASHCL_CACHE_DTYPE_SAME || c->dtype == FLASHCL_DTYPE_F32 || c->d % 16 ||
        c->dv % 32 || c->d > 256 || c->dv > 256)
        return 1;
    flashcl_attention_desc d = r->d;
    d.seqlen_k = c->capacity;
    flashcl_plan plan;
    flashcl_status st = flashcl_plan_query(ctx, &d, &plan);
    if (st != FLASHCL_SUCCESS || strstr(plan.build_options, "DECODE_MMA=1") == NULL) {
        fprintf(stderr, "FAIL %s: expected the tensor-core decode form, the plan is %s (%s)\n", label,
                st == FLASHCL_SUCCESS ? plan.kernel : flashcl_status_name(st),
                st == FLASHCL_SUCCESS ? plan.build_options : flashcl_last_error(ctx));
        tu_fail_count();
        return 0;
    }
    return 1;
}

static int run_case(flashcl_context *ctx, const kv_case *c, const char *label) {
    cl_context cl = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    kv_run r;
    kv_init(&r, cl, c, 0x5eed + (uint64_t)c->sq * 131 + c->capacity, 1);
    flashcl_tensor qv = flashcl_tensor_bshd(r.qb, c->sq, c->hq, c->d),
                   ov = flashcl_tensor_bshd(r.ob, c->sq, c->hq, c->dv);
    cl_event done = NULL;
    flashcl_status st = flashcl_forward_kvcache(ctx, &r.d, &qv, &r.cache, &ov, r.lseb, 0, 0, NULL, &done);
    int ok = CHECK_STATUS(st, FLASHCL_SUCCESS);
    if (!ok) fprintf(stderr, "  %s: %s\n", label, flashcl_last_error(ctx));
    if (ok) {
        REQUIRE_CL(clWaitForEvents(1, &done));
        clReleaseEvent(done);
        host_append(&r);
        if (c->seqlen_new) ok &= check_cache(&r, queue, label);
        ok &= check_output(&r, queue, label);
        ok &= check_mma_plan(ctx, &r, label);
    }
    kv_free(&r);
    return ok;
}

/* The device's float -> fp8 encoder (the append into an fp8 cache) on the edges of both formats:
   the largest finite values and the midpoints past them, saturation (e4m3) and overflow to
   infinity (e5m2), subnormals and their ties, infinities and NaN; byte for byte against fp8_code. */
static void check_fp8_encoding(flashcl_context *ctx) {
    static const float edges[] = {0.0f,     -0.0f,    1.0f,     -1.5f,     448.0f,    464.0f,   479.0f,   480.0f,
                                  500.0f,   -1e6f,    57344.0f, -57344.0f, 53248.0f,  55296.0f, 59392.0f, 61439.0f,
                                  61440.0f, 65536.0f, 0x1p-6f,  0x1p-9f,   0x1p-10f,  0x3p-10f, 0x1p-14f, 0x1p-16f,
                                  0x1p-17f, 0x3p-17f, 1e-9f,    INFINITY,  -INFINITY, NAN,      240.0f,   0.0625f};
    enum { D = 16, N = (sizeof edges / sizeof edges[0] + D - 1) / D };
    cl_context cl = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    float knew[N * D], q[D];
    for (size_t i = 0; i < N * D; ++i) knew[i] = i < sizeof edges / sizeof edges[0] ? edges[i] : (float)i;
    for (size_t i = 0; i < D; ++i) q[i] = 0.0f;
    for (int e4m3 = 1; e4m3 >= 0; --e4m3) {
        unsigned char pool[N * D];
        memset(pool, 0, sizeof pool);
        cl_mem kb = bytes_buffer(cl, pool, sizeof pool), vb = bytes_buffer(cl, pool, sizeof pool);
        cl_mem knb = bytes_buffer(cl, knew, sizeof knew), qb = bytes_buffer(cl, q, sizeof q);
        cl_mem ob = bytes_buffer(cl, NULL, D * sizeof(float));
        flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
        d.batch = 1, d.heads_q = 1, d.heads_kv = 1, d.seqlen_q = 1, d.head_dim = D, d.head_dim_v = D;
        flashcl_kv_cache c = FLASHCL_KV_CACHE_INIT;
        const int32_t lens[1] = {0};
        c.k = flashcl_tensor_bshd(kb, N, 1, D), c.v = flashcl_tensor_bshd(vb, N, 1, D);
        c.capacity = N, c.cache_seqlens = lens;
        c.k_new = flashcl_tensor_bshd(knb, N, 1, D), c.v_new = c.k_new, c.seqlen_new = N;
        c.dtype = e4m3 ? FLASHCL_CACHE_DTYPE_FP8_E4M3 : FLASHCL_CACHE_DTYPE_FP8_E5M2;
        flashcl_tensor qv = flashcl_tensor_bshd(qb, 1, 1, D), ov = flashcl_tensor_bshd(ob, 1, 1, D);
        int ok = CHECK_STATUS(flashcl_forward_kvcache(ctx, &d, &qv, &c, &ov, NULL, 0, 0, NULL, NULL), FLASHCL_SUCCESS);
        if (!ok) fprintf(stderr, "  fp8 encoding: %s\n", flashcl_last_error(ctx));
        REQUIRE_CL(clEnqueueReadBuffer(queue, kb, CL_TRUE, 0, sizeof pool, pool, 0, NULL, NULL));
        for (size_t i = 0; ok && i < N * D; ++i) {
            const unsigned char want = fp8_code(knew[i], e4m3);
            if (pool[i] != want) {
                fprintf(stderr, "FAIL fp8 %s encoding of %g: 0x%02x, expected 0x%02x\n", e4m3 ? "e4m3" : "e5m2",
                        (double)knew[i], pool[i], want);
                tu_fail_count();
                ok = 0;
            }
        }
        if (ok)
            printf("ok   fp8 %s encoding of %zu edge values\n", e4m3 ? "e4m3" : "e5m2", sizeof edges / sizeof edges[0]);
        clReleaseMemObject(kb), clReleaseMemObject(vb), clReleaseMemObject(knb), clReleaseMemObject(qb);
        clReleaseMemObject(ob);
    }
}

/* The decode kernels' fp8 to float conversion on every code of both formats: one key whose K row
   is zeros and whose V row holds the 256 codes, so O is V's row decoded exactly (p = 1, l = 1):
   equal to the host's fp8_value, NaN where the code is NaN. */
static void check_fp8_decoding(flashcl_context *ctx) {
    enum { D = 256 };
    cl_context cl = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    float q[D], out[D];
    unsigned char kcodes[D], vcodes[D], raw[D * 4];
    for (size_t i = 0; i < D; ++i) q[i] = 0.0f, kcodes[i] = 0, vcodes[i] = (unsigned char)i;
    /* float32 Q and O (the lane kernels), then bfloat16 (the tensor-core form where it runs, whose
       fp8 operands are halves: every fp8 value is also a bfloat16, so the output is still exact). */
    for (int t = 0; t < 2; ++t) {
        const flashcl_dtype dt = t ? FLASHCL_DTYPE_BF16 : FLASHCL_DTYPE_F32;
        const size_t es = flashcl_dtype_size(dt);
        flashcl__to_storage(dt, q, raw, D);
        for (int e4m3 = 1; e4m3 >= 0; --e4m3) {
            cl_mem kb = bytes_buffer(cl, kcodes, D), vb = bytes_buffer(cl, vcodes, D);
            cl_mem qb = bytes_buffer(cl, raw, D * es), ob = bytes_buffer(cl, NULL, D * es);
            flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
            d.batch = 1, d.heads_q = 1, d.heads_kv = 1, d.seqlen_q = 1, d.head_dim = D, d.head_dim_v = D;
            d.dtype = dt;
            flashcl_kv_cache c = FLASHCL_KV_CACHE_INIT;
            const int32_t lens[1] = {1};
            c.k = flashcl_tensor_bshd(kb, 1, 1, D), c.v = flashcl_tensor_bshd(vb, 1, 1, D);
            c.capacity = 1, c.cache_seqlens = lens;
            c.dtype = e4m3 ? FLASHCL_CACHE_DTYPE_FP8_E4M3 : FLASHCL_CACHE_DTYPE_FP8_E5M2;
            flashcl_tensor qv = flashcl_tensor_bshd(qb, 1, 1, D), ov = flashcl_tensor_bshd(ob, 1, 1, D);
            int ok =
                CHECK_STATUS(flashcl_forward_kvcache(ctx, &d, &qv, &c, &ov, NULL, 0, 0, NULL, NULL), FLASHCL_SUCCESS);
            if (!ok) fprintf(stderr, "  fp8 decoding: %s\n", flashcl_last_error(ctx));
            unsigned char got[D * 4];
            REQUIRE_CL(clEnqueueReadBuffer(queue, ob, CL_TRUE, 0, D * es, got, 0, NULL, NULL));
            flashcl__from_storage(dt, got, out, D);
            for (size_t i = 0; ok && i < D; ++i) {
                const float want = fp8_value((unsigned char)i, e4m3);
                if (isnan(want) ? !isnan(out[i]) : out[i] != want) {
                    fprintf(stderr, "FAIL fp8 %s decoding of 0x%02zx (%s Q/O): %g, expected %g\n",
                            e4m3 ? "e4m3" : "e5m2", i, t ? "bf16" : "f32", (double)out[i], (double)want);
                    tu_fail_count();
                    ok = 0;
                }
            }
            if (ok)
                printf("ok   fp8 %s decoding of all 256 codes (%s Q/O)\n", e4m3 ? "e4m3" : "e5m2", t ? "bf16" : "f32");
            clReleaseMemObject(kb), clReleaseMemObject(vb), clReleaseMemObject(qb), clReleaseMemObject(ob);
        }
    }
}

/* A fixed split count: a sequence's rows do not depend on the batch around it (bitwise). */
static void check_batch_invariance(flashcl_context *ctx) {
    cl_context cl = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    kv_case one = {
        "alone", FLASHCL_DTYPE_F32, 0, 1, 4, 2, 1, 64, 64, 0, 900, {777}, {0}, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        7};
    kv_case three = one;
    three.b = 3, three.seqlens[0] = 777, three.seqlens[1] = 30, three.seqlens[2] = 899;
    kv_run a, b;
    kv_init(&a, cl, &one, 99, 1);
    kv_init(&b, cl, &three, 99, 1);
    /* The same q and first cache sequence in both (kv_init drew them from the same seed: make them equal). */
    const size_t nq1 = one.sq * one.hq * one.d, rows1 = one.capacity * one.hkv * one.d * a.elem;
    float *qpad = malloc(nq1 * sizeof(float));
    REQUIRE(qpad != NULL);
    void *tmp = malloc(rows1 + nq1 * 4);
    REQUIRE(tmp != NULL);
    REQUIRE_CL(clEnqueueReadBuffer(queue, a.qb, CL_TRUE, 0, nq1 * 4, tmp, 0, NULL, NULL));
    REQUIRE_CL(clEnqueueWriteBuffer(queue, b.qb, CL_TRUE, 0, nq1 * 4, tmp, 0, NULL, NULL));
    REQUIRE_CL(clEnqueueReadBuffer(queue, a.kb, CL_TRUE, 0, rows1, tmp, 0, NULL, NULL));
    REQUIRE_CL(clEnqueueWriteBuffer(queue, b.kb, CL_TRUE, 0, rows1, tmp, 0, NULL, NULL));
    REQUIRE_CL(clEnqueueReadBuffer(queue, a.vb, CL_TRUE, 0, rows1, tmp, 0, NULL, NULL));
    REQUIRE_CL(clEnqueueWriteBuffer(queue, b.vb, CL_TRUE, 0, rows1, tmp, 0, NULL, NULL));
    flashcl_tensor qa = flashcl_tensor_bshd(a.qb, 1, one.hq, one.d), oa = flashcl_tensor_bshd(a.ob, 1, one.hq, one.dv);
    flashcl_tensor qb = flashcl_tensor_bshd(b.qb, 1, one.hq, one.d), ob = flashcl_tensor_bshd(b.ob, 1, one.hq, one.dv);
    CHECK_STATUS(flashcl_forward_kvcache(ctx, &a.d, &qa, &a.cache, &oa, a.lseb, 0, 0, NULL, NULL), FLASHCL_SUCCESS);
    CHECK_STATUS(flashcl_forward_kvcache(ctx, &b.d, &qb, &b.cache, &ob, b.lseb, 0, 0, NULL, NULL), FLASHCL_SUCCESS);
    float oa_h[4 * 64], ob_h[4 * 64];
    REQUIRE_CL(clEnqueueReadBuffer(queue, a.ob, CL_TRUE, 0, sizeof oa_h, oa_h, 0, NULL, NULL));
    REQUIRE_CL(clEnqueueReadBuffer(queue, b.ob, CL_TRUE, 0, sizeof ob_h, ob_h, 0, NULL, NULL));
    if (memcmp(oa_h, ob_h, sizeof oa_h) != 0) {
        fprintf(stderr, "FAIL num_splits=7: sequence 0's rows differ between batch 1 and batch 3\n");
        tu_fail_count();
    } else {
        printf("ok   num_splits=7: sequence 0 bitwise equal in batch 1 and batch 3\n");
    }
    /* Split counts past the most there can be are that most: 128 (the cap), 2^63 and SIZE_MAX
       (which a cast to long once made negative: no split, an abort or a hang) agree bitwise. */
    const size_t huge[3] = {128, (size_t)1 << 63, SIZE_MAX};
    float capped[3][4 * 64];
    for (int i = 0; i < 3; ++i) {
        a.d.num_splits = huge[i];
        CHECK_STATUS(flashcl_forward_kvcache(ctx, &a.d, &qa, &a.cache, &oa, a.lseb, 0, 0, NULL, NULL), FLASHCL_SUCCESS);
        REQUIRE_CL(clEnqueueReadBuffer(queue, a.ob, CL_TRUE, 0, sizeof capped[i], capped[i], 0, NULL, NULL));
    }
    if (memcmp(capped[0], capped[1], sizeof capped[0]) != 0 || memcmp(capped[0], capped[2], sizeof capped[0]) != 0) {
        fprintf(stderr, "FAIL num_splits 2^63 or SIZE_MAX differs from 128\n");
        tu_fail_count();
    } else {
        printf("ok   num_splits 128, 2^63 and SIZE_MAX agree bitwise\n");
    }
    free(qpad), free(tmp);
    kv_free(&a), kv_free(&b);
}

/* The device copies of the block table and lengths are written only when they change
   (src/kvcache_state.c): calls in one context with the same, then new, then earlier tables and
   lengths, and after the scratch was released, each checked against the reference, so a skipped
   write never leaves stale values. */
static void check_table_reuse(flashcl_context *ctx) {
    cl_command_queue queue = flashcl_context_queue(ctx);
    kv_case c = {
        "reuse", FLASHCL_DTYPE_F32, 0, 2, 4, 2, 1, 64, 64, 16, 96, {70, 45}, {0}, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0};
    kv_run r;
    /* Finite rows everywhere: the new table below hands sequence 0 pages that held no rows. */
    kv_init(&r, flashcl_context_cl_context(ctx), &c, 7, 0);
    int32_t first[MAXB * 8];
    const size_t entries = c.b * r.max_pages;
    memcpy(first, r.table, entries * sizeof *first);
    flashcl_tensor qv = flashcl_tensor_bshd(r.qb, c.sq, c.hq, c.d), ov = flashcl_tensor_bshd(r.ob, c.sq, c.hq, c.dv);
    static const char *const steps[] = {"first tables",       "the same again",
                                        "new lengths",        "new table",
                                        "first tables again", "the same after the scratch was released"};
    for (size_t step = 0; step < sizeof steps / sizeof steps[0]; ++step) {
        if (step == 2) r.seqlens[1] = 44;
        if (step == 3) /* sequence 0's pages in reverse order */
            for (size_t j = 0; j < r.max_pages; ++j) r.table[j] = first[r.max_pages - 1 - j];
        if (step == 4) memcpy(r.table, first, entries * sizeof *first), r.seqlens[1] = 45;
        if (step == 5) { /* new (uninitialised) slots: what the context remembered no longer holds */
            REQUIRE_CL(clFinish(queue));
            flashcl_context_release_scratch(ctx);
        }
        char label[96];
        snprintf(label, sizeof label, "table reuse: %s", steps[step]);
        /* The output is cleared first, so a call that wrote nothing cannot pass on the last one's rows. */
        const float zero = 0.0f;
        REQUIRE_CL(clEnqueueFillBuffer(queue, r.ob, &zero, sizeof zero, 0, c.b * c.sq * c.hq * c.dv * sizeof(float), 0,
                                       NULL, NULL));
        flashcl_status st = flashcl_forward_kvcache(ctx, &r.d, &qv, &r.cache, &ov, r.lseb, 0, 0, NULL, NULL);
        if (CHECK_STATUS(st, FLASHCL_SUCCESS) && check_output(&r, queue, label)) printf("ok   %s\n", label);
    }
    kv_free(&r);
}

/* Merges random partial states (some rows with every LSE -inf, one with a NaN LSE) on the device and the host. */
static void check_merge(flashcl_context *ctx) {
    cl_context cl = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    enum { N = 3, B = 2, H = 3, S = 5, D = 20 };
    const size_t rows = B * H * S, per = B * S * H * D;
    static float os[N * B * S * H * D], ls[N * B * H * S], o_dev[B * S * H * D], o_host[B * S * H * D];
    static float lse_dev[B * H * S], lse_host[B * H * S];
    tu_rng rng = tu_rng_seed(4242);
    for (size_t i = 0; i < N * per; ++i) os[i] = tu_rng_float(&rng, -2, 2);
    for (size_t i = 0; i < N * rows; ++i) ls[i] = tu_rng_float(&rng, -3, 3);
    for (size_t s = 0; s < N; ++s) ls[s * rows + 4] = -INFINITY;  /* row 4: every state empty */
    ls[1 * rows + 7] = -INFINITY;                                 /* row 7: one state empty */
    for (size_t c = 0; c < D; ++c) os[1 * per + 7 * D + c] = NAN; /* ... holding garbage */
    /* LSE row 9 (b 0, h 1, s 4; its O row starts at element 260): one state's LSE is NaN, a fault
       upstream, which must come out as NaN rather than as an empty row (O 0, LSE -inf). */
    enum { NAN_ROW = 9, NAN_O = ((0 * S + 4) * H + 1) * D };
    ls[2 * rows + NAN_ROW] = NAN;
    flashcl_merge_desc m = FLASHCL_MERGE_DESC_INIT;
    m.num_states = N, m.batch = B, m.heads = H, m.seqlen = S, m.head_dim = D;
    cl_mem osb = tu_buffer_create(cl, N * per, os), lsb = tu_buffer_create(cl, N * rows, ls);
    cl_mem ob = tu_buffer_create(cl, per, NULL), lb = tu_buffer_create(cl, rows, NULL);
    flashcl_tensor osv = flashcl_tensor_bshd(osb, S, H, D), ov = flashcl_tensor_bshd(ob, S, H, D);
    CHECK_STATUS(flashcl_merge_states(ctx, &m, &osv, lsb, 0, &ov, lb, 0, 0, NULL, NULL), FLASHCL_SUCCESS);
    tu_buffer_read(queue, ob, per, o_dev, NULL);
    tu_buffer_read(queue, lb, rows, lse_dev, NULL);
    CHECK_STATUS(flashcl_merge_states_host(&m, os, ls, o_host, lse_host), FLASHCL_SUCCESS);
    /* A direct merge in double: rows are [b, h, s] for LSE, [b, s, h, d] for O. */
    double ref_o[B * S * H * D], ref_l[B * H * S];
    for (size_t b = 0; b < B; ++b)
        for (size_t h = 0; h < H; ++h)
            for (size_t i = 0; i < S; ++i) {
                const size_t lr = (b * H + h) * S + i, orow = ((b * S + i) * H + h) * D;
                double total = 0.0;
                for (size_t s = 0; s < N; ++s) total += exp((double)ls[s * rows + lr]);
                ref_l[lr] = total > 0 ? log(total) : -INFINITY;
                for (size_t c = 0; c < D; ++c) {
                    double acc = 0.0;
                    for (size_t s = 0; s < N; ++s)
                        if (ls[s * rows + lr] != -INFINITY) acc += exp(ls[s * rows + lr]) * os[s * per + orow + c];
                    ref_o[orow + c] = total > 0 ? acc / total : 0.0;
                }
            }
    int ok = isnan(lse_dev[NAN_ROW]) && isnan(lse_host[NAN_ROW]);
    for (size_t c = 0; c < D; ++c) ok &= isnan(o_dev[NAN_O + c]) && isnan(o_host[NAN_O + c]);
    if (!ok) {
        fprintf(stderr, "FAIL merge_states: a NaN LSE did not give a NaN row (device and host)\n");
        tu_fail_count();
    }
    /* That row checked, the comparisons below take it as 0 everywhere. */
    lse_dev[NAN_ROW] = lse_host[NAN_ROW] = 0.0f, ref_l[NAN_ROW] = 0.0;
    for (size_t c = 0; c < D; ++c) o_dev[NAN_O + c] = o_host[NAN_O + c] = 0.0f, ref_o[NAN_O + c] = 0.0;
    ok &= vcmp_elementwise("merge_states", "O", o_dev, ref_o, per, 1e-6, 1e-5);
    ok &= vcmp_elementwise("merge_states", "LSE", lse_dev, ref_l, rows, 1e-6, 1e-6);
    ok &= vcmp_elementwise("merge_states_host", "O", o_host, ref_o, per, 1e-6, 1e-5);
    ok &= vcmp_elementwise("merge_states_host", "LSE", lse_host, ref_l, rows, 1e-6, 1e-6);
    if (ok) printf("ok   merge_states (device and host), all -inf rows and a NaN LSE included\n");
    clReleaseMemObject(osb), clReleaseMemObject(lsb), clReleaseMemObject(ob), clReleaseMemObject(lb);
}

/* What --quick runs (the Oclgrind tests): GQA packing, a forced split count
 * with sinks and the merge, a paged append, rotary, every score variant with
 * sinks, both fp8 formats and the MLA head dims (576/512: a fraction of a second
 * per Oclgrind run): each kernel and each runtime branch once. */
static int is_quick_case(size_t i) {
    static const size_t quick[] = {1, 6, 10, 13, 14, 18, 19, 24};
    for (size_t k = 0; k < sizeof quick / sizeof quick[0]; ++k)
        if (quick[k] == i) return 1;
    return 0;
}

int main(int argc, char **argv) {
    unsigned char chosen[CASE_COUNT] = {0}; /* --case (repeatable) */
    int any_chosen = 0, quick = 0, fresh = 0;
    int storage = -1; /* --storage: every case's Q, O (and same-typed cache) in that type */
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--case") == 0 && i + 1 < argc) {
            const long n = strtol(argv[++i], NULL, 10);
            if (n < 0 || (size_t)n >= CASE_COUNT) {
                fprintf(stderr, "test_kvcache: --case %s: the cases are 0 to %zu (--list)\n", argv[i], CASE_COUNT - 1);
                return 2;
            }
            chosen[n] = 1, any_chosen = 1;
        } else if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--fresh-context") == 0)
            fresh = 1;
        else if (strcmp(argv[i], "--expect-mma") == 0)
            expect_mma = 1;
        else if (strcmp(argv[i], "--storage") == 0 && i + 1 < argc && strcmp(argv[i + 1], "bf16") == 0)
            storage = FLASHCL_DTYPE_BF16, ++i;
        else if (strcmp(argv[i], "--storage") == 0 && i + 1 < argc && strcmp(argv[i + 1], "f16") == 0)
            storage = FLASHCL_DTYPE_F16, ++i;
        else if (strcmp(argv[i], "--list") == 0) {
            for (size_t c = 0; c < CASE_COUNT; ++c) printf("%4zu %s\n", c, k_cases[c].name);
            return 0;
        } else {
            fprintf(stderr, "usage: test_kvcache [--quick] [--case N]... [--list] [--storage bf16|f16] [--expect-mma] "
                            "[--fresh-context]\n");
            return 2;
        }
    }
    /* --fresh-context (the Oclgrind runs): Oclgrind's --uninitialized plugin (21.10, and its source
       since) is never told of a buffer's release. It gives a global buffer a shadow (all
       uninitialised) at its first kernel launch only if none is held under the buffer's index, and
       Oclgrind hands released buffers' indices (oldest first) to the buffers created next. A scratch
       buffer the context re-creates larger (the rotated query: 8192 bytes for case 10, 9216 for the
       MLA case) thus keeps the old, smaller shadow: stores past its end are dropped from it and loads
       there read as uninitialised, so the decode kernels' reads of the query's last 256 floats,
       which rotate_q had written, were reported (O was right). Each oclgrind::Context (one per
       cl_context) has its own plugins: a new context starts with no shadows. */
    flashcl_context *ctx = tu_context_create();
    size_t ran = 0, passed = 0;
    for (size_t i = 0; i < CASE_COUNT; ++i) {
        if (any_chosen && !chosen[i]) continue;
        if (quick && !is_quick_case(i)) continue;
        char label[160];
        kv_case c = k_cases[i];
        if (storage >= 0) c.dtype = (flashcl_dtype)storage;
        snprintf(label, sizeof label, "case %zu %s%s", i, c.name,
                 storage < 0                     ? ""
                 : storage == FLASHCL_DTYPE_BF16 ? " (bf16)"
                                                 : " (f16)");
        if (fresh && ran > 0) flashcl_context_destroy(ctx), ctx = tu_context_create();
        ++ran;
        if (run_case(ctx, &c, label)) {
            ++passed;
            printf("ok   %s\n", label);
        }
    }
    if (!any_chosen) {
        if (fresh && ran > 0) flashcl_context_destroy(ctx), ctx = tu_context_create();
        if (!quick) check_batch_invariance(ctx);
        check_fp8_encoding(ctx);
        check_fp8_decoding(ctx);
        check_table_reuse(ctx);
        check_merge(ctx);
    }
    printf("%zu/%zu KV-cache cases passed\n", passed, ran);
    flashcl_context_destroy(ctx);
    return tu_finish("test_kvcache");
}
