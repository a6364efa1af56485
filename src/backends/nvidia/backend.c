/* The NVIDIA tensor-core family's table. */
#include "nvidia.h"
#include "../../backward_args.h"
#include "../../tile_override.h"

#include <stdio.h>
#include <stdlib.h>

/* FLASHCL_TILE (FLASHCL_BWD_KERNEL for the backward) names another family's kernel: a forced run
   must test that kernel on NVIDIA as everywhere else, so the tensor cores step aside. A value that
   does not parse is the named family's error to report, not ours. FLASHCL_TILE=kernel=mma names
   this family (*ours): it takes the forward even where it does not apply, and refuses it there,
   naming why (plan.c), as a forced kernel of any family does. */
static int kernel_forced(flashcl__pass pass, int *ours, char *why, size_t cap) {
    int present = 0;
    *ours = 0;
    if (pass == FLASHCL__FORWARD) {
        flashcl__tile_override ov;
        const int parsed = flashcl__read_tile_override(NULL, &ov) == FLASHCL_SUCCESS;
        *ours = parsed && ov.present && ov.kernel == FLASHCL__TILE_KERNEL_MMA;
        present = !*ours && (!parsed || ov.present);
    } else {
        flashcl__bwd_override ov;
        present = flashcl__read_bwd_override(NULL, &ov) != FLASHCL_SUCCESS || ov.present;
    }
    if (present)
        snprintf(why, cap, "%s forces another family",
                 pass == FLASHCL__FORWARD ? "FLASHCL_TILE" : "FLASHCL_BWD_KERNEL");
    return present;
}

static int nvidia_covers(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                         const flashcl_tensor *views, char *why, size_t cap) {
    int ours = 0;
    if (kernel_forced(pass, &ours, why, cap)) return 0;
    if (ours) return 1;
    if (!flashcl__mma_covers(ctx, pass, d, why, cap)) return 0;
    const int n = pass == FLASHCL__FORWARD ? FLASHCL__FORWARD_VIEWS : FLASHCL__BACKWARD_VIEWS;
    const size_t chunk = flashcl__mma_chunk_elems(d);
    if (views && !flashcl__mma_views_aligned(views, n, chunk)) {
        snprintf(why, cap, "tensor-core path needs views 16-byte aligned (offsets and strides multiples of %zu)",
                 chunk);
        return 0;
    }
    return 1;
}

/* A build serves every call with its switches, whatever their run-time window: the variants
   named in the reason are this call's (16-bit storage itself is not a variant here). */
static void append_call_variants(const flashcl_attention_desc *d, flashcl_plan *out) {
    flashcl_attention_desc f32 = *d;
    f32.dtype = FLASHCL_DTYPE_F32;
    if (!flashcl__desc_is_plain(&f32)) flashcl__append_variants(d, out->reason, sizeof out->reason);
}

static flashcl_status nvidia_plan(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                                  flashcl_plan *out) {
    flashcl_status st;
    if (pass == FLASHCL__FORWARD) {
        const flashcl__mma_plan *p = NULL;
        st = flashcl__mma_plan_for(ctx, d, &p);
        if (st == FLASHCL_SUCCESS) *out = p->pub;
    } else {
        const flashcl__mma_bwd *w = NULL;
        st = flashcl__mma_backward_plan_for(ctx, d, &w);
        if (st == FLASHCL_SUCCESS) *out = w->pub;
    }
    if (st == FLASHCL_SUCCESS) append_call_variants(d, out);
    return st;
}

/* D, and for a backward whose dQ reads dS, the dS scratch and the (P Z)^T one beside it (launch.c). */
static size_t nvidia_scratch_bytes(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d) {
    size_t bytes = flashcl__bwd_dsum_scratch_bytes(ctx, pass, d), keys = 0, pitch = 0;
    const flashcl__mma_bwd *w = NULL;
    if (pass == FLASHCL__BACKWARD && flashcl__mma_backward_plan_for(ctx, d, &w) == FLASHCL_SUCCESS) {
        const size_t ds = flashcl__mma_ds_bytes(ctx, d, w, &keys, &pitch);
        bytes += ds + flashcl__mma_ps_bytes(ctx, w, ds);
    }
    return bytes;
}

static void nvidia_release(flashcl_context *ctx) {
    flashcl__nvidia_state *state = ctx->family[FLASHCL__FAMILY_NVIDIA];
    if (!state) return;
    flashcl__mma_release_plans(state);
    free(state);
    ctx->family[FLASHCL__FAMILY_NVIDIA] = NULL;
}

const flashcl__backend flashcl__backend_nvidia = {
    "nvidia",
    FLASHCL_PATH_FLASH,
    nvidia_covers,
    nvidia_plan,
    nvidia_scratch_bytes,
    flashcl__mma_forward,
    flashcl__mma_backward,
    nvidia_release,
};
