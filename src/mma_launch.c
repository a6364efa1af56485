/*
 * The NVIDIA tensor-core forward (cl/flash_fwd_mma.cl): when it applies, its
 * plan, and its launch. flashcl__enqueue_flash asks here first; whatever this
 * path does not cover (float32, head dims other than 32/64/96/128, scale <= 0,
 * views not 16-byte aligned, a device without the probe's blessing) goes to
 * the portable kernels, and the plan query says which ran and why.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOG2E 1.4426950408889634
#define MMA_WARPS 4
#define MMA_MT 2  /* 32 query rows per warp: each K/V fragment read from __local feeds 4 mma */
#define MMA_BC 64 /* measured on the H200, d=128 bf16: Bc=64 265 TF/s, Bc=32 256 */

struct flashcl__mma_plan {
    flashcl_plan pub;
    cl_kernel kernel;
    cl_kernel bwd[3]; /* flash_bwd_mma_dot, _dkdv, _dq: built on the first backward */
};

static int dtype_slot(flashcl_dtype t) { return t == FLASHCL_DTYPE_F16 ? 1 : t == FLASHCL_DTYPE_BF16 ? 0 : -1; }

/* The descriptor-level conditions (the views' alignment is checked per call). */
static int desc_applies(flashcl_context *ctx, const flashcl_attention_desc *d, char *why, size_t cap) {
    const char *probe_why = NULL;
    if (dtype_slot(d->dtype) < 0) {
        snprintf(why, cap, "tensor-core path needs f16 or bf16 storage");
        return 0;
    }
    /* Plain attention (causal or not) in 16-bit storage; every other variant is the portable kernels'. */
    flashcl_attention_desc f32 = *d;
    f32.dtype = FLASHCL_DTYPE_F32;
    if (!flashcl__desc_is_plain(&f32)) {
        char features[160];
        flashcl__describe_variants(d, features, sizeof features);
        snprintf(why, cap, "tensor-core path covers plain and causal attention only (not: %s)", features);
        return 0;
    }
    if (d->head_dim % 16 != 0 || d->head_dim < 32 || d->head_dim > 128) {
        snprintf(why, cap, "tensor-core path covers head dims 32, 64, 96, 128 (not %zu)", d->head_dim);
        return 0;
    }
    if (!(d->scale > 0.0f)) {
        snprintf(why, cap, "tensor-core path needs scale > 0");
        return 0;
    }
    if (!flashcl__mma_supported(ctx, &probe_why)) {
        snprintf(why, cap, "tensor-core path off: %s", probe_why);
        return 0;
    }
    return 1;
}

/* cp.async moves 16 bytes: every row start must be a multiple of 8 elements. */
static int views_aligned(const flashcl_tensor *views, int n) {
    for (int i = 0; i < n; ++i)
        if ((views[i].offset | views[i].stride_batch | views[i].stride_head | views[i].stride_row) % 8 != 0) return 0;
    return 1;
}

static flashcl_status get_plan(flashcl_context *ctx, const flashcl_attention_desc *d, const flashcl__mma_plan **out) {
    const int slot = dtype_slot(d->dtype);
    flashcl__mma_plan **cell = &ctx->mma_plans[slot][d->head_dim / 16];
    if (!*cell) {
        flashcl__mma_plan *p = calloc(1, sizeof *p);
        if (!p) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory (mma plan)");
        snprintf(p->pub.build_options, sizeof p->pub.build_options,
                 "-cl-mad-enable -DHEAD_DIM=%zu -DMMA_WARPS=%d -DMMA_MT=%d -DMMA_BC=%d -DMMA_F16=%d", d->head_dim,
                 MMA_WARPS, MMA_MT, MMA_BC, slot);
        cl_program program = NULL;
        flashcl_status st = flashcl__get_program(ctx, "flash_fwd_mma.cl", p->pub.build_options, &program);
        if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "flash_fwd_mma", &p->kernel);
        if (st != FLASHCL_SUCCESS) {
            free(p);
            return st;
        }
        cl_ulong lm = 0, pm = 0;
        clGetKernelWorkGroupInfo(p->kernel, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof lm, &lm, NULL);
        clGetKernelWorkGroupInfo(p->kernel, ctx->device, CL_KERNEL_PRIVATE_MEM_SIZE, sizeof pm, &pm, NULL);
        snprintf(p->pub.kernel, sizeof p->pub.kernel, "flash_fwd_mma");
        p->pub.block_rows = 16 * MMA_MT * MMA_WARPS;
        p->pub.block_cols = MMA_BC;
        p->pub.threads_per_row = 1;
        p->pub.staging = FLASHCL_STAGING_LOCAL;
        p->pub.work_group_size = 32 * MMA_WARPS;
        p->pub.local_mem_bytes = (size_t)lm;
        p->pub.private_mem_bytes = (size_t)pm;
        snprintf(p->pub.origin, sizeof p->pub.origin, "vendor");
        snprintf(p->pub.reason, sizeof p->pub.reason,
                 "NVIDIA tensor cores (%s): mma.sync %s, %d warps x 32 query rows, Br=%d, Bc=%d, Q in registers, "
                 "K/V via cp.async in __local; needs views 16-byte aligned (offsets and strides multiples of 8)",
                 ctx->mma_why, slot ? "f16" : "bf16", MMA_WARPS, p->pub.block_rows, MMA_BC);
        *cell = p;
    }
    *out = *cell;
    return FLASHCL_SUCCESS;
}

int flashcl__mma_covers(flashcl_context *ctx, const flashcl_attention_desc *d, char *why, size_t cap) {
    return desc_applies(ctx, d, why, cap);
}

int flashcl__mma_views_aligned(const flashcl_tensor *views, int n) { return views_aligned(views, n); }

flashcl_status flashcl__mma_backward_kernels(flashcl_context *ctx, const flashcl_attention_desc *d,
                                             cl_kernel out[3]) {
    const flashcl__mma_plan *cp = NULL;
    flashcl_status st = get_plan(ctx, d, &cp);
    if (st != FLASHCL_SUCCESS) return st;
    flashcl__mma_plan *p = (flashcl__mma_plan *)cp;
    if (!p->bwd[0]) {
        /* dK/dV: 32 query rows per step at d > 64 (registers), 64 below; dQ: 32 or 64 keys per step. */
        const int step = d->head_dim > 64 ? 32 : 64;
        char options[256];
        snprintf(options, sizeof options, "-cl-mad-enable -DHEAD_DIM=%zu -DMMA_WARPS=%d -DMMA_F16=%d -DMMA_BWD_BR=%d "
                 "-DMMA_BWD_BCQ=%d", d->head_dim, MMA_WARPS, dtype_slot(d->dtype), step, step);
        cl_program program = NULL;
        static const char *const names[3] = {"flash_bwd_mma_dot", "flash_bwd_mma_dkdv", "flash_bwd_mma_dq"};
        cl_kernel k[3] = {NULL, NULL, NULL};
        st = flashcl__get_program(ctx, "flash_bwd_mma.cl", options, &program);
        for (int i = 0; i < 3 && st == FLASHCL_SUCCESS; ++i) st = flashcl__create_kernel(ctx, program, names[i], &k[i]);
        if (st != FLASHCL_SUCCESS) {
            for (int i = 0; i < 3; ++i)
                if (k[i]) clReleaseKernel(k[i]);
            return st;
        }
        memcpy(p->bwd, k, sizeof k);
    }
    memcpy(out, p->bwd, sizeof p->bwd);
    return FLASHCL_SUCCESS;
}

int flashcl__mma_plan_query(flashcl_context *ctx, const flashcl_attention_desc *d, flashcl_plan *out,
                            flashcl_status *st, char *why, size_t cap) {
    if (!desc_applies(ctx, d, why, cap)) return 0;
    const flashcl__mma_plan *p = NULL;
    *st = get_plan(ctx, d, &p);
    if (*st == FLASHCL_SUCCESS) *out = p->pub;
    return 1;
}

int flashcl__mma_try_forward(flashcl_context *ctx, const flashcl_attention_desc *d, const flashcl_tensor *views,
                             cl_mem lse, size_t lse_offset, cl_uint num_wait, const cl_event *wait_list,
                             cl_event *event, flashcl_status *st) {
    char why[256];
    if (!desc_applies(ctx, d, why, sizeof why) || !views_aligned(views, 4)) return 0;
    const flashcl__mma_plan *plan = NULL;
    *st = get_plan(ctx, d, &plan);
    if (*st != FLASHCL_SUCCESS) return 1;
    cl_kernel kernel = plan->kernel;
    cl_int write_lse = lse != NULL;
    cl_mem lse_buf = lse ? lse : views[0].buffer; /* bound but never written */
    cl_ulong lse_off = lse_offset;
    cl_int sq = (cl_int)d->seqlen_q, sk = (cl_int)d->seqlen_k, hq = (cl_int)d->heads_q;
    cl_int group = (cl_int)(d->heads_q / d->heads_kv), causal = d->causal != 0;
    cl_float scale_log2 = (cl_float)(d->scale * LOG2E);
    cl_uint arg = 0;
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < 4 && err == CL_SUCCESS; ++i) err = flashcl__set_view_args(kernel, &arg, &views[i]);
    if (err == CL_SUCCESS) err = clSetKernelArg(kernel, arg++, sizeof lse_buf, &lse_buf);
    if (err == CL_SUCCESS) err = clSetKernelArg(kernel, arg++, sizeof lse_off, &lse_off);
    if (err == CL_SUCCESS) err = clSetKernelArg(kernel, arg++, sizeof write_lse, &write_lse);
    if (err == CL_SUCCESS) err = clSetKernelArg(kernel, arg++, sizeof sq, &sq);
    if (err == CL_SUCCESS) err = clSetKernelArg(kernel, arg++, sizeof sk, &sk);
    if (err == CL_SUCCESS) err = clSetKernelArg(kernel, arg++, sizeof hq, &hq);
    if (err == CL_SUCCESS) err = clSetKernelArg(kernel, arg++, sizeof group, &group);
    if (err == CL_SUCCESS) err = clSetKernelArg(kernel, arg++, sizeof scale_log2, &scale_log2);
    if (err == CL_SUCCESS) err = clSetKernelArg(kernel, arg++, sizeof causal, &causal);
    if (err != CL_SUCCESS) {
        *st = flashcl__fail_cl(ctx, err, "clSetKernelArg(flash_fwd_mma)");
        return 1;
    }
    const size_t wg = plan->pub.work_group_size, br = (size_t)plan->pub.block_rows;
    size_t global[3] = {(d->seqlen_q + br - 1) / br * wg, d->heads_q, d->batch};
    size_t local[3] = {wg, 1, 1};
    err = clEnqueueNDRangeKernel(ctx->queue, kernel, 3, NULL, global, local, num_wait, wait_list, event);
    *st = err == CL_SUCCESS ? FLASHCL_SUCCESS : flashcl__fail_cl(ctx, err, "clEnqueueNDRangeKernel(flash_fwd_mma)");
    return 1;
}

void flashcl__release_mma_plans(flashcl_context *ctx) {
    for (int t = 0; t < 2; ++t)
        for (int i = 0; i < FLASHCL__MMA_DIM_SLOTS; ++i) {
            flashcl__mma_plan *p = ctx->mma_plans[t][i];
            if (!p) continue;
            if (p->kernel) clReleaseKernel(p->kernel);
            for (int k = 0; k < 3; ++k)
                if (p->bwd[k]) clReleaseKernel(p->bwd[k]);
            free(p);
            ctx->mma_plans[t][i] = NULL;
        }
}
