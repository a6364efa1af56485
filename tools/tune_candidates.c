#include "tune_candidates.h"

#include <stdio.h>
#include <string.h>

bool tune_encode_plan(const flashcl_plan *p, char *out, size_t cap) {
    int n = -1;
    if (strcmp(p->kernel, "flash_fwd_cpu") == 0)
        n = snprintf(out, cap, "kernel=cpu,br=%d,bc=%d", p->block_rows, p->block_cols);
    else if (strcmp(p->kernel, "flash_fwd_tiles") == 0)
        n = snprintf(out, cap, "kernel=tiles,br=%d,bc=%d", p->block_rows, p->block_cols);
    else if (strcmp(p->kernel, "flash_fwd_split") == 0)
        n = snprintf(out, cap, "kernel=split,br=%d,bc=%d,tpr=%d", p->block_rows, p->block_cols, p->threads_per_row);
    else if (strcmp(p->kernel, "flash_fwd_rows") == 0)
        n = snprintf(out, cap, "kernel=rows,br=%d,bc=%d,staging=%s", p->block_rows, p->block_cols,
                     p->staging == FLASHCL_STAGING_DIRECT ? "direct" : "local");
    return n > 0 && (size_t)n < cap;
}

bool tune_candidates_contain(const tune_candidates *c, const char *tile) {
    for (size_t i = 0; i < c->count; ++i)
        if (strcmp(c->tile[i], tile) == 0) return true;
    return false;
}

static void add(tune_candidates *c, const char *tile) {
    if (c->count < TUNE_MAX_CANDIDATES && !tune_candidates_contain(c, tile))
        snprintf(c->tile[c->count++], TUNE_TILE_CAP, "%s", tile);
}

/* The CPU family (cl/flash_cpu.cl): br rows per work-item (16 lanes a group), bc keys per chunk (a multiple
   of 6). 48 keeps a chunk in L1 at d = 64; wider chunks trade L1 hits for fewer passes over the row state. */
static void cpu_family(tune_candidates *c) {
    static const int rows[] = {16, 32, 64};
    static const int chunks[] = {96, 24, 192, 48, 72, 144};
    char t[TUNE_TILE_CAP];
    for (size_t j = 0; j < sizeof chunks / sizeof chunks[0]; ++j)
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; ++i) {
            snprintf(t, sizeof t, "kernel=cpu,br=%d,bc=%d", rows[i], chunks[j]);
            add(c, t);
        }
}

/* The portable kernels: the register-blocked tiles (br, bc in {16..64}), the split rows (tpr work-items a
   row) and one work-item a row; work-groups above the device's limit are left out here. */
static void portable(tune_candidates *c, size_t max_wg) {
    char t[TUNE_TILE_CAP];
    static const int tiles[] = {64, 32, 48, 16};
    for (size_t i = 0; i < 4; ++i)
        for (size_t j = 0; j < 4; ++j) {
            snprintf(t, sizeof t, "kernel=tiles,br=%d,bc=%d", tiles[i], tiles[j]);
            if (256 <= max_wg) add(c, t);
        }
    static const int tprs[] = {4, 8, 2};
    static const int brs[] = {32, 64, 16};
    static const int bcs[] = {32, 64};
    for (size_t i = 0; i < 3; ++i)
        for (size_t j = 0; j < 3; ++j)
            for (size_t k = 0; k < 2; ++k) {
                if ((size_t)brs[j] * (size_t)tprs[i] > max_wg) continue;
                snprintf(t, sizeof t, "kernel=split,br=%d,bc=%d,tpr=%d", brs[j], bcs[k], tprs[i]);
                add(c, t);
            }
    static const int rbr[] = {64, 128, 32};
    for (size_t j = 0; j < 3; ++j)
        for (size_t k = 0; k < 2; ++k) {
            if ((size_t)rbr[j] > max_wg) continue;
            snprintf(t, sizeof t, "kernel=rows,br=%d,bc=%d,staging=local", rbr[j], bcs[k]);
            add(c, t);
        }
}

void tune_candidates_for(const char *base, bool is_cpu_family, size_t max_wg, tune_candidates *out) {
    out->count = 0;
    add(out, base);
    if (is_cpu_family) {
        cpu_family(out);
        /* The portable rows kernel also runs on a CPU (about 5x slower there): a few, last. */
        add(out, "kernel=rows,br=64,bc=64,staging=local");
        add(out, "kernel=rows,br=128,bc=32,staging=local");
    } else {
        portable(out, max_wg);
    }
}
