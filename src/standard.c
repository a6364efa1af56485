/* The standard attention path: S = scale*QK^T, softmax, O = PV through global
   memory, in three launches chained by events (so out-of-order queues work). */
#include "internal.h"

#include <string.h>

static cl_int set_args(cl_kernel k, cl_uint *arg, size_t n, const size_t *sizes, const void *const *values) {
    cl_int err = CL_SUCCESS;
    for (size_t i = 0; i < n && err == CL_SUCCESS; ++i) err = clSetKernelArg(k, (*arg)++, sizes[i], values[i]);
    return err;
}

flashcl_status flashcl__enqueue_standard(flashcl_context *ctx, const flashcl_attention_desc *d,
                                         const flashcl_tensor *views, cl_mem lse, size_t lse_offset,
                                         cl_uint num_wait, const cl_event *wait_list, cl_event *event) {
    flashcl_status st = flashcl__require_plain(ctx, d, "standard path");
    if (st != FLASHCL_SUCCESS) return st;
    const flashcl__standard_plan *plan = NULL;
    st = flashcl__plan_standard(ctx, &plan);
    if (st != FLASHCL_SUCCESS) return st;
    size_t rows = d->batch * d->heads_q * d->seqlen_q;
    if (d->seqlen_k > SIZE_MAX / sizeof(float) / rows)
        return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_DEVICE_MEMORY, "standard path: S/P scratch size overflows size_t");
    cl_mem s = NULL;
    st = flashcl__scratch(ctx, FLASHCL__SCRATCH_SCORES, rows * d->seqlen_k * sizeof(float),
                          "standard path: S/P (batch*heads_q*seqlen_q*seqlen_k floats)", &s);
    if (st != FLASHCL_SUCCESS) return st;

    cl_int sq = (cl_int)d->seqlen_q, sk = (cl_int)d->seqlen_k, dim = (cl_int)d->head_dim, hq = (cl_int)d->heads_q;
    cl_int group = (cl_int)(d->heads_q / d->heads_kv), causal = d->causal != 0, write_lse = lse != NULL;
    cl_float scale = d->scale;
    cl_mem lse_buf = lse ? lse : views[0].buffer;
    cl_ulong lse_off = lse_offset;

    cl_uint arg = 0;
    cl_int err = flashcl__set_view_args(plan->scores, &arg, &views[0]);
    if (err == CL_SUCCESS) err = flashcl__set_view_args(plan->scores, &arg, &views[1]);
    if (err == CL_SUCCESS) {
        const size_t sz[] = {sizeof s, sizeof sq, sizeof sk, sizeof dim, sizeof hq, sizeof group, sizeof scale, sizeof causal};
        const void *val[] = {&s, &sq, &sk, &dim, &hq, &group, &scale, &causal};
        err = set_args(plan->scores, &arg, 8, sz, val);
    }
    if (err == CL_SUCCESS) {
        arg = 0;
        const size_t sz[] = {sizeof s, sizeof sk, sizeof lse_buf, sizeof lse_off, sizeof write_lse};
        const void *val[] = {&s, &sk, &lse_buf, &lse_off, &write_lse};
        err = set_args(plan->softmax, &arg, 5, sz, val);
    }
    if (err == CL_SUCCESS) {
        arg = 0;
        err = clSetKernelArg(plan->pv, arg++, sizeof s, &s);
        if (err == CL_SUCCESS) err = flashcl__set_view_args(plan->pv, &arg, &views[2]);
        if (err == CL_SUCCESS) err = flashcl__set_view_args(plan->pv, &arg, &views[3]);
        cl_float one = 1.0f;
        const size_t sz[] = {sizeof sq, sizeof sk, sizeof dim, sizeof hq, sizeof group, sizeof one};
        const void *val[] = {&sq, &sk, &dim, &hq, &group, &one};
        if (err == CL_SUCCESS) err = set_args(plan->pv, &arg, 6, sz, val);
    }
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clSetKernelArg(standard)");

    /* The first launch waits for the caller's events and for the previous user of the scratch. */
    flashcl__waits waits;
    st = flashcl__scratch_waits(ctx, num_wait, wait_list, &waits);
    if (st != FLASHCL_SUCCESS) return st;

    const size_t tile = (size_t)plan->tile, rts = (size_t)(plan->tile / plan->wpt);
    const size_t z = d->batch * d->heads_q;
    size_t g1[3] = {(d->seqlen_k + tile - 1) / tile * rts, (d->seqlen_q + tile - 1) / tile * rts, z};
    size_t l1[3] = {rts, rts, 1};
    size_t g2[1] = {rows * (size_t)plan->softmax_wg};
    size_t l2[1] = {(size_t)plan->softmax_wg};
    size_t g3[3] = {(d->head_dim + tile - 1) / tile * rts, (d->seqlen_q + tile - 1) / tile * rts, z};

    cl_event e1 = NULL, e2 = NULL, e3 = NULL;
    err = clEnqueueNDRangeKernel(ctx->queue, plan->scores, 3, NULL, g1, l1, waits.count, waits.count ? waits.events : NULL, &e1);
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clEnqueueNDRangeKernel(std_scores)");
    err = clEnqueueNDRangeKernel(ctx->queue, plan->softmax, 1, NULL, g2, l2, 1, &e1, &e2);
    clReleaseEvent(e1);
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clEnqueueNDRangeKernel(std_softmax)");
    err = clEnqueueNDRangeKernel(ctx->queue, plan->pv, 3, NULL, g3, l1, 1, &e2, &e3);
    clReleaseEvent(e2);
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clEnqueueNDRangeKernel(std_pv)");

    flashcl__scratch_used_by(ctx, e3);
    if (event) *event = e3;
    else clReleaseEvent(e3);
    return FLASHCL_SUCCESS;
}
