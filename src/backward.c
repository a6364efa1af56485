/* flashcl_backward: checks, then D = rowsum(dO*O), dK/dV, dQ (and dsinks) — launches chained by
   events, dK/dV and dQ from whichever kernel family the plan chose (src/plan_backward.c). Every
   kernel takes the variant arguments (cl/variants.cl) last. */
#include "internal.h"
#include "cpu_family.h"

#include <stdio.h>
#include <string.h>


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
    const size_t dqk = d->head_dim, dv = d->head_dim_v;
    const flashcl__view_spec specs[BACKWARD_VIEWS] = {
        {"q", in[BQ], hq, sq, dqk, 0},    {"k", in[BK], hk, sk, dqk, 0},     {"v", in[BV], hk, sk, dv, 0},
        {"o", in[BO], hq, sq, dv, 0},     {"dout", in[BDO], hq, sq, dv, 0},  {"dq", in[BDQ], hq, sq, dqk, 1},
        {"dk", in[BDK], hk, sk, dqk, 1},  {"dv", in[BDV], hk, sk, dv, 1},
    };
    const flashcl__lse_spec lse_spec = {lse, lse_offset, 1, 0};
    st = flashcl__validate_views(ctx, d, specs, BACKWARD_VIEWS, &lse_spec, num_wait, wait_list, views);
    if (st == FLASHCL_SUCCESS) st = flashcl__validate_variant_buffers(ctx, d, 1);
    return st;
}

/* Sets `count` view argument groups, then the rest from a list. */
static cl_int set_views(cl_kernel k, cl_uint *arg, const flashcl_tensor *views, const int *which, int count) {
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < count && err == CL_SUCCESS; ++i) err = flashcl__set_view_args(k, arg, &views[which[i]]);
    return err;
}

/* Floats of D (and of LSE): one per query row, [batch, heads_q, seqlen_q] or [heads_q, total_q] with varlen. */
static size_t row_count(const flashcl_attention_desc *d) {
    return (flashcl__is_varlen(d) ? 1 : d->batch) * d->heads_q * d->seqlen_q;
}

/* Sets scalar arguments from index *arg on. */
static cl_int set_scalars(cl_kernel k, cl_uint *arg, const size_t *sizes, const void *const *values, int count) {
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < count && err == CL_SUCCESS; ++i) err = clSetKernelArg(k, (*arg)++, sizes[i], values[i]);
    return err;
}

flashcl_status flashcl__enqueue_flash_backward(flashcl_context *ctx, const flashcl_attention_desc *d,
                                               const flashcl_tensor *views, cl_mem lse,
                                               size_t lse_offset, cl_uint num_wait, const cl_event *wait_list,
                                               cl_event *event) {
    flashcl_status st = FLASHCL_SUCCESS;
    if (flashcl__mma_try_backward(ctx, d, views, lse, lse_offset, num_wait, wait_list, event, &st)) return st;
    const flashcl__backward_plan *plan = NULL;
    st = flashcl__plan_backward(ctx, d, &plan);
    if (st != FLASHCL_SUCCESS) return st;
    if (flashcl__is_cpu_backward_plan(plan))
        return flashcl__enqueue_backward_cpu(ctx, plan, d, views, lse, lse_offset, num_wait, wait_list, event);
    cl_mem dsum = NULL;
    st = flashcl__scratch(ctx, FLASHCL__SCRATCH_ROWS, row_count(d) * sizeof(float), "backward: D = rowsum(dO*O)", &dsum);
    if (st != FLASHCL_SUCCESS) return st;

    /* Totals (packed rows with varlen): the kernels find each sequence through cu_seqlens. */
    cl_int sq = (cl_int)d->seqlen_q, sk = (cl_int)d->seqlen_k, hq = (cl_int)d->heads_q, batch = (cl_int)d->batch;
    cl_int group = (cl_int)(d->heads_q / d->heads_kv);
    cl_float scale = d->scale, scale_log2 = (cl_float)(d->scale * FLASHCL__LOG2E);
    cl_ulong lse_off = lse_offset, dsinks_off = d->dsinks_offset;
    cl_mem dsinks = d->dsinks;
    /* Bound for the buffers of variants that are off (never read); Q is never written. */
    const cl_mem dummy = views[BQ].buffer;
    const int want_dsinks = d->dsinks != NULL && plan->dsinks != NULL;

    cl_uint arg = 0;
    const int dot_views[] = {BDO, BO};
    cl_int err = set_views(plan->dot, &arg, views, dot_views, 2);
    if (err == CL_SUCCESS) {
        const size_t sz[] = {sizeof dsum, sizeof sq, sizeof sk, sizeof hq};
        const void *const val[] = {&dsum, &sq, &sk, &hq};
        err = set_scalars(plan->dot, &arg, sz, val, 4);
    }
    if (err == CL_SUCCESS) err = flashcl__set_variant_args(plan->dot, &arg, d, dummy);
    /* dK/dV and dQ share their argument list apart from the outputs. */
    const int dkdv_out[] = {BDK, BDV}, dq_out[] = {BDQ};
    cl_kernel mains[2] = {plan->dkdv, plan->dq};
    for (int m = 0; m < 2 && err == CL_SUCCESS; ++m) {
        cl_kernel k = mains[m];
        arg = 0;
        const int in_views[] = {BQ, BK, BV, BDO};
        err = set_views(k, &arg, views, in_views, 4);
        if (err == CL_SUCCESS) {
            const size_t sz[] = {sizeof lse, sizeof lse_off, sizeof dsum};
            const void *const val[] = {&lse, &lse_off, &dsum};
            err = set_scalars(k, &arg, sz, val, 3);
        }
        if (err == CL_SUCCESS) err = m == 0 ? set_views(k, &arg, views, dkdv_out, 2) : set_views(k, &arg, views, dq_out, 1);
        if (err == CL_SUCCESS) {
            const size_t sz[] = {sizeof sq, sizeof sk, sizeof hq, sizeof group, sizeof scale_log2, sizeof scale};
            const void *const val[] = {&sq, &sk, &hq, &group, &scale_log2, &scale};
            err = set_scalars(k, &arg, sz, val, 6);
        }
        if (err == CL_SUCCESS) err = flashcl__set_variant_args(k, &arg, d, dummy);
    }
    if (err == CL_SUCCESS && want_dsinks) {
        arg = 0;
        const size_t sz[] = {sizeof lse, sizeof lse_off, sizeof dsum, sizeof dsinks, sizeof dsinks_off,
                             sizeof batch, sizeof sq, sizeof sk, sizeof hq};
        const void *const val[] = {&lse, &lse_off, &dsum, &dsinks, &dsinks_off, &batch, &sq, &sk, &hq};
        err = set_scalars(plan->dsinks, &arg, sz, val, 9);
        if (err == CL_SUCCESS) err = flashcl__set_variant_args(plan->dsinks, &arg, d, dummy);
    }
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clSetKernelArg(flash backward)");

    flashcl__waits waits;
    st = flashcl__scratch_waits(ctx, num_wait, wait_list, &waits);
    if (st != FLASHCL_SUCCESS) return st;
    /* Either family: one work-group per block of keys (dK/dV) or query rows (dQ), main_wg
       work-items each (a block's rows for the row kernels, 16x16 for the tiles). With varlen
       the grids cover the longest sequence; blocks past a shorter one return at once. */
    const size_t r = plan->dot_wg, wg = plan->main_wg, kb = plan->keys_per_group, qb = plan->rows_per_group;
    const size_t msq = d->max_seqlen_q, msk = d->max_seqlen_k;
    size_t dot_local[3] = {r, 1, 1}, main_local[3] = {wg, 1, 1};
    size_t g_dot[3] = {(msq + r - 1) / r * r, d->heads_q, d->batch};
    size_t g_keys[3] = {(msk + kb - 1) / kb * wg, d->heads_kv, d->batch};
    size_t g_rows[3] = {(msq + qb - 1) / qb * wg, d->heads_q, d->batch};
    size_t g_sinks[3] = {r, d->heads_q, 1}; /* one work-group per head */
    const char *dkdv_name = plan->tiles ? "flash_bwd_dkdv_tiles" : "flash_bwd_dkdv";
    const char *dq_name = plan->tiles ? "flash_bwd_dq_tiles" : "flash_bwd_dq";
    char what[96];
    cl_event e_dot = NULL, done[3] = {NULL, NULL, NULL};
    cl_uint ndone = 0;
    err = clEnqueueNDRangeKernel(ctx->queue, plan->dot, 3, NULL, g_dot, dot_local, waits.count,
                                 waits.count ? waits.events : NULL, &e_dot);
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clEnqueueNDRangeKernel(flash_bwd_dot)");
    /* dK/dV, dQ and dsinks need only D: on an out-of-order queue they may overlap; the call's event covers all. */
    struct {
        cl_kernel k;
        const size_t *global, *local;
        const char *name;
    } launches[3] = {{plan->dkdv, g_keys, main_local, dkdv_name},
                     {plan->dq, g_rows, main_local, dq_name},
                     {plan->dsinks, g_sinks, dot_local, "flash_bwd_dsinks"}};
    const int nlaunch = want_dsinks ? 3 : 2;
    for (int i = 0; i < nlaunch && err == CL_SUCCESS; ++i) {
        err = clEnqueueNDRangeKernel(ctx->queue, launches[i].k, 3, NULL, launches[i].global, launches[i].local, 1, &e_dot,
                                     &done[ndone]);
        if (err == CL_SUCCESS) ++ndone;
        else snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s)", launches[i].name);
    }
    clReleaseEvent(e_dot);
    cl_event last = NULL;
    if (err == CL_SUCCESS) {
        err = clEnqueueMarkerWithWaitList(ctx->queue, ndone, done, &last);
        if (err != CL_SUCCESS) snprintf(what, sizeof what, "clEnqueueMarkerWithWaitList(backward)");
    }
    for (cl_uint i = 0; i < ndone; ++i) clReleaseEvent(done[i]);
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, what);
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
    const size_t rows = row_count(&d);
    if (path == FLASHCL_PATH_FLASH) {
        /* Same order as flashcl__enqueue_flash_backward: the tensor-core kernels first. */
        char why[256] = "";
        if (flashcl__mma_backward_plan_query(ctx, &d, out, &st, why, sizeof why)) {
            if (st == FLASHCL_SUCCESS) out->scratch_bytes = rows * sizeof(float);
            return st;
        }
        const flashcl__backward_plan *p = NULL;
        st = flashcl__plan_backward(ctx, &d, &p);
        if (st != FLASHCL_SUCCESS) return st;
        *out = p->pub;
        out->scratch_bytes = rows * sizeof(float);
        if (d.dtype == FLASHCL_DTYPE_F16 || d.dtype == FLASHCL_DTYPE_BF16)
            flashcl__appendf(out->reason, sizeof out->reason, "; %s", why);
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
