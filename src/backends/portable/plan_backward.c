/*
 * Plan for the flash backward: D = rowsum(dO*O) (flash_bwd_dot), then the
 * dK/dV and dQ kernels of one of two families.
 *
 * rows  (cl/flash_bwd.cl) one work-item per row (a key for dK/dV, a query
 *       for dQ) with four d-float rows in private memory, B rows of the
 *       other side staged through __local, so one size B serves both:
 *         seed: B = ceil(M / 4d) from the device's local memory (M floats), as forward;
 *         fit:  B <= 64, B <= the device's max work-group, and 2*B rows of d
 *               floats (+ two floats per row) within local memory;
 *         after the build, B is halved until the kernels' work-group limits accept it.
 *       A CPU holds those rows in L1; a GPU spills them (H200, b=16 h=16
 *       N=4096 d=128: 280 ms against 22 ms for the standard backward).
 * tiles (cl/flash_bwd_tiles.cl) 16x16 work-groups, every product register-
 *       blocked like a GEMM; Br query rows x Bc keys per block.
 *
 * Lookup chain, most specific first:
 *   1. FLASHCL_BWD_KERNEL=rows|tiles[,br=..,bc=..,slice=..] ("env"): exactly
 *      that family; tile sizes not given are fitted to the device, sizes given
 *      that do not fit are an error (FLASHCL_ERR_INVALID_TILE).
 *   2. The built-in table ("table"): any non-CPU device gets the tiles,
 *      Br=64 and Bc=64 up to d=128, Bc=32 to d=256, Br=32 Bc=16 above
 *      (d the longer of d_qk and d_v: dK, dV and dQ then stay near 64
 *      accumulators per work-item, well inside 255 registers). If the device
 *      or the built kernels do not accept that shape, it shrinks (first the
 *      phase-B row slice while that is the largest __local array, then Bc and
 *      Br by 16) and is rebuilt ("fallback"); if no tiles shape fits, the row
 *      kernels run ("fallback", the reason says why).
 *   3. CPUs: the row kernels from the formula above ("formula").
 * flash_bwd_dot (and flash_bwd_dsinks, with sinks) always come from the rows
 * build, so the rows plan is computed in every case; it is also what the
 * tiles fall back to.
 *
 * Plans are cached per context by head dims and variant switches (every
 * distinct build is its own plan); variants change the kernels' build
 * options, not the choice of family or tiles.
 */
#include "portable.h"
#include "../../tile_override.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROWS 64

#define TILES_GRID 16 /* the tiles kernels are a 16x16 grid */
#define TILES_WG (TILES_GRID * TILES_GRID)
#define TILES_SLICE 16     /* dims per phase-A slice */
#define TILES_MAX_BLOCK 64 /* TILE_M, TILE_N <= 4: registers */
#define MAX_TILE_ATTEMPTS 16

static const char *const rows_kernels = "flash_bwd_dkdv+flash_bwd_dq";
static const char *const tiles_kernels = "flash_bwd_dkdv_tiles+flash_bwd_dq_tiles";

/* What a plan is for: the head dims and the cl/variants.cl switches of the call. */
typedef struct {
    int d, dv;                   /* head dims of Q/K and of V/O */
    const char *variant_options; /* -D switches (HEAD_DIM_V included) */
    int sinks;                   /* build and check flash_bwd_dsinks too */
} problem;

static int dim_max(const problem *pr) { return pr->d > pr->dv ? pr->d : pr->dv; }

/* __local bytes of flash_bwd_dkdv (the larger row kernel): a Q and a dO tile plus lse2 and D per row. */
static size_t rows_local_bytes(int rows, const problem *pr) {
    return (size_t)rows * ((size_t)((pr->d + 3) / 4 + (pr->dv + 3) / 4) * 16 + 8);
}

static flashcl_status kernel_info(flashcl_context *ctx, cl_kernel k, size_t *wg, cl_ulong *local, cl_ulong *priv) {
    cl_int err = clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof *wg, wg, NULL);
    if (err == CL_SUCCESS)
        err = clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof *local, local, NULL);
    if (err == CL_SUCCESS)
        err = clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_PRIVATE_MEM_SIZE, sizeof *priv, priv, NULL);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS : flashcl__fail_cl(ctx, err, "clGetKernelWorkGroupInfo(backward)");
}

static void release_kernel(cl_kernel *k) {
    if (*k) clReleaseKernel(*k);
    *k = NULL;
}

static void release(flashcl__backward_plan *p) {
    release_kernel(&p->dot);
    release_kernel(&p->dkdv);
    release_kernel(&p->dq);
    release_kernel(&p->dsinks);
}

/* ------------------------------------------------------------------ rows */

static flashcl_status plan_rows(flashcl_context *ctx, const problem *pr, flashcl__backward_plan *out) {
    const flashcl__device_info *info = &ctx->info;
    const int d = pr->d;
    size_t m = (size_t)(info->local_mem_bytes / 4);
    /* The seed formula on the mean row length: a tile holds rows of d (Q or K) and d_v (dO or V) floats. */
    const size_t d_mean = ((size_t)pr->d + (size_t)pr->dv + 1) / 2;
    size_t seed = (m + 4 * d_mean - 1) / (4 * d_mean);
    int rows = seed > MAX_ROWS ? MAX_ROWS : (int)seed;
    if ((size_t)rows > info->max_work_group_size) rows = (int)info->max_work_group_size;
    while (rows > 1 && rows_local_bytes(rows, pr) > info->local_mem_bytes) rows /= 2;
    if (rows < 1 || rows_local_bytes(rows, pr) > info->local_mem_bytes)
        return flashcl__fail(ctx, FLASHCL_ERR_NO_PLAN, "no backward tile for d=%d fits %llu bytes of local memory", d,
                             (unsigned long long)info->local_mem_bytes);
    const char *origin = "formula";
    for (; rows >= 1; rows /= 2) {
        char options[sizeof out->pub.build_options];
        snprintf(options, sizeof options, "-D HEAD_DIM=%d -D BLOCK_M=%d -D BLOCK_N=%d %s", d, rows, rows,
                 pr->variant_options);
        cl_program program = NULL;
        flashcl_status st = flashcl__get_program(ctx, "flash_bwd.cl", options, &program);
        if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "flash_bwd_dot", &out->dot);
        if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "flash_bwd_dkdv", &out->dkdv);
        if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "flash_bwd_dq", &out->dq);
        if (st == FLASHCL_SUCCESS && pr->sinks)
            st = flashcl__create_kernel(ctx, program, "flash_bwd_dsinks", &out->dsinks);
        /* Without sinks the dot kernel stands in for the absent dsinks kernel (same work-group size). */
        size_t wg[4] = {0, 0, 0, 0};
        cl_ulong local[4] = {0, 0, 0, 0}, priv[4] = {0, 0, 0, 0};
        if (st == FLASHCL_SUCCESS) st = kernel_info(ctx, out->dot, &wg[0], &local[0], &priv[0]);
        if (st == FLASHCL_SUCCESS) st = kernel_info(ctx, out->dkdv, &wg[1], &local[1], &priv[1]);
        if (st == FLASHCL_SUCCESS) st = kernel_info(ctx, out->dq, &wg[2], &local[2], &priv[2]);
        if (st == FLASHCL_SUCCESS)
            st = kernel_info(ctx, pr->sinks ? out->dsinks : out->dot, &wg[3], &local[3], &priv[3]);
        if (st != FLASHCL_SUCCESS) {
            release(out);
            return st;
        }
        if (wg[0] < (size_t)rows || wg[1] < (size_t)rows || wg[2] < (size_t)rows || wg[3] < (size_t)rows) {
            release(out);
            origin = "fallback";
            continue;
        }
        flashcl_plan *p = &out->pub;
        flashcl__copy_str(p->kernel, sizeof p->kernel, rows_kernels);
        p->block_rows = rows;
        p->block_cols = rows;
        p->threads_per_row = 1;
        p->staging = FLASHCL_STAGING_LOCAL;
        p->work_group_size = (size_t)rows;
        p->local_mem_bytes = rows_local_bytes(rows, pr);
        p->private_mem_bytes = (size_t)(priv[1] > priv[2] ? priv[1] : priv[2]);
        flashcl__copy_str(p->origin, sizeof p->origin, origin);
        flashcl__copy_str(p->build_options, sizeof p->build_options, options);
        snprintf(p->reason, sizeof p->reason,
                 "seed: M=%zu floats of local memory, d=%d d_v=%d -> %zu rows; fitted to %d rows per work-group "
                 "(one work-item per key for dK/dV, per query for dQ), %d rows of the other side per __local tile",
                 m, d, pr->dv, seed, rows, rows);
        out->tiles = 0;
        out->dot_wg = out->main_wg = out->keys_per_group = out->rows_per_group = (size_t)rows;
        return FLASHCL_SUCCESS;
    }
    return flashcl__fail(ctx, FLASHCL_ERR_NO_PLAN, "no backward plan for d=%d fits this device's kernel limits", d);
}

/* ----------------------------------------------------------------- tiles */

typedef struct {
    int bm, bn, slice; /* query rows and keys per block; rows (keys) per phase-B slice */
} tile_shape;

/* The stage arrays of cl/flash_bwd_tiles.cl, in floats (mirrors its LDM, LDN, STAGE_A, STAGE_B). */
static size_t stage_a_floats(const tile_shape *s) {
    return TILES_SLICE * (2 * (size_t)(s->bm + 4) + 2 * (size_t)(s->bn + 4));
}
/* d: the longer of the two head dims (phase B stages rows of d_v for dV, of d for dK and dQ). */
static size_t stage_b_floats(const tile_shape *s, int d) { return (size_t)s->slice * (size_t)d; }

/* __local bytes of the larger of the two kernels: they share the stage; dK/dV adds P/dS [bm][bn + 4] with
   the rows' LSE and D, dQ its transposed dS [bn][bm + 4]. d as above. */
static size_t tiles_local_bytes(const tile_shape *s, int d) {
    size_t a = stage_a_floats(s), b = stage_b_floats(s, d);
    size_t dkdv = (size_t)s->bm * (size_t)(s->bn + 4) + 2 * (size_t)s->bm, dq = (size_t)s->bn * (size_t)(s->bm + 4);
    return 4 * ((a > b ? a : b) + (dkdv > dq ? dkdv : dq));
}

/* One step smaller in registers (and __local): Bc first while it is the larger, then Br. 0 at 16x16. */
static int shrink_block(tile_shape *s) {
    if (s->bn >= s->bm && s->bn > TILES_GRID)
        s->bn -= TILES_GRID;
    else if (s->bm > TILES_GRID)
        s->bm -= TILES_GRID;
    else
        return 0;
    return 1;
}

/* One step smaller in __local: the phase-B slice while it is the largest stage (it costs only barriers), else the block. */
static int shrink_local(tile_shape *s, int d) {
    if (stage_b_floats(s, d) > stage_a_floats(s) && s->slice > 1) {
        s->slice /= 2;
        return 1;
    }
    if (shrink_block(s)) return 1;
    if (s->slice > 1) {
        s->slice /= 2;
        return 1;
    }
    return 0;
}

/*
 * d: the longer head dim. Accumulators per work-item are TILE_N * (ceil(d/16) +
 * ceil(d_v/16)) for dK/dV and TILE_M * ceil(d/16) for dQ: narrowing the blocks
 * as d grows keeps both near 64 registers (64x64 to d = 128, 64x32 to 256,
 * 32x16 above), and phase B's row slice within 48 KiB of __local.
 */
static void tiles_table_shape(int d, tile_shape *s) {
    s->bm = d > 256 ? 32 : 64;
    s->bn = d > 256 ? 16 : d > 128 ? 32 : 64;
    s->slice = TILES_GRID;
}

/*
 * Builds the tiles program for s and, when both kernels accept 256 work-items
 * and their __local fits, installs them in out (replacing the row kernels).
 * *fits says which happened; *limit is the smaller CL_KERNEL_WORK_GROUP_SIZE.
 */
static flashcl_status try_tiles(flashcl_context *ctx, const tile_shape *s, const problem *pr,
                                flashcl__backward_plan *out, int *fits, size_t *limit) {
    char options[sizeof out->pub.build_options];
    snprintf(options, sizeof options, "-D HEAD_DIM=%d -D BLOCK_M=%d -D BLOCK_N=%d -D ROW_SLICE=%d %s", pr->d, s->bm,
             s->bn, s->slice, pr->variant_options);
    cl_program program = NULL;
    cl_kernel dkdv = NULL, dq = NULL;
    flashcl_status st = flashcl__get_program(ctx, "flash_bwd_tiles.cl", options, &program);
    if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "flash_bwd_dkdv_tiles", &dkdv);
    if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "flash_bwd_dq_tiles", &dq);
    size_t wg[2] = {0, 0};
    cl_ulong local[2] = {0, 0}, priv[2] = {0, 0};
    if (st == FLASHCL_SUCCESS) st = kernel_info(ctx, dkdv, &wg[0], &local[0], &priv[0]);
    if (st == FLASHCL_SUCCESS) st = kernel_info(ctx, dq, &wg[1], &local[1], &priv[1]);
    if (st != FLASHCL_SUCCESS) {
        release_kernel(&dkdv);
        release_kernel(&dq);
        return st;
    }
    *limit = wg[0] < wg[1] ? wg[0] : wg[1];
    cl_ulong max_local = local[0] > local[1] ? local[0] : local[1];
    *fits = *limit >= TILES_WG && max_local <= ctx->info.local_mem_bytes;
    if (!*fits) {
        release_kernel(&dkdv);
        release_kernel(&dq);
        return FLASHCL_SUCCESS;
    }
    release_kernel(&out->dkdv);
    release_kernel(&out->dq);
    out->dkdv = dkdv;
    out->dq = dq;
    out->tiles = 1;
    out->main_wg = TILES_WG;
    out->keys_per_group = (size_t)s->bn;
    out->rows_per_group = (size_t)s->bm;
    flashcl_plan *p = &out->pub;
    flashcl__copy_str(p->kernel, sizeof p->kernel, tiles_kernels);
    p->block_rows = s->bm;
    p->block_cols = s->bn;
    p->threads_per_row = TILES_GRID; /* 16 work-items share each query row of a score tile */
    p->staging = FLASHCL_STAGING_LOCAL;
    p->work_group_size = TILES_WG;
    /* POCL reports 0 for kernels whose __local arrays are static; use our own count then. */
    p->local_mem_bytes = max_local ? (size_t)max_local : tiles_local_bytes(s, dim_max(pr));
    p->private_mem_bytes = (size_t)(priv[0] > priv[1] ? priv[0] : priv[1]);
    flashcl__copy_str(p->build_options, sizeof p->build_options, options);
    return FLASHCL_SUCCESS;
}

/*
 * Fits s to the device (when may_shrink) and builds it. *ok: the tiles are
 * installed in out; otherwise why_not says what did not fit. *shrunk: the
 * installed shape is smaller than s.
 */
static flashcl_status plan_tiles(flashcl_context *ctx, const problem *pr, tile_shape s, int may_shrink,
                                 flashcl__backward_plan *out, int *ok, int *shrunk, char *why_not, size_t cap) {
    const flashcl__device_info *info = &ctx->info;
    const int d = dim_max(pr); /* what the __local count depends on */
    *ok = *shrunk = 0;
    why_not[0] = '\0';
    if (info->max_work_group_size < TILES_WG) {
        snprintf(why_not, cap, "the device allows %zu work-items per group, the tiles kernels need %d",
                 info->max_work_group_size, TILES_WG);
        return FLASHCL_SUCCESS;
    }
    const tile_shape asked = s;
    while (tiles_local_bytes(&s, d) > info->local_mem_bytes) {
        if (!may_shrink || !shrink_local(&s, d)) {
            snprintf(why_not, cap, "Br=%d Bc=%d slice=%d needs %zu B of __local, the device has %llu", asked.bm,
                     asked.bn, asked.slice, tiles_local_bytes(&asked, d), (unsigned long long)info->local_mem_bytes);
            return FLASHCL_SUCCESS;
        }
    }
    for (int attempt = 0; attempt < MAX_TILE_ATTEMPTS; ++attempt) {
        int fits = 0;
        size_t limit = 0;
        flashcl_status st = try_tiles(ctx, &s, pr, out, &fits, &limit);
        if (st != FLASHCL_SUCCESS) return st;
        if (fits) {
            *ok = 1;
            *shrunk = s.bm != asked.bm || s.bn != asked.bn || s.slice != asked.slice;
            return FLASHCL_SUCCESS;
        }
        /* Registers (or the driver's own __local) limit the built kernels: smaller blocks use fewer of both. */
        if (!may_shrink || !shrink_block(&s)) {
            snprintf(why_not, cap,
                     "the built tiles kernels (Br=%d Bc=%d slice=%d) accept %zu work-items per group, or more __local "
                     "than the device's %llu B; they need %d",
                     s.bm, s.bn, s.slice, limit, (unsigned long long)info->local_mem_bytes, TILES_WG);
            return FLASHCL_SUCCESS;
        }
    }
    snprintf(why_not, cap, "no tiles shape fits after %d builds", MAX_TILE_ATTEMPTS);
    return FLASHCL_SUCCESS;
}

/* How to force a family, appended to every plan reason that was not forced. */
static const char *const force_hint = "; FLASHCL_BWD_KERNEL=rows|tiles[,br=,bc=,slice=] forces a family";

/* Appends the tiles plan's description to its reason. */
static void describe_tiles(flashcl__backward_plan *out, const problem *pr) {
    flashcl_plan *p = &out->pub;
    flashcl__appendf(
        p->reason, sizeof p->reason,
        "; kernels %s, Br=%d query rows x Bc=%d keys per block, 16x16 work-items, %zu B local, d=%d d_v=%d; "
        "flash_bwd_dot from the row build, %zu rows per work-group",
        p->kernel, p->block_rows, p->block_cols, p->local_mem_bytes, pr->d, pr->dv, out->dot_wg);
}

static int valid_block(int v) { return v >= TILES_GRID && v <= TILES_MAX_BLOCK && v % TILES_GRID == 0; }

/* ------------------------------------------------------------ the chain */

static flashcl_status compute(flashcl_context *ctx, const problem *pr, flashcl__backward_plan *out) {
    flashcl__bwd_override ov;
    flashcl_status st = flashcl__read_bwd_override(ctx, &ov);
    if (st != FLASHCL_SUCCESS) return st;
    st = plan_rows(ctx, pr, out);
    if (st != FLASHCL_SUCCESS) return st;

    flashcl_plan *p = &out->pub;
    char rows_reason[sizeof p->reason];
    flashcl__copy_str(rows_reason, sizeof rows_reason, p->reason);
    char why_not[256];
    int ok = 0, shrunk = 0;

    if (ov.present && !ov.tiles) {
        flashcl__copy_str(p->reason, sizeof p->reason, "FLASHCL_BWD_KERNEL=rows: row kernels; ");
        flashcl__appendf(p->reason, sizeof p->reason, "%s", rows_reason);
        flashcl__copy_str(p->origin, sizeof p->origin, "env");
        return FLASHCL_SUCCESS;
    }

    if (ov.present) {
        tile_shape s;
        tiles_table_shape(dim_max(pr), &s);
        if ((ov.block_rows > 0 && !valid_block(ov.block_rows)) || (ov.block_cols > 0 && !valid_block(ov.block_cols)) ||
            (ov.slice > 0 && TILES_GRID % ov.slice != 0)) {
            release(out);
            char got[64] = ""; /* only the sizes the variable gave: the others take the table's values */
            if (ov.block_rows > 0) flashcl__appendf(got, sizeof got, " br=%d", ov.block_rows);
            if (ov.block_cols > 0) flashcl__appendf(got, sizeof got, " bc=%d", ov.block_cols);
            if (ov.slice > 0) flashcl__appendf(got, sizeof got, " slice=%d", ov.slice);
            return flashcl__fail(
                ctx, FLASHCL_ERR_INVALID_TILE,
                "FLASHCL_BWD_KERNEL: the tiles kernels need br and bc in {16, 32, 48, 64} and slice in "
                "{1, 2, 4, 8, 16} (got%s)",
                got);
        }
        if (ov.block_rows > 0) s.bm = ov.block_rows;
        if (ov.block_cols > 0) s.bn = ov.block_cols;
        if (ov.slice > 0) s.slice = ov.slice;
        int given = ov.block_rows > 0 || ov.block_cols > 0 || ov.slice > 0;
        st = plan_tiles(ctx, pr, s, !given, out, &ok, &shrunk, why_not, sizeof why_not);
        if (st == FLASHCL_SUCCESS && !ok)
            st = flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE, "FLASHCL_BWD_KERNEL=tiles: %s", why_not);
        if (st != FLASHCL_SUCCESS) {
            release(out);
            return st;
        }
        snprintf(p->reason, sizeof p->reason, "FLASHCL_BWD_KERNEL=tiles: GPU tiles kernels forced%s",
                 given ? ", sizes as given" : (shrunk ? ", fitted to the device" : ""));
        flashcl__copy_str(p->origin, sizeof p->origin, "env");
        describe_tiles(out, pr);
        return FLASHCL_SUCCESS;
    }

    if (!ctx->info.is_cpu) {
        tile_shape s;
        tiles_table_shape(dim_max(pr), &s);
        st = plan_tiles(ctx, pr, s, 1, out, &ok, &shrunk, why_not, sizeof why_not);
        if (st != FLASHCL_SUCCESS) {
            release(out);
            return st;
        }
        if (ok) {
            snprintf(p->reason, sizeof p->reason, "table: GPU device -> register-blocked tiles kernels, Br=%d Bc=%d%s",
                     s.bm, s.bn, shrunk ? ", shrunk to fit the device" : "");
            flashcl__copy_str(p->origin, sizeof p->origin, shrunk ? "fallback" : "table");
            describe_tiles(out, pr);
            flashcl__appendf(p->reason, sizeof p->reason, "%s", force_hint);
            return FLASHCL_SUCCESS;
        }
        p->reason[0] = '\0';
        flashcl__appendf(p->reason, sizeof p->reason,
                         "table: GPU device -> tiles kernels, but %s; fell back to the row kernels; %s", why_not,
                         rows_reason);
        flashcl__appendf(p->reason, sizeof p->reason, "%s", force_hint);
        flashcl__copy_str(p->origin, sizeof p->origin, "fallback");
        return FLASHCL_SUCCESS;
    }

    flashcl__copy_str(p->reason, sizeof p->reason,
                      "CPU device: row kernels (a work-item's four d-float rows stay in L1); ");
    flashcl__appendf(p->reason, sizeof p->reason, "%s%s", rows_reason, force_hint);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl__plan_backward(flashcl_context *ctx, const flashcl_attention_desc *d,
                                      const flashcl__backward_plan **out) {
    flashcl__portable_state *state = flashcl__portable_state_of(ctx);
    if (!state) return FLASHCL_ERR_OUT_OF_HOST_MEMORY;
    char options[256], key[sizeof state->backward->key];
    flashcl__variant_options(d, options, sizeof options);
    snprintf(key, sizeof key, "d=%zu %s", d->head_dim, options);
    for (flashcl__backward_plan *p = state->backward; p; p = p->next)
        if (strcmp(p->key, key) == 0) {
            *out = p;
            return FLASHCL_SUCCESS;
        }
    flashcl__backward_plan *p = calloc(1, sizeof *p);
    if (!p) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for a plan");
    const problem pr = {(int)d->head_dim, (int)d->head_dim_v, options, d->sinks != NULL};
    flashcl_status st = compute(ctx, &pr, p);
    if (st != FLASHCL_SUCCESS) {
        release(p);
        free(p);
        return st;
    }
    flashcl__append_variants(d, p->pub.reason, sizeof p->pub.reason);
    flashcl__copy_str(p->key, sizeof p->key, key);
    p->next = state->backward;
    state->backward = p;
    *out = p;
    return FLASHCL_SUCCESS;
}

void flashcl__release_backward_plans(flashcl__portable_state *state) {
    while (state->backward) {
        flashcl__backward_plan *p = state->backward;
        state->backward = p->next;
        release(p);
        free(p);
    }
}
