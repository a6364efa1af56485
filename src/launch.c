/* Kernel-argument helpers shared by the launches. */
#include "internal.h"

cl_int flashcl__set_view_args(cl_kernel kernel, cl_uint *arg, const flashcl_tensor *t) {
    cl_ulong v[4] = {t->offset, t->stride_batch, t->stride_head, t->stride_row};
    cl_int err = clSetKernelArg(kernel, (*arg)++, sizeof(cl_mem), &t->buffer);
    for (int i = 0; i < 4 && err == CL_SUCCESS; ++i) err = clSetKernelArg(kernel, (*arg)++, sizeof(cl_ulong), &v[i]);
    return err;
}
