#include "bench_kernels.h"

#include <stdlib.h>
#include <string.h>

#include "json_print.h"
#include "tool_errors.h"

static bench_kernel_share *share_of(bench_kernel_times *t, const char *name) {
    for (size_t i = 0; i < t->count; ++i)
        if (strcmp(t->kernel[i].name, name) == 0) return &t->kernel[i];
    /* The last slot gathers every name past the others, so no time is lost from the sum. */
    if (t->count == BENCH_MAX_KERNELS) return &t->kernel[BENCH_MAX_KERNELS - 1];
    bench_kernel_share *s = &t->kernel[t->count++];
    snprintf(s->name, sizeof s->name, "%s", t->count < BENCH_MAX_KERNELS ? name : "other");
    return s;
}

/* The traced calls, on the context's current queue; the trace stopped whatever happens. */
static int trace_calls(flashcl_context *ctx, const char *label, flashcl_status (*enqueue)(const void *),
                       const void *user, bench_kernel_times *out) {
    flashcl_kernel_time *times = malloc(FLASHCL_TRACE_MAX * sizeof *times);
    if (times == NULL) return tool_failure("bench: out of host memory for the kernel trace");
    size_t written = 0;
    flashcl_status st = flashcl_trace_kernels(ctx, 1);
    for (int i = 0; i < BENCH_KERNEL_CALLS && st == FLASHCL_SUCCESS; ++i) st = enqueue(user);
    if (st == FLASHCL_SUCCESS) st = flashcl_trace_read(ctx, times, FLASHCL_TRACE_MAX, &written, NULL);
    int rc = st == FLASHCL_SUCCESS ? 0 : tool_status_error(label, st, flashcl_last_error(ctx));
    flashcl_trace_kernels(ctx, 0);
    for (size_t i = 0; rc == 0 && i < written; ++i) {
        bench_kernel_share *s = share_of(out, times[i].name);
        s->ms += times[i].ms / BENCH_KERNEL_CALLS;
        s->launches += 1.0 / BENCH_KERNEL_CALLS;
    }
    free(times);
    out->measured = rc == 0;
    return rc;
}

int bench_kernels_measure(flashcl_context *ctx, const char *label, flashcl_status (*enqueue)(const void *),
                          const void *user, bench_kernel_times *out) {
    memset(out, 0, sizeof *out);
    /* A queue with profiling for these calls only, so the timed calls before ran as usual (profiling
       costs NVIDIA's driver about 7 us a launch); the original queue is finished first, as the new one
       does not wait for it. */
    cl_command_queue original = flashcl_context_queue(ctx);
    cl_int err = clFinish(original);
    cl_command_queue traced = NULL;
    if (err == CL_SUCCESS)
        traced = clCreateCommandQueue(flashcl_context_cl_context(ctx), flashcl_context_device(ctx),
                                      CL_QUEUE_PROFILING_ENABLE, &err);
    if (err != CL_SUCCESS)
        return tool_failure("bench: %s: a queue with profiling for --kernels: %s", label, flashcl_status_name(err));
    clRetainCommandQueue(original);
    flashcl_status st = flashcl_context_set_queue(ctx, traced);
    int rc = st == FLASHCL_SUCCESS ? trace_calls(ctx, label, enqueue, user, out)
                                   : tool_status_error(label, st, flashcl_last_error(ctx));
    clFinish(traced);
    st = flashcl_context_set_queue(ctx, original);
    if (rc == 0 && st != FLASHCL_SUCCESS) rc = tool_status_error(label, st, flashcl_last_error(ctx));
    clReleaseCommandQueue(original);
    clReleaseCommandQueue(traced);
    return rc;
}

static double total_ms(const bench_kernel_times *t) {
    double sum = 0.0;
    for (size_t i = 0; i < t->count; ++i) sum += t->kernel[i].ms;
    return sum;
}

void bench_kernels_print(FILE *out, const bench_kernel_times *t) {
    const double sum = total_ms(t);
    for (size_t i = 0; i < t->count; ++i) {
        const bench_kernel_share *s = &t->kernel[i];
        fprintf(out, "%s%s %.4f ms (%.1f%%)", i ? ", " : "", s->name, s->ms, sum > 0.0 ? 100.0 * s->ms / sum : 0.0);
        if (s->launches > 1.0 + 1e-9) fprintf(out, " x%.3g", s->launches);
    }
    fprintf(out, "; %.4f ms of kernels per call", sum);
}

void bench_kernels_json(FILE *out, const bench_kernel_times *t) {
    fputs(",\"kernels\":[", out);
    for (size_t i = 0; i < t->count; ++i) {
        fputs(i ? ",{" : "{", out);
        json_key(out, "name", true);
        json_string(out, t->kernel[i].name);
        json_member_number(out, "ms", t->kernel[i].ms);
        json_member_number(out, "launches", t->kernel[i].launches);
        fputc('}', out);
    }
    fputc(']', out);
}
