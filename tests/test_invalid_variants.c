/*
 * Invalid variant fields: each bad call (flashcl_forward, flashcl_backward,
 * flashcl_dropout_mask) must return its specific status, name the offending
 * field in flashcl_last_error, return no event and write nothing (the output
 * buffers are read back and compared bitwise). Also: the standard path
 * refuses every variant, and no call here needs a kernel build.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Floats per test buffer: room for every view below. */
#define CAP 4096
enum { BUF_Q, BUF_K, BUF_V, BUF_O, BUF_LSE, BUF_DOUT, BUF_DQ, BUF_DK, BUF_DV, BUF_COUNT };
/* Outputs, which no rejected call may touch. */
static const int outputs[] = {BUF_O, BUF_LSE, BUF_DQ, BUF_DK, BUF_DV};

static struct {
    flashcl_context *ctx;
    cl_context cl;
    cl_command_queue queue;
    cl_mem buf[BUF_COUNT];
    float *host[BUF_COUNT];
    cl_mem small; /* 2 floats: too small for any [b, h, sq, sk] matrix or [heads_q] vector */
    cl_mem big;   /* CAP floats of zeros (valid matrices, slopes, sinks, cu_seqlens) */
    cl_mem keep;  /* the dropout mask output, sentinel-filled */
} F;

static flashcl_attention_desc base_desc(void) { return tu_small_desc(2); }

typedef struct views {
    flashcl_tensor q, k, v, o, dout, dq, dk, dv;
} views;

static views make_views(const flashcl_attention_desc *d) {
    size_t dv = d->head_dim_v && d->head_dim_v <= 64 ? d->head_dim_v : d->head_dim;
    views w;
    w.q = flashcl_tensor_bshd(F.buf[BUF_Q], d->seqlen_q, d->heads_q, d->head_dim);
    w.k = flashcl_tensor_bshd(F.buf[BUF_K], d->seqlen_k, d->heads_kv, d->head_dim);
    w.v = flashcl_tensor_bshd(F.buf[BUF_V], d->seqlen_k, d->heads_kv, dv);
    w.o = flashcl_tensor_bshd(F.buf[BUF_O], d->seqlen_q, d->heads_q, dv);
    w.dout = flashcl_tensor_bshd(F.buf[BUF_DOUT], d->seqlen_q, d->heads_q, dv);
    w.dq = flashcl_tensor_bshd(F.buf[BUF_DQ], d->seqlen_q, d->heads_q, d->head_dim);
    w.dk = flashcl_tensor_bshd(F.buf[BUF_DK], d->seqlen_k, d->heads_kv, d->head_dim);
    w.dv = flashcl_tensor_bshd(F.buf[BUF_DV], d->seqlen_k, d->heads_kv, dv);
    if (d->cu_seqlens_q || d->cu_seqlens_k) {
        /* Varlen views are [total, h, d]: no batch stride. */
        flashcl_tensor *all[8] = {&w.q, &w.k, &w.v, &w.o, &w.dout, &w.dq, &w.dk, &w.dv};
        for (int i = 0; i < 8; i++) all[i]->stride_batch = 0;
    }
    return w;
}

static void check_nothing_written(const char *label) {
    static float got[CAP];
    static const char *names[BUF_COUNT] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"};
    REQUIRE_CL(clFinish(F.queue));
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++) {
        char what[300];
        tu_buffer_read(F.queue, F.buf[outputs[i]], CAP, got, NULL);
        snprintf(what, sizeof what, "%s: buffer %s", label, names[outputs[i]]);
        tu_check_untouched(what, got, F.host[outputs[i]], NULL, CAP);
    }
}

typedef enum call_kind { CALL_FORWARD, CALL_BACKWARD, CALL_DROPOUT_MASK } call_kind;

static const char *kind_name(call_kind k) {
    return k == CALL_FORWARD ? "forward" : k == CALL_BACKWARD ? "backward" : "dropout_mask";
}

/* Runs one call; the status must match and the message must name `field`. */
static void expect_call(call_kind kind, const char *what, const flashcl_attention_desc *d, const views *w,
                        cl_mem mask_out, int status, const char *field) {
    char label[256];
    snprintf(label, sizeof label, "%s [%s]", what, kind_name(kind));
    cl_event ev = NULL;
    flashcl_status st;
    if (kind == CALL_FORWARD)
        st = flashcl_forward(F.ctx, d, &w->q, &w->k, &w->v, &w->o, F.buf[BUF_LSE], 0, 0, NULL, &ev);
    else if (kind == CALL_BACKWARD)
        st = flashcl_backward(F.ctx, d, &w->q, &w->k, &w->v, &w->o, &w->dout, F.buf[BUF_LSE], 0, &w->dq, &w->dk, &w->dv,
                              0, NULL, &ev);
    else
        st = flashcl_dropout_mask(F.ctx, d, mask_out, 0, 0, NULL, &ev);
    if (!CHECK_STATUS(st, status)) fprintf(stderr, "  in: %s (message: %s)\n", label, flashcl_last_error(F.ctx));
    if (ev) {
        fprintf(stderr, "FAIL %s: a rejected call returned an event\n", label);
        tu_fail_count();
        clReleaseEvent(ev);
    }
    const char *msg = flashcl_last_error(F.ctx);
    if (!msg || !strstr(msg, field)) {
        fprintf(stderr, "FAIL %s: message \"%s\" does not name \"%s\"\n", label, msg ? msg : "(null)", field);
        tu_fail_count();
    }
    check_nothing_written(label);
}

/* Forward and backward both refuse it the same way. */
static void expect_both(const char *what, const flashcl_attention_desc *d, int status, const char *field) {
    views w = make_views(d);
    expect_call(CALL_FORWARD, what, d, &w, NULL, status, field);
    expect_call(CALL_BACKWARD, what, d, &w, NULL, status, field);
}

static void scalar_fields(void) {
    flashcl_attention_desc d = base_desc();
    d.window = 1, d.window_left = -2, d.window_right = 3;
    expect_both("window_left = -2", &d, FLASHCL_ERR_INVALID_VARIANT, "window_left");
    d.window_left = 4, d.window_right = -7;
    expect_both("window_right = -7", &d, FLASHCL_ERR_INVALID_VARIANT, "window_right");

    const float caps[3] = {-1.0f, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        d = base_desc();
        d.softcap = caps[i];
        char what[64];
        snprintf(what, sizeof what, "softcap = %g", (double)caps[i]);
        expect_both(what, &d, FLASHCL_ERR_INVALID_VARIANT, "softcap");
    }
    const float ps[4] = {1.0f, 1.5f, -0.25f, NAN};
    for (int i = 0; i < 4; i++) {
        d = base_desc();
        d.dropout_p = ps[i];
        char what[64];
        snprintf(what, sizeof what, "dropout_p = %g", (double)ps[i]);
        expect_both(what, &d, FLASHCL_ERR_INVALID_VARIANT, "dropout_p");
        views w = make_views(&d);
        expect_call(CALL_DROPOUT_MASK, what, &d, &w, F.keep, FLASHCL_ERR_INVALID_VARIANT, "dropout_p");
    }

    d = base_desc();
    d.head_dim_v = FLASHCL_MAX_HEAD_DIM + 1;
    expect_both("head_dim_v too large", &d, FLASHCL_ERR_INVALID_HEAD_DIM, "head_dim_v");
    d = base_desc();
    d.dtype = (flashcl_dtype)9;
    expect_both("dtype = 9", &d, FLASHCL_ERR_INVALID_DTYPE, "dtype");
}

static void matrices(void) {
    flashcl_attention_desc d = base_desc();
    d.block_mask.buffer = F.big;
    d.block_q = 0, d.block_k = 4;
    expect_both("block_mask without block_q", &d, FLASHCL_ERR_INVALID_VARIANT, "block_q");
    d.block_q = 4, d.block_k = 0;
    expect_both("block_mask without block_k", &d, FLASHCL_ERR_INVALID_VARIANT, "block_k");

    /* Packed [b, h, sq, sk] = 256 floats in a 2-float buffer. */
    d = base_desc();
    d.bias.buffer = F.small;
    expect_both("bias out of bounds (packed)", &d, FLASHCL_ERR_OUT_OF_BOUNDS, "bias");
    /* Broadcast [1, 1, sq, sk] still needs 64 elements; an offset pushes a valid one out. */
    d.bias.buffer = F.big;
    d.bias.stride_row = 8;
    d.bias.offset = CAP - 63;
    expect_both("bias out of bounds (offset)", &d, FLASHCL_ERR_OUT_OF_BOUNDS, "bias");

    d = base_desc();
    d.mask.buffer = F.small;
    d.mask.stride_row = 8;
    expect_both("mask out of bounds", &d, FLASHCL_ERR_OUT_OF_BOUNDS, "mask");

    d = base_desc();
    d.block_mask.buffer = F.small;
    d.block_q = 2, d.block_k = 2; /* [2, 2, 4, 4] bytes = 64 > 8 */
    expect_both("block_mask out of bounds", &d, FLASHCL_ERR_OUT_OF_BOUNDS, "block_mask");

    d = base_desc();
    d.alibi_slopes = F.small;
    d.alibi_offset = 1; /* [heads_q] = 2 floats from offset 1 */
    expect_both("alibi_slopes out of bounds", &d, FLASHCL_ERR_OUT_OF_BOUNDS, "alibi_slopes");
    d.alibi_offset = 0;
    d.alibi_stride_batch = 2; /* [batch, heads_q] = 4 floats */
    expect_both("alibi_slopes [b, h] out of bounds", &d, FLASHCL_ERR_OUT_OF_BOUNDS, "alibi_slopes");

    d = base_desc();
    d.heads_q = 4, d.heads_kv = 2;
    d.sinks = F.small;
    expect_both("sinks out of bounds", &d, FLASHCL_ERR_OUT_OF_BOUNDS, "sinks");
}

static void backward_only(void) {
    flashcl_attention_desc d = base_desc();
    views w = make_views(&d);
    d.dsinks = F.big;
    expect_call(CALL_BACKWARD, "dsinks without sinks", &d, &w, NULL, FLASHCL_ERR_INVALID_VARIANT, "dsinks");
    d.sinks = F.big;
    d.dsinks = F.small;
    d.dsinks_offset = 1;
    expect_call(CALL_BACKWARD, "dsinks out of bounds", &d, &w, NULL, FLASHCL_ERR_OUT_OF_BOUNDS, "dsinks");
    d.dsinks = F.big;
    d.dsinks_offset = 1; /* [1, 3) overlaps sinks' [0, 2) */
    expect_call(CALL_BACKWARD, "dsinks overlaps sinks", &d, &w, NULL, FLASHCL_ERR_ALIASED_OUTPUT, "dsinks");
}

/* A variant array inside an output's memory, and buffers whose access flags forbid what the
   call does with them. */
static void overlaps_and_access(void) {
    flashcl_attention_desc d = base_desc();
    views w = make_views(&d);
    d.sinks = F.buf[BUF_O];
    expect_call(CALL_FORWARD, "sinks inside o", &d, &w, NULL, FLASHCL_ERR_ALIASED_OUTPUT, "sinks");
    d = base_desc();
    d.bias.buffer = F.buf[BUF_LSE];
    d.bias.stride_row = 8; /* [1, 1, 8, 8] over the LSE's 32 floats */
    expect_call(CALL_FORWARD, "bias over lse", &d, &w, NULL, FLASHCL_ERR_ALIASED_OUTPUT, "bias");
    d = base_desc();
    d.alibi_slopes = F.buf[BUF_DK];
    expect_call(CALL_BACKWARD, "alibi_slopes inside dk", &d, &w, NULL, FLASHCL_ERR_ALIASED_OUTPUT, "alibi_slopes");
    /* dsinks in a sub-buffer inside dq's view (compared through the parent buffer). */
    cl_uint align_bits = 0;
    REQUIRE_CL(clGetDeviceInfo(flashcl_context_device(F.ctx), CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits,
                               &align_bits, NULL));
    const size_t at = align_bits / 8; /* dq's view is 2 * 8 * 2 * 16 floats = 2048 bytes */
    if (at > 0 && at + 64 <= 2048) {
        cl_buffer_region region = {at, 64};
        cl_int err;
        cl_mem inside = clCreateSubBuffer(F.buf[BUF_DQ], 0, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
        REQUIRE_CL(err);
        d = base_desc();
        d.sinks = F.big;
        d.dsinks = inside;
        expect_call(CALL_BACKWARD, "dsinks in a sub-buffer inside dq", &d, &w, NULL, FLASHCL_ERR_ALIASED_OUTPUT,
                    "dsinks");
        clReleaseMemObject(inside);
    }
    /* Writing a CL_MEM_READ_ONLY buffer or reading a CL_MEM_WRITE_ONLY one is undefined in OpenCL. */
    d = base_desc();
    cl_int err;
    cl_mem read_only = clCreateBuffer(F.cl, CL_MEM_READ_ONLY, CAP * sizeof(float), NULL, &err);
    REQUIRE_CL(err);
    cl_mem write_only = clCreateBuffer(F.cl, CL_MEM_WRITE_ONLY, CAP * sizeof(float), NULL, &err);
    REQUIRE_CL(err);
    views ro = w;
    ro.o.buffer = read_only;
    expect_call(CALL_FORWARD, "o in a read-only buffer", &d, &ro, NULL, FLASHCL_ERR_INVALID_BUFFER, "CL_MEM_READ_ONLY");
    views wo = w;
    wo.q.buffer = write_only;
    expect_call(CALL_FORWARD, "q in a write-only buffer", &d, &wo, NULL, FLASHCL_ERR_INVALID_BUFFER,
                "CL_MEM_WRITE_ONLY");
    d.sinks = write_only;
    expect_call(CALL_FORWARD, "sinks in a write-only buffer", &d, &w, NULL, FLASHCL_ERR_INVALID_BUFFER, "sinks");
    clReleaseMemObject(read_only);
    clReleaseMemObject(write_only);
}

static void varlen(void) {
    /* Two sequences packed into 8 query and 8 key rows. */
    flashcl_attention_desc d = base_desc();
    d.cu_seqlens_q = F.big;
    expect_both("cu_seqlens_k missing", &d, FLASHCL_ERR_INVALID_VARIANT, "cu_seqlens_k");
    d.cu_seqlens_k = F.small; /* needs batch + 1 = 3 int32 */
    expect_both("cu_seqlens_k too small", &d, FLASHCL_ERR_OUT_OF_BOUNDS, "cu_seqlens_k");
    d.cu_seqlens_k = F.big;
    d.cu_seqlens_q = F.small;
    expect_both("cu_seqlens_q too small", &d, FLASHCL_ERR_OUT_OF_BOUNDS, "cu_seqlens_q");
    d.cu_seqlens_q = F.big;
    d.max_seqlen_q = 9;
    expect_both("max_seqlen_q above the total", &d, FLASHCL_ERR_INVALID_VARIANT, "max_seqlen_q");
    d.max_seqlen_q = 0;
    {
        /* With a mask, a sequence longer than max_seqlen_q/k would be read past the mask's rows or
           columns: the library reads the offsets back and refuses it. */
        const cl_int cu_host[3] = {0, 7, 8};
        cl_int err;
        cl_mem cu =
            clCreateBuffer(F.cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof cu_host, (void *)cu_host, &err);
        REQUIRE_CL(err);
        flashcl_attention_desc m = d;
        m.cu_seqlens_q = m.cu_seqlens_k = cu;
        m.mask.buffer = F.big;
        m.max_seqlen_q = 4;
        m.max_seqlen_k = 8;
        expect_both("varlen mask, a sequence above max_seqlen_q", &m, FLASHCL_ERR_INVALID_VARIANT, "cu_seqlens_q");
        m.max_seqlen_q = 8;
        m.max_seqlen_k = 6;
        expect_both("varlen mask, a sequence above max_seqlen_k", &m, FLASHCL_ERR_INVALID_VARIANT, "cu_seqlens_k");
        /* The host-array entry point takes the same check (and writes nothing). */
        static float hq[8 * 2 * 16], hk[8 * 16], ho[8 * 2 * 16];
        for (size_t i = 0; i < sizeof ho / sizeof ho[0]; ++i) ho[i] = -7.0f;
        if (!CHECK_STATUS(flashcl_forward_host(F.ctx, &m, hq, hk, hk, ho, NULL), FLASHCL_ERR_INVALID_VARIANT) ||
            !strstr(flashcl_last_error(F.ctx), "cu_seqlens_k"))
            fprintf(stderr, "  in: forward_host, varlen mask above max_seqlen_k (%s)\n", flashcl_last_error(F.ctx));
        for (size_t i = 0; i < sizeof ho / sizeof ho[0]; ++i) CHECK(ho[i] == -7.0f);
        clReleaseMemObject(cu);
    }
    /* Varlen views are [total, h, d]: a batch stride is refused. */
    views w = make_views(&d);
    w.q.stride_batch = 8 * 2 * 16;
    expect_call(CALL_FORWARD, "varlen q with stride_batch", &d, &w, NULL, FLASHCL_ERR_INVALID_STRIDE, "q.stride_batch");
    expect_call(CALL_BACKWARD, "varlen q with stride_batch", &d, &w, NULL, FLASHCL_ERR_INVALID_STRIDE,
                "q.stride_batch");
}

static void storage_size(void) {
    /* A q buffer holding exactly the f16 view is too small for float32. */
    flashcl_attention_desc d = base_desc();
    size_t nq = d.batch * d.seqlen_q * d.heads_q * d.head_dim;
    cl_int err;
    cl_mem half_q = clCreateBuffer(F.cl, CL_MEM_READ_WRITE, nq * 2, NULL, &err);
    REQUIRE_CL(err);
    views w = make_views(&d);
    w.q.buffer = half_q;
    expect_call(CALL_FORWARD, "f32 q in an f16-sized buffer", &d, &w, NULL, FLASHCL_ERR_OUT_OF_BOUNDS, "q");
    clReleaseMemObject(half_q);
}

static void dropout_mask_buffers(void) {
    flashcl_attention_desc d = base_desc();
    d.dropout_p = 0.5f;
    views w = make_views(&d);
    /* [b, h, sq, sk] = 256 bytes; the small buffer has 8. */
    expect_call(CALL_DROPOUT_MASK, "mask output too small", &d, &w, F.small, FLASHCL_ERR_OUT_OF_BOUNDS, "out");
    expect_call(CALL_DROPOUT_MASK, "mask output NULL", &d, &w, NULL, FLASHCL_ERR_INVALID_BUFFER, "out");
    /* Over the offsets the kernel reads (varlen). */
    d.cu_seqlens_q = d.cu_seqlens_k = F.big;
    expect_call(CALL_DROPOUT_MASK, "mask output over cu_seqlens", &d, &w, F.big, FLASHCL_ERR_ALIASED_OUTPUT,
                "cu_seqlens_q");
}

/* The standard path is the plain baseline: it refuses every variant (and f16/bf16). */
static void standard_refuses(void) {
    flashcl_attention_desc d = base_desc();
    d.path = FLASHCL_PATH_STANDARD;
    d.softcap = 2.0f;
    views w = make_views(&d);
    cl_event ev = NULL;
    CHECK_STATUS(flashcl_forward(F.ctx, &d, &w.q, &w.k, &w.v, &w.o, F.buf[BUF_LSE], 0, 0, NULL, &ev),
                 FLASHCL_ERR_UNSUPPORTED_VARIANT);
    CHECK(ev == NULL && strstr(flashcl_last_error(F.ctx), "softcap") != NULL);
    /* float32 storage is what the standard path runs: not named among what it lacks. */
    CHECK(strstr(flashcl_last_error(F.ctx), "f32") == NULL);
    CHECK(strstr(flashcl_last_error(F.ctx), "this call uses: softcap") != NULL);
    d.dtype = FLASHCL_DTYPE_F16; /* with a variant, a 16-bit storage type is one more thing it lacks */
    CHECK_STATUS(flashcl_forward(F.ctx, &d, &w.q, &w.k, &w.v, &w.o, F.buf[BUF_LSE], 0, 0, NULL, &ev),
                 FLASHCL_ERR_UNSUPPORTED_VARIANT);
    CHECK(ev == NULL && strstr(flashcl_last_error(F.ctx), "this call uses: f16 storage, softcap") != NULL);
    d = base_desc();
    d.path = FLASHCL_PATH_STANDARD;
    d.window = 1, d.window_left = 2, d.window_right = 0;
    CHECK_STATUS(flashcl_backward(F.ctx, &d, &w.q, &w.k, &w.v, &w.o, &w.dout, F.buf[BUF_LSE], 0, &w.dq, &w.dk, &w.dv, 0,
                                  NULL, &ev),
                 FLASHCL_ERR_UNSUPPORTED_VARIANT);
    CHECK(ev == NULL && strstr(flashcl_last_error(F.ctx), "window") != NULL);
    d = base_desc();
    d.path = FLASHCL_PATH_STANDARD;
    d.dtype = FLASHCL_DTYPE_BF16;
    CHECK_STATUS(flashcl_forward(F.ctx, &d, &w.q, &w.k, &w.v, &w.o, F.buf[BUF_LSE], 0, 0, NULL, &ev),
                 FLASHCL_ERR_UNSUPPORTED_DTYPE);
    check_nothing_written("standard path refusals");
}

int main(void) {
    F.ctx = tu_context_create();
    F.cl = flashcl_context_cl_context(F.ctx);
    F.queue = flashcl_context_queue(F.ctx);
    tu_buffers_create(F.cl, BUF_COUNT, CAP, (1u << BUF_COUNT) - 1, 0, F.buf, F.host); /* all sentinels */
    float zeros[CAP] = {0};
    F.small = tu_buffer_create(F.cl, 2, zeros);
    F.big = tu_buffer_create(F.cl, CAP, zeros);
    F.keep = tu_buffer_create(F.cl, CAP, F.host[BUF_O]);

    scalar_fields();
    matrices();
    backward_only();
    overlaps_and_access();
    varlen();
    storage_size();
    dropout_mask_buffers();
    standard_refuses();

    clReleaseMemObject(F.small);
    clReleaseMemObject(F.big);
    clReleaseMemObject(F.keep);
    tu_buffers_release(BUF_COUNT, F.buf, F.host);
    flashcl_context_destroy(F.ctx);
    return tu_finish("test_invalid_variants");
}
