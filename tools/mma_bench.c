/*
 * Times the library's NVIDIA tensor-core path on the shapes through the
 * public API (flashcl_forward / flashcl_backward, bf16 storage), and the float32
 * forward of the first shape; then prints ptxas' registers and spills of the
 * backward kernels (a standalone build of cl/flash_bwd_mma.cl with -cl-nv-verbose).
 *
 *   cc -O2 -std=c11 -Iinclude tools/mma_bench.c -Lbuild -lflashcl -lOpenCL -o mma_bench
 *   ./mma_bench [cl-dir]
 *
 * FLOPs as FlashAttention counts them (forward 4 b h sq sk d, half when causal;
 * backward 2.5x, forward+backward 3.5x). Not built by CMake: it needs an sm_80+ GPU.
 */
#define _POSIX_C_SOURCE 200112L
#define CL_TARGET_OPENCL_VERSION 120
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flashcl.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static cl_mem random_buffer(cl_context c, size_t n, int f32) {
    size_t bytes = n * (f32 ? 4 : 2);
    void *h = malloc(bytes);
    uint64_t s = 0x9e3779b97f4a7c15ull ^ n;
    for (size_t i = 0; i < n; ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float x = (float)((s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
        if (f32) ((float *)h)[i] = x;
        else {
            uint32_t u;
            memcpy(&u, &x, 4);
            ((uint16_t *)h)[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        }
    }
    cl_int err;
    cl_mem m = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, h, &err);
    free(h);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "clCreateBuffer: %d\n", err);
        exit(1);
    }
    return m;
}

static void must(flashcl_context *ctx, flashcl_status st, const char *what) {
    if (st != FLASHCL_SUCCESS) {
        fprintf(stderr, "%s: %s: %s\n", what, flashcl_status_name(st), flashcl_last_error(ctx));
        exit(1);
    }
}

static void shape(flashcl_context *ctx, size_t b, size_t h, size_t n, size_t d, int causal, int f32, int iters) {
    cl_context c = flashcl_context_cl_context(ctx);
    cl_command_queue q = flashcl_context_queue(ctx);
    const size_t elems = b * h * n * d;
    cl_mem bq = random_buffer(c, elems, f32), bk = random_buffer(c, elems, f32), bv = random_buffer(c, elems, f32);
    cl_mem bo = random_buffer(c, elems, f32), bdo = random_buffer(c, elems, f32), bdq = random_buffer(c, elems, f32);
    cl_mem bdk = random_buffer(c, elems, f32), bdv = random_buffer(c, elems, f32);
    cl_int err;
    cl_mem bl = clCreateBuffer(c, CL_MEM_READ_WRITE, b * h * n * 4, NULL, &err);
    flashcl_attention_desc desc = {0};
    desc.dtype = f32 ? FLASHCL_DTYPE_F32 : FLASHCL_DTYPE_BF16;
    desc.batch = b, desc.heads_q = desc.heads_kv = h, desc.seqlen_q = desc.seqlen_k = n, desc.head_dim = d;
    desc.causal = causal;
    flashcl_tensor tq = flashcl_tensor_bhsd(bq, n, h, d), tk = flashcl_tensor_bhsd(bk, n, h, d);
    flashcl_tensor tv = flashcl_tensor_bhsd(bv, n, h, d), to = flashcl_tensor_bhsd(bo, n, h, d);
    flashcl_tensor tdo = flashcl_tensor_bhsd(bdo, n, h, d), tdq = flashcl_tensor_bhsd(bdq, n, h, d);
    flashcl_tensor tdk = flashcl_tensor_bhsd(bdk, n, h, d), tdv = flashcl_tensor_bhsd(bdv, n, h, d);
    flashcl_plan plan;
    must(ctx, flashcl_plan_query(ctx, &desc, FLASHCL_PATH_FLASH, &plan), "plan");
    const double fl = 4.0 * b * h * n * n * d * (causal ? 0.5 : 1.0);
    double best_f = 1e30, best_b = 1e30;
    for (int it = 0; it < iters + 2; ++it) {
        double t0 = now();
        must(ctx, flashcl_forward(ctx, &desc, &tq, &tk, &tv, &to, bl, 0, 0, NULL, NULL), "forward");
        clFinish(q);
        double t1 = now();
        if (!f32) {
            must(ctx, flashcl_backward(ctx, &desc, &tq, &tk, &tv, &to, &tdo, bl, 0, &tdq, &tdk, &tdv, 0, NULL, NULL),
                 "backward");
            clFinish(q);
        }
        double t2 = now();
        if (it >= 2) {
            if (t1 - t0 < best_f) best_f = t1 - t0;
            if (t2 - t1 < best_b) best_b = t2 - t1;
        }
    }
    printf("%s b%zu h%zu N%zu d%zu%s [%s]: fwd %.1f TF/s", f32 ? "fp32" : "bf16", b, h, n, d, causal ? " causal" : "",
           plan.kernel, fl / best_f / 1e12);
    if (!f32)
        printf("  bwd %.1f TF/s  fwd+bwd %.1f TF/s", 2.5 * fl / best_b / 1e12, 3.5 * fl / (best_f + best_b) / 1e12);
    printf("\n");
    fflush(stdout);
    cl_mem all[] = {bq, bk, bv, bo, bdo, bdq, bdk, bdv, bl};
    for (size_t i = 0; i < 9; ++i) clReleaseMemObject(all[i]);
}

/* ptxas' report for the backward kernels at one head dim. */
static void verbose_build(flashcl_context *ctx, const char *dir, int d) {
    char path[512];
    snprintf(path, sizeof path, "%s/flash_bwd_mma.cl", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return;
    static char src[1 << 17];
    size_t len = fread(src, 1, sizeof src - 1, f);
    fclose(f);
    src[len] = 0;
    const char *s = src;
    cl_context c = flashcl_context_cl_context(ctx);
    cl_device_id dev = flashcl_context_device(ctx);
    cl_program p = clCreateProgramWithSource(c, 1, &s, NULL, NULL);
    char opt[256];
    const int step = d > 64 ? 32 : 64;
    snprintf(opt, sizeof opt, "-cl-nv-verbose -cl-mad-enable -DHEAD_DIM=%d -DMMA_BWD_BR=%d -DMMA_BWD_BCQ=%d", d, step, step);
    clBuildProgram(p, 1, &dev, opt, NULL, NULL);
    static char log[1 << 16];
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
    printf("ptxas, flash_bwd_mma.cl d=%d:\n", d);
    for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n"))
        if (strstr(line, "Compiling") || strstr(line, "registers") || strstr(line, "spill")) printf("  %s\n", line);
    clReleaseProgram(p);
}

int main(int argc, char **argv) {
    flashcl_context *ctx = NULL;
    char err[512];
    if (flashcl_context_create(&ctx, NULL, err, sizeof err) != FLASHCL_SUCCESS) {
        fprintf(stderr, "context: %s\n", err);
        return 1;
    }
    verbose_build(ctx, argc > 1 ? argv[1] : "cl", 128);
    verbose_build(ctx, argc > 1 ? argv[1] : "cl", 64);
    shape(ctx, 4, 16, 4096, 128, 0, 0, 5);
    shape(ctx, 4, 16, 4096, 128, 1, 0, 5);
    shape(ctx, 1, 16, 16384, 128, 1, 0, 3);
    shape(ctx, 16, 16, 1024, 64, 0, 0, 5);
    shape(ctx, 4, 16, 4096, 128, 0, 1, 3);
    flashcl_context_destroy(ctx);
    return 0;
}
