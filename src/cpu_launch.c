/*
 * Launches of the CPU kernel family (cl/flash_cpu.cl): the side a kernel
 * streams (K and V; for dK/dV, Q and dO) is first packed into dense
 * context scratch by flash_cpu_pack, then the main kernels run over blocks
 * of plan rows with work-groups of one. All commands are chained by events.
 */
#include "cpu_family.h"


static size_t blocks_of(size_t rows, size_t block) { return (rows + block - 1) / block; }

/* Bytes of a packed copy: rows padded to whole chunks, head dim to whole micro-tiles (mirrors the kernel). */
static size_t packed_bytes(const flashcl_attention_desc *d, size_t heads, size_t rows, int chunk) {
    const size_t step = 6, dim_pad = (d->head_dim + step - 1) / step * step;
    const size_t padded = (rows + (size_t)chunk - 1) / (size_t)chunk * (size_t)chunk;
    return d->batch * heads * padded * dim_pad * sizeof(float);
}

size_t flashcl__cpu_forward_scratch_bytes(const flashcl__flash_plan *plan, const flashcl_attention_desc *d) {
    return 2 * packed_bytes(d, d->heads_kv, d->seqlen_k, plan->pub.block_cols);
}

size_t flashcl__cpu_backward_scratch_bytes(const flashcl__backward_plan *plan, const flashcl_attention_desc *d) {
    return 2 * packed_bytes(d, d->heads_kv, d->seqlen_k, plan->pub.block_cols) +
           2 * packed_bytes(d, d->heads_q, d->seqlen_q, plan->pub.block_cols);
}

/* One packed copy: scratch slot `slot` gets view t (heads x rows), after the events in waits. */
typedef struct {
    const flashcl_tensor *view;
    size_t heads, rows;
    int slot;
    const char *what;
} pack_job;

/* Enqueues the packs in order (each waits for `waits`); out[i] is the packed buffer; *done the last event. */
static flashcl_status enqueue_packs(flashcl_context *ctx, cl_kernel pack, const flashcl_attention_desc *d,
                                    size_t block, int chunk, const pack_job *jobs, int count,
                                    const flashcl__waits *waits, cl_mem *out, cl_event *events) {
    flashcl_status st = FLASHCL_SUCCESS;
    int i = 0;
    for (; i < count && st == FLASHCL_SUCCESS; ++i) {
        const pack_job *j = &jobs[i];
        st = flashcl__scratch(ctx, j->slot, packed_bytes(d, j->heads, j->rows, chunk), j->what, &out[i]);
        if (st != FLASHCL_SUCCESS) break;
        cl_int rows = (cl_int)j->rows, heads = (cl_int)j->heads;
        cl_uint arg = 0;
        cl_int err = flashcl__set_view_args(pack, &arg, j->view);
        if (err == CL_SUCCESS) err = clSetKernelArg(pack, arg++, sizeof out[i], &out[i]);
        if (err == CL_SUCCESS) err = clSetKernelArg(pack, arg++, sizeof rows, &rows);
        if (err == CL_SUCCESS) err = clSetKernelArg(pack, arg++, sizeof heads, &heads);
        if (err != CL_SUCCESS) {
            st = flashcl__fail_cl(ctx, err, "clSetKernelArg(flash_cpu_pack)");
            break;
        }
        const size_t padded = (j->rows + (size_t)chunk - 1) / (size_t)chunk * (size_t)chunk;
        size_t global[3] = {blocks_of(padded, block), j->heads, d->batch}, local[3] = {1, 1, 1};
        err = clEnqueueNDRangeKernel(ctx->queue, pack, 3, NULL, global, local, waits->count,
                                     waits->count ? waits->events : NULL, &events[i]);
        if (err != CL_SUCCESS) st = flashcl__fail_cl(ctx, err, "clEnqueueNDRangeKernel(flash_cpu_pack)");
    }
    /* A failure after some packs were enqueued: their events are ours to release
       (the commands still run; nothing reads their output). */
    if (st != FLASHCL_SUCCESS)
        for (int k = 0; k < i && k < count; ++k)
            if (events[k]) {
                clReleaseEvent(events[k]);
                events[k] = NULL;
            }
    return st;
}

static void release_events(cl_event *events, int count) {
    for (int i = 0; i < count; ++i)
        if (events[i]) clReleaseEvent(events[i]);
}

/* Records the call's last command as the scratch's user and hands it to the caller. */
static void finish_call(flashcl_context *ctx, cl_event last, cl_event *event) {
    flashcl__scratch_used_by(ctx, last);
    if (event) *event = last;
    else clReleaseEvent(last);
}

flashcl_status flashcl__enqueue_flash_cpu(flashcl_context *ctx, const flashcl__flash_plan *plan,
                                          const flashcl_attention_desc *d, const flashcl_tensor *views, cl_mem lse,
                                          size_t lse_offset, cl_uint num_wait, const cl_event *wait_list,
                                          cl_event *event) {
    const size_t block = (size_t)plan->pub.block_rows;
    const int chunk = plan->pub.block_cols;
    flashcl__waits waits;
    flashcl_status st = flashcl__scratch_waits(ctx, num_wait, wait_list, &waits);
    if (st != FLASHCL_SUCCESS) return st;
    const pack_job jobs[2] = {{&views[1], d->heads_kv, d->seqlen_k, FLASHCL__SCRATCH_SCORES, "forward: packed K"},
                              {&views[2], d->heads_kv, d->seqlen_k, FLASHCL__SCRATCH_SCORES2, "forward: packed V"}};
    cl_mem packed[2];
    cl_event packs[2] = {NULL, NULL};
    st = enqueue_packs(ctx, plan->pack, d, block, chunk, jobs, 2, &waits, packed, packs);
    if (st != FLASHCL_SUCCESS) return st;

    cl_kernel kernel = plan->kernel;
    cl_int causal = d->causal != 0;
    cl_uint arg = 0;
    cl_int err = flashcl__set_view_args(kernel, &arg, &views[0]);
    if (err == CL_SUCCESS) err = clSetKernelArg(kernel, arg++, sizeof packed[0], &packed[0]);
    if (err == CL_SUCCESS) err = clSetKernelArg(kernel, arg++, sizeof packed[1], &packed[1]);
    if (err == CL_SUCCESS) err = flashcl__set_view_args(kernel, &arg, &views[3]);
    if (err == CL_SUCCESS) err = flashcl__set_forward_args(kernel, &arg, d, lse, lse_offset, views[0].buffer);
    if (err == CL_SUCCESS) err = clSetKernelArg(kernel, arg++, sizeof causal, &causal);
    if (err != CL_SUCCESS) {
        release_events(packs, 2);
        return flashcl__fail_cl(ctx, err, "clSetKernelArg(flash_fwd_cpu)");
    }
    size_t global[3] = {blocks_of(d->seqlen_q, block), d->heads_q, d->batch}, local[3] = {1, 1, 1};
    cl_event last = NULL;
    err = clEnqueueNDRangeKernel(ctx->queue, kernel, 3, NULL, global, local, 2, packs, &last);
    release_events(packs, 2);
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clEnqueueNDRangeKernel(flash_fwd_cpu)");
    finish_call(ctx, last, event);
    return FLASHCL_SUCCESS;
}

/* The backward's views, in flashcl__enqueue_flash_backward's order. */
enum { BQ, BK, BV, BO, BDO, BDQ, BDK, BDV };

static cl_int set_scalars(cl_kernel k, cl_uint *arg, const flashcl_attention_desc *d) {
    cl_int sq = (cl_int)d->seqlen_q, sk = (cl_int)d->seqlen_k, hq = (cl_int)d->heads_q;
    cl_int group = (cl_int)(d->heads_q / d->heads_kv), causal = d->causal != 0;
    cl_float scale = d->scale, scale_log2 = (cl_float)(d->scale * FLASHCL__LOG2E);
    const size_t sz[] = {sizeof sq, sizeof sk, sizeof hq, sizeof group, sizeof scale_log2, sizeof scale, sizeof causal};
    const void *val[] = {&sq, &sk, &hq, &group, &scale_log2, &scale, &causal};
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < 7 && err == CL_SUCCESS; ++i) err = clSetKernelArg(k, (*arg)++, sz[i], val[i]);
    return err;
}

/* flash_bwd_cpu_dkdv(Qp, dOp, K, V, LSE, lse_off, Dsum, dK, dV, scalars) and
   flash_bwd_cpu_dq(Q, dO, Kp, Vp, LSE, lse_off, Dsum, dQ, scalars). */
static cl_int set_main_args(const flashcl__backward_plan *plan, const flashcl_tensor *views,
                            const flashcl_attention_desc *d, cl_mem lse, size_t lse_offset, cl_mem dsum,
                            const cl_mem packed[4] /* Qp, dOp, Kp, Vp */) {
    cl_ulong lse_off = lse_offset;
    cl_uint a = 0;
    cl_kernel k = plan->dkdv;
    cl_int err = clSetKernelArg(k, a++, sizeof(cl_mem), &packed[0]);
    if (err == CL_SUCCESS) err = clSetKernelArg(k, a++, sizeof(cl_mem), &packed[1]);
    if (err == CL_SUCCESS) err = flashcl__set_view_args(k, &a, &views[BK]);
    if (err == CL_SUCCESS) err = flashcl__set_view_args(k, &a, &views[BV]);
    if (err == CL_SUCCESS) err = clSetKernelArg(k, a++, sizeof lse, &lse);
    if (err == CL_SUCCESS) err = clSetKernelArg(k, a++, sizeof lse_off, &lse_off);
    if (err == CL_SUCCESS) err = clSetKernelArg(k, a++, sizeof dsum, &dsum);
    if (err == CL_SUCCESS) err = flashcl__set_view_args(k, &a, &views[BDK]);
    if (err == CL_SUCCESS) err = flashcl__set_view_args(k, &a, &views[BDV]);
    if (err == CL_SUCCESS) err = set_scalars(k, &a, d);
    k = plan->dq;
    a = 0;
    if (err == CL_SUCCESS) err = flashcl__set_view_args(k, &a, &views[BQ]);
    if (err == CL_SUCCESS) err = flashcl__set_view_args(k, &a, &views[BDO]);
    if (err == CL_SUCCESS) err = clSetKernelArg(k, a++, sizeof(cl_mem), &packed[2]);
    if (err == CL_SUCCESS) err = clSetKernelArg(k, a++, sizeof(cl_mem), &packed[3]);
    if (err == CL_SUCCESS) err = clSetKernelArg(k, a++, sizeof lse, &lse);
    if (err == CL_SUCCESS) err = clSetKernelArg(k, a++, sizeof lse_off, &lse_off);
    if (err == CL_SUCCESS) err = clSetKernelArg(k, a++, sizeof dsum, &dsum);
    if (err == CL_SUCCESS) err = flashcl__set_view_args(k, &a, &views[BDQ]);
    if (err == CL_SUCCESS) err = set_scalars(k, &a, d);
    return err;
}

flashcl_status flashcl__enqueue_backward_cpu(flashcl_context *ctx, const flashcl__backward_plan *plan,
                                             const flashcl_attention_desc *d, const flashcl_tensor *views, cl_mem lse,
                                             size_t lse_offset, cl_uint num_wait, const cl_event *wait_list,
                                             cl_event *event) {
    const size_t block = plan->rows_per_group;
    const int chunk = plan->pub.block_cols;
    cl_mem dsum = NULL;
    flashcl_status st = flashcl__scratch(ctx, FLASHCL__SCRATCH_ROWS, d->batch * d->heads_q * d->seqlen_q * sizeof(float),
                                         "backward: D = rowsum(dO*O)", &dsum);
    if (st != FLASHCL_SUCCESS) return st;
    flashcl__waits waits;
    st = flashcl__scratch_waits(ctx, num_wait, wait_list, &waits);
    if (st != FLASHCL_SUCCESS) return st;
    const pack_job jobs[4] = {
        {&views[BQ], d->heads_q, d->seqlen_q, FLASHCL__SCRATCH_GRADS, "backward: packed Q"},
        {&views[BDO], d->heads_q, d->seqlen_q, FLASHCL__SCRATCH_GRADS2, "backward: packed dO"},
        {&views[BK], d->heads_kv, d->seqlen_k, FLASHCL__SCRATCH_SCORES, "backward: packed K"},
        {&views[BV], d->heads_kv, d->seqlen_k, FLASHCL__SCRATCH_SCORES2, "backward: packed V"},
    };
    cl_mem packed[4];
    cl_event ev[7] = {NULL}; /* 4 packs, dot, dK/dV, dQ */
    st = enqueue_packs(ctx, plan->pack, d, block, chunk, jobs, 4, &waits, packed, ev);
    if (st != FLASHCL_SUCCESS) return st;

    cl_int sq = (cl_int)d->seqlen_q, hq = (cl_int)d->heads_q;
    cl_uint arg = 0;
    cl_int err = flashcl__set_view_args(plan->dot, &arg, &views[BDO]);
    if (err == CL_SUCCESS) err = flashcl__set_view_args(plan->dot, &arg, &views[BO]);
    if (err == CL_SUCCESS) err = clSetKernelArg(plan->dot, arg++, sizeof dsum, &dsum);
    if (err == CL_SUCCESS) err = clSetKernelArg(plan->dot, arg++, sizeof sq, &sq);
    if (err == CL_SUCCESS) err = clSetKernelArg(plan->dot, arg++, sizeof hq, &hq);
    if (err == CL_SUCCESS) err = set_main_args(plan, views, d, lse, lse_offset, dsum, packed);
    if (err != CL_SUCCESS) {
        release_events(ev, 4);
        return flashcl__fail_cl(ctx, err, "clSetKernelArg(CPU backward)");
    }
    size_t one[3] = {1, 1, 1};
    size_t g_rows[3] = {blocks_of(d->seqlen_q, block), d->heads_q, d->batch};
    size_t g_keys[3] = {blocks_of(d->seqlen_k, plan->keys_per_group), d->heads_kv, d->batch};
    err = clEnqueueNDRangeKernel(ctx->queue, plan->dot, 3, NULL, g_rows, one, waits.count,
                                 waits.count ? waits.events : NULL, &ev[4]);
    const char *what = "clEnqueueNDRangeKernel(flash_bwd_cpu_dot)";
    if (err == CL_SUCCESS) {
        cl_event before[3] = {ev[0], ev[1], ev[4]}; /* dK/dV reads packed Q, dO and D */
        err = clEnqueueNDRangeKernel(ctx->queue, plan->dkdv, 3, NULL, g_keys, one, 3, before, &ev[5]);
        what = "clEnqueueNDRangeKernel(flash_bwd_cpu_dkdv)";
    }
    if (err == CL_SUCCESS) {
        cl_event before[3] = {ev[2], ev[3], ev[4]}; /* dQ reads packed K, V and D */
        err = clEnqueueNDRangeKernel(ctx->queue, plan->dq, 3, NULL, g_rows, one, 3, before, &ev[6]);
        what = "clEnqueueNDRangeKernel(flash_bwd_cpu_dq)";
    }
    cl_event last = NULL;
    if (err == CL_SUCCESS) {
        err = clEnqueueMarkerWithWaitList(ctx->queue, 2, &ev[5], &last);
        what = "clEnqueueMarkerWithWaitList(CPU backward)";
    }
    release_events(ev, 7);
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, what);
    finish_call(ctx, last, event);
    return FLASHCL_SUCCESS;
}
