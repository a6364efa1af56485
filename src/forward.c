/* flashcl_forward: checks, plan, one launch of the flash kernel. */
#include "internal.h"
#include "cpu_family.h"

#include <math.h>
#include <string.h>


/* Common entry checks; fills the resolved descriptor and tensor views. */
static flashcl_status prepare(flashcl_context *ctx, const flashcl_attention_desc *desc, const flashcl_tensor *q,
                              const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o, cl_mem lse,
                              size_t lse_offset, cl_uint num_wait, const cl_event *wait_list,
                              flashcl_attention_desc *d, flashcl_tensor views[4]) {
    flashcl_status st = flashcl__resolve_desc(ctx, desc, d);
    if (st != FLASHCL_SUCCESS) return st;
    return flashcl__validate_call(ctx, d, q, k, v, o, lse, lse_offset, num_wait, wait_list, views);
}

flashcl_status flashcl__enqueue_flash(flashcl_context *ctx, const flashcl_attention_desc *d,
                                      const flashcl_tensor *views, cl_mem lse, size_t lse_offset, cl_uint num_wait,
                                      const cl_event *wait_list, cl_event *event) {
    flashcl_status st = FLASHCL_SUCCESS;
    /* The NVIDIA tensor-core kernel when its probe passed and it covers the call. */
    if (flashcl__mma_try_forward(ctx, d, views, lse, lse_offset, num_wait, wait_list, event, &st)) return st;
    const flashcl__flash_plan *plan = NULL;
    st = flashcl__plan_flash(ctx, d, &plan);
    if (st != FLASHCL_SUCCESS) return st;
    if (flashcl__is_cpu_flash_plan(plan))
        return flashcl__enqueue_flash_cpu(ctx, plan, d, views, lse, lse_offset, num_wait, wait_list, event);
    cl_kernel kernel = plan->kernel;
    /* Q's buffer stands in for absent buffers (LSE, variant inputs): never written. */
    cl_uint arg = 0;
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < 4 && err == CL_SUCCESS; ++i) err = flashcl__set_view_args(kernel, &arg, &views[i]);
    if (err == CL_SUCCESS) err = flashcl__set_forward_args(kernel, &arg, d, lse, lse_offset, views[0].buffer);
    if (err == CL_SUCCESS) err = flashcl__set_variant_args(kernel, &arg, d, views[0].buffer);
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clSetKernelArg(flash forward)");

    size_t wg = plan->pub.work_group_size;
    /* max_seqlen_q: with varlen, blocks past a shorter sequence's end return at once. */
    size_t blocks = (d->max_seqlen_q + (size_t)plan->pub.block_rows - 1) / (size_t)plan->pub.block_rows;
    size_t global[3] = {blocks * wg, d->heads_q, d->batch};
    size_t local[3] = {wg, 1, 1};
    err = clEnqueueNDRangeKernel(ctx->queue, kernel, 3, NULL, global, local, num_wait, wait_list, event);
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clEnqueueNDRangeKernel(flash forward)");
    return FLASHCL_SUCCESS;
}

/* The public forward calls: checks, then the path's launch. */
static flashcl_status run_forward(flashcl__enqueue_fn enqueue, flashcl_context *ctx, const flashcl_attention_desc *desc,
                                  const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                  const flashcl_tensor *o, cl_mem lse, size_t lse_offset, cl_uint num_wait,
                                  const cl_event *wait_list, cl_event *event) {
    if (!ctx) return FLASHCL_ERR_INVALID_CONTEXT;
    flashcl__clear_error(ctx);
    if (event) *event = NULL;
    flashcl_attention_desc d;
    flashcl_tensor views[4];
    flashcl_status st = prepare(ctx, desc, q, k, v, o, lse, lse_offset, num_wait, wait_list, &d, views);
    if (st != FLASHCL_SUCCESS) return st;
    return enqueue(ctx, &d, views, lse, lse_offset, num_wait, wait_list, event);
}

flashcl_status flashcl_forward(flashcl_context *ctx, const flashcl_attention_desc *desc, const flashcl_tensor *q,
                               const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o, cl_mem lse,
                               size_t lse_offset, cl_uint num_wait, const cl_event *wait_list, cl_event *event) {
    return run_forward(flashcl__enqueue_flash, ctx, desc, q, k, v, o, lse, lse_offset, num_wait, wait_list, event);
}

flashcl_status flashcl_standard_forward(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                        const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                        const flashcl_tensor *o, cl_mem lse, size_t lse_offset, cl_uint num_wait,
                                        const cl_event *wait_list, cl_event *event) {
    return run_forward(flashcl__enqueue_standard, ctx, desc, q, k, v, o, lse, lse_offset, num_wait, wait_list, event);
}

flashcl_status flashcl_plan_query(flashcl_context *ctx, const flashcl_attention_desc *desc, flashcl_path path,
                                  flashcl_plan *out) {
    if (!ctx) return FLASHCL_ERR_INVALID_CONTEXT;
    flashcl__clear_error(ctx);
    if (!out) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "out is NULL");
    flashcl_attention_desc d;
    flashcl_status st = flashcl__resolve_desc(ctx, desc, &d);
    if (st != FLASHCL_SUCCESS) return st;
    if (path == FLASHCL_PATH_FLASH) {
        char why[256] = "";
        if (flashcl__mma_plan_query(ctx, &d, out, &st, why, sizeof why)) return st;
        const flashcl__flash_plan *p = NULL;
        st = flashcl__plan_flash(ctx, &d, &p);
        if (st == FLASHCL_SUCCESS) {
            *out = p->pub;
            if (d.dtype == FLASHCL_DTYPE_F16 || d.dtype == FLASHCL_DTYPE_BF16)
                flashcl__appendf(out->reason, sizeof out->reason, "; %s", why);
            if (flashcl__is_cpu_flash_plan(p)) out->scratch_bytes = flashcl__cpu_forward_scratch_bytes(p, &d);
        }
        return st;
    }
    if (path == FLASHCL_PATH_STANDARD) {
        const flashcl__standard_plan *p = NULL;
        st = flashcl__plan_standard(ctx, &p);
        if (st != FLASHCL_SUCCESS) return st;
        *out = p->pub;
        out->scratch_bytes = d.batch * d.heads_q * d.seqlen_q * d.seqlen_k * sizeof(float);
        return FLASHCL_SUCCESS;
    }
    return flashcl__fail(ctx, FLASHCL_ERR_INVALID_PATH, "path: unknown value %d", (int)path);
}
