/* The standard family's table: every call on FLASHCL_PATH_STANDARD (it refuses variants and 16-bit at launch). */
#include "standard.h"

static int standard_covers(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                           const flashcl_tensor *views, char *why, size_t cap) {
    (void)ctx, (void)pass, (void)d, (void)views, (void)why, (void)cap;
    return 1;
}

static flashcl_status standard_plan(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                                    flashcl_plan *out) {
    (void)pass, (void)d;
    const flashcl__standard_plan *p = NULL;
    flashcl_status st = flashcl__plan_standard(ctx, &p);
    if (st == FLASHCL_SUCCESS) *out = p->pub;
    return st;
}

/* Forward: S/P (N x N). Backward: P and dS (N x N each), per-query-head dK and dV, and D. */
static size_t standard_scratch(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d) {
    (void)ctx;
    const size_t rows = d->batch * d->heads_q * d->seqlen_q;
    if (pass == FLASHCL__FORWARD) return rows * d->seqlen_k * sizeof(float);
    return (2 * rows * d->seqlen_k + 2 * d->batch * d->heads_q * d->seqlen_k * d->head_dim + rows) * sizeof(float);
}

const flashcl__backend flashcl__backend_standard = {
    "standard",
    FLASHCL_PATH_STANDARD,
    standard_covers,
    standard_plan,
    standard_scratch,
    flashcl__standard_forward,
    flashcl__standard_backward,
    flashcl__release_standard_plan,
};
