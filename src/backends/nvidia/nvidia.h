/*
 * The NVIDIA tensor-core family (cl/flash_fwd_mma.cl, cl/flash_bwd_mma.cl):
 * mma.sync, ldmatrix and cp.async through inline PTX. It covers plain and
 * causal attention in f16/bf16 storage, head dims 32/64/96/128 (d_v = d),
 * scale > 0, views whose offsets and strides are multiples of 8 elements, on a
 * device whose probe passed (probe.c); every other call goes to the next family.
 */
#ifndef FLASHCL_BACKENDS_NVIDIA_H
#define FLASHCL_BACKENDS_NVIDIA_H

#include "../../backend.h"

#define FLASHCL__MMA_DIM_SLOTS 9 /* head dims 16..128 in steps of 16, by d/16 */

typedef struct flashcl__mma_plan {
    flashcl_plan pub;     /* the forward */
    cl_kernel kernel;     /* flash_fwd_mma */
    cl_kernel bwd[3];     /* flash_bwd_mma_dot, _dkdv, _dq: built on the first backward */
    flashcl_plan bwd_pub; /* what flashcl_backward_plan_query reports, filled with bwd[] */
} flashcl__mma_plan;

/* The family's state in ctx->family[FLASHCL__FAMILY_NVIDIA]. */
typedef struct flashcl__nvidia_state {
    int probe;                                           /* 0 not yet probed, 1 usable, -1 not */
    char why[160];                                       /* what the probe found */
    flashcl__mma_plan *plans[2][FLASHCL__MMA_DIM_SLOTS]; /* [bf16, f16][d/16] */
} flashcl__nvidia_state;

/* The state, created on first use (NULL when out of host memory). */
flashcl__nvidia_state *flashcl__nvidia_state_of(flashcl_context *ctx);
/* 1 when the probe passed on this context's device; *why says what was found. */
int flashcl__mma_supported(flashcl_context *ctx, const char **why);
/* The descriptor-level test (storage, head dim, no variant but causal, probe); why when not. */
int flashcl__mma_covers(flashcl_context *ctx, const flashcl_attention_desc *d, char *why, size_t cap);
/* cp.async moves 16 bytes: every row start must be a multiple of 8 elements. */
int flashcl__mma_views_aligned(const flashcl_tensor *views, int n);
/* The plan of the descriptor's storage and head dim; the backward kernels built on demand. */
flashcl_status flashcl__mma_plan_for(flashcl_context *ctx, const flashcl_attention_desc *d,
                                     const flashcl__mma_plan **out);
flashcl_status flashcl__mma_backward_plan_for(flashcl_context *ctx, const flashcl_attention_desc *d,
                                              const flashcl__mma_plan **out);
void flashcl__mma_release_plans(flashcl__nvidia_state *state);

flashcl_status flashcl__mma_forward(flashcl_context *ctx, const flashcl__call *call);
flashcl_status flashcl__mma_backward(flashcl_context *ctx, const flashcl__call *call);

#endif
