/* Launches of the portable family: the forward kernel, and the backward's D, dK/dV, dQ (and dsinks). */
#include "portable.h"
#include "../../backward_args.h"

flashcl_status flashcl__portable_forward(flashcl_context *ctx, const flashcl__call *call) {
    const flashcl_attention_desc *d = call->d;
    const flashcl__flash_plan *plan = NULL;
    flashcl_status st = flashcl__plan_flash(ctx, d, &plan);
    if (st != FLASHCL_SUCCESS) return st;
    /* Q's buffer stands in for absent buffers (LSE, variant inputs): never written. */
    const cl_mem dummy = call->views[FLASHCL__VQ].buffer;
    static const int in_out[] = {FLASHCL__VQ, FLASHCL__VK, FLASHCL__VV, FLASHCL__VO};
    flashcl__args a = flashcl__args_for(plan->kernel, plan->pub.kernel);
    flashcl__arg_views(&a, call->views, in_out, 4);
    flashcl__arg_forward(&a, d, call->lse, call->lse_offset, dummy);
    flashcl__arg_variants(&a, d, dummy);
    st = flashcl__args_check(ctx, &a);
    if (st != FLASHCL_SUCCESS) return st;

    const size_t wg = plan->pub.work_group_size;
    /* max_seqlen_q: with varlen, blocks past a shorter sequence's end return at once. */
    const size_t blocks = (d->max_seqlen_q + (size_t)plan->pub.block_rows - 1) / (size_t)plan->pub.block_rows;
    const size_t global[3] = {blocks * wg, d->heads_q, d->batch}, local[3] = {wg, 1, 1};
    flashcl__chain chain;
    st = flashcl__chain_begin(&chain, ctx, call->num_wait, call->wait_list, 0);
    if (st != FLASHCL_SUCCESS) return st;
    const int done =
        flashcl__chain_launch(&chain, plan->kernel, plan->pub.kernel, 3, global, local, FLASHCL__AFTER_START);
    return flashcl__chain_end(&chain, 1, &done, call->event);
}

flashcl_status flashcl__portable_backward(flashcl_context *ctx, const flashcl__call *call) {
    const flashcl_attention_desc *d = call->d;
    const flashcl_tensor *views = call->views;
    const flashcl__backward_plan *plan = NULL;
    flashcl_status st = flashcl__plan_backward(ctx, d, &plan);
    if (st != FLASHCL_SUCCESS) return st;
    cl_mem dsum = NULL;
    st = flashcl__bwd_dsum(ctx, d, &dsum);
    if (st != FLASHCL_SUCCESS) return st;
    /* Bound for the buffers of variants that are off (never read); Q is never written. */
    const cl_mem dummy = views[FLASHCL__VQ].buffer;
    const int want_dsinks = d->dsinks != NULL && plan->dsinks != NULL;
    const char *dkdv_name = plan->tiles ? "flash_bwd_dkdv_tiles" : "flash_bwd_dkdv";
    const char *dq_name = plan->tiles ? "flash_bwd_dq_tiles" : "flash_bwd_dq";

    /* Totals (packed rows with varlen): the kernels find each sequence through cu_seqlens. */
    flashcl__args dot = flashcl__args_for(plan->dot, "flash_bwd_dot");
    flashcl__arg_bwd_dot(&dot, call, dsum);
    st = flashcl__args_check(ctx, &dot);
    /* dK/dV and dQ share their argument list apart from the outputs. */
    for (int m = 0; m < 2 && st == FLASHCL_SUCCESS; ++m) {
        flashcl__args a = flashcl__args_for(m == 0 ? plan->dkdv : plan->dq, m == 0 ? dkdv_name : dq_name);
        flashcl__arg_bwd_main(&a, call, dsum, m);
        flashcl__arg_variants(&a, d, dummy);
        st = flashcl__args_check(ctx, &a);
    }
    if (st == FLASHCL_SUCCESS && want_dsinks) st = flashcl__bwd_dsinks_args(ctx, plan->dsinks, call, dsum);
    if (st != FLASHCL_SUCCESS) return st;

    /* Either family: one work-group per block of keys (dK/dV) or query rows (dQ), main_wg
       work-items each (a block's rows for the row kernels, 16x16 for the tiles). With varlen
       the grids cover the longest sequence; blocks past a shorter one return at once. */
    const size_t r = plan->dot_wg, wg = plan->main_wg, kb = plan->keys_per_group, qb = plan->rows_per_group;
    const size_t msq = d->max_seqlen_q, msk = d->max_seqlen_k;
    const size_t dot_local[3] = {r, 1, 1}, main_local[3] = {wg, 1, 1};
    const size_t g_dot[3] = {(msq + r - 1) / r * r, d->heads_q, d->batch};
    const size_t g_keys[3] = {(msk + kb - 1) / kb * wg, d->heads_kv, d->batch};
    const size_t g_rows[3] = {(msq + qb - 1) / qb * wg, d->heads_q, d->batch};
    const size_t g_sinks[3] = {r, d->heads_q, 1}; /* one work-group per head */
    flashcl__chain chain;
    st = flashcl__chain_begin(&chain, ctx, call->num_wait, call->wait_list, 1);
    if (st != FLASHCL_SUCCESS) return st;
    /* dK/dV, dQ and dsinks need only D: on an out-of-order queue they may overlap; the call's event covers all. */
    const int e_dot =
        flashcl__chain_launch(&chain, plan->dot, "flash_bwd_dot", 3, g_dot, dot_local, FLASHCL__AFTER_START);
    int last[3];
    last[0] = flashcl__chain_launch(&chain, plan->dkdv, dkdv_name, 3, g_keys, main_local, e_dot);
    last[1] = flashcl__chain_launch(&chain, plan->dq, dq_name, 3, g_rows, main_local, e_dot);
    if (want_dsinks)
        last[2] = flashcl__chain_launch(&chain, plan->dsinks, "flash_bwd_dsinks", 3, g_sinks, dot_local, e_dot);
    return flashcl__chain_end(&chain, want_dsinks ? 3 : 2, last, call->event);
}
