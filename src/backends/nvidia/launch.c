/*
 * The NVIDIA tensor-core backward (cl/flash_bwd_mma.cl): D = rowsum(dO * O),
 * then dK/dV per key block and dQ per query block (and d(sinks) per head), all
 * after D, no atomics. Above d = 128 (TF32: 64) dK/dV is two kernels: dV, one
 * work-group per key block owning every output dim, then dK, whose blocks are
 * two work-groups (one per half of the output dims); dQ owns every output dim.
 */
#include "nvidia.h"
#include "../../backward_args.h"

#define MMA_BWD_BLOCK 64 /* 16 * MMA_WARPS: keys per dK/dV work-group, rows per dQ work-group */

flashcl_status flashcl__mma_backward(flashcl_context *ctx, const flashcl__call *call) {
    const flashcl_attention_desc *d = call->d;
    const flashcl_tensor *views = call->views;
    const flashcl__mma_bwd *plan = NULL;
    flashcl_status st = flashcl__mma_backward_plan_for(ctx, d, &plan);
    if (st != FLASHCL_SUCCESS) return st;
    cl_mem dsum = NULL;
    st = flashcl__bwd_dsum(ctx, d, &dsum);
    if (st != FLASHCL_SUCCESS) return st;

    /* Totals (packed rows with varlen): the kernels find each sequence through cu_seqlens. */
    const int want_dsinks = d->dsinks != NULL && plan->dsinks != NULL;
    static const char *const names[3] = {"flash_bwd_mma_dot", "flash_bwd_mma_dkdv", "flash_bwd_mma_dq"};
    flashcl__args dot = flashcl__args_for(plan->k[0], names[0]);
    flashcl__arg_bwd_dot(&dot, call, dsum);
    st = flashcl__args_check(ctx, &dot);
    /* k[3], the dK-only part of a sliced build, takes the dK/dV kernel's arguments. */
    for (int m = 1; m < 4 && st == FLASHCL_SUCCESS; ++m) {
        if (!plan->k[m]) continue;
        flashcl__args a = flashcl__args_for(plan->k[m], names[m == 3 ? 1 : m]);
        flashcl__arg_bwd_main(&a, call, dsum, m == 2);
        if (plan->plain)
            flashcl__arg_int(&a, d->causal != 0); /* MMA_PLAIN kernels: causal is their last argument */
        else
            flashcl__arg_variants(&a, d, views[FLASHCL__VQ].buffer);
        st = flashcl__args_check(ctx, &a);
    }
    if (st == FLASHCL_SUCCESS && want_dsinks) st = flashcl__bwd_dsinks_args(ctx, plan->dsinks, call, dsum);
    if (st != FLASHCL_SUCCESS) return st;

    /* With varlen the grids cover the longest sequence; blocks past a shorter one return at once. */
    const size_t wg = 32 * MMA_BWD_BLOCK / 16, bl = MMA_BWD_BLOCK, dot_wg = 64, sw = FLASHCL__MMA_DSINKS_WG;
    const size_t dot_local[3] = {dot_wg, 1, 1}, main_local[3] = {wg, 1, 1}, sink_local[3] = {sw, 1, 1};
    const size_t msq = d->max_seqlen_q, msk = d->max_seqlen_k;
    const size_t g_dot[3] = {(msq + dot_wg - 1) / dot_wg * dot_wg, d->heads_q, d->batch};
    const size_t sl = (size_t)plan->slices; /* work-groups per block: one per output slice */
    const size_t g_keys[3] = {(msk + bl - 1) / bl * wg * sl, d->heads_kv, d->batch};
    const size_t g_dv[3] = {(msk + bl - 1) / bl * wg, d->heads_kv, d->batch};  /* the sliced dV part: every dim */
    const size_t g_rows[3] = {(msq + bl - 1) / bl * wg, d->heads_q, d->batch}; /* dQ: every output dim */
    const size_t g_sinks[3] = {sw, d->heads_q, 1};                             /* one work-group per head */
    flashcl__chain chain;
    st = flashcl__chain_begin(&chain, ctx, call->num_wait, call->wait_list, 1);
    if (st != FLASHCL_SUCCESS) return st;
    const int e_dot = flashcl__chain_launch(&chain, plan->k[0], names[0], 3, g_dot, dot_local, FLASHCL__AFTER_START);
    int last[4], n = 0;
    last[n++] = flashcl__chain_launch(&chain, plan->k[1], names[1], 3, plan->k[3] ? g_dv : g_keys, main_local, e_dot);
    if (plan->k[3]) last[n++] = flashcl__chain_launch(&chain, plan->k[3], names[1], 3, g_keys, main_local, e_dot);
    last[n++] = flashcl__chain_launch(&chain, plan->k[2], names[2], 3, g_rows, main_local, e_dot);
    if (want_dsinks)
        last[n++] = flashcl__chain_launch(&chain, plan->dsinks, "flash_bwd_dsinks", 3, g_sinks, sink_local, e_dot);
    return flashcl__chain_end(&chain, n, last, call->event);
}
