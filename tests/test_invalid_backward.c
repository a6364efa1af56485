/*
 * Invalid arguments to the backward calls: each bad call must return its
 * specific status, name the offending field in flashcl_last_error, and write
 * nothing: every buffer the test owns (dQ, dK and dV hold sentinels) is read
 * back and compared bitwise. Both paths, plus the host and plan entry points.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Floats per test buffer: room for every view below with space to spare. */
#define CAP 4096
enum { BUF_Q, BUF_K, BUF_V, BUF_O, BUF_DOUT, BUF_LSE, BUF_DQ, BUF_DK, BUF_DV, BUF_COUNT };
static const char *k_buf_names[BUF_COUNT] = {"q", "k", "v", "o", "dout", "lse", "dq", "dk", "dv"};

static struct {
    flashcl_context *ctx;
    cl_context cl;
    cl_command_queue queue;
    cl_mem buf[BUF_COUNT];
    float *host[BUF_COUNT];
} F;

/* The eight views of a backward call. */
typedef struct views {
    flashcl_tensor q, k, v, o, dout, dq, dk, dv;
} views;

static flashcl_attention_desc base_desc(void) { return tu_small_desc(1); }

/* Valid packed [b, s, h, d] views, each at the start of its own buffer. */
static views make_views(const flashcl_attention_desc *d) {
    views w;
    size_t sq = d->seqlen_q, sk = d->seqlen_k, hq = d->heads_q, hkv = d->heads_kv, hd = d->head_dim;
    w.q = flashcl_tensor_bshd(F.buf[BUF_Q], sq, hq, hd);
    w.k = flashcl_tensor_bshd(F.buf[BUF_K], sk, hkv, hd);
    w.v = flashcl_tensor_bshd(F.buf[BUF_V], sk, hkv, hd);
    w.o = flashcl_tensor_bshd(F.buf[BUF_O], sq, hq, hd);
    w.dout = flashcl_tensor_bshd(F.buf[BUF_DOUT], sq, hq, hd);
    w.dq = flashcl_tensor_bshd(F.buf[BUF_DQ], sq, hq, hd);
    w.dk = flashcl_tensor_bshd(F.buf[BUF_DK], sk, hkv, hd);
    w.dv = flashcl_tensor_bshd(F.buf[BUF_DV], sk, hkv, hd);
    return w;
}

typedef struct bad_call {
    const char *what;
    flashcl_context *ctx;
    const flashcl_attention_desc *desc;
    const flashcl_tensor *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    cl_mem lse;
    size_t lse_offset;
    cl_uint num_wait;
    const cl_event *wait;
} bad_call;

static bad_call make_call(const char *what, const flashcl_attention_desc *desc, const views *w) {
    bad_call c = {what,   F.ctx,  desc,   &w->q,          &w->k, &w->v, &w->o, &w->dout,
                  &w->dq, &w->dk, &w->dv, F.buf[BUF_LSE], 0,     0,     NULL};
    return c;
}

/* Every test buffer must still hold exactly what was uploaded. */
static void check_nothing_written(const char *label) {
    static float got[CAP];
    REQUIRE_CL(clFinish(F.queue));
    for (int i = 0; i < BUF_COUNT; i++) {
        char what[320];
        tu_buffer_read(F.queue, F.buf[i], CAP, got, NULL);
        snprintf(what, sizeof what, "%s: buffer %s", label, k_buf_names[i]);
        tu_check_untouched(what, got, F.host[i], NULL, CAP);
    }
}

/* The call on `path` (the descriptor's path set to it; a NULL descriptor stays NULL). */
static flashcl_status call(const bad_call *c, flashcl_path path, cl_event *ev) {
    flashcl_attention_desc d;
    if (c->desc) {
        d = *c->desc;
        d.path = path;
    }
    return flashcl_backward(c->ctx, c->desc ? &d : NULL, c->q, c->k, c->v, c->o, c->dout, c->lse, c->lse_offset, c->dq,
                            c->dk, c->dv, c->num_wait, c->wait, ev);
}

/*
 * Runs the call on both paths: it must return `status`, return no event,
 * write nothing, and leave a message containing `field` that names every
 * tensor in `tensors` (NULL-terminated, may be NULL) as a word.
 */
static void expect(bad_call c, int status, const char *field, const char *const *tensors) {
    for (int path = 0; path < 2; path++) {
        char label[256];
        snprintf(label, sizeof label, "%s [%s]", c.what, path ? "standard" : "flash");
        cl_event ev = NULL;
        if (!CHECK_STATUS(call(&c, (flashcl_path)path, &ev), status)) fprintf(stderr, "  in: %s\n", label);
        if (ev) {
            fprintf(stderr, "FAIL %s: a rejected call returned an event\n", label);
            tu_fail_count();
            clReleaseEvent(ev);
        }
        if (c.ctx) {
            const char *msg = flashcl_last_error(c.ctx);
            int named = msg && msg[0] && strstr(msg, field);
            for (size_t i = 0; named && tensors && tensors[i]; i++) named = tu_names_tensor(msg, tensors[i]);
            if (!named) {
                fprintf(stderr, "FAIL %s: message \"%s\" does not name \"%s\"%s\n", label, msg ? msg : "(null)", field,
                        tensors ? " and every tensor involved" : "");
                tu_fail_count();
            }
        }
        check_nothing_written(label);
    }
}

/* NULL-terminated tensor name lists for expect(). */
#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})

static void check_required_inputs(void) {
    flashcl_attention_desc d = base_desc();
    views w = make_views(&d), bad;

    bad_call c = make_call("lse NULL", &d, &w);
    c.lse = NULL;
    expect(c, FLASHCL_ERR_INVALID_BUFFER, "lse", NAMES("lse"));

    c = make_call("dout NULL", &d, &w);
    c.dout = NULL;
    expect(c, FLASHCL_ERR_INVALID_ARGUMENT, "dout", NAMES("dout"));
    bad = w;
    bad.dout.buffer = NULL;
    expect(make_call("dout.buffer NULL", &d, &bad), FLASHCL_ERR_INVALID_BUFFER, "dout.buffer", NULL);

    static const char *outs[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        char what[32];
        snprintf(what, sizeof what, "%s NULL", outs[i]);
        c = make_call(what, &d, &w);
        const flashcl_tensor **slot[3] = {&c.dq, &c.dk, &c.dv};
        *slot[i] = NULL;
        expect(c, FLASHCL_ERR_INVALID_ARGUMENT, outs[i], NAMES(outs[i]));
    }
    c = make_call("o NULL", &d, &w);
    c.o = NULL;
    expect(c, FLASHCL_ERR_INVALID_ARGUMENT, "o", NAMES("o"));

    c = make_call("ctx NULL", &d, &w);
    c.ctx = NULL;
    expect(c, FLASHCL_ERR_INVALID_CONTEXT, "", NULL);
    c = make_call("desc NULL", NULL, &w);
    expect(c, FLASHCL_ERR_INVALID_ARGUMENT, "desc", NULL);
    flashcl_attention_desc d0 = base_desc();
    d0.head_dim = 0;
    c = make_call("head_dim 0", &d0, &w);
    expect(c, FLASHCL_ERR_INVALID_HEAD_DIM, "head_dim", NULL);
    c = make_call("num_wait 1 with a NULL wait list", &d, &w);
    c.num_wait = 1;
    expect(c, FLASHCL_ERR_INVALID_ARGUMENT, "wait", NULL);
}

static void check_aliasing(void) {
    flashcl_attention_desc d = base_desc();
    views w = make_views(&d), bad;

    bad = w;
    bad.dq.buffer = F.buf[BUF_Q];
    expect(make_call("dq aliases q", &d, &bad), FLASHCL_ERR_ALIASED_OUTPUT, "dq", NAMES("dq", "q"));
    bad = w;
    bad.dq.buffer = F.buf[BUF_DOUT];
    bad.dq.offset = 200; /* dout covers [0, 256): a partial overlap */
    expect(make_call("dq overlaps the end of dout", &d, &bad), FLASHCL_ERR_ALIASED_OUTPUT, "dq", NAMES("dq", "dout"));
    bad = w;
    /* dk covers [0, 128) of the dk buffer; dv at 64 shares its second half. */
    bad.dv.buffer = F.buf[BUF_DK];
    bad.dv.offset = 64;
    expect(make_call("dk overlaps dv in one buffer", &d, &bad), FLASHCL_ERR_ALIASED_OUTPUT, "dk", NAMES("dk", "dv"));
    bad = w;
    bad.dk.buffer = F.buf[BUF_V];
    expect(make_call("dk aliases v", &d, &bad), FLASHCL_ERR_ALIASED_OUTPUT, "dk", NAMES("dk", "v"));
    bad_call c = make_call("lse inside dv", &d, &w);
    c.lse = F.buf[BUF_DV];
    c.lse_offset = 8;
    expect(c, FLASHCL_ERR_ALIASED_OUTPUT, "lse", NAMES("dv", "lse"));
}

static void check_views(void) {
    flashcl_attention_desc d = base_desc();
    views w = make_views(&d), bad;

    bad = w;
    bad.dq.stride_row = d.head_dim - 1;
    expect(make_call("dq.stride_row < head_dim", &d, &bad), FLASHCL_ERR_INVALID_STRIDE, "dq.stride_row", NULL);
    bad = w;
    bad.dq.stride_head = 0; /* both query heads would write the same rows */
    expect(make_call("dq heads overlap", &d, &bad), FLASHCL_ERR_INVALID_STRIDE, "dq.stride", NULL);
    bad = w;
    bad.dk.offset = CAP - 10;
    expect(make_call("dk.offset past the end", &d, &bad), FLASHCL_ERR_OUT_OF_BOUNDS, "dk", NAMES("dk"));
    bad = w;
    bad.dv.stride_row = CAP / 4; /* 8 rows of CAP/4 reach past CAP */
    expect(make_call("dv.stride_row overruns", &d, &bad), FLASHCL_ERR_OUT_OF_BOUNDS, "dv", NAMES("dv"));
    bad = w;
    bad.dout.offset = CAP - 100;
    expect(make_call("dout.offset overruns", &d, &bad), FLASHCL_ERR_OUT_OF_BOUNDS, "dout", NAMES("dout"));

    size_t rows = d.batch * d.heads_q * d.seqlen_q;
    bad_call c = make_call("lse_offset leaves one float short", &d, &w);
    c.lse_offset = CAP - rows + 1;
    expect(c, FLASHCL_ERR_OUT_OF_BOUNDS, "lse", NAMES("lse"));
}

static void check_host_and_plan(void) {
    flashcl_attention_desc d = base_desc();
    size_t nq = d.batch * d.seqlen_q * d.heads_q * d.head_dim;
    float *in = malloc(nq * sizeof(float)), *out[3], *before = malloc(nq * sizeof(float));
    REQUIRE(in && before);
    for (size_t i = 0; i < nq; i++) in[i] = 0.25f;
    tu_fill_sentinel(before, nq);
    for (int i = 0; i < 3; i++) {
        out[i] = malloc(nq * sizeof(float));
        REQUIRE(out[i] != NULL);
        memcpy(out[i], before, nq * sizeof(float));
    }
    /* q k v o dout lse dq dk dv: each NULL in turn. */
    static const char *names[9] = {"q", "k", "v", "o", "dout", "lse", "dq", "dk", "dv"};
    for (int n = 0; n < 9; n++) {
        const float *a[6] = {in, in, in, in, in, in};
        float *g[3] = {out[0], out[1], out[2]};
        if (n < 6)
            a[n] = NULL;
        else
            g[n - 6] = NULL;
        flashcl_status st = flashcl_backward_host(F.ctx, &d, a[0], a[1], a[2], a[3], a[4], a[5], g[0], g[1], g[2]);
        CHECK_STATUS(st, FLASHCL_ERR_INVALID_ARGUMENT);
        if (!tu_names_tensor(flashcl_last_error(F.ctx), names[n])) {
            fprintf(stderr, "FAIL backward_host with %s NULL: message \"%s\" does not name it\n", names[n],
                    flashcl_last_error(F.ctx));
            tu_fail_count();
        }
    }
    flashcl_attention_desc bad_path = d;
    bad_path.path = (flashcl_path)7;
    CHECK_STATUS(flashcl_backward_host(F.ctx, &bad_path, in, in, in, in, in, in, out[0], out[1], out[2]),
                 FLASHCL_ERR_INVALID_PATH);
    CHECK(strstr(flashcl_last_error(F.ctx), "path") != NULL);
    CHECK_STATUS(flashcl_backward_host(NULL, &d, in, in, in, in, in, in, out[0], out[1], out[2]),
                 FLASHCL_ERR_INVALID_CONTEXT);
    /* Host outputs that overlap one another (each would be read back over the other):
       dk inside dq, dv over dk's last float, the forward's LSE over O's last rows. */
    const size_t nk = d.batch * d.seqlen_k * d.heads_kv * d.head_dim;
    CHECK_STATUS(flashcl_backward_host(F.ctx, &d, in, in, in, in, in, in, out[0], out[0] + 64, out[2]),
                 FLASHCL_ERR_ALIASED_OUTPUT);
    CHECK(strstr(flashcl_last_error(F.ctx), "dk and dq overlap") != NULL);
    CHECK_STATUS(flashcl_backward_host(F.ctx, &d, in, in, in, in, in, in, out[0], out[1], out[1] + nk - 1),
                 FLASHCL_ERR_ALIASED_OUTPUT);
    CHECK(strstr(flashcl_last_error(F.ctx), "dv and dk overlap") != NULL);
    CHECK_STATUS(flashcl_forward_host(F.ctx, &d, in, in, in, out[0], out[0] + nq - d.heads_q * d.seqlen_q),
                 FLASHCL_ERR_ALIASED_OUTPUT);
    CHECK(strstr(flashcl_last_error(F.ctx), "lse and o overlap") != NULL);
    for (int i = 0; i < 3; i++) {
        tu_check_untouched("backward_host rejected: outputs", out[i], before, NULL, nq);
        free(out[i]);
    }
    /* Adjacent outputs, and an output over an input (inputs are copied in first), are fine. */
    float *packed = malloc((nq + 2 * nk) * sizeof(float));
    REQUIRE(packed != NULL);
    CHECK_STATUS(flashcl_backward_host(F.ctx, &d, in, in, in, in, in, in, packed, packed + nq, packed + nq + nk),
                 FLASHCL_SUCCESS);
    float *io = malloc(nq * sizeof(float));
    REQUIRE(io != NULL);
    memcpy(io, in, nq * sizeof(float));
    CHECK_STATUS(flashcl_forward_host(F.ctx, &d, io, in, in, io, NULL), FLASHCL_SUCCESS);
    free(io);
    free(packed);
    free(in);
    free(before);

    flashcl_plan plan;
    CHECK_STATUS(flashcl_backward_plan_query(F.ctx, &bad_path, &plan), FLASHCL_ERR_INVALID_PATH);
    CHECK_STATUS(flashcl_backward_plan_query(F.ctx, &d, NULL), FLASHCL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(flashcl_backward_plan_query(F.ctx, NULL, &plan), FLASHCL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(flashcl_backward_plan_query(NULL, &d, &plan), FLASHCL_ERR_INVALID_CONTEXT);
    flashcl_attention_desc bad = d;
    bad.head_dim = FLASHCL_MAX_HEAD_DIM + 1;
    CHECK_STATUS(flashcl_backward_plan_query(F.ctx, &bad, &plan), FLASHCL_ERR_INVALID_HEAD_DIM);
    CHECK(strstr(flashcl_last_error(F.ctx), "head_dim") != NULL);
}

/*
 * After all the rejections the context still works, and the checks are not
 * too strict: dK and dV side by side in one buffer (touching, not
 * overlapping) and a dQ with padded rows are accepted on both paths.
 */
static void check_still_usable(void) {
    flashcl_attention_desc d = base_desc();
    views w = make_views(&d);
    w.dv.buffer = F.buf[BUF_DK];
    w.dv.offset = 128; /* dk covers [0, 128) */
    w.dq.stride_row = 40;
    w.dq.stride_head = 20;
    for (int path = 0; path < 2; path++) {
        bad_call c = make_call("valid call", &d, &w);
        CHECK_STATUS(call(&c, (flashcl_path)path, NULL), FLASHCL_SUCCESS);
        CHECK(flashcl_last_error(F.ctx)[0] == '\0');
    }
    REQUIRE_CL(clFinish(F.queue));
    static float dq[CAP], dkv[CAP];
    tu_buffer_read(F.queue, F.buf[BUF_DQ], CAP, dq, NULL);
    tu_buffer_read(F.queue, F.buf[BUF_DK], CAP, dkv, NULL);
    /* Written inside the views (finite), sentinels just past them. */
    CHECK(isfinite(dq[0]) && isfinite(dq[7 * 40 + 20 + 15]));
    CHECK(memcmp(&dq[16], &F.host[BUF_DQ][16], sizeof(float)) == 0);
    CHECK(isfinite(dkv[0]) && isfinite(dkv[127]) && isfinite(dkv[128]) && isfinite(dkv[255]));
    CHECK(memcmp(&dkv[256], &F.host[BUF_DK][256], sizeof(float)) == 0);
}

int main(void) {
    F.ctx = tu_context_create();
    F.cl = flashcl_context_cl_context(F.ctx);
    F.queue = flashcl_context_queue(F.ctx);
    /* Inputs (LSE too) are finite, so a successful call gives finite gradients. */
    tu_buffers_create(F.cl, BUF_COUNT, CAP, 1u << BUF_DQ | 1u << BUF_DK | 1u << BUF_DV, 11, F.buf, F.host);

    check_required_inputs();
    check_aliasing();
    check_views();
    check_host_and_plan();
    check_still_usable();

    tu_buffers_release(BUF_COUNT, F.buf, F.host);
    flashcl_context_destroy(F.ctx);
    return tu_finish("test_invalid_backward");
}
