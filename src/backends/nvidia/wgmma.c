/*
 * Hopper's wgmma for the tensor-core forward (cl/flash_fwd_mma.cl with
 * MMA_WG=1). OpenCL C on NVIDIA compiles to PTX for `.target sm_90`, where
 * wgmma does not exist, and ptxas takes it only for sm_90a. So the kernel
 * writes each wgmma-related instruction as a PTX comment behind the marker
 * "//WG " (cl/ptx.cl), the driver builds that program as usual (the marked
 * lines are comments then), and this file turns the PTX the driver generated
 * into the real thing: the marker removed, `.target sm_90a`, `.version` at
 * least 8.0; the result is built with clCreateProgramWithBinary. The registers
 * the marked lines name are the ones the compiler bound to the asm statement,
 * so everything else in the kernel stays ordinary OpenCL C.
 *
 * sm_90a code runs on compute capability 9.0 only (it is not forward
 * compatible), so the form is tried there alone, and only after a probe
 * (cl/probe_wgmma_mma.cl) has built the same way, run on a private queue and
 * given exactly the right products with the kernel's own __local layout and
 * descriptors. FLASHCL_WGMMA=0 keeps the mma.sync form.
 */
#include "nvidia.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WG_PROBE_IN (2 * 4096 + 1024) /* ushorts: A [64][64] | B [64][64] | V [16][64] */
#define WG_PROBE_OUT (3 * 4096)       /* floats: S [64][64] | O [64][64] | A A^T, A from registers [64][64] */

static uint16_t probe_bf16(int v) { /* small integers: exact */
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

/* Builds and runs the probe on a private queue; 1 when every product is exact. */
static int run_probe(flashcl_context *ctx, char *why, size_t cap) {
    cl_program program = NULL;
    if (flashcl__get_patched_program(ctx, "probe_wgmma_mma.cl", "-DMMA_WG=1 -DMMA_F16=0", "sm_90a",
                                     flashcl__wgmma_patch, &program) != FLASHCL_SUCCESS) {
        snprintf(why, cap, "the wgmma probe did not build: %.100s", flashcl_last_error(ctx));
        return 0;
    }
    cl_kernel kernel = NULL;
    if (flashcl__create_kernel(ctx, program, "probe_wgmma", &kernel) != FLASHCL_SUCCESS) {
        snprintf(why, cap, "the wgmma probe kernel could not be created");
        return 0;
    }
    int(*a)[64] = malloc(64 * sizeof *a), (*b)[64] = malloc(64 * sizeof *b), (*v)[64] = malloc(16 * sizeof *v);
    uint16_t *in = malloc(WG_PROBE_IN * sizeof *in);
    float *out = malloc(WG_PROBE_OUT * sizeof *out);
    int ok = 0;
    cl_int err = in && out && a && b && v ? CL_SUCCESS : CL_OUT_OF_HOST_MEMORY;
    for (int i = 0; i < 64 && err == CL_SUCCESS; ++i)
        for (int k = 0; k < 64; ++k) {
            a[i][k] = (i * 3 + k * 5) % 7 - 3;
            b[i][k] = (i * 5 + k * 3) % 9 - 4;
            in[i * 64 + k] = probe_bf16(a[i][k]);
            in[4096 + i * 64 + k] = probe_bf16(b[i][k]);
            if (k < 16) {
                v[k][i] = (k * 7 + i * 2) % 5 - 2;
                in[8192 + k * 64 + i] = probe_bf16(v[k][i]);
            }
        }
    if (err == CL_SUCCESS) /* one warpgroup */
        err =
            flashcl__run_probe_kernel(ctx, kernel, in, WG_PROBE_IN * sizeof *in, out, WG_PROBE_OUT * sizeof *out, 128);
    if (err != CL_SUCCESS) {
        snprintf(why, cap, "the wgmma probe failed to run: %s (%d)", flashcl__cl_error_name(err), (int)err);
    } else {
        int bad_s = 0, bad_o = 0, bad_r = 0;
        for (int i = 0; i < 64; ++i)
            for (int j = 0; j < 64; ++j) {
                int s = 0, o = 0, r = 0;
                for (int k = 0; k < 64; ++k) s += a[i][k] * b[j][k];
                for (int k = 0; k < 64; ++k) r += a[i][k] * a[j][k];
                for (int k = 0; k < 16; ++k) o += a[i][k] * v[k][j];
                bad_s += out[i * 64 + j] != (float)s;
                bad_o += out[4096 + i * 64 + j] != (float)o;
                bad_r += out[8192 + i * 64 + j] != (float)r;
            }
        ok = bad_s == 0 && bad_o == 0 && bad_r == 0;
        if (!ok)
            snprintf(why, cap,
                     "the wgmma probe ran but gave %d wrong of 4096 in Q K^T, %d in P V and %d in Q K^T with Q in "
                     "registers",
                     bad_s, bad_o, bad_r);
    }
    clReleaseKernel(kernel);
    free(in);
    free(out);
    free(a);
    free(b);
    free(v);
    return ok;
}

int flashcl__wgmma_supported(flashcl_context *ctx, const char **why) {
    flashcl__nvidia_state *state = flashcl__nvidia_state_of(ctx);
    if (!state) {
        if (why) *why = "out of host memory";
        return 0;
    }
    if (state->wg_probe == 0) {
        char *w = state->wg_why;
        const size_t cap = sizeof state->wg_why;
        const char *env = getenv("FLASHCL_WGMMA");
        state->wg_probe = -1;
        if (env && strcmp(env, "0") == 0) {
            snprintf(w, cap, "FLASHCL_WGMMA=0");
        } else if (!flashcl__mma_supported(ctx, NULL) || state->sm75) {
            snprintf(w, cap, "no sm_80 mma.sync form");
        } else if (state->cc != 90) {
            snprintf(w, cap, "compute capability %d.%d: wgmma's sm_90a code runs on 9.0 only", state->cc / 10,
                     state->cc % 10);
        } else if (run_probe(ctx, w, cap)) {
            state->wg_probe = 1;
            snprintf(w, cap, "sm_90a wgmma probe passed");
        }
        flashcl__clear_error(ctx); /* a failed probe build is not the caller's error */
    }
    if (why) *why = state->wg_why;
    return state->wg_probe == 1;
}
