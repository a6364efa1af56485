/*
 * The POCL 3.1 miscompile behind FLASHCL_SHARED_FOR (cl/common.cl), in its
 * smallest form: a work-group of 256 fills two adjacent __local arrays of 64
 * with `for (int r = lid; r < 64; r += 256)`, inside a loop with barriers
 * and a tile skip like the backward kernels'. Items 64..255 must not write;
 * on an AVX-512 host POCL's default work-group method ran them through one
 * iteration anyway, so Ls[64..] spilled -inf into Ds and every output was -inf.
 *
 * The test checks that FLASHCL_SHARED_FOR, the form every portable kernel
 * uses, gives the right answer on this device's compiler, and reports (without
 * failing) whether the plain form still goes wrong, so a fixed POCL shows up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "testutil.h"

/* LOOP_OPEN(r) opens the loop over r = lid, lid + 256, ... < 64 in the form being tested. */
static const char *const k_kernel =
    "__kernel __attribute__((reqd_work_group_size(256, 1, 1)))\n"
    "void fill(__global const float *lse, __global const float *dsum, __global const uchar *skip,\n"
    "          __global float *out, int sq) {\n"
    "    const int lid = (int)get_local_id(0);\n"
    "    __local float stage[1024];\n"
    "    __local float Ls[64];\n"
    "    __local float Ds[64];\n"
    "    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};\n"
    "    for (long row0 = 0; row0 < sq; row0 += 64) {\n"
    "        if (skip[row0 / 64]) continue;\n"
    "        LOOP_OPEN(r) {\n"
    "            long i = row0 + r;\n"
    "            Ls[r] = i < sq ? lse[i] : -INFINITY;\n"
    "            Ds[r] = i < sq ? dsum[i] : 0.0f;\n"
    "        }\n"
    "        barrier(CLK_LOCAL_MEM_FENCE);\n"
    "        float s[4][4];\n"
    "        for (int c0 = 0; c0 < 2; ++c0) {\n"
    "            FLASHCL_SHARED_FOR(int, e, 1024, lid, 256) stage[e] = lse[(e + c0) % sq];\n"
    "            barrier(CLK_LOCAL_MEM_FENCE);\n"
    "            for (int a = 0; a < 4; ++a)\n"
    "                for (int b = 0; b < 4; ++b) s[a][b] = (c0 ? s[a][b] : 0.0f) + stage[(lid + a * 16 + b) % 1024];\n"
    "            barrier(CLK_LOCAL_MEM_FENCE);\n"
    "        }\n"
    "        for (int a = 0; a < 4; ++a) {\n"
    "            const int r = lid / 16 + 16 * a;\n"
    "            for (int b = 0; b < 4; ++b) acc[a] += exp2(s[a][b] - Ls[r]) * 0.0f + Ds[r];\n"
    "        }\n"
    "        barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    }\n"
    "    out[get_global_id(0)] = acc[0] + acc[1] + acc[2] + acc[3];\n"
    "}\n";

/* Runs the kernel with LOOP_OPEN defined by `loop_open`; returns how many of the 256 outputs are wrong. */
static int wrong_outputs(flashcl_context *ctx, const char *loop_open) {
    char *common = NULL;
    REQUIRE(flashcl__load_kernel_source(NULL, "common.cl", &common) == FLASHCL_SUCCESS);
    size_t need = strlen(common) + strlen(loop_open) + strlen(k_kernel) + 64;
    char *text = malloc(need);
    REQUIRE(text != NULL);
    snprintf(text, need, "%s\n#define LOOP_OPEN(r) %s\n%s", common, loop_open, k_kernel);
    free(common);

    cl_context cl_ctx = flashcl_context_cl_context(ctx);
    cl_device_id dev = flashcl_context_device(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    cl_int err = CL_SUCCESS;
    const char *src = text;
    cl_program program = clCreateProgramWithSource(cl_ctx, 1, &src, NULL, &err);
    REQUIRE_CL(err);
    REQUIRE_CL(clBuildProgram(program, 1, &dev, "", NULL, NULL));
    cl_kernel kernel = clCreateKernel(program, "fill", &err);
    REQUIRE_CL(err);

    enum { SQ = 128 };
    float lse[SQ], dsum[SQ], out[256];
    unsigned char skip[SQ / 64] = {0, 0};
    for (int i = 0; i < SQ; ++i) lse[i] = 1.0f, dsum[i] = 2.0f;
    cl_mem b_lse = tu_buffer_create(cl_ctx, SQ, lse), b_dsum = tu_buffer_create(cl_ctx, SQ, dsum);
    cl_mem b_out = tu_buffer_create(cl_ctx, 256, NULL);
    cl_mem b_skip = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof skip, skip, &err);
    REQUIRE_CL(err);
    cl_int sq = SQ;
    REQUIRE_CL(clSetKernelArg(kernel, 0, sizeof b_lse, &b_lse));
    REQUIRE_CL(clSetKernelArg(kernel, 1, sizeof b_dsum, &b_dsum));
    REQUIRE_CL(clSetKernelArg(kernel, 2, sizeof b_skip, &b_skip));
    REQUIRE_CL(clSetKernelArg(kernel, 3, sizeof b_out, &b_out));
    REQUIRE_CL(clSetKernelArg(kernel, 4, sizeof sq, &sq));
    size_t global = 256, local = 256;
    REQUIRE_CL(clEnqueueNDRangeKernel(queue, kernel, 1, NULL, &global, &local, 0, NULL, NULL));
    REQUIRE_CL(clEnqueueReadBuffer(queue, b_out, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));

    /* Per block, each of the 4 x 4 terms adds Ds = 2 (the exp2 term is multiplied by 0): 2 blocks x 16 x 2. */
    int wrong = 0;
    for (int i = 0; i < 256; ++i) wrong += out[i] != 64.0f;
    clReleaseMemObject(b_lse), clReleaseMemObject(b_dsum), clReleaseMemObject(b_out), clReleaseMemObject(b_skip);
    clReleaseKernel(kernel);
    clReleaseProgram(program);
    free(text);
    return wrong;
}

int main(void) {
    flashcl_context *ctx = tu_context_create();
    int shared = wrong_outputs(ctx, "FLASHCL_SHARED_FOR(int, r, 64, lid, 256)");
    int plain = wrong_outputs(ctx, "for (int r = lid; r < 64; r += 256)");
    printf("FLASHCL_SHARED_FOR: %d of 256 outputs wrong\n", shared);
    printf("for (r = lid; ...): %d of 256 outputs wrong%s\n", plain,
           plain ? " (this device's compiler has the miscompile FLASHCL_SHARED_FOR avoids)" : "");
    CHECK(shared == 0);
    flashcl_context_destroy(ctx);
    return tu_finish("pocl_shared_loop");
}
