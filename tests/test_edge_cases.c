/*
 * Numerical edge cases, on the flash and the standard path, forward and
 * backward (through the host-array calls, packed [b, s, h, d]):
 *  - logits of magnitude 1e4: no overflow, O and LSE match the reference;
 *  - causal with seqlen_q > seqlen_k: rows that see no key get O = 0,
 *    LSE = -inf and dQ = 0, never NaN;
 *  - seqlen 1: O = V, LSE = scale * q.k;
 *  - a NaN in one Q element (batch 0, head 0, row r): that O row is NaN in
 *    every element and so is its LSE (not -inf, which would call the row
 *    empty); every other row of every head and batch stays finite and
 *    matches the reference; the gradients of batch 1 stay finite;
 *  - +inf in one V element (batch 0, kv head 0, key j, dim c): only column c
 *    of O may be non-finite; every other element and all of batch 1 is finite;
 *  - a negative scale (a softmax of the negated logits): O, LSE and the
 *    gradients match the reference, also with logits of magnitude 1e4 (the
 *    running max is of the scaled scores);
 *  - a NaN or +inf sink logit (head 0 of 2): every O row and LSE of head 0
 *    is NaN, under the default plan (CPU family or decode family on POCL)
 *    and the row and tile kernels; head 1 stays finite. The kernels used to
 *    write O = 0 there (the sum was NaN, and "not > 0" read as an empty
 *    row) while LSE was NaN.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static const char *const k_path_names[2] = {"flash", "standard"};

typedef struct host_problem {
    flashcl_attention_desc desc;
    ref_problem ref;
    size_t nq, nk, nl;
    float *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
    double *ref_o, *ref_lse;
} host_problem;

static void hp_init(host_problem *p, size_t b, size_t hq, size_t hkv, size_t sq, size_t sk, size_t d, int causal,
                    float scale, float range, uint64_t seed) {
    memset(p, 0, sizeof *p);
    p->desc = (flashcl_attention_desc)FLASHCL_ATTENTION_DESC_INIT;
    p->desc.batch = b, p->desc.heads_q = hq, p->desc.heads_kv = hkv;
    p->desc.seqlen_q = sq, p->desc.seqlen_k = sk, p->desc.head_dim = d;
    p->desc.causal = causal, p->desc.scale = scale;
    p->ref = ref_problem_from_desc(&p->desc);
    p->nq = b * sq * hq * d, p->nk = b * sk * hkv * d, p->nl = b * hq * sq;
    p->q = calloc(p->nq, sizeof(float)), p->o = calloc(p->nq, sizeof(float));
    p->dout = calloc(p->nq, sizeof(float)), p->dq = calloc(p->nq, sizeof(float));
    p->k = calloc(p->nk, sizeof(float)), p->v = calloc(p->nk, sizeof(float));
    p->dk = calloc(p->nk, sizeof(float)), p->dv = calloc(p->nk, sizeof(float));
    p->lse = calloc(p->nl, sizeof(float));
    p->ref_o = calloc(p->nq, sizeof(double)), p->ref_lse = calloc(p->nl, sizeof(double));
    REQUIRE(p->q && p->o && p->dout && p->dq && p->k && p->v && p->dk && p->dv && p->lse && p->ref_o && p->ref_lse);
    tu_rng rng = tu_rng_seed(seed);
    for (size_t i = 0; i < p->nq; ++i) p->q[i] = tu_rng_float(&rng, -range, range);
    for (size_t i = 0; i < p->nq; ++i) p->dout[i] = tu_rng_float(&rng, -1, 1);
    for (size_t i = 0; i < p->nk; ++i) p->k[i] = tu_rng_float(&rng, -range, range);
    for (size_t i = 0; i < p->nk; ++i) p->v[i] = tu_rng_float(&rng, -1, 1);
}

static void hp_free(host_problem *p) {
    free(p->q), free(p->k), free(p->v), free(p->o), free(p->lse), free(p->dout);
    free(p->dq), free(p->dk), free(p->dv), free(p->ref_o), free(p->ref_lse);
}

/* Packed views (all strides zero) for the reference. */
static void hp_reference(host_problem *p) {
    flashcl_tensor z = {0};
    flashcl_tensor qv = ref_resolve_view(&z, p->ref.seqlen_q, p->ref.heads_q, p->ref.head_dim);
    flashcl_tensor kv = ref_resolve_view(&z, p->ref.seqlen_k, p->ref.heads_kv, p->ref.head_dim);
    ref_attention(&p->ref, p->q, &qv, p->k, &kv, p->v, &kv, p->ref_o, p->ref_lse);
}

/* O element (b, h, r, c) in the packed [b, s, h, d] host array. */
static size_t o_index(const ref_problem *r, size_t b, size_t h, size_t row, size_t c) {
    return ((b * r->seqlen_q + row) * r->heads_q + h) * r->head_dim + c;
}
/* The reference's O is [b, h, s, d]. */
static size_t ref_o_index(const ref_problem *r, size_t b, size_t h, size_t row, size_t c) {
    return ((b * r->heads_q + h) * r->seqlen_q + row) * r->head_dim + c;
}

static int close_to(double got, double ref, double abs_tol, double rel_tol) {
    return fabs(got - ref) <= abs_tol + rel_tol * fabs(ref);
}

static flashcl_status hp_run(flashcl_context *ctx, host_problem *p, int path, int backward) {
    flashcl_attention_desc d = p->desc;
    d.path = (flashcl_path)path;
    flashcl_status st = flashcl_forward_host(ctx, &d, p->q, p->k, p->v, p->o, p->lse);
    if (st == FLASHCL_SUCCESS && backward)
        st = flashcl_backward_host(ctx, &d, p->q, p->k, p->v, p->o, p->dout, p->lse, p->dq, p->dk, p->dv);
    if (st != FLASHCL_SUCCESS) fprintf(stderr, "  %s: %s\n", k_path_names[path], flashcl_last_error(ctx));
    return st;
}

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* Every O element / LSE except row `skip_row` of (b=0, h=0) (none when skip_row is SIZE_MAX) against the reference. */
static int compare_rows(const host_problem *p, size_t skip_row) {
    const ref_problem *r = &p->ref;
    int ok = 1;
    for (size_t b = 0; b < r->batch; ++b)
        for (size_t h = 0; h < r->heads_q; ++h)
            for (size_t row = 0; row < r->seqlen_q; ++row) {
                if (b == 0 && h == 0 && row == skip_row) continue;
                for (size_t c = 0; c < r->head_dim; ++c)
                    ok &= close_to(p->o[o_index(r, b, h, row, c)], p->ref_o[ref_o_index(r, b, h, row, c)], 2e-5, 1e-4);
                double lref = p->ref_lse[(b * r->heads_q + h) * r->seqlen_q + row];
                float lgot = p->lse[(b * r->heads_q + h) * r->seqlen_q + row];
                ok &= isinf(lref) ? (isinf(lgot) && lgot < 0) : close_to(lgot, lref, 1e-5, 1e-5);
            }
    return ok;
}

static void large_logits(flashcl_context *ctx) {
    for (int path = 0; path < 2; ++path) {
        host_problem p;
        /* |q|,|k| up to 100, d = 2, scale 1: logits up to 2e4. */
        hp_init(&p, 2, 2, 1, 9, 13, 2, 0, 1.0f, 100.0f, 11);
        hp_reference(&p);
        double max_logit = 0;
        for (size_t i = 0; i < p.nl; ++i) max_logit = fmax(max_logit, fabs(p.ref_lse[i]));
        if (CHECK_STATUS(hp_run(ctx, &p, path, 1), FLASHCL_SUCCESS)) {
            if (!compare_rows(&p, SIZE_MAX)) {
                fprintf(stderr, "FAIL large logits (%s): O or LSE differs from the reference\n", k_path_names[path]);
                tu_fail_count();
            }
            CHECK(all_finite(p.dq, p.nq) && all_finite(p.dk, p.nk) && all_finite(p.dv, p.nk));
        }
        printf("large logits (%s): |lse| up to %.0f, O/LSE match, gradients finite\n", k_path_names[path], max_logit);
        CHECK(max_logit > 1e4);
        hp_free(&p);
    }
}

static void all_keys_masked(flashcl_context *ctx) {
    for (int path = 0; path < 2; ++path) {
        host_problem p;
        hp_init(&p, 1, 2, 2, 8, 3, 16, 1, 0.0f, 1.0f, 12);
        hp_reference(&p);
        if (!CHECK_STATUS(hp_run(ctx, &p, path, 1), FLASHCL_SUCCESS)) {
            hp_free(&p);
            continue;
        }
        CHECK(compare_rows(&p, SIZE_MAX));
        size_t masked = 0;
        for (size_t h = 0; h < 2; ++h)
            for (size_t row = 0; row < 8; ++row) {
                if (ref_visible_keys(&p.ref, row) != 0) continue;
                ++masked;
                CHECK(isinf(p.lse[h * 8 + row]) && p.lse[h * 8 + row] < 0);
                for (size_t c = 0; c < 16; ++c) {
                    CHECK(p.o[o_index(&p.ref, 0, h, row, c)] == 0.0f);
                    CHECK(p.dq[o_index(&p.ref, 0, h, row, c)] == 0.0f);
                }
            }
        CHECK(masked == 2 * 5);
        CHECK(all_finite(p.o, p.nq) && all_finite(p.dq, p.nq) && all_finite(p.dk, p.nk) && all_finite(p.dv, p.nk));
        printf("all keys masked (%s): %zu rows with O = 0, LSE = -inf, dQ = 0\n", k_path_names[path], masked);
        hp_free(&p);
    }
}

static void seqlen_one(flashcl_context *ctx) {
    for (int path = 0; path < 2; ++path) {
        host_problem p;
        hp_init(&p, 2, 3, 3, 1, 1, 7, 1, 0.0f, 1.0f, 13);
        hp_reference(&p);
        if (CHECK_STATUS(hp_run(ctx, &p, path, 1), FLASHCL_SUCCESS)) {
            CHECK(compare_rows(&p, SIZE_MAX));
            /* One key: P = 1, so O = V exactly up to rounding, and dQ = dK = 0 (softmax of one element is constant). */
            for (size_t i = 0; i < p.nq; ++i) CHECK(close_to(p.o[i], p.v[i], 1e-6, 1e-6));
            for (size_t i = 0; i < p.nq; ++i) CHECK(fabsf(p.dq[i]) < 1e-6f);
            for (size_t i = 0; i < p.nk; ++i) CHECK(close_to(p.dv[i], p.dout[i], 1e-6, 1e-6));
        }
        printf("seqlen 1 (%s): O = V, dV = dO, dQ = 0\n", k_path_names[path]);
        hp_free(&p);
    }
}

static void nan_in_q(flashcl_context *ctx) {
    const size_t row = 2;
    for (int path = 0; path < 2; ++path) {
        host_problem p;
        hp_init(&p, 2, 2, 1, 6, 10, 8, 0, 0.0f, 1.0f, 14);
        hp_reference(&p); /* before the NaN: the other rows must not change */
        p.q[o_index(&p.ref, 0, 0, row, 3)] = NAN;
        if (CHECK_STATUS(hp_run(ctx, &p, path, 1), FLASHCL_SUCCESS)) {
            for (size_t c = 0; c < 8; ++c) CHECK(isnan(p.o[o_index(&p.ref, 0, 0, row, c)]));
            CHECK(isnan(p.lse[row])); /* batch 0, head 0 */
            if (!compare_rows(&p, row)) {
                fprintf(stderr, "FAIL NaN in q (%s): rows the NaN does not touch changed\n", k_path_names[path]);
                tu_fail_count();
            }
            /* Batch 1 shares nothing with batch 0: its gradients stay finite. */
            size_t half_q = p.nq / 2, half_k = p.nk / 2;
            CHECK(all_finite(p.dq + half_q, half_q) && all_finite(p.dk + half_k, half_k) &&
                  all_finite(p.dv + half_k, half_k));
        }
        printf("NaN in q (%s): its O row and LSE are NaN, every other row matches the reference\n", k_path_names[path]);
        hp_free(&p);
    }
}

static void inf_in_v(flashcl_context *ctx) {
    const size_t key = 4, col = 5;
    for (int path = 0; path < 2; ++path) {
        host_problem p;
        hp_init(&p, 2, 2, 1, 6, 10, 8, 1, 0.0f, 1.0f, 15);
        p.v[((0 * 10 + key) * 1 + 0) * 8 + col] = INFINITY;
        if (CHECK_STATUS(hp_run(ctx, &p, path, 0), FLASHCL_SUCCESS)) {
            size_t bad = 0;
            for (size_t b = 0; b < 2; ++b)
                for (size_t h = 0; h < 2; ++h)
                    for (size_t r = 0; r < 6; ++r)
                        for (size_t c = 0; c < 8; ++c) {
                            float x = p.o[o_index(&p.ref, b, h, r, c)];
                            if (b == 0 && c == col && ref_visible_keys(&p.ref, r) > key) {
                                bad += !isfinite(x);
                                continue;
                            }
                            CHECK(isfinite(x));
                        }
            /* Rows that see the key carry the inf in that column. */
            CHECK(bad > 0);
            CHECK(all_finite(p.lse, p.nl));
        }
        printf("inf in v (%s): only column %zu of the rows that see key %zu is non-finite\n", k_path_names[path], col,
               key);
        hp_free(&p);
    }
}

/* dQ, dK, dV (packed [b, s, h, d]) against the reference's ([b, h, s, d]). */
static int compare_gradients(const host_problem *p) {
    const ref_problem *r = &p->ref;
    size_t nq = r->batch * r->heads_q * r->seqlen_q * r->head_dim,
           nk = r->batch * r->heads_kv * r->seqlen_k * r->head_dim;
    double *dq = calloc(nq, sizeof(double)), *dk = calloc(nk, sizeof(double)), *dv = calloc(nk, sizeof(double));
    REQUIRE(dq && dk && dv);
    flashcl_tensor z = {0};
    flashcl_tensor qv = ref_resolve_view(&z, r->seqlen_q, r->heads_q, r->head_dim);
    flashcl_tensor kv = ref_resolve_view(&z, r->seqlen_k, r->heads_kv, r->head_dim);
    ref_attention_backward(r, p->q, &qv, p->k, &kv, p->v, &kv, p->dout, &qv, dq, dk, dv);
    int ok = 1;
    for (size_t b = 0; b < r->batch; ++b)
        for (size_t c = 0; c < r->head_dim; ++c) {
            for (size_t h = 0; h < r->heads_q; ++h)
                for (size_t i = 0; i < r->seqlen_q; ++i)
                    ok &= close_to(p->dq[o_index(r, b, h, i, c)], dq[ref_o_index(r, b, h, i, c)], 1e-4, 1e-4);
            for (size_t h = 0; h < r->heads_kv; ++h)
                for (size_t j = 0; j < r->seqlen_k; ++j) {
                    size_t got = ((b * r->seqlen_k + j) * r->heads_kv + h) * r->head_dim + c;
                    size_t ref = ((b * r->heads_kv + h) * r->seqlen_k + j) * r->head_dim + c;
                    ok &= close_to(p->dk[got], dk[ref], 1e-4, 1e-4) && close_to(p->dv[got], dv[ref], 1e-4, 1e-4);
                }
        }
    free(dq), free(dk), free(dv);
    return ok;
}

static void negative_scale(flashcl_context *ctx) {
    for (int path = 0; path < 2; ++path) {
        host_problem p;
        hp_init(&p, 2, 4, 2, 7, 11, 8, 1, -0.7f, 1.0f, 16); /* GQA, causal */
        hp_reference(&p);
        if (CHECK_STATUS(hp_run(ctx, &p, path, 1), FLASHCL_SUCCESS)) {
            CHECK(compare_rows(&p, SIZE_MAX));
            CHECK(compare_gradients(&p));
        }
        hp_free(&p);
        hp_init(&p, 2, 2, 1, 9, 13, 2, 0, -1.0f, 100.0f, 17); /* logits up to 2e4, negated */
        hp_reference(&p);
        if (CHECK_STATUS(hp_run(ctx, &p, path, 0), FLASHCL_SUCCESS)) CHECK(compare_rows(&p, SIZE_MAX));
        printf("negative scale (%s): O, LSE and gradients match the reference, large logits too\n", k_path_names[path]);
        hp_free(&p);
    }
}

/* Sinks {bad, 0.25} on heads_q 2: head 0's O and LSE must be NaN in every row, head 1's finite. */
static void bad_sink_one(flashcl_context *ctx, size_t sq, float bad, const char *label) {
    host_problem p;
    hp_init(&p, 1, 2, 1, sq, 7, 16, 0, 0.0f, 1.0f, 19);
    const float sinks[2] = {bad, 0.25f};
    cl_int err = CL_SUCCESS;
    cl_mem buf = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof sinks,
                                (void *)sinks, &err);
    REQUIRE(err == CL_SUCCESS);
    p.desc.sinks = buf;
    if (CHECK_STATUS(flashcl_forward_host(ctx, &p.desc, p.q, p.k, p.v, p.o, p.lse), FLASHCL_SUCCESS)) {
        size_t head0_not_nan = 0, head1_not_finite = 0;
        for (size_t i = 0; i < sq; ++i) {
            for (size_t c = 0; c < 16; ++c) {
                head0_not_nan += !isnan(p.o[o_index(&p.ref, 0, 0, i, c)]);
                head1_not_finite += !isfinite(p.o[o_index(&p.ref, 0, 1, i, c)]);
            }
            head0_not_nan += !isnan(p.lse[i]);
            head1_not_finite += !isfinite(p.lse[sq + i]);
        }
        if (head0_not_nan || head1_not_finite) {
            fprintf(stderr, "FAIL sink %g, %s, seqlen_q %zu: %zu values of head 0 not NaN, %zu of head 1 not finite\n",
                    (double)bad, label, sq, head0_not_nan, head1_not_finite);
            tu_fail_count();
        }
    }
    clReleaseMemObject(buf);
    hp_free(&p);
}

static void bad_sink(void) {
    static const char *const tiles[] = {NULL, "kernel=rows", "kernel=tiles"};
    for (size_t t = 0; t < sizeof tiles / sizeof tiles[0]; ++t) {
        if (tiles[t])
            setenv("FLASHCL_TILE", tiles[t], 1);
        else
            unsetenv("FLASHCL_TILE");
        flashcl_context *ctx = tu_context_create(); /* plans are kept per context: a fresh one per setting */
        const size_t sqs[2] = {40, 3};              /* a long query and a decode-shaped one */
        for (size_t s = 0; s < 2; ++s) {
            if (tiles[t] && sqs[s] <= 16) continue; /* FLASHCL_TILE does not reach the decode family */
            bad_sink_one(ctx, sqs[s], NAN, tiles[t] ? tiles[t] : "default plan");
            bad_sink_one(ctx, sqs[s], INFINITY, tiles[t] ? tiles[t] : "default plan");
        }
        flashcl_context_destroy(ctx);
    }
    unsetenv("FLASHCL_TILE");
    printf("NaN or +inf sink: the head's O and LSE are NaN in every row, the other head finite\n");
}

int main(void) {
    flashcl_context *ctx = tu_context_create();
    large_logits(ctx);
    all_keys_masked(ctx);
    seqlen_one(ctx);
    nan_in_q(ctx);
    inf_in_v(ctx);
    negative_scale(ctx);
    flashcl_context_destroy(ctx);
    bad_sink();
    return tu_finish("test_edge_cases");
}
