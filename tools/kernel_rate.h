/*
 * Timing a microbenchmark kernel the tool builds itself (the read kernel of
 * read_bandwidth.c, the FMA kernel of roof.c): build it on the context's
 * device, then enqueue it back to back as bench times attention (wall clock
 * per launch) and keep the best of a few runs.
 */
#ifndef FLASHCL_TOOLS_KERNEL_RATE_H
#define FLASHCL_TOOLS_KERNEL_RATE_H

#include <stdbool.h>
#include <stddef.h>

#include <flashcl.h>

typedef struct rate_kernel {
    cl_command_queue queue; /* the context's; must be idle */
    cl_program program;
    cl_kernel kernel;
    size_t global, local; /* 1-D launch */
} rate_kernel;

/* Builds `name` from `source` with `options`; on failure why names the step and the OpenCL error. */
bool rate_kernel_build(flashcl_context *ctx, const char *source, const char *options, const char *name, rate_kernel *k,
                       char *why, size_t cap);
/* Best seconds per launch: one warm-up launch sizes runs of at least run_seconds (at most
   max_repeats launches, *repeats of them), the best of `runs`; negative when a launch failed. */
double rate_kernel_best_seconds(const rate_kernel *k, int runs, double run_seconds, size_t max_repeats,
                                size_t *repeats);
void rate_kernel_release(rate_kernel *k);

#endif
