/*
 * Judges the variant reference (reference_variants.c) with no device:
 *  - Philox4x32-10 against Random123's known-answer vectors;
 *  - f16/bf16 rounding on values whose rounding is known;
 *  - with no variant on, the same O, LSE and gradients as the plain reference;
 *  - varlen equals running each sequence as its own batch-1 problem;
 *  - its gradients (dq, dk, dv, dsinks) against central finite differences of
 *    its forward, with every differentiable feature on at once (softcap,
 *    ALiBi, bias, mask, block mask, window, sinks, dropout with a fixed keep
 *    mask, GQA, d_v != d_qk) and on a varlen causal problem.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference_variants.h"
#include "storage_types.h"
#include "testutil.h"

/* The step, a power of two; inputs are multiples of it, so x +- H is exact. */
#define H (1.0 / 1048576.0)
#define REL_TOL 1e-6

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    REQUIRE(p != NULL);
    return p;
}

static float *random_array(size_t n, tu_rng *rng, float lo, float hi) {
    float *x = xcalloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(round(tu_rng_float(rng, lo, hi) / H) * H);
    return x;
}

/* ---------------------------------------------------------------- Philox */

static void check_philox(void) {
    /* Random123 kat_vectors, philox4x32 with 10 rounds. */
    static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                       {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                       {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
    static const uint32_t key[3][2] = {{0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
    static const uint32_t expect[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                          {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                          {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        rv_philox4x32_10(ctr[t], key[t], out);
        for (int w = 0; w < 4; w++)
            if (out[w] != expect[t][w]) {
                fprintf(stderr, "FAIL philox vector %d word %d: 0x%08x, expected 0x%08x\n", t, w, (unsigned)out[w],
                        (unsigned)expect[t][w]);
                tu_fail_count();
            }
    }
    /* p = 0 keeps everything; the keep rate of p = 0.3 is 0.7 within 5 sigma. */
    size_t kept = 0, n = 0;
    for (size_t i = 0; i < 64; i++)
        for (size_t j = 0; j < 257; j++, n++) {
            CHECK(rv_dropout_keep(7, 9, 0.0, 2, 1, 1, i, j) == 1);
            kept += (size_t)rv_dropout_keep(7, 9, 0.3, 2, 1, 1, i, j);
        }
    double expected = 0.7 * (double)n, sigma = sqrt((double)n * 0.3 * 0.7);
    CHECK(fabs((double)kept - expected) <= 5.0 * sigma);
    /* One call covers rows i, i + 8 and keys 2u, 2u + 1, 2u + 8, 2u + 9 of a 16 x 16 block: for rows
       35, 43 (block row 2, i mod 8 = 3) and u = 1 of key block 5 (keys 82, 83, 90, 91), counter
       (4 * 5 + 1, 8 * 2 + 3), word 2 (row half) + key half, its low 16 bits for the even key. A p
       just below a score's bits keeps it, one just above drops it. */
    const uint32_t ctr_blk[4] = {21, 19, 2 * 1 + 1, 9}, key_7[2] = {7, 0};
    uint32_t words[4];
    rv_philox4x32_10(ctr_blk, key_7, words);
    static const size_t rows[2] = {35, 43}, keys[4] = {82, 83, 90, 91};
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 4; c++) {
            const uint32_t word = words[2 * r + c / 2], bits = (c & 1) ? word >> 16 : word & 0xffffu;
            CHECK(rv_dropout_keep(7, 9, ((double)bits - 0.25) / 65536.0, 2, 1, 1, rows[r], keys[c]) == 1);
            CHECK(rv_dropout_keep(7, 9, ((double)bits + 0.75) / 65536.0, 2, 1, 1, rows[r], keys[c]) == 0);
        }
}

/* --------------------------------------------------------------- storage */

static void check_storage(void) {
    CHECK(flashcl__float_to_f16(1.0f) == 0x3c00);
    CHECK(flashcl__float_to_f16(-2.0f) == 0xc000);
    CHECK(flashcl__float_to_f16(65504.0f) == 0x7bff);
    CHECK(flashcl__float_to_f16(1e6f) == 0x7c00);
    CHECK(flashcl__float_to_f16(5.960464477539063e-08f) == 0x0001); /* smallest subnormal */
    /* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1). */
    CHECK(flashcl__float_to_f16(1.0f + 0x1p-11f) == 0x3c00);
    CHECK(flashcl__float_to_f16(1.0f + 0x1p-10f + 0x1p-11f) == 0x3c02);
    CHECK(flashcl__f16_to_float(0x3555) == 0x1.554p-2f);
    CHECK(flashcl__float_to_bf16(1.0f) == 0x3f80);
    CHECK(flashcl__float_to_bf16(1.0f + 0x1p-8f) == 0x3f80);           /* tie to even */
    CHECK(flashcl__float_to_bf16(1.0f + 0x1p-7f + 0x1p-8f) == 0x3f82); /* tie to even, up */
    CHECK(flashcl__bf16_to_float(0xbf80) == -1.0f);
    for (float x = -3.0f; x < 3.0f; x += 0.01f) {
        CHECK(st_round(FLASHCL_DTYPE_F16, st_round(FLASHCL_DTYPE_F16, x)) == st_round(FLASHCL_DTYPE_F16, x));
        CHECK(fabsf(st_round(FLASHCL_DTYPE_BF16, x) - x) <= fabsf(x) * 0x1p-8f);
    }
}

/* ------------------------------------------------------------ a problem */

typedef struct fd_case {
    rv_problem p;
    float *q, *k, *v, *dout, *sinks;
    double *o, *lse;
} fd_case;

static double loss(fd_case *f) {
    rv_forward(&f->p, f->q, f->k, f->v, f->o, f->lse);
    size_t n = rv_rows_q(&f->p) * f->p.heads_q * f->p.head_dim_v;
    double sum = 0.0;
    for (size_t e = 0; e < n; e++) sum += f->o[e] * (double)f->dout[e];
    return sum;
}

static void check_gradient(fd_case *f, float *x, size_t n, const double *analytic, const char *label,
                           const char *name) {
    double max_an = 0.0;
    for (size_t e = 0; e < n; e++) max_an = fmax(max_an, fabs(analytic[e]));
    if (!(max_an > 1e-3)) {
        fprintf(stderr, "FAIL %s: %s's gradient is (nearly) zero: max %g\n", label, name, max_an);
        tu_fail_count();
    }
    double worst = 0.0;
    size_t worst_at = 0;
    for (size_t e = 0; e < n; e++) {
        float saved = x[e];
        x[e] = (float)(saved + H);
        double up = loss(f);
        x[e] = (float)(saved - H);
        double down = loss(f);
        x[e] = saved;
        double err = fabs((up - down) / (2.0 * H) - analytic[e]);
        if (err > worst || isnan(err)) {
            worst = err;
            worst_at = e;
        }
    }
    if (worst <= REL_TOL * max_an) {
        printf("ok   %s: %s max |fd - analytic| %.2e (max|grad| %.3g)\n", label, name, worst, max_an);
        return;
    }
    fprintf(stderr, "FAIL %s: %s element %zu: |fd - analytic| %.3g > %.3g (analytic %.9g)\n", label, name, worst_at,
            worst, REL_TOL * max_an, analytic[worst_at]);
    tu_fail_count();
}

static void fd_check(fd_case *f, const char *label) {
    rv_problem *p = &f->p;
    size_t nq = rv_rows_q(p) * p->heads_q, nk = rv_rows_k(p) * p->heads_kv;
    f->o = xcalloc(nq * p->head_dim_v, sizeof(double));
    f->lse = xcalloc(rv_lse_count(p), sizeof(double));
    double *dq = xcalloc(nq * p->head_dim, sizeof(double));
    double *dk = xcalloc(nk * p->head_dim, sizeof(double));
    double *dv = xcalloc(nk * p->head_dim_v, sizeof(double));
    double *dsinks = xcalloc(p->heads_q, sizeof(double));
    rv_backward(p, f->q, f->k, f->v, f->dout, dq, dk, dv, dsinks);
    CHECK(isfinite(loss(f)));
    check_gradient(f, f->q, nq * p->head_dim, dq, label, "dq");
    check_gradient(f, f->k, nk * p->head_dim, dk, label, "dk");
    check_gradient(f, f->v, nk * p->head_dim_v, dv, label, "dv");
    if (f->sinks) check_gradient(f, f->sinks, p->heads_q, dsinks, label, "dsinks");
    free(dq);
    free(dk);
    free(dv);
    free(dsinks);
    free(f->o);
    free(f->lse);
}

static void fd_inputs(fd_case *f, tu_rng *rng) {
    rv_problem *p = &f->p;
    size_t nq = rv_rows_q(p) * p->heads_q, nk = rv_rows_k(p) * p->heads_kv;
    f->q = random_array(nq * p->head_dim, rng, -2.0f, 2.0f);
    f->k = random_array(nk * p->head_dim, rng, -1.0f, 1.0f);
    f->v = random_array(nk * p->head_dim_v, rng, -1.0f, 1.0f);
    f->dout = random_array(nq * p->head_dim_v, rng, -1.0f, 1.0f);
}

static void fd_free(fd_case *f) {
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->dout);
    free(f->sinks);
}

/* Every differentiable feature at once on a padded batch. */
static void check_all_features(void) {
    fd_case f;
    memset(&f, 0, sizeof f);
    rv_problem *p = &f.p;
    p->batch = 2, p->heads_q = 4, p->heads_kv = 2, p->seqlen_q = 5, p->seqlen_k = 7;
    p->head_dim = 4, p->head_dim_v = 3, p->scale = 0.7;
    p->max_seqlen_q = 5, p->max_seqlen_k = 7;
    p->window = 1, p->window_left = 3, p->window_right = 1;
    p->softcap = 1.5;
    tu_rng rng = tu_rng_seed(11);
    fd_inputs(&f, &rng);
    float *slopes = random_array(p->batch * p->heads_q, &rng, 0.05f, 0.5f);
    p->alibi_slopes = slopes, p->alibi_stride_batch = p->heads_q;
    f.sinks = random_array(p->heads_q, &rng, -1.0f, 1.0f);
    p->sinks = f.sinks;
    /* Bias broadcast over batch: [1, h, sq, sk]. */
    float *bias = random_array(p->heads_q * 5 * 7, &rng, -1.0f, 1.0f);
    p->bias = (rv_matrix){bias, 0, 0, 5 * 7, 7};
    /* Mask [b, 1, sq, sk] broadcast over heads, about one in five masked. */
    unsigned char *mask = xcalloc(2 * 5 * 7, 1);
    for (size_t e = 0; e < 2 * 5 * 7; e++) mask[e] = (unsigned char)(tu_rng_next(&rng) % 5 != 0);
    p->mask = (rv_matrix){mask, 0, 5 * 7, 0, 7};
    /* Block mask at 2 x 3 blocks ([1, 1, 3, 3]): one block off. */
    unsigned char block[9] = {1, 1, 1, 1, 0, 1, 1, 1, 1};
    p->block_mask = (rv_matrix){block, 0, 0, 0, 3};
    p->block_q = 2, p->block_k = 3;
    p->dropout_p = 0.25;
    unsigned char *keep = xcalloc(2 * 4 * 5 * 7, 1);
    rv_dropout_mask(p, 1234, 5678, keep);
    p->keep = keep;
    fd_check(&f, "all features b=2 hq=4 hkv=2 sq=5 sk=7 d=4 dv=3");
    fd_free(&f);
    free(slopes);
    free(bias);
    free(mask);
    free(keep);
}

/* Varlen, causal, sinks, ALiBi [h]; one sequence has more queries than keys. */
static void check_varlen(void) {
    static const int32_t cu_q[4] = {0, 3, 4, 8}, cu_k[4] = {0, 2, 7, 10};
    fd_case f;
    memset(&f, 0, sizeof f);
    rv_problem *p = &f.p;
    p->batch = 3, p->heads_q = 2, p->heads_kv = 1, p->seqlen_q = 8, p->seqlen_k = 10;
    p->head_dim = 3, p->head_dim_v = 3, p->scale = 0.9, p->causal = 1;
    p->cu_q = cu_q, p->cu_k = cu_k, p->max_seqlen_q = 4, p->max_seqlen_k = 5;
    tu_rng rng = tu_rng_seed(12);
    fd_inputs(&f, &rng);
    f.sinks = random_array(p->heads_q, &rng, -1.0f, 1.0f);
    p->sinks = f.sinks;
    float slopes[2] = {0.25f, 0.5f};
    p->alibi_slopes = slopes;
    fd_check(&f, "varlen causal sinks alibi");

    /* Sequence 0 has 3 queries on 2 keys: its first row sees nothing. */
    double o[8 * 2 * 3], lse[2 * 8];
    rv_forward(p, f.q, f.k, f.v, o, lse);
    CHECK(lse[rv_lse_index(p, 0, 1, 0)] == (double)f.sinks[1]);
    for (size_t c = 0; c < 3; c++) CHECK(o[(0 * 2 + 1) * 3 + c] == 0.0);

    /* Each sequence alone, as a batch-1 problem, gives the same O and LSE. */
    for (size_t b = 0; b < 3; b++) {
        rv_problem one = *p;
        one.batch = 1, one.cu_q = NULL, one.cu_k = NULL;
        one.seqlen_q = (size_t)(cu_q[b + 1] - cu_q[b]);
        one.seqlen_k = (size_t)(cu_k[b + 1] - cu_k[b]);
        double o1[4 * 2 * 3], lse1[2 * 4];
        rv_forward(&one, f.q + (size_t)cu_q[b] * 2 * 3, f.k + (size_t)cu_k[b] * 3, f.v + (size_t)cu_k[b] * 3, o1, lse1);
        for (size_t e = 0; e < one.seqlen_q * 2 * 3; e++) CHECK(o1[e] == o[(size_t)cu_q[b] * 2 * 3 + e]);
        for (size_t h = 0; h < 2; h++)
            for (size_t i = 0; i < one.seqlen_q; i++)
                CHECK(lse1[h * one.seqlen_q + i] == lse[rv_lse_index(p, b, h, i)]);
    }
    fd_free(&f);
}

/* With nothing on, the plain reference's answers (its own layouts). */
static void check_plain_matches(void) {
    const size_t b = 2, hq = 4, hkv = 2, sq = 5, sk = 6, d = 3;
    tu_rng rng = tu_rng_seed(13);
    fd_case f;
    memset(&f, 0, sizeof f);
    rv_problem *p = &f.p;
    p->batch = b, p->heads_q = hq, p->heads_kv = hkv, p->seqlen_q = sq, p->seqlen_k = sk;
    p->head_dim = d, p->head_dim_v = d, p->scale = 0.6, p->causal = 1;
    p->max_seqlen_q = sq, p->max_seqlen_k = sk;
    fd_inputs(&f, &rng);
    ref_problem rp = {b, hq, hkv, sq, sk, d, 0.6, 1};
    flashcl_tensor qv = flashcl_tensor_bshd(NULL, sq, hq, d);
    flashcl_tensor kv = flashcl_tensor_bshd(NULL, sk, hkv, d);
    size_t nq = b * sq * hq * d, nk = b * sk * hkv * d;
    double *o1 = xcalloc(nq, sizeof(double)), *o2 = xcalloc(nq, sizeof(double));
    double *l1 = xcalloc(b * hq * sq, sizeof(double)), *l2 = xcalloc(b * hq * sq, sizeof(double));
    ref_attention(&rp, f.q, &qv, f.k, &kv, f.v, &kv, o1, l1);
    rv_forward(p, f.q, f.k, f.v, o2, l2);
    double worst = 0.0;
    for (size_t bb = 0; bb < b; bb++)
        for (size_t h = 0; h < hq; h++)
            for (size_t i = 0; i < sq; i++) {
                size_t r1 = (bb * hq + h) * sq + i, r2 = (bb * sq + i) * hq + h;
                worst = fmax(worst, fabs(l1[r1] - l2[r1]));
                for (size_t c = 0; c < d; c++) worst = fmax(worst, fabs(o1[r1 * d + c] - o2[r2 * d + c]));
            }
    double *g1[3], *g2[3];
    for (int t = 0; t < 3; t++) {
        g1[t] = xcalloc(t ? nk : nq, sizeof(double));
        g2[t] = xcalloc(t ? nk : nq, sizeof(double));
    }
    ref_attention_backward(&rp, f.q, &qv, f.k, &kv, f.v, &kv, f.dout, &qv, g1[0], g1[1], g1[2]);
    rv_backward(p, f.q, f.k, f.v, f.dout, g2[0], g2[1], g2[2], NULL);
    for (int t = 0; t < 3; t++) {
        size_t heads = t ? hkv : hq, rows = t ? sk : sq;
        for (size_t bb = 0; bb < b; bb++)
            for (size_t h = 0; h < heads; h++)
                for (size_t i = 0; i < rows; i++)
                    for (size_t c = 0; c < d; c++)
                        worst = fmax(worst, fabs(g1[t][((bb * heads + h) * rows + i) * d + c] -
                                                 g2[t][((bb * rows + i) * heads + h) * d + c]));
        free(g1[t]);
        free(g2[t]);
    }
    if (!(worst <= 1e-12)) {
        fprintf(stderr, "FAIL plain problem: variant reference differs from reference.c by %g\n", worst);
        tu_fail_count();
    }
    free(o1), free(o2), free(l1), free(l2);
    fd_free(&f);
}

int main(void) {
    check_philox();
    check_storage();
    check_plain_matches();
    check_all_features();
    check_varlen();
    return tu_finish("test_reference_variants");
}
