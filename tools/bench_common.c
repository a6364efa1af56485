/* Shared `bench` helpers; see bench_common.h. */
#include "bench_common.h"

#include <stdio.h>

#include "random_fill.h"
#include "tool_errors.h"

size_t bench_tensor_bytes(size_t a, size_t b, size_t c, size_t d)
{
    size_t dims[4] = {a, b, c, d};
    size_t bytes = sizeof(float);
    for (int i = 0; i < 4; ++i) {
        if (bytes > SIZE_MAX / dims[i])
            return 0;
        bytes *= dims[i];
    }
    return bytes;
}

bool bench_is_allocation_failure(int status)
{
    return status == FLASHCL_ERR_OUT_OF_DEVICE_MEMORY || status == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
           status == CL_OUT_OF_RESOURCES || status == CL_OUT_OF_HOST_MEMORY ||
           status == CL_INVALID_BUFFER_SIZE;
}

void bench_describe_failure(flashcl_context *ctx, int status, char *buf, size_t size)
{
    const char *detail = flashcl_last_error(ctx);
    snprintf(buf, size, "%s: %s", flashcl_status_name(status),
             detail != NULL && detail[0] ? detail : flashcl_status_string(status));
}

int bench_check_fits(flashcl_context *ctx, size_t largest_bytes)
{
    cl_ulong max_alloc = 0;
    if (clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_MAX_MEM_ALLOC_SIZE,
                        sizeof max_alloc, &max_alloc, NULL) == CL_SUCCESS &&
        largest_bytes > max_alloc)
        return tool_failure("bench: a %zu-byte input is larger than the device's largest buffer "
                            "(%llu bytes)",
                            largest_bytes, (unsigned long long)max_alloc);
    return 0;
}

cl_int bench_create_buffer(cl_context cl, size_t bytes, float *staging, uint64_t *state,
                           cl_mem *out)
{
    cl_int err = CL_SUCCESS;
    if (state == NULL) {
        *out = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
        return err;
    }
    random_fill_uniform(staging, bytes / sizeof(float), state);
    *out = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, staging, &err);
    return err;
}
