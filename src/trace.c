/*
 * The kernel trace (flashcl_trace_kernels, flashcl_trace_read): every kernel
 * a call launches, with its event, so an application (and `flashcl bench
 * --kernels`) can see which kernel of a call takes the time: the backward's
 * D pre-pass, dK/dV and dQ kernels, the decode's split and merge. Events
 * carry times only on a profiling queue, so tracing asks for one rather
 * than returning zeros.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct flashcl__trace_entry {
    char name[64];
    cl_event done; /* retained */
} flashcl__trace_entry;

struct flashcl__trace {
    flashcl__trace_entry *entries; /* FLASHCL_TRACE_MAX */
    size_t kept;                   /* entries holding an event */
    size_t launched;               /* launches since the last read, kept or not */
};

static void forget(struct flashcl__trace *t) {
    for (size_t i = 0; i < t->kept; ++i) clReleaseEvent(t->entries[i].done);
    t->kept = 0;
    t->launched = 0;
}

void flashcl__trace_release(flashcl_context *ctx) {
    if (!ctx->trace) return;
    forget(ctx->trace);
    free(ctx->trace->entries);
    free(ctx->trace);
    ctx->trace = NULL;
}

void flashcl__trace_launch(flashcl_context *ctx, const char *name, cl_event done) {
    struct flashcl__trace *t = ctx->trace;
    if (!t) return;
    ++t->launched;
    /* A launch past the limit, or whose event cannot be retained, is counted but has no time. */
    if (t->kept == FLASHCL_TRACE_MAX || clRetainEvent(done) != CL_SUCCESS) return;
    flashcl__trace_entry *e = &t->entries[t->kept++];
    flashcl__copy_str(e->name, sizeof e->name, name);
    e->done = done;
}

/* Whether the queue records times (FLASHCL_ERR_INVALID_QUEUE, naming the property, when not). */
static flashcl_status require_profiling(flashcl_context *ctx) {
    cl_command_queue_properties props = 0;
    cl_int err = clGetCommandQueueInfo(ctx->queue, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL);
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clGetCommandQueueInfo(CL_QUEUE_PROPERTIES)");
    if (!(props & CL_QUEUE_PROFILING_ENABLE))
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_QUEUE,
                             "on: the context's queue was made without CL_QUEUE_PROFILING_ENABLE, so its events "
                             "carry no times (FLASHCL_PROFILING=1 makes FlashCL's own queue with it)");
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_trace_kernels(flashcl_context *ctx, int on) {
    if (!ctx) return FLASHCL_ERR_INVALID_CONTEXT;
    flashcl__clear_error(ctx);
    if (!on) {
        flashcl__trace_release(ctx);
        return FLASHCL_SUCCESS;
    }
    flashcl_status st = require_profiling(ctx); /* also when on already: the queue may have been switched */
    if (st != FLASHCL_SUCCESS || ctx->trace) return st;
    struct flashcl__trace *t = calloc(1, sizeof *t);
    flashcl__trace_entry *entries = calloc(FLASHCL_TRACE_MAX, sizeof *entries);
    if (!t || !entries) {
        free(t);
        free(entries);
        return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "the kernel trace's %d entries", FLASHCL_TRACE_MAX);
    }
    t->entries = entries;
    ctx->trace = t;
    return FLASHCL_SUCCESS;
}

/* One launch's times; NaN (and zeros) when its event has none: it failed on the device, or the queue
   lost profiling since (flashcl_context_set_queue). One bad event never spoils the others. */
static void event_times(const flashcl__trace_entry *e, flashcl_kernel_time *out) {
    cl_ulong start = 0, end = 0;
    cl_int err = clWaitForEvents(1, &e->done);
    if (err == CL_SUCCESS)
        err = clGetEventProfilingInfo(e->done, CL_PROFILING_COMMAND_START, sizeof start, &start, NULL);
    if (err == CL_SUCCESS) err = clGetEventProfilingInfo(e->done, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL);
    flashcl__copy_str(out->name, sizeof out->name, e->name);
    if (err != CL_SUCCESS) {
        out->ms = NAN;
        out->start_ns = out->end_ns = 0;
        return;
    }
    out->start_ns = start;
    out->end_ns = end;
    out->ms = end > start ? (double)(end - start) * 1e-6 : 0.0;
}

flashcl_status flashcl_trace_read(flashcl_context *ctx, flashcl_kernel_time *out, size_t cap, size_t *written,
                                  size_t *launched) {
    if (!ctx) return FLASHCL_ERR_INVALID_CONTEXT;
    flashcl__clear_error(ctx);
    if (!written) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "written is NULL");
    *written = 0;
    if (launched) *launched = 0;
    if (!out && cap) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "out is NULL with cap %zu", cap);
    struct flashcl__trace *t = ctx->trace;
    if (!t)
        return flashcl__fail(ctx, FLASHCL_ERR_TRACE_OFF,
                             "ctx: not recording kernels (flashcl_trace_kernels(ctx, 1) starts it)");
    const size_t n = cap < t->kept ? cap : t->kept;
    for (size_t i = 0; i < n; ++i) event_times(&t->entries[i], &out[i]);
    *written = n;
    if (launched) *launched = t->launched;
    forget(t);
    return FLASHCL_SUCCESS;
}
