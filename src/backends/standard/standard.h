/*
 * The standard attention (Algorithm 0), FLASHCL_PATH_STANDARD: S = scale*QK^T,
 * softmax and O = PV through global memory with tiled GEMMs; its backward
 * materialises P and dS. The honest baseline: plain float32, causal at most.
 */
#ifndef FLASHCL_BACKENDS_STANDARD_H
#define FLASHCL_BACKENDS_STANDARD_H

#include "../../backend.h"

typedef struct flashcl__standard_plan {
    flashcl_plan pub;
    int tile, wpt, softmax_wg;
    cl_kernel scores, softmax, pv;              /* forward */
    cl_kernel rowdot, probs, ds, tn, group_sum; /* backward */
} flashcl__standard_plan;

/* The one plan of a context (ctx->family[FLASHCL__FAMILY_STANDARD]), built on first use. */
flashcl_status flashcl__plan_standard(flashcl_context *ctx, const flashcl__standard_plan **out);
void flashcl__release_standard_plan(flashcl_context *ctx);

/* Floats of the scratch a call needs: `scores`, the N x N of S/P (also the backward's P and its dS,
   each that size), and, for the backward, `grads`, its per-query-head dK or dV. Fails (naming the
   pass) when a size overflows size_t. The plan query checks that they fit; the launches allocate them. */
typedef struct flashcl__standard_sizes {
    size_t scores, grads;
} flashcl__standard_sizes;
flashcl_status flashcl__standard_scratch_sizes(flashcl_context *ctx, const flashcl_attention_desc *d, int backward,
                                               flashcl__standard_sizes *out);

flashcl_status flashcl__standard_forward(flashcl_context *ctx, const flashcl__call *call);
flashcl_status flashcl__standard_backward(flashcl_context *ctx, const flashcl__call *call);

#endif
