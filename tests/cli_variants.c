/*
 * `flashcl attention` with the variant flags, against the variant reference
 * (reference_variants.h): every feature at once with the backward and
 * --dsinks; varlen with causal and sinks; bf16 storage with a window. Then
 * bad variant flags and files (exit 2, one line naming the option, nothing
 * written), and `bench` with the variant flags.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_harness.h"
#include "grad_check.h"
#include "npyio.h"
#include "reference_variants.h"
#include "storage_types.h"
#include "testutil.h"
#include "variant_compare.h"

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    REQUIRE(p != NULL);
    return p;
}

static float *random_floats(size_t n, tu_rng *rng, float lo, float hi, flashcl_dtype dtype) {
    float *x = xcalloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = st_round(dtype, tu_rng_float(rng, lo, hi));
    return x;
}

static const char *work(const char *name) { return cli_path_in(cli_work, name); }

/* One CLI problem: the reference's description and the host arrays it reads. */
typedef struct cli_case {
    rv_problem r;
    flashcl_dtype dtype;
    float *q, *k, *v, *dout, *slopes, *sinks, *bias;
    unsigned char *mask, *block, *keep;
    int32_t cu_q[8], cu_k[8];
} cli_case;

static void case_free(cli_case *c) {
    void *all[] = {c->q, c->k, c->v, c->dout, c->slopes, c->sinks, c->bias, c->mask, c->block, c->keep};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* Writes Q, K, V and dO in the tool's layouts ([b, s, h, d], or [total, h, d] with varlen). */
static void write_qkv(cli_case *c, tu_rng *rng) {
    rv_problem *r = &c->r;
    size_t rq = rv_rows_q(r), rk = rv_rows_k(r);
    c->q = random_floats(rq * r->heads_q * r->head_dim, rng, -2.0f, 2.0f, c->dtype);
    c->k = random_floats(rk * r->heads_kv * r->head_dim, rng, -1.0f, 1.0f, c->dtype);
    c->v = random_floats(rk * r->heads_kv * r->head_dim_v, rng, -1.0f, 1.0f, c->dtype);
    c->dout = random_floats(rq * r->heads_q * r->head_dim_v, rng, -1.0f, 1.0f, c->dtype);
    int varlen = r->cu_q != NULL;
    size_t qs[4] = {r->batch, r->seqlen_q, r->heads_q, r->head_dim};
    size_t ks[4] = {r->batch, r->seqlen_k, r->heads_kv, r->head_dim};
    size_t vs[4] = {r->batch, r->seqlen_k, r->heads_kv, r->head_dim_v};
    size_t os[4] = {r->batch, r->seqlen_q, r->heads_q, r->head_dim_v};
    /* Varlen drops the batch dimension: the totals are seqlen_q/k. */
    int off = varlen ? 1 : 0, rank = varlen ? 3 : 4;
    REQUIRE(npy_write_f32(work("Q.npy"), qs + off, rank, c->q));
    REQUIRE(npy_write_f32(work("K.npy"), ks + off, rank, c->k));
    REQUIRE(npy_write_f32(work("V.npy"), vs + off, rank, c->v));
    REQUIRE(npy_write_f32(work("dO.npy"), os + off, rank, c->dout));
}

/* Reads an output, checks its shape, removes the file; NULL on failure (counted). */
static float *read_output(const char *name, const size_t *want, int want_rank, const char *label) {
    size_t shape[NPY_MAX_RANK];
    int rank = 0;
    float *got = npy_read_f32(work(name), shape, &rank);
    remove(work(name));
    if (got && rank == want_rank && memcmp(shape, want, (size_t)rank * sizeof shape[0]) == 0) return got;
    fprintf(stderr, "FAIL %s: %s missing or of the wrong shape (rank %d)\n", label, name, rank);
    tu_fail_count();
    free(got);
    return NULL;
}

static void check_gradients(cli_case *c, int rank, int off, int dsinks, const char *label);

/* Runs attention with `flags` and checks every output against the reference. */
static void run_and_check(cli_case *c, const char *flags, int backward, int dsinks, const char *label) {
    rv_problem *r = &c->r;
    int failures_before = tu_failures();
    char args[4096], *out, *err;
    int n = snprintf(args, sizeof args, "attention --q '%s' --k '%s' --v '%s' --out '%s' --lse '%s' %s", work("Q.npy"),
                     work("K.npy"), work("V.npy"), work("O.npy"), work("LSE.npy"), flags);
    if (backward)
        n += snprintf(args + n, sizeof args - (size_t)n, " --dout '%s' --dq '%s' --dk '%s' --dv '%s'", work("dO.npy"),
                      work("dQ.npy"), work("dK.npy"), work("dV.npy"));
    if (dsinks) snprintf(args + n, sizeof args - (size_t)n, " --dsinks '%s'", work("dsinks.npy"));
    int status = cli_run_tool(args, &out, &err);
    free(out);
    if (status != 0 || err[0]) {
        fprintf(stderr, "FAIL %s: exit status %d, stderr: %s\n", label, status, err);
        tu_fail_count();
        free(err);
        return;
    }
    free(err);

    int varlen = r->cu_q != NULL, rank = varlen ? 3 : 4, off = varlen ? 1 : 0;
    size_t nq = rv_rows_q(r) * r->heads_q;
    size_t os[4] = {r->batch, r->seqlen_q, r->heads_q, r->head_dim_v};
    size_t ls[3] = {r->batch, r->heads_q, r->seqlen_q}, lsv[2] = {r->heads_q, r->seqlen_q};
    double *ref_o = xcalloc(nq * r->head_dim_v, sizeof(double));
    double *ref_lse = xcalloc(rv_lse_count(r), sizeof(double));
    rv_forward(r, c->q, c->k, c->v, ref_o, ref_lse);
    float *o = read_output("O.npy", os + off, rank, label);
    float *lse = read_output("LSE.npy", varlen ? lsv : ls, varlen ? 2 : 3, label);
    int lowp = c->dtype == FLASHCL_DTYPE_F16 || c->dtype == FLASHCL_DTYPE_BF16;
    if (o && lowp) {
        rv_problem base = *r;
        base.round = c->dtype == FLASHCL_DTYPE_F16 ? st_round_f16 : st_round_bf16;
        double *base_o = xcalloc(nq * r->head_dim_v, sizeof(double));
        double *base_lse = xcalloc(rv_lse_count(r), sizeof(double));
        rv_forward(&base, c->q, c->k, c->v, base_o, base_lse);
        vcmp_lowp(label, "O", o, ref_o, base_o, nq * r->head_dim_v);
        free(base_o);
        free(base_lse);
    } else if (o) {
        vcmp_elementwise(label, "O", o, ref_o, nq * r->head_dim_v, 2e-5, 1e-4);
    }
    if (lse) vcmp_elementwise(label, "LSE", lse, ref_lse, rv_lse_count(r), 1e-5, 1e-5);
    free(o);
    free(lse);
    free(ref_o);
    free(ref_lse);
    if (backward) check_gradients(c, rank, off, dsinks, label);
    if (tu_failures() == failures_before)
        printf("%s: O, LSE%s match the reference\n", label,
               backward ? (dsinks ? ", dQ, dK, dV, dsinks" : ", dQ, dK, dV") : "");
}

/* dQ, dK, dV (and dsinks) of the tool against the reference backward. */
static void check_gradients(cli_case *c, int rank, int off, int dsinks, const char *label) {
    rv_problem *r = &c->r;
    size_t nq = rv_rows_q(r) * r->heads_q, nk = rv_rows_k(r) * r->heads_kv;

    double *ref[3] = {xcalloc(nq * r->head_dim, sizeof(double)), xcalloc(nk * r->head_dim, sizeof(double)),
                      xcalloc(nk * r->head_dim_v, sizeof(double))};
    double *ref_ds = xcalloc(r->heads_q, sizeof(double));
    rv_backward(r, c->q, c->k, c->v, c->dout, ref[0], ref[1], ref[2], ref_ds);
    size_t qs[4] = {r->batch, r->seqlen_q, r->heads_q, r->head_dim};
    size_t ks[4] = {r->batch, r->seqlen_k, r->heads_kv, r->head_dim};
    size_t vs[4] = {r->batch, r->seqlen_k, r->heads_kv, r->head_dim_v};
    const size_t *shapes[3] = {qs, ks, vs};
    static const char *files[3] = {"dQ.npy", "dK.npy", "dV.npy"};
    size_t counts[3] = {nq * r->head_dim, nk * r->head_dim, nk * r->head_dim_v};
    for (int t = 0; t < 3; t++) {
        float *g = read_output(files[t], shapes[t] + off, rank, label);
        if (g) vcmp_max_relative(label, files[t], g, ref[t], counts[t], GRAD_ABS_TOL, GRAD_REL_TOL);
        free(g);
        free(ref[t]);
    }
    if (dsinks) {
        size_t hs[1] = {r->heads_q};
        float *g = read_output("dsinks.npy", hs, 1, label);
        if (g) vcmp_max_relative(label, "dsinks", g, ref_ds, r->heads_q, GRAD_ABS_TOL, GRAD_REL_TOL);
        free(g);
    }
    free(ref_ds);
}

/* Every feature at once, f32, forward and backward with --dsinks. */
static void check_all_features(void) {
    cli_case c;
    memset(&c, 0, sizeof c);
    rv_problem *r = &c.r;
    const size_t b = 2, hq = 4, sq = 19, sk = 29;
    r->batch = b, r->heads_q = hq, r->heads_kv = 2, r->seqlen_q = sq, r->seqlen_k = sk;
    r->head_dim = 16, r->head_dim_v = 8, r->scale = 0.25;
    r->max_seqlen_q = sq, r->max_seqlen_k = sk;
    r->window = 1, r->window_left = 6, r->window_right = 3;
    r->softcap = 3.0;
    tu_rng rng = tu_rng_seed(21);
    write_qkv(&c, &rng);

    c.slopes = random_floats(b * hq, &rng, 0.05f, 0.8f, FLASHCL_DTYPE_F32);
    r->alibi_slopes = c.slopes, r->alibi_stride_batch = hq;
    size_t as[2] = {b, hq};
    REQUIRE(npy_write_f32(work("alibi.npy"), as, 2, c.slopes));
    c.sinks = random_floats(hq, &rng, -1.0f, 2.0f, FLASHCL_DTYPE_F32);
    r->sinks = c.sinks;
    size_t ss[1] = {hq};
    REQUIRE(npy_write_f32(work("sinks.npy"), ss, 1, c.sinks));
    /* Bias [1, hq, sq, sk] (broadcast over batch). */
    c.bias = random_floats(hq * sq * sk, &rng, -1.0f, 1.0f, FLASHCL_DTYPE_F32);
    r->bias = (rv_matrix){c.bias, 0, 0, sq * sk, sk};
    size_t bs[4] = {1, hq, sq, sk};
    REQUIRE(npy_write_f32(work("bias.npy"), bs, 4, c.bias));
    /* Mask [b, 1, sq, sk] as bool (broadcast over heads). */
    c.mask = xcalloc(b * sq * sk, 1);
    for (size_t e = 0; e < b * sq * sk; e++) c.mask[e] = tu_rng_float(&rng, 0.0f, 1.0f) < 0.8f;
    r->mask = (rv_matrix){c.mask, 0, sq * sk, 0, sk};
    size_t ms[4] = {b, 1, sq, sk};
    REQUIRE(npy_write_raw(work("mask.npy"), "|b1", ms, 4, c.mask, 1));
    /* Block mask [1, 1, 3, 4] at 8 x 8 as uint8. */
    static unsigned char block[12] = {1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0};
    r->block_mask = (rv_matrix){block, 0, 0, 0, 4};
    r->block_q = r->block_k = 8;
    size_t bms[4] = {1, 1, 3, 4};
    REQUIRE(npy_write_raw(work("block.npy"), "|u1", bms, 4, block, 1));
    /* Dropout's mask from the host Philox (test_variants checks the device's equals it). */
    r->dropout_p = (double)0.2f;
    c.keep = xcalloc(b * hq * sq * sk, 1);
    rv_dropout_mask(r, 5, 9, c.keep);
    r->keep = c.keep;

    char flags[2048];
    snprintf(flags, sizeof flags,
             "--scale 0.25 --window 6,3 --softcap 3 --alibi '%s' --sinks '%s' --dropout 0.2,5,9 "
             "--bias '%s' --mask '%s' --block-mask '%s' --block-size 8,8",
             work("alibi.npy"), work("sinks.npy"), work("bias.npy"), work("mask.npy"), work("block.npy"));
    run_and_check(&c, flags, 1, 1, "attention with every variant flag");
    case_free(&c);
}

/* Varlen with causal and sinks (one sequence has more queries than keys). */
static void check_varlen(void) {
    cli_case c;
    memset(&c, 0, sizeof c);
    rv_problem *r = &c.r;
    static const int32_t cu_q[4] = {0, 5, 17, 18}, cu_k[4] = {0, 9, 13, 20};
    memcpy(c.cu_q, cu_q, sizeof cu_q);
    memcpy(c.cu_k, cu_k, sizeof cu_k);
    r->batch = 3, r->heads_q = 2, r->heads_kv = 1, r->seqlen_q = 18, r->seqlen_k = 20;
    r->head_dim = r->head_dim_v = 16, r->scale = 0.25, r->causal = 1;
    r->cu_q = c.cu_q, r->cu_k = c.cu_k, r->max_seqlen_q = 12, r->max_seqlen_k = 9;
    tu_rng rng = tu_rng_seed(22);
    write_qkv(&c, &rng);
    c.sinks = random_floats(2, &rng, -1.0f, 2.0f, FLASHCL_DTYPE_F32);
    r->sinks = c.sinks;
    size_t ss[1] = {2}, cs[1] = {4};
    REQUIRE(npy_write_f32(work("sinks.npy"), ss, 1, c.sinks));
    REQUIRE(npy_write_raw(work("cu_q.npy"), "<i4", cs, 1, cu_q, 4));
    REQUIRE(npy_write_raw(work("cu_k.npy"), "<i4", cs, 1, cu_k, 4));
    char flags[1024];
    snprintf(flags, sizeof flags, "--causal --sinks '%s' --cu-seqlens-q '%s' --cu-seqlens-k '%s'", work("sinks.npy"),
             work("cu_q.npy"), work("cu_k.npy"));
    run_and_check(&c, flags, 1, 0, "attention varlen causal sinks");
    case_free(&c);
}

/* bf16 storage with a left window: FlashAttention's low-precision criterion. */
static void check_bf16(void) {
    cli_case c;
    memset(&c, 0, sizeof c);
    rv_problem *r = &c.r;
    c.dtype = FLASHCL_DTYPE_BF16;
    r->batch = 1, r->heads_q = 2, r->heads_kv = 2, r->seqlen_q = 17, r->seqlen_k = 23;
    r->head_dim = r->head_dim_v = 32, r->scale = 1.0 / sqrt(32.0);
    r->max_seqlen_q = 17, r->max_seqlen_k = 23;
    r->window = 1, r->window_left = 4, r->window_right = -1;
    tu_rng rng = tu_rng_seed(23);
    write_qkv(&c, &rng);
    /* A bias given as [sq, sk] alone: every batch and head (as the Python API takes it). */
    c.bias = random_floats(17 * 23, &rng, -1.0f, 1.0f, FLASHCL_DTYPE_F32);
    r->bias = (rv_matrix){c.bias, 0, 0, 0, 23};
    size_t bs[2] = {17, 23};
    REQUIRE(npy_write_f32(work("bias2d.npy"), bs, 2, c.bias));
    char flags[1024];
    snprintf(flags, sizeof flags, "--dtype bf16 --window 4,-1 --bias '%s'", work("bias2d.npy"));
    run_and_check(&c, flags, 0, 0, "attention --dtype bf16 --window 4,-1 --bias [sq, sk]");
    case_free(&c);
}

/*
 * The words that make data: --alibi standard against ALiBi's slopes written
 * here (the geometric sequence 2^(-8/n) of the nearest power of two n, then
 * every other slope of the sequence for 2n), and --varlen N against the
 * offsets of its rule (alternately a quarter above and below the mean, the
 * last sequence taking the rest).
 */
static void check_made_data(void) {
    cli_case c;
    memset(&c, 0, sizeof c);
    rv_problem *r = &c.r;
    static const int32_t cu_q[4] = {0, 7, 12, 18}, cu_k[4] = {0, 7, 12, 20};
    memcpy(c.cu_q, cu_q, sizeof cu_q);
    memcpy(c.cu_k, cu_k, sizeof cu_k);
    const size_t hq = 6;
    r->batch = 3, r->heads_q = hq, r->heads_kv = 3, r->seqlen_q = 18, r->seqlen_k = 20;
    r->head_dim = r->head_dim_v = 16, r->scale = 0.25, r->causal = 1;
    r->cu_q = c.cu_q, r->cu_k = c.cu_k, r->max_seqlen_q = 7, r->max_seqlen_k = 8;
    c.slopes = xcalloc(hq, sizeof(float));
    for (size_t h = 0; h < 4; h++) /* n = 4 */
        c.slopes[h] = (float)pow(2.0, -8.0 / 4 * (double)(h + 1));
    for (size_t h = 4; h < hq; h++) /* slopes 1, 3, ... of the sequence for 2n = 8 */
        c.slopes[h] = (float)pow(2.0, -8.0 / 8 * (double)(2 * (h - 4) + 1));
    r->alibi_slopes = c.slopes;
    tu_rng rng = tu_rng_seed(24);
    write_qkv(&c, &rng);
    run_and_check(&c, "--causal --alibi standard --varlen 3", 1, 0, "attention --alibi standard --varlen 3");
    case_free(&c);
}

void cli_check_variants(void) {
    check_all_features();
    check_varlen();
    check_bf16();
    check_made_data();
}

/* ------------------------------------------------------------- errors */

/* A refused forward call on the small problem's files, plus `extra`. */
static void refused(const char *label, const char *extra, const char *want, int varlen) {
    char args[4096];
    snprintf(args, sizeof args, "attention --q '%s' --k '%s' --v '%s' --out '%s' --lse '%s' %s",
             work(varlen ? "Qv.npy" : "Qe.npy"), work(varlen ? "Kv.npy" : "Ke.npy"), work(varlen ? "Vv.npy" : "Ve.npy"),
             work("O.npy"), work("LSE.npy"), extra);
    cli_expect_usage_error_naming(label, args, want);
}

void cli_check_variant_errors(void) {
    /* b=1 hq=2 hkv=1 sq=sk=8 d=16, and its varlen twin [8, h, 16]. */
    float zeros[2 * 8 * 16] = {0};
    size_t qs[4] = {1, 8, 2, 16}, ks[4] = {1, 8, 1, 16};
    REQUIRE(npy_write_f32(work("Qe.npy"), qs, 4, zeros));
    REQUIRE(npy_write_f32(work("Ke.npy"), ks, 4, zeros));
    REQUIRE(npy_write_f32(work("Ve.npy"), ks, 4, zeros));
    REQUIRE(npy_write_f32(work("Qv.npy"), qs + 1, 3, zeros));
    REQUIRE(npy_write_f32(work("Kv.npy"), ks + 1, 3, zeros));
    REQUIRE(npy_write_f32(work("Vv.npy"), ks + 1, 3, zeros));
    size_t three[1] = {3}, two[1] = {2}, one[1] = {1};
    REQUIRE(npy_write_f32(work("slopes3.npy"), three, 1, zeros));
    REQUIRE(npy_write_raw(work("slopes_i4.npy"), "<i4", two, 1, zeros, 4));
    REQUIRE(npy_write_f32(work("sinks1.npy"), one, 1, zeros));
    REQUIRE(npy_write_f32(work("sinks2.npy"), two, 1, zeros));
    size_t bias_bad[4] = {1, 2, 8, 7}, mask_ok[4] = {1, 1, 8, 8}, bm[4] = {1, 1, 2, 2};
    REQUIRE(npy_write_f32(work("bias_bad.npy"), bias_bad, 4, zeros));
    REQUIRE(npy_write_raw(work("mask_i4.npy"), "<i4", mask_ok, 4, zeros, 4));
    unsigned char bytes[64] = {0};
    bytes[5] = 2; /* not a bool */
    REQUIRE(npy_write_raw(work("mask_bad_bool.npy"), "|b1", mask_ok, 4, bytes, 1));
    REQUIRE(npy_write_raw(work("bm.npy"), "|u1", bm, 4, bytes, 1));
    static const int32_t cu_good[3] = {0, 3, 8}, cu_not0[3] = {1, 3, 8}, cu_short[3] = {0, 3, 7},
                         cu_down[3] = {0, 5, 3};
    REQUIRE(npy_write_raw(work("cu.npy"), "<i4", three, 1, cu_good, 4));
    REQUIRE(npy_write_raw(work("cu_not0.npy"), "<i4", three, 1, cu_not0, 4));
    REQUIRE(npy_write_raw(work("cu_short.npy"), "<i4", three, 1, cu_short, 4));
    REQUIRE(npy_write_raw(work("cu_down.npy"), "<i4", three, 1, cu_down, 4));
    REQUIRE(npy_write_f32(work("cu_f4.npy"), three, 1, zeros));

    char x[1024];
    refused("--window one number", "--window 3", "--window", 0);
    refused("--window -2,0", "--window -2,0", "--window", 0);
    refused("--window words", "--window a,b", "--window", 0);
    refused("--softcap -1", "--softcap -1", "--softcap", 0);
    refused("--softcap nan", "--softcap nan", "--softcap", 0);
    /* Finite, but past the library's 1e37: a usage error, not the library's exit 1. */
    refused("--softcap 1e38", "--softcap 1e38", "--softcap", 0);
    /* The standard path takes no variant and no separate V head dim: a usage error as in bench, not the
       library's refusal (exit 1). */
    refused("attention --path standard --softcap 2", "--path standard --softcap 2", "--path standard", 0);
    refused("attention --path standard --dtype bf16", "--path standard --dtype bf16", "this call uses: bf16", 0);
    size_t vs8[4] = {1, 8, 1, 8};
    REQUIRE(npy_write_f32(work("Ve_dv8.npy"), vs8, 4, zeros));
    snprintf(x, sizeof x, "attention --q '%s' --k '%s' --v '%s' --out '%s' --path standard", work("Qe.npy"),
             work("Ke.npy"), work("Ve_dv8.npy"), work("O.npy"));
    cli_expect_usage_error_naming("attention --path standard, d_v 8 != d 16", x, "d_v=8");
    refused("--dropout 1", "--dropout 1", "--dropout", 0);
    refused("--dropout bad seed", "--dropout 0.5,x", "--dropout", 0);
    refused("--dropout four fields", "--dropout 0.1,1,2,3", "--dropout", 0);
    refused("--dtype f64", "--dtype f64", "--dtype", 0);
    snprintf(x, sizeof x, "--block-mask '%s'", work("bm.npy"));
    refused("--block-mask without --block-size", x, "--block-size", 0);
    refused("--block-size without --block-mask", "--block-size 4,4", "--block-size", 0);
    snprintf(x, sizeof x, "--block-mask '%s' --block-size 0,4", work("bm.npy"));
    refused("--block-size 0,4", x, "--block-size", 0);
    snprintf(x, sizeof x, "--block-mask '%s' --block-size 3,4", work("bm.npy"));
    refused("--block-mask of the wrong block count", x, "--block-mask", 0);
    snprintf(x, sizeof x, "--dsinks '%s'", work("dsinks.npy"));
    refused("--dsinks without --sinks", x, "--dsinks", 0);
    snprintf(x, sizeof x, "--sinks '%s' --dsinks '%s'", work("sinks2.npy"), work("dsinks.npy"));
    refused("--dsinks without --dout", x, "--dsinks", 0);
    REQUIRE(npy_write_f32(work("dOe.npy"), qs, 4, zeros));
    snprintf(x, sizeof x, "--sinks '%s' --dout '%s' --dq '%s' --dk '%s' --dv '%s' --dsinks '%s'", work("sinks2.npy"),
             work("dOe.npy"), work("dQ.npy"), work("dK.npy"), work("dV.npy"), work("O.npy"));
    refused("--dsinks same file as --out", x, "--dsinks", 0);
    snprintf(x, sizeof x, "--alibi '%s'", work("slopes3.npy"));
    refused("--alibi [3] for 2 heads", x, "--alibi", 0);
    snprintf(x, sizeof x, "--alibi '%s'", work("slopes_i4.npy"));
    refused("--alibi int32", x, "--alibi", 0);
    snprintf(x, sizeof x, "--sinks '%s'", work("sinks1.npy"));
    refused("--sinks [1] for 2 heads", x, "--sinks", 0);
    snprintf(x, sizeof x, "--bias '%s'", work("bias_bad.npy"));
    refused("--bias [1, 2, 8, 7]", x, "--bias", 0);
    size_t bias2_bad[2] = {8, 7};
    REQUIRE(npy_write_f32(work("bias2_bad.npy"), bias2_bad, 2, zeros));
    snprintf(x, sizeof x, "--bias '%s'", work("bias2_bad.npy"));
    refused("--bias [8, 7]", x, "--bias", 0);
    snprintf(x, sizeof x, "--out '%s'", work("O2.npy"));
    refused("--out twice", x, "--out", 0);
    refused("--softcap twice", "--softcap 3 --softcap=5", "--softcap", 0);
    refused("--causal twice", "--causal --causal", "--causal", 0);
    snprintf(x, sizeof x, "--mask '%s'", work("mask_i4.npy"));
    refused("--mask int32", x, "--mask", 0);
    snprintf(x, sizeof x, "--mask '%s'", work("mask_bad_bool.npy"));
    refused("--mask bool holding 2", x, "--mask", 0);
    snprintf(x, sizeof x, "--cu-seqlens-q '%s'", work("cu.npy"));
    refused("--cu-seqlens-q without -k", x, "--cu-seqlens", 1);
    snprintf(x, sizeof x, "--cu-seqlens-q '%s' --cu-seqlens-k '%s'", work("cu_not0.npy"), work("cu.npy"));
    refused("--cu-seqlens-q not from 0", x, "--cu-seqlens-q", 1);
    snprintf(x, sizeof x, "--cu-seqlens-q '%s' --cu-seqlens-k '%s'", work("cu.npy"), work("cu_short.npy"));
    refused("--cu-seqlens-k short of the total", x, "--cu-seqlens-k", 1);
    snprintf(x, sizeof x, "--cu-seqlens-q '%s' --cu-seqlens-k '%s'", work("cu_down.npy"), work("cu.npy"));
    refused("--cu-seqlens-q decreasing", x, "--cu-seqlens-q", 1);
    snprintf(x, sizeof x, "--cu-seqlens-q '%s' --cu-seqlens-k '%s'", work("cu_f4.npy"), work("cu.npy"));
    refused("--cu-seqlens-q float32", x, "--cu-seqlens-q", 1);
    snprintf(x, sizeof x, "--cu-seqlens-q '%s' --cu-seqlens-k '%s'", work("cu.npy"), work("cu.npy"));
    refused("varlen with 4-D Q", x, "--q", 0);
}

/* -------------------------------------------------------------- bench */

void cli_check_bench_variants(void) {
    char *out, *err;
    int status =
        cli_run_tool("bench --seqlen 64 --heads 2 --head-dim 32 --iters 1 --json --window 16,0 --softcap 5 "
                     "--alibi standard --sinks random --dropout 0.1 --bias random --mask random --block-sparse 0.5 "
                     "--block-size 16 --head-dim-v 16",
                     &out, &err);
    if (status != 0) {
        fprintf(stderr, "FAIL bench with variants: exit status %d, stderr: %s\n", status, err);
        tu_fail_count();
    } else {
        /* Flash with the features next to plain flash; the standard path cannot run them. */
        int with = strstr(out, "\"path\":\"flash+variants\"") != NULL;
        int plain = strstr(out, "\"path\":\"flash\"") != NULL;
        int features = strstr(out, "\"features\":\"") != NULL && strstr(out, "softcap") != NULL &&
                       strstr(out, "block-sparse") != NULL;
        if (!with || !plain || !features) {
            fprintf(stderr, "FAIL bench with variants: flash+variants %d, flash %d, features %d:\n%s", with, plain,
                    features, out);
            tu_fail_count();
        } else {
            printf("bench with variants: both flash lines and the features\n");
        }
    }
    free(out);
    free(err);
    /* The grammar attention takes: a slopes file, dropout with a seed, BQ,BK blocks. */
    float slopes[2] = {0.5f, 0.25f};
    size_t two[1] = {2};
    REQUIRE(npy_write_f32(work("bench_slopes.npy"), two, 1, slopes));
    char args[1024];
    snprintf(args, sizeof args,
             "bench --seqlen 48 --heads 2 --head-dim 16 --iters 1 --json --backward --alibi '%s' "
             "--dropout 0.1,7,3 --block-sparse 0.25 --block-size 16,32",
             work("bench_slopes.npy"));
    status = cli_run_tool(args, &out, &err);
    if (status != 0 || !strstr(out, "alibi(file)") || !strstr(out, "block-sparse=0.25/16x32") ||
        !strstr(out, "\"cost\":{")) {
        fprintf(stderr, "FAIL bench with a slopes file: exit status %d, stderr: %s, stdout:\n%s", status, err, out);
        tu_fail_count();
    } else {
        printf("bench with a slopes file, a dropout seed and 16x32 blocks\n");
    }
    free(out);
    free(err);
    remove(work("bench_slopes.npy"));

    static const struct {
        const char *args, *want;
    } refused[] = {{"bench --block-sparse 1.5 --block-size 16", "--block-sparse"},
                   {"bench --alibi --sinks random", "--alibi"},
                   {"bench --dropout 0.1,x", "--dropout"},
                   {"bench --window 16,0 --path standard", "--path standard"},
                   /* Named as attention names it: the dtype is what the standard path refuses here. */
                   {"bench --dtype f16 --path standard", "this call uses: f16"},
                   {"bench --no-plain", "--no-plain"}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        status = cli_run_tool(refused[i].args, &out, &err);
        if (status != 2 || !strstr(err, refused[i].want)) {
            fprintf(stderr, "FAIL %s: exit %d, stderr: %s\n", refused[i].args, status, err);
            tu_fail_count();
        } else {
            printf("%s: exit 2, %s", refused[i].args, err);
        }
        free(out);
        free(err);
    }
}
