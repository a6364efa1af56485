/*
 * Checks the reference gradients (ref_attention_backward) against central
 * finite differences of the reference forward, on tiny problems, with no
 * device: loss = sum(O * dO), so dloss/dx is exactly what the backward
 * computes for upstream gradient dO. Covers strided views, GQA/MQA, both
 * masks, sq > sk (rows with no visible key), batch > 1 and a custom scale.
 * The reference that judges the kernels is itself judged here.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "problem.h"

/*
 * The step, a power of two: inputs are rounded to multiples of it (and stay
 * below 16 in magnitude), so x +- H is exact in float and the difference
 * quotient divides by the step that was really taken. The truncation error
 * is O(H^2) ~ 1e-12 and the rounding error ~ 1e-16 / H ~ 1e-10, far inside
 * the 1e-6 relative tolerance.
 */
#define H (1.0 / 1048576.0) /* 2^-20 ~ 9.5e-7 */
#define REL_TOL 1e-6

typedef struct fd_tensor {
    float *host;
    flashcl_tensor view;
    tu_dims dims;
    size_t count;
} fd_tensor;

typedef struct fd_case {
    ref_problem p;
    fd_tensor q, k, v, dout;
    double *o, *lse;
} fd_case;

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    REQUIRE(p != NULL);
    return p;
}

static void tensor_init(fd_tensor *t, tu_layout layout, tu_dims dims, tu_rng *rng, float lo, float hi) {
    t->dims = dims;
    t->view = tu_view_make(layout, dims);
    t->count = tu_view_extent(&t->view, dims);
    t->host = xcalloc(t->count, sizeof(float));
    /* Padding is NaN: if the reference read outside a view, the loss would be NaN. */
    tu_fill_sentinel(t->host, t->count);
    tu_fill_view(t->host, &t->view, dims, rng, lo, hi);
    flashcl_tensor r = ref_resolve_view(&t->view, dims.rows, dims.heads, dims.head_dim);
    for (size_t b = 0; b < dims.batch; b++)
        for (size_t h = 0; h < dims.heads; h++)
            for (size_t i = 0; i < dims.rows; i++)
                for (size_t c = 0; c < dims.head_dim; c++) {
                    float *x = &t->host[ref_index(&r, b, h, i, c)];
                    *x = (float)(round(*x / H) * H);
                }
}

/* sum(O * dO) with O from the double reference forward. */
static double loss(fd_case *f) {
    const ref_problem *p = &f->p;
    ref_attention(p, f->q.host, &f->q.view, f->k.host, &f->k.view, f->v.host, &f->v.view, f->o, f->lse);
    flashcl_tensor g = ref_resolve_view(&f->dout.view, p->seqlen_q, p->heads_q, p->head_dim);
    double sum = 0.0;
    for (size_t b = 0; b < p->batch; b++)
        for (size_t h = 0; h < p->heads_q; h++)
            for (size_t i = 0; i < p->seqlen_q; i++)
                for (size_t c = 0; c < p->head_dim; c++) {
                    size_t row = (b * p->heads_q + h) * p->seqlen_q + i;
                    sum += f->o[row * p->head_dim + c] * (double)f->dout.host[ref_index(&g, b, h, i, c)];
                }
    return sum;
}

/*
 * Central differences over every element of t's view against the analytic
 * gradient (packed); |fd - analytic| <= REL_TOL * max|analytic| per tensor.
 */
static void check_tensor(fd_case *f, fd_tensor *t, const double *analytic, const char *label, const char *name) {
    tu_dims dims = t->dims;
    flashcl_tensor r = ref_resolve_view(&t->view, dims.rows, dims.heads, dims.head_dim);
    size_t n = dims.batch * dims.heads * dims.rows * dims.head_dim;
    double max_an = 0.0;
    for (size_t e = 0; e < n; e++) max_an = fmax(max_an, fabs(analytic[e]));
    /* A tensor whose gradient is all zero would make the check vacuous. */
    if (!(max_an > 1e-3)) {
        fprintf(stderr, "FAIL %s: %s's gradient is (nearly) zero everywhere: max %g\n", label, name, max_an);
        tu_fail_count();
    }
    double tol = REL_TOL * max_an, worst = -1.0;
    size_t worst_at = 0;
    double worst_fd = 0.0;
    for (size_t e = 0; e < n; e++) {
        size_t c = e % dims.head_dim, i = e / dims.head_dim % dims.rows;
        size_t h = e / dims.head_dim / dims.rows % dims.heads;
        size_t b = e / dims.head_dim / dims.rows / dims.heads;
        float *x = &t->host[ref_index(&r, b, h, i, c)];
        float saved = *x;
        *x = (float)(saved + H);
        double up = loss(f);
        *x = (float)(saved - H);
        double down = loss(f);
        *x = saved;
        double fd = (up - down) / (2.0 * H);
        double err = fabs(fd - analytic[e]);
        if (!(err <= worst)) {
            worst = err;
            worst_at = e;
            worst_fd = fd;
        }
    }
    if (worst <= tol) {
        printf("ok   %s: %s max |fd - analytic| %.2e (max|grad| %.3g)\n", label, name, worst, max_an);
        return;
    }
    fprintf(stderr,
            "FAIL %s: %s element %zu: finite difference %.12g, analytic %.12g (|diff| %.3g "
            "> %.3g)\n",
            label, name, worst_at, worst_fd, analytic[worst_at], worst, tol);
    tu_fail_count();
}

static void run_case(size_t batch, size_t hq, size_t hkv, size_t sq, size_t sk, size_t d, int causal, double scale,
                     const tu_layout layouts[4], uint64_t seed) {
    fd_case f;
    memset(&f, 0, sizeof f);
    ref_problem *p = &f.p;
    p->batch = batch;
    p->heads_q = hq;
    p->heads_kv = hkv;
    p->seqlen_q = sq;
    p->seqlen_k = sk;
    p->head_dim = d;
    p->scale = scale > 0.0 ? scale : 1.0 / sqrt((double)d);
    p->causal = causal;
    char label[160];
    snprintf(label, sizeof label, "b=%zu hq=%zu hkv=%zu sq=%zu sk=%zu d=%zu causal=%d scale=%g", batch, hq, hkv, sq, sk,
             d, causal, p->scale);

    tu_rng rng = tu_rng_seed(seed);
    tu_dims qd = {batch, hq, sq, d}, kd = {batch, hkv, sk, d};
    /* Q spans a few units so the softmax is far from flat, as in the device tests. */
    tensor_init(&f.q, layouts[0], qd, &rng, -2.0f, 2.0f);
    tensor_init(&f.k, layouts[1], kd, &rng, -1.0f, 1.0f);
    tensor_init(&f.v, layouts[2], kd, &rng, -1.0f, 1.0f);
    tensor_init(&f.dout, layouts[3], qd, &rng, -1.0f, 1.0f);
    size_t rows = batch * hq * sq;
    f.o = xcalloc(rows * d, sizeof(double));
    f.lse = xcalloc(rows, sizeof(double));

    size_t nq = rows * d, nk = batch * hkv * sk * d;
    double *dq = xcalloc(nq, sizeof(double));
    double *dk = xcalloc(nk, sizeof(double));
    double *dv = xcalloc(nk, sizeof(double));
    ref_attention_backward(p, f.q.host, &f.q.view, f.k.host, &f.k.view, f.v.host, &f.v.view, f.dout.host, &f.dout.view,
                           dq, dk, dv);
    CHECK(isfinite(loss(&f)));

    check_tensor(&f, &f.q, dq, label, "dq");
    check_tensor(&f, &f.k, dk, label, "dk");
    check_tensor(&f, &f.v, dv, label, "dv");

    /* Rows with no visible key: the reference must give exactly 0 there. */
    for (size_t b = 0; b < batch; b++)
        for (size_t h = 0; h < hq; h++)
            for (size_t i = 0; i < sq && ref_visible_keys(p, i) == 0; i++)
                for (size_t c = 0; c < d; c++) CHECK(dq[((b * hq + h) * sq + i) * d + c] == 0.0);

    free(dq);
    free(dk);
    free(dv);
    free(f.o);
    free(f.lse);
    fd_tensor *all[4] = {&f.q, &f.k, &f.v, &f.dout};
    for (int i = 0; i < 4; i++) free(all[i]->host);
}

int main(void) {
    static const tu_layout strided[4] = {TU_PADDED, TU_BSHD, TU_BHSD, TU_PADDED};
    static const tu_layout packed[4] = {TU_BHSD, TU_ZERO, TU_PADDED, TU_BSHD};
    /* GQA 2:1, sq < sk, both masks. */
    run_case(1, 2, 1, 3, 4, 3, 0, 0.0, strided, 1);
    run_case(1, 2, 1, 3, 4, 3, 1, 0.0, strided, 2);
    /* sq > sk, causal: row 0 sees no key. Batch 2, no GQA, custom scale. */
    run_case(2, 2, 2, 4, 3, 2, 1, 0.7, packed, 3);
    /* MQA (3 query heads on one kv head), not causal. */
    run_case(1, 3, 1, 2, 3, 3, 0, 1.3, packed, 4);
    /* Two groups of two: h / group and h % heads_kv differ, so a wrong kv head shows. */
    run_case(1, 4, 2, 3, 2, 2, 1, 0.0, strided, 5);
    return tu_finish("test_reference_grad");
}
