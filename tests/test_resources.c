/*
 * Resources, run under the counting shim (cl_shim.c, LD_PRELOAD):
 *  - every OpenCL object FlashCL creates is released: rounds of context
 *    create, forward, backward, standard, host calls, destroy bring the live
 *    count of each object type back to where it started;
 *  - the standard path on a problem whose N x N scratch cannot exist fails
 *    with FLASHCL_ERR_OUT_OF_DEVICE_MEMORY and a message, writes nothing,
 *    and the same context then runs a small problem correctly;
 *  - the binary cache: a foreign file (another program's valid entry under
 *    this one's name) is rebuilt, and an unusable cache directory is not an
 *    error (test_cache covers truncated, flipped and garbage files).
 */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_shim.h"
#include "problem.h"
#include "scenario.h"
#include "tmpdir.h"

static cl_shim_api shim;

static void check_no_leaks(void) {
    long base[CL_SHIM_TYPES];
    for (int t = 0; t < CL_SHIM_TYPES; ++t) base[t] = shim.live(t);
    const int rounds = 3;
    for (int r = 0; r < rounds; ++r) {
        scenario_result res;
        scenario_run(&shim, &res);
        if (!CHECK_STATUS(res.status, FLASHCL_SUCCESS)) fprintf(stderr, "  %s: %s\n", res.step, res.message);
        CHECK(res.results_ok);
        for (int t = 0; t < CL_SHIM_TYPES; ++t) {
            if (shim.live(t) != base[t]) {
                fprintf(stderr, "FAIL round %d: %ld %s alive after destroy, %ld before\n", r, shim.live(t),
                        cl_shim_type_name(t), base[t]);
                tu_fail_count();
            }
        }
    }
    printf("leaks: %d rounds, objects created:", rounds);
    for (int t = 0; t < CL_SHIM_TYPES; ++t) printf(" %s=%ld", cl_shim_type_name(t), shim.created(t));
    printf("; alive after: %ld %ld %ld %ld %ld %ld (baseline %ld %ld %ld %ld %ld %ld)\n", shim.live(0), shim.live(1),
           shim.live(2), shim.live(3), shim.live(4), shim.live(5), base[0], base[1], base[2], base[3], base[4],
           base[5]);
    /* The counter must have seen real work, or the check above proves nothing. */
    CHECK(shim.created(CL_SHIM_MEM) > 0 && shim.created(CL_SHIM_KERNEL) > 0 && shim.created(CL_SHIM_EVENT) > 0 &&
          shim.created(CL_SHIM_PROGRAM) > 0 && shim.created(CL_SHIM_CONTEXT) >= rounds);
}

/* Standard forward and backward with S = b*h*65536*65536 floats: more than the device holds. */
static void check_out_of_memory(void) {
    flashcl_context *ctx = tu_context_create();
    cl_ulong global = 0;
    REQUIRE_CL(clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL));
    const size_t n = 65536;
    const double per_batch = (double)n * (double)n * sizeof(float);
    size_t batch = (size_t)(2.0 * (double)global / per_batch) + 1;
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = batch;
    d.heads_q = 1;
    d.seqlen_q = n;
    d.head_dim = 1;
    cl_context cl = flashcl_context_cl_context(ctx);
    size_t count = batch * n;
    /* q k v o dout dq dk dv: inputs are never filled, the calls must fail before reading them. */
    cl_mem bufs[8];
    flashcl_tensor t[8];
    for (int i = 0; i < 8; ++i) {
        bufs[i] = tu_buffer_create(cl, count, NULL);
        t[i] = flashcl_tensor_bshd(bufs[i], n, 1, 1);
    }
    cl_mem lse = tu_buffer_create(cl, count, NULL);
    printf("out of memory: batch=%zu seqlen=%zu needs %.1f GiB of scores, device has %.1f GiB\n", batch, n,
           per_batch * (double)batch / 1073741824.0, (double)global / 1073741824.0);

    d.path = FLASHCL_PATH_STANDARD;
    flashcl_status st = flashcl_forward(ctx, &d, &t[0], &t[1], &t[2], &t[3], lse, 0, 0, NULL, NULL);
    CHECK_STATUS(st, FLASHCL_ERR_OUT_OF_DEVICE_MEMORY);
    printf("  standard forward: %s: %s\n", flashcl_status_name(st), flashcl_last_error(ctx));
    CHECK(strstr(flashcl_last_error(ctx), "bytes") != NULL);
    st = flashcl_backward(ctx, &d, &t[0], &t[1], &t[2], &t[3], &t[4], lse, 0, &t[5], &t[6], &t[7], 0, NULL, NULL);
    CHECK_STATUS(st, FLASHCL_ERR_OUT_OF_DEVICE_MEMORY);
    printf("  standard backward: %s: %s\n", flashcl_status_name(st), flashcl_last_error(ctx));
    CHECK(strstr(flashcl_last_error(ctx), "bytes") != NULL);
    for (int i = 0; i < 8; ++i) clReleaseMemObject(bufs[i]);
    clReleaseMemObject(lse);

    /* The context is still usable: a small standard problem runs and verifies. */
    tu_shape shape = tu_shape_make(1, 2, 1, 17, 23, 16, 1, TU_BSHD);
    tu_problem p;
    tu_problem_init(&p, cl, &shape);
    CHECK_STATUS(tu_problem_run(ctx, &p, FLASHCL_PATH_STANDARD, 0, NULL, NULL), FLASHCL_SUCCESS);
    CHECK(tu_problem_verify(&p, flashcl_context_queue(ctx), NULL, "standard after out of memory"));
    tu_problem_free(&p);
    flashcl_context_destroy(ctx);
}

/* A small flash + standard forward in a fresh context, verified. */
static void run_and_verify(const char *label) {
    flashcl_context *ctx = tu_context_create();
    tu_shape shape = tu_shape_make(1, 2, 2, 9, 12, 8, 0, TU_BSHD);
    tu_problem p;
    tu_problem_init(&p, flashcl_context_cl_context(ctx), &shape);
    for (int path = 0; path < 2; ++path) {
        tu_problem_reset_outputs(&p, flashcl_context_queue(ctx));
        if (!CHECK_STATUS(tu_problem_run(ctx, &p, (flashcl_path)path, 0, NULL, NULL), FLASHCL_SUCCESS))
            fprintf(stderr, "  %s: %s\n", label, flashcl_last_error(ctx));
        CHECK(tu_problem_verify(&p, flashcl_context_queue(ctx), NULL, label));
    }
    tu_problem_free(&p);
    flashcl_context_destroy(ctx);
}

/* Collects the cache's file names. */
typedef struct file_list {
    char paths[64][1200];
    size_t count;
} file_list;

static void collect(const char *path, void *user) {
    file_list *l = user;
    if (l->count < 64) snprintf(l->paths[l->count++], sizeof l->paths[0], "%s", path);
}

static int copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    int ok = in && out;
    char buf[65536];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    if (in) fclose(in);
    if (out) ok = (fclose(out) == 0) && ok;
    return ok;
}

static void check_cache(void) {
    char *dir = tu_tmpdir_make("flashcl-resources-cache");
    REQUIRE(setenv("FLASHCL_CACHE_DIR", dir, 1) == 0);
    run_and_verify("cold cache");
    file_list *files = calloc(1, sizeof *files);
    REQUIRE(files != NULL);
    tu_tmpdir_files(dir, collect, files);
    printf("cache: %zu file(s)\n", files->count);
    CHECK(files->count >= 2);
    /* Foreign: every entry replaced by the next one's valid file (checksum intact, identity wrong). */
    if (files->count >= 2) {
        char first_copy[1300];
        snprintf(first_copy, sizeof first_copy, "%s.orig", files->paths[0]);
        REQUIRE(copy_file(files->paths[0], first_copy));
        for (size_t i = 0; i + 1 < files->count; ++i) REQUIRE(copy_file(files->paths[i + 1], files->paths[i]));
        REQUIRE(copy_file(first_copy, files->paths[files->count - 1]));
        REQUIRE(remove(first_copy) == 0);
        run_and_verify("cache of foreign files");
    }
    free(files);
    tu_tmpdir_remove(dir);

    /* Unusable directories: below a regular file (mkdir fails even for root), and removed after creation. */
    char file_path[1200];
    snprintf(file_path, sizeof file_path, "%s.file", dir);
    FILE *f = fopen(file_path, "wb");
    REQUIRE(f != NULL);
    fclose(f);
    char below_file[1300];
    snprintf(below_file, sizeof below_file, "%s/cache", file_path);
    REQUIRE(setenv("FLASHCL_CACHE_DIR", below_file, 1) == 0);
    flashcl_context *ctx = tu_context_create();
    CHECK(strcmp(flashcl_context_cache_dir(ctx), "") == 0);
    flashcl_context_destroy(ctx);
    run_and_verify("cache dir below a file");
    remove(file_path);
    free(dir);
}

int main(void) {
    if (!cl_shim_load(&shim)) {
        fprintf(stderr, "FAIL the OpenCL shim is not loaded: run with LD_PRELOAD=libflashcl_cl_shim.so\n");
        return 1;
    }
    check_no_leaks();
    check_out_of_memory();
    check_cache();
    return tu_finish("test_resources");
}
