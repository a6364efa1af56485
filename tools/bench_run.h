/*
 * Timing for `bench`: warm-up, calibration, timed iterations of one unit of
 * work (a forward call, a backward call, or both back to back).
 */
#ifndef FLASHCL_TOOLS_BENCH_RUN_H
#define FLASHCL_TOOLS_BENCH_RUN_H

#include <stdbool.h>
#include <stddef.h>

#include <flashcl.h>

/* The inputs and output of one path, already on the device. */
typedef struct bench_problem {
    flashcl_context *ctx;
    const flashcl_attention_desc *desc;
    flashcl_tensor q, k, v, o;
} bench_problem;

typedef struct bench_settings {
    size_t iters;  /* 0: enough for about BENCH_TARGET_SECONDS, from 1 to BENCH_MAX_AUTO_ITERS */
    size_t warmup; /* untimed calls first (the first call also builds the kernels) */
} bench_settings;

#define BENCH_TARGET_SECONDS 1.0
#define BENCH_MAX_AUTO_ITERS 1000

typedef struct bench_result {
    size_t iters;     /* timed calls */
    double ms;        /* mean milliseconds per call over them */
    double seconds;   /* total timed seconds */
} bench_result;

/*
 * One unit of work to time: enqueue(user) enqueues it on ctx's queue and
 * returns the first failing call's status. The queue must be in order and
 * serve only this work while it is timed (the tool creates its own).
 */
typedef struct bench_work {
    flashcl_context *ctx;
    const char *label; /* names the work in progress reports, e.g. "flash bwd" */
    flashcl_status (*enqueue)(void *user);
    void *user;
} bench_work;

/*
 * Times `work` and fills *result. On failure returns the status of the
 * enqueue (or of clFinish) that failed; flashcl_last_error(work->ctx) then
 * says more unless the status came from clFinish.
 */
flashcl_status bench_run_work(const bench_work *work, const bench_settings *settings,
                              bench_result *result);

/*
 * Runs the forward of `path` (no LSE) and fills *result. On failure returns the status of the call
 * (or of clFinish) that failed; flashcl_last_error(ctx) then says more
 * unless the status came from clFinish.
 */
flashcl_status bench_run_path(const bench_problem *problem, flashcl_path path,
                              const bench_settings *settings, bench_result *result);

#endif
