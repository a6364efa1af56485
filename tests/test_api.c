/*
 * The API around the kernels: contexts built on the application's queue
 * (in-order and out-of-order), wait lists and events, switching queues,
 * the host-array entry point, plan queries, scratch accounting and
 * run-to-run determinism.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "problem.h"

static const char *path_name(flashcl_path path) { return path == FLASHCL_PATH_FLASH ? "flash" : "standard"; }

/* GQA, causal, sq != sk: the shape most likely to expose indexing mistakes. */
static tu_shape gqa_shape(void) {
    tu_shape s = tu_shape_make(2, 4, 2, 65, 129, 64, 1, TU_BSHD);
    s.lse_offset = 3;
    return s;
}

static void run_and_verify(flashcl_context *ctx, const tu_shape *shape, flashcl_path path, const char *what) {
    char label[128];
    snprintf(label, sizeof label, "%s [%s]", what, path_name(path));
    tu_problem p;
    tu_problem_init(&p, flashcl_context_cl_context(ctx), shape);
    cl_event ev = NULL;
    if (CHECK_STATUS(tu_problem_run(ctx, &p, path, 0, NULL, &ev), FLASHCL_SUCCESS)) {
        CHECK(ev != NULL);
        tu_problem_verify(&p, flashcl_context_queue(ctx), ev, label);
    } else {
        fprintf(stderr, "  %s: %s\n", label, flashcl_last_error(ctx));
    }
    if (ev) clReleaseEvent(ev);
    tu_problem_free(&p);
}

/* The application's objects must survive FlashCL: use them for real. */
static void check_app_objects_alive(cl_context cl_ctx, cl_command_queue queue) {
    float in[64], out[64];
    for (int i = 0; i < 64; i++) in[i] = (float)i * 0.5f;
    cl_mem buf = tu_buffer_create(cl_ctx, 64, in);
    memset(out, 0, sizeof out);
    tu_buffer_read(queue, buf, 64, out, NULL);
    CHECK(memcmp(in, out, sizeof in) == 0);
    REQUIRE_CL(clFinish(queue));
    clReleaseMemObject(buf);
}

static void check_from_queue(cl_device_id dev) {
    cl_int err;
    cl_context cl_ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    REQUIRE_CL(err);
    cl_command_queue queue = clCreateCommandQueue(cl_ctx, dev, 0, &err);
    REQUIRE_CL(err);

    flashcl_context *ctx = NULL;
    REQUIRE(flashcl_context_create_from_queue(&ctx, queue) == FLASHCL_SUCCESS);
    CHECK(flashcl_context_queue(ctx) == queue);
    CHECK(flashcl_context_cl_context(ctx) == cl_ctx);
    CHECK(flashcl_context_device(ctx) == dev);
    tu_shape shape = gqa_shape();
    run_and_verify(ctx, &shape, FLASHCL_PATH_FLASH, "app queue");
    run_and_verify(ctx, &shape, FLASHCL_PATH_STANDARD, "app queue");

    /* A second queue of the same context is accepted and then used. */
    cl_command_queue queue2 = clCreateCommandQueue(cl_ctx, dev, 0, &err);
    REQUIRE_CL(err);
    CHECK_STATUS(flashcl_context_set_queue(ctx, queue2), FLASHCL_SUCCESS);
    CHECK(flashcl_context_queue(ctx) == queue2);
    run_and_verify(ctx, &shape, FLASHCL_PATH_FLASH, "switched queue");
    run_and_verify(ctx, &shape, FLASHCL_PATH_STANDARD, "switched queue");

    flashcl_context_destroy(ctx);
    check_app_objects_alive(cl_ctx, queue);
    check_app_objects_alive(cl_ctx, queue2);
    clReleaseCommandQueue(queue2);
    clReleaseCommandQueue(queue);
    clReleaseContext(cl_ctx);
}

/*
 * On an out-of-order queue only events order commands. The inputs arrive by
 * non-blocking writes whose events form the wait list, over buffers that
 * first held zeros; the read waits only on FlashCL's event. A library that
 * dropped the wait list, or did not chain its own kernels, reads or
 * publishes stale data.
 */
static void check_out_of_order(cl_device_id dev) {
    cl_command_queue_properties props = 0;
    REQUIRE_CL(clGetDeviceInfo(dev, CL_DEVICE_QUEUE_PROPERTIES, sizeof props, &props, NULL));
    if (!(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)) {
        printf("out-of-order queues: not supported by this device, not tested\n");
        return;
    }
    cl_int err;
    cl_context cl_ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    REQUIRE_CL(err);
    cl_command_queue queue = clCreateCommandQueue(cl_ctx, dev, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
    REQUIRE_CL(err);
    flashcl_context *ctx = NULL;
    REQUIRE(flashcl_context_create_from_queue(&ctx, queue) == FLASHCL_SUCCESS);

    tu_shape shape = tu_shape_make(1, 4, 2, 257, 257, 64, 1, TU_BHSD);
    tu_problem p;
    tu_problem_init(&p, cl_ctx, &shape);
    for (int path = 0; path < 2; path++) {
        tu_buffer *in[3] = {&p.q, &p.k, &p.v};
        cl_event writes[3];
        for (int i = 0; i < 3; i++) {
            float *zeros = calloc(in[i]->count, sizeof(float));
            REQUIRE(zeros != NULL);
            tu_buffer_write(queue, in[i]->view.buffer, in[i]->count, zeros);
            free(zeros);
        }
        tu_problem_reset_outputs(&p, queue);
        for (int i = 0; i < 3; i++)
            REQUIRE_CL(clEnqueueWriteBuffer(queue, in[i]->view.buffer, CL_FALSE, 0, in[i]->count * sizeof(float),
                                            in[i]->host, 0, NULL, &writes[i]));
        cl_event ev = NULL;
        char label[64];
        snprintf(label, sizeof label, "out-of-order queue [%s]", path_name((flashcl_path)path));
        if (CHECK_STATUS(tu_problem_run(ctx, &p, (flashcl_path)path, 3, writes, &ev), FLASHCL_SUCCESS) && ev)
            tu_problem_verify(&p, queue, ev, label);
        else
            fprintf(stderr, "  %s: %s\n", label, flashcl_last_error(ctx));
        REQUIRE_CL(clFinish(queue));
        for (int i = 0; i < 3; i++) clReleaseEvent(writes[i]);
        if (ev) clReleaseEvent(ev);
    }
    tu_problem_free(&p);
    flashcl_context_destroy(ctx);
    check_app_objects_alive(cl_ctx, queue);
    clReleaseCommandQueue(queue);
    clReleaseContext(cl_ctx);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Nothing may run before the wait list completes; the returned event tracks the work. */
static void check_user_event_gate(flashcl_context *ctx) {
    cl_context cl_ctx = flashcl_context_cl_context(ctx);
    cl_int err;
    /* A second queue to look at O while the first one is held back. */
    cl_command_queue peek = clCreateCommandQueue(cl_ctx, flashcl_context_device(ctx), 0, &err);
    REQUIRE_CL(err);
    tu_shape shape = gqa_shape();
    tu_problem p;
    tu_problem_init(&p, cl_ctx, &shape);
    float *o = malloc(p.o.count * sizeof(float));
    REQUIRE(o != NULL);
    for (int path = 0; path < 2; path++) {
        char label[64];
        snprintf(label, sizeof label, "user-event gate [%s]", path_name((flashcl_path)path));
        tu_problem_reset_outputs(&p, flashcl_context_queue(ctx));
        cl_event gate = clCreateUserEvent(cl_ctx, &err);
        REQUIRE_CL(err);
        cl_event ev = NULL;
        if (!CHECK_STATUS(tu_problem_run(ctx, &p, (flashcl_path)path, 1, &gate, &ev), FLASHCL_SUCCESS) || !ev) {
            fprintf(stderr, "  %s: %s\n", label, flashcl_last_error(ctx));
            clSetUserEventStatus(gate, CL_COMPLETE);
            clReleaseEvent(gate);
            continue;
        }
        REQUIRE_CL(clFlush(flashcl_context_queue(ctx)));
        sleep_ms(200);
        cl_int state = CL_COMPLETE;
        REQUIRE_CL(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL));
        if (state <= CL_COMPLETE) {
            fprintf(stderr, "FAIL %s: work ran (status %d) before its wait list completed\n", label, (int)state);
            tu_fail_count();
        }
        tu_buffer_read(peek, p.o.view.buffer, p.o.count, o, NULL);
        tu_check_untouched(label, o, p.o.host, NULL, p.o.count);

        REQUIRE_CL(clSetUserEventStatus(gate, CL_COMPLETE));
        REQUIRE_CL(clWaitForEvents(1, &ev));
        REQUIRE_CL(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL));
        CHECK(state == CL_COMPLETE);
        /* Read on the peek queue: only the event orders it after FlashCL's work. */
        tu_problem_verify(&p, peek, ev, label);
        clReleaseEvent(ev);
        clReleaseEvent(gate);
    }
    free(o);
    tu_problem_free(&p);
    clReleaseCommandQueue(peek);
}

static void check_forward_host(flashcl_context *ctx) {
    /* Packed BSHD inputs at offset 0 with no padding are exactly the host layout. */
    tu_shape shape = tu_shape_make(2, 4, 1, 63, 129, 40, 1, TU_BSHD);
    tu_problem p;
    tu_problem_init(&p, flashcl_context_cl_context(ctx), &shape);
    size_t rows = p.ref.batch * p.ref.heads_q * p.ref.seqlen_q;
    size_t o_count = rows * p.ref.head_dim;
    float *o = malloc((o_count + TU_GUARD) * sizeof(float));
    float *lse = malloc((rows + TU_GUARD) * sizeof(float));
    float *o_init = malloc((o_count + TU_GUARD) * sizeof(float));
    float *lse_init = malloc((rows + TU_GUARD) * sizeof(float));
    REQUIRE(o && lse && o_init && lse_init);
    tu_fill_sentinel(o_init, o_count + TU_GUARD);
    tu_fill_sentinel(lse_init, rows + TU_GUARD);
    flashcl_tensor o_view = flashcl_tensor_bshd(NULL, p.ref.seqlen_q, p.ref.heads_q, p.ref.head_dim);
    unsigned char *mask = calloc(o_count + TU_GUARD, 1);
    REQUIRE(mask != NULL);
    memset(mask, 1, o_count);

    for (int path = 0; path < 2; path++) {
        for (int with_lse = 0; with_lse < 2; with_lse++) {
            char label[64];
            snprintf(label, sizeof label, "forward_host [%s]%s", path_name((flashcl_path)path),
                     with_lse ? "" : " without lse");
            memcpy(o, o_init, (o_count + TU_GUARD) * sizeof(float));
            memcpy(lse, lse_init, (rows + TU_GUARD) * sizeof(float));
            flashcl_attention_desc d = shape.desc;
            d.path = (flashcl_path)path;
            flashcl_status st = flashcl_forward_host(ctx, &d, p.q.host, p.k.host, p.v.host, o, with_lse ? lse : NULL);
            if (!CHECK_STATUS(st, FLASHCL_SUCCESS)) {
                fprintf(stderr, "  %s: %s\n", label, flashcl_last_error(ctx));
                continue;
            }
            tu_compare_o(label, &p.ref, o, &o_view, p.ref_o);
            tu_check_untouched(label, o, o_init, mask, o_count + TU_GUARD);
            if (with_lse) {
                tu_compare_lse(label, &p.ref, lse, p.ref_lse);
                tu_check_untouched(label, lse + rows, lse_init + rows, NULL, TU_GUARD);
            } else {
                tu_check_untouched(label, lse, lse_init, NULL, rows + TU_GUARD);
            }
        }
    }
    free(mask);
    free(o);
    free(lse);
    free(o_init);
    free(lse_init);
    tu_problem_free(&p);
}

static void check_plan(flashcl_context *ctx, flashcl_path path, size_t head_dim) {
    flashcl_plan plan;
    char label[64];
    if (!tu_query_plan(ctx, 0, path, 0, head_dim, &plan, label, sizeof label)) return;
    tu_check_plan_fields(ctx, &plan, "env tuned table formula fallback");
    if (path == FLASHCL_PATH_STANDARD) /* S and P: batch * heads_q * seqlen_q * seqlen_k floats at least. */
        CHECK(plan.scratch_bytes >= 2 * 4 * 100 * 300 * sizeof(float));
    tu_print_plan(label, &plan);
}

static void check_scratch(flashcl_context *ctx) {
    tu_shape shape = tu_shape_make(1, 2, 2, 130, 250, 16, 0, TU_BSHD);
    run_and_verify(ctx, &shape, FLASHCL_PATH_STANDARD, "scratch");
    CHECK(flashcl_context_scratch_bytes(ctx) >= 2 * 130 * 250 * sizeof(float));
}

/* Same inputs, same context: the flash forward must give the same bits. */
static void check_deterministic(flashcl_context *ctx) {
    tu_shape shape = tu_shape_make(1, 2, 2, 257, 1000, 64, 0, TU_BSHD);
    tu_problem p;
    tu_problem_init(&p, flashcl_context_cl_context(ctx), &shape);
    cl_command_queue queue = flashcl_context_queue(ctx);
    float *o[2], *lse[2];
    for (int run = 0; run < 2; run++) {
        tu_problem_reset_outputs(&p, queue);
        CHECK_STATUS(tu_problem_run(ctx, &p, FLASHCL_PATH_FLASH, 0, NULL, NULL), FLASHCL_SUCCESS);
        tu_problem_read(&p, queue, NULL, &o[run], &lse[run]);
    }
    CHECK(memcmp(o[0], o[1], p.o.count * sizeof(float)) == 0);
    CHECK(memcmp(lse[0], lse[1], p.lse_count * sizeof(float)) == 0);
    /* And the bits are right, not just repeatable. */
    tu_problem_verify(&p, queue, NULL, "determinism");
    for (int run = 0; run < 2; run++) {
        free(o[run]);
        free(lse[run]);
    }
    tu_problem_free(&p);
}

/* FLASHCL_PROFILING picks the profiling property of the queue flashcl_context_create makes: off by default
   and with 0 or another value, on (events carry times) with 1. */
static void check_queue_profiling(void) {
    const char *cases[4] = {NULL, "0", "1", "yes"};
    const cl_command_queue_properties want[4] = {0, 0, CL_QUEUE_PROFILING_ENABLE, 0};
    for (int i = 0; i < 4; ++i) {
        if (cases[i])
            setenv("FLASHCL_PROFILING", cases[i], 1);
        else
            unsetenv("FLASHCL_PROFILING");
        flashcl_context *ctx = tu_context_create();
        cl_command_queue_properties props = 0;
        CHECK(clGetCommandQueueInfo(flashcl_context_queue(ctx), CL_QUEUE_PROPERTIES, sizeof props, &props, NULL) ==
              CL_SUCCESS);
        if ((props & CL_QUEUE_PROFILING_ENABLE) != want[i]) {
            fprintf(stderr, "FLASHCL_PROFILING=%s: queue properties 0x%llx\n", cases[i] ? cases[i] : "(unset)",
                    (unsigned long long)props);
            tu_fail_count();
        }
        flashcl_context_destroy(ctx);
    }
    unsetenv("FLASHCL_PROFILING");
}

int main(void) {
    flashcl_context *ctx = tu_context_create();
    cl_device_id dev = flashcl_context_device(ctx);

    check_queue_profiling();
    check_from_queue(dev);
    check_out_of_order(dev);
    check_user_event_gate(ctx);
    check_forward_host(ctx);
    check_plan(ctx, FLASHCL_PATH_FLASH, 64);
    check_plan(ctx, FLASHCL_PATH_STANDARD, 64);
    check_plan(ctx, FLASHCL_PATH_FLASH, 40);
    check_scratch(ctx);
    check_deterministic(ctx);

    flashcl_context_destroy(ctx);
    return tu_finish("test_api");
}
