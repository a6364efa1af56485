/*
 * Launches of the CPU kernel family (cl/flash_cpu.cl): the side a kernel
 * streams (K and V; for dK/dV, Q and dO) is first packed into dense
 * context scratch by flash_cpu_pack, then the main kernels run over blocks
 * of plan rows with work-groups of one. All commands are chained by events.
 * With varlen the grids cover the longest sequence (max_seqlen_q/k; blocks
 * past a shorter one return at once) and each head's packed copy holds the
 * rows of every sequence (the views' totals) and one chunk of padding.
 */
#include "cpu.h"
#include "../../backward_args.h"
#include "../../launch.h"

#include <stdio.h>

static size_t blocks_of(size_t rows, size_t block) { return (rows + block - 1) / block; }

/* Rows of one head's packed copy (cpu_pack_rows in the kernel): the view's rows padded to whole
   chunks, or with varlen its total rows and one chunk more. */
static size_t pack_rows(const flashcl_attention_desc *d, size_t rows, int chunk) {
    if (flashcl__is_varlen(d)) return rows + (size_t)chunk;
    return (rows + (size_t)chunk - 1) / (size_t)chunk * (size_t)chunk;
}

/* The batches of a packed copy: one [total] copy per head with varlen. */
static size_t pack_batches(const flashcl_attention_desc *d) { return flashcl__is_varlen(d) ? 1 : d->batch; }

/* Bytes of a packed copy of `dim` columns, rounded up to whole micro-tiles (mirrors the kernel). */
static size_t packed_bytes(const flashcl_attention_desc *d, size_t heads, size_t rows, size_t dim, int chunk) {
    const size_t step = 6, pitch = (dim + step - 1) / step * step;
    return pack_batches(d) * heads * pack_rows(d, rows, chunk) * pitch * sizeof(float);
}

/* Bytes of the fused backward's float32 dQ rows: the packed layout with rows of d rounded up to
   whole float16s (DIM_PAD16 in the kernel). */
static size_t dq_scratch_bytes(const flashcl_attention_desc *d, int chunk) {
    const size_t pitch = (d->head_dim + 15) / 16 * 16;
    return pack_batches(d) * d->heads_q * pack_rows(d, d->seqlen_q, chunk) * pitch * sizeof(float);
}

int flashcl__cpu_bwd_fused(flashcl_context *ctx, const flashcl__cpu_plan *plan, const flashcl_attention_desc *d,
                           char *why, size_t cap) {
    const size_t items = d->batch * d->heads_kv, units = ctx->info.compute_units;
    flashcl__bwd_override ov;
    if (flashcl__read_bwd_override(NULL, &ov) == FLASHCL_SUCCESS && ov.fused >= 0) {
        if (why)
            snprintf(why, cap, "%s (FLASHCL_BWD_KERNEL fused=%d)",
                     ov.fused ? "fused backward flash_bwd_cpu_fused" : "two-kernel backward (dK/dV, dQ)", ov.fused);
        return ov.fused;
    }
    /* The fused pass computes S and dP once (5 products per tile, not 7) but has one work-item
       per (sequence, KV head) instead of one per block of keys or rows. Measured on 2 cores
       (b1 N2048 d64 bf16 backward, main's split form against fused): 1 work-item 130 vs 190-270
       ms (a core idles), 2 work-items 160 vs 121, 3 (the last one alone on a core) 140 vs 116-123,
       8: 160-178 vs 119-135. So: fused once every core has a work-item. */
    const int enough = items >= (size_t)units;
    const int fits = dq_scratch_bytes(d, plan->pub.block_cols) <= ctx->info.max_alloc_bytes;
    if (why) {
        if (enough && fits)
            snprintf(why, cap,
                     "fused backward flash_bwd_cpu_fused: batch*heads_kv = %zu work-items >= %zu "
                     "compute units",
                     items, units);
        else if (!fits)
            snprintf(why, cap,
                     "two-kernel backward (dK/dV, dQ): the fused form's float32 dQ scratch exceeds the "
                     "device's largest allocation");
        else
            snprintf(why, cap,
                     "two-kernel backward (dK/dV, dQ): batch*heads_kv = %zu work-items < %zu compute "
                     "units, too few for the fused form",
                     items, units);
    }
    return enough && fits;
}

size_t flashcl__cpu_packed_scratch(flashcl_context *ctx, const flashcl__cpu_plan *plan, flashcl__pass pass,
                                   const flashcl_attention_desc *d) {
    const int chunk = plan->pub.block_cols;
    /* The fused backward reads K and V in place and holds dQ in float32 instead. */
    size_t bytes = pass == FLASHCL__BACKWARD && flashcl__cpu_bwd_fused(ctx, plan, d, NULL, 0)
                       ? dq_scratch_bytes(d, chunk)
                       : packed_bytes(d, d->heads_kv, d->seqlen_k, d->head_dim, chunk) +
                             packed_bytes(d, d->heads_kv, d->seqlen_k, d->head_dim_v, chunk);
    if (pass == FLASHCL__BACKWARD)
        bytes += packed_bytes(d, d->heads_q, d->seqlen_q, d->head_dim, chunk) +
                 packed_bytes(d, d->heads_q, d->seqlen_q, d->head_dim_v, chunk);
    return bytes;
}

/* One packed copy: scratch slot `slot` gets view t (heads x rows x dim; rows: the totals with varlen). */
typedef struct {
    const flashcl_tensor *view;
    size_t heads, rows, dim;
    int slot;
    const char *what;
} pack_job;

/* Enqueues the packs on the chain (each after its start); out[i] is the packed buffer, launch[i] its index. */
static flashcl_status enqueue_packs(flashcl_context *ctx, flashcl__chain *chain, cl_kernel pack,
                                    const flashcl_attention_desc *d, size_t block, int chunk, const pack_job *jobs,
                                    int count, cl_mem *out, int *launch) {
    for (int i = 0; i < count; ++i) {
        const pack_job *j = &jobs[i];
        flashcl_status st =
            flashcl__scratch(ctx, j->slot, packed_bytes(d, j->heads, j->rows, j->dim, chunk), j->what, &out[i]);
        if (st != FLASHCL_SUCCESS) return st;
        flashcl__args a = flashcl__args_for(pack, "flash_cpu_pack");
        flashcl__arg_view(&a, j->view);
        flashcl__arg_mem(&a, out[i]);
        flashcl__arg_int(&a, (cl_int)j->rows);
        flashcl__arg_int(&a, (cl_int)j->heads);
        flashcl__arg_int(&a, (cl_int)j->dim);
        st = flashcl__args_check(ctx, &a);
        if (st != FLASHCL_SUCCESS) return st;
        const size_t global[3] = {blocks_of(pack_rows(d, j->rows, chunk), block), j->heads, pack_batches(d)};
        const size_t local[3] = {1, 1, 1};
        launch[i] = flashcl__chain_launch(chain, pack, "flash_cpu_pack", 3, global, local, FLASHCL__AFTER_START);
        if (chain->status != FLASHCL_SUCCESS) return chain->status;
    }
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl__cpu_forward(flashcl_context *ctx, const flashcl__call *call) {
    const flashcl_attention_desc *d = call->d;
    const flashcl_tensor *views = call->views;
    const flashcl__cpu_plan *plan = NULL;
    flashcl_status st = flashcl__cpu_plan_for(ctx, FLASHCL__FORWARD, d, &plan);
    if (st != FLASHCL_SUCCESS) return st;
    const size_t block = (size_t)plan->pub.block_rows;
    flashcl__chain chain;
    st = flashcl__chain_begin(&chain, ctx, call->num_wait, call->wait_list, 1);
    if (st != FLASHCL_SUCCESS) return st;
    const pack_job jobs[2] = {
        {&views[FLASHCL__VK], d->heads_kv, d->seqlen_k, d->head_dim, FLASHCL__SCRATCH_SCORES, "forward: packed K"},
        {&views[FLASHCL__VV], d->heads_kv, d->seqlen_k, d->head_dim_v, FLASHCL__SCRATCH_SCORES2, "forward: packed V"}};
    cl_mem packed[2];
    int packs[2];
    st = enqueue_packs(ctx, &chain, plan->pack, d, block, plan->pub.block_cols, jobs, 2, packed, packs);
    if (st != FLASHCL_SUCCESS) return flashcl__chain_abort(&chain, st);

    cl_kernel kernel = plan->main[0];
    flashcl__args a = flashcl__args_for(kernel, FLASHCL__CPU_FWD_KERNEL);
    flashcl__arg_view(&a, &views[FLASHCL__VQ]);
    flashcl__arg_mem(&a, packed[0]);
    flashcl__arg_mem(&a, packed[1]);
    flashcl__arg_view(&a, &views[FLASHCL__VO]);
    /* Q's buffer stands in for absent buffers (LSE, the inputs of variants that are off): never written. */
    flashcl__arg_forward(&a, d, call->lse, call->lse_offset, views[FLASHCL__VQ].buffer);
    flashcl__arg_variants(&a, d, views[FLASHCL__VQ].buffer);
    st = flashcl__args_check(ctx, &a);
    if (st != FLASHCL_SUCCESS) return flashcl__chain_abort(&chain, st);
    /* max_seqlen_q: the totals' rows without varlen; with it, blocks past a shorter sequence return at once. */
    const size_t global[3] = {blocks_of(d->max_seqlen_q, block), d->heads_q, d->batch}, local[3] = {1, 1, 1};
    const int done = flashcl__chain_launch_after(&chain, kernel, FLASHCL__CPU_FWD_KERNEL, 3, global, local, 2, packs);
    return flashcl__chain_end(&chain, 1, &done, call->event);
}

/* The scalars and variant arguments both backward kernels end with (dummy: for the buffers of variants that are off). */
static void arg_scalars(flashcl__args *a, const flashcl_attention_desc *d, cl_mem dummy) {
    flashcl__arg_backward_sizes(a, d);
    flashcl__arg_variants(a, d, dummy);
}

flashcl_status flashcl__cpu_backward(flashcl_context *ctx, const flashcl__call *call) {
    const flashcl_attention_desc *d = call->d;
    const flashcl_tensor *views = call->views;
    const flashcl__cpu_plan *plan = NULL;
    flashcl_status st = flashcl__cpu_plan_for(ctx, FLASHCL__BACKWARD, d, &plan);
    if (st != FLASHCL_SUCCESS) return st;
    const size_t block = (size_t)plan->pub.block_rows;
    cl_mem dsum = NULL;
    st = flashcl__bwd_dsum(ctx, d, &dsum);
    if (st != FLASHCL_SUCCESS) return st;
    flashcl__chain chain;
    st = flashcl__chain_begin(&chain, ctx, call->num_wait, call->wait_list, 1);
    if (st != FLASHCL_SUCCESS) return st;
    const pack_job jobs[4] = {
        {&views[FLASHCL__VQ], d->heads_q, d->seqlen_q, d->head_dim, FLASHCL__SCRATCH_GRADS, "backward: packed Q"},
        {&views[FLASHCL__VDO], d->heads_q, d->seqlen_q, d->head_dim_v, FLASHCL__SCRATCH_GRADS2, "backward: packed dO"},
        {&views[FLASHCL__VK], d->heads_kv, d->seqlen_k, d->head_dim, FLASHCL__SCRATCH_SCORES, "backward: packed K"},
        {&views[FLASHCL__VV], d->heads_kv, d->seqlen_k, d->head_dim_v, FLASHCL__SCRATCH_SCORES2, "backward: packed V"},
    };
    /* The fused form streams Q and dO only (K and V are read in place) and keeps dQ in float32 scratch. */
    const int fused = flashcl__cpu_bwd_fused(ctx, plan, d, NULL, 0);
    cl_mem packed[4]; /* Qp, dOp, Kp, Vp */
    int packs[4];
    st = enqueue_packs(ctx, &chain, plan->pack, d, block, plan->pub.block_cols, jobs, fused ? 2 : 4, packed, packs);
    cl_mem dqs = NULL;
    if (st == FLASHCL_SUCCESS && fused)
        st = flashcl__scratch(ctx, FLASHCL__SCRATCH_SCORES, dq_scratch_bytes(d, plan->pub.block_cols),
                              "backward: float32 dQ (fused)", &dqs);
    if (st != FLASHCL_SUCCESS) return flashcl__chain_abort(&chain, st);

    /* flash_bwd_cpu_dot(dO, O, Dsum, sq, hq, cu_q); flash_bwd_cpu_dkdv(Qp, dOp, K, V, LSE, lse_off, Dsum, dK, dV,
       scalars) or flash_bwd_cpu_fused(the same, dQs, dQ before the scalars); flash_bwd_cpu_dq(Q, dO, Kp, Vp, LSE,
       lse_off, Dsum, dQ, scalars). */
    flashcl__args dot = flashcl__args_for(plan->main[0], "flash_bwd_cpu_dot");
    flashcl__arg_view(&dot, &views[FLASHCL__VDO]);
    flashcl__arg_view(&dot, &views[FLASHCL__VO]);
    flashcl__arg_mem(&dot, dsum);
    flashcl__arg_int(&dot, (cl_int)d->seqlen_q);
    flashcl__arg_int(&dot, (cl_int)d->heads_q);
    flashcl__arg_mem(&dot, d->cu_seqlens_q ? d->cu_seqlens_q : views[FLASHCL__VQ].buffer); /* unread without varlen */
    cl_kernel kv_kernel = plan->main[fused ? 4 : 1];
    const char *kv_name = fused ? FLASHCL__CPU_FUSED_KERNEL : FLASHCL__CPU_DKDV_KERNEL;
    flashcl__args dkdv = flashcl__args_for(kv_kernel, kv_name);
    flashcl__arg_mem(&dkdv, packed[0]);
    flashcl__arg_mem(&dkdv, packed[1]);
    flashcl__arg_view(&dkdv, &views[FLASHCL__VK]);
    flashcl__arg_view(&dkdv, &views[FLASHCL__VV]);
    flashcl__arg_mem(&dkdv, call->lse);
    flashcl__arg_ulong(&dkdv, call->lse_offset);
    flashcl__arg_mem(&dkdv, dsum);
    flashcl__arg_view(&dkdv, &views[FLASHCL__VDK]);
    flashcl__arg_view(&dkdv, &views[FLASHCL__VDV]);
    if (fused) {
        flashcl__arg_mem(&dkdv, dqs);
        flashcl__arg_view(&dkdv, &views[FLASHCL__VDQ]);
    }
    arg_scalars(&dkdv, d, views[FLASHCL__VQ].buffer);
    flashcl__args dq = flashcl__args_for(plan->main[2], "flash_bwd_cpu_dq");
    if (!fused) {
        flashcl__arg_view(&dq, &views[FLASHCL__VQ]);
        flashcl__arg_view(&dq, &views[FLASHCL__VDO]);
        flashcl__arg_mem(&dq, packed[2]);
        flashcl__arg_mem(&dq, packed[3]);
        flashcl__arg_mem(&dq, call->lse);
        flashcl__arg_ulong(&dq, call->lse_offset);
        flashcl__arg_mem(&dq, dsum);
        flashcl__arg_view(&dq, &views[FLASHCL__VDQ]);
        arg_scalars(&dq, d, views[FLASHCL__VQ].buffer);
    }
    st = flashcl__args_check(ctx, &dot);
    if (st == FLASHCL_SUCCESS) st = flashcl__args_check(ctx, &dkdv);
    if (st == FLASHCL_SUCCESS && !fused) st = flashcl__args_check(ctx, &dq);
    /* flash_bwd_cpu_dsinks(LSE, lse_off, Dsum, dsinks, dsinks_off, batch, sq, sk, hq, variants): only
       when the caller asked for the sinks' gradient (the plan builds it for every sinks call). */
    const int want_dsinks = d->dsinks != NULL && plan->main[3] != NULL;
    flashcl__args sinks = flashcl__args_for(plan->main[3], "flash_bwd_cpu_dsinks");
    if (st == FLASHCL_SUCCESS && want_dsinks) {
        flashcl__arg_mem(&sinks, call->lse);
        flashcl__arg_ulong(&sinks, call->lse_offset);
        flashcl__arg_mem(&sinks, dsum);
        flashcl__arg_mem(&sinks, d->dsinks);
        flashcl__arg_ulong(&sinks, d->dsinks_offset);
        flashcl__arg_int(&sinks, (cl_int)d->batch);
        flashcl__arg_int(&sinks, (cl_int)d->seqlen_q);
        flashcl__arg_int(&sinks, (cl_int)d->seqlen_k);
        flashcl__arg_int(&sinks, (cl_int)d->heads_q);
        flashcl__arg_variants(&sinks, d, views[FLASHCL__VQ].buffer);
        st = flashcl__args_check(ctx, &sinks);
    }
    if (st != FLASHCL_SUCCESS) return flashcl__chain_abort(&chain, st);

    const size_t one[3] = {1, 1, 1};
    const size_t g_rows[3] = {blocks_of(d->max_seqlen_q, block), d->heads_q, d->batch};
    const size_t g_keys[3] = {blocks_of(d->max_seqlen_k, block), d->heads_kv, d->batch};
    const size_t g_heads[3] = {1, d->heads_kv, d->batch}; /* fused: every key block of a (sequence, KV head) */
    const int e_dot =
        flashcl__chain_launch(&chain, plan->main[0], "flash_bwd_cpu_dot", 3, g_rows, one, FLASHCL__AFTER_START);
    const int dkdv_after[3] = {packs[0], packs[1], e_dot}; /* dK/dV (and fused dQ) read packed Q, dO and D */
    int last[3], n = 0;
    last[n++] =
        flashcl__chain_launch_after(&chain, kv_kernel, kv_name, 3, fused ? g_heads : g_keys, one, 3, dkdv_after);
    if (!fused) {
        const int dq_after[3] = {packs[2], packs[3], e_dot}; /* dQ reads packed K, V and D */
        last[n++] = flashcl__chain_launch_after(&chain, plan->main[2], "flash_bwd_cpu_dq", 3, g_rows, one, 3, dq_after);
    }
    if (want_dsinks) {
        const size_t g_sinks[3] = {1, d->heads_q, 1}; /* one work-item per head */
        last[n++] = flashcl__chain_launch(&chain, plan->main[3], "flash_bwd_cpu_dsinks", 3, g_sinks, one, e_dot);
    }
    return flashcl__chain_end(&chain, n, last, call->event);
}
