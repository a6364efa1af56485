/* Reads, once per context, the device facts that planning and caching use. */
#include "internal.h"

#include <string.h>

static cl_int read_string(cl_device_id dev, cl_device_info what, char *out, size_t cap) {
    size_t got = 0;
    cl_int err = clGetDeviceInfo(dev, what, cap - 1, out, &got);
    if (err != CL_SUCCESS) {
        /* A name longer than the buffer: keep what fits rather than fail. */
        out[0] = '\0';
        return what == CL_DEVICE_NAME ? err : CL_SUCCESS;
    }
    out[got < cap ? got : cap - 1] = '\0';
    return CL_SUCCESS;
}

static void read_platform_string(cl_platform_id p, cl_platform_info what, char *out, size_t cap) {
    size_t got = 0;
    if (clGetPlatformInfo(p, what, cap - 1, out, &got) != CL_SUCCESS) got = 0;
    out[got < cap ? got : cap - 1] = '\0';
}

cl_int flashcl__read_device_info(cl_platform_id platform, cl_device_id device, flashcl__device_info *out) {
    memset(out, 0, sizeof *out);
    cl_int err = read_string(device, CL_DEVICE_NAME, out->name, sizeof out->name);
    if (err != CL_SUCCESS) return err;
    read_string(device, CL_DEVICE_VENDOR, out->vendor, sizeof out->vendor);
    read_string(device, CL_DEVICE_VERSION, out->version, sizeof out->version);
    read_string(device, CL_DRIVER_VERSION, out->driver, sizeof out->driver);
    read_platform_string(platform, CL_PLATFORM_NAME, out->platform_name, sizeof out->platform_name);
    read_platform_string(platform, CL_PLATFORM_VERSION, out->platform_version, sizeof out->platform_version);
    err = clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof out->type, &out->type, NULL);
    if (err == CL_SUCCESS)
        err =
            clGetDeviceInfo(device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof out->local_mem_bytes, &out->local_mem_bytes, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof out->global_mem_bytes, &out->global_mem_bytes,
                              NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof out->max_alloc_bytes, &out->max_alloc_bytes,
                              NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof out->max_work_group_size,
                              &out->max_work_group_size, NULL);
    if (err == CL_SUCCESS)
        err =
            clGetDeviceInfo(device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof out->compute_units, &out->compute_units, NULL);
    out->is_cpu = (out->type & CL_DEVICE_TYPE_CPU) != 0;
    cl_device_fp_config fp = 0;
    if (err == CL_SUCCESS && clGetDeviceInfo(device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL) == CL_SUCCESS)
        out->fp32_denorms = (fp & CL_FP_DENORM) != 0;
    return err;
}
