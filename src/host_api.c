/* flashcl_forward_host: the same attention for callers holding host arrays. */
#include "internal.h"

flashcl_status flashcl_forward_host(flashcl_context *ctx, const flashcl_attention_desc *desc, flashcl_path path,
                                    const float *q, const float *k, const float *v, float *o, float *lse) {
    if (!ctx) return FLASHCL_ERR_INVALID_CONTEXT;
    flashcl__clear_error(ctx);
    flashcl_attention_desc d;
    flashcl_status st = flashcl__resolve_desc(ctx, desc, &d);
    if (st != FLASHCL_SUCCESS) return st;
    const char *names[4] = {"q", "k", "v", "o"};
    const void *ptrs[4] = {q, k, v, o};
    for (int i = 0; i < 4; ++i)
        if (!ptrs[i]) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "%s is NULL", names[i]);
    if (path != FLASHCL_PATH_FLASH && path != FLASHCL_PATH_STANDARD)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_PATH, "path: unknown value %d", (int)path);

    const size_t nq = d.batch * d.seqlen_q * d.heads_q * d.head_dim;
    const size_t nk = d.batch * d.seqlen_k * d.heads_kv * d.head_dim;
    const size_t nl = d.batch * d.heads_q * d.seqlen_q;
    const size_t counts[5] = {nq, nk, nk, nq, nl};
    cl_mem bufs[5] = {NULL, NULL, NULL, NULL, NULL};
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < 5 && err == CL_SUCCESS; ++i) {
        if (i == 4 && !lse) break;
        cl_mem_flags flags = i < 3 ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_WRITE_ONLY;
        bufs[i] = clCreateBuffer(ctx->cl_ctx, flags, counts[i] * sizeof(float), i < 3 ? (void *)ptrs[i] : NULL, &err);
    }
    if (err != CL_SUCCESS) {
        st = flashcl__fail(ctx, err == CL_MEM_OBJECT_ALLOCATION_FAILURE ? FLASHCL_ERR_OUT_OF_DEVICE_MEMORY : (flashcl_status)err,
                           "clCreateBuffer for the host arrays failed: %s (%d)", flashcl__cl_error_name(err), (int)err);
        goto done;
    }
    flashcl_tensor views[4] = {
        flashcl_tensor_bshd(bufs[0], d.seqlen_q, d.heads_q, d.head_dim),
        flashcl_tensor_bshd(bufs[1], d.seqlen_k, d.heads_kv, d.head_dim),
        flashcl_tensor_bshd(bufs[2], d.seqlen_k, d.heads_kv, d.head_dim),
        flashcl_tensor_bshd(bufs[3], d.seqlen_q, d.heads_q, d.head_dim),
    };
    cl_event done_event = NULL;
    st = path == FLASHCL_PATH_FLASH ? flashcl__enqueue_flash(ctx, &d, views, bufs[4], 0, 0, NULL, &done_event)
                                    : flashcl__enqueue_standard(ctx, &d, views, bufs[4], 0, 0, NULL, &done_event);
    if (st != FLASHCL_SUCCESS) goto done;
    /* Blocking reads after the kernel's event: the results are on the host when we return. */
    err = clEnqueueReadBuffer(ctx->queue, bufs[3], CL_TRUE, 0, nq * sizeof(float), o, 1, &done_event, NULL);
    if (err == CL_SUCCESS && lse)
        err = clEnqueueReadBuffer(ctx->queue, bufs[4], CL_TRUE, 0, nl * sizeof(float), lse, 1, &done_event, NULL);
    clReleaseEvent(done_event);
    if (err != CL_SUCCESS) st = flashcl__fail_cl(ctx, err, "clEnqueueReadBuffer(results)");
done:
    for (int i = 0; i < 5; ++i)
        if (bufs[i]) clReleaseMemObject(bufs[i]);
    return st;
}

flashcl_status flashcl_backward_host(flashcl_context *ctx, const flashcl_attention_desc *desc, flashcl_path path,
                                     const float *q, const float *k, const float *v, const float *o, const float *dout,
                                     const float *lse, float *dq, float *dk, float *dv) {
    if (!ctx) return FLASHCL_ERR_INVALID_CONTEXT;
    flashcl__clear_error(ctx);
    flashcl_attention_desc d;
    flashcl_status st = flashcl__resolve_desc(ctx, desc, &d);
    if (st != FLASHCL_SUCCESS) return st;
    /* q k v o dout dq dk dv lse: inputs first, then outputs. */
    const char *names[9] = {"q", "k", "v", "o", "dout", "dq", "dk", "dv", "lse"};
    const void *ptrs[9] = {q, k, v, o, dout, dq, dk, dv, lse};
    for (int i = 0; i < 9; ++i)
        if (!ptrs[i]) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "%s is NULL", names[i]);
    if (path != FLASHCL_PATH_FLASH && path != FLASHCL_PATH_STANDARD)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_PATH, "path: unknown value %d", (int)path);

    const size_t nq = d.batch * d.seqlen_q * d.heads_q * d.head_dim;
    const size_t nk = d.batch * d.seqlen_k * d.heads_kv * d.head_dim;
    const size_t nl = d.batch * d.heads_q * d.seqlen_q;
    const size_t counts[9] = {nq, nk, nk, nq, nq, nq, nk, nk, nl};
    const int is_input[9] = {1, 1, 1, 1, 1, 0, 0, 0, 1};
    cl_mem bufs[9] = {NULL};
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < 9 && err == CL_SUCCESS; ++i) {
        cl_mem_flags flags = is_input[i] ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_WRITE_ONLY;
        bufs[i] = clCreateBuffer(ctx->cl_ctx, flags, counts[i] * sizeof(float), is_input[i] ? (void *)ptrs[i] : NULL,
                                 &err);
    }
    if (err != CL_SUCCESS) {
        st = flashcl__fail(ctx, err == CL_MEM_OBJECT_ALLOCATION_FAILURE ? FLASHCL_ERR_OUT_OF_DEVICE_MEMORY : (flashcl_status)err,
                           "clCreateBuffer for the host arrays failed: %s (%d)", flashcl__cl_error_name(err), (int)err);
        goto done;
    }
    flashcl_tensor views[8];
    for (int i = 0; i < 8; ++i) {
        int q_side = counts[i] == nq && (i == 0 || i == 3 || i == 4 || i == 5);
        views[i] = q_side ? flashcl_tensor_bshd(bufs[i], d.seqlen_q, d.heads_q, d.head_dim)
                          : flashcl_tensor_bshd(bufs[i], d.seqlen_k, d.heads_kv, d.head_dim);
    }
    cl_event done_event = NULL;
    st = path == FLASHCL_PATH_FLASH ? flashcl__enqueue_flash_backward(ctx, &d, views, bufs[8], 0, 0, NULL, &done_event)
                                    : flashcl__enqueue_standard_backward(ctx, &d, views, bufs[8], 0, 0, NULL, &done_event);
    if (st != FLASHCL_SUCCESS) goto done;
    float *outs[3] = {dq, dk, dv};
    for (int i = 0; i < 3 && err == CL_SUCCESS; ++i)
        err = clEnqueueReadBuffer(ctx->queue, bufs[5 + i], CL_TRUE, 0, counts[5 + i] * sizeof(float), outs[i], 1,
                                  &done_event, NULL);
    clReleaseEvent(done_event);
    if (err != CL_SUCCESS) st = flashcl__fail_cl(ctx, err, "clEnqueueReadBuffer(gradients)");
done:
    for (int i = 0; i < 9; ++i)
        if (bufs[i]) clReleaseMemObject(bufs[i]);
    return st;
}
