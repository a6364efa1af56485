/*
 * Is the NVIDIA tensor-core path usable on this device? Decided once per
 * context, at run time, from what the device does rather than what it is
 * called:
 *   1. FLASHCL_VENDOR_PATH=off keeps the portable kernels (experiments, A/B).
 *   2. cl_nv_device_attribute_query must be present and report compute
 *      capability 7.5 or newer. 8.0 and up get the sm_80 form (mma.sync
 *      m16n8k16 with bf16, ldmatrix, cp.async); 7.5 (Turing: T4, RTX 20xx)
 *      the sm_75 form of cl/ptx.cl (MMA_SM75: m16n8k8 f16, ldmatrix, no
 *      cp.async, f16 storage only). FLASHCL_MMA_SM75=1 forces the sm_75 form
 *      on a newer GPU, which runs the same PTX: that is how it is tested.
 *   3. cl/probe_mma.cl, built in that form, must build, run and give exactly
 *      the right answer for every instruction the fast kernels use.
 * Any failure only records why and leaves the portable path in charge; it is
 * never an error of the call.
 */
#include "nvidia.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001

#define PROBE_IN 896  /* ushorts: a_bf 256 | bt_bf 128 | bkn_bf 128 | a_h 256 | bt_h 128 */
#define PROBE_OUT 480 /* floats */

static uint16_t to_bf16(float x) { /* the probe's values are small integers: exact */
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}
static uint16_t to_f16(int v) { /* exact for |v| < 2048 */
    if (v == 0) return 0;
    uint16_t sign = v < 0 ? 0x8000 : 0;
    unsigned a = (unsigned)(v < 0 ? -v : v);
    int e = 0;
    while ((a >> e) > 1) ++e;
    unsigned mant = (a << (10 - e)) & 0x3ff;
    return (uint16_t)(sign | (unsigned)((e + 15) << 10) | mant);
}

static int has_extension(cl_device_id dev, const char *name) {
    size_t n = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &n) != CL_SUCCESS || n == 0) return 0;
    char *ext = malloc(n + 1);
    if (!ext) return 0;
    int found = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, n, ext, NULL) == CL_SUCCESS) {
        ext[n] = '\0';
        size_t len = strlen(name);
        for (const char *p = strstr(ext, name); p && !found; p = strstr(p + 1, name))
            found = (p == ext || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\0');
    }
    free(ext);
    return found;
}

cl_int flashcl__run_probe_kernel(flashcl_context *ctx, cl_kernel kernel, const void *in, size_t in_bytes, void *out,
                                 size_t out_bytes, size_t work_items) {
    cl_int err = CL_SUCCESS;
    cl_command_queue q = clCreateCommandQueue(ctx->cl_ctx, ctx->device, 0, &err);
    cl_mem bin = NULL, bout = NULL;
    if (err == CL_SUCCESS)
        bin = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, in_bytes, (void *)in, &err);
    if (err == CL_SUCCESS) bout = clCreateBuffer(ctx->cl_ctx, CL_MEM_WRITE_ONLY, out_bytes, NULL, &err);
    if (err == CL_SUCCESS) err = clSetKernelArg(kernel, 0, sizeof bin, &bin);
    if (err == CL_SUCCESS) err = clSetKernelArg(kernel, 1, sizeof bout, &bout);
    if (err == CL_SUCCESS) err = clEnqueueNDRangeKernel(q, kernel, 1, NULL, &work_items, &work_items, 0, NULL, NULL);
    if (err == CL_SUCCESS) err = clEnqueueReadBuffer(q, bout, CL_TRUE, 0, out_bytes, out, 0, NULL, NULL);
    if (bin) clReleaseMemObject(bin);
    if (bout) clReleaseMemObject(bout);
    if (q) clReleaseCommandQueue(q);
    return err;
}

/* Runs the probe kernel on a private queue; returns 1 when every result matches. */
static int run_probe(flashcl_context *ctx, int sm75, char *why, size_t cap) {
    cl_program program = NULL;
    flashcl_status st = flashcl__get_program(ctx, "probe_mma.cl", sm75 ? "-DMMA_SM75=1" : "", &program);
    if (st != FLASHCL_SUCCESS) {
        snprintf(why, cap, "the mma.sync probe did not build");
        return 0;
    }
    cl_kernel kernel = NULL;
    if (flashcl__create_kernel(ctx, program, "probe_mma", &kernel) != FLASHCL_SUCCESS) {
        snprintf(why, cap, "the mma.sync probe kernel could not be created");
        return 0;
    }
    float a[16][16], bm[16][8];
    uint16_t in[PROBE_IN];
    for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 16; ++j) a[i][j] = (float)((i * 3 + j * 5) % 7 - 3);
    for (int k = 0; k < 16; ++k)
        for (int n = 0; n < 8; ++n) bm[k][n] = (float)((k * 2 + n * 3) % 5 - 2);
    for (int i = 0; i < 256; ++i) {
        in[i] = to_bf16(a[i / 16][i % 16]);
        in[512 + i] = to_f16((int)a[i / 16][i % 16]);
    }
    for (int n = 0; n < 8; ++n)
        for (int k = 0; k < 16; ++k) {
            in[256 + n * 16 + k] = to_bf16(bm[k][n]);
            in[768 + n * 16 + k] = to_f16((int)bm[k][n]);
            in[384 + k * 8 + n] = to_bf16(bm[k][n]);
        }
    float out[PROBE_OUT];
    int ok = 0;
    const cl_int err = flashcl__run_probe_kernel(ctx, kernel, in, sizeof in, out, sizeof out, 32); /* one warp */
    if (err != CL_SUCCESS) {
        snprintf(why, cap, "the mma.sync probe failed to run: %s (%d)", flashcl__cl_error_name(err), (int)err);
    } else {
        int bad = 0;
        for (int i = 0; i < 16; ++i)
            for (int n = 0; n < 8; ++n) {
                float r = 0.0f;
                for (int k = 0; k < 16; ++k) r += a[i][k] * bm[k][n];
                /* The sm_75 form has no bf16 parts (t = 0, 1): only the f16 product counts. */
                for (int t = sm75 ? 2 : 0; t < 3; ++t) bad += out[t * 128 + i * 8 + n] != r;
            }
        for (int l = 0; l < 32; ++l)
            bad += out[384 + l] != 496.0f || (!sm75 && out[416 + l] != -18.5f * (float)l) ||
                   out[448 + l] != -18.5f * (float)l;
        ok = bad == 0;
        if (!ok) snprintf(why, cap, "the mma.sync probe ran but gave %d wrong results", bad);
    }
    clReleaseKernel(kernel);
    return ok;
}

flashcl__nvidia_state *flashcl__nvidia_state_of(flashcl_context *ctx) {
    if (!ctx->family[FLASHCL__FAMILY_NVIDIA])
        ctx->family[FLASHCL__FAMILY_NVIDIA] = calloc(1, sizeof(flashcl__nvidia_state));
    return ctx->family[FLASHCL__FAMILY_NVIDIA];
}

int flashcl__mma_supported(flashcl_context *ctx, const char **why) {
    flashcl__nvidia_state *state = flashcl__nvidia_state_of(ctx);
    if (!state) {
        if (why) *why = "out of host memory";
        return 0;
    }
    if (state->probe == 0) {
        char *w = state->why;
        size_t cap = sizeof state->why;
        const char *env = getenv("FLASHCL_VENDOR_PATH");
        cl_uint major = 0, minor = 0;
        state->probe = -1;
        if (env && strcmp(env, "off") == 0) {
            snprintf(w, cap, "FLASHCL_VENDOR_PATH=off");
        } else if (ctx->info.is_cpu || !has_extension(ctx->device, "cl_nv_device_attribute_query")) {
            snprintf(w, cap, "no cl_nv_device_attribute_query (not an NVIDIA GPU)");
        } else if (clGetDeviceInfo(ctx->device, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof major, &major, NULL) !=
                       CL_SUCCESS ||
                   clGetDeviceInfo(ctx->device, CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV, sizeof minor, &minor, NULL) !=
                       CL_SUCCESS) {
            snprintf(w, cap, "compute capability query failed");
        } else if (major < 7 || (major == 7 && minor < 5)) {
            snprintf(w, cap, "compute capability %u.%u < 7.5 (no mma.sync m16n8k8 with ldmatrix)", major, minor);
        } else {
            state->cc = (int)(major * 10 + minor);
            const char *force = getenv("FLASHCL_MMA_SM75");
            const int forced = major >= 8 && force && strcmp(force, "1") == 0;
            state->sm75 = major < 8 || forced;
            if (run_probe(ctx, state->sm75, w, cap)) {
                state->probe = 1;
                if (state->sm75)
                    snprintf(w, cap, "sm_%u%u, the sm_75 form%s: mma.sync m16n8k8 f16/ldmatrix probe passed", major,
                             minor, forced ? " (FLASHCL_MMA_SM75=1)" : "");
                else
                    snprintf(w, cap, "sm_%u%u, mma.sync/ldmatrix/cp.async probe passed", major, minor);
            }
        }
        /* A failed probe build leaves its log as the context's last error;
           it is not this call's error. */
        flashcl__clear_error(ctx);
    }
    if (why) *why = state->why;
    return state->probe == 1;
}
