/* Synthetic inputs of `bench` with variants; see bench_variant_inputs.h. */
#include "bench_variant_inputs.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "random_fill.h"
#include "tool_errors.h"

/* IEEE half of a float in [-1, 1] (truncating: these are benchmark inputs). */
static uint16_t to_half(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    int exp = (int)((u >> 23) & 0xff) - 127 + 15;
    if (exp <= 0)
        return sign; /* below half's normal range: 0 is close enough here */
    return (uint16_t)(sign | (uint16_t)(exp << 10) | (uint16_t)((u & 0x7fffffu) >> 13));
}

/* n random values in [-1, 1) of `dtype`, packed as the device reads them. */
static void *random_storage(flashcl_dtype dtype, size_t n, uint64_t *state)
{
    float *f = malloc((n ? n : 1) * sizeof(float));
    if (f == NULL)
        return NULL;
    random_fill_uniform(f, n, state);
    if (dtype != FLASHCL_DTYPE_F16 && dtype != FLASHCL_DTYPE_BF16)
        return f;
    uint16_t *h = (uint16_t *)(void *)f; /* packs in place: element i is read before written */
    for (size_t i = 0; i < n; ++i) {
        uint32_t u;
        memcpy(&u, &f[i], sizeof u);
        h[i] = dtype == FLASHCL_DTYPE_F16 ? to_half(f[i]) : (uint16_t)(u >> 16);
    }
    return f;
}

static int add_buffer(flashcl_context *ctx, bv_problem *p, const char *what, size_t bytes,
                      const void *init, cl_mem *out)
{
    cl_int err = CL_SUCCESS;
    cl_mem_flags flags = CL_MEM_READ_WRITE | (init ? CL_MEM_COPY_HOST_PTR : 0);
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx), flags, bytes ? bytes : 1,
                              (void *)(uintptr_t)init, &err);
    if (err != CL_SUCCESS)
        return tool_failure("bench: cannot allocate %s (%zu bytes) on the device: %s", what, bytes,
                            flashcl_status_name(err));
    p->mem[p->mem_count++] = m;
    *out = m;
    return 0;
}

static int add_random(flashcl_context *ctx, bv_problem *p, const char *what, flashcl_dtype dtype,
                      size_t n, uint64_t *state, cl_mem *out)
{
    void *host = random_storage(dtype, n, state);
    if (host == NULL)
        return tool_failure("bench: out of host memory for %s", what);
    int rc = add_buffer(ctx, p, what, n * flashcl_dtype_size(dtype), host, out);
    free(host);
    return rc;
}

/* ALiBi's usual slopes: 2^(-8k/n) for the largest power of two n <= heads, then odd steps. */
static void standard_slopes(size_t heads, float *slopes)
{
    size_t n = 1;
    while (n * 2 <= heads)
        n *= 2;
    for (size_t k = 1; k <= n; ++k)
        slopes[k - 1] = (float)pow(2.0, -8.0 * (double)k / (double)n);
    for (size_t e = 0; n + e < heads; ++e)
        slopes[n + e] = (float)pow(2.0, -4.0 * (double)(2 * e + 1) / (double)n);
}

/* Splits `total` rows into `seqs` lengths alternating 25% above and below the mean. */
static void split_lengths(size_t total, size_t seqs, int32_t *cu, size_t *longest)
{
    size_t mean = total / seqs, quarter = mean / 4;
    cu[0] = 0;
    *longest = 0;
    for (size_t i = 0; i < seqs; ++i) {
        size_t len = i + 1 == seqs ? total - (size_t)cu[i]
                                   : (i % 2 == 0 ? mean + quarter : mean - quarter);
        cu[i + 1] = cu[i] + (int32_t)len;
        if (len > *longest)
            *longest = len;
    }
}

/* A [b, h, rows, cols] matrix of random bytes: 1 with probability `keep`. */
static unsigned char *random_bytes(size_t n, double keep, uint64_t *state)
{
    unsigned char *m = malloc(n ? n : 1);
    float *f = malloc((n ? n : 1) * sizeof(float));
    if (m == NULL || f == NULL) {
        free(m);
        free(f);
        return NULL;
    }
    random_fill_uniform(f, n, state);
    for (size_t i = 0; i < n; ++i)
        m[i] = (f[i] + 1.0f) * 0.5f < keep;
    free(f);
    return m;
}

static int add_mask(flashcl_context *ctx, bv_problem *p, const char *what, size_t n, double keep,
                    uint64_t *state, cl_mem *out)
{
    unsigned char *m = random_bytes(n, keep, state);
    if (m == NULL)
        return tool_failure("bench: out of host memory for %s", what);
    int rc = add_buffer(ctx, p, what, n, m, out);
    free(m);
    return rc;
}

/* The variant buffers (slopes, sinks, bias, masks); sizes already in d. */
static int add_variants(flashcl_context *ctx, bv_problem *p, const bench_variant_args *v,
                        bool backward, uint64_t *state)
{
    flashcl_attention_desc *d = &p->desc;
    size_t rows = d->max_seqlen_q, cols = d->max_seqlen_k, planes = d->batch * d->heads_q;
    int rc = 0;
    if (v->alibi) {
        float *slopes = malloc(d->heads_q * sizeof(float));
        if (slopes == NULL)
            return tool_failure("bench: out of host memory for the slopes");
        standard_slopes(d->heads_q, slopes);
        rc = add_buffer(ctx, p, "the ALiBi slopes", d->heads_q * sizeof(float), slopes,
                        &d->alibi_slopes);
        free(slopes);
    }
    if (rc == 0 && v->sinks)
        rc = add_random(ctx, p, "the sinks", FLASHCL_DTYPE_F32, d->heads_q, state, &d->sinks);
    if (rc == 0 && v->sinks && backward)
        rc = add_buffer(ctx, p, "dsinks", d->heads_q * sizeof(float), NULL, &d->dsinks);
    if (rc == 0 && v->bias)
        rc = add_random(ctx, p, "the bias", FLASHCL_DTYPE_F32, planes * rows * cols, state,
                        &d->bias.buffer);
    if (rc == 0 && v->mask) /* nine keys in ten attend */
        rc = add_mask(ctx, p, "the mask", planes * rows * cols, 0.9, state, &d->mask.buffer);
    if (rc == 0 && v->block_sparsity >= 0.0f) {
        d->block_q = d->block_k = v->block_size;
        size_t n = planes * ((rows + v->block_size - 1) / v->block_size) *
                   ((cols + v->block_size - 1) / v->block_size);
        rc = add_mask(ctx, p, "the block mask", n, 1.0 - (double)v->block_sparsity, state,
                      &d->block_mask.buffer);
    }
    return rc;
}

/* Dense-equivalent forward flops: 2 (QK^T) + 2 (PV) per visible pair, causal halved. */
static double forward_flops(const flashcl_attention_desc *d, const int32_t *cu_q,
                            const int32_t *cu_k)
{
    double pairs = 0.0;
    for (size_t b = 0; b < d->batch; ++b) {
        double sq = cu_q ? (double)(cu_q[b + 1] - cu_q[b]) : (double)d->seqlen_q;
        double sk = cu_k ? (double)(cu_k[b + 1] - cu_k[b]) : (double)d->seqlen_k;
        pairs += sq * sk;
    }
    double dims = (double)d->head_dim + (double)(d->head_dim_v ? d->head_dim_v : d->head_dim);
    return 2.0 * pairs * (double)d->heads_q * dims * (d->causal ? 0.5 : 1.0);
}

int bv_problem_create(flashcl_context *ctx, const flashcl_attention_desc *base,
                      const bench_variant_args *v, bool backward, bv_problem *p)
{
    memset(p, 0, sizeof *p);
    flashcl_attention_desc *d = &p->desc;
    *d = *base;
    d->dtype = v->dtype;
    d->head_dim_v = v->head_dim_v ? v->head_dim_v : base->head_dim;
    if (v->window) {
        d->window = 1;
        d->window_left = v->window_left;
        d->window_right = v->window_right;
    }
    d->softcap = v->softcap;
    d->dropout_p = v->dropout_p;
    d->dropout_seed = 1;
    d->max_seqlen_q = d->seqlen_q;
    d->max_seqlen_k = d->seqlen_k;
    size_t rows_q = d->batch * d->seqlen_q, rows_k = d->batch * d->seqlen_k;
    int32_t *cu = NULL;
    int rc = 0;
    uint64_t state = BENCH_RANDOM_SEED;
    if (v->varlen_seqs) {
        /* The same rows as the dense problem, cut into sequences. */
        cu = malloc(2 * (v->varlen_seqs + 1) * sizeof *cu);
        if (cu == NULL)
            return tool_failure("bench: out of host memory");
        split_lengths(rows_q, v->varlen_seqs, cu, &d->max_seqlen_q);
        split_lengths(rows_k, v->varlen_seqs, cu + v->varlen_seqs + 1, &d->max_seqlen_k);
        d->batch = v->varlen_seqs;
        d->seqlen_q = rows_q;
        d->seqlen_k = rows_k;
        size_t bytes = (v->varlen_seqs + 1) * sizeof *cu;
        rc = add_buffer(ctx, p, "cu_seqlens_q", bytes, cu, &d->cu_seqlens_q);
        if (rc == 0)
            rc = add_buffer(ctx, p, "cu_seqlens_k", bytes, cu + v->varlen_seqs + 1,
                            &d->cu_seqlens_k);
    }
    p->flops = forward_flops(d, cu, cu ? cu + v->varlen_seqs + 1 : NULL);
    free(cu);

    size_t hq = d->heads_q, hkv = d->heads_kv ? d->heads_kv : hq, dq = d->head_dim,
           dv = d->head_dim_v;
    flashcl_dtype st = d->dtype ? d->dtype : FLASHCL_DTYPE_F32;
    size_t es = flashcl_dtype_size(st);
    cl_mem q = NULL, k = NULL, vv = NULL, o = NULL, dout = NULL, dqb = NULL, dkb = NULL, dvb = NULL;
    if (rc == 0)
        rc = add_random(ctx, p, "Q", st, rows_q * hq * dq, &state, &q);
    if (rc == 0)
        rc = add_random(ctx, p, "K", st, rows_k * hkv * dq, &state, &k);
    if (rc == 0)
        rc = add_random(ctx, p, "V", st, rows_k * hkv * dv, &state, &vv);
    if (rc == 0)
        rc = add_buffer(ctx, p, "O", rows_q * hq * dv * es, NULL, &o);
    if (rc == 0)
        rc = add_buffer(ctx, p, "LSE", rows_q * hq * sizeof(float), NULL, &p->lse);
    if (rc == 0 && backward) {
        rc = add_random(ctx, p, "dO", st, rows_q * hq * dv, &state, &dout);
        if (rc == 0)
            rc = add_buffer(ctx, p, "dQ", rows_q * hq * dq * es, NULL, &dqb);
        if (rc == 0)
            rc = add_buffer(ctx, p, "dK", rows_k * hkv * dq * es, NULL, &dkb);
        if (rc == 0)
            rc = add_buffer(ctx, p, "dV", rows_k * hkv * dv * es, NULL, &dvb);
    }
    if (rc == 0)
        rc = add_variants(ctx, p, v, backward, &state);
    if (rc != 0) {
        bv_problem_release(p);
        return rc;
    }
    /* Packed [b, s, h, dim]; varlen views are [total, h, dim] with no batch stride. */
    size_t sb = v->varlen_seqs ? 0 : 1;
    flashcl_tensor t = {NULL, 0, 0, 0, 0};
#define VIEW(field, buf, heads, rows, dim)                                                        \
    do {                                                                                         \
        t.buffer = (buf), t.stride_head = (dim), t.stride_row = (heads) * (dim);                  \
        t.stride_batch = sb * (rows) * (heads) * (dim);                                          \
        p->field = t;                                                                            \
    } while (0)
    VIEW(q, q, hq, d->seqlen_q, dq);
    VIEW(k, k, hkv, d->seqlen_k, dq);
    VIEW(v, vv, hkv, d->seqlen_k, dv);
    VIEW(o, o, hq, d->seqlen_q, dv);
    VIEW(dout, dout, hq, d->seqlen_q, dv);
    VIEW(dq, dqb, hq, d->seqlen_q, dq);
    VIEW(dk, dkb, hkv, d->seqlen_k, dq);
    VIEW(dv, dvb, hkv, d->seqlen_k, dv);
#undef VIEW
    return 0;
}

void bv_problem_release(bv_problem *p)
{
    for (size_t i = 0; i < p->mem_count; ++i)
        clReleaseMemObject(p->mem[i]);
    p->mem_count = 0;
}
