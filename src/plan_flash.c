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
 * 4. FLASHCL_TILE overrides any of the above.
 * 5. Build, then check CL_KERNEL_WORK_GROUP_SIZE and CL_KERNEL_LOCAL_MEM_SIZE;
 *    a plan that does not fit is halved and rebuilt ("fallback") rather than
 *    failing. The work-group is rounded to the kernel's preferred multiple
 *    when that still fits.
 */
#include "internal.h"
#include "tile_override.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BLOCK_COLS 64 /* the rows kernel keeps a tile's scores in a private array */
#define MAX_ATTEMPTS 12

typedef struct {
    int br, bc, tpr, staging;
} shape;

static int round_up(int x, int m) { return (x + m - 1) / m * m; }
static int round_down(int x, int m) { return x / m * m; }

/* __local bytes each kernel declares (mirrors cl/flash_fwd.cl). */
static size_t local_bytes(const shape *s, int d) {
    if (s->tpr > 1) {
        size_t lds = (size_t)d + 1;
        return 4 * ((size_t)s->br * lds + 2 * (size_t)s->bc * lds + (size_t)s->br * s->bc + (size_t)s->br * s->tpr);
    }
    if (s->staging == FLASHCL_STAGING_DIRECT) return 0;
    return 2 * (size_t)s->bc * (size_t)((d + 3) / 4) * 16;
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
        if (s->bc > min_bc(s)) s->bc = legal_bc(s->bc / 2, s);
        else if (s->br > 1) s->br /= 2;
        else return 0;
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
    if (info->is_cpu) {
        s->tpr = 1;
        s->staging = FLASHCL_STAGING_LOCAL;
        flashcl__appendf(why, cap, "CPU device: one work-item per row, K/V tiles in __local (measured faster than direct reads)");
    } else if (d <= 32) {
        s->tpr = 1;
        s->staging = FLASHCL_STAGING_LOCAL;
        flashcl__appendf(why, cap, "GPU, d<=32: one work-item per row, K/V tiles in __local");
    } else {
        int tpr = 1;
        while (tpr * 16 < d) tpr *= 2;
        s->tpr = tpr;
        s->staging = FLASHCL_STAGING_LOCAL;
        flashcl__appendf(why, cap, "GPU: %d work-items per row (<=16 output dims each), K/V tiles in __local", tpr);
    }
}

static void apply_override(const flashcl__tile_override *ov, shape *s) {
    if (ov->threads_per_row > 0) s->tpr = ov->threads_per_row;
    if (ov->staging >= 0) s->staging = ov->staging;
    if (s->tpr > 1) s->staging = FLASHCL_STAGING_LOCAL; /* the split kernel always stages */
    if (ov->block_rows > 0) s->br = ov->block_rows;
    if (ov->block_cols > 0) s->bc = ov->block_cols;
}

static void build_options(const shape *s, int d, char *out, size_t cap) {
    snprintf(out, cap, "-D HEAD_DIM=%d -D BLOCK_M=%d -D BLOCK_N=%d -D THREADS_PER_ROW=%d -D STAGE_LOCAL=%d", d, s->br,
             s->bc, s->tpr, s->staging == FLASHCL_STAGING_LOCAL);
}

/* Builds the shape; *fits says whether the compiled kernel accepts it. */
static flashcl_status try_shape(flashcl_context *ctx, const shape *s, int d, flashcl__flash_plan *out, int *fits,
                                size_t *preferred_multiple) {
    char options[256];
    build_options(s, d, options, sizeof options);
    cl_program program = NULL;
    flashcl_status st = flashcl__get_program(ctx, "flash_fwd.cl", options, &program);
    if (st != FLASHCL_SUCCESS) return st;
    const char *name = s->tpr > 1 ? "flash_fwd_split" : "flash_fwd_rows";
    cl_kernel kernel = NULL;
    st = flashcl__create_kernel(ctx, program, name, &kernel);
    if (st != FLASHCL_SUCCESS) return st;
    size_t kernel_wg = 0, pm = 1;
    cl_ulong local = 0, priv = 0;
    cl_int err = clGetKernelWorkGroupInfo(kernel, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kernel_wg, &kernel_wg, NULL);
    if (err == CL_SUCCESS)
        err = clGetKernelWorkGroupInfo(kernel, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    if (err == CL_SUCCESS)
        err = clGetKernelWorkGroupInfo(kernel, ctx->device, CL_KERNEL_PRIVATE_MEM_SIZE, sizeof priv, &priv, NULL);
    if (err == CL_SUCCESS)
        err = clGetKernelWorkGroupInfo(kernel, ctx->device, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE, sizeof pm, &pm,
                                       NULL);
    if (err != CL_SUCCESS) {
        clReleaseKernel(kernel);
        return flashcl__fail_cl(ctx, err, "clGetKernelWorkGroupInfo(flash forward)");
    }
    size_t wg = (size_t)s->br * (size_t)s->tpr;
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

static flashcl_status compute_plan(flashcl_context *ctx, const flashcl_attention_desc *desc, flashcl__flash_plan *out) {
    memset(out, 0, sizeof *out);
    const int d = (int)desc->head_dim;
    flashcl__tile_override ov;
    flashcl_status st = flashcl__read_tile_override(ctx, &ov);
    if (st != FLASHCL_SUCCESS) return st;

    char why[sizeof out->pub.reason];
    shape s;
    seed_shape(ctx, d, &s, why, sizeof why);
    const char *origin = "formula";
    if (ov.present) {
        apply_override(&ov, &s);
        origin = "env";
        flashcl__appendf(why, sizeof why, "; overridden by FLASHCL_TILE");
        if (s.tpr & (s.tpr - 1) || s.bc % 4 || s.bc % s.tpr)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                                 "FLASHCL_TILE: tpr (%d) must be a power of two and bc (%d) a multiple of 4 and of tpr",
                                 s.tpr, s.bc);
    } else {
        s.bc = legal_bc(s.bc, &s);
        size_t max_wg = ctx->info.max_work_group_size;
        if ((size_t)s.br * s.tpr > max_wg) s.br = (int)(max_wg / (size_t)s.tpr);
        if (s.br < 1) return flashcl__fail(ctx, FLASHCL_ERR_NO_PLAN, "max work-group size %zu is below %d threads per row",
                                           max_wg, s.tpr);
        if (!fit_local(&s, d, ctx->info.local_mem_bytes))
            return flashcl__fail(ctx, FLASHCL_ERR_NO_PLAN, "no flash tile for d=%d fits %llu bytes of local memory", d,
                                 (unsigned long long)ctx->info.local_mem_bytes);
    }

    int rounded = 0;
    for (int attempt = 0; attempt < MAX_ATTEMPTS; ++attempt) {
        int fits = 0;
        size_t pm = 1;
        st = try_shape(ctx, &s, d, out, &fits, &pm);
        if (st != FLASHCL_SUCCESS) return st;
        if (fits) {
            /* Round the work-group up to the preferred multiple once, if it still fits. */
            size_t wg = (size_t)s.br * s.tpr;
            if (!ov.present && !rounded && wg % pm != 0 && pm % (size_t)s.tpr == 0) {
                shape r = s;
                r.br = round_up((int)wg, (int)pm) / s.tpr;
                rounded = 1;
                if ((size_t)r.br * r.tpr <= ctx->info.max_work_group_size &&
                    local_bytes(&r, d) <= ctx->info.local_mem_bytes) {
                    clReleaseKernel(out->kernel);
                    out->kernel = NULL;
                    s = r;
                    continue;
                }
            }
            flashcl__copy_str(out->pub.origin, sizeof out->pub.origin, origin);
            flashcl__copy_str(out->pub.reason, sizeof out->pub.reason, why);
            flashcl__appendf(out->pub.reason, sizeof out->pub.reason, "; kernel %s, Br=%d Bc=%d, %zu work-items, %zu B local",
                             out->pub.kernel, s.br, s.bc, out->pub.work_group_size, out->pub.local_mem_bytes);
            return FLASHCL_SUCCESS;
        }
        if (ov.present)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                                 "FLASHCL_TILE plan (br=%d bc=%d tpr=%d) does not fit the built kernel's limits", s.br, s.bc,
                                 s.tpr);
        /* Does not fit the compiled kernel (registers, local): halve and retry. */
        origin = "fallback";
        if (s.br > 1) s.br /= 2;
        else if (s.bc > min_bc(&s)) s.bc = legal_bc(s.bc / 2, &s);
        else break;
    }
    return flashcl__fail(ctx, FLASHCL_ERR_NO_PLAN, "no flash forward plan for d=%d fits this device's kernel limits", d);
}

flashcl_status flashcl__plan_flash(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                   const flashcl__flash_plan **out) {
    size_t d = desc->head_dim;
    if (!ctx->flash_plans[d]) {
        flashcl__flash_plan *p = calloc(1, sizeof *p);
        if (!p) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for a plan");
        flashcl_status st = compute_plan(ctx, desc, p);
        if (st != FLASHCL_SUCCESS) {
            if (p->kernel) clReleaseKernel(p->kernel);
            free(p);
            return st;
        }
        ctx->flash_plans[d] = p;
    }
    *out = ctx->flash_plans[d];
    return FLASHCL_SUCCESS;
}
