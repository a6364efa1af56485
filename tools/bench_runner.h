/*
 * The one `bench` runner: a job is a list of paths (rows of the report:
 * flash, standard, flash with variants, ...) times a list of passes (fwd,
 * bwd, fwd+bwd), plus which two paths make the headline ratio and whether
 * their outputs are checked against each other. Every mode of `bench` is a
 * job (cmd_bench.c builds it), timed the same way and printed by one
 * printer (bench_report.c); a new mode is a new job, a new pass is a new
 * bench_pass.
 *
 * A path with a KV cache (bench_cache.h) holds its K and V there and its
 * forward pass is flashcl_forward_kvcache: the cache is a property of the
 * path, so the same passes, timing, check and printer serve it.
 *
 * Each path runs on a flashcl_context of its own made around the tool's
 * queue: the path's buffers and scratch are its alone, so the scratch read
 * after a pass is what that path holds, and one path's scratch is freed
 * before the next path allocates.
 */
#ifndef FLASHCL_TOOLS_BENCH_RUNNER_H
#define FLASHCL_TOOLS_BENCH_RUNNER_H

#include <stdbool.h>
#include <stddef.h>

#include <flashcl.h>

#include "bench_kernels.h"
#include "bench_problem.h"
#include "read_bandwidth.h"
#include "roof.h"
#include "timing.h"
#include "variant_options.h"

/* The library calls a pass makes, which say which plan describes it. */
typedef enum bench_calls {
    BENCH_CALLS_FORWARD,  /* flashcl_forward: its plan is flashcl_plan_query's */
    BENCH_CALLS_BACKWARD, /* flashcl_backward: flashcl_backward_plan_query's */
    BENCH_CALLS_BOTH      /* a forward and a backward: no single plan covers it */
} bench_calls;

/* One timed unit of work. */
typedef struct bench_pass {
    const char *name;    /* "fwd", "bwd", "fwd+bwd" */
    const char *summary; /* what it runs, for the report */
    double flop_factor;  /* its FLOPs as a multiple of the forward's */
    bench_calls calls;   /* any backward makes the problem a training one: LSE, dO, dQ, dK, dV */
    flashcl_status (*enqueue)(const bench_problem *problem);
    double (*bytes)(const bench_problem *problem); /* the tensors it reads or writes, once each */
} bench_pass;

/* FlashAttention's convention: the backward does 2.5 times the forward's FLOPs. */
#define BENCH_BWD_FLOP_RATIO 2.5

extern const bench_pass bench_pass_forward;          /* flashcl_forward (LSE only with gradients) */
extern const bench_pass bench_pass_backward;         /* flashcl_backward from a random dO */
extern const bench_pass bench_pass_forward_backward; /* both, back to back */

/* One row group of the report. */
typedef struct bench_path {
    const char *name; /* "flash", "standard", "flash+variants", "kvcache" */
    flashcl_path path;
    const variant_options *variants; /* NULL: plain float32 */
    bool skip_when_full;             /* an allocation failure skips it (standard's N x N) instead of failing */
    const bench_cache_spec *cache;   /* NULL: K and V as tensors; else its forward is flashcl_forward_kvcache */
} bench_path;

enum { BENCH_MAX_PATHS = 2, BENCH_MAX_PASSES = 3 };

/* The headline ratio: ms of paths[numerator] / ms of paths[denominator], per pass. */
typedef struct bench_ratio {
    const char *name;              /* "speedup", "cost"; NULL: none */
    size_t numerator, denominator; /* an index past the paths gives NaN (that path was not asked for) */
    bool key_rate;                 /* also the inverse, as the rate keys are attended to (decode's token rate) */
} bench_ratio;

typedef struct bench_job {
    flashcl_context *ctx;        /* the device and the tool's in-order queue */
    flashcl_attention_desc base; /* sizes and causal, float32 */
    bench_settings settings;
    const bench_pass *passes[BENCH_MAX_PASSES];
    size_t pass_count;
    bench_path paths[BENCH_MAX_PATHS];
    size_t path_count;
    bench_ratio ratio;
    bool check;                  /* compare the outputs of paths 0 and 1 */
    const char *no_check_reason; /* why not, when !check */
    bench_roof roof;             /* the %roof column's divisor */
    bench_read_bw read_bw;       /* the %bw column's divisor */
    bool show_bw;                /* print the read bandwidth and %bw (decode shapes, caches, --read-bw) */
    bool kernels;                /* --kernels: trace each pass's kernels after timing it (a profiling queue) */
} bench_job;

/* Tolerance of the check: |a - b| <= ATOL + RTOL * |b|, b of path 1. */
#define BENCH_ATOL 1e-3
#define BENCH_RTOL 1e-2

typedef struct compare_result {
    double max_abs_diff;   /* NaN when some element is NaN in either array */
    size_t mismatches;     /* elements outside the tolerance (or NaN) */
    size_t first_mismatch; /* index of the first one; meaningful when mismatches > 0 */
    bool agree;            /* mismatches == 0 */
} compare_result;

typedef struct bench_pass_result {
    bool ran;     /* timed successfully */
    bool skipped; /* could not allocate; reason says why */
    char reason[1024];
    bench_result timing;
    size_t bytes_extra; /* flashcl_context_scratch_bytes of the path's own context after the pass */
    double flops, bytes;
    bench_kernel_times kernels; /* --kernels: each kernel's device time per call */
} bench_pass_result;

typedef struct bench_path_result {
    flashcl_dtype dtype; /* as run */
    size_t head_dim_v;
    char features[256]; /* variant_describe; "" for none */
    char cache[256];    /* bench_cache_describe; "" for none */
    bool planned;       /* the plans are filled in */
    flashcl_plan fwd_plan, bwd_plan;
    bench_pass_result passes[BENCH_MAX_PASSES];
} bench_path_result;

typedef struct bench_check {
    bool done;
    char reason[160]; /* why not, when !done */
    size_t count;     /* tensors compared */
    const char *names[BENCH_MAX_OUTPUTS];
    compare_result results[BENCH_MAX_OUTPUTS];
} bench_check;

typedef struct bench_results {
    bool training; /* a pass calls the backward: the forward writes LSE, the check compares gradients */
    bench_path_result paths[BENCH_MAX_PATHS];
    bench_check check;
} bench_results;

/*
 * Runs every path and pass of the job, in order, and the check. Returns 0,
 * or the exit status after printing why (a disagreement is not a failure
 * here: see bench_check_agrees).
 */
int bench_run(const bench_job *job, bench_results *results);

/* Whether every compared tensor agrees (true when nothing was compared). */
bool bench_check_agrees(const bench_check *check);

/* The ratio for one pass, or NaN when either path did not run it. */
double bench_ratio_value(const bench_job *job, const bench_results *results, size_t pass);

#endif
