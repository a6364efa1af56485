/*
 * The device inputs and outputs of one `bench` path: random Q, K, V (and dO)
 * in the storage type (K and V in a KV cache for a cache path), O, the LSE and gradients the backward passes need,
 * and the variant buffers, with the descriptor pointing at them. Every run
 * sees the same data (a fixed seed; Q, K, V, dO, then the variants' random
 * data), so float32 paths of the same sizes get the same inputs.
 */
#ifndef FLASHCL_TOOLS_BENCH_PROBLEM_H
#define FLASHCL_TOOLS_BENCH_PROBLEM_H

#include <stdbool.h>
#include <stddef.h>

#include <flashcl.h>

#include "bench_cache.h"
#include "variant_inputs.h"
#include "variant_options.h"

/* What to create: the sizes, the path and its variants. */
typedef struct bench_problem_spec {
    const flashcl_attention_desc *base; /* batch, heads, seqlens, head_dim, causal, num_splits (float32, no variant) */
    const variant_options *variants;    /* NULL: plain float32 */
    const bench_cache_spec *cache;      /* NULL: K and V as tensors (flashcl_forward); else a KV cache */
    flashcl_path path;
    bool training; /* LSE, dO and the gradients, for backward passes */
} bench_problem_spec;

/* A tensor whose values the check compares. */
typedef struct bench_output {
    const char *name; /* "o", "dq", ... */
    cl_mem buffer;
    size_t bytes;
    flashcl_dtype dtype; /* its storage */
    size_t count;        /* elements */
} bench_output;

enum { BENCH_MAX_OUTPUTS = 3 };

enum { BENCH_Q, BENCH_K, BENCH_V, BENCH_O, BENCH_LSE, BENCH_DOUT, BENCH_DQ, BENCH_DK, BENCH_DV, BENCH_TENSORS };

typedef struct bench_problem {
    flashcl_context *ctx;        /* the one it was created on */
    flashcl_attention_desc desc; /* sizes, variant fields and buffers, path */
    flashcl_tensor q, k, v, o, dout, dq, dk, dv;
    cl_mem mem[BENCH_TENSORS];   /* NULL where not needed (LSE and gradients without training) */
    size_t bytes[BENCH_TENSORS]; /* each tensor's size in bytes (K and V at the cache's element size) */
    variant_buffers variants;
    bool has_cache; /* K and V are in `cache` (mem[BENCH_K], mem[BENCH_V] are NULL): the forward is a cache call */
    bench_cache cache;
    double forward_flops; /* dense-equivalent: 2*(d + d_v) per query-key pair of each sequence, causal halved */
} bench_problem;

/* a*b*c*d*elem, or 0 when that overflows size_t. */
size_t bench_tensor_bytes(size_t a, size_t b, size_t c, size_t d, size_t elem);

/*
 * Creates the problem on ctx's device. Returns 0, or the exit status after
 * printing why (TOOL_EXIT_USAGE for a bad variant file or shape).
 */
int bench_problem_create(flashcl_context *ctx, const bench_problem_spec *spec, bench_problem *p);

/*
 * The tensors the check compares: with training the gradients of the last
 * pass (dq, dk, dv), else the output (o). Returns how many.
 */
size_t bench_problem_outputs(const bench_problem *p, bench_output out[BENCH_MAX_OUTPUTS]);

void bench_problem_release(bench_problem *p);

#endif
