/*
 * `bench --kernels`: where a pass's time goes. After a pass is timed, a few
 * more of its calls run with the library's kernel trace on (a profiling
 * queue), and each kernel's device time per call is summed by name: the
 * backward's D pre-pass, dK/dV and dQ kernels, the decode's split and merge.
 * The wall-clock timing itself runs before, untraced.
 */
#ifndef FLASHCL_TOOLS_BENCH_KERNELS_H
#define FLASHCL_TOOLS_BENCH_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <flashcl.h>

#define BENCH_KERNEL_CALLS 5 /* traced calls per pass */
#define BENCH_MAX_KERNELS 8  /* distinct kernel names kept per pass; more are summed as "other" */

typedef struct bench_kernel_share {
    char name[64];
    double ms;       /* device time per call */
    double launches; /* launches per call */
} bench_kernel_share;

typedef struct bench_kernel_times {
    bool measured;
    size_t count; /* entries of kernel, in order of first launch */
    bench_kernel_share kernel[BENCH_MAX_KERNELS];
} bench_kernel_times;

/* Runs enqueue(user) BENCH_KERNEL_CALLS times with the trace on, on a queue with profiling swapped
   in for them (the context's own comes back after), and fills out; returns 0 or a tool error
   (printed). */
int bench_kernels_measure(flashcl_context *ctx, const char *label, flashcl_status (*enqueue)(const void *),
                          const void *user, bench_kernel_times *out);

/* "flash_bwd_dot 0.120 ms (1.6%), flash_bwd_mma 4.100 ms (55.2%), ..." */
void bench_kernels_print(FILE *out, const bench_kernel_times *t);
/* ,"kernels":[{"name":...,"ms":...,"launches":...},...] */
void bench_kernels_json(FILE *out, const bench_kernel_times *t);

#endif
