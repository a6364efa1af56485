/* The standard family's table: every call on FLASHCL_PATH_STANDARD (its plan and launch refuse variants and 16-bit). */
#include "standard.h"

static int standard_covers(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                           const flashcl_tensor *views, char *why, size_t cap) {
    (void)ctx, (void)pass, (void)d, (void)views, (void)why, (void)cap;
    return 1;
}

static flashcl_status standard_plan(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                                    flashcl_plan *out) {
    /* The query answers what the call would do: refuse what its launch refuses (16-bit, variants). */
    flashcl_status st =
        flashcl__require_plain(ctx, d, pass == FLASHCL__FORWARD ? "standard path" : "standard backward");
    if (st != FLASHCL_SUCCESS) return st;
    /* ... and what its launch would fail to allocate: the N x N scratch (S/P; the backward's P and dS,
       each that size) is one buffer, the backward's per-head dK and dV one each. */
    const int backward = pass == FLASHCL__BACKWARD;
    flashcl__standard_sizes n;
    st = flashcl__standard_scratch_sizes(ctx, d, backward, &n);
    if (st == FLASHCL_SUCCESS)
        st = flashcl__scratch_fits(ctx, n.scores * sizeof(float),
                                   backward ? "standard backward: P"
                                            : "standard path: S/P (batch*heads_q*seqlen_q*seqlen_k floats)");
    if (st == FLASHCL_SUCCESS && backward)
        st = flashcl__scratch_fits(ctx, n.grads * sizeof(float), "standard backward: per-head dV");
    if (st != FLASHCL_SUCCESS) return st;
    const flashcl__standard_plan *p = NULL;
    st = flashcl__plan_standard(ctx, &p);
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
