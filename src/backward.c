/* flashcl_backward: checks, then D = rowsum(dO*O), dK/dV, dQ — three launches chained by events,
   dK/dV and dQ from whichever kernel family the plan chose (src/plan_backward.c). */
#include "internal.h"
#include "cpu_family.h"

#include <stdio.h>
#include <string.h>

#define LOG2E 1.4426950408889634

/* The eight tensor views of a backward call, in the order below. */
enum { BQ, BK, BV, BO, BDO, BDQ, BDK, BDV, BACKWARD_VIEWS };

/* Resolves the descriptor and checks all nine tensors (LSE required). */
static flashcl_status prepare_backward(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                         const flashcl_tensor *const in[BACKWARD_VIEWS], cl_mem lse, size_t lse_offset,
                                         cl_uint num_wait, const cl_event *wait_list, flashcl_attention_desc *d,
                                         flashcl_tensor views[BACKWARD_VIEWS]) {
    flashcl_status st = flashcl__resolve_desc(ctx, desc, d);
    if (st != FLASHCL_SUCCESS) return st;
    const size_t hq = d->heads_q, hk = d->heads_kv, sq = d->seqlen_q, sk = d->seqlen_k;
    const flashcl__view_spec specs[BACKWARD_VIEWS] = {
        {"q", in[BQ], hq, sq, 0},     {"k", in[BK], hk, sk, 0},   {"v", in[BV], hk, sk, 0},
        {"o", in[BO], hq, sq, 0},     {"dout", in[BDO], hq, sq, 0}, {"dq", in[BDQ], hq, sq, 1},
        {"dk", in[BDK], hk, sk, 1},   {"dv", in[BDV], hk, sk, 1},
    };
    const flashcl__lse_spec lse_spec = {lse, lse_offset, 1, 0};
    return flashcl__validate_views(ctx, d, specs, BACKWARD_VIEWS, &lse_spec, num_wait, wait_list, views);
}

/* Sets `count` view argument groups, then the rest from a list. */
static cl_int set_views(cl_kernel k, cl_uint *arg, const flashcl_tensor *views, const int *which, int count) {
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < count && err == CL_SUCCESS; ++i) err = flashcl__set_view_args(k, arg, &views[which[i]]);
    return err;
}

flashcl_status flashcl__enqueue_flash_backward(flashcl_context *ctx, const flashcl_attention_desc *d,
                                               const flashcl_tensor *views, cl_mem lse,
                                               size_t lse_offset, cl_uint num_wait, const cl_event *wait_list,
                                               cl_event *event) {
    const flashcl__backward_plan *plan = NULL;
    flashcl_status st = flashcl__plan_backward(ctx, d, &plan);
    if (st != FLASHCL_SUCCESS) return st;
    if (flashcl__is_cpu_backward_plan(plan))
        return flashcl__enqueue_backward_cpu(ctx, plan, d, views, lse, lse_offset, num_wait, wait_list, event);
    const size_t rows = d->batch * d->heads_q * d->seqlen_q;
    cl_mem dsum = NULL;
    st = flashcl__scratch(ctx, FLASHCL__SCRATCH_ROWS, rows * sizeof(float), "backward: D = rowsum(dO*O)", &dsum);
    if (st != FLASHCL_SUCCESS) return st;

    cl_int sq = (cl_int)d->seqlen_q, sk = (cl_int)d->seqlen_k, hq = (cl_int)d->heads_q;
    cl_int group = (cl_int)(d->heads_q / d->heads_kv), causal = d->causal != 0;
    cl_float scale = d->scale, scale_log2 = (cl_float)(d->scale * LOG2E);
    cl_ulong lse_off = lse_offset;

    cl_uint arg = 0;
    const int dot_views[] = {BDO, BO};
    cl_int err = set_views(plan->dot, &arg, views, dot_views, 2);
    if (err == CL_SUCCESS) err = clSetKernelArg(plan->dot, arg++, sizeof dsum, &dsum);
    if (err == CL_SUCCESS) err = clSetKernelArg(plan->dot, arg++, sizeof sq, &sq);
    if (err == CL_SUCCESS) err = clSetKernelArg(plan->dot, arg++, sizeof hq, &hq);
    /* dK/dV and dQ share their argument list apart from the outputs. */
    const int dkdv_out[] = {BDK, BDV}, dq_out[] = {BDQ};
    cl_kernel mains[2] = {plan->dkdv, plan->dq};
    for (int m = 0; m < 2 && err == CL_SUCCESS; ++m) {
        cl_kernel k = mains[m];
        arg = 0;
        const int in_views[] = {BQ, BK, BV, BDO};
        err = set_views(k, &arg, views, in_views, 4);
        if (err == CL_SUCCESS) err = clSetKernelArg(k, arg++, sizeof lse, &lse);
        if (err == CL_SUCCESS) err = clSetKernelArg(k, arg++, sizeof lse_off, &lse_off);
        if (err == CL_SUCCESS) err = clSetKernelArg(k, arg++, sizeof dsum, &dsum);
        if (err == CL_SUCCESS) err = m == 0 ? set_views(k, &arg, views, dkdv_out, 2) : set_views(k, &arg, views, dq_out, 1);
        const size_t sz[] = {sizeof sq, sizeof sk, sizeof hq, sizeof group, sizeof scale_log2, sizeof scale, sizeof causal};
        const void *val[] = {&sq, &sk, &hq, &group, &scale_log2, &scale, &causal};
        for (int i = 0; i < 7 && err == CL_SUCCESS; ++i) err = clSetKernelArg(k, arg++, sz[i], val[i]);
    }
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clSetKernelArg(flash backward)");

    flashcl__waits waits;
    st = flashcl__scratch_waits(ctx, num_wait, wait_list, &waits);
    if (st != FLASHCL_SUCCESS) return st;
    /* Either family: one work-group per block of keys (dK/dV) or query rows (dQ), main_wg
       work-items each (a block's rows for the row kernels, 16x16 for the tiles). */
    const size_t r = plan->dot_wg, wg = plan->main_wg, kb = plan->keys_per_group, qb = plan->rows_per_group;
    size_t dot_local[3] = {r, 1, 1}, main_local[3] = {wg, 1, 1};
    size_t g_dot[3] = {(d->seqlen_q + r - 1) / r * r, d->heads_q, d->batch};
    size_t g_keys[3] = {(d->seqlen_k + kb - 1) / kb * wg, d->heads_kv, d->batch};
    size_t g_rows[3] = {(d->seqlen_q + qb - 1) / qb * wg, d->heads_q, d->batch};
    const char *dkdv_name = plan->tiles ? "flash_bwd_dkdv_tiles" : "flash_bwd_dkdv";
    const char *dq_name = plan->tiles ? "flash_bwd_dq_tiles" : "flash_bwd_dq";
    char what[96];
    cl_event e_dot = NULL, e_dkdv = NULL, e_dq = NULL;
    err = clEnqueueNDRangeKernel(ctx->queue, plan->dot, 3, NULL, g_dot, dot_local, waits.count,
                                 waits.count ? waits.events : NULL, &e_dot);
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clEnqueueNDRangeKernel(flash_bwd_dot)");
    err = clEnqueueNDRangeKernel(ctx->queue, plan->dkdv, 3, NULL, g_keys, main_local, 1, &e_dot, &e_dkdv);
    if (err != CL_SUCCESS) {
        clReleaseEvent(e_dot);
        snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s)", dkdv_name);
        return flashcl__fail_cl(ctx, err, what);
    }
    /* dQ needs only D: on an out-of-order queue it may overlap dK/dV; the call's event covers both. */
    err = clEnqueueNDRangeKernel(ctx->queue, plan->dq, 3, NULL, g_rows, main_local, 1, &e_dot, &e_dq);
    clReleaseEvent(e_dot);
    if (err != CL_SUCCESS) {
        clReleaseEvent(e_dkdv);
        snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s)", dq_name);
        return flashcl__fail_cl(ctx, err, what);
    }
    cl_event both[2] = {e_dkdv, e_dq}, last = NULL;
    err = clEnqueueMarkerWithWaitList(ctx->queue, 2, both, &last);
    clReleaseEvent(e_dkdv);
    clReleaseEvent(e_dq);
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clEnqueueMarkerWithWaitList(backward)");
    flashcl__scratch_used_by(ctx, last);
    if (event) *event = last;
    else clReleaseEvent(last);
    return FLASHCL_SUCCESS;
}

static flashcl_status run_backward(flashcl__enqueue_fn enqueue, flashcl_context *ctx, const flashcl_attention_desc *desc,
                                   const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                   const flashcl_tensor *o, const flashcl_tensor *dout, cl_mem lse, size_t lse_offset,
                                   const flashcl_tensor *dq, const flashcl_tensor *dk, const flashcl_tensor *dv,
                                   cl_uint num_wait, const cl_event *wait_list, cl_event *event) {
    if (!ctx) return FLASHCL_ERR_INVALID_CONTEXT;
    flashcl__clear_error(ctx);
    if (event) *event = NULL;
    const flashcl_tensor *const in[BACKWARD_VIEWS] = {q, k, v, o, dout, dq, dk, dv};
    flashcl_attention_desc d;
    flashcl_tensor views[BACKWARD_VIEWS];
    flashcl_status st = prepare_backward(ctx, desc, in, lse, lse_offset, num_wait, wait_list, &d, views);
    if (st != FLASHCL_SUCCESS) return st;
    return enqueue(ctx, &d, views, lse, lse_offset, num_wait, wait_list, event);
}

flashcl_status flashcl_backward(flashcl_context *ctx, const flashcl_attention_desc *desc, const flashcl_tensor *q,
                                const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                const flashcl_tensor *dout, cl_mem lse, size_t lse_offset, const flashcl_tensor *dq,
                                const flashcl_tensor *dk, const flashcl_tensor *dv, cl_uint num_wait,
                                const cl_event *wait_list, cl_event *event) {
    return run_backward(flashcl__enqueue_flash_backward, ctx, desc, q, k, v, o, dout, lse, lse_offset, dq, dk, dv,
                        num_wait, wait_list, event);
}

flashcl_status flashcl_standard_backward(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                         const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                         const flashcl_tensor *o, const flashcl_tensor *dout, cl_mem lse,
                                         size_t lse_offset, const flashcl_tensor *dq, const flashcl_tensor *dk,
                                         const flashcl_tensor *dv, cl_uint num_wait, const cl_event *wait_list,
                                         cl_event *event) {
    return run_backward(flashcl__enqueue_standard_backward, ctx, desc, q, k, v, o, dout, lse, lse_offset, dq, dk, dv,
                        num_wait, wait_list, event);
}

flashcl_status flashcl_backward_plan_query(flashcl_context *ctx, const flashcl_attention_desc *desc, flashcl_path path,
                                           flashcl_plan *out) {
    if (!ctx) return FLASHCL_ERR_INVALID_CONTEXT;
    flashcl__clear_error(ctx);
    if (!out) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "out is NULL");
    flashcl_attention_desc d;
    flashcl_status st = flashcl__resolve_desc(ctx, desc, &d);
    if (st != FLASHCL_SUCCESS) return st;
    const size_t rows = d.batch * d.heads_q * d.seqlen_q;
    if (path == FLASHCL_PATH_FLASH) {
        const flashcl__backward_plan *p = NULL;
        st = flashcl__plan_backward(ctx, &d, &p);
        if (st != FLASHCL_SUCCESS) return st;
        *out = p->pub;
        out->scratch_bytes = rows * sizeof(float);
        if (flashcl__is_cpu_backward_plan(p)) out->scratch_bytes += flashcl__cpu_backward_scratch_bytes(p, &d);
        return FLASHCL_SUCCESS;
    }
    if (path == FLASHCL_PATH_STANDARD) {
        const flashcl__standard_plan *p = NULL;
        st = flashcl__plan_standard(ctx, &p);
        if (st != FLASHCL_SUCCESS) return st;
        *out = p->pub;
        /* P and dS (N x N each), per-query-head dK and dV, and D. */
        out->scratch_bytes = (2 * rows * d.seqlen_k + 2 * d.batch * d.heads_q * d.seqlen_k * d.head_dim + rows) *
                             sizeof(float);
        return FLASHCL_SUCCESS;
    }
    return flashcl__fail(ctx, FLASHCL_ERR_INVALID_PATH, "path: unknown value %d", (int)path);
}
