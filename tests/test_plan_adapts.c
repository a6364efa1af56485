/*
 * The tile plan must fit the device it runs on. Prints the plans for d=64
 * and d=128 and checks local memory and work-group size against the
 * device's limits, then runs d=128 on both paths to show the plan works.
 *
 *   test_plan_adapts [--expect-local BYTES] [--expect-wgsize N]
 *
 * Under `oclgrind --local-mem-size 16384 --max-wgsize 256` the --expect
 * options confirm the limits really reached the device, so the plan was
 * made for a 16 KiB device rather than POCL's roomy one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "problem.h"

static void usage(void) {
    fprintf(stderr, "usage: test_plan_adapts [--expect-local BYTES] [--expect-wgsize N]\n");
    exit(2);
}

int main(int argc, char **argv) {
    unsigned long long expect_local = 0, expect_wg = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--expect-local") && i + 1 < argc)
            expect_local = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--expect-wgsize") && i + 1 < argc)
            expect_wg = strtoull(argv[++i], NULL, 10);
        else
            usage();
    }

    flashcl_context *ctx = tu_context_create();
    cl_device_id dev = flashcl_context_device(ctx);
    cl_ulong local_mem = 0;
    size_t max_wg = 0;
    char name[256] = "";
    REQUIRE_CL(clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem, &local_mem, NULL));
    REQUIRE_CL(clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL));
    REQUIRE_CL(clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL));
    printf("device: %s, local memory %llu bytes, max work-group size %zu\n", name, (unsigned long long)local_mem,
           max_wg);
    if (expect_local) CHECK(local_mem == expect_local);
    if (expect_wg) CHECK(max_wg == expect_wg);

    static const size_t dims[] = {64, 128};
    for (size_t i = 0; i < 2; i++) {
        for (int path = 0; path < 2; path++) {
            flashcl_attention_desc d;
            d = (flashcl_attention_desc)FLASHCL_ATTENTION_DESC_INIT;
            d.batch = 1;
            d.heads_q = 8;
            d.seqlen_q = 1024;
            d.head_dim = dims[i];
            d.path = (flashcl_path)path;
            flashcl_plan plan;
            if (!CHECK_STATUS(flashcl_plan_query(ctx, &d, &plan), FLASHCL_SUCCESS)) {
                fprintf(stderr, "  d=%zu: %s\n", dims[i], flashcl_last_error(ctx));
                continue;
            }
            printf("d=%zu %s: kernel=%s Br=%d Bc=%d threads/row=%d staging=%s wg=%zu local=%zu "
                   "private=%zu origin=%s\n  reason: %s\n",
                   dims[i], path ? "standard" : "flash", plan.kernel, plan.block_rows, plan.block_cols,
                   plan.threads_per_row, plan.staging == FLASHCL_STAGING_LOCAL ? "local" : "direct",
                   plan.work_group_size, plan.local_mem_bytes, plan.private_mem_bytes, plan.origin, plan.reason);
            CHECK(plan.local_mem_bytes <= local_mem);
            CHECK(plan.work_group_size >= 1 && plan.work_group_size <= max_wg);
            CHECK(plan.block_rows >= 1 && plan.block_cols >= 1);
        }
    }

    /* The plan has to run, not only fit: d=128 is the tight one at 16 KiB. */
    tu_shape shape = tu_shape_make(1, 2, 1, 33, 40, 128, 1, TU_BSHD);
    tu_problem p;
    tu_problem_init(&p, flashcl_context_cl_context(ctx), &shape);
    for (int path = 0; path < 2; path++) {
        const char *label = path ? "d=128 run [standard]" : "d=128 run [flash]";
        tu_problem_reset_outputs(&p, flashcl_context_queue(ctx));
        if (CHECK_STATUS(tu_problem_run(ctx, &p, (flashcl_path)path, 0, NULL, NULL), FLASHCL_SUCCESS))
            tu_problem_verify(&p, flashcl_context_queue(ctx), NULL, label);
        else
            fprintf(stderr, "  %s: %s\n", label, flashcl_last_error(ctx));
    }
    tu_problem_free(&p);
    flashcl_context_destroy(ctx);
    return tu_finish("test_plan_adapts");
}
