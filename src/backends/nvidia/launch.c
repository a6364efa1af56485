/*
 * The NVIDIA tensor-core backward (cl/flash_bwd_mma.cl): D = rowsum(dO * O),
 * then dK/dV per key block and dQ per query block (and d(sinks) per head), all
 * after D, no atomics. Above d = 128 (TF32: 64) dK/dV is two kernels: dV, one
 * work-group per key block owning every output dim, then dK, whose blocks are
 * two work-groups (one per half of the output dims); dQ owns every output dim.
 */
#include "nvidia.h"
#include "../../backward_args.h"

#include <stdlib.h>
#include <string.h>

#define MMA_BWD_BLOCK 64 /* 16 * MMA_WARPS: keys per dK/dV work-group, rows per dQ work-group */

/* The dS scratch of an MB_DS build (cl/flash_bwd_mma.cl): per (sequence, query head) one
   key-major bf16/f16 matrix, keys rounded up to 64-blocks, query columns to dQ blocks; 0 when the
   call keeps flash_bwd_mma_dq: no MB_DS build, FLASHCL_BWD_DS=0 (for measurements), or more than
   an eighth of the device memory (the scratch stays with the context until it is released or
   destroyed; a bound that leaves a training step's own memory to it). */
size_t flashcl__mma_ds_bytes(const flashcl_context *ctx, const flashcl_attention_desc *d, const flashcl__mma_bwd *plan,
                             size_t *keys, size_t *pitch) {
    const size_t bl = MMA_BWD_BLOCK, rows = (size_t)plan->dq_ds_rows;
    *keys = *pitch = 0;
    const char *env = getenv("FLASHCL_BWD_DS");
    if (!plan->dq_ds || (env && strcmp(env, "0") == 0)) return 0;
    *keys = (d->max_seqlen_k + bl - 1) / bl * bl;
    *pitch = (d->max_seqlen_q + rows - 1) / rows * rows; /* whole dQ blocks */
    if (*keys == 0 || *pitch == 0) return 0;
    const double bytes = (double)d->batch * (double)d->heads_q * (double)*keys * (double)*pitch * 2.0;
    if (bytes > (double)ctx->info.global_mem_bytes / 8 || bytes > (double)ctx->info.max_alloc_bytes) return 0;
    return (size_t)bytes;
}

flashcl_status flashcl__mma_backward(flashcl_context *ctx, const flashcl__call *call) {
    const flashcl_attention_desc *d = call->d;
    const flashcl_tensor *views = call->views;
    const flashcl__mma_bwd *plan = NULL;
    flashcl_status st = flashcl__mma_backward_plan_for(ctx, d, &plan);
    if (st != FLASHCL_SUCCESS) return st;
    cl_mem dsum = NULL, ds = NULL;
    st = flashcl__bwd_dsum(ctx, d, &dsum);
    if (st != FLASHCL_SUCCESS) return st;
    size_t ds_keys = 0, ds_pitch = 0;
    const size_t ds_bytes = flashcl__mma_ds_bytes(ctx, d, plan, &ds_keys, &ds_pitch);
    /* A device too full for the scratch (training near its memory) recomputes dS instead. */
    if (ds_bytes &&
        flashcl__scratch(ctx, FLASHCL__SCRATCH_SCORES, ds_bytes, "backward: dS for dQ", &ds) != FLASHCL_SUCCESS) {
        flashcl__clear_error(ctx);
        ds = NULL;
    }

    /* Totals (packed rows with varlen): the kernels find each sequence through cu_seqlens. */
    const int want_dsinks = d->dsinks != NULL && plan->dsinks != NULL;
    static const char *const names[3] = {"flash_bwd_mma_dot", "flash_bwd_mma_dkdv", "flash_bwd_mma_dq"};
    flashcl__args dot = flashcl__args_for(plan->k[0], names[0]);
    flashcl__arg_bwd_dot(&dot, call, dsum);
    st = flashcl__args_check(ctx, &dot);
    /* k[3], the dK-only part of a sliced build, takes the dK/dV kernel's arguments. */
    /* dQ's kernel: from dS (its arguments flash_bwd_mma_dq's and the scratch's), or recomputing it. */
    cl_kernel dq = ds ? plan->dq_ds : plan->k[2];
    const char *dq_name = ds ? "flash_bwd_mma_dq_ds" : names[2];
    for (int m = 1; m < 4 && st == FLASHCL_SUCCESS; ++m) {
        if (!plan->k[m]) continue;
        flashcl__args a =
            m == 2 ? flashcl__args_for(dq, dq_name) : flashcl__args_for(plan->k[m], names[m == 3 ? 1 : m]);
        flashcl__arg_bwd_main(&a, call, dsum, m == 2);
        if (plan->plain)
            flashcl__arg_int(&a, d->causal != 0); /* MMA_PLAIN kernels: causal is their last argument */
        else
            flashcl__arg_variants(&a, d, views[FLASHCL__VQ].buffer);
        /* Every dK/dV kernel of an MB_DS build takes the scratch (the dK one stores to it, a pitch of 0
           stores nothing; the sliced dV part ignores it); dQ reads it. */
        if (plan->dq_ds && (m != 2 || ds)) {
            flashcl__arg_mem(&a, ds ? ds : dsum);
            flashcl__arg_ulong(&a, ds_keys);
            flashcl__arg_ulong(&a, ds ? ds_pitch : 0);
        }
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
    /* From dS, dQ waits for the dK/dV kernel that writes it (the dK part when sliced: launched last). */
    const size_t g_ds[3] = {ds ? ds_pitch / (size_t)plan->dq_ds_rows * wg : 0, d->heads_q, d->batch}; /* its blocks */
    last[n] = flashcl__chain_launch(&chain, dq, dq_name, 3, ds ? g_ds : g_rows, main_local, ds ? last[n - 1] : e_dot);
    ++n;
    if (want_dsinks)
        last[n++] = flashcl__chain_launch(&chain, plan->dsinks, "flash_bwd_dsinks", 3, g_sinks, sink_local, e_dot);
    return flashcl__chain_end(&chain, n, last, call->event);
}
