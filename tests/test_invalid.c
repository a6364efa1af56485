/*
 * Invalid arguments: each bad call must return its specific status, name the
 * offending field in flashcl_last_error, and write nothing (every buffer the
 * test owns is read back and compared bitwise). Both forward paths.
 */
#define _POSIX_C_SOURCE 200809L /* setenv/unsetenv for FLASHCL_DEVICE */

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Floats per test buffer: room for the head_dim = 257 views (8*2*257). */
#define CAP 8192
enum { BUF_Q, BUF_K, BUF_V, BUF_O, BUF_LSE, BUF_COUNT };

static struct {
    flashcl_context *ctx;
    cl_context cl;
    cl_command_queue queue;
    cl_mem buf[BUF_COUNT];
    float *host[BUF_COUNT];
} F;

typedef struct views {
    flashcl_tensor q, k, v, o;
} views;

static flashcl_attention_desc base_desc(void) { return tu_small_desc(1); }

/* Valid packed [b, s, h, d] views of the test buffers for desc's sizes. */
static views make_views(const flashcl_attention_desc *d) {
    size_t hkv = d->heads_kv ? d->heads_kv : d->heads_q;
    size_t sk = d->seqlen_k ? d->seqlen_k : d->seqlen_q;
    views w;
    w.q = flashcl_tensor_bshd(F.buf[BUF_Q], d->seqlen_q, d->heads_q, d->head_dim);
    w.k = flashcl_tensor_bshd(F.buf[BUF_K], sk, hkv, d->head_dim);
    w.v = flashcl_tensor_bshd(F.buf[BUF_V], sk, hkv, d->head_dim);
    w.o = flashcl_tensor_bshd(F.buf[BUF_O], d->seqlen_q, d->heads_q, d->head_dim);
    return w;
}

/* Every test buffer must still hold exactly what was uploaded. */
static void check_nothing_written(const char *label) {
    static float got[CAP];
    static const char *names[BUF_COUNT] = {"q", "k", "v", "o", "lse"};
    REQUIRE_CL(clFinish(F.queue));
    for (int i = 0; i < BUF_COUNT; i++) {
        char what[300]; /* label + ": buffer lse" */
        tu_buffer_read(F.queue, F.buf[i], CAP, got, NULL);
        snprintf(what, sizeof what, "%s: buffer %s", label, names[i]);
        tu_check_untouched(what, got, F.host[i], NULL, CAP);
    }
}

typedef struct bad_call {
    const char *what;
    flashcl_context *ctx;
    const flashcl_attention_desc *desc;
    const flashcl_tensor *q, *k, *v, *o;
    cl_mem lse;
    size_t lse_offset;
    cl_uint num_wait;
    const cl_event *wait;
} bad_call;

static bad_call make_call(const char *what, const flashcl_attention_desc *desc, const views *w) {
    bad_call c = {what, F.ctx, desc, &w->q, &w->k, &w->v, &w->o, F.buf[BUF_LSE], 0, 0, NULL};
    return c;
}

/*
 * Runs the call on both paths; `field` must appear in the message, and
 * `tensor` (when not NULL) must be named as a tensor.
 */
static void expect(bad_call c, int status, const char *field, const char *tensor) {
    for (int path = 0; path < 2; path++) {
        char label[256];
        snprintf(label, sizeof label, "%s [%s]", c.what, path ? "standard" : "flash");
        cl_event ev = NULL;
        flashcl_attention_desc d;
        if (c.desc) {
            d = *c.desc;
            d.path = (flashcl_path)path;
        }
        flashcl_status st = flashcl_forward(c.ctx, c.desc ? &d : NULL, c.q, c.k, c.v, c.o, c.lse, c.lse_offset,
                                            c.num_wait, c.wait, &ev);
        if (!CHECK_STATUS(st, status)) fprintf(stderr, "  in: %s\n", label);
        if (ev) {
            fprintf(stderr, "FAIL %s: a rejected call returned an event\n", label);
            tu_fail_count();
            clReleaseEvent(ev);
        }
        if (c.ctx) {
            const char *msg = flashcl_last_error(c.ctx);
            int named = msg && msg[0] && strstr(msg, field) && (!tensor || tu_names_tensor(msg, tensor));
            if (!named) {
                fprintf(stderr, "FAIL %s: message \"%s\" does not name \"%s\"%s%s\n", label, msg ? msg : "(null)",
                        field, tensor ? " / tensor " : "", tensor ? tensor : "");
                tu_fail_count();
            }
        } else {
            /* No context to hold a message; the call must still not crash it. */
            CHECK(flashcl_last_error(NULL) != NULL);
        }
        check_nothing_written(label);
    }
}

static void check_null_arguments(void) {
    flashcl_attention_desc d = base_desc();
    views w = make_views(&d);
    bad_call c = make_call("ctx NULL", &d, &w);
    c.ctx = NULL;
    expect(c, FLASHCL_ERR_INVALID_CONTEXT, "", NULL);

    c = make_call("desc NULL", NULL, &w);
    expect(c, FLASHCL_ERR_INVALID_ARGUMENT, "desc", NULL);

    static const char *names[4] = {"q", "k", "v", "o"};
    for (int i = 0; i < 4; i++) {
        char what[64];
        snprintf(what, sizeof what, "%s NULL", names[i]);
        c = make_call(what, &d, &w);
        const flashcl_tensor **slot[4] = {&c.q, &c.k, &c.v, &c.o};
        *slot[i] = NULL;
        expect(c, FLASHCL_ERR_INVALID_ARGUMENT, names[i], names[i]);
    }

    for (int i = 0; i < 4; i++) {
        char what[64], field[32];
        views bad = w;
        flashcl_tensor *t[4] = {&bad.q, &bad.k, &bad.v, &bad.o};
        t[i]->buffer = NULL;
        snprintf(what, sizeof what, "%s.buffer NULL", names[i]);
        snprintf(field, sizeof field, "%s.buffer", names[i]);
        expect(make_call(what, &d, &bad), FLASHCL_ERR_INVALID_BUFFER, field, NULL);
    }

    c = make_call("num_wait 1 with a NULL wait list", &d, &w);
    c.num_wait = 1;
    expect(c, FLASHCL_ERR_INVALID_ARGUMENT, "wait", NULL);
    /* Events the enqueue could not wait on: refused before anything is enqueued (POCL let them pass). */
    static const cl_event null_event[1] = {NULL};
    c = make_call("a NULL event in the wait list", &d, &w);
    c.num_wait = 1;
    c.wait = null_event;
    expect(c, FLASHCL_ERR_INVALID_ARGUMENT, "wait_list[0] is NULL", NULL);
    cl_int err;
    cl_device_id device;
    REQUIRE_CL(clGetCommandQueueInfo(F.queue, CL_QUEUE_DEVICE, sizeof device, &device, NULL));
    cl_context other = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    REQUIRE_CL(err);
    cl_event foreign[1] = {clCreateUserEvent(other, &err)};
    REQUIRE_CL(err);
    c = make_call("an event of another OpenCL context", &d, &w);
    c.num_wait = 1;
    c.wait = foreign;
    expect(c, FLASHCL_ERR_INVALID_ARGUMENT, "wait_list[0] belongs to another OpenCL context", NULL);
    clSetUserEventStatus(foreign[0], CL_COMPLETE);
    clReleaseEvent(foreign[0]);
    clReleaseContext(other);
}

static void expect_desc(flashcl_attention_desc d, const char *what, int status, const char *field) {
    views w = make_views(&d);
    expect(make_call(what, &d, &w), status, field, NULL);
}

static void check_desc_fields(void) {
    flashcl_attention_desc d = base_desc();
    d.batch = 0;
    expect_desc(d, "batch 0", FLASHCL_ERR_INVALID_SHAPE, "batch");
    d = base_desc();
    d.heads_q = 0;
    expect_desc(d, "heads_q 0", FLASHCL_ERR_INVALID_SHAPE, "heads_q");
    d = base_desc();
    d.seqlen_q = 0;
    expect_desc(d, "seqlen_q 0", FLASHCL_ERR_INVALID_SHAPE, "seqlen_q");

    d = base_desc();
    d.heads_q = 4;
    d.heads_kv = 3;
    expect_desc(d, "heads 4/3", FLASHCL_ERR_INVALID_HEADS, "heads_kv");
    d = base_desc();
    d.heads_kv = 4; /* more kv heads than query heads */
    expect_desc(d, "heads 2/4", FLASHCL_ERR_INVALID_HEADS, "heads_kv");

    d = base_desc();
    d.head_dim = 0;
    expect_desc(d, "head_dim 0", FLASHCL_ERR_INVALID_HEAD_DIM, "head_dim");
    d.head_dim = FLASHCL_MAX_HEAD_DIM + 1;
    expect_desc(d, "head_dim 257", FLASHCL_ERR_INVALID_HEAD_DIM, "head_dim");

    /* Beyond 2.35e38 scale * log2(e) overflows float32 in the kernels: every row would be NaN. */
    const float scales[] = {NAN, INFINITY, -INFINITY, 3e38f, -2.4e38f};
    for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++) {
        char what[64];
        d = base_desc();
        d.scale = scales[i];
        snprintf(what, sizeof what, "scale %g", (double)scales[i]);
        expect_desc(d, what, FLASHCL_ERR_INVALID_SCALE, "scale");
    }
    /* Any other scale is valid, a negative one too (test_edge_cases checks its results). */
    const float finite[] = {-1.0f, -1e-30f, 1e-30f, -2.35e38f, 2.35e38f};
    for (size_t i = 0; i < sizeof finite / sizeof finite[0]; i++) {
        flashcl_plan plan;
        d = base_desc();
        d.scale = finite[i];
        if (!CHECK_STATUS(flashcl_plan_query(F.ctx, &d, &plan), FLASHCL_SUCCESS))
            fprintf(stderr, "  scale %g refused: %s\n", (double)finite[i], flashcl_last_error(F.ctx));
    }

    d = base_desc();
    d.dtype = (flashcl_dtype)99;
    expect_desc(d, "dtype 99", FLASHCL_ERR_INVALID_DTYPE, "dtype");
    /* f16/bf16 are valid storage types now (tests/test_variants.c; the standard
       path's FLASHCL_ERR_UNSUPPORTED_DTYPE is in tests/test_invalid_variants.c). */

    /* struct_size: a descriptor only zeroed, or smaller than FlashCL 0.2's, is refused. */
    d = base_desc();
    d.struct_size = 0;
    expect_desc(d, "struct_size 0", FLASHCL_ERR_INVALID_STRUCT_SIZE, "struct_size");
    d.struct_size = offsetof(flashcl_attention_desc, path);
    expect_desc(d, "struct_size too small", FLASHCL_ERR_INVALID_STRUCT_SIZE, "struct_size");
}

/*
 * A caller built against a newer header passes a longer descriptor: fields the
 * library does not know are accepted when zero (the call runs) and refused with
 * FLASHCL_ERR_UNSUPPORTED_FIELD when set.
 */
static void check_newer_descriptor(void) {
    struct {
        flashcl_attention_desc d;
        uint64_t later_fields[4];
    } newer;
    memset(&newer, 0, sizeof newer);
    newer.d = base_desc();
    newer.d.struct_size = sizeof newer;
    views w = make_views(&newer.d);
    newer.later_fields[2] = 1;
    for (int path = 0; path < 2; path++) {
        newer.d.path = (flashcl_path)path;
        CHECK_STATUS(flashcl_forward(F.ctx, &newer.d, &w.q, &w.k, &w.v, &w.o, F.buf[BUF_LSE], 0, 0, NULL, NULL),
                     FLASHCL_ERR_UNSUPPORTED_FIELD);
        CHECK(strstr(flashcl_last_error(F.ctx), "desc") != NULL);
    }
    check_nothing_written("a descriptor field this version does not know");
    newer.later_fields[2] = 0;
    newer.d.path = FLASHCL_PATH_FLASH;
    CHECK_STATUS(flashcl_forward(F.ctx, &newer.d, &w.q, &w.k, &w.v, &w.o, F.buf[BUF_LSE], 0, 0, NULL, NULL),
                 FLASHCL_SUCCESS);
    /* That call wrote O and LSE: put the sentinels back for the checks that follow. */
    REQUIRE_CL(clFinish(F.queue));
    tu_buffer_write(F.queue, F.buf[BUF_O], CAP, F.host[BUF_O]);
    tu_buffer_write(F.queue, F.buf[BUF_LSE], CAP, F.host[BUF_LSE]);
}

/*
 * A caller built against the first 0.2.0 header: its descriptor ends with `path` (sizeof 352 on
 * LP64, before num_splits and allow_tf32). The call runs (copy_desc reads the later fields as zero).
 */
static void check_older_descriptor(void) {
    flashcl_attention_desc d = base_desc();
    const size_t align = sizeof(size_t);
    d.struct_size = (offsetof(flashcl_attention_desc, path) + sizeof(flashcl_path) + align - 1) / align * align;
    CHECK(d.struct_size < offsetof(flashcl_attention_desc, num_splits) + sizeof(size_t));
    views w = make_views(&d);
    CHECK_STATUS(flashcl_forward(F.ctx, &d, &w.q, &w.k, &w.v, &w.o, F.buf[BUF_LSE], 0, 0, NULL, NULL), FLASHCL_SUCCESS);
    REQUIRE_CL(clFinish(F.queue));
    tu_buffer_write(F.queue, F.buf[BUF_O], CAP, F.host[BUF_O]);
    tu_buffer_write(F.queue, F.buf[BUF_LSE], CAP, F.host[BUF_LSE]);
}

static void check_views(void) {
    flashcl_attention_desc d = base_desc();
    views w = make_views(&d), bad;

    bad = w;
    bad.q.offset = CAP - 10;
    expect(make_call("q.offset past the end", &d, &bad), FLASHCL_ERR_OUT_OF_BOUNDS, "q", "q");
    bad = w;
    bad.q.offset = SIZE_MAX - 8; /* offset + head_dim wraps around */
    expect(make_call("q.offset near SIZE_MAX", &d, &bad), FLASHCL_ERR_OUT_OF_BOUNDS, "q", "q");
    bad = w;
    /* 7 rows of this stride wrap to 5 elements: a check that multiplies
     * without overflow care would think the view fits. */
    bad.k.stride_row = SIZE_MAX / 7 + 1;
    expect(make_call("k.stride_row wraps", &d, &bad), FLASHCL_ERR_OUT_OF_BOUNDS, "k", "k");
    bad = w;
    bad.v.stride_row = CAP / 4;
    expect(make_call("v.stride_row overruns", &d, &bad), FLASHCL_ERR_OUT_OF_BOUNDS, "v", "v");
    bad = w;
    bad.o.offset = CAP;
    expect(make_call("o.offset at the end", &d, &bad), FLASHCL_ERR_OUT_OF_BOUNDS, "o", "o");

    flashcl_attention_desc d2 = base_desc();
    d2.batch = 2;
    bad = make_views(&d2);
    bad.k.stride_batch = CAP;
    expect(make_call("k.stride_batch overruns", &d2, &bad), FLASHCL_ERR_OUT_OF_BOUNDS, "k", "k");

    bad = w;
    bad.q.stride_row = d.head_dim - 1;
    expect(make_call("q.stride_row < head_dim", &d, &bad), FLASHCL_ERR_INVALID_STRIDE, "q.stride_row", NULL);
    bad = w;
    bad.o.stride_row = d.head_dim - 1;
    expect(make_call("o.stride_row < head_dim", &d, &bad), FLASHCL_ERR_INVALID_STRIDE, "o.stride_row", NULL);
    bad = w;
    bad.o.stride_head = 0; /* both query heads would write the same rows */
    expect(make_call("o heads overlap", &d, &bad), FLASHCL_ERR_INVALID_STRIDE, "o.stride", NULL);
}

static void check_lse(void) {
    flashcl_attention_desc d = base_desc();
    views w = make_views(&d);
    size_t rows = d.batch * d.heads_q * d.seqlen_q;

    cl_mem small = tu_buffer_create(F.cl, rows - 1, NULL);
    bad_call c = make_call("lse one float short", &d, &w);
    c.lse = small;
    expect(c, FLASHCL_ERR_OUT_OF_BOUNDS, "lse", NULL);
    clReleaseMemObject(small);

    c = make_call("lse_offset past the end", &d, &w);
    c.lse_offset = CAP - rows + 1;
    expect(c, FLASHCL_ERR_OUT_OF_BOUNDS, "lse", NULL);
    c.what = "lse_offset SIZE_MAX";
    c.lse_offset = SIZE_MAX;
    expect(c, FLASHCL_ERR_OUT_OF_BOUNDS, "lse", NULL);
}

static void check_aliasing(void) {
    flashcl_attention_desc d = base_desc();
    views w = make_views(&d), bad;

    bad = w;
    bad.o.buffer = F.buf[BUF_Q];
    expect(make_call("o == q", &d, &bad), FLASHCL_ERR_ALIASED_OUTPUT, "o", "o");
    bad = w;
    bad.o.buffer = F.buf[BUF_V];
    bad.o.offset = 100; /* v covers [0, 128): a partial overlap */
    expect(make_call("o overlaps the end of v", &d, &bad), FLASHCL_ERR_ALIASED_OUTPUT, "o", "v");
    bad_call c = make_call("lse inside o", &d, &w);
    c.lse = F.buf[BUF_O];
    c.lse_offset = 8;
    expect(c, FLASHCL_ERR_ALIASED_OUTPUT, "lse", "lse");
}

/* Buffers and queues of another cl_context on the same device. */
static void check_foreign_objects(void) {
    cl_device_id dev = flashcl_context_device(F.ctx);
    cl_int err;
    cl_context other = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    REQUIRE_CL(err);
    cl_command_queue other_queue = clCreateCommandQueue(other, dev, 0, &err);
    REQUIRE_CL(err);
    cl_mem foreign = tu_buffer_create(other, CAP, NULL);

    flashcl_attention_desc d = base_desc();
    views w = make_views(&d), bad = w;
    bad.k.buffer = foreign;
    expect(make_call("k.buffer from another cl_context", &d, &bad), FLASHCL_ERR_INVALID_BUFFER, "k.buffer", NULL);
    bad_call c = make_call("lse from another cl_context", &d, &w);
    c.lse = foreign;
    expect(c, FLASHCL_ERR_INVALID_BUFFER, "lse", NULL);

    CHECK_STATUS(flashcl_context_set_queue(F.ctx, other_queue), FLASHCL_ERR_INVALID_QUEUE);
    const char *msg = flashcl_last_error(F.ctx);
    CHECK(msg[0] != '\0' && strstr(msg, "queue") != NULL);
    /* The rejected queue must not have been adopted. */
    CHECK(flashcl_context_queue(F.ctx) == F.queue);

    clReleaseMemObject(foreign);
    clReleaseCommandQueue(other_queue);
    clReleaseContext(other);
}

static void check_other_entry_points(void) {
    flashcl_attention_desc d = base_desc();
    flashcl_plan plan;
    flashcl_attention_desc bad_path = d;
    bad_path.path = (flashcl_path)7;
    CHECK_STATUS(flashcl_plan_query(F.ctx, &bad_path, &plan), FLASHCL_ERR_INVALID_PATH);
    CHECK(strstr(flashcl_last_error(F.ctx), "path") != NULL);
    CHECK_STATUS(flashcl_plan_query(F.ctx, NULL, &plan), FLASHCL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(flashcl_plan_query(F.ctx, &d, NULL), FLASHCL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(flashcl_plan_query(NULL, &d, &plan), FLASHCL_ERR_INVALID_CONTEXT);
    /* The standard path's S/P of 2^20 x 2^20 floats (4 TiB) cannot be one buffer: the plan queries
       refuse it as the calls would, naming the scratch, rather than plan a call that cannot run. */
    flashcl_attention_desc huge = d;
    huge.path = FLASHCL_PATH_STANDARD;
    huge.seqlen_q = huge.seqlen_k = (size_t)1 << 20;
    CHECK_STATUS(flashcl_plan_query(F.ctx, &huge, &plan), FLASHCL_ERR_OUT_OF_DEVICE_MEMORY);
    CHECK(strstr(flashcl_last_error(F.ctx), "S/P") != NULL);
    CHECK_STATUS(flashcl_backward_plan_query(F.ctx, &huge, &plan), FLASHCL_ERR_OUT_OF_DEVICE_MEMORY);
    CHECK(strstr(flashcl_last_error(F.ctx), "standard backward: P") != NULL);
    /* ... and the backward's per-head dV of batch*heads_q*seqlen_k*head_dim floats, larger than P
       when head_dim > seqlen_q (here 144 GiB against P's 256 MiB). */
    flashcl_attention_desc wide = d;
    wide.path = FLASHCL_PATH_STANDARD;
    wide.seqlen_q = 1;
    wide.seqlen_k = (size_t)1 << 25;
    wide.head_dim = wide.head_dim_v = 576;
    CHECK_STATUS(flashcl_backward_plan_query(F.ctx, &wide, &plan), FLASHCL_ERR_OUT_OF_DEVICE_MEMORY);
    CHECK(strstr(flashcl_last_error(F.ctx), "per-head dV") != NULL);
    flashcl_attention_desc bad = d;
    bad.head_dim = 0;
    CHECK_STATUS(flashcl_plan_query(F.ctx, &bad, &plan), FLASHCL_ERR_INVALID_HEAD_DIM);
    CHECK(strstr(flashcl_last_error(F.ctx), "head_dim") != NULL);
    /* The standard path's plans refuse what its calls refuse: 16-bit storage, variants. */
    flashcl_attention_desc std16 = d;
    std16.path = FLASHCL_PATH_STANDARD;
    std16.dtype = FLASHCL_DTYPE_F16;
    CHECK_STATUS(flashcl_plan_query(F.ctx, &std16, &plan), FLASHCL_ERR_UNSUPPORTED_DTYPE);
    CHECK_STATUS(flashcl_backward_plan_query(F.ctx, &std16, &plan), FLASHCL_ERR_UNSUPPORTED_DTYPE);
    flashcl_attention_desc std_cap = d;
    std_cap.path = FLASHCL_PATH_STANDARD;
    std_cap.softcap = 5.0f;
    CHECK_STATUS(flashcl_plan_query(F.ctx, &std_cap, &plan), FLASHCL_ERR_UNSUPPORTED_VARIANT);
    CHECK(strstr(flashcl_last_error(F.ctx), "softcap") != NULL);
    std_cap.softcap = 0.0f;
    CHECK_STATUS(flashcl_plan_query(F.ctx, &std_cap, &plan), FLASHCL_SUCCESS);

    /* flashcl_tuning_query: the refusal is named in the context's message (not the stale one
       of the call before), struct_size unset is its own status, and a success clears the message. */
    flashcl_tuning_info info;
    memset(&info, 0, sizeof info);
    CHECK_STATUS(flashcl_plan_query(F.ctx, &bad, &plan), FLASHCL_ERR_INVALID_HEAD_DIM);
    CHECK_STATUS(flashcl_tuning_query(F.ctx, NULL), FLASHCL_ERR_INVALID_ARGUMENT);
    CHECK(strstr(flashcl_last_error(F.ctx), "out is NULL") != NULL);
    CHECK_STATUS(flashcl_tuning_query(F.ctx, &info), FLASHCL_ERR_INVALID_STRUCT_SIZE);
    CHECK(strstr(flashcl_last_error(F.ctx), "out->struct_size (0)") != NULL);
    info.struct_size = sizeof info + 1;
    CHECK_STATUS(flashcl_tuning_query(F.ctx, &info), FLASHCL_ERR_INVALID_STRUCT_SIZE);
    info.struct_size = sizeof info;
    CHECK_STATUS(flashcl_tuning_query(F.ctx, &info), FLASHCL_SUCCESS);
    CHECK(flashcl_last_error(F.ctx)[0] == '\0');

    float host[256] = {0};
    CHECK_STATUS(flashcl_forward_host(F.ctx, &d, NULL, host, host, host, NULL), FLASHCL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(flashcl_forward_host(F.ctx, &bad_path, host, host, host, host, NULL), FLASHCL_ERR_INVALID_PATH);
}

static void check_context_create(void) {
    /* Indices that wrap (a sign, a value above UINT_MAX) are no index: "4294967296:0" picked platform 0. */
    static const char *specs[] = {"no-such-device-xyzzy", "99:99",        "0:99",
                                  "4294967296:0",         "0:4294967296", "-4294967295:0"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        flashcl_context *out = (flashcl_context *)&F; /* must be reset to NULL */
        char err[256] = "";
        CHECK_STATUS(flashcl_context_create(&out, specs[i], err, sizeof err), FLASHCL_ERR_INVALID_DEVICE_SPEC);
        CHECK(out == NULL);
        if (err[0] == '\0') {
            fprintf(stderr, "FAIL device spec \"%s\": err_buf is empty\n", specs[i]);
            tu_fail_count();
        }
    }
    /* A short err_buf is truncated, never overrun; a NULL one is allowed. */
    char small[16];
    memset(small, 'X', sizeof small);
    flashcl_context *out = NULL;
    CHECK_STATUS(flashcl_context_create(&out, specs[0], small, 8), FLASHCL_ERR_INVALID_DEVICE_SPEC);
    CHECK(memchr(small, '\0', 8) != NULL);
    for (size_t i = 8; i < sizeof small; i++) CHECK(small[i] == 'X');
    CHECK_STATUS(flashcl_context_create(&out, specs[0], NULL, 0), FLASHCL_ERR_INVALID_DEVICE_SPEC);
    CHECK(out == NULL);
    CHECK_STATUS(flashcl_context_create(NULL, NULL, NULL, 0), FLASHCL_ERR_INVALID_ARGUMENT);

    /* With no spec, FLASHCL_DEVICE is the spec. */
    const char *saved = getenv("FLASHCL_DEVICE");
    char *copy = saved ? strdup(saved) : NULL;
    setenv("FLASHCL_DEVICE", specs[0], 1);
    CHECK_STATUS(flashcl_context_create(&out, NULL, NULL, 0), FLASHCL_ERR_INVALID_DEVICE_SPEC);
    CHECK(out == NULL);
    /* and the message says the spec came from there (it read as a spec the caller had given) */
    char why[512] = "";
    CHECK_STATUS(flashcl_context_create(&out, "", why, sizeof why), FLASHCL_ERR_INVALID_DEVICE_SPEC);
    CHECK(strstr(why, "(the spec is $FLASHCL_DEVICE's)") != NULL);
    CHECK_STATUS(flashcl_context_create(&out, specs[0], why, sizeof why), FLASHCL_ERR_INVALID_DEVICE_SPEC);
    CHECK(strstr(why, "FLASHCL_DEVICE") == NULL);
    if (copy)
        setenv("FLASHCL_DEVICE", copy, 1);
    else
        unsetenv("FLASHCL_DEVICE");
    free(copy);

    flashcl_context_destroy(NULL); /* documented no-op */

    /* A spec naming the platform's vendor finds a device of that vendor's platform (POCL's name,
       "Portable Computing Language", does not say pocl; its vendor does). */
    cl_platform_id platform = NULL;
    char vendor[256] = "", got[256] = "";
    REQUIRE_CL(clGetDeviceInfo(flashcl_context_device(F.ctx), CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL));
    REQUIRE_CL(clGetPlatformInfo(platform, CL_PLATFORM_VENDOR, sizeof vendor - 1, vendor, NULL));
    CHECK_STATUS(flashcl_context_create(&out, vendor, NULL, 0), FLASHCL_SUCCESS);
    if (out) {
        REQUIRE_CL(clGetDeviceInfo(flashcl_context_device(out), CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL));
        REQUIRE_CL(clGetPlatformInfo(platform, CL_PLATFORM_VENDOR, sizeof got - 1, got, NULL));
        CHECK(strcmp(got, vendor) == 0);
        flashcl_context_destroy(out);
    }
}

/* After all the rejections the context still works and its message clears. */
static void check_still_usable(void) {
    flashcl_attention_desc d = base_desc();
    views w = make_views(&d);
    for (int path = 0; path < 2; path++) {
        d.path = (flashcl_path)path;
        flashcl_status st = flashcl_forward(F.ctx, &d, &w.q, &w.k, &w.v, &w.o, F.buf[BUF_LSE], 0, 0, NULL, NULL);
        CHECK_STATUS(st, FLASHCL_SUCCESS);
        CHECK(flashcl_last_error(F.ctx)[0] == '\0');
    }
    REQUIRE_CL(clFinish(F.queue));
    float o[CAP];
    tu_buffer_read(F.queue, F.buf[BUF_O], CAP, o, NULL);
    /* 8 rows x 2 heads x 16 dims were written; the sentinel after them was not. */
    CHECK(!isnan(o[0]) && !isnan(o[8 * 2 * 16 - 1]));
    CHECK(memcmp(&o[8 * 2 * 16], &F.host[BUF_O][8 * 2 * 16], sizeof(float)) == 0);

    /* Sharing without overlap stays legal: the LSE right after O's view, in O's buffer. */
    d = base_desc();
    CHECK_STATUS(flashcl_forward(F.ctx, &d, &w.q, &w.k, &w.v, &w.o, F.buf[BUF_O], 8 * 2 * 16, 0, NULL, NULL),
                 FLASHCL_SUCCESS);
    tu_buffer_read(F.queue, F.buf[BUF_O], CAP, o, NULL);
    for (int i = 0; i < 2 * 8; ++i) CHECK(isfinite(o[8 * 2 * 16 + i])); /* the LSE: [1, 2, 8] */
    tu_buffer_write(F.queue, F.buf[BUF_O], CAP, F.host[BUF_O]);
}

int main(void) {
    F.ctx = tu_context_create();
    F.cl = flashcl_context_cl_context(F.ctx);
    F.queue = flashcl_context_queue(F.ctx);
    tu_buffers_create(F.cl, BUF_COUNT, CAP, 1u << BUF_O | 1u << BUF_LSE, 7, F.buf, F.host);

    check_null_arguments();
    check_desc_fields();
    check_newer_descriptor();
    check_older_descriptor();
    check_views();
    check_lse();
    check_aliasing();
    check_foreign_objects();
    check_other_entry_points();
    check_context_create();
    check_still_usable();

    tu_buffers_release(BUF_COUNT, F.buf, F.host);
    flashcl_context_destroy(F.ctx);
    return tu_finish("test_invalid");
}
