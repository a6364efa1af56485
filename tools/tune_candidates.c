#include "tune_candidates.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The integer after "NAME=" in a kernel's build options, given as "-DNAME=" or "-D NAME="; -1 when absent. */
static int option_int(const char *options, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = strstr(options, name); p; p = strstr(p + 1, name))
        if (p > options && (p[-1] == ' ' || p[-1] == 'D') && p[n] == '=') return atoi(p + n + 1);
    return -1;
}

/* The integer value of key in a tile text ("kernel=decode,br=4,..."); -1 when absent. */
static int tile_int(const char *tile, const char *key) {
    const size_t n = strlen(key);
    for (const char *p = tile; p && *p; p = strchr(p, ','), p = p ? p + 1 : NULL)
        if (strncmp(p, key, n) == 0 && p[n] == '=') return atoi(p + n + 1);
    return -1;
}

bool tune_plan_is_wgmma(const flashcl_plan *p) {
    return strcmp(p->kernel, "flash_fwd_mma") == 0 && option_int(p->build_options, "MMA_WG") > 0;
}

bool tune_encode_plan(const flashcl_plan *p, char *out, size_t cap) {
    int n = -1;
    const char *o = p->build_options;
    if (strcmp(p->kernel, "flash_fwd_cpu") == 0)
        n = snprintf(out, cap, "kernel=cpu,br=%d,bc=%d", p->block_rows, p->block_cols);
    else if (strcmp(p->kernel, "flash_fwd_tiles") == 0)
        n = snprintf(out, cap, "kernel=tiles,br=%d,bc=%d", p->block_rows, p->block_cols);
    else if (strcmp(p->kernel, "flash_fwd_split") == 0)
        n = snprintf(out, cap, "kernel=split,br=%d,bc=%d,tpr=%d", p->block_rows, p->block_cols, p->threads_per_row);
    else if (strcmp(p->kernel, "flash_fwd_rows") == 0)
        n = snprintf(out, cap, "kernel=rows,br=%d,bc=%d,staging=%s", p->block_rows, p->block_cols,
                     p->staging == FLASHCL_STAGING_DIRECT ? "direct" : "local");
    else if (strcmp(p->kernel, "flash_fwd_mma") == 0 && option_int(o, "MMA_WARPS") > 0 && !tune_plan_is_wgmma(p))
        n = snprintf(out, cap, "kernel=mma,warps=%d,bc=%d,mt=%d,ql=%d", option_int(o, "MMA_WARPS"),
                     option_int(o, "MMA_BC"), option_int(o, "MMA_MT"), option_int(o, "MMA_QLOCAL"));
    else if (strcmp(p->kernel, "flash_decode") == 0 && option_int(o, "UNROLL") > 0 && option_int(o, "LANES") > 0)
        n = snprintf(out, cap, "kernel=decode,br=%d,bc=%d,lanes=%d,wg=%zu", p->block_rows, option_int(o, "UNROLL"),
                     option_int(o, "LANES"), p->work_group_size);
    else if (strcmp(p->kernel, "flash_decode_cpu") == 0 && option_int(o, "HEADS") > 0)
        n = snprintf(out, cap, "kernel=decode_cpu,br=%d,bc=%d,heads=%d", p->block_rows, p->block_cols,
                     option_int(o, "HEADS"));
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

/*
 * A grid of knobs around a base plan: knob k takes values[k][0] (the base's) or one of its alternatives,
 * nearest first. The combinations go in order of how many knobs differ from the base (the base, then every
 * single change, then pairs ...), so a short budget measures the base's neighbours first.
 */
enum { GRID_KNOBS = 4, GRID_VALUES = 6 };
typedef struct knob_grid {
    int knobs;
    int count[GRID_KNOBS];
    int values[GRID_KNOBS][GRID_VALUES];
} knob_grid;

/* Adds v as an alternative of knob k unless it is there already or out of [lo, hi]. */
static void grid_value(knob_grid *g, int k, int v, int lo, int hi) {
    if (v < lo || v > hi || g->count[k] == GRID_VALUES) return;
    for (int i = 0; i < g->count[k]; ++i)
        if (g->values[k][i] == v) return;
    g->values[k][g->count[k]++] = v;
}

typedef void (*grid_format)(const int *v, void *arg, char *out, size_t cap); /* out "" = skip the combination */

static void grid_add_all(const knob_grid *g, grid_format format, void *arg, tune_candidates *c) {
    int total = 1;
    for (int k = 0; k < g->knobs; ++k) total *= g->count[k];
    for (int distance = 0; distance <= g->knobs; ++distance)
        for (int index = 0; index < total; ++index) {
            int v[GRID_KNOBS], rest = index, differ = 0;
            for (int k = g->knobs - 1; k >= 0; --k) {
                const int i = rest % g->count[k];
                rest /= g->count[k];
                v[k] = g->values[k][i];
                differ += i != 0;
            }
            if (differ != distance) continue;
            char t[TUNE_TILE_CAP] = "";
            format(v, arg, t, sizeof t);
            if (t[0]) add(c, t);
        }
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

/* The portable kernels: the register-blocked tiles (br in {16..128}, bc in {16..64}; 128-key tiles lost to
   64 on an H100 at every br), the split rows (tpr work-items a row) and one work-item a row; work-groups above
   the device's limit are left out here, tiles above its __local fail their plan and are noted. */
static void portable(tune_candidates *c, size_t max_wg) {
    char t[TUNE_TILE_CAP];
    static const int rows[] = {64, 128, 96, 32, 48, 16};
    static const int keys[] = {64, 32, 48, 16};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; ++i)
        for (size_t j = 0; j < sizeof keys / sizeof keys[0]; ++j) {
            snprintf(t, sizeof t, "kernel=tiles,br=%d,bc=%d", rows[i], keys[j]);
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

/* The tensor-core forward (cl/flash_fwd_mma.cl): warps per work-group, keys per tile, 16-row tiles per warp,
   Q in __local. Q stays in __local only at padded head dims that are multiples of 64 in 16-bit storage (the
   library refuses ql=1 elsewhere, so it is not listed); shapes over the device's __local are refused by the
   library's plan query. */
typedef struct mma_limits {
    size_t max_wg;
} mma_limits;

static void mma_format(const int *v, void *arg, char *out, size_t cap) {
    const mma_limits *l = arg;
    if ((size_t)(32 * v[0]) <= l->max_wg)
        snprintf(out, cap, "kernel=mma,warps=%d,bc=%d,mt=%d,ql=%d", v[0], v[1], v[2], v[3]);
}

static void mma_family(const char *base, size_t head_dim, flashcl_dtype dtype, size_t max_wg, tune_candidates *c) {
    knob_grid g = {4, {0}, {{0}}};
    grid_value(&g, 0, tile_int(base, "warps"), 1, 8);
    grid_value(&g, 1, tile_int(base, "bc"), 16, 64);
    grid_value(&g, 2, tile_int(base, "mt"), 1, 2);
    grid_value(&g, 3, tile_int(base, "ql"), 0, 1);
    if (g.count[0] == 0 || g.count[1] == 0 || g.count[2] == 0 || g.count[3] == 0) return; /* not our encoding */
    static const int warps[] = {4, 8, 2, 1}, bcs[] = {64, 32, 16};
    for (int i = 0; i < 4; ++i) grid_value(&g, 0, warps[i], 1, 8);
    for (int i = 0; i < 3; ++i) grid_value(&g, 1, bcs[i], 16, 64);
    grid_value(&g, 2, 3 - g.values[2][0], 1, 2);
    const size_t padded = (head_dim + 15) / 16 * 16;
    const int q_local_ok = padded % 64 == 0 && dtype != FLASHCL_DTYPE_F32 && dtype != FLASHCL_DTYPE_DEFAULT;
    if (q_local_ok) grid_value(&g, 3, 1 - g.values[3][0], 0, 1);
    mma_limits l = {max_wg};
    grid_add_all(&g, mma_format, &l, c);
}

void tune_candidates_for(const char *base, size_t head_dim, flashcl_dtype dtype, size_t max_wg, tune_candidates *out) {
    out->count = 0;
    add(out, base);
    if (strncmp(base, "kernel=mma,", 11) == 0) {
        /* The portable kernels run 16-bit storage 10-20x slower than the tensor cores: not worth the budget. */
        mma_family(base, head_dim, dtype, max_wg, out);
    } else if (strncmp(base, "kernel=cpu,", 11) == 0) {
        cpu_family(out);
        /* The portable rows kernel also runs on a CPU (about 5x slower there): a few, last. */
        add(out, "kernel=rows,br=64,bc=64,staging=local");
        add(out, "kernel=rows,br=128,bc=32,staging=local");
    } else {
        portable(out, max_wg);
    }
}

/* ---- decode */

static int pow2_at_least(size_t x) {
    int p = 1;
    while ((size_t)p < x && p < 16) p *= 2;
    return p;
}

/* The GPU kernel (cl/flash_decode.cl): rows, keys per lane group and step (UNROLL), lanes per key, work-items
   per group. More rows than the call's packed rows would idle, so they stop at its power of two. */
static void decode_gpu_format(const int *v, void *arg, char *out, size_t cap) {
    (void)arg;
    if (v[3] % v[2] == 0) snprintf(out, cap, "kernel=decode,br=%d,bc=%d,lanes=%d,wg=%d", v[0], v[1], v[2], v[3]);
}

static void decode_gpu(const char *base, int max_rows, size_t max_wg, tune_candidates *c) {
    knob_grid g = {4, {0}, {{0}}};
    const int rows = tile_int(base, "br"), unroll = tile_int(base, "bc"), lanes = tile_int(base, "lanes"),
              wg = tile_int(base, "wg");
    grid_value(&g, 0, rows, 1, 16);
    grid_value(&g, 1, unroll, 1, 16);
    grid_value(&g, 2, lanes, 1, 32);
    grid_value(&g, 3, wg, 32, 1024);
    if (g.count[0] == 0 || g.count[1] == 0 || g.count[2] == 0 || g.count[3] == 0) return;
    grid_value(&g, 0, rows / 2, 1, max_rows);
    grid_value(&g, 0, rows * 2, 1, max_rows);
    static const int unrolls[] = {2, 1, 4};
    for (int i = 0; i < 3; ++i) grid_value(&g, 1, unrolls[i], 1, 16);
    grid_value(&g, 2, lanes / 2, 2, 32);
    grid_value(&g, 2, lanes * 2, 2, 32);
    static const int wgs[] = {128, 64, 256};
    for (int i = 0; i < 3; ++i) grid_value(&g, 3, wgs[i], 32, (int)(max_wg < 1024 ? max_wg : 1024));
    grid_add_all(&g, decode_gpu_format, NULL, c);
}

/* The CPU kernel (cl/flash_decode_cpu.cl): rows per work-item, keys per chunk (scored 16 keys to a
   vector, the last one padded), KV heads per work-item. */
static void decode_cpu_format(const int *v, void *arg, char *out, size_t cap) {
    (void)arg;
    snprintf(out, cap, "kernel=decode_cpu,br=%d,bc=%d,heads=%d", v[0], v[1], v[2]);
}

static void decode_cpu(const char *base, int max_rows, tune_candidates *c) {
    knob_grid g = {3, {0}, {{0}}};
    const int rows = tile_int(base, "br"), heads = tile_int(base, "heads");
    grid_value(&g, 0, rows, 1, 16);
    grid_value(&g, 1, tile_int(base, "bc"), 1, 64);
    grid_value(&g, 2, heads, 1, 8);
    if (g.count[0] == 0 || g.count[1] == 0 || g.count[2] == 0) return;
    grid_value(&g, 0, rows / 2, 1, max_rows);
    grid_value(&g, 0, rows * 2, 1, max_rows);
    static const int chunks[] = {16, 32, 8, 24}, heads_list[] = {8, 4, 2, 1};
    for (int i = 0; i < 4; ++i) grid_value(&g, 1, chunks[i], 1, 64);
    for (int i = 0; i < 4; ++i) grid_value(&g, 2, heads_list[i], 1, 8);
    grid_add_all(&g, decode_cpu_format, NULL, c);
}

void tune_decode_candidates(const char *base, size_t packed_rows, size_t max_wg, tune_candidates *out) {
    out->count = 0;
    add(out, base);
    const int max_rows = pow2_at_least(packed_rows);
    if (strncmp(base, "kernel=decode_cpu,", 18) == 0) {
        decode_cpu(base, max_rows, out);
        /* The GPU kernel as its formula plans it, and with one key per lane group and step. */
        add(out, "kernel=decode");
        add(out, "kernel=decode,bc=1");
    } else if (strncmp(base, "kernel=decode,", 14) == 0) {
        decode_gpu(base, max_rows, max_wg, out);
    }
}
