/* Context life cycle: picking a device, or joining the application's queue. */
#define _POSIX_C_SOURCE 200809L
#include "backend.h"
#include "tuning.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PLATFORMS 32
#define MAX_DEVICES 64

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void
err_text(char *buf, size_t cap, const char *fmt, ...) {
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
/* Each index is decimal digits only: strtoul alone also takes a sign ("-1" wrapped to 4294967295) and
   leading spaces, and a value above UINT_MAX was cast down ("4294967296:0" picked platform 0). */
static int parse_index_pair(const char *spec, unsigned *p, unsigned *d) {
    char *end = NULL;
    if (!isdigit((unsigned char)spec[0])) return 0;
    errno = 0;
    unsigned long a = strtoul(spec, &end, 10);
    if (errno == ERANGE || a > UINT_MAX || *end != ':') return 0;
    const char *rest = end + 1;
    if (!isdigit((unsigned char)rest[0])) return 0;
    unsigned long b = strtoul(rest, &end, 10);
    if (errno == ERANGE || b > UINT_MAX || *end != '\0') return 0;
    *p = (unsigned)a;
    *d = (unsigned)b;
    return 1;
}

#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001 /* cl_khr_icd: the loader found no platform */
#endif

/* An OpenCL failure while looking for the device comes back as itself, naming the call:
   a driver that fails to answer is not the same as a spec that matches nothing. */
static flashcl_status listing_failed(char *err_buf, size_t err_cap, const char *call, cl_int err) {
    err_text(err_buf, err_cap, "%s failed while looking for the OpenCL device: %s (%d)", call,
             flashcl__cl_error_name(err), (int)err);
    return (flashcl_status)err;
}

/* The devices of one platform; a platform with none (CL_DEVICE_NOT_FOUND) gives *nd = 0. */
static cl_int platform_devices(cl_platform_id platform, cl_device_id devs[MAX_DEVICES], cl_uint *nd) {
    *nd = 0;
    cl_int err = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, MAX_DEVICES, devs, nd);
    if (err == CL_DEVICE_NOT_FOUND) {
        *nd = 0;
        return CL_SUCCESS;
    }
    if (*nd > MAX_DEVICES) *nd = MAX_DEVICES;
    return err;
}

/* "P:D": device D of platform P. Only platform P is asked, so a broken driver elsewhere does not matter. */
static flashcl_status pick_by_index(const char *spec, unsigned want_p, unsigned want_d, const cl_platform_id *platforms,
                                    cl_uint np, cl_platform_id *out_p, cl_device_id *out_d, char *err_buf,
                                    size_t err_cap) {
    if (want_p >= np) {
        err_text(err_buf, err_cap, "device spec \"%s\": platform %u does not exist (%u found; see `flashcl info`)",
                 spec, want_p, (unsigned)np);
        return FLASHCL_ERR_INVALID_DEVICE_SPEC;
    }
    cl_device_id devs[MAX_DEVICES];
    cl_uint nd = 0;
    cl_int err = platform_devices(platforms[want_p], devs, &nd);
    if (err != CL_SUCCESS) return listing_failed(err_buf, err_cap, "clGetDeviceIDs", err);
    if (want_d >= nd) {
        err_text(err_buf, err_cap, "device spec \"%s\": platform %u has no device %u (%u found; see `flashcl info`)",
                 spec, want_p, want_d, (unsigned)nd);
        return FLASHCL_ERR_INVALID_DEVICE_SPEC;
    }
    *out_p = platforms[want_p];
    *out_d = devs[want_d];
    return FLASHCL_SUCCESS;
}

/* Whether a name spec matches the device: part of its name, its vendor or its platform's name or vendor. */
static cl_int name_matches(cl_device_id dev, const char *platform_name, const char *spec, int *match) {
    char name[256] = "", vendor[256] = "";
    cl_int err = clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    if (err == CL_SUCCESS) err = clGetDeviceInfo(dev, CL_DEVICE_VENDOR, sizeof vendor - 1, vendor, NULL);
    *match =
        err == CL_SUCCESS && (contains_ci(name, spec) || contains_ci(vendor, spec) || contains_ci(platform_name, spec));
    return err;
}

/* Finds the device the spec names ("P:D" or part of a name); with no spec the first GPU, else the first device. */
static flashcl_status pick_device(const char *spec, cl_platform_id *out_p, cl_device_id *out_d, char *err_buf,
                                  size_t err_cap) {
    cl_platform_id platforms[MAX_PLATFORMS];
    cl_uint np = 0;
    cl_int err = clGetPlatformIDs(MAX_PLATFORMS, platforms, &np);
    if (err == CL_PLATFORM_NOT_FOUND_KHR || (err == CL_SUCCESS && np == 0)) {
        err_text(err_buf, err_cap, "no OpenCL platform found; install an OpenCL driver such as POCL");
        return FLASHCL_ERR_NO_DEVICE;
    }
    if (err != CL_SUCCESS) return listing_failed(err_buf, err_cap, "clGetPlatformIDs", err);
    if (np > MAX_PLATFORMS) np = MAX_PLATFORMS;
    const int named = spec && *spec;
    unsigned want_p = 0, want_d = 0;
    if (named && parse_index_pair(spec, &want_p, &want_d))
        return pick_by_index(spec, want_p, want_d, platforms, np, out_p, out_d, err_buf, err_cap);

    cl_platform_id first_any_p = NULL;
    cl_device_id first_any = NULL;
    for (cl_uint p = 0; p < np; ++p) {
        cl_device_id devs[MAX_DEVICES];
        cl_uint nd = 0;
        err = platform_devices(platforms[p], devs, &nd);
        if (err != CL_SUCCESS) return listing_failed(err_buf, err_cap, "clGetDeviceIDs", err);
        /* The platform's name and vendor, one per line: POCL's name is "Portable Computing Language"
           and only its vendor ("The pocl project") says pocl. */
        char pname[512] = "";
        if (named && nd > 0) {
            err = clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, 255, pname, NULL);
            if (err != CL_SUCCESS) return listing_failed(err_buf, err_cap, "clGetPlatformInfo(CL_PLATFORM_NAME)", err);
            const size_t len = strlen(pname);
            pname[len] = '\n';
            err = clGetPlatformInfo(platforms[p], CL_PLATFORM_VENDOR, sizeof pname - len - 2, pname + len + 1, NULL);
            if (err != CL_SUCCESS)
                return listing_failed(err_buf, err_cap, "clGetPlatformInfo(CL_PLATFORM_VENDOR)", err);
        }
        for (cl_uint d = 0; d < nd; ++d) {
            int pick = 0;
            if (named) {
                err = name_matches(devs[d], pname, spec, &pick);
                if (err != CL_SUCCESS) return listing_failed(err_buf, err_cap, "clGetDeviceInfo(CL_DEVICE_NAME)", err);
            } else {
                cl_device_type type = 0;
                err = clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
                if (err != CL_SUCCESS) return listing_failed(err_buf, err_cap, "clGetDeviceInfo(CL_DEVICE_TYPE)", err);
                pick = (type & CL_DEVICE_TYPE_GPU) != 0;
                if (!first_any) {
                    first_any = devs[d];
                    first_any_p = platforms[p];
                }
            }
            if (pick) {
                *out_p = platforms[p];
                *out_d = devs[d];
                return FLASHCL_SUCCESS;
            }
        }
    }
    if (named) {
        err_text(err_buf, err_cap,
                 "device spec \"%s\" matches no OpenCL device (use P:D from `flashcl info`, or part of a name)", spec);
        return FLASHCL_ERR_INVALID_DEVICE_SPEC;
    }
    if (first_any) { /* no GPU: the first device */
        *out_p = first_any_p;
        *out_d = first_any;
        return FLASHCL_SUCCESS;
    }
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
    flashcl__tuning_load(ctx); /* after the cache directory: the file lives there */
    return FLASHCL_SUCCESS;
}

/* FLASHCL_PROFILING=1 makes the context's own queue one with profiling (its events carry times, as
 * `flashcl tune` needs); unset or any other value, one without. Profiling costs about 7 us more per launch
 * on NVIDIA's driver, and the H200 measured calls of a few launches 1.2-1.8x faster without it (README,
 * decode section), so it is off unless asked for, as CUDA events time only when created to. */
static cl_command_queue_properties queue_profiling(void) {
    const char *env = getenv("FLASHCL_PROFILING");
    return env && strcmp(env, "1") == 0 ? CL_QUEUE_PROFILING_ENABLE : 0;
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
    if (st != FLASHCL_SUCCESS) {
        /* A spec the caller never gave: say where it came from. */
        const size_t n = err_buf && err_buf_size ? strlen(err_buf) : 0;
        if (spec && spec != device_spec && n && n + 1 < err_buf_size)
            snprintf(err_buf + n, err_buf_size - n, " (the spec is $FLASHCL_DEVICE's)");
        return st;
    }

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
        const cl_command_queue_properties profiling = queue_profiling();
#if defined(CL_VERSION_2_0) && CL_TARGET_OPENCL_VERSION >= 200
        cl_queue_properties qp[] = {CL_QUEUE_PROPERTIES, profiling, 0};
        ctx->queue = clCreateCommandQueueWithProperties(ctx->cl_ctx, device, qp, &err);
#else
        ctx->queue = clCreateCommandQueue(ctx->cl_ctx, device, profiling, &err);
#endif
    }
    if (err == CL_SUCCESS)
        st = finish_init(ctx, err_buf, err_buf_size);
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
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_QUEUE,
                             "queue is not a valid command queue (clGetCommandQueueInfo: %s)",
                             flashcl__cl_error_name(err));
    if (qctx != ctx->cl_ctx)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_QUEUE,
                             "queue belongs to another OpenCL context than this FlashCL context");
    if (qdev != ctx->device)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_QUEUE, "queue is on another device than this FlashCL context");
    clRetainCommandQueue(queue);
    clReleaseCommandQueue(ctx->queue);
    ctx->queue = queue;
    return FLASHCL_SUCCESS;
}

void flashcl_context_destroy(flashcl_context *ctx) {
    if (!ctx) return;
    flashcl__release_backends(ctx);
    flashcl__release_programs(ctx);
    flashcl__release_scratch(ctx);
    flashcl__tuning_release(ctx);
    flashcl__trace_release(ctx);
    if (ctx->queue) clReleaseCommandQueue(ctx->queue);
    if (ctx->cl_ctx) clReleaseContext(ctx->cl_ctx);
    free(ctx->error);
    free(ctx);
}

cl_command_queue flashcl_context_queue(const flashcl_context *ctx) { return ctx ? ctx->queue : NULL; }
cl_context flashcl_context_cl_context(const flashcl_context *ctx) { return ctx ? ctx->cl_ctx : NULL; }
cl_device_id flashcl_context_device(const flashcl_context *ctx) { return ctx ? ctx->device : NULL; }
const char *flashcl_context_cache_dir(const flashcl_context *ctx) { return ctx ? ctx->cache_dir : ""; }
