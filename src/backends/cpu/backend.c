/* The CPU family's table. */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

static int cpu_covers(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                      const flashcl_tensor *views, char *why, size_t cap) {
    (void)views;
    return flashcl__cpu_wanted(ctx, pass, d, why, cap);
}

static flashcl_status cpu_plan(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                               flashcl_plan *out) {
    const flashcl__cpu_plan *p = NULL;
    flashcl_status st = flashcl__cpu_plan_for(ctx, pass, d, &p);
    if (st != FLASHCL_SUCCESS) return st;
    *out = p->pub;
    if (pass == FLASHCL__BACKWARD) { /* the form depends on the call's shape, not only on the cached build */
        char form[200];
        if (flashcl__cpu_bwd_fused(ctx, p, d, form, sizeof form))
            flashcl__copy_str(out->kernel, sizeof out->kernel, FLASHCL__CPU_FUSED_KERNEL);
        /* In front: the reason's tail (variants, skipped families) may be cut at its size. */
        const size_t cap = sizeof out->reason, head = strlen(form) + 2;
        memmove(out->reason + head, out->reason, cap - head - 1);
        out->reason[cap - 1] = '\0';
        memcpy(out->reason, form, head - 2);
        memcpy(out->reason + head - 2, "; ", 2);
    }
    return st;
}

/* The packed copies, and for the backward D (one float per query row). */
static size_t cpu_scratch(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d) {
    const flashcl__cpu_plan *p = NULL;
    if (flashcl__cpu_plan_for(ctx, pass, d, &p) != FLASHCL_SUCCESS) return 0;
    size_t bytes = flashcl__cpu_packed_scratch(ctx, p, pass, d);
    if (pass == FLASHCL__BACKWARD) bytes += flashcl__row_count(d) * sizeof(float);
    return bytes;
}

static void cpu_release(flashcl_context *ctx) {
    flashcl__cpu_state *state = ctx->family[FLASHCL__FAMILY_CPU];
    if (!state) return;
    flashcl__cpu_release_plans(state);
    free(state);
    ctx->family[FLASHCL__FAMILY_CPU] = NULL;
}

const flashcl__backend flashcl__backend_cpu = {
    "cpu",       FLASHCL_PATH_FLASH, cpu_covers, cpu_plan, cpu_scratch, flashcl__cpu_forward, flashcl__cpu_backward,
    cpu_release,
};
