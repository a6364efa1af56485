/* The ordered list of kernel families and the walk that every call and plan query makes over it. */
#include "backend.h"

#include <string.h>

/* Most specific first: a family earlier in the list covers less and runs faster where it does. */
static const flashcl__backend *const k_backends[] = {
    &flashcl__backend_decode,   /* short queries (decoding): split-KV, GQA rows packed per KV head */
    &flashcl__backend_nvidia,   /* NVIDIA tensor cores (f16/bf16; float32 with allow_tf32) when the probe passes */
    &flashcl__backend_cpu,      /* CPUs: float16-lane GEMM micro-kernels (plain float32) */
    &flashcl__backend_portable, /* any device: rows / split / tiles kernels, every variant */
    &flashcl__backend_standard, /* FLASHCL_PATH_STANDARD: the three-kernel baseline */
};
#define BACKEND_COUNT (sizeof k_backends / sizeof k_backends[0])

size_t flashcl__row_count(const flashcl_attention_desc *d) {
    return (flashcl__is_varlen(d) ? 1 : d->batch) * d->heads_q * d->seqlen_q;
}

const flashcl__backend *flashcl__backend_for(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                                             const flashcl_tensor *views, char *skipped, size_t cap) {
    if (skipped && cap) skipped[0] = '\0';
    for (size_t i = 0; i < BACKEND_COUNT; ++i) {
        const flashcl__backend *b = k_backends[i];
        if (b->path != d->path) continue;
        char why[256] = "";
        if (b->covers(ctx, pass, d, views, why, sizeof why)) return b;
        if (skipped && why[0]) flashcl__appendf(skipped, cap, "; not %s: %s", b->name, why);
    }
    return &flashcl__backend_portable; /* unreachable: the last family of each path covers every call */
}

flashcl_status flashcl__dispatch(flashcl_context *ctx, flashcl__pass pass, const flashcl__call *call) {
    const flashcl__backend *b = flashcl__backend_for(ctx, pass, call->d, call->views, NULL, 0);
    return pass == FLASHCL__FORWARD ? b->forward(ctx, call) : b->backward(ctx, call);
}

static flashcl_status dispatch_plan(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                                    flashcl_plan *out) {
    char skipped[512];
    const flashcl__backend *b = flashcl__backend_for(ctx, pass, d, NULL, skipped, sizeof skipped);
    memset(out, 0, sizeof *out);
    flashcl_status st = b->plan(ctx, pass, d, out);
    if (st != FLASHCL_SUCCESS) return st;
    out->scratch_bytes = b->scratch_bytes(ctx, pass, d);
    /* The families that declined the call (why it is not on a faster path) must survive a long
       reason: the family's own text gives way first, cut with "...". */
    const size_t have = strlen(out->reason), need = strlen(skipped), cap = sizeof out->reason;
    if (need > 0 && have + need >= cap && need + 4 < cap) {
        const size_t keep = cap - 1 - need - 3;
        if (keep < have) flashcl__cut_text(out->reason, keep);
    }
    flashcl__appendf(out->reason, sizeof out->reason, "%s", skipped);
    /* first, so that a long reason's truncation never hides it */
    flashcl__prepend(out->reason, sizeof out->reason, ctx->tuning_note, "; ");
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl__plan_query(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *desc,
                                   flashcl_plan *out) {
    if (!ctx) return FLASHCL_ERR_INVALID_CONTEXT;
    flashcl__clear_error(ctx);
    if (!out) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "out is NULL");
    flashcl_attention_desc d;
    flashcl_status st = flashcl__resolve_desc(ctx, desc, &d);
    if (st != FLASHCL_SUCCESS) return st;
    return dispatch_plan(ctx, pass, &d, out);
}

void flashcl__release_backends(flashcl_context *ctx) {
    for (size_t i = 0; i < BACKEND_COUNT; ++i) k_backends[i]->release(ctx);
}
