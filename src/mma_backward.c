/*
 * The NVIDIA tensor-core backward (cl/flash_bwd_mma.cl): D = rowsum(dO * O),
 * then dK/dV per key block and dQ per query block, chained by events like the
 * portable backward (src/backward.c). Taken only where the forward's fast path
 * would be (flashcl__mma_covers) and all eight views are 16-byte aligned.
 */
#include "internal.h"

#define MMA_BWD_BLOCK 64 /* 16 * MMA_WARPS: keys per dK/dV work-group, rows per dQ work-group */

enum { MQ, MK, MV, MO, MDO, MDQ, MDK, MDV };

static cl_int set_views(cl_kernel k, cl_uint *arg, const flashcl_tensor *views, const int *which, int n) {
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < n && err == CL_SUCCESS; ++i) err = flashcl__set_view_args(k, arg, &views[which[i]]);
    return err;
}

int flashcl__mma_try_backward(flashcl_context *ctx, const flashcl_attention_desc *d, const flashcl_tensor *views,
                              cl_mem lse, size_t lse_offset, cl_uint num_wait, const cl_event *wait_list,
                              cl_event *event, flashcl_status *st) {
    char why[256];
    if (!flashcl__mma_covers(ctx, d, why, sizeof why) || !flashcl__mma_views_aligned(views, 8)) return 0;
    cl_kernel kern[3];
    *st = flashcl__mma_backward_kernels(ctx, d, kern);
    if (*st != FLASHCL_SUCCESS) return 1;
    cl_mem dsum = NULL;
    *st = flashcl__scratch(ctx, FLASHCL__SCRATCH_ROWS, d->batch * d->heads_q * d->seqlen_q * sizeof(float),
                           "backward: D = rowsum(dO*O)", &dsum);
    if (*st != FLASHCL_SUCCESS) return 1;

    cl_int sq = (cl_int)d->seqlen_q, sk = (cl_int)d->seqlen_k, hq = (cl_int)d->heads_q;
    cl_int group = (cl_int)(d->heads_q / d->heads_kv), causal = d->causal != 0;
    cl_float scale = d->scale, scale_log2 = (cl_float)(d->scale * FLASHCL__LOG2E);
    cl_ulong lse_off = lse_offset;
    cl_uint arg = 0;
    const int dot_views[] = {MDO, MO};
    cl_int err = set_views(kern[0], &arg, views, dot_views, 2);
    if (err == CL_SUCCESS) err = clSetKernelArg(kern[0], arg++, sizeof dsum, &dsum);
    if (err == CL_SUCCESS) err = clSetKernelArg(kern[0], arg++, sizeof sq, &sq);
    if (err == CL_SUCCESS) err = clSetKernelArg(kern[0], arg++, sizeof hq, &hq);
    const int in_views[] = {MQ, MK, MV, MDO}, dkdv_out[] = {MDK, MDV}, dq_out[] = {MDQ};
    for (int m = 1; m < 3 && err == CL_SUCCESS; ++m) {
        cl_kernel k = kern[m];
        arg = 0;
        err = set_views(k, &arg, views, in_views, 4);
        if (err == CL_SUCCESS) err = clSetKernelArg(k, arg++, sizeof lse, &lse);
        if (err == CL_SUCCESS) err = clSetKernelArg(k, arg++, sizeof lse_off, &lse_off);
        if (err == CL_SUCCESS) err = clSetKernelArg(k, arg++, sizeof dsum, &dsum);
        if (err == CL_SUCCESS) err = m == 1 ? set_views(k, &arg, views, dkdv_out, 2) : set_views(k, &arg, views, dq_out, 1);
        const size_t sz[] = {sizeof sq, sizeof sk, sizeof hq, sizeof group, sizeof scale_log2, sizeof scale, sizeof causal};
        const void *val[] = {&sq, &sk, &hq, &group, &scale_log2, &scale, &causal};
        for (int i = 0; i < 7 && err == CL_SUCCESS; ++i) err = clSetKernelArg(k, arg++, sz[i], val[i]);
    }
    if (err != CL_SUCCESS) {
        *st = flashcl__fail_cl(ctx, err, "clSetKernelArg(flash_bwd_mma)");
        return 1;
    }

    flashcl__waits waits;
    *st = flashcl__scratch_waits(ctx, num_wait, wait_list, &waits);
    if (*st != FLASHCL_SUCCESS) return 1;
    const size_t wg = 32 * MMA_BWD_BLOCK / 16, bl = MMA_BWD_BLOCK, dot_wg = 64;
    size_t dot_local[3] = {dot_wg, 1, 1}, main_local[3] = {wg, 1, 1};
    size_t g_dot[3] = {(d->seqlen_q + dot_wg - 1) / dot_wg * dot_wg, d->heads_q, d->batch};
    size_t g_keys[3] = {(d->seqlen_k + bl - 1) / bl * wg, d->heads_kv, d->batch};
    size_t g_rows[3] = {(d->seqlen_q + bl - 1) / bl * wg, d->heads_q, d->batch};
    cl_event e_dot = NULL, e_dkdv = NULL, e_dq = NULL, last = NULL;
    err = clEnqueueNDRangeKernel(ctx->queue, kern[0], 3, NULL, g_dot, dot_local, waits.count,
                                 waits.count ? waits.events : NULL, &e_dot);
    if (err != CL_SUCCESS) {
        *st = flashcl__fail_cl(ctx, err, "clEnqueueNDRangeKernel(flash_bwd_mma_dot)");
        return 1;
    }
    err = clEnqueueNDRangeKernel(ctx->queue, kern[1], 3, NULL, g_keys, main_local, 1, &e_dot, &e_dkdv);
    if (err != CL_SUCCESS) {
        clReleaseEvent(e_dot);
        *st = flashcl__fail_cl(ctx, err, "clEnqueueNDRangeKernel(flash_bwd_mma_dkdv)");
        return 1;
    }
    err = clEnqueueNDRangeKernel(ctx->queue, kern[2], 3, NULL, g_rows, main_local, 1, &e_dot, &e_dq);
    clReleaseEvent(e_dot);
    if (err != CL_SUCCESS) {
        clReleaseEvent(e_dkdv);
        *st = flashcl__fail_cl(ctx, err, "clEnqueueNDRangeKernel(flash_bwd_mma_dq)");
        return 1;
    }
    cl_event both[2] = {e_dkdv, e_dq};
    err = clEnqueueMarkerWithWaitList(ctx->queue, 2, both, &last);
    clReleaseEvent(e_dkdv);
    clReleaseEvent(e_dq);
    if (err != CL_SUCCESS) {
        *st = flashcl__fail_cl(ctx, err, "clEnqueueMarkerWithWaitList(flash_bwd_mma)");
        return 1;
    }
    flashcl__scratch_used_by(ctx, last);
    if (event) *event = last;
    else clReleaseEvent(last);
    *st = FLASHCL_SUCCESS;
    return 1;
}
