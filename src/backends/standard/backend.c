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
    const int fwd = pass == FLASHCL__FORWARD;
    const size_t rows = d->batch * d->heads_q * d->seqlen_q;
    if (d->seqlen_k > SIZE_MAX / sizeof(float) / rows)
        return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_DEVICE_MEMORY, "%s: scratch size overflows size_t",
                             fwd ? "standard path: S/P" : "standard backward");
    st = flashcl__scratch_fits(ctx, rows * d->seqlen_k * sizeof(float),
                               fwd ? "standard path: S/P (batch*heads_q*seqlen_q*seqlen_k floats)"
                                   : "standard backward: P");
    if (st != FLASHCL_SUCCESS) return st;
    if (!fwd) { /* and its per-query-head dK and dV, each batch*heads_q*seqlen_k*head_dim floats */
        const size_t z = d->batch * d->heads_q;
        if (d->seqlen_k > SIZE_MAX / sizeof(float) / z / d->head_dim)
            return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_DEVICE_MEMORY,
                                 "standard backward: scratch size overflows size_t");
        st =
            flashcl__scratch_fits(ctx, z * d->seqlen_k * d->head_dim * sizeof(float), "standard backward: per-head dV");
        if (st != FLASHCL_SUCCESS) return st;
    }
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
