/* The portable family's table: it covers every flash call, on any device (the last family of the flash path). */
#include "portable.h"
#include "../../backward_args.h"

#include <stdlib.h>

static int portable_covers(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                           const flashcl_tensor *views, char *why, size_t cap) {
    (void)ctx, (void)pass, (void)d, (void)views, (void)why, (void)cap;
    return 1;
}

static flashcl_status portable_plan(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                                    flashcl_plan *out) {
    if (pass == FLASHCL__FORWARD) {
        const flashcl__flash_plan *p = NULL;
        flashcl_status st = flashcl__plan_flash(ctx, d, &p);
        if (st == FLASHCL_SUCCESS) *out = p->pub;
        return st;
    }
    const flashcl__backward_plan *p = NULL;
    flashcl_status st = flashcl__plan_backward(ctx, d, &p);
    if (st == FLASHCL_SUCCESS) *out = p->pub;
    return st;
}

static void portable_release(flashcl_context *ctx) {
    flashcl__portable_state *state = ctx->family[FLASHCL__FAMILY_PORTABLE];
    if (!state) return;
    flashcl__release_flash_plans(state);
    flashcl__release_backward_plans(state);
    free(state);
    ctx->family[FLASHCL__FAMILY_PORTABLE] = NULL;
}

const flashcl__backend flashcl__backend_portable = {
    "portable",
    FLASHCL_PATH_FLASH,
    portable_covers,
    portable_plan,
    flashcl__bwd_dsum_scratch_bytes,
    flashcl__portable_forward,
    flashcl__portable_backward,
    portable_release,
};
