/*
 * Standard backward (the baseline): materialises P and dS, N x N each, in
 * context scratch, plus per-query-head dK/dV so GQA groups can be summed
 * without atomics. Launches chained by events:
 *   S = scale QK^T, P = exp(S - LSE) (the forward's LSE, as flash uses it), D = rowsum(dO*O), dP = dO V^T,
 *   dS = P (dP - D), dQ = scale dS K, dV_h = P^T dO, dK_h = scale dS^T Q,
 *   dV = sum_h dV_h, dK = sum_h dK_h.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

enum { BQ, BK, BV, BO, BDO, BDQ, BDK, BDV, BACKWARD_VIEWS };

typedef struct {
    cl_uint n;
    size_t size[12];
    const void *value[12];
} arg_list;

static void push(arg_list *a, size_t size, const void *value) {
    a->size[a->n] = size;
    a->value[a->n] = value;
    a->n++;
}

static cl_int set_list(cl_kernel k, cl_uint *arg, const arg_list *a) {
    cl_int err = CL_SUCCESS;
    for (cl_uint i = 0; i < a->n && err == CL_SUCCESS; ++i) err = clSetKernelArg(k, (*arg)++, a->size[i], a->value[i]);
    return err;
}

/* Enqueues after *prev (or the initial waits), replacing *prev with the new event. */
static flashcl_status launch(flashcl_context *ctx, cl_kernel k, const char *name, cl_uint dims, const size_t *global,
                             const size_t *local, const flashcl__waits *first, cl_event *prev) {
    cl_event next = NULL;
    cl_int err;
    if (*prev) err = clEnqueueNDRangeKernel(ctx->queue, k, dims, NULL, global, local, 1, prev, &next);
    else err = clEnqueueNDRangeKernel(ctx->queue, k, dims, NULL, global, local, first->count,
                                      first->count ? first->events : NULL, &next);
    if (*prev) clReleaseEvent(*prev);
    *prev = next;
    if (err != CL_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s)", name);
        return flashcl__fail_cl(ctx, err, what);
    }
    return FLASHCL_SUCCESS;
}

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

flashcl_status flashcl__enqueue_standard_backward(flashcl_context *ctx, const flashcl_attention_desc *d,
                                                  const flashcl_tensor *views, cl_mem lse,
                                                  size_t lse_offset, cl_uint num_wait, const cl_event *wait_list,
                                                  cl_event *event) {
    flashcl_status st = flashcl__require_plain(ctx, d, "standard backward");
    if (st != FLASHCL_SUCCESS) return st;
    const flashcl__standard_plan *plan = NULL;
    st = flashcl__plan_standard(ctx, &plan);
    if (st != FLASHCL_SUCCESS) return st;
    const size_t z = d->batch * d->heads_q, rows = z * d->seqlen_q;
    if (d->seqlen_k > SIZE_MAX / sizeof(float) / rows)
        return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_DEVICE_MEMORY, "standard backward: scratch size overflows size_t");
    const size_t nn = rows * d->seqlen_k, grads = z * d->seqlen_k * d->head_dim;
    cl_mem p = NULL, ds = NULL, gbuf[2] = {NULL, NULL}, dsum = NULL;
    st = flashcl__scratch(ctx, FLASHCL__SCRATCH_SCORES, nn * sizeof(float), "standard backward: P", &p);
    if (st == FLASHCL_SUCCESS)
        st = flashcl__scratch(ctx, FLASHCL__SCRATCH_SCORES2, nn * sizeof(float), "standard backward: dP/dS", &ds);
    if (st == FLASHCL_SUCCESS)
        st = flashcl__scratch(ctx, FLASHCL__SCRATCH_GRADS, grads * sizeof(float), "standard backward: per-head dV",
                              &gbuf[0]);
    if (st == FLASHCL_SUCCESS)
        st = flashcl__scratch(ctx, FLASHCL__SCRATCH_GRADS2, grads * sizeof(float), "standard backward: per-head dK",
                              &gbuf[1]);
    if (st == FLASHCL_SUCCESS)
        st = flashcl__scratch(ctx, FLASHCL__SCRATCH_ROWS, rows * sizeof(float), "standard backward: D", &dsum);
    if (st != FLASHCL_SUCCESS) return st;
    flashcl__waits waits;
    st = flashcl__scratch_waits(ctx, num_wait, wait_list, &waits);
    if (st != FLASHCL_SUCCESS) return st;

    cl_int sq = (cl_int)d->seqlen_q, sk = (cl_int)d->seqlen_k, dim = (cl_int)d->head_dim, hq = (cl_int)d->heads_q;
    cl_int group = (cl_int)(d->heads_q / d->heads_kv), causal = d->causal != 0, zero_i = 0;
    cl_float scale = d->scale, one = 1.0f;
    cl_ulong count = nn;
    const size_t tile = (size_t)plan->tile, rts = tile / (size_t)plan->wpt;
    const size_t l2[3] = {rts, rts, 1};
    cl_event prev = NULL;
    cl_int err = CL_SUCCESS;
    cl_uint arg;
    arg_list a;

/* Runs the argument-setting statements (the variadic part: they contain commas). */
#define SET(kernel, ...)                                                                      \
    do {                                                                                      \
        arg = 0;                                                                              \
        a.n = 0;                                                                              \
        __VA_ARGS__;                                                                          \
        if (err != CL_SUCCESS) {                                                              \
            if (prev) clReleaseEvent(prev);                                                   \
            return flashcl__fail_cl(ctx, err, "clSetKernelArg(standard backward " #kernel ")"); \
        }                                                                                     \
    } while (0)
#define LAUNCH(kernel, dims, global, local)                                                   \
    do {                                                                                      \
        st = launch(ctx, plan->kernel, #kernel, dims, global, local, &waits, &prev);          \
        if (st != FLASHCL_SUCCESS) {                                                          \
            if (prev) clReleaseEvent(prev);                                                   \
            return st;                                                                        \
        }                                                                                     \
    } while (0)

    /* S = scale QK^T (causal -inf), then P = exp(S - LSE) in place. */
    const size_t g_s[3] = {round_up(d->seqlen_k, tile) / tile * rts, round_up(d->seqlen_q, tile) / tile * rts, z};
    SET(scores, {
        err = flashcl__set_view_args(plan->scores, &arg, &views[BQ]);
        if (err == CL_SUCCESS) err = flashcl__set_view_args(plan->scores, &arg, &views[BK]);
        push(&a, sizeof p, &p), push(&a, sizeof sq, &sq), push(&a, sizeof sk, &sk), push(&a, sizeof dim, &dim);
        push(&a, sizeof hq, &hq), push(&a, sizeof group, &group), push(&a, sizeof scale, &scale);
        push(&a, sizeof causal, &causal);
        if (err == CL_SUCCESS) err = set_list(plan->scores, &arg, &a);
    });
    LAUNCH(scores, 3, g_s, l2);
    cl_ulong lse_off = lse_offset;
    const size_t g_el[1] = {nn};
    SET(probs, {
        push(&a, sizeof p, &p), push(&a, sizeof sk, &sk), push(&a, sizeof lse, &lse), push(&a, sizeof lse_off, &lse_off);
        push(&a, sizeof count, &count);
        err = set_list(plan->probs, &arg, &a);
    });
    LAUNCH(probs, 1, g_el, NULL);

    /* D = rowsum(dO * O). */
    const size_t g_rd[3] = {d->seqlen_q, d->heads_q, d->batch};
    SET(rowdot, {
        err = flashcl__set_view_args(plan->rowdot, &arg, &views[BDO]);
        if (err == CL_SUCCESS) err = flashcl__set_view_args(plan->rowdot, &arg, &views[BO]);
        push(&a, sizeof dsum, &dsum), push(&a, sizeof sq, &sq), push(&a, sizeof dim, &dim), push(&a, sizeof hq, &hq);
        if (err == CL_SUCCESS) err = set_list(plan->rowdot, &arg, &a);
    });
    LAUNCH(rowdot, 3, g_rd, NULL);

    /* dP = dO V^T (no scale, no mask), then dS = P (dP - D) in place. */
    SET(scores, {
        err = flashcl__set_view_args(plan->scores, &arg, &views[BDO]);
        if (err == CL_SUCCESS) err = flashcl__set_view_args(plan->scores, &arg, &views[BV]);
        push(&a, sizeof ds, &ds), push(&a, sizeof sq, &sq), push(&a, sizeof sk, &sk), push(&a, sizeof dim, &dim);
        push(&a, sizeof hq, &hq), push(&a, sizeof group, &group), push(&a, sizeof one, &one);
        push(&a, sizeof zero_i, &zero_i);
        if (err == CL_SUCCESS) err = set_list(plan->scores, &arg, &a);
    });
    LAUNCH(scores, 3, g_s, l2);
    SET(ds, {
        push(&a, sizeof p, &p), push(&a, sizeof ds, &ds), push(&a, sizeof dsum, &dsum), push(&a, sizeof sk, &sk);
        push(&a, sizeof count, &count);
        err = set_list(plan->ds, &arg, &a);
    });
    LAUNCH(ds, 1, g_el, NULL);

    /* dQ = scale dS K. */
    const size_t g_dq[3] = {round_up(d->head_dim, tile) / tile * rts, round_up(d->seqlen_q, tile) / tile * rts, z};
    SET(pv, {
        err = clSetKernelArg(plan->pv, arg++, sizeof ds, &ds);
        if (err == CL_SUCCESS) err = flashcl__set_view_args(plan->pv, &arg, &views[BK]);
        if (err == CL_SUCCESS) err = flashcl__set_view_args(plan->pv, &arg, &views[BDQ]);
        push(&a, sizeof sq, &sq), push(&a, sizeof sk, &sk), push(&a, sizeof dim, &dim), push(&a, sizeof hq, &hq);
        push(&a, sizeof group, &group), push(&a, sizeof scale, &scale);
        if (err == CL_SUCCESS) err = set_list(plan->pv, &arg, &a);
    });
    LAUNCH(pv, 3, g_dq, l2);

    /* Per query head: dV_h = P^T dO into gbuf[0], dK_h = scale dS^T Q into gbuf[1]; then sum each group. */
    const size_t g_tn[3] = {round_up(d->head_dim, tile) / tile * rts, round_up(d->seqlen_k, tile) / tile * rts, z};
    const size_t g_sum[3] = {d->seqlen_k * d->head_dim, d->heads_kv, d->batch};
    for (int which = 0; which < 2; ++which) {
        cl_mem a_src = which == 0 ? p : ds;
        const flashcl_tensor *b_view = which == 0 ? &views[BDO] : &views[BQ];
        const flashcl_tensor *out = which == 0 ? &views[BDV] : &views[BDK];
        cl_float alpha = which == 0 ? 1.0f : scale;
        cl_mem sub = gbuf[which];
        SET(tn, {
            err = clSetKernelArg(plan->tn, arg++, sizeof a_src, &a_src);
            if (err == CL_SUCCESS) err = flashcl__set_view_args(plan->tn, &arg, b_view);
            push(&a, sizeof sub, &sub), push(&a, sizeof sq, &sq), push(&a, sizeof sk, &sk), push(&a, sizeof dim, &dim);
            push(&a, sizeof hq, &hq), push(&a, sizeof alpha, &alpha);
            if (err == CL_SUCCESS) err = set_list(plan->tn, &arg, &a);
        });
        st = launch(ctx, plan->tn, "std_tn", 3, g_tn, l2, &waits, &prev);
        if (st == FLASHCL_SUCCESS) {
            arg = 0;
            a.n = 0;
            err = clSetKernelArg(plan->group_sum, arg++, sizeof sub, &sub);
            if (err == CL_SUCCESS) err = flashcl__set_view_args(plan->group_sum, &arg, out);
            push(&a, sizeof sk, &sk), push(&a, sizeof dim, &dim), push(&a, sizeof hq, &hq), push(&a, sizeof group, &group);
            if (err == CL_SUCCESS) err = set_list(plan->group_sum, &arg, &a);
            st = err == CL_SUCCESS ? launch(ctx, plan->group_sum, "std_group_sum", 3, g_sum, NULL, &waits, &prev)
                                   : flashcl__fail_cl(ctx, err, "clSetKernelArg(std_group_sum)");
        }
        if (st != FLASHCL_SUCCESS) {
            if (prev) clReleaseEvent(prev);
            return st;
        }
    }
#undef SET
#undef LAUNCH
    flashcl__scratch_used_by(ctx, prev);
    if (event) *event = prev;
    else clReleaseEvent(prev);
    return FLASHCL_SUCCESS;
}
