/*
 * `bench --backward`: times forward, backward and forward+backward of the
 * flash and the standard path on the same random inputs and dO, measures the
 * device scratch each path holds, and checks that their gradients agree.
 */
#ifndef FLASHCL_TOOLS_BENCH_BACKWARD_H
#define FLASHCL_TOOLS_BENCH_BACKWARD_H

#include <stdbool.h>

#include <flashcl.h>

#include "bench_run.h"
#include "roof.h"

typedef struct bench_backward_options {
    flashcl_attention_desc desc; /* every size set, heads_kv and seqlen_k included */
    bench_settings settings;
    bool run_flash, run_standard;
    bool json;
    bench_roof roof;
} bench_backward_options;

/*
 * Runs on ctx's device and queue (which must be in order and the tool's own)
 * and prints the report. Returns the exit status: 1 on a failure or when the
 * gradients disagree.
 */
int bench_backward(flashcl_context *ctx, const bench_backward_options *options);

#endif
