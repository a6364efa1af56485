/*
 * Plan for the standard (three-kernel) path: the GEMM tile and per-item
 * register block, largest first, down to what the device and the compiled
 * kernels accept. The scratch it needs (S, then P in place) is
 * batch*heads_q*seqlen_q*seqlen_k floats.
 */
#include "standard.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct { int tile, wpt; } gemm_shapes[] = {{64, 4}, {32, 4}, {32, 2}, {16, 2}, {8, 2}, {4, 1}};

static size_t gemm_local_bytes(int tile) { return 2 * 16 * (size_t)(tile + 1) * 4; }

/* The largest power of two <= both limits. */
static int pow2_at_most(size_t a, size_t b) {
    size_t lim = a < b ? a : b;
    int p = 1;
    while ((size_t)p * 2 <= lim) p *= 2;
    return p;
}

static flashcl_status kernel_limits(flashcl_context *ctx, cl_kernel k, size_t *wg, cl_ulong *local) {
    cl_int err = clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof *wg, wg, NULL);
    if (err == CL_SUCCESS)
        err = clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof *local, local, NULL);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS : flashcl__fail_cl(ctx, err, "clGetKernelWorkGroupInfo(standard)");
}

static void release_kernels(flashcl__standard_plan *p) {
    if (p->scores) clReleaseKernel(p->scores);
    if (p->softmax) clReleaseKernel(p->softmax);
    if (p->pv) clReleaseKernel(p->pv);
    if (p->rowdot) clReleaseKernel(p->rowdot);
    if (p->probs) clReleaseKernel(p->probs);
    if (p->ds) clReleaseKernel(p->ds);
    if (p->tn) clReleaseKernel(p->tn);
    if (p->group_sum) clReleaseKernel(p->group_sum);
    p->scores = p->softmax = p->pv = p->rowdot = p->probs = p->ds = p->tn = p->group_sum = NULL;
}

static flashcl_status compute_plan(flashcl_context *ctx, flashcl__standard_plan *out) {
    memset(out, 0, sizeof *out);
    const size_t max_wg = ctx->info.max_work_group_size;
    const int softmax_wg = pow2_at_most(max_wg, 256);
    const char *origin = "formula";
    for (size_t i = 0; i < sizeof gemm_shapes / sizeof gemm_shapes[0]; ++i) {
        int tile = gemm_shapes[i].tile, wpt = gemm_shapes[i].wpt;
        size_t wg = (size_t)(tile / wpt) * (size_t)(tile / wpt);
        if (wg > max_wg || gemm_local_bytes(tile) > ctx->info.local_mem_bytes) continue;
        char options[256];
        snprintf(options, sizeof options, "-D TILE=%d -D WPT=%d -D TILE_K=16 -D SOFTMAX_WG=%d", tile, wpt, softmax_wg);
        cl_program program = NULL;
        flashcl_status st = flashcl__get_program(ctx, "standard.cl", options, &program);
        if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "std_scores", &out->scores);
        if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "std_softmax", &out->softmax);
        if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "std_pv", &out->pv);
        if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "std_rowdot", &out->rowdot);
        if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "std_probs", &out->probs);
        if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "std_ds", &out->ds);
        if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "std_tn", &out->tn);
        if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "std_group_sum", &out->group_sum);
        size_t kwg[4] = {0, 0, 0, 0};
        cl_ulong loc[4] = {0, 0, 0, 0};
        if (st == FLASHCL_SUCCESS) st = kernel_limits(ctx, out->scores, &kwg[0], &loc[0]);
        if (st == FLASHCL_SUCCESS) st = kernel_limits(ctx, out->softmax, &kwg[1], &loc[1]);
        if (st == FLASHCL_SUCCESS) st = kernel_limits(ctx, out->pv, &kwg[2], &loc[2]);
        if (st == FLASHCL_SUCCESS) st = kernel_limits(ctx, out->tn, &kwg[3], &loc[3]);
        if (st != FLASHCL_SUCCESS) {
            release_kernels(out);
            return st;
        }
        if (kwg[0] < wg || kwg[2] < wg || kwg[3] < wg || kwg[1] < (size_t)softmax_wg) {
            release_kernels(out);
            origin = "fallback";
            continue;
        }
        flashcl_plan *p = &out->pub;
        flashcl__copy_str(p->kernel, sizeof p->kernel, "standard");
        p->block_rows = tile;
        p->block_cols = tile;
        p->threads_per_row = wpt;
        p->staging = FLASHCL_STAGING_LOCAL;
        p->work_group_size = wg;
        p->local_mem_bytes = loc[0] ? (size_t)loc[0] : gemm_local_bytes(tile);
        p->private_mem_bytes = 0;
        p->scratch_bytes = 0;
        flashcl__copy_str(p->origin, sizeof p->origin, origin);
        flashcl__copy_str(p->build_options, sizeof p->build_options, options);
        snprintf(p->reason, sizeof p->reason,
                 "standard attention: GEMM tiles %dx%d (x16 deep) with %dx%d per work-item, %zu work-items; softmax %d "
                 "work-items per row; S/P through global memory",
                 tile, tile, wpt, wpt, wg, softmax_wg);
        out->tile = tile;
        out->wpt = wpt;
        out->softmax_wg = softmax_wg;
        return FLASHCL_SUCCESS;
    }
    return flashcl__fail(ctx, FLASHCL_ERR_NO_PLAN,
                         "no standard-attention GEMM tile fits this device (max work-group %zu)", max_wg);
}

flashcl_status flashcl__plan_standard(flashcl_context *ctx, const flashcl__standard_plan **out) {
    if (!ctx->family[FLASHCL__FAMILY_STANDARD]) {
        flashcl__standard_plan *p = calloc(1, sizeof *p);
        if (!p) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for a plan");
        flashcl_status st = compute_plan(ctx, p);
        if (st != FLASHCL_SUCCESS) {
            free(p);
            return st;
        }
        ctx->family[FLASHCL__FAMILY_STANDARD] = p;
    }
    *out = ctx->family[FLASHCL__FAMILY_STANDARD];
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl__standard_scratch_sizes(flashcl_context *ctx, const flashcl_attention_desc *d, int backward,
                                               flashcl__standard_sizes *out) {
    const size_t z = d->batch * d->heads_q, rows = z * d->seqlen_q;
    if (d->seqlen_k > SIZE_MAX / sizeof(float) / rows ||
        (backward && d->seqlen_k > SIZE_MAX / sizeof(float) / z / d->head_dim))
        return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_DEVICE_MEMORY, "%s: scratch size overflows size_t",
                             backward ? "standard backward" : "standard path: S/P");
    out->scores = rows * d->seqlen_k;
    out->grads = backward ? z * d->seqlen_k * d->head_dim : 0;
    return FLASHCL_SUCCESS;
}

void flashcl__release_standard_plan(flashcl_context *ctx) {
    flashcl__standard_plan *p = ctx->family[FLASHCL__FAMILY_STANDARD];
    if (!p) return;
    release_kernels(p);
    free(p);
    ctx->family[FLASHCL__FAMILY_STANDARD] = NULL;
}
