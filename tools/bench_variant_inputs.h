/*
 * The synthetic device inputs of `bench` with variants: Q, K, V (and dO) in
 * the storage type, the outputs, and every variant buffer the options ask
 * for, with the descriptor pointing at them. Deterministic: every run sees
 * the same data.
 */
#ifndef FLASHCL_TOOLS_BENCH_VARIANT_INPUTS_H
#define FLASHCL_TOOLS_BENCH_VARIANT_INPUTS_H

#include <stdbool.h>

#include <flashcl.h>

#include "bench_variants.h"

typedef struct bv_problem {
    flashcl_attention_desc desc; /* base sizes, variant fields and buffers */
    flashcl_tensor q, k, v, o, dout, dq, dk, dv;
    cl_mem lse;
    cl_mem mem[17];  /* everything created, released together */
    size_t mem_count;
    double flops;    /* forward flops of the visible-by-shape problem (causal halves) */
} bv_problem;

/*
 * Creates the problem for `base` with the variants of `v` (all off for the
 * plain baseline), with gradient buffers when `backward`. Returns 0 or
 * TOOL_EXIT_FAILED / TOOL_EXIT_USAGE after printing why.
 */
int bv_problem_create(flashcl_context *ctx, const flashcl_attention_desc *base,
                      const bench_variant_args *v, bool backward, bv_problem *p);

void bv_problem_release(bv_problem *p);

#endif
