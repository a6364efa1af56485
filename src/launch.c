/* Kernel arguments and launch chains (launch.h). */
#include "launch.h"

#include <stdio.h>

flashcl__args flashcl__args_for(cl_kernel kernel, const char *name) {
    flashcl__args a = {kernel, name, 0, CL_SUCCESS};
    return a;
}

void flashcl__arg(flashcl__args *a, size_t size, const void *value) {
    if (a->err != CL_SUCCESS) return;
    a->err = clSetKernelArg(a->kernel, a->index++, size, value);
}

void flashcl__arg_mem(flashcl__args *a, cl_mem m) { flashcl__arg(a, sizeof m, &m); }
void flashcl__arg_int(flashcl__args *a, cl_int v) { flashcl__arg(a, sizeof v, &v); }
void flashcl__arg_uint(flashcl__args *a, cl_uint v) { flashcl__arg(a, sizeof v, &v); }
void flashcl__arg_ulong(flashcl__args *a, cl_ulong v) { flashcl__arg(a, sizeof v, &v); }
void flashcl__arg_float(flashcl__args *a, cl_float v) { flashcl__arg(a, sizeof v, &v); }

void flashcl__arg_view(flashcl__args *a, const flashcl_tensor *t) {
    flashcl__arg_mem(a, t->buffer);
    flashcl__arg_ulong(a, t->offset);
    flashcl__arg_ulong(a, t->stride_batch);
    flashcl__arg_ulong(a, t->stride_head);
    flashcl__arg_ulong(a, t->stride_row);
}

void flashcl__arg_views(flashcl__args *a, const flashcl_tensor *views, const int *which, int n) {
    for (int i = 0; i < n; ++i) flashcl__arg_view(a, &views[which[i]]);
}

void flashcl__arg_forward(flashcl__args *a, const flashcl_attention_desc *d, cl_mem lse, size_t lse_offset,
                          cl_mem dummy) {
    flashcl__arg_mem(a, lse ? lse : dummy);
    flashcl__arg_ulong(a, lse_offset);
    flashcl__arg_int(a, lse != NULL);
    flashcl__arg_int(a, (cl_int)d->seqlen_q);
    flashcl__arg_int(a, (cl_int)d->seqlen_k);
    flashcl__arg_int(a, (cl_int)d->heads_q);
    flashcl__arg_int(a, (cl_int)(d->heads_q / d->heads_kv));
    flashcl__arg_float(a, (cl_float)(d->scale * FLASHCL__LOG2E));
}

void flashcl__arg_backward_sizes(flashcl__args *a, const flashcl_attention_desc *d) {
    flashcl__arg_int(a, (cl_int)d->seqlen_q);
    flashcl__arg_int(a, (cl_int)d->seqlen_k);
    flashcl__arg_int(a, (cl_int)d->heads_q);
    flashcl__arg_int(a, (cl_int)(d->heads_q / d->heads_kv));
    flashcl__arg_float(a, (cl_float)(d->scale * FLASHCL__LOG2E));
    flashcl__arg_float(a, d->scale);
}

flashcl_status flashcl__args_check(flashcl_context *ctx, const flashcl__args *a) {
    if (a->err == CL_SUCCESS) return FLASHCL_SUCCESS;
    char what[96];
    snprintf(what, sizeof what, "clSetKernelArg(%s)", a->name);
    return flashcl__fail_cl(ctx, a->err, what);
}

flashcl_status flashcl__chain_begin(flashcl__chain *c, flashcl_context *ctx, cl_uint num_wait,
                                    const cl_event *wait_list, int uses_scratch) {
    c->ctx = ctx;
    c->count = 0;
    c->uses_scratch = uses_scratch;
    c->status = FLASHCL_SUCCESS;
    if (uses_scratch) return c->status = flashcl__scratch_waits(ctx, num_wait, wait_list, &c->start);
    const cl_uint cap = (cl_uint)(sizeof c->start.events / sizeof c->start.events[0]);
    if (num_wait > cap)
        return c->status =
                   flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "wait_list: at most %u events", (unsigned)cap);
    for (cl_uint i = 0; i < num_wait; ++i) c->start.events[i] = wait_list[i];
    c->start.count = num_wait;
    return FLASHCL_SUCCESS;
}

int flashcl__chain_launch_after(flashcl__chain *c, cl_kernel kernel, const char *name, cl_uint dims,
                                const size_t *global, const size_t *local, int ndeps, const int *deps) {
    if (c->status != FLASHCL_SUCCESS) return -1;
    if (c->count == FLASHCL__CHAIN_MAX) {
        c->status = flashcl__fail(c->ctx, FLASHCL_ERR_NO_PLAN, "internal: more than %d launches in one call",
                                  FLASHCL__CHAIN_MAX);
        return -1;
    }
    cl_event waits[FLASHCL__CHAIN_MAX];
    const cl_event *wait_list = waits;
    cl_uint nwait = 0;
    if (ndeps == 0 || (ndeps == 1 && deps[0] == FLASHCL__AFTER_START)) {
        wait_list = c->start.count ? c->start.events : NULL;
        nwait = c->start.count;
    } else {
        for (int i = 0; i < ndeps; ++i) waits[nwait++] = c->events[deps[i]];
    }
    cl_event done = NULL;
    cl_int err = clEnqueueNDRangeKernel(c->ctx->queue, kernel, dims, NULL, global, local, nwait, wait_list, &done);
    if (err != CL_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s)", name);
        c->status = flashcl__fail_cl(c->ctx, err, what);
        return -1;
    }
    flashcl__trace_launch(c->ctx, name, done);
    c->events[c->count] = done;
    return c->count++;
}

int flashcl__chain_launch(flashcl__chain *c, cl_kernel kernel, const char *name, cl_uint dims, const size_t *global,
                          const size_t *local, int after) {
    return flashcl__chain_launch_after(c, kernel, name, dims, global, local, 1, &after);
}

int flashcl__chain_write(flashcl__chain *c, cl_mem buffer, size_t bytes, const void *host, int after) {
    if (c->status != FLASHCL_SUCCESS) return -1;
    if (c->count == FLASHCL__CHAIN_MAX) {
        c->status = flashcl__fail(c->ctx, FLASHCL_ERR_NO_PLAN, "internal: more than %d launches in one call",
                                  FLASHCL__CHAIN_MAX);
        return -1;
    }
    const cl_event *wait_list =
        after == FLASHCL__AFTER_START ? (c->start.count ? c->start.events : NULL) : &c->events[after];
    const cl_uint nwait = after == FLASHCL__AFTER_START ? c->start.count : 1;
    cl_event done = NULL;
    cl_int err = clEnqueueWriteBuffer(c->ctx->queue, buffer, CL_FALSE, 0, bytes, host, nwait, wait_list, &done);
    if (err != CL_SUCCESS) {
        c->status = flashcl__fail_cl(c->ctx, err, "clEnqueueWriteBuffer");
        return -1;
    }
    c->events[c->count] = done;
    return c->count++;
}

cl_event flashcl__chain_event(const flashcl__chain *c, int index) { return c->events[index]; }

static void release_events(flashcl__chain *c, cl_event keep) {
    for (int i = 0; i < c->count; ++i)
        if (c->events[i] != keep) clReleaseEvent(c->events[i]);
    c->count = 0;
}

flashcl_status flashcl__chain_abort(flashcl__chain *c, flashcl_status status) {
    release_events(c, NULL);
    if (c->status == FLASHCL_SUCCESS) c->status = status;
    return c->status;
}

flashcl_status flashcl__chain_end(flashcl__chain *c, int nlast, const int *last, cl_event *event) {
    if (c->status != FLASHCL_SUCCESS) return flashcl__chain_abort(c, c->status);
    cl_event done = NULL;
    if (nlast == 1) {
        done = c->events[last[0]];
    } else {
        cl_event joined[FLASHCL__CHAIN_MAX];
        for (int i = 0; i < nlast; ++i) joined[i] = c->events[last[i]];
        cl_int err = clEnqueueMarkerWithWaitList(c->ctx->queue, (cl_uint)nlast, joined, &done);
        if (err != CL_SUCCESS)
            return flashcl__chain_abort(c, flashcl__fail_cl(c->ctx, err, "clEnqueueMarkerWithWaitList"));
    }
    release_events(c, done);
    if (c->uses_scratch) flashcl__scratch_used_by(c->ctx, done);
    if (event)
        *event = done;
    else
        clReleaseEvent(done);
    return FLASHCL_SUCCESS;
}
