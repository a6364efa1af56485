/* Context life cycle: picking a device, or joining the application's queue. */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PLATFORMS 32
#define MAX_DEVICES 64

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void err_text(char *buf, size_t cap, const char *fmt, ...) {
    if (!buf || !cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

/* Case-insensitive substring test. */
static int contains_ci(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    if (n == 0) return 1;
    for (; *hay; ++hay) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) ++i;
        if (i == n) return 1;
    }
    return 0;
}

/* "P:D" with both parts decimal. */
static int parse_index_pair(const char *spec, unsigned *p, unsigned *d) {
    char *end = NULL;
    unsigned long a = strtoul(spec, &end, 10);
    if (end == spec || *end != ':') return 0;
    const char *rest = end + 1;
    unsigned long b = strtoul(rest, &end, 10);
    if (end == rest || *end != '\0') return 0;
    *p = (unsigned)a;
    *d = (unsigned)b;
    return 1;
}

/* Finds the device the spec names; with no spec the first GPU, else the first device. */
static flashcl_status pick_device(const char *spec, cl_platform_id *out_p, cl_device_id *out_d,
                                  char *err_buf, size_t err_cap) {
    cl_platform_id platforms[MAX_PLATFORMS];
    cl_uint np = 0;
    cl_int err = clGetPlatformIDs(MAX_PLATFORMS, platforms, &np);
    if (err != CL_SUCCESS || np == 0) {
        err_text(err_buf, err_cap, "no OpenCL platform found (clGetPlatformIDs returned %s); install an OpenCL driver such as POCL",
                 flashcl__cl_error_name(err));
        return FLASHCL_ERR_NO_DEVICE;
    }
    if (np > MAX_PLATFORMS) np = MAX_PLATFORMS;
    unsigned want_p = 0, want_d = 0;
    int by_index = spec && *spec && parse_index_pair(spec, &want_p, &want_d);
    cl_platform_id first_any_p = NULL, first_gpu_p = NULL;
    cl_device_id first_any = NULL, first_gpu = NULL;
    cl_int device_err = CL_SUCCESS; /* the last clGetDeviceIDs failure, for the message */
    for (cl_uint p = 0; p < np; ++p) {
        cl_device_id devs[MAX_DEVICES];
        cl_uint nd = 0;
        cl_int derr = clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, devs, &nd);
        if (derr != CL_SUCCESS) {
            if (derr != CL_DEVICE_NOT_FOUND) device_err = derr;
            continue;
        }
        if (nd > MAX_DEVICES) nd = MAX_DEVICES;
        char pname[256] = "";
        clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
        for (cl_uint d = 0; d < nd; ++d) {
            if (by_index) {
                if (p == want_p && d == want_d) {
                    *out_p = platforms[p];
                    *out_d = devs[d];
                    return FLASHCL_SUCCESS;
                }
                continue;
            }
            if (spec && *spec) {
                char name[256] = "", vendor[256] = "";
                clGetDeviceInfo(devs[d], CL_DEVICE_NAME, sizeof name - 1, name, NULL);
                clGetDeviceInfo(devs[d], CL_DEVICE_VENDOR, sizeof vendor - 1, vendor, NULL);
                if (contains_ci(name, spec) || contains_ci(vendor, spec) || contains_ci(pname, spec)) {
                    *out_p = platforms[p];
                    *out_d = devs[d];
                    return FLASHCL_SUCCESS;
                }
                continue;
            }
            cl_device_type type = 0;
            clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
            if (!first_any) {
                first_any = devs[d];
                first_any_p = platforms[p];
            }
            if ((type & CL_DEVICE_TYPE_GPU) && !first_gpu) {
                first_gpu = devs[d];
                first_gpu_p = platforms[p];
            }
        }
    }
    if (spec && *spec) {
        err_text(err_buf, err_cap, "device spec \"%s\" matches no OpenCL device (use P:D from `flashcl info`, or part of a name)",
                 spec);
        return FLASHCL_ERR_INVALID_DEVICE_SPEC;
    }
    if (first_gpu) {
        *out_p = first_gpu_p;
        *out_d = first_gpu;
        return FLASHCL_SUCCESS;
    }
    if (first_any) {
        *out_p = first_any_p;
        *out_d = first_any;
        return FLASHCL_SUCCESS;
    }
    if (device_err != CL_SUCCESS)
        err_text(err_buf, err_cap, "OpenCL platforms exist but none has a device (clGetDeviceIDs failed: %s)",
                 flashcl__cl_error_name(device_err));
    else
        err_text(err_buf, err_cap, "OpenCL platforms exist but none has a device");
    return FLASHCL_ERR_NO_DEVICE;
}

static flashcl_context *alloc_context(void) {
    flashcl_context *ctx = calloc(1, sizeof *ctx);
    return ctx;
}

/* Shared tail of both constructors: device facts and the cache directory. */
static flashcl_status finish_init(flashcl_context *ctx, char *err_buf, size_t err_cap) {
    cl_int err = flashcl__read_device_info(ctx->platform, ctx->device, &ctx->info);
    if (err != CL_SUCCESS) {
        err_text(err_buf, err_cap, "clGetDeviceInfo failed while reading device facts: %s (%d)",
                 flashcl__cl_error_name(err), (int)err);
        return (flashcl_status)err;
    }
    flashcl__cache_dir_init(ctx);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_context_create(flashcl_context **out, const char *device_spec, char *err_buf,
                                      size_t err_buf_size) {
    if (err_buf && err_buf_size) err_buf[0] = '\0';
    if (!out) {
        err_text(err_buf, err_buf_size, "out is NULL");
        return FLASHCL_ERR_INVALID_ARGUMENT;
    }
    *out = NULL;
    const char *spec = device_spec && *device_spec ? device_spec : getenv("FLASHCL_DEVICE");
    cl_platform_id platform = NULL;
    cl_device_id device = NULL;
    flashcl_status st = pick_device(spec, &platform, &device, err_buf, err_buf_size);
    if (st != FLASHCL_SUCCESS) return st;

    flashcl_context *ctx = alloc_context();
    if (!ctx) return FLASHCL_ERR_OUT_OF_HOST_MEMORY;
    ctx->platform = platform;
    ctx->device = device;
    ctx->owns_cl_objects = 1;
    cl_int err = CL_SUCCESS;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)platform, 0};
    const char *failed_call = "clCreateContext";
    ctx->cl_ctx = clCreateContext(props, 1, &device, NULL, NULL, &err);
    if (err == CL_SUCCESS) {
        failed_call = "clCreateCommandQueue";
        /* Profiling on: tools time FlashCL's own queue with events. */
#if defined(CL_VERSION_2_0) && CL_TARGET_OPENCL_VERSION >= 200
        cl_queue_properties qp[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
        ctx->queue = clCreateCommandQueueWithProperties(ctx->cl_ctx, device, qp, &err);
#else
        ctx->queue = clCreateCommandQueue(ctx->cl_ctx, device, CL_QUEUE_PROFILING_ENABLE, &err);
#endif
    }
    if (err == CL_SUCCESS) st = finish_init(ctx, err_buf, err_buf_size);
    else {
        err_text(err_buf, err_buf_size, "%s failed: %s (%d)", failed_call, flashcl__cl_error_name(err), (int)err);
        st = (flashcl_status)err;
    }
    if (st != FLASHCL_SUCCESS) {
        flashcl_context_destroy(ctx);
        return st;
    }
    *out = ctx;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_context_create_from_queue(flashcl_context **out, cl_command_queue queue) {
    if (!out) return FLASHCL_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!queue) return FLASHCL_ERR_INVALID_QUEUE;
    flashcl_context *ctx = alloc_context();
    if (!ctx) return FLASHCL_ERR_OUT_OF_HOST_MEMORY;
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof ctx->cl_ctx, &ctx->cl_ctx, NULL);
    if (err == CL_SUCCESS) err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof ctx->device, &ctx->device, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(ctx->device, CL_DEVICE_PLATFORM, sizeof ctx->platform, &ctx->platform, NULL);
    if (err != CL_SUCCESS) {
        free(ctx);
        return err == CL_INVALID_COMMAND_QUEUE ? FLASHCL_ERR_INVALID_QUEUE : (flashcl_status)err;
    }
    /* Hold references while alive; destroy drops exactly these. */
    clRetainContext(ctx->cl_ctx);
    clRetainCommandQueue(queue);
    ctx->queue = queue;
    ctx->owns_cl_objects = 0;
    flashcl_status st = finish_init(ctx, NULL, 0);
    if (st != FLASHCL_SUCCESS) {
        flashcl_context_destroy(ctx);
        return st;
    }
    *out = ctx;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_context_set_queue(flashcl_context *ctx, cl_command_queue queue) {
    if (!ctx) return FLASHCL_ERR_INVALID_CONTEXT;
    flashcl__clear_error(ctx);
    if (!queue) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_QUEUE, "queue is NULL");
    cl_context qctx = NULL;
    cl_device_id qdev = NULL;
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL);
    if (err == CL_SUCCESS) err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof qdev, &qdev, NULL);
    if (err != CL_SUCCESS)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_QUEUE, "queue is not a valid command queue (clGetCommandQueueInfo: %s)",
                             flashcl__cl_error_name(err));
    if (qctx != ctx->cl_ctx)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_QUEUE, "queue belongs to another OpenCL context than this FlashCL context");
    if (qdev != ctx->device)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_QUEUE, "queue is on another device than this FlashCL context");
    clRetainCommandQueue(queue);
    clReleaseCommandQueue(ctx->queue);
    ctx->queue = queue;
    return FLASHCL_SUCCESS;
}

void flashcl_context_destroy(flashcl_context *ctx) {
    if (!ctx) return;
    flashcl__release_plans(ctx);
    flashcl__release_mma_plans(ctx);
    flashcl__release_backward_plans(ctx);
    flashcl__release_programs(ctx);
    flashcl__release_scratch(ctx);
    if (ctx->queue) clReleaseCommandQueue(ctx->queue);
    if (ctx->cl_ctx) clReleaseContext(ctx->cl_ctx);
    free(ctx->error);
    free(ctx);
}

cl_command_queue flashcl_context_queue(const flashcl_context *ctx) { return ctx ? ctx->queue : NULL; }
cl_context flashcl_context_cl_context(const flashcl_context *ctx) { return ctx ? ctx->cl_ctx : NULL; }
cl_device_id flashcl_context_device(const flashcl_context *ctx) { return ctx ? ctx->device : NULL; }
const char *flashcl_context_cache_dir(const flashcl_context *ctx) { return ctx ? ctx->cache_dir : ""; }
