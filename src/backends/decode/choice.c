/*
 * Where a decode plan's knobs come from, most specific first: FLASHCL_TILE
 * naming a decode kernel (origin "env"), the tuned plan for the call's decode
 * key (tuning.h: origin "tuned" from the tuning file, "table" from the
 * built-in table), else plan.c's formula (origin "table"). Also what values
 * each kernel takes: an override with others is an error that names the
 * field; a tuned entry with others (a file from an older build of the
 * kernels) is set aside, the plan's reason says so, and the formula plans.
 */
#include "decode.h"
#include "../../tuning.h"

#include <stdio.h>
#include <string.h>

static int pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

/* Whether ov's knobs are ones its kernel takes on this device; why not in `why`. */
static int knobs_legal(const flashcl_context *ctx, const flashcl__tile_override *ov, char *why, size_t cap) {
    if (ov->kernel == FLASHCL__TILE_KERNEL_DECODE) {
        if (ov->lanes > 0 && (!pow2(ov->lanes) || ov->lanes > 32)) {
            snprintf(why, cap, "lanes=%d: the GPU decode kernel takes 1, 2, 4, 8, 16 or 32 lanes per key", ov->lanes);
            return 0;
        }
        /* At least 32 work-items, a power of two: every lane count divides it. */
        if (ov->work_group > 0 && (!pow2(ov->work_group) || ov->work_group < 32 || ov->work_group > 1024 ||
                                   (size_t)ov->work_group > ctx->info.max_work_group_size)) {
            snprintf(why, cap, "wg=%d: the GPU decode kernel takes a power of two from 32 to %zu (the device's limit)",
                     ov->work_group,
                     ctx->info.max_work_group_size < 1024 ? ctx->info.max_work_group_size : (size_t)1024);
            return 0;
        }
    } else {
        /* The CPU kernel keeps ROWS x CHUNK scores and HEADS x ROWS rows of state in private arrays. */
        const struct {
            int value, most;
            const char *key, *what;
        } limits[] = {{ov->block_rows, 16, "br", "rows per work-item"},
                      {ov->block_cols, 64, "bc", "keys per chunk"},
                      {ov->heads, 8, "heads", "KV heads per work-item"}};
        for (int i = 0; i < 3; ++i)
            if (limits[i].value > limits[i].most) {
                snprintf(why, cap, "%s=%d: the CPU decode kernel takes at most %d %s", limits[i].key, limits[i].value,
                         limits[i].most, limits[i].what);
                return 0;
            }
    }
    return 1;
}

static int decode_kernel(int kernel) {
    return kernel == FLASHCL__TILE_KERNEL_DECODE || kernel == FLASHCL__TILE_KERNEL_DECODE_CPU;
}

flashcl_status flashcl__decode_choice_for(flashcl_context *ctx, const flashcl_attention_desc *d, int cache_dtype,
                                          flashcl__decode_choice *out) {
    memset(out, 0, sizeof *out);
    out->origin = "table";
    char why[256];
    /* An override that does not parse, or names another family, leaves the knobs to the steps below:
       flashcl_forward never reaches this family then (flashcl__decode_covers), and a KV-cache call,
       which always runs here, plans as it would without it. */
    if (flashcl__read_tile_override(NULL, &out->ov) == FLASHCL_SUCCESS && out->ov.present &&
        decode_kernel(out->ov.kernel)) {
        out->origin = "env";
        snprintf(out->why, sizeof out->why, "knobs from FLASHCL_TILE");
        if (!knobs_legal(ctx, &out->ov, why, sizeof why))
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE, "FLASHCL_TILE: %s", why);
        return FLASHCL_SUCCESS;
    }
    out->ov.present = 0;
    const char *origin = NULL;
    char entry[256];
    flashcl__tile_override tuned;
    if (!flashcl__tuned_decode_plan(ctx, d, cache_dtype, &tuned, &origin, entry, sizeof entry)) return FLASHCL_SUCCESS;
    if (!knobs_legal(ctx, &tuned, why, sizeof why)) {
        flashcl__appendf(out->why, sizeof out->why, "%s rejected (%s), the formula's plan instead", entry, why);
        return FLASHCL_SUCCESS;
    }
    out->ov = tuned;
    out->origin = origin;
    flashcl__appendf(out->why, sizeof out->why, "%s", entry);
    return FLASHCL_SUCCESS;
}
