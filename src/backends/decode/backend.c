/* The decode family's table: flashcl_forward calls with short queries (flashcl_forward_kvcache calls it directly). */
#include "decode.h"

#include <stdio.h>

static int decode_covers(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                         const flashcl_tensor *views, char *why, size_t cap) {
    (void)views;
    if (pass != FLASHCL__FORWARD) {
        snprintf(why, cap, "the decode family has no backward");
        return 0;
    }
    return flashcl__decode_covers(ctx, d, why, cap);
}

static flashcl_status decode_plan(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                                  flashcl_plan *out) {
    (void)pass;
    const flashcl__decode_plan *p = NULL;
    /* A query has no views: it plans for rows on 16 bytes, what packed layouts with d % 8 == 0 give. */
    flashcl_status st = flashcl__decode_plan_for(ctx, d, 0, FLASHCL_CACHE_DTYPE_SAME, 1, &p);
    if (st != FLASHCL_SUCCESS) return st;
    *out = p->pub;
    const int splits = flashcl__decode_splits(ctx, d, p, d->max_seqlen_k);
    flashcl__appendf(out->reason, sizeof out->reason, "; %d split%s", splits, splits == 1 ? "" : "s");
    return FLASHCL_SUCCESS;
}

static size_t decode_scratch(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d) {
    (void)pass;
    const flashcl__decode_plan *p = NULL;
    if (flashcl__decode_plan_for(ctx, d, 0, FLASHCL_CACHE_DTYPE_SAME, 1, &p) != FLASHCL_SUCCESS) return 0;
    return flashcl__decode_scratch_bytes(d, p, flashcl__decode_splits(ctx, d, p, d->max_seqlen_k));
}

static flashcl_status decode_backward(flashcl_context *ctx, const flashcl__call *call) {
    (void)call;
    return flashcl__fail(ctx, FLASHCL_ERR_NO_PLAN, "internal: the decode family has no backward");
}

const flashcl__backend flashcl__backend_decode = {
    "decode",       FLASHCL_PATH_FLASH,      decode_covers,   decode_plan,
    decode_scratch, flashcl__decode_forward, decode_backward, flashcl__decode_release,
};
