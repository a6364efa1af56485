/* Program builds: an in-memory cache per context, the disk cache behind it,
   and the build log in the error message when a build fails. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* Puts the device's build log after the current error message. */
static void append_build_log(flashcl_context *ctx, cl_program program) {
    size_t size = 0;
    if (clGetProgramBuildInfo(program, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) != CL_SUCCESS || size == 0)
        return;
    char *log = malloc(size + 1);
    if (!log) return;
    if (clGetProgramBuildInfo(program, ctx->device, CL_PROGRAM_BUILD_LOG, size, log, NULL) == CL_SUCCESS) {
        log[size] = '\0';
        flashcl__append_error(ctx, "\nbuild log:\n");
        flashcl__append_error(ctx, log);
    }
    free(log);
}

/* Builds `program` for the context's device; on failure the error names `what` and carries the build
   log, and the program is released. */
static flashcl_status build_program(flashcl_context *ctx, cl_program program, const char *options, const char *what) {
    const cl_int err = clBuildProgram(program, 1, &ctx->device, options, NULL, NULL);
    if (err == CL_SUCCESS) return FLASHCL_SUCCESS;
    flashcl__fail(ctx, FLASHCL_ERR_BUILD_FAILED, "building %s failed: clBuildProgram returned %s (%d)", what,
                  flashcl__cl_error_name(err), (int)err);
    append_build_log(ctx, program);
    clReleaseProgram(program);
    return FLASHCL_ERR_BUILD_FAILED;
}

static flashcl_status build_from_source(flashcl_context *ctx, const char *name, const char *source, const char *options,
                                        cl_program *out) {
    cl_int err = CL_SUCCESS;
    const char *strings[] = {source};
    cl_program program = clCreateProgramWithSource(ctx->cl_ctx, 1, strings, NULL, &err);
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clCreateProgramWithSource");
    char what[1024];
    snprintf(what, sizeof what, "%s with \"%s\"", name, options);
    /* -w (an OpenCL build option; no effect on the code): POCL's clang, on a host without AVX-512,
       warns that the float16 arguments of the common prelude's helpers change the ABI and prints
       "15 warnings generated." to the application's stderr for every program it compiles; the library
       must not print. Errors still reach the build log. */
    const size_t n = strlen(options) + 4;
    char *quiet = malloc(n);
    if (!quiet) {
        clReleaseProgram(program);
        return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory building %s", name);
    }
    snprintf(quiet, n, "-w %s", options);
    const flashcl_status st = build_program(ctx, program, quiet, what);
    free(quiet);
    if (st == FLASHCL_SUCCESS) *out = program;
    return st;
}

/* Keeps a built program in the context's list under (name, options); releases it when out of memory. */
static flashcl_status remember_program(flashcl_context *ctx, const char *name, const char *options, cl_program program,
                                       cl_program *out) {
    flashcl__program *entry = calloc(1, sizeof *entry);
    if (entry) {
        entry->source_name = dup_str(name);
        entry->options = dup_str(options);
    }
    if (!entry || !entry->source_name || !entry->options) {
        if (entry) {
            free(entry->source_name);
            free(entry->options);
        }
        free(entry);
        clReleaseProgram(program);
        return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory caching a program");
    }
    entry->program = program;
    entry->next = ctx->programs;
    ctx->programs = entry;
    *out = program;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl__get_program(flashcl_context *ctx, const char *source_name, const char *options,
                                    cl_program *out) {
    *out = NULL;
    for (flashcl__program *p = ctx->programs; p; p = p->next) {
        if (strcmp(p->source_name, source_name) == 0 && strcmp(p->options, options) == 0) {
            *out = p->program;
            return FLASHCL_SUCCESS;
        }
    }
    char *source = NULL;
    flashcl_status st = flashcl__load_kernel_source(ctx, source_name, &source);
    if (st != FLASHCL_SUCCESS) return st;

    cl_program program = flashcl__cache_load(ctx, source, options);
    if (!program) {
        st = build_from_source(ctx, source_name, source, options, &program);
        if (st == FLASHCL_SUCCESS) flashcl__cache_store(ctx, source, options, program);
    }
    free(source);
    if (st != FLASHCL_SUCCESS) return st;

    return remember_program(ctx, source_name, options, program, out);
}

/* The context device's binary of a built program: what NVIDIA's driver returns is the PTX text it
   generated. A program made in the application's cl_context belongs to each of its devices, so
   the binaries come as one entry per device, in CL_PROGRAM_DEVICES order. */
static flashcl_status program_binary(flashcl_context *ctx, cl_program program, unsigned char **out, size_t *size) {
    cl_uint count = 0;
    cl_int err = clGetProgramInfo(program, CL_PROGRAM_NUM_DEVICES, sizeof count, &count, NULL);
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clGetProgramInfo(CL_PROGRAM_NUM_DEVICES)");
    cl_device_id *devices = count ? calloc(count, sizeof *devices) : NULL;
    size_t *sizes = count ? calloc(count, sizeof *sizes) : NULL;
    unsigned char **bins = count ? calloc(count, sizeof *bins) : NULL;
    flashcl_status st = FLASHCL_SUCCESS;
    if (!devices || !sizes || !bins)
        st = flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory reading a program binary");
    if (st == FLASHCL_SUCCESS) {
        err = clGetProgramInfo(program, CL_PROGRAM_DEVICES, count * sizeof *devices, devices, NULL);
        if (err == CL_SUCCESS)
            err = clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, count * sizeof *sizes, sizes, NULL);
        if (err != CL_SUCCESS) st = flashcl__fail_cl(ctx, err, "clGetProgramInfo(CL_PROGRAM_DEVICES/BINARY_SIZES)");
    }
    cl_uint mine = count;
    for (cl_uint i = 0; st == FLASHCL_SUCCESS && i < count; ++i)
        if (devices[i] == ctx->device) mine = i;
    if (st == FLASHCL_SUCCESS && (mine == count || sizes[mine] == 0))
        st = flashcl__fail(ctx, FLASHCL_ERR_BUILD_FAILED, "the built program has no binary for this context's device");
    if (st == FLASHCL_SUCCESS && !(bins[mine] = malloc(sizes[mine] + 1)))
        st = flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory reading a program binary");
    if (st == FLASHCL_SUCCESS) { /* entries left NULL are skipped by the driver */
        err = clGetProgramInfo(program, CL_PROGRAM_BINARIES, count * sizeof *bins, bins, NULL);
        if (err != CL_SUCCESS) st = flashcl__fail_cl(ctx, err, "clGetProgramInfo(CL_PROGRAM_BINARIES)");
    }
    if (st == FLASHCL_SUCCESS) {
        bins[mine][sizes[mine]] = '\0';
        *out = bins[mine];
        *size = sizes[mine];
    } else if (bins && mine < count) {
        free(bins[mine]);
    }
    free(devices);
    free(sizes);
    free(bins);
    return st;
}

flashcl_status flashcl__get_patched_program(flashcl_context *ctx, const char *source_name, const char *options,
                                            const char *tag, flashcl__binary_patch patch, cl_program *out) {
    *out = NULL;
    char key[256];
    snprintf(key, sizeof key, "%s#%s", source_name, tag);
    for (flashcl__program *p = ctx->programs; p; p = p->next)
        if (strcmp(p->source_name, key) == 0 && strcmp(p->options, options) == 0) {
            *out = p->program;
            return FLASHCL_SUCCESS;
        }
    cl_program base = NULL;
    flashcl_status st = flashcl__get_program(ctx, source_name, options, &base);
    unsigned char *bin = NULL, *patched = NULL;
    size_t size = 0, patched_size = 0;
    if (st == FLASHCL_SUCCESS) st = program_binary(ctx, base, &bin, &size);
    if (st == FLASHCL_SUCCESS) {
        char why[256];
        if (!patch(bin, size, &patched, &patched_size, why, sizeof why))
            st =
                flashcl__fail(ctx, FLASHCL_ERR_BUILD_FAILED, "%s with \"%s\" (%s): %s", source_name, options, tag, why);
    }
    free(bin);
    if (st != FLASHCL_SUCCESS) return st;
    cl_int err = CL_SUCCESS, bin_status = CL_SUCCESS;
    const unsigned char *bins[] = {patched};
    cl_program program =
        clCreateProgramWithBinary(ctx->cl_ctx, 1, &ctx->device, &patched_size, bins, &bin_status, &err);
    free(patched);
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clCreateProgramWithBinary");
    char what[1024];
    snprintf(what, sizeof what, "%s with \"%s\" (%s) from its patched binary", source_name, options, tag);
    const flashcl_status built = build_program(ctx, program, "", what);
    return built == FLASHCL_SUCCESS ? remember_program(ctx, key, options, program, out) : built;
}

void flashcl__release_programs(flashcl_context *ctx) {
    flashcl__program *p = ctx->programs;
    while (p) {
        flashcl__program *next = p->next;
        clReleaseProgram(p->program);
        free(p->source_name);
        free(p->options);
        free(p);
        p = next;
    }
    ctx->programs = NULL;
}

flashcl_status flashcl__create_kernel(flashcl_context *ctx, cl_program program, const char *name, cl_kernel *out) {
    cl_int err = CL_SUCCESS;
    *out = clCreateKernel(program, name, &err);
    if (err != CL_SUCCESS) {
        *out = NULL;
        char what[128];
        snprintf(what, sizeof what, "clCreateKernel(%s)", name);
        return flashcl__fail_cl(ctx, err, what);
    }
    return FLASHCL_SUCCESS;
}
