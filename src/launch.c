/* Kernel-argument helpers shared by the launches. */
#include "internal.h"

cl_int flashcl__set_view_args(cl_kernel kernel, cl_uint *arg, const flashcl_tensor *t) {
    cl_ulong v[4] = {t->offset, t->stride_batch, t->stride_head, t->stride_row};
    cl_int err = clSetKernelArg(kernel, (*arg)++, sizeof(cl_mem), &t->buffer);
    for (int i = 0; i < 4 && err == CL_SUCCESS; ++i) err = clSetKernelArg(kernel, (*arg)++, sizeof(cl_ulong), &v[i]);
    return err;
}

cl_int flashcl__set_forward_args(cl_kernel kernel, cl_uint *arg, const flashcl_attention_desc *d, cl_mem lse,
                                 size_t lse_offset, cl_mem dummy) {
    cl_mem lse_buf = lse ? lse : dummy;
    cl_ulong lse_off = lse_offset;
    cl_int write_lse = lse != NULL;
    cl_int sq = (cl_int)d->seqlen_q, sk = (cl_int)d->seqlen_k, hq = (cl_int)d->heads_q;
    cl_int group = (cl_int)(d->heads_q / d->heads_kv);
    cl_float scale_log2 = (cl_float)(d->scale * FLASHCL__LOG2E);
    const size_t sizes[] = {sizeof lse_buf, sizeof lse_off, sizeof write_lse, sizeof sq,
                            sizeof sk,      sizeof hq,      sizeof group,     sizeof scale_log2};
    const void *values[] = {&lse_buf, &lse_off, &write_lse, &sq, &sk, &hq, &group, &scale_log2};
    cl_int err = CL_SUCCESS;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && err == CL_SUCCESS; ++i)
        err = clSetKernelArg(kernel, (*arg)++, sizes[i], values[i]);
    return err;
}
