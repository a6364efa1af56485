/* The roof of `flashcl bench` (see roof.h): OpenBLAS SGEMM on a CPU (optional:
   built with FLASHCL_HAVE_OPENBLAS when CMake found it), an FMA kernel elsewhere. */
#include "roof.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_rate.h"
#include "timing.h"

/* Eight independent float4 chains per work-item (32 FMAs in flight, more than an FMA pipe's
   latency times its width needs); x -> a x + b with a < 1 converges to b / (1 - a), so the
   values stay normal and finite. The sum is written so that no chain is dead code. */
static const char fma_kernel_source[] =
    "__kernel void fma_chain(__global float *out, int iters, float a, float b) {\n"
    "    const float s = (float)(get_global_id(0) & 1023) * 1e-3f;\n"
    "    float4 x0 = (float4)(s, s + 0.1f, s + 0.2f, s + 0.3f), x1 = x0 + 0.5f, x2 = x0 + 1.0f, x3 = x0 + 1.5f;\n"
    "    float4 x4 = x0 + 2.0f, x5 = x0 + 2.5f, x6 = x0 + 3.0f, x7 = x0 + 3.5f;\n"
    "    const float4 va = (float4)(a), vb = (float4)(b);\n"
    "    for (int i = 0; i < iters; ++i) {\n"
    "        x0 = fma(x0, va, vb); x1 = fma(x1, va, vb); x2 = fma(x2, va, vb); x3 = fma(x3, va, vb);\n"
    "        x4 = fma(x4, va, vb); x5 = fma(x5, va, vb); x6 = fma(x6, va, vb); x7 = fma(x7, va, vb);\n"
    "    }\n"
    "    const float4 t = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;\n"
    "    out[get_global_id(0)] = t.x + t.y + t.z + t.w;\n"
    "}\n";

#define FMA_ITERS 4096
#define FMA_PER_ITEM_ITER 32 /* 8 float4 FMAs */
#define FMA_RUNS 5

/* The device's float32 FMA rate in GFLOP/s (2 per FMA), or NaN with why. */
static double measure_fma(flashcl_context *ctx, char *why, size_t cap) {
    cl_device_id dev = flashcl_context_device(ctx);
    cl_uint units = 0;
    size_t max_wg = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL) != CL_SUCCESS ||
        clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL) != CL_SUCCESS) {
        snprintf(why, cap, "the FMA kernel's device limits could not be queried");
        return NAN;
    }
    rate_kernel k = {0};
    if (!rate_kernel_build(ctx, fma_kernel_source, "", "fma_chain", &k, why, cap)) {
        rate_kernel_release(&k);
        return NAN;
    }
    k.local = max_wg < 256 ? max_wg : 256;
    k.global = (size_t)(units ? units : 1) * 2048 / k.local * k.local; /* several waves of resident groups */
    const cl_int iters = FMA_ITERS;
    const cl_float a = 0.9999f, b = 1e-4f;
    cl_int err = CL_SUCCESS;
    cl_mem out =
        clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_WRITE_ONLY, k.global * sizeof(float), NULL, &err);
    if (err == CL_SUCCESS) err = clSetKernelArg(k.kernel, 0, sizeof out, &out);
    if (err == CL_SUCCESS) err = clSetKernelArg(k.kernel, 1, sizeof iters, &iters);
    if (err == CL_SUCCESS) err = clSetKernelArg(k.kernel, 2, sizeof a, &a);
    if (err == CL_SUCCESS) err = clSetKernelArg(k.kernel, 3, sizeof b, &b);
    size_t repeats = 0;
    const double best = err == CL_SUCCESS ? rate_kernel_best_seconds(&k, FMA_RUNS, 0.05, 200, &repeats) : -1.0;
    if (out) clReleaseMemObject(out);
    rate_kernel_release(&k);
    if (!(best > 0.0) || !isfinite(best)) {
        snprintf(why, cap, "the FMA kernel failed to run%s%s", err != CL_SUCCESS ? ": " : "",
                 err != CL_SUCCESS ? flashcl_status_name(err) : "");
        return NAN;
    }
    snprintf(why, cap,
             "measured: float32 FMA kernel, %zu work-items x %d FMAs, best of %d runs of %zu launch%s; the "
             "tensor cores' 16-bit rate is higher",
             k.global, FMA_ITERS * FMA_PER_ITEM_ITER, FMA_RUNS, repeats, repeats == 1 ? "" : "es");
    return 2.0 * (double)k.global * FMA_ITERS * FMA_PER_ITEM_ITER / best * 1e-9;
}

#ifdef FLASHCL_HAVE_OPENBLAS
#include <cblas.h>

#define ROOF_N 2048
#define ROOF_RUNS 3

/* Best GFLOP/s of ROOF_RUNS sgemm calls after one warm-up, or NaN without memory. */
static double measure_sgemm(void) {
    const size_t n = ROOF_N, count = n * n;
    float *a = malloc(count * sizeof *a), *b = malloc(count * sizeof *b), *c = malloc(count * sizeof *c);
    double best = NAN;
    if (a && b && c) {
        for (size_t i = 0; i < count; ++i) {
            a[i] = (float)((i * 7u) % 13u) * 0.01f;
            b[i] = (float)((i * 5u) % 11u) * 0.01f;
        }
        memset(c, 0, count * sizeof *c);
        for (int run = 0; run <= ROOF_RUNS; ++run) {
            double t0 = wall_seconds();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a, (int)n, b, (int)n,
                        0.0f, c, (int)n);
            double ms = (wall_seconds() - t0) * 1e3;
            double gflops = 2.0 * (double)n * (double)n * (double)n / (ms * 1e-3) * 1e-9;
            if (run > 0 && (isnan(best) || gflops > best)) best = gflops;
        }
    }
    free(a);
    free(b);
    free(c);
    return best;
}
#endif

void roof_init(bench_roof *roof, flashcl_context *ctx, bool cpu_device, double user_gflops) {
    roof->gflops = NAN;
    if (user_gflops > 0.0) {
        roof->gflops = user_gflops;
        snprintf(roof->source, sizeof roof->source, "given with --roof");
        return;
    }
    if (!cpu_device) {
        roof->gflops = measure_fma(ctx, roof->source, sizeof roof->source);
        return;
    }
#ifdef FLASHCL_HAVE_OPENBLAS
    roof->gflops = measure_sgemm();
    snprintf(roof->source, sizeof roof->source, "OpenBLAS cblas_sgemm %dx%dx%d float32, best of %d, %s threads", ROOF_N,
             ROOF_N, ROOF_N, ROOF_RUNS, getenv("OPENBLAS_NUM_THREADS") ? "OPENBLAS_NUM_THREADS" : "default");
#else
    snprintf(roof->source, sizeof roof->source, "built without OpenBLAS: give --roof GFLOPS");
#endif
}

const bench_ceiling_names roof_names = {"roof", "GFLOP/s", "roof", "roof_gflops", "roof_percent", "roof_source"};
