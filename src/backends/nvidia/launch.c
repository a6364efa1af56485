/*
 * The NVIDIA tensor-core backward (cl/flash_bwd_mma.cl): D = rowsum(dO * O),
 * then dK/dV per key block and dQ per query block (and d(sinks) per head), all
 * after D, no atomics. Above d = 128 (TF32: 64) dK/dV is two kernels: dV, one
 * work-group per key block owning every output dim, then dK, whose blocks are
 * two work-groups (one per half of the output dims); dQ owns every output dim.
 * With the dS scratch (16-bit) the dK half is instead the dS part (one
 * work-group per key block storing dS^T) and flash_bwd_mma_dk_ds (dK = dS^T Q),
 * so S and dP are computed once per pair for dK, not once per slice; where a
 * second scratch fits, the dS part also stores (P Z)^T and flash_bwd_mma_dk_ds
 * forms dV from it, in place of the dV kernel.
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

/* 1 when the dK from dS above d = 128 (the dS part and dk_ds) runs with the scratch: a sliced MB_DS
   build, unless FLASHCL_BWD_DK_DS=0 (the dK slices, for measurements). */
static int dk_from_ds_wanted(const flashcl__mma_bwd *plan) {
    const char *env = getenv("FLASHCL_BWD_DK_DS");
    return plan->ds_part && plan->dk_ds && !(env && strcmp(env, "0") == 0);
}

/* The (P Z)^T scratch beside the dS one (as large): where dK comes from dS and both fit in an eighth
   of the device memory, unless FLASHCL_BWD_DV_PS=0; then dV is formed from it too and the dV part
   is not launched. */
size_t flashcl__mma_ps_bytes(const flashcl_context *ctx, const flashcl__mma_bwd *plan, size_t ds_bytes) {
    const char *env = getenv("FLASHCL_BWD_DV_PS");
    if (!ds_bytes || !plan->dv_ps || !dk_from_ds_wanted(plan) || (env && strcmp(env, "0") == 0)) return 0;
    return (double)ds_bytes * 2.0 > (double)ctx->info.global_mem_bytes / 8 ? 0 : ds_bytes;
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
    /* dQ's kernel: from dS (its arguments flash_bwd_mma_dq's and the scratch's), or recomputing it. */
    cl_kernel dq = ds ? plan->dq_ds : plan->k[2];
    const char *dq_name = ds ? "flash_bwd_mma_dq_ds" : names[2];
    /* Sliced: dK from the scratch (the dS part, then dk_ds), or the dK slices k[3] without it; and
       with the (P Z)^T scratch too, dV from it (dk_ds again) in place of the dV part. */
    const int dk_from_ds = ds && dk_from_ds_wanted(plan);
    cl_mem ps = NULL;
    const size_t ps_bytes = dk_from_ds ? flashcl__mma_ps_bytes(ctx, plan, ds_bytes) : 0;
    if (ps_bytes &&
        flashcl__scratch(ctx, FLASHCL__SCRATCH_SCORES2, ps_bytes, "backward: (P Z)^T for dV", &ps) != FLASHCL_SUCCESS) {
        flashcl__clear_error(ctx);
        ps = NULL;
    }
    /* The main kernels [dK/dV or the dV part, dQ, the dK slices or the dS part, dk_ds, dk_ds forming
       dV]: all but dQ take the dK/dV kernel's arguments. */
    cl_kernel mains[5] = {ps ? NULL : plan->k[1], dq, dk_from_ds ? plan->ds_part : plan->k[3],
                          dk_from_ds ? plan->dk_ds : NULL, ps ? plan->dv_ps : NULL};
    /* (The dS part is flash_bwd_mma_dkdv too: named apart so that a trace tells it from the dV part;
       dk_ds forming dV likewise.) */
    const char *const main_names[5] = {names[1], dq_name, dk_from_ds ? "flash_bwd_mma_dkdv (dS part)" : names[1],
                                       "flash_bwd_mma_dk_ds", "flash_bwd_mma_dk_ds (dV)"};
    for (int m = 0; m < 5 && st == FLASHCL_SUCCESS; ++m) {
        if (!mains[m]) continue;
        flashcl__args a = flashcl__args_for(mains[m], main_names[m]);
        flashcl__arg_bwd_main(&a, call, dsum, m == 1);
        if (plan->plain)
            flashcl__arg_int(&a, d->causal != 0); /* MMA_PLAIN kernels: causal is their last argument */
        else
            flashcl__arg_variants(&a, d, views[FLASHCL__VQ].buffer);
        /* Every dK/dV kernel of an MB_DS build takes the scratch (the dK or dS one stores to it, a pitch
           of 0 stores nothing; the sliced dV part ignores it); dQ and dk_ds read it. */
        if (plan->dq_ds && (m != 1 || ds)) {
            flashcl__arg_mem(&a, ds ? ds : dsum);
            flashcl__arg_ulong(&a, ds_keys);
            flashcl__arg_ulong(&a, ds ? ds_pitch : 0);
        }
        if (dk_from_ds && m >= 2) { /* the (P Z)^T scratch (the dS scratch, unused, without it) */
            flashcl__arg_mem(&a, ps ? ps : ds);
            flashcl__arg_int(&a, m == 2 ? ps != NULL : m == 4); /* the dS part's p_store, dk_ds's which */
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
    int last[6], n = 0;
    if (mains[0])
        last[n++] = flashcl__chain_launch(&chain, mains[0], names[1], 3, plan->k[3] ? g_dv : g_keys, main_local, e_dot);
    /* The dS part's grid is the dV part's: one work-group per key block. */
    if (mains[2])
        last[n++] =
            flashcl__chain_launch(&chain, mains[2], main_names[2], 3, dk_from_ds ? g_dv : g_keys, main_local, e_dot);
    const int e_ds = last[n - 1]; /* the kernel that writes dS (launched last so far) */
    if (mains[3]) last[n++] = flashcl__chain_launch(&chain, mains[3], main_names[3], 3, g_dv, main_local, e_ds);
    if (mains[4]) last[n++] = flashcl__chain_launch(&chain, mains[4], main_names[4], 3, g_dv, main_local, e_ds);
    /* From dS, dQ waits for the dK/dV kernel that writes it. */
    const size_t g_ds[3] = {ds ? ds_pitch / (size_t)plan->dq_ds_rows * wg : 0, d->heads_q, d->batch}; /* its blocks */
    last[n] = flashcl__chain_launch(&chain, dq, dq_name, 3, ds ? g_ds : g_rows, main_local, ds ? e_ds : e_dot);
    ++n;
    if (want_dsinks)
        last[n++] = flashcl__chain_launch(&chain, plan->dsinks, "flash_bwd_dsinks", 3, g_sinks, sink_local, e_dot);
    return flashcl__chain_end(&chain, n, last, call->event);
}
