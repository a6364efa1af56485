#include "bench_kernels.h"

#include <stdlib.h>
#include <string.h>

#include "json_print.h"
#include "tool_errors.h"

static bench_kernel_share *share_of(bench_kernel_times *t, const char *name) {
    for (size_t i = 0; i < t->count; ++i)
        if (strcmp(t->kernel[i].name, name) == 0) return &t->kernel[i];
    /* The last slot gathers every name past the others, so no time is lost from the sum. */
    const char *label = t->count + 1 < BENCH_MAX_KERNELS ? name : "other";
    if (t->count == BENCH_MAX_KERNELS) return &t->kernel[BENCH_MAX_KERNELS - 1];
    bench_kernel_share *s = &t->kernel[t->count++];
    snprintf(s->name, sizeof s->name, "%s", label);
    return s;
}

int bench_kernels_measure(flashcl_context *ctx, const char *label, flashcl_status (*enqueue)(const void *),
                          const void *user, bench_kernel_times *out) {
    memset(out, 0, sizeof *out);
    flashcl_status st = flashcl_trace_kernels(ctx, 1);
    if (st != FLASHCL_SUCCESS) return tool_status_error(label, st, flashcl_last_error(ctx));
    for (int i = 0; i < BENCH_KERNEL_CALLS && st == FLASHCL_SUCCESS; ++i) st = enqueue(user);
    if (st != FLASHCL_SUCCESS) {
        int rc = tool_status_error(label, st, flashcl_last_error(ctx));
        flashcl_trace_kernels(ctx, 0);
        return rc;
    }
    flashcl_kernel_time *times = malloc(FLASHCL_TRACE_MAX * sizeof *times);
    if (times == NULL) {
        flashcl_trace_kernels(ctx, 0);
        return tool_failure("bench: out of host memory for the kernel trace");
    }
    size_t recorded = 0;
    st = flashcl_trace_read(ctx, times, FLASHCL_TRACE_MAX, &recorded);
    int rc = st == FLASHCL_SUCCESS ? 0 : tool_status_error(label, st, flashcl_last_error(ctx));
    flashcl_trace_kernels(ctx, 0);
    const size_t kept = recorded < FLASHCL_TRACE_MAX ? recorded : FLASHCL_TRACE_MAX;
    for (size_t i = 0; rc == 0 && i < kept; ++i) {
        bench_kernel_share *s = share_of(out, times[i].name);
        s->ms += times[i].ms / BENCH_KERNEL_CALLS;
        s->launches += 1.0 / BENCH_KERNEL_CALLS;
    }
    free(times);
    out->measured = rc == 0;
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
