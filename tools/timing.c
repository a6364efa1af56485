/*
 * Timing with the wall clock: calls are enqueued back to back and the queue
 * is finished once per chunk, so launch latency overlaps with execution as
 * it does in a real model, and the result is the mean time per call. Chunks
 * of about half a second give a progress report and bound how much work is
 * queued at once.
 */
/* clock_gettime and CLOCK_MONOTONIC */
#define _POSIX_C_SOURCE 199309L

#include "timing.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

#define BENCH_CHUNK_SECONDS 0.5
#define BENCH_PROGRESS_AFTER_SECONDS 3.0

/* CLOCK_MONOTONIC, so a clock adjustment during a benchmark cannot skew it. */
double wall_seconds(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0.0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Enqueues n units of work, then waits for them. */
static flashcl_status run_batch(const bench_work *w, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        flashcl_status status = w->enqueue(w->user);
        if (status != FLASHCL_SUCCESS) return status;
    }
    /* The tool owns this queue (flashcl_context_create made it; the per-path
     * contexts only share it), so waiting on the whole queue waits for
     * exactly our calls. */
    return (flashcl_status)clFinish(w->queue);
}

flashcl_status bench_time_work(const bench_work *w, const bench_settings *settings, bench_result *result) {
    result->iters = 0;
    result->ms = 0.0;
    result->seconds = 0.0;

    flashcl_status status = run_batch(w, settings->warmup);
    if (status != FLASHCL_SUCCESS) return status;

    /* seconds_per_call: the estimate that sizes chunks; 0 while unknown. */
    double seconds_per_call = 0.0;
    size_t iters = settings->iters;
    if (iters == 0) {
        double start = wall_seconds();
        if ((status = run_batch(w, 1)) != FLASHCL_SUCCESS) return status;
        seconds_per_call = wall_seconds() - start;
        double wanted = seconds_per_call > 0.0 ? ceil(BENCH_TARGET_SECONDS / seconds_per_call) : BENCH_MAX_AUTO_ITERS;
        iters = wanted < 1.0 ? 1 : wanted > BENCH_MAX_AUTO_ITERS ? BENCH_MAX_AUTO_ITERS : (size_t)wanted;
    }

    double begin = wall_seconds(), last_report = begin, timed = 0.0;
    size_t done = 0;
    while (done < iters) {
        size_t chunk = 1;
        if (seconds_per_call > 0.0) {
            double fit = floor(BENCH_CHUNK_SECONDS / seconds_per_call);
            chunk = fit < 1.0 ? 1 : fit > (double)(iters - done) ? iters - done : (size_t)fit;
        }
        double start = wall_seconds();
        if ((status = run_batch(w, chunk)) != FLASHCL_SUCCESS) return status;
        double end = wall_seconds();
        timed += end - start;
        done += chunk;
        seconds_per_call = timed / (double)done;
        /* Only long runs report progress, and at most once a second. */
        if (done < iters && end - begin > BENCH_PROGRESS_AFTER_SECONDS && end - last_report > 1.0) {
            fprintf(stderr, "bench: %s %zu/%zu iterations...\n", w->label, done, iters);
            last_report = end;
        }
    }
    result->iters = iters;
    result->seconds = timed;
    result->ms = timed * 1e3 / (double)iters;
    return FLASHCL_SUCCESS;
}
