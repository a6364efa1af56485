/* The device tensors of one `bench` path; see bench_problem.h. */
#include "bench_problem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "storage_codec.h"
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

/*
 * The element count and byte size of every tensor; false when one overflows
 * size_t. K and V are kv_elem bytes an element (a KV cache's storage).
 */
static bool tensor_sizes(const flashcl_attention_desc *d, bool training, size_t kv_elem, size_t counts[BENCH_TENSORS],
                         size_t bytes[BENCH_TENSORS]) {
    size_t es = flashcl_dtype_size(d->dtype ? d->dtype : FLASHCL_DTYPE_F32);
    size_t hkv = d->heads_kv ? d->heads_kv : d->heads_q, dv = d->head_dim_v;
    counts[BENCH_Q] = bench_tensor_bytes(d->batch, d->seqlen_q, d->heads_q, d->head_dim, 1);
    counts[BENCH_K] = bench_tensor_bytes(d->batch, d->seqlen_k, hkv, d->head_dim, 1);
    counts[BENCH_V] = bench_tensor_bytes(d->batch, d->seqlen_k, hkv, dv, 1);
    counts[BENCH_O] = bench_tensor_bytes(d->batch, d->seqlen_q, d->heads_q, dv, 1);
    counts[BENCH_LSE] = training ? bench_tensor_bytes(d->batch, d->seqlen_q, d->heads_q, 1, 1) : 0;
    counts[BENCH_DOUT] = training ? counts[BENCH_O] : 0;
    counts[BENCH_DQ] = training ? counts[BENCH_Q] : 0;
    counts[BENCH_DK] = training ? counts[BENCH_K] : 0;
    counts[BENCH_DV] = training ? counts[BENCH_V] : 0;
    for (int t = 0; t < BENCH_TENSORS; ++t) {
        size_t elem = t == BENCH_LSE ? sizeof(float) : (t == BENCH_K || t == BENCH_V) ? kv_elem : es;
        bytes[t] = bench_tensor_bytes(counts[t], 1, 1, 1, elem);
        if (bytes[t] == 0 && (t <= BENCH_O || training)) return false;
    }
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

/*
 * Q, K, V and dO filled with random values through staging, the others left
 * for the calls to write. With a cache, K and V go into it instead (the
 * same values: the draws do not depend on where they are stored).
 */
static int create_tensors(flashcl_context *ctx, const bench_problem_spec *spec, const size_t counts[BENCH_TENSORS],
                          uint64_t *state, bench_problem *p) {
    const flashcl_dtype dtype = p->desc.dtype ? p->desc.dtype : FLASHCL_DTYPE_F32;
    size_t largest = 0, most = 0;
    for (int t = 0; t < BENCH_TENSORS; ++t) {
        largest = p->bytes[t] > largest ? p->bytes[t] : largest;
        most = counts[t] > most ? counts[t] : most;
    }
    int rc = check_fits(ctx, largest);
    if (rc != 0) return rc;
    /* Floats first, packed in place to 16 bits for f16/bf16. */
    float *staging = malloc(most * sizeof(float));
    if (staging == NULL) return tool_failure("bench: out of host memory for the inputs");
    cl_context cl = flashcl_context_cl_context(ctx);
    bool filled[BENCH_TENSORS] = {false};
    for (size_t i = 0; i < sizeof random_tensors / sizeof random_tensors[0] && rc == 0; ++i) {
        int t = random_tensors[i];
        if (p->bytes[t] == 0) continue;
        random_fill_uniform(staging, counts[t], state);
        filled[t] = true;
        if (p->has_cache && (t == BENCH_K || t == BENCH_V)) {
            rc = bench_cache_upload(ctx, spec->cache, &p->desc, t == BENCH_V, staging, &p->cache);
            continue;
        }
        flashcl__to_storage(dtype, staging, staging, counts[t]);
        cl_int err = CL_SUCCESS;
        p->mem[t] = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, p->bytes[t], staging, &err);
        if (err != CL_SUCCESS)
            rc = tool_failure("bench: cannot allocate %s (%zu bytes) on the device: %s", tensor_names[t], p->bytes[t],
                              flashcl_status_name(err));
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
    d->num_splits = spec->base->num_splits;
    p->has_cache = spec->cache != NULL;
    size_t counts[BENCH_TENSORS];
    size_t kv_elem = p->has_cache ? bench_cache_elem(spec->cache, d->dtype)
                                  : flashcl_dtype_size(d->dtype ? d->dtype : FLASHCL_DTYPE_F32);
    if (!tensor_sizes(d, spec->training, kv_elem, counts, p->bytes))
        return tool_usage_error("bench: the tensors of this shape are too large to address");

    int rc = p->has_cache ? bench_cache_layout(spec->cache, d, &p->cache) : 0;
    uint64_t state = VARIANT_RANDOM_SEED;
    if (rc == 0) rc = create_tensors(ctx, spec, counts, &state, p);
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
    const flashcl_dtype dtype = p->desc.dtype ? p->desc.dtype : FLASHCL_DTYPE_F32;
    const size_t es = flashcl_dtype_size(dtype);
    if (p->mem[BENCH_DQ] == NULL) {
        out[0] = (bench_output){"o", p->mem[BENCH_O], p->bytes[BENCH_O], dtype, p->bytes[BENCH_O] / es};
        return 1;
    }
    out[0] = (bench_output){"dq", p->mem[BENCH_DQ], p->bytes[BENCH_DQ], dtype, p->bytes[BENCH_DQ] / es};
    out[1] = (bench_output){"dk", p->mem[BENCH_DK], p->bytes[BENCH_DK], dtype, p->bytes[BENCH_DK] / es};
    out[2] = (bench_output){"dv", p->mem[BENCH_DV], p->bytes[BENCH_DV], dtype, p->bytes[BENCH_DV] / es};
    return 3;
}

void bench_problem_release(bench_problem *p) {
    for (int t = 0; t < BENCH_TENSORS; ++t) {
        if (p->mem[t] != NULL) clReleaseMemObject(p->mem[t]);
        p->mem[t] = NULL;
    }
    variant_buffers_release(&p->variants);
    if (p->has_cache) bench_cache_release(&p->cache);
    p->has_cache = false;
}
