/*
 * The kernel trace (flashcl_trace_kernels / flashcl_trace_read): on a
 * profiling queue every launch of a call is recorded with its kernel's name
 * and a device time, in launch order, the plan's kernel among them; reads
 * forget what they return; past FLASHCL_TRACE_MAX launches are counted
 * without times; a queue without profiling, a read while not recording and
 * NULL pointers get a status and a message naming the cause, with nothing
 * written. The calls traced still give the reference's results.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "problem.h"

static cl_command_queue make_queue(cl_context cl_ctx, cl_device_id dev, cl_command_queue_properties props) {
    cl_int err = CL_SUCCESS;
    cl_command_queue q = clCreateCommandQueue(cl_ctx, dev, props, &err);
    REQUIRE_CL(err);
    return q;
}

static int names_kernel(const flashcl_kernel_time *t, size_t n, const char *name) {
    for (size_t i = 0; i < n; ++i)
        if (strcmp(t[i].name, name) == 0) return 1;
    return 0;
}

/* A queue without profiling: tracing refused by name, reads refused, nothing written. */
static void check_refusals(cl_context cl_ctx, cl_device_id dev) {
    cl_command_queue queue = make_queue(cl_ctx, dev, 0);
    flashcl_context *ctx = NULL;
    REQUIRE(flashcl_context_create_from_queue(&ctx, queue) == FLASHCL_SUCCESS);
    CHECK_STATUS(flashcl_trace_kernels(ctx, 1), FLASHCL_ERR_INVALID_QUEUE);
    CHECK(strstr(flashcl_last_error(ctx), "CL_QUEUE_PROFILING_ENABLE") != NULL);
    flashcl_kernel_time t = {"untouched", 7.0, 0, 0};
    size_t recorded = 99;
    CHECK_STATUS(flashcl_trace_read(ctx, &t, 1, &recorded, NULL), FLASHCL_ERR_TRACE_OFF);
    CHECK(strstr(flashcl_last_error(ctx), "not recording") != NULL);
    CHECK(strcmp(t.name, "untouched") == 0 && t.ms == 7.0 && recorded == 0);
    CHECK_STATUS(flashcl_trace_kernels(ctx, 0), FLASHCL_SUCCESS); /* stopping what never started: fine */
    CHECK_STATUS(flashcl_trace_kernels(NULL, 1), FLASHCL_ERR_INVALID_CONTEXT);
    CHECK_STATUS(flashcl_trace_read(NULL, &t, 1, &recorded, NULL), FLASHCL_ERR_INVALID_CONTEXT);
    flashcl_context_destroy(ctx);
    clReleaseCommandQueue(queue);
}

static void check_trace(cl_context cl_ctx, cl_device_id dev) {
    cl_command_queue queue = make_queue(cl_ctx, dev, CL_QUEUE_PROFILING_ENABLE);
    flashcl_context *ctx = NULL;
    REQUIRE(flashcl_context_create_from_queue(&ctx, queue) == FLASHCL_SUCCESS);
    tu_shape shape = tu_shape_make(1, 4, 2, 33, 70, 32, 1, TU_BSHD); /* GQA, causal, tails */
    tu_problem p;
    tu_problem_init(&p, cl_ctx, &shape);
    flashcl_plan plan;
    memset(&plan, 0, sizeof plan);
    REQUIRE(flashcl_plan_query(ctx, &shape.desc, &plan) == FLASHCL_SUCCESS);

    REQUIRE(flashcl_trace_kernels(ctx, 1) == FLASHCL_SUCCESS);
    CHECK_STATUS(flashcl_trace_kernels(ctx, 1), FLASHCL_SUCCESS); /* already on: kept as it is */
    size_t written = 99, launched = 99;
    flashcl_kernel_time t[16];
    CHECK_STATUS(flashcl_trace_read(ctx, NULL, 1, &written, &launched), FLASHCL_ERR_INVALID_ARGUMENT);
    CHECK(strstr(flashcl_last_error(ctx), "out is NULL") != NULL && written == 0 && launched == 0);
    CHECK_STATUS(flashcl_trace_read(ctx, t, 16, NULL, &launched), FLASHCL_ERR_INVALID_ARGUMENT);
    CHECK(strstr(flashcl_last_error(ctx), "written") != NULL);

    /* One forward: its launches in order, the plan's kernel among them, each with a device time. */
    cl_event ev = NULL;
    REQUIRE(tu_problem_run(ctx, &p, FLASHCL_PATH_FLASH, 0, NULL, &ev) == FLASHCL_SUCCESS);
    CHECK(tu_problem_verify(&p, queue, ev, "traced forward"));
    clReleaseEvent(ev);
    CHECK_STATUS(flashcl_trace_read(ctx, t, 16, &written, &launched), FLASHCL_SUCCESS);
    REQUIRE(written >= 1 && written <= 16 && launched == written);
    if (!names_kernel(t, written, plan.kernel))
        fprintf(stderr, "FAIL the trace of a forward does not name the plan's kernel %s (first: %s)\n", plan.kernel,
                t[0].name);
    CHECK(names_kernel(t, written, plan.kernel));
    double sum = 0.0;
    for (size_t i = 0; i < written; ++i) {
        CHECK(t[i].name[0] != '\0');
        CHECK(isfinite(t[i].ms) && t[i].ms >= 0.0 && t[i].end_ns >= t[i].start_ns);
        CHECK(fabs(t[i].ms - (double)(t[i].end_ns - t[i].start_ns) * 1e-6) < 1e-9);
        if (i) CHECK(t[i].start_ns >= t[i - 1].start_ns); /* an in-order queue: launch order is start order */
        sum += t[i].ms;
    }
    CHECK(sum > 0.0); /* times, not zeros */
    const size_t per_call = written;
    printf("a forward launched %zu kernels:", per_call);
    for (size_t i = 0; i < per_call; ++i) printf(" %s %.3f ms", t[i].name, t[i].ms);
    printf("\n");
    /* Read, so forgotten: the next read sees nothing; cap 0 with out NULL counts only. */
    CHECK_STATUS(flashcl_trace_read(ctx, NULL, 0, &written, &launched), FLASHCL_SUCCESS);
    CHECK(written == 0 && launched == 0);
    /* cap below what was kept: the first cap written, the rest counted and forgotten. */
    REQUIRE(tu_problem_run(ctx, &p, FLASHCL_PATH_FLASH, 0, NULL, NULL) == FLASHCL_SUCCESS);
    REQUIRE(tu_problem_run(ctx, &p, FLASHCL_PATH_FLASH, 0, NULL, NULL) == FLASHCL_SUCCESS);
    flashcl_kernel_time one[2];
    one[1].name[0] = '#';
    CHECK_STATUS(flashcl_trace_read(ctx, one, 1, &written, &launched), FLASHCL_SUCCESS);
    CHECK(written == 1 && launched == 2 * per_call && strcmp(one[0].name, t[0].name) == 0 && one[1].name[0] == '#');
    CHECK_STATUS(flashcl_trace_read(ctx, t, 16, &written, NULL), FLASHCL_SUCCESS);
    CHECK(written == 0);

    /* More launches than the trace keeps: counted, the first FLASHCL_TRACE_MAX with times. */
    const size_t calls = FLASHCL_TRACE_MAX / per_call + 2;
    for (size_t i = 0; i < calls; ++i)
        REQUIRE(tu_problem_run(ctx, &p, FLASHCL_PATH_FLASH, 0, NULL, NULL) == FLASHCL_SUCCESS);
    static flashcl_kernel_time all[FLASHCL_TRACE_MAX + 1];
    all[FLASHCL_TRACE_MAX].name[0] = '#';
    CHECK_STATUS(flashcl_trace_read(ctx, all, FLASHCL_TRACE_MAX + 1, &written, &launched), FLASHCL_SUCCESS);
    CHECK(written == FLASHCL_TRACE_MAX && launched == calls * per_call);
    CHECK(strcmp(all[0].name, t[0].name) == 0 && isfinite(all[FLASHCL_TRACE_MAX - 1].ms));
    CHECK(all[FLASHCL_TRACE_MAX].name[0] == '#'); /* only the kept ones are written */

    /* Stopped: reads refused; destroying a context that still records releases its events. */
    CHECK_STATUS(flashcl_trace_kernels(ctx, 0), FLASHCL_SUCCESS);
    CHECK_STATUS(flashcl_trace_read(ctx, t, 16, &written, NULL), FLASHCL_ERR_TRACE_OFF);
    REQUIRE(flashcl_trace_kernels(ctx, 1) == FLASHCL_SUCCESS);
    /* A queue without profiling switched in while recording: tracing on again is refused by name. */
    cl_command_queue plain = make_queue(cl_ctx, dev, 0);
    REQUIRE(flashcl_context_set_queue(ctx, plain) == FLASHCL_SUCCESS);
    CHECK_STATUS(flashcl_trace_kernels(ctx, 1), FLASHCL_ERR_INVALID_QUEUE);
    REQUIRE(flashcl_context_set_queue(ctx, queue) == FLASHCL_SUCCESS);
    clReleaseCommandQueue(plain);
    REQUIRE(tu_problem_run(ctx, &p, FLASHCL_PATH_STANDARD, 0, NULL, NULL) == FLASHCL_SUCCESS);
    REQUIRE_CL(clFinish(queue));
    tu_problem_free(&p);
    flashcl_context_destroy(ctx);
    clReleaseCommandQueue(queue);
}

int main(void) {
    flashcl_context *probe = tu_context_create();
    cl_device_id dev = flashcl_context_device(probe);
    cl_context cl_ctx = flashcl_context_cl_context(probe);
    clRetainContext(cl_ctx);
    check_refusals(cl_ctx, dev);
    check_trace(cl_ctx, dev);
    flashcl_context_destroy(probe);
    clReleaseContext(cl_ctx);
    return tu_finish("test_trace");
}
