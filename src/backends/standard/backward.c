/*
 * Standard backward (the baseline): materialises P and dS, N x N each, in
 * context scratch, plus per-query-head dK/dV so GQA groups can be summed
 * without atomics. One chain of launches:
 *   S = scale QK^T, P = exp(S - LSE) (the forward's LSE, as flash uses it), D = rowsum(dO*O), dP = dO V^T,
 *   dS = P (dP - D), dQ = scale dS K, dV_h = P^T dO, dK_h = scale dS^T Q,
 *   dV = sum_h dV_h, dK = sum_h dK_h.
 */
#include "standard.h"
#include "../../launch.h"

#include <stdint.h>

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

/* Sets std_scores' arguments: a (rows x dim) times b^T, alpha, the causal mask, into `out`. */
static void arg_scores(flashcl__args *a, const flashcl_tensor *lhs, const flashcl_tensor *rhs, cl_mem out,
                       const flashcl_attention_desc *d, cl_float alpha, cl_int causal) {
    flashcl__arg_view(a, lhs);
    flashcl__arg_view(a, rhs);
    flashcl__arg_mem(a, out);
    flashcl__arg_int(a, (cl_int)d->seqlen_q);
    flashcl__arg_int(a, (cl_int)d->seqlen_k);
    flashcl__arg_int(a, (cl_int)d->head_dim);
    flashcl__arg_int(a, (cl_int)d->heads_q);
    flashcl__arg_int(a, (cl_int)(d->heads_q / d->heads_kv));
    flashcl__arg_float(a, alpha);
    flashcl__arg_int(a, causal);
}

/* Launches `kernel` after `*last` once its arguments are set; a failure in either sticks on the chain. */
static void launch_next(flashcl__chain *chain, flashcl__args *a, cl_uint dims, const size_t *global,
                        const size_t *local, int *last) {
    if (chain->status == FLASHCL_SUCCESS) chain->status = flashcl__args_check(chain->ctx, a);
    *last = flashcl__chain_launch(chain, a->kernel, a->name, dims, global, local, *last);
}

flashcl_status flashcl__standard_backward(flashcl_context *ctx, const flashcl__call *call) {
    const flashcl_attention_desc *d = call->d;
    const flashcl_tensor *views = call->views;
    flashcl_status st = flashcl__require_plain(ctx, d, "standard backward");
    if (st != FLASHCL_SUCCESS) return st;
    const flashcl__standard_plan *plan = NULL;
    st = flashcl__plan_standard(ctx, &plan);
    if (st != FLASHCL_SUCCESS) return st;
    flashcl__standard_sizes n;
    st = flashcl__standard_scratch_sizes(ctx, d, 1, &n);
    if (st != FLASHCL_SUCCESS) return st;
    const size_t z = d->batch * d->heads_q, rows = z * d->seqlen_q, nn = n.scores, grads = n.grads;
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
    flashcl__chain chain;
    st = flashcl__chain_begin(&chain, ctx, call->num_wait, call->wait_list, 1);
    if (st != FLASHCL_SUCCESS) return st;

    const cl_int sq = (cl_int)d->seqlen_q, sk = (cl_int)d->seqlen_k, dim = (cl_int)d->head_dim, hq = (cl_int)d->heads_q;
    const cl_int group = (cl_int)(d->heads_q / d->heads_kv);
    const size_t tile = (size_t)plan->tile, rts = tile / (size_t)plan->wpt;
    const size_t l2[3] = {rts, rts, 1};
    int last = FLASHCL__AFTER_START;

    /* S = scale QK^T (causal -inf), then P = exp(S - LSE) in place. */
    const size_t g_s[3] = {round_up(d->seqlen_k, tile) / tile * rts, round_up(d->seqlen_q, tile) / tile * rts, z};
    flashcl__args a = flashcl__args_for(plan->scores, "std_scores");
    arg_scores(&a, &views[FLASHCL__VQ], &views[FLASHCL__VK], p, d, d->scale, d->causal != 0);
    launch_next(&chain, &a, 3, g_s, l2, &last);
    const size_t g_el[1] = {nn};
    a = flashcl__args_for(plan->probs, "std_probs");
    flashcl__arg_mem(&a, p);
    flashcl__arg_int(&a, sk);
    flashcl__arg_mem(&a, call->lse);
    flashcl__arg_ulong(&a, call->lse_offset);
    flashcl__arg_ulong(&a, nn);
    launch_next(&chain, &a, 1, g_el, NULL, &last);

    /* D = rowsum(dO * O). */
    const size_t g_rd[3] = {d->seqlen_q, d->heads_q, d->batch};
    a = flashcl__args_for(plan->rowdot, "std_rowdot");
    flashcl__arg_view(&a, &views[FLASHCL__VDO]);
    flashcl__arg_view(&a, &views[FLASHCL__VO]);
    flashcl__arg_mem(&a, dsum);
    flashcl__arg_int(&a, sq);
    flashcl__arg_int(&a, dim);
    flashcl__arg_int(&a, hq);
    launch_next(&chain, &a, 3, g_rd, NULL, &last);

    /* dP = dO V^T (no scale, no mask), then dS = P (dP - D) in place. */
    a = flashcl__args_for(plan->scores, "std_scores");
    arg_scores(&a, &views[FLASHCL__VDO], &views[FLASHCL__VV], ds, d, 1.0f, 0);
    launch_next(&chain, &a, 3, g_s, l2, &last);
    a = flashcl__args_for(plan->ds, "std_ds");
    flashcl__arg_mem(&a, p);
    flashcl__arg_mem(&a, ds);
    flashcl__arg_mem(&a, dsum);
    flashcl__arg_int(&a, sk);
    flashcl__arg_ulong(&a, nn);
    launch_next(&chain, &a, 1, g_el, NULL, &last);

    /* dQ = scale dS K. */
    const size_t g_dq[3] = {round_up(d->head_dim, tile) / tile * rts, round_up(d->seqlen_q, tile) / tile * rts, z};
    a = flashcl__args_for(plan->pv, "std_pv");
    flashcl__arg_mem(&a, ds);
    flashcl__arg_view(&a, &views[FLASHCL__VK]);
    flashcl__arg_view(&a, &views[FLASHCL__VDQ]);
    flashcl__arg_int(&a, sq);
    flashcl__arg_int(&a, sk);
    flashcl__arg_int(&a, dim);
    flashcl__arg_int(&a, hq);
    flashcl__arg_int(&a, group);
    flashcl__arg_float(&a, d->scale);
    launch_next(&chain, &a, 3, g_dq, l2, &last);

    /* Per query head: dV_h = P^T dO into gbuf[0], dK_h = scale dS^T Q into gbuf[1]; then sum each group. */
    const size_t g_tn[3] = {round_up(d->head_dim, tile) / tile * rts, round_up(d->seqlen_k, tile) / tile * rts, z};
    const size_t g_sum[3] = {d->seqlen_k * d->head_dim, d->heads_kv, d->batch};
    for (int which = 0; which < 2; ++which) {
        a = flashcl__args_for(plan->tn, "std_tn");
        flashcl__arg_mem(&a, which == 0 ? p : ds);
        flashcl__arg_view(&a, which == 0 ? &views[FLASHCL__VDO] : &views[FLASHCL__VQ]);
        flashcl__arg_mem(&a, gbuf[which]);
        flashcl__arg_int(&a, sq);
        flashcl__arg_int(&a, sk);
        flashcl__arg_int(&a, dim);
        flashcl__arg_int(&a, hq);
        flashcl__arg_float(&a, which == 0 ? 1.0f : d->scale);
        launch_next(&chain, &a, 3, g_tn, l2, &last);
        a = flashcl__args_for(plan->group_sum, "std_group_sum");
        flashcl__arg_mem(&a, gbuf[which]);
        flashcl__arg_view(&a, which == 0 ? &views[FLASHCL__VDV] : &views[FLASHCL__VDK]);
        flashcl__arg_int(&a, sk);
        flashcl__arg_int(&a, dim);
        flashcl__arg_int(&a, hq);
        flashcl__arg_int(&a, group);
        launch_next(&chain, &a, 3, g_sum, NULL, &last);
    }
    return flashcl__chain_end(&chain, 1, &last, call->event);
}
