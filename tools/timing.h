/*
 * Wall-clock timing: a monotonic clock, and the loop that times one unit of
 * work (a forward call, a backward call, or both back to back) for `bench`:
 * warm-up, calibration, timed iterations.
 */
#ifndef FLASHCL_TOOLS_TIMING_H
#define FLASHCL_TOOLS_TIMING_H

#include <stddef.h>

#include <flashcl.h>

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC); only differences mean anything. */
double wall_seconds(void);

typedef struct bench_settings {
    size_t iters;  /* 0: enough for about BENCH_TARGET_SECONDS, from 1 to BENCH_MAX_AUTO_ITERS */
    size_t warmup; /* untimed calls first (the first call also builds the kernels) */
} bench_settings;

#define BENCH_TARGET_SECONDS 1.0
#define BENCH_MAX_AUTO_ITERS 1000

typedef struct bench_result {
    size_t iters;   /* timed calls */
    double ms;      /* mean milliseconds per call over them */
    double seconds; /* total timed seconds */
} bench_result;

/*
 * One unit of work to time: enqueue(user) enqueues it on queue and returns
 * the first failing call's status. The queue must be in order and serve only
 * this work while it is timed (the tool creates its own).
 */
typedef struct bench_work {
    cl_command_queue queue;
    const char *label; /* names the work in progress reports, e.g. "flash bwd" */
    flashcl_status (*enqueue)(const void *user);
    const void *user;
} bench_work;

/*
 * Times `work` and fills *result. On failure returns the status of the
 * enqueue (or of clFinish) that failed.
 */
flashcl_status bench_time_work(const bench_work *work, const bench_settings *settings, bench_result *result);

#endif
