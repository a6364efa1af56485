/*
 * The three timed passes of `bench --backward` for one path: the forward
 * (writing O and LSE, as training needs them), the backward from dO, and
 * both back to back.
 */
#ifndef FLASHCL_TOOLS_BENCH_PASSES_H
#define FLASHCL_TOOLS_BENCH_PASSES_H

#include <flashcl.h>

#include "bench_run.h"

/* Every tensor of a training step, on the device; packed [b, s, h, d]. */
typedef struct bench_train_problem {
    flashcl_context *ctx; /* the path's own context */
    const flashcl_attention_desc *desc;
    flashcl_path path;
    flashcl_tensor q, k, v, o, dout, dq, dk, dv;
    cl_mem lse; /* [b, hq, sq] floats */
} bench_train_problem;

/*
 * The unit of work of `pass` (BENCH_PASS_FWD, _BWD or _FWD_BWD) on problem;
 * label must outlive the work (it names it in progress reports).
 */
bench_work bench_pass_work(bench_train_problem *problem, int pass, const char *label);

#endif
