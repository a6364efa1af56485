/* flashcl_dropout_mask: the keep mask flash calls apply, as bytes (cl/dropout_mask.cl). */
#include "launch.h"

#include <stdio.h>

flashcl_status flashcl_dropout_mask(flashcl_context *ctx, const flashcl_attention_desc *desc, cl_mem out,
                                    size_t out_offset, cl_uint num_wait, const cl_event *wait_list, cl_event *event) {
    if (!ctx) return FLASHCL_ERR_INVALID_CONTEXT;
    flashcl__clear_error(ctx);
    if (event) *event = NULL;
    flashcl_attention_desc d;
    flashcl_status st = flashcl__resolve_desc(ctx, desc, &d);
    if (st != FLASHCL_SUCCESS) return st;
    if (d.dropout_p <= 0.0f)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_VARIANT, "dropout_p is 0: there is no dropout mask to write");
    st = flashcl__validate_wait_list(ctx, num_wait, wait_list);
    if (st != FLASHCL_SUCCESS) return st;
    if (flashcl__is_varlen(&d)) {
        st = flashcl__validate_variant_buffers(ctx, &d, 0, num_wait, wait_list);
        if (st != FLASHCL_SUCCESS) return st;
    }
    const size_t rows = d.max_seqlen_q, cols = d.max_seqlen_k;
    const size_t planes = d.batch * d.heads_q;
    if (rows > SIZE_MAX / cols || rows * cols > SIZE_MAX / planes || rows * cols * planes > SIZE_MAX - out_offset)
        return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_BOUNDS, "out: the mask size overflows size_t");
    const size_t need = out_offset + planes * rows * cols;
    size_t have = 0;
    cl_context owner = NULL;
    if (!out) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_BUFFER, "out is NULL");
    cl_int err = clGetMemObjectInfo(out, CL_MEM_SIZE, sizeof have, &have, NULL);
    if (err == CL_SUCCESS) err = clGetMemObjectInfo(out, CL_MEM_CONTEXT, sizeof owner, &owner, NULL);
    /* A failed query is named with its OpenCL error, like validate.c's buffer checks. */
    if (err != CL_SUCCESS)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_BUFFER, "out is not a valid cl_mem (clGetMemObjectInfo: %s)",
                             flashcl__cl_error_name(err));
    if (owner != ctx->cl_ctx)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_BUFFER, "out is not a cl_mem of this context");
    if (need > have)
        return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_BOUNDS,
                             "out: needs %zu bytes from out_offset %zu, the buffer holds %zu", need - out_offset,
                             out_offset, have);
    /* out against cu_seqlens, which the kernel reads; the buffers' access flags. */
    flashcl__ranges ranges = {0};
    flashcl__range_add(&ranges, "out", out, out_offset, need - out_offset, 1);
    flashcl__varlen_ranges(&d, &ranges); /* checked by flashcl__validate_variant_buffers above */
    st = flashcl__check_ranges(ctx, &ranges, 0);
    if (st != FLASHCL_SUCCESS) return st;

    char options[256];
    snprintf(options, sizeof options, "%s", flashcl__is_varlen(&d) ? "-D VARLEN=1" : "");
    cl_program program = NULL;
    st = flashcl__get_program(ctx, "dropout_mask.cl", options, &program);
    cl_kernel kernel = NULL;
    if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "flash_dropout_mask", &kernel);
    if (st != FLASHCL_SUCCESS) return st;
    flashcl__args a = flashcl__args_for(kernel, "flash_dropout_mask");
    flashcl__arg_mem(&a, out);
    flashcl__arg_ulong(&a, out_offset);
    flashcl__arg_int(&a, (cl_int)rows);
    flashcl__arg_int(&a, (cl_int)cols);
    flashcl__arg_int(&a, (cl_int)d.heads_q);
    flashcl__arg_int(&a, (cl_int)d.seqlen_q);
    flashcl__arg_int(&a, (cl_int)d.seqlen_k);
    flashcl__arg_variants(&a, &d, out);
    st = flashcl__args_check(ctx, &a);
    flashcl__chain chain;
    if (st == FLASHCL_SUCCESS) st = flashcl__chain_begin(&chain, ctx, num_wait, wait_list, 0);
    if (st == FLASHCL_SUCCESS) {
        const size_t global[3] = {(cols + 63) / 64 * 64, rows, planes};
        const int done =
            flashcl__chain_launch(&chain, kernel, "flash_dropout_mask", 3, global, NULL, FLASHCL__AFTER_START);
        st = flashcl__chain_end(&chain, 1, &done, event);
    }
    clReleaseKernel(kernel);
    return st;
}
