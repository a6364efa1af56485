/*
 * Plan for the flash backward kernels (cl/flash_bwd.cl). Both main kernels
 * give one work-item one row (a key for dK/dV, a query for dQ) and stage
 * B rows of the other side through __local, so one size B serves both:
 *   seed: B = ceil(M / 4d) from the device's local memory (M floats), as forward;
 *   fit:  B <= 64 (each work-item keeps four d-float rows), B <= the device's
 *         max work-group, and 2*B rows of d floats (+ two floats per row)
 *         within local memory;
 *   after the build, B is halved until the kernels' work-group limits accept it.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROWS 64

static size_t local_bytes(int rows, int d) { return (size_t)rows * (2 * (size_t)((d + 3) / 4) * 16 + 8); }

static flashcl_status kernel_wg(flashcl_context *ctx, cl_kernel k, size_t *wg, cl_ulong *priv) {
    cl_int err = clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof *wg, wg, NULL);
    if (err == CL_SUCCESS) err = clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_PRIVATE_MEM_SIZE, sizeof *priv, priv, NULL);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS : flashcl__fail_cl(ctx, err, "clGetKernelWorkGroupInfo(backward)");
}

static void release(flashcl__backward_plan *p) {
    if (p->dot) clReleaseKernel(p->dot);
    if (p->dkdv) clReleaseKernel(p->dkdv);
    if (p->dq) clReleaseKernel(p->dq);
    p->dot = p->dkdv = p->dq = NULL;
}

static flashcl_status compute(flashcl_context *ctx, int d, flashcl__backward_plan *out) {
    const flashcl__device_info *info = &ctx->info;
    size_t m = (size_t)(info->local_mem_bytes / 4);
    size_t seed = (m + 4 * (size_t)d - 1) / (4 * (size_t)d);
    int rows = seed > MAX_ROWS ? MAX_ROWS : (int)seed;
    if ((size_t)rows > info->max_work_group_size) rows = (int)info->max_work_group_size;
    while (rows > 1 && local_bytes(rows, d) > info->local_mem_bytes) rows /= 2;
    if (rows < 1 || local_bytes(rows, d) > info->local_mem_bytes)
        return flashcl__fail(ctx, FLASHCL_ERR_NO_PLAN, "no backward tile for d=%d fits %llu bytes of local memory", d,
                             (unsigned long long)info->local_mem_bytes);
    const char *origin = "formula";
    for (; rows >= 1; rows /= 2) {
        char options[192];
        snprintf(options, sizeof options, "-D HEAD_DIM=%d -D BLOCK_M=%d -D BLOCK_N=%d", d, rows, rows);
        cl_program program = NULL;
        flashcl_status st = flashcl__get_program(ctx, "flash_bwd.cl", options, &program);
        if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "flash_bwd_dot", &out->dot);
        if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "flash_bwd_dkdv", &out->dkdv);
        if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "flash_bwd_dq", &out->dq);
        size_t wg[3] = {0, 0, 0};
        cl_ulong priv[3] = {0, 0, 0};
        if (st == FLASHCL_SUCCESS) st = kernel_wg(ctx, out->dot, &wg[0], &priv[0]);
        if (st == FLASHCL_SUCCESS) st = kernel_wg(ctx, out->dkdv, &wg[1], &priv[1]);
        if (st == FLASHCL_SUCCESS) st = kernel_wg(ctx, out->dq, &wg[2], &priv[2]);
        if (st != FLASHCL_SUCCESS) {
            release(out);
            return st;
        }
        if (wg[0] < (size_t)rows || wg[1] < (size_t)rows || wg[2] < (size_t)rows) {
            release(out);
            origin = "fallback";
            continue;
        }
        flashcl_plan *p = &out->pub;
        flashcl__copy_str(p->kernel, sizeof p->kernel, "flash_bwd_dkdv+flash_bwd_dq");
        p->block_rows = rows;
        p->block_cols = rows;
        p->threads_per_row = 1;
        p->staging = FLASHCL_STAGING_LOCAL;
        p->work_group_size = (size_t)rows;
        p->local_mem_bytes = local_bytes(rows, d);
        p->private_mem_bytes = (size_t)(priv[1] > priv[2] ? priv[1] : priv[2]);
        flashcl__copy_str(p->origin, sizeof p->origin, origin);
        flashcl__copy_str(p->build_options, sizeof p->build_options, options);
        snprintf(p->reason, sizeof p->reason,
                 "seed: M=%zu floats of local memory, d=%d -> %zu rows; fitted to %d rows per work-group "
                 "(one work-item per key for dK/dV, per query for dQ), %d rows of the other side per __local tile",
                 m, d, seed, rows, rows);
        out->rows = rows;
        return FLASHCL_SUCCESS;
    }
    return flashcl__fail(ctx, FLASHCL_ERR_NO_PLAN, "no backward plan for d=%d fits this device's kernel limits", d);
}

flashcl_status flashcl__plan_backward(flashcl_context *ctx, const flashcl_attention_desc *d,
                                      const flashcl__backward_plan **out) {
    size_t dim = d->head_dim;
    if (!ctx->backward_plans[dim]) {
        flashcl__backward_plan *p = calloc(1, sizeof *p);
        if (!p) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for a plan");
        flashcl_status st = compute(ctx, (int)dim, p);
        if (st != FLASHCL_SUCCESS) {
            free(p);
            return st;
        }
        ctx->backward_plans[dim] = p;
    }
    *out = ctx->backward_plans[dim];
    return FLASHCL_SUCCESS;
}

void flashcl__release_backward_plans(flashcl_context *ctx) {
    for (size_t d = 0; d <= FLASHCL_MAX_HEAD_DIM; ++d) {
        if (!ctx->backward_plans[d]) continue;
        release(ctx->backward_plans[d]);
        free(ctx->backward_plans[d]);
        ctx->backward_plans[d] = NULL;
    }
}
