/*
 * Tile plan for the flash forward kernel.
 *
 * 1. Start from the FlashAttention seed formula on the device's local memory
 *    (M floats): Bc = ceil(M / 4d), Br = min(Bc, d).
 * 2. Pick the kernel shape from the device type: a CPU gets one work-item per
 *    query row (its whole q and output row in private arrays, which a CPU
 *    holds in L1); a GPU, for d > 32, splits each row over several work-items
 *    so the per-item output slice stays small enough for registers. K/V go
 *    through __local on both: on POCL the direct-read variant (no barriers)
 *    measured slower, 10-12 against 17-22 GFLOP/s at b=1 h=8 N=2048 d=64,
 *    because the local tile is a dense, aligned, unaliased copy.
 * 3. Fit: Bc to the private score array (<= 64) and to multiples of 4 and of
 *    the threads per row; Br*threads to CL_DEVICE_MAX_WORK_GROUP_SIZE; the
 *    kernel's local bytes to CL_DEVICE_LOCAL_MEM_SIZE (shrinking Bc, then Br).
 * 4. FLASHCL_TILE overrides any of the above (kernel=cpu hands the call to
 *    the CPU family, src/backends/cpu).
 * 5. Build, then check CL_KERNEL_WORK_GROUP_SIZE and CL_KERNEL_LOCAL_MEM_SIZE;
 *    a plan that does not fit is halved and rebuilt ("fallback") rather than
 *    failing. The work-group is rounded to the kernel's preferred multiple
 *    when that still fits.
 */
#include "portable.h"
#include "../../tile_override.h"
#include "../../tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BLOCK_COLS 64 /* the rows kernel keeps a tile's scores in a private array */
#define MAX_ATTEMPTS 12

enum { KERNEL_ROWS = 0, KERNEL_SPLIT = 1, KERNEL_TILES = 2 };
static const char *const kernel_names[] = {"flash_fwd_rows", "flash_fwd_split", "flash_fwd_tiles"};
static const char *const kernel_files[] = {"flash_fwd_rows.cl", "flash_fwd_split.cl", "flash_fwd_tiles.cl"};

typedef struct {
    int kernel, br, bc, tpr, staging;
    int dv;                      /* head dim of V and O (the d of the other functions is that of Q and K) */
    const char *variant_options; /* cl/variants.cl switches of the call */
    int plain;                   /* no variant: the split kernel can run it */
    const char *features;        /* what makes the call not plain (flashcl__describe_features), for messages */
} shape;

#define TILES_GRID 16       /* flash_fwd_tiles is a 16x16 grid of work-items */
#define TILES_SLICE 16      /* ... streaming Q/K/V in slices of 16 */
#define TILES_MAX_BLOCK 128 /* 8 rows or keys per work-item: registers, and 48 KiB of __local at d = 128 */

static int fits_device(const flashcl_context *ctx, const shape *s, int d);

/* The built-in table (the step before the formula): GPUs get the register-
   blocked kernel, 64 keys per tile (4 per work-item) and 128 rows (8 per
   work-item) where the head dims are at most 128, else 64. 64x64 was
   measured on an H200 at 1.6-2x the formula's split kernel; the taller
   tiles on an H100 against 64x64 (float32, b4 h16 N4096): 128 rows at
   d = 32 1.23x, 64 1.14x (causal 1.12x), 128 1.15x (causal 1.16x against
   96 rows, the most that fit before the row maxima shared the V slice's
   __local). From 65 to 96 the table gave 96 rows while d_v = 96 was padded
   to 128 in P V; with the kernel's narrow tail group 128 rows beat 96 there
   too (H100, same run: d = 72 1.05x, 80 1.04x, 96 1.07x). Each Q row block
   streams K and V once, so more rows per block cut that traffic. A device
   whose __local cannot hold the taller tile gets 96 rows, then 64, then
   (large d_v) narrower key tiles; the caller checks that the result fits
   and, where the compiled kernel refuses 256 work-items, asks again with
   max_rows below the rows it tried. */
static int table_shape(const flashcl_context *ctx, int d, int max_rows, shape *s, char *why, size_t cap) {
    if (ctx->info.is_cpu) return 0;
    const int dims = d > s->dv ? d : s->dv;
    s->kernel = KERNEL_TILES;
    s->br = dims <= 128 ? 128 : 64;
    if (s->br > max_rows) s->br = max_rows;
    s->bc = 64;
    s->tpr = TILES_GRID;
    s->staging = FLASHCL_STAGING_LOCAL;
    while (s->br > 64 && !fits_device(ctx, s, d)) s->br -= 32;
    while (!fits_device(ctx, s, d) && s->bc > TILES_GRID) s->bc -= TILES_GRID;
    snprintf(why, cap, "table: GPU device -> register-blocked tiles kernel, Br=%d, Bc=%d", s->br, s->bc);
    return 1;
}

static int proto_plain(const shape *proto) { return proto->plain; }

static int round_up(int x, int m) { return (x + m - 1) / m * m; }
static int round_down(int x, int m) { return x / m * m; }

/* __local bytes each kernel declares (mirrors cl/flash_fwd_rows.cl, _split.cl and _tiles.cl). */
static size_t local_bytes(const shape *s, int d) {
    if (s->kernel == KERNEL_TILES) {
        /* The Q/K slices and P^T share one region, the V slice and the row reductions another. */
        size_t qk = (size_t)TILES_SLICE * ((size_t)s->br + 4 + (size_t)s->bc + 4);
        size_t pt = (size_t)s->bc * ((size_t)s->br + 4);
        /* V slice rows: d_v up to a multiple of 16, or of 64 where its last partial group is over 48. */
        size_t v = (size_t)TILES_SLICE * (size_t)(s->dv % 64 > 48 ? (s->dv + 63) / 64 * 64 : (s->dv + 15) / 16 * 16);
        size_t red = (size_t)s->br * TILES_GRID + TILES_GRID * 4; /* + 4 floats of bank padding per row of work-items */
        return 4 * ((qk > pt ? qk : pt) + (v > red ? v : red)) + 4; /* + tile_live (boolean masks) */
    }
    if (s->tpr > 1) {
        size_t lds = (size_t)d + 1;
        return 4 * ((size_t)s->br * lds + 2 * (size_t)s->bc * lds + (size_t)s->br * s->bc + (size_t)s->br * s->tpr);
    }
    if (s->staging == FLASHCL_STAGING_DIRECT) return 0;
    return (size_t)s->bc * (size_t)((d + 3) / 4 + (s->dv + 3) / 4) * 16 + 4; /* K and V tiles + a flag */
}

static int min_bc(const shape *s) { return s->tpr > 4 ? s->tpr : 4; }

/* Bc must be a multiple of 4 (the key step) and of the threads per row. */
static int legal_bc(int bc, const shape *s) {
    int step = s->tpr > 4 ? s->tpr : 4; /* tpr is a power of two, so this is the lcm */
    bc = round_down(bc, step);
    return bc < step ? step : bc;
}

/* Shrinks the shape until its local memory fits; 0 when nothing does. */
static int fit_local(shape *s, int d, size_t limit) {
    while (local_bytes(s, d) > limit) {
        if (s->bc > min_bc(s))
            s->bc = legal_bc(s->bc / 2, s);
        else if (s->br > 1)
            s->br /= 2;
        else
            return 0;
    }
    return 1;
}

static void seed_shape(const flashcl_context *ctx, int d, shape *s, char *why, size_t cap) {
    const flashcl__device_info *info = &ctx->info;
    size_t m = (size_t)(info->local_mem_bytes / 4);
    size_t bc = (m + 4 * (size_t)d - 1) / (4 * (size_t)d);
    size_t br = bc < (size_t)d ? bc : (size_t)d;
    snprintf(why, cap, "seed: M=%zu floats of local memory, d=%d -> Bc=%zu, Br=%zu; ", m, d, bc, br);
    s->bc = bc > MAX_BLOCK_COLS ? MAX_BLOCK_COLS : (int)(bc < 4 ? 4 : bc);
    s->br = br < 1 ? 1 : (br > 1024 ? 1024 : (int)br);
    s->kernel = KERNEL_ROWS;
    if (info->is_cpu) {
        s->tpr = 1;
        s->staging = FLASHCL_STAGING_LOCAL;
        flashcl__appendf(why, cap,
                         "CPU device: one work-item per row, K/V tiles in __local (measured faster than direct reads)");
    } else if (d <= 32) {
        s->tpr = 1;
        s->staging = FLASHCL_STAGING_LOCAL;
        flashcl__appendf(why, cap, "GPU, d<=32: one work-item per row, K/V tiles in __local");
    } else {
        int tpr = 1;
        while (tpr * 16 < d) tpr *= 2;
        s->tpr = tpr;
        s->kernel = KERNEL_SPLIT;
        s->staging = FLASHCL_STAGING_LOCAL;
        flashcl__appendf(why, cap, "GPU: %d work-items per row (<=16 output dims each), K/V tiles in __local", tpr);
    }
}

static void apply_override(const flashcl__tile_override *ov, shape *s) {
    if (ov->threads_per_row > 0) s->tpr = ov->threads_per_row;
    if (ov->staging >= 0) s->staging = ov->staging;
    if (ov->kernel >= 0 && ov->kernel <= KERNEL_TILES)
        s->kernel = ov->kernel; /* cpu/decode: their families' */
    else if (ov->threads_per_row > 0)
        s->kernel = s->tpr > 1 ? KERNEL_SPLIT : KERNEL_ROWS;
    if (s->kernel == KERNEL_TILES) {
        s->tpr = TILES_GRID;
        s->br = s->bc = 4 * TILES_GRID;
    } else if (s->kernel == KERNEL_SPLIT && s->tpr < 2) {
        s->tpr = 4;
    } else if (s->kernel == KERNEL_ROWS) {
        s->tpr = 1;
    }
    if (s->tpr > 1) s->staging = FLASHCL_STAGING_LOCAL; /* split and tiles always stage */
    if (ov->block_rows > 0) s->br = ov->block_rows;
    if (ov->block_cols > 0) s->bc = ov->block_cols;
}

static void build_options(const shape *s, int d, char *out, size_t cap) {
    if (s->kernel == KERNEL_TILES)
        snprintf(out, cap, "-D HEAD_DIM=%d -D BLOCK_M=%d -D BLOCK_N=%d -D TILE_M=%d -D TILE_N=%d %s", d, s->br, s->bc,
                 s->br / TILES_GRID, s->bc / TILES_GRID, s->variant_options);
    else if (s->kernel == KERNEL_SPLIT)
        snprintf(out, cap, "-D HEAD_DIM=%d -D BLOCK_M=%d -D BLOCK_N=%d -D THREADS_PER_ROW=%d %s", d, s->br, s->bc,
                 s->tpr, s->variant_options);
    else
        snprintf(out, cap, "-D HEAD_DIM=%d -D BLOCK_M=%d -D BLOCK_N=%d -D STAGE_LOCAL=%d %s", d, s->br, s->bc,
                 s->staging == FLASHCL_STAGING_LOCAL, s->variant_options);
}

static size_t work_group_of(const shape *s) {
    return s->kernel == KERNEL_TILES ? (size_t)TILES_GRID * TILES_GRID : (size_t)s->br * (size_t)s->tpr;
}

static int fits_device(const flashcl_context *ctx, const shape *s, int d) {
    return work_group_of(s) <= ctx->info.max_work_group_size && local_bytes(s, d) <= ctx->info.local_mem_bytes;
}

/* Builds the shape; *fits says whether the compiled kernel accepts it. */
static flashcl_status try_shape(flashcl_context *ctx, const shape *s, int d, flashcl__flash_plan *out, int *fits,
                                size_t *preferred_multiple) {
    char options[sizeof out->pub.build_options];
    build_options(s, d, options, sizeof options);
    cl_program program = NULL;
    flashcl_status st = flashcl__get_program(ctx, kernel_files[s->kernel], options, &program);
    if (st != FLASHCL_SUCCESS) return st;
    const char *name = kernel_names[s->kernel];
    cl_kernel kernel = NULL;
    st = flashcl__create_kernel(ctx, program, name, &kernel);
    if (st != FLASHCL_SUCCESS) return st;
    size_t kernel_wg = 0, pm = 1;
    cl_ulong local = 0, priv = 0;
    cl_int err =
        clGetKernelWorkGroupInfo(kernel, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kernel_wg, &kernel_wg, NULL);
    if (err == CL_SUCCESS)
        err = clGetKernelWorkGroupInfo(kernel, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    if (err == CL_SUCCESS)
        err = clGetKernelWorkGroupInfo(kernel, ctx->device, CL_KERNEL_PRIVATE_MEM_SIZE, sizeof priv, &priv, NULL);
    if (err == CL_SUCCESS)
        err = clGetKernelWorkGroupInfo(kernel, ctx->device, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE, sizeof pm,
                                       &pm, NULL);
    if (err != CL_SUCCESS) {
        clReleaseKernel(kernel);
        return flashcl__fail_cl(ctx, err, "clGetKernelWorkGroupInfo(flash forward)");
    }
    size_t wg = work_group_of(s);
    *fits = wg <= kernel_wg && local <= ctx->info.local_mem_bytes;
    *preferred_multiple = pm ? pm : 1;
    if (!*fits) {
        clReleaseKernel(kernel);
        return FLASHCL_SUCCESS;
    }
    flashcl_plan *p = &out->pub;
    flashcl__copy_str(p->kernel, sizeof p->kernel, name);
    p->block_rows = s->br;
    p->block_cols = s->bc;
    p->threads_per_row = s->tpr;
    p->staging = s->staging;
    p->work_group_size = wg;
    /* POCL reports 0 for kernels whose __local arrays are static; use our own count then. */
    p->local_mem_bytes = local ? (size_t)local : local_bytes(s, d);
    p->private_mem_bytes = (size_t)priv;
    p->scratch_bytes = 0;
    flashcl__copy_str(p->build_options, sizeof p->build_options, options);
    out->program = program;
    out->kernel = kernel;
    return FLASHCL_SUCCESS;
}

/* Records where the plan came from and why. */
static void describe(flashcl__flash_plan *out, const shape *s, const char *origin, const char *why) {
    flashcl__copy_str(out->pub.origin, sizeof out->pub.origin, origin);
    flashcl__copy_str(out->pub.reason, sizeof out->pub.reason, why);
    flashcl__appendf(out->pub.reason, sizeof out->pub.reason, "; kernel %s, Br=%d Bc=%d, %zu work-items, %zu B local",
                     out->pub.kernel, s->br, s->bc, out->pub.work_group_size, out->pub.local_mem_bytes);
}

/* Builds s; while the compiled kernel rejects it, halves Br (then Bc) and rebuilds. */
static flashcl_status build_halving(flashcl_context *ctx, shape s, int d, const char *origin, const char *why,
                                    flashcl__flash_plan *out) {
    int rounded = 0;
    for (int attempt = 0; attempt < MAX_ATTEMPTS; ++attempt) {
        int fits = 0;
        size_t pm = 1;
        flashcl_status st = try_shape(ctx, &s, d, out, &fits, &pm);
        if (st != FLASHCL_SUCCESS) return st;
        if (fits) {
            /* Round the work-group up to the preferred multiple once, if it still fits. */
            size_t wg = work_group_of(&s);
            if (!rounded && wg % pm != 0 && pm % (size_t)s.tpr == 0) {
                shape r = s;
                r.br = round_up((int)wg, (int)pm) / s.tpr;
                rounded = 1;
                if (fits_device(ctx, &r, d)) {
                    clReleaseKernel(out->kernel);
                    out->kernel = NULL;
                    s = r;
                    continue;
                }
            }
            describe(out, &s, origin, why);
            return FLASHCL_SUCCESS;
        }
        /* Does not fit the compiled kernel (registers, local): halve and retry. */
        origin = "fallback";
        if (s.br > 1)
            s.br /= 2;
        else if (s.bc > min_bc(&s))
            s.bc = legal_bc(s.bc / 2, &s);
        else
            break;
    }
    return flashcl__fail(ctx, FLASHCL_ERR_NO_PLAN, "no flash forward plan for d=%d fits this device's kernel limits",
                         d);
}

/* FLASHCL_TILE (origin "env") or a tuned plan: exactly what was asked, or an error that says why not. */
static flashcl_status plan_from_env(flashcl_context *ctx, const flashcl__tile_override *ov, int d, const shape *proto,
                                    const char *origin, const char *source, flashcl__flash_plan *out) {
    char why[sizeof out->pub.reason];
    shape s = *proto;
    seed_shape(ctx, d, &s, why, sizeof why);
    apply_override(ov, &s);
    if (s.kernel == KERNEL_SPLIT && !proto_plain(proto))
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                             "%s: the split kernel runs plain attention only (float32, d_v = d, no variants; this "
                             "call: %s); use rows or tiles",
                             source, proto->features);
    flashcl__appendf(why, sizeof why, "; overridden by %s", source);
    /* Sizes not given are fitted to the device, as the planner would. */
    if (ov->block_cols < 0 && s.kernel != KERNEL_TILES) s.bc = legal_bc(s.bc, &s);
    if (ov->block_rows < 0 && ov->block_cols < 0) {
        if (s.kernel == KERNEL_TILES) {
            while (!fits_device(ctx, &s, d) && s.br > TILES_GRID) s.br = s.bc = s.br - TILES_GRID;
        } else {
            size_t max_wg = ctx->info.max_work_group_size;
            if ((size_t)s.br * s.tpr > max_wg) s.br = (int)(max_wg / (size_t)s.tpr);
            if (s.br < 1) s.br = 1;
            fit_local(&s, d, ctx->info.local_mem_bytes);
        }
    }
    if (s.kernel == KERNEL_TILES) {
        if (s.br % TILES_GRID || s.bc % TILES_GRID || s.br > TILES_MAX_BLOCK || s.bc > TILES_MAX_BLOCK)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                                 "%s: the tiles kernel needs br and bc in {16, 32, ..., 128} (got %d, %d)", source,
                                 s.br, s.bc);
    } else if (s.tpr & (s.tpr - 1) || s.bc % 4 || s.bc % s.tpr) {
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                             "%s: tpr (%d) must be a power of two and bc (%d) a multiple of 4 and of tpr", source,
                             s.tpr, s.bc);
    }
    if (ov->block_rows < 0 && ov->block_cols < 0 && s.kernel != KERNEL_TILES)
        return build_halving(ctx, s, d, origin, why, out);
    int fits = 0;
    size_t pm = 1;
    flashcl_status st = fits_device(ctx, &s, d) ? try_shape(ctx, &s, d, out, &fits, &pm) : FLASHCL_SUCCESS;
    if (st != FLASHCL_SUCCESS) return st;
    if (!fits)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                             "%s (%s br=%d bc=%d tpr=%d) needs %zu work-items and %zu B of local memory; the "
                             "device or the built kernel allows less",
                             source, kernel_names[s.kernel], s.br, s.bc, s.tpr, work_group_of(&s), local_bytes(&s, d));
    describe(out, &s, origin, why);
    return FLASHCL_SUCCESS;
}

/* The seed formula, fitted to the device, halved after the build until it fits. */
static flashcl_status plan_from_formula(flashcl_context *ctx, int d, const shape *proto, flashcl__flash_plan *out) {
    char why[sizeof out->pub.reason];
    shape s = *proto;
    seed_shape(ctx, d, &s, why, sizeof why);
    if (s.kernel == KERNEL_SPLIT && !proto_plain(proto)) {
        s.kernel = KERNEL_ROWS;
        s.tpr = 1;
        flashcl__appendf(why, sizeof why,
                         "; variants need the rows kernel (the split kernel runs plain attention only)");
    }
    s.bc = legal_bc(s.bc, &s);
    size_t max_wg = ctx->info.max_work_group_size;
    if ((size_t)s.br * s.tpr > max_wg) s.br = (int)(max_wg / (size_t)s.tpr);
    if (s.br < 1)
        return flashcl__fail(ctx, FLASHCL_ERR_NO_PLAN, "max work-group size %zu is below %d threads per row", max_wg,
                             s.tpr);
    const char *origin = "formula";
    const shape seeded = s;
    if (!fit_local(&s, d, ctx->info.local_mem_bytes) && s.kernel == KERNEL_SPLIT) {
        /* The split kernel stages a Q tile too; one row per work-item needs only K/V. */
        s = seeded;
        s.kernel = KERNEL_ROWS;
        s.tpr = 1;
        origin = "fallback";
        flashcl__appendf(why, sizeof why, "; split kernel does not fit, one work-item per row instead");
    }
    if (!fit_local(&s, d, ctx->info.local_mem_bytes))
        return flashcl__fail(ctx, FLASHCL_ERR_NO_PLAN, "no flash tile for d=%d fits %llu bytes of local memory", d,
                             (unsigned long long)ctx->info.local_mem_bytes);
    return build_halving(ctx, s, d, origin, why, out);
}

/* Lookup chain, most specific first: FLASHCL_TILE, the built-in table, the formula. */
static flashcl_status compute_plan(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                   const char *variant_options, flashcl__flash_plan *out) {
    memset(out, 0, sizeof *out);
    const int d = (int)desc->head_dim;
    shape proto;
    memset(&proto, 0, sizeof proto);
    proto.dv = (int)desc->head_dim_v;
    proto.variant_options = variant_options;
    proto.plain = flashcl__desc_is_plain(desc);
    char features[160];
    flashcl__describe_features(desc, features, sizeof features);
    proto.features = features;
    flashcl__tile_override ov;
    flashcl_status st = flashcl__read_tile_override(ctx, &ov);
    if (st != FLASHCL_SUCCESS) return st;
    if (ov.present) return plan_from_env(ctx, &ov, d, &proto, "env", "FLASHCL_TILE", out);

    char why[sizeof out->pub.reason];
    /* A tuned plan of this family (the CPU family's are its own). One the device or the build rejects
       (a file from an older build of the kernels) falls through to the table, saying so. */
    const char *tuned_origin = NULL;
    char rejected[sizeof out->pub.reason] = ""; /* put first in the reason, which a long one cuts at its end */
    if (flashcl__tuned_plan(ctx, desc, &ov, &tuned_origin, why, sizeof why)) {
        if (ov.kernel >= KERNEL_ROWS && ov.kernel <= KERNEL_TILES) {
            st = plan_from_env(ctx, &ov, d, &proto, tuned_origin, "the tuned plan", out);
            if (st == FLASHCL_SUCCESS) return st;
            if (out->kernel) clReleaseKernel(out->kernel);
            memset(out, 0, sizeof *out);
            flashcl__appendf(rejected, sizeof rejected, "%s rejected: %s; ", why, flashcl_last_error(ctx));
            flashcl__clear_error(ctx);
        } else {
            /* Another family's entry that its family declined for this call (a hand-written kernel=cpu entry
               above d 256, say): the table's plan, and the reason says the entry was not used. */
            flashcl__appendf(rejected, sizeof rejected, "%s not used: its family does not run this call; ", why);
        }
    }
    /* A compiled tile may still refuse 256 work-items (its registers, on some GPUs): shorter tiles then,
       down to 64 rows, before the formula. */
    char declined[96] = "";
    for (int max_rows = TILES_MAX_BLOCK; max_rows >= 64; max_rows -= 32) {
        shape s = proto;
        if (!table_shape(ctx, d, max_rows, &s, why, sizeof why) || !fits_device(ctx, &s, d)) break;
        int fits = 0;
        size_t pm = 1;
        st = try_shape(ctx, &s, d, out, &fits, &pm);
        if (st != FLASHCL_SUCCESS) return st;
        if (fits) {
            flashcl__appendf(why, sizeof why, "%s", declined);
            describe(out, &s, "table", why);
            flashcl__prepend(out->pub.reason, sizeof out->pub.reason, rejected, "");
            return FLASHCL_SUCCESS;
        }
        if (s.br <= 64) break;
        snprintf(declined, sizeof declined, " (the compiled %d-row tile refused a work-group of %d)", s.br,
                 TILES_GRID * TILES_GRID);
        max_rows = s.br;
    }
    st = plan_from_formula(ctx, d, &proto, out);
    if (st == FLASHCL_SUCCESS) flashcl__prepend(out->pub.reason, sizeof out->pub.reason, rejected, "");
    return st;
}

flashcl__portable_state *flashcl__portable_state_of(flashcl_context *ctx) {
    if (!ctx->family[FLASHCL__FAMILY_PORTABLE]) {
        ctx->family[FLASHCL__FAMILY_PORTABLE] = calloc(1, sizeof(flashcl__portable_state));
        if (!ctx->family[FLASHCL__FAMILY_PORTABLE])
            flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for the portable family's plans");
    }
    return ctx->family[FLASHCL__FAMILY_PORTABLE];
}

flashcl_status flashcl__plan_flash(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                   const flashcl__flash_plan **out) {
    flashcl__portable_state *state = flashcl__portable_state_of(ctx);
    if (!state) return FLASHCL_ERR_OUT_OF_HOST_MEMORY;
    char options[256], key[sizeof state->forward->key];
    flashcl__variant_options(desc, options, sizeof options);
    /* causal too: a tuned plan may differ between causal and not (tuning.h). */
    snprintf(key, sizeof key, "d=%zu causal=%d %s", desc->head_dim, desc->causal ? 1 : 0, options);
    for (flashcl__flash_plan *p = state->forward; p; p = p->next)
        if (strcmp(p->key, key) == 0) {
            *out = p;
            return FLASHCL_SUCCESS;
        }
    flashcl__flash_plan *p = calloc(1, sizeof *p);
    if (!p) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for a plan");
    flashcl_status st = compute_plan(ctx, desc, options, p);
    if (st != FLASHCL_SUCCESS) {
        if (p->kernel) clReleaseKernel(p->kernel);
        free(p);
        return st;
    }
    flashcl__append_variants(desc, p->pub.reason, sizeof p->pub.reason);
    flashcl__copy_str(p->key, sizeof p->key, key);
    p->next = state->forward;
    state->forward = p;
    *out = p;
    return FLASHCL_SUCCESS;
}

void flashcl__release_flash_plans(flashcl__portable_state *state) {
    while (state->forward) {
        flashcl__flash_plan *p = state->forward;
        state->forward = p->next;
        clReleaseKernel(p->kernel);
        free(p);
    }
}
