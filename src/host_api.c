/*
 * flashcl_forward_host / flashcl_backward_host: the same attention for callers
 * holding float32 host arrays. The arrays are packed [b, s, h, d] ([total, h, d]
 * with varlen); they are converted to the descriptor's storage type on the way
 * in and back to float32 on the way out. Variant buffers (bias, masks, slopes,
 * sinks, cu_seqlens) are the descriptor's cl_mem fields, as for the device calls.
 */
#include "backend.h"
#include "float16/float16.h"

#include <stdint.h>
#include <stdlib.h>

/* One host array of a call. */
typedef struct {
    const char *name;
    const float *in; /* input data, or NULL for an output */
    float *out;      /* where an output goes */
    size_t heads, rows, dim;
    int is_lse; /* float32 [b, h, sq] (or [h, total_q]), never converted */
} host_array;

static size_t batch_of(const flashcl_attention_desc *d) { return flashcl__is_varlen(d) ? 1 : d->batch; }

static size_t count_of(const flashcl_attention_desc *d, const host_array *a) {
    return batch_of(d) * a->heads * a->rows * a->dim;
}

static size_t elem_of(const flashcl_attention_desc *d, const host_array *a) {
    return a->is_lse ? sizeof(float) : flashcl_dtype_size(d->dtype);
}

static flashcl_status create_buffers(flashcl_context *ctx, const flashcl_attention_desc *d, const host_array *arrays,
                                     int n, cl_mem *bufs) {
    for (int i = 0; i < n; ++i) {
        const size_t count = count_of(d, &arrays[i]), elem = elem_of(d, &arrays[i]);
        void *staged = NULL;
        if (arrays[i].in && !arrays[i].is_lse && d->dtype != FLASHCL_DTYPE_F32) {
            staged = malloc(count * elem);
            if (!staged)
                return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory converting %s",
                                     arrays[i].name);
            flashcl__to_storage(d->dtype, arrays[i].in, staged, count);
        }
        const void *src = staged ? staged : (const void *)arrays[i].in;
        cl_mem_flags flags = src ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_READ_WRITE;
        cl_int err = CL_SUCCESS;
        bufs[i] = clCreateBuffer(ctx->cl_ctx, flags, count * elem, (void *)src, &err);
        free(staged);
        if (err != CL_SUCCESS) {
            bufs[i] = NULL;
            if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES)
                return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_DEVICE_MEMORY, "clCreateBuffer(%s): %s (%d)",
                                     arrays[i].name, flashcl__cl_error_name(err), (int)err);
            return flashcl__fail_cl(ctx, err, "clCreateBuffer(host arrays)");
        }
    }
    return FLASHCL_SUCCESS;
}

/* Blocking reads of the outputs after `after`, converted to float32. */
static flashcl_status read_outputs(flashcl_context *ctx, const flashcl_attention_desc *d, const host_array *arrays,
                                   int n, const cl_mem *bufs, cl_event after) {
    for (int i = 0; i < n; ++i) {
        if (!arrays[i].out) continue;
        const size_t count = count_of(d, &arrays[i]), elem = elem_of(d, &arrays[i]);
        const int convert = !arrays[i].is_lse && d->dtype != FLASHCL_DTYPE_F32;
        void *raw = convert ? malloc(count * elem) : arrays[i].out;
        if (!raw)
            return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory reading %s", arrays[i].name);
        cl_int err = clEnqueueReadBuffer(ctx->queue, bufs[i], CL_TRUE, 0, count * elem, raw, 1, &after, NULL);
        if (err == CL_SUCCESS && convert) flashcl__from_storage(d->dtype, raw, arrays[i].out, count);
        if (convert) free(raw);
        if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clEnqueueReadBuffer(results)");
    }
    return FLASHCL_SUCCESS;
}

/* Packed views of the host arrays (stride_batch 0 with varlen). */
static flashcl_tensor packed_view(const flashcl_attention_desc *d, const host_array *a, cl_mem buf) {
    flashcl_tensor t = flashcl_tensor_bshd(buf, a->rows, a->heads, a->dim);
    if (flashcl__is_varlen(d)) t.stride_batch = 0;
    return t;
}

/* Host bytes of an array ([b, s, h, d] float32 or the LSE), SIZE_MAX when the product wraps. */
static size_t host_bytes_of(const flashcl_attention_desc *d, const host_array *a) {
    const size_t dims[4] = {batch_of(d), a->heads, a->rows, a->dim};
    size_t bytes = sizeof(float);
    for (int i = 0; i < 4; ++i) {
        if (dims[i] != 0 && bytes > SIZE_MAX / dims[i]) return SIZE_MAX;
        bytes *= dims[i];
    }
    return bytes;
}

/*
 * Two outputs in overlapping host memory would each be read back over the other, so one
 * result would be lost without a word: refused as the device calls refuse aliased outputs.
 * An output over an input is fine here (every input is copied to the device first).
 */
static flashcl_status check_host_outputs(flashcl_context *ctx, const flashcl_attention_desc *d,
                                         const host_array *arrays, int n) {
    for (int i = 0; i < n; ++i) {
        if (!arrays[i].out) continue;
        const uintptr_t a0 = (uintptr_t)arrays[i].out, a_len = host_bytes_of(d, &arrays[i]);
        for (int j = i + 1; j < n; ++j) {
            if (!arrays[j].out) continue;
            const uintptr_t b0 = (uintptr_t)arrays[j].out, b_len = host_bytes_of(d, &arrays[j]);
            const int overlap = a0 <= b0 ? b0 - a0 < a_len : a0 - b0 < b_len;
            if (overlap)
                return flashcl__fail(ctx, FLASHCL_ERR_ALIASED_OUTPUT,
                                     "%s and %s overlap (host output arrays of %zu and %zu bytes)", arrays[j].name,
                                     arrays[i].name, (size_t)b_len, (size_t)a_len);
        }
    }
    return FLASHCL_SUCCESS;
}

static flashcl_status run_host(flashcl_context *ctx, const flashcl_attention_desc *d, int backward,
                               const host_array *arrays, int n, int lse_index) {
    flashcl_status st = check_host_outputs(ctx, d, arrays, n);
    if (st != FLASHCL_SUCCESS) return st;
    st = flashcl__validate_variant_buffers(ctx, d, backward, 0, NULL);
    if (st != FLASHCL_SUCCESS) return st;
    cl_mem bufs[9] = {NULL};
    flashcl_tensor views[8];
    cl_event done_event = NULL;
    st = create_buffers(ctx, d, arrays, n, bufs);
    if (st == FLASHCL_SUCCESS) {
        for (int i = 0; i < n && i < 8; ++i)
            if (i != lse_index) views[i < lse_index || lse_index < 0 ? i : i - 1] = packed_view(d, &arrays[i], bufs[i]);
        cl_mem lse = lse_index >= 0 ? bufs[lse_index] : NULL;
        const flashcl__call call = {d, views, lse, 0, 0, NULL, &done_event};
        st = flashcl__dispatch(ctx, backward ? FLASHCL__BACKWARD : FLASHCL__FORWARD, &call);
    }
    if (st == FLASHCL_SUCCESS) st = read_outputs(ctx, d, arrays, n, bufs, done_event);
    if (done_event) clReleaseEvent(done_event);
    for (int i = 0; i < n; ++i)
        if (bufs[i]) clReleaseMemObject(bufs[i]);
    return st;
}

flashcl_status flashcl_forward_host(flashcl_context *ctx, const flashcl_attention_desc *desc, const float *q,
                                    const float *k, const float *v, float *o, float *lse) {
    if (!ctx) return FLASHCL_ERR_INVALID_CONTEXT;
    flashcl__clear_error(ctx);
    flashcl_attention_desc d;
    flashcl_status st = flashcl__resolve_desc(ctx, desc, &d);
    if (st != FLASHCL_SUCCESS) return st;
    const void *ptrs[4] = {q, k, v, o};
    const char *names[4] = {"q", "k", "v", "o"};
    for (int i = 0; i < 4; ++i)
        if (!ptrs[i]) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "%s is NULL", names[i]);
    /* q k v o, then the optional LSE (heads x rows, one "dim"). */
    const host_array arrays[5] = {
        {"q", q, NULL, d.heads_q, d.seqlen_q, d.head_dim, 0},    {"k", k, NULL, d.heads_kv, d.seqlen_k, d.head_dim, 0},
        {"v", v, NULL, d.heads_kv, d.seqlen_k, d.head_dim_v, 0}, {"o", NULL, o, d.heads_q, d.seqlen_q, d.head_dim_v, 0},
        {"lse", NULL, lse, d.heads_q, d.seqlen_q, 1, 1},
    };
    return run_host(ctx, &d, 0, arrays, lse ? 5 : 4, lse ? 4 : -1);
}

flashcl_status flashcl_backward_host(flashcl_context *ctx, const flashcl_attention_desc *desc, const float *q,
                                     const float *k, const float *v, const float *o, const float *dout,
                                     const float *lse, float *dq, float *dk, float *dv) {
    if (!ctx) return FLASHCL_ERR_INVALID_CONTEXT;
    flashcl__clear_error(ctx);
    flashcl_attention_desc d;
    flashcl_status st = flashcl__resolve_desc(ctx, desc, &d);
    if (st != FLASHCL_SUCCESS) return st;
    const char *names[9] = {"q", "k", "v", "o", "dout", "dq", "dk", "dv", "lse"};
    const void *ptrs[9] = {q, k, v, o, dout, dq, dk, dv, lse};
    for (int i = 0; i < 9; ++i)
        if (!ptrs[i]) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "%s is NULL", names[i]);
    const size_t hq = d.heads_q, hk = d.heads_kv, sq = d.seqlen_q, sk = d.seqlen_k, dqk = d.head_dim,
                 dv_ = d.head_dim_v;
    /* The enqueue order (q k v o dout dq dk dv), the LSE last. */
    const host_array arrays[9] = {
        {"q", q, NULL, hq, sq, dqk, 0},   {"k", k, NULL, hk, sk, dqk, 0},       {"v", v, NULL, hk, sk, dv_, 0},
        {"o", o, NULL, hq, sq, dv_, 0},   {"dout", dout, NULL, hq, sq, dv_, 0}, {"dq", NULL, dq, hq, sq, dqk, 0},
        {"dk", NULL, dk, hk, sk, dqk, 0}, {"dv", NULL, dv, hk, sk, dv_, 0},     {"lse", lse, NULL, hq, sq, 1, 1},
    };
    return run_host(ctx, &d, 1, arrays, 9, 8);
}
