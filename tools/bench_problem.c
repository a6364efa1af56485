/* The device tensors of one `bench` path; see bench_problem.h. */
#include "bench_problem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tool_errors.h"

static const char *const tensor_names[BENCH_TENSORS] = {"Q", "K", "V", "O", "LSE", "dO", "dQ", "dK", "dV"};

/* The tensors with random values, in the order they are drawn. */
static const int random_tensors[] = {BENCH_Q, BENCH_K, BENCH_V, BENCH_DOUT};

size_t bench_tensor_bytes(size_t a, size_t b, size_t c, size_t d, size_t elem) {
    size_t dims[5] = {a, b, c, d, elem};
    size_t bytes = 1;
    for (int i = 0; i < 5; ++i) {
        if (dims[i] != 0 && bytes > SIZE_MAX / dims[i]) return 0;
        bytes *= dims[i];
    }
    return bytes;
}

/* IEEE half of a float in [-1, 1] (truncating: these are benchmark inputs). */
static uint16_t to_half(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    int exp = (int)((u >> 23) & 0xff) - 127 + 15;
    if (exp <= 0) return sign; /* below half's normal range: 0 is close enough here */
    return (uint16_t)(sign | (uint16_t)(exp << 10) | (uint16_t)((u & 0x7fffffu) >> 13));
}

/* Packs n floats into the storage type in place: element i is read before it is written. */
static void to_storage(flashcl_dtype dtype, float *f, size_t n) {
    if (dtype != FLASHCL_DTYPE_F16 && dtype != FLASHCL_DTYPE_BF16) return;
    uint16_t *h = (uint16_t *)(void *)f;
    for (size_t i = 0; i < n; ++i) {
        uint32_t u;
        memcpy(&u, &f[i], sizeof u);
        h[i] = dtype == FLASHCL_DTYPE_F16 ? to_half(f[i]) : (uint16_t)(u >> 16);
    }
}

/* The byte size of every tensor; false when one overflows size_t. */
static bool tensor_sizes(const flashcl_attention_desc *d, bool training, size_t bytes[BENCH_TENSORS]) {
    size_t es = flashcl_dtype_size(d->dtype ? d->dtype : FLASHCL_DTYPE_F32);
    size_t hkv = d->heads_kv ? d->heads_kv : d->heads_q, dv = d->head_dim_v;
    bytes[BENCH_Q] = bench_tensor_bytes(d->batch, d->seqlen_q, d->heads_q, d->head_dim, es);
    bytes[BENCH_K] = bench_tensor_bytes(d->batch, d->seqlen_k, hkv, d->head_dim, es);
    bytes[BENCH_V] = bench_tensor_bytes(d->batch, d->seqlen_k, hkv, dv, es);
    bytes[BENCH_O] = bench_tensor_bytes(d->batch, d->seqlen_q, d->heads_q, dv, es);
    bytes[BENCH_LSE] = training ? bench_tensor_bytes(d->batch, d->seqlen_q, d->heads_q, 1, sizeof(float)) : 0;
    bytes[BENCH_DOUT] = training ? bytes[BENCH_O] : 0;
    bytes[BENCH_DQ] = training ? bytes[BENCH_Q] : 0;
    bytes[BENCH_DK] = training ? bytes[BENCH_K] : 0;
    bytes[BENCH_DV] = training ? bytes[BENCH_V] : 0;
    for (int t = 0; t < BENCH_TENSORS; ++t)
        if (bytes[t] == 0 && (t <= BENCH_O || training)) return false;
    return true;
}

/* Refuses (one line) a tensor larger than the device's largest allocation, before time goes into filling it. */
static int check_fits(flashcl_context *ctx, size_t largest) {
    cl_ulong max_alloc = 0;
    if (clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc,
                        NULL) == CL_SUCCESS &&
        largest > max_alloc)
        return tool_failure("bench: a %zu-byte input is larger than the device's largest buffer (%llu bytes)", largest,
                            (unsigned long long)max_alloc);
    return 0;
}

/* Q, K, V and dO filled with random values through staging, the others left for the calls to write. */
static int create_tensors(flashcl_context *ctx, flashcl_dtype dtype, uint64_t *state, bench_problem *p) {
    size_t largest = 0;
    for (int t = 0; t < BENCH_TENSORS; ++t) largest = p->bytes[t] > largest ? p->bytes[t] : largest;
    int rc = check_fits(ctx, largest);
    if (rc != 0) return rc;
    /* Floats first, packed in place to 16 bits for f16/bf16: room for largest / es floats. */
    size_t es = flashcl_dtype_size(dtype);
    float *staging = malloc(largest / es * sizeof(float));
    if (staging == NULL) return tool_failure("bench: out of host memory for the inputs");
    cl_context cl = flashcl_context_cl_context(ctx);
    bool filled[BENCH_TENSORS] = {false};
    for (size_t i = 0; i < sizeof random_tensors / sizeof random_tensors[0] && rc == 0; ++i) {
        int t = random_tensors[i];
        if (p->bytes[t] == 0) continue;
        random_fill_uniform(staging, p->bytes[t] / es, state);
        to_storage(dtype, staging, p->bytes[t] / es);
        cl_int err = CL_SUCCESS;
        p->mem[t] = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, p->bytes[t], staging, &err);
        if (err != CL_SUCCESS)
            rc = tool_failure("bench: cannot allocate %s (%zu bytes) on the device: %s", tensor_names[t], p->bytes[t],
                              flashcl_status_name(err));
        filled[t] = true;
    }
    free(staging);
    for (int t = 0; t < BENCH_TENSORS && rc == 0; ++t) {
        if (filled[t] || p->bytes[t] == 0) continue;
        cl_int err = CL_SUCCESS;
        p->mem[t] = clCreateBuffer(cl, CL_MEM_READ_WRITE, p->bytes[t], NULL, &err);
        if (err != CL_SUCCESS)
            rc = tool_failure("bench: cannot allocate %s (%zu bytes) on the device: %s", tensor_names[t], p->bytes[t],
                              flashcl_status_name(err));
    }
    return rc;
}

/* Dense-equivalent forward FLOPs: 2 (QK^T) + 2 (PV) per visible pair of each sequence, causal halved. */
static double forward_flops(const flashcl_attention_desc *d, const variant_arrays *a) {
    const int32_t *cu_q = a->cu_q.bytes, *cu_k = a->cu_k.bytes;
    double pairs = 0.0;
    for (size_t b = 0; b < d->batch; ++b) {
        double sq = cu_q ? (double)(cu_q[b + 1] - cu_q[b]) : (double)d->seqlen_q;
        double sk = cu_k ? (double)(cu_k[b + 1] - cu_k[b]) : (double)d->seqlen_k;
        pairs += sq * sk;
    }
    double dims = (double)d->head_dim + (double)d->head_dim_v;
    return 2.0 * pairs * (double)d->heads_q * dims * (d->causal ? 0.5 : 1.0);
}

/* Packed [b, s, h, dim]; varlen views are [total, h, dim] with no batch stride. */
static flashcl_tensor view(cl_mem buffer, bool varlen, size_t rows, size_t heads, size_t dim) {
    flashcl_tensor t = {buffer, 0, varlen ? 0 : rows * heads * dim, dim, heads * dim};
    return t;
}

int bench_problem_create(flashcl_context *ctx, const bench_problem_spec *spec, bench_problem *p) {
    memset(p, 0, sizeof *p);
    p->ctx = ctx;
    variant_options plain;
    variant_defaults(&plain);
    const variant_options *v = spec->variants ? spec->variants : &plain;
    flashcl_attention_desc *d = &p->desc;
    *d = *spec->base;
    d->path = spec->path;
    d->dtype = v->dtype;
    d->head_dim_v = v->head_dim_v ? v->head_dim_v : d->head_dim;
    if (!tensor_sizes(d, spec->training, p->bytes))
        return tool_usage_error("bench: the tensors of this shape are too large to address");

    uint64_t state = VARIANT_RANDOM_SEED;
    int rc = create_tensors(ctx, d->dtype ? d->dtype : FLASHCL_DTYPE_F32, &state, p);
    bool varlen = variant_is_varlen(v);
    if (varlen) {
        /* The same rows as the dense problem, cut into sequences. */
        d->seqlen_q *= d->batch;
        d->seqlen_k *= d->batch;
        d->batch = 1;
    }
    variant_arrays arrays;
    memset(&arrays, 0, sizeof arrays);
    if (rc == 0) rc = variant_arrays_prepare(v, d, &state, &arrays);
    if (rc == 0) rc = variant_buffers_attach(ctx, &arrays, spec->training && v->sinks != NULL, d, &p->variants);
    if (rc == 0) p->forward_flops = forward_flops(d, &arrays);
    variant_arrays_free(&arrays);
    if (rc != 0) {
        bench_problem_release(p);
        return rc;
    }
    size_t hkv = d->heads_kv ? d->heads_kv : d->heads_q, dq = d->head_dim, dv = d->head_dim_v;
    p->q = view(p->mem[BENCH_Q], varlen, d->seqlen_q, d->heads_q, dq);
    p->k = view(p->mem[BENCH_K], varlen, d->seqlen_k, hkv, dq);
    p->v = view(p->mem[BENCH_V], varlen, d->seqlen_k, hkv, dv);
    p->o = view(p->mem[BENCH_O], varlen, d->seqlen_q, d->heads_q, dv);
    p->dout = view(p->mem[BENCH_DOUT], varlen, d->seqlen_q, d->heads_q, dv);
    p->dq = view(p->mem[BENCH_DQ], varlen, d->seqlen_q, d->heads_q, dq);
    p->dk = view(p->mem[BENCH_DK], varlen, d->seqlen_k, hkv, dq);
    p->dv = view(p->mem[BENCH_DV], varlen, d->seqlen_k, hkv, dv);
    return 0;
}

size_t bench_problem_outputs(const bench_problem *p, bench_output out[BENCH_MAX_OUTPUTS]) {
    if (p->mem[BENCH_DQ] == NULL) {
        out[0] = (bench_output){"o", p->mem[BENCH_O], p->bytes[BENCH_O]};
        return 1;
    }
    out[0] = (bench_output){"dq", p->mem[BENCH_DQ], p->bytes[BENCH_DQ]};
    out[1] = (bench_output){"dk", p->mem[BENCH_DK], p->bytes[BENCH_DK]};
    out[2] = (bench_output){"dv", p->mem[BENCH_DV], p->bytes[BENCH_DV]};
    return 3;
}

void bench_problem_release(bench_problem *p) {
    for (int t = 0; t < BENCH_TENSORS; ++t) {
        if (p->mem[t] != NULL) clReleaseMemObject(p->mem[t]);
        p->mem[t] = NULL;
    }
    variant_buffers_release(&p->variants);
}
