/*
 * The `flashcl` command line on .npy files this test writes itself:
 * attention results against the reference (flash and --path standard, GQA,
 * causal, sq != sk, an explicit --scale), the gradients of --dout/--dq/--dk/
 * --dv against a double-precision backward written here, bad input rejected
 * with exit status 2, one line on stderr and no output file, and
 * `bench --json` with and without --backward. The variant flags (--dtype,
 * --window, --softcap, --alibi, --sinks/--dsinks, --dropout, --bias, --mask,
 * --block-mask, --cu-seqlens-q/k, d_v from V) are checked in cli_variants.c,
 * the KV-cache call and bench's decode and cache modes in cli_kvcache.c.
 *
 *   test_cli PATH_TO_FLASHCL_TOOL
 */
#define _POSIX_C_SOURCE 200809L /* WEXITSTATUS, mkfifo, symlink, lstat */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_harness.h"
#include "float16.h"
#include "npyio.h"
#include "problem.h"
#include "tmpdir.h"

static const char *g_tool;
char *cli_work;      /* inputs and outputs */
static char *g_logs; /* captured stdout/stderr, kept apart so the work dir stays exact */

/* A ring of buffers, enough for every path one command line names. */
char *cli_path_in(const char *dir, const char *name) {
    static char buf[16][1024];
    static int next;
    char *p = buf[next++ % 16];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    REQUIRE(f != NULL);
    size_t cap = 4096, len = 0;
    char *text = malloc(cap);
    REQUIRE(text != NULL);
    size_t got;
    while ((got = fread(text + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            cap *= 2;
            text = realloc(text, cap);
            REQUIRE(text != NULL);
        }
    }
    text[len] = '\0';
    fclose(f);
    return text;
}

int cli_run_tool(const char *args, char **out, char **err) {
    char cmd[4096];
    const char *out_path = cli_path_in(g_logs, "stdout.txt");
    const char *err_path = cli_path_in(g_logs, "stderr.txt");
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>'%s'", g_tool, args, out_path, err_path);
    int status = system(cmd);
    REQUIRE(status != -1 && WIFEXITED(status));
    *out = slurp(out_path);
    *err = slurp(err_path);
    return WEXITSTATUS(status);
}

/* Q [b, sq, hq, d]; K and V [b, sk, hkv, d]: packed BSHD host images, as the tool reads them. */
static void write_inputs(const tu_problem *p, const char *qname, const char *kname, const char *vname) {
    const ref_problem *r = &p->ref;
    size_t qs[4] = {r->batch, r->seqlen_q, r->heads_q, r->head_dim};
    size_t ks[4] = {r->batch, r->seqlen_k, r->heads_kv, r->head_dim};
    REQUIRE(npy_write_f32(cli_path_in(cli_work, qname), qs, 4, p->q.host));
    REQUIRE(npy_write_f32(cli_path_in(cli_work, kname), ks, 4, p->k.host));
    REQUIRE(npy_write_f32(cli_path_in(cli_work, vname), ks, 4, p->v.host));
}

static void check_outputs(const tu_problem *p, const char *label) {
    const ref_problem *r = &p->ref;
    size_t shape[NPY_MAX_RANK];
    int rank = 0;
    float *o = npy_read_f32(cli_path_in(cli_work, "O.npy"), shape, &rank);
    CHECK(o != NULL);
    if (o) {
        int shape_ok = rank == 4 && shape[0] == r->batch && shape[1] == r->seqlen_q && shape[2] == r->heads_q &&
                       shape[3] == r->head_dim;
        CHECK(shape_ok);
        flashcl_tensor view = flashcl_tensor_bshd(NULL, r->seqlen_q, r->heads_q, r->head_dim);
        if (shape_ok) tu_compare_o(label, r, o, &view, p->ref_o);
        free(o);
    }
    float *lse = npy_read_f32(cli_path_in(cli_work, "LSE.npy"), shape, &rank);
    CHECK(lse != NULL);
    if (lse) {
        int shape_ok = rank == 3 && shape[0] == r->batch && shape[1] == r->heads_q && shape[2] == r->seqlen_q;
        CHECK(shape_ok);
        if (shape_ok) tu_compare_lse(label, r, lse, p->ref_lse);
        free(lse);
    }
    remove(cli_path_in(cli_work, "O.npy"));
    remove(cli_path_in(cli_work, "LSE.npy"));
}

static void expect_success(const tu_problem *p, const char *extra, const char *label) {
    char args[2048], *out, *err;
    snprintf(args, sizeof args, "attention --q '%s' --k '%s' --v '%s' --out '%s' --lse '%s' %s",
             cli_path_in(cli_work, "Q.npy"), cli_path_in(cli_work, "K.npy"), cli_path_in(cli_work, "V.npy"),
             cli_path_in(cli_work, "O.npy"), cli_path_in(cli_work, "LSE.npy"), extra);
    int status = cli_run_tool(args, &out, &err);
    if (status != 0 || err[0]) {
        fprintf(stderr, "FAIL %s: exit status %d, stderr: %s\n", label, status, err);
        tu_fail_count();
    }
    if (status == 0) check_outputs(p, label);
    free(out);
    free(err);
}

/* Every file an attention call may write; none may exist after a refused call. */
static const char *const output_names[] = {"O.npy", "LSE.npy", "dQ.npy", "dK.npy", "dV.npy", "dsinks.npy"};
enum { OUTPUT_NAMES = sizeof output_names / sizeof output_names[0] };

void cli_expect_usage_error(const char *label, const char *args) { cli_expect_usage_error_naming(label, args, NULL); }

void cli_expect_usage_error_naming(const char *label, const char *args, const char *want) {
    char *out, *err;
    size_t before = tu_tmpdir_files(cli_work, NULL, NULL);
    int status = cli_run_tool(args, &out, &err);
    size_t lines = 0;
    for (const char *c = err; *c; c++) lines += *c == '\n';
    size_t len = strlen(err);
    int one_line = lines == 1 && len > 1 && err[len - 1] == '\n';
    if (status != 2 || !one_line) {
        fprintf(stderr, "FAIL %s: exit status %d (expected 2), stderr (%zu lines): %s\n", label, status, lines, err);
        tu_fail_count();
    } else if (want && !strstr(err, want)) {
        fprintf(stderr, "FAIL %s: the message does not name \"%s\": %s", label, want, err);
        tu_fail_count();
    } else {
        printf("%s: exit 2, %s", label, err);
    }
    int left = tu_tmpdir_files(cli_work, NULL, NULL) != before;
    for (size_t i = 0; i < OUTPUT_NAMES; i++) left |= tu_path_exists(cli_path_in(cli_work, output_names[i]));
    if (left) {
        fprintf(stderr, "FAIL %s: an output file was left behind\n", label);
        tu_fail_count();
        for (size_t i = 0; i < OUTPUT_NAMES; i++) remove(cli_path_in(cli_work, output_names[i]));
    }
    free(out);
    free(err);
}

/* A forward call on the named inputs, with --out and --lse, plus `extra`. */
static void expect_usage_error(const char *label, const char *q, const char *k, const char *v, const char *extra) {
    char args[2048];
    snprintf(args, sizeof args, "attention --q '%s' --k '%s' --v '%s' --out '%s' --lse '%s' %s",
             cli_path_in(cli_work, q), cli_path_in(cli_work, k), cli_path_in(cli_work, v),
             cli_path_in(cli_work, "O.npy"), cli_path_in(cli_work, "LSE.npy"), extra);
    cli_expect_usage_error(label, args);
}

static void check_bad_inputs(const tu_problem *p) {
    const ref_problem *r = &p->ref;
    size_t n_q = r->batch * r->seqlen_q * r->heads_q * r->head_dim;
    int64_t *ints = calloc(n_q, sizeof(int64_t));
    REQUIRE(ints != NULL);
    size_t qs[4] = {r->batch, r->seqlen_q, r->heads_q, r->head_dim};
    REQUIRE(npy_write_raw(cli_path_in(cli_work, "Q_i8.npy"), "<i8", qs, 4, ints, sizeof(int64_t)));
    free(ints);
    size_t q3[3] = {r->batch * r->seqlen_q, r->heads_q, r->head_dim};
    REQUIRE(npy_write_f32(cli_path_in(cli_work, "Q_rank3.npy"), q3, 3, p->q.host));
    /* Same element count as K, but head_dim halved. */
    size_t kd[4] = {r->batch, r->seqlen_k, r->heads_kv * 2, r->head_dim / 2};
    REQUIRE(npy_write_f32(cli_path_in(cli_work, "K_halfd.npy"), kd, 4, p->k.host));
    REQUIRE(npy_write_f32(cli_path_in(cli_work, "V_halfd.npy"), kd, 4, p->v.host));
    /* 3 kv heads cannot serve 4 query heads. */
    size_t n_k3 = r->batch * r->seqlen_k * 3 * r->head_dim;
    float *k3 = calloc(n_k3, sizeof(float));
    REQUIRE(k3 != NULL);
    size_t ks3[4] = {r->batch, r->seqlen_k, 3, r->head_dim};
    REQUIRE(npy_write_f32(cli_path_in(cli_work, "K_3heads.npy"), ks3, 4, k3));
    REQUIRE(npy_write_f32(cli_path_in(cli_work, "V_3heads.npy"), ks3, 4, k3));
    free(k3);

    expect_usage_error("missing file", "no_such_file.npy", "K.npy", "V.npy", "");
    /* A directory opens (fopen) but reading it fails: the read error, not a truncated file. */
    char dir_args[2048];
    snprintf(dir_args, sizeof dir_args, "attention --q '%s' --k '%s' --v '%s' --out '%s'", cli_work,
             cli_path_in(cli_work, "K.npy"), cli_path_in(cli_work, "V.npy"), cli_path_in(cli_work, "O.npy"));
    cli_expect_usage_error_naming("--q names a directory", dir_args, "Is a directory");
    expect_usage_error("int64 Q", "Q_i8.npy", "K.npy", "V.npy", "");
    expect_usage_error("rank-3 Q", "Q_rank3.npy", "K.npy", "V.npy", "");
    expect_usage_error("V shaped unlike K", "Q.npy", "K.npy", "V_halfd.npy", "");
    expect_usage_error("head_dim mismatch", "Q.npy", "K_halfd.npy", "V_halfd.npy", "");
    expect_usage_error("heads_q not a multiple of heads_kv", "Q.npy", "K_3heads.npy", "V_3heads.npy", "");
    expect_usage_error("unknown option", "Q.npy", "K.npy", "V.npy", "--bogus");
    expect_usage_error("--scale nan", "Q.npy", "K.npy", "V.npy", "--scale nan");
    expect_usage_error("--scale inf", "Q.npy", "K.npy", "V.npy", "--scale -inf");
    /* Finite in float32 but past FLASHCL_MAX_SCALE: a usage error too (it exited 1 with the library's status). */
    expect_usage_error("--scale beyond the bound", "Q.npy", "K.npy", "V.npy", "--scale -3e38");
    /* attention computes one path; --standard became --path standard. */
    expect_usage_error("--path both", "Q.npy", "K.npy", "V.npy", "--path both");
    expect_usage_error("--standard (retired)", "Q.npy", "K.npy", "V.npy", "--standard");
    /* A --device that names no device is a bad option (exit 2), like the others. */
    expect_usage_error("--device 99:99", "Q.npy", "K.npy", "V.npy", "--device 99:99");
}

/* O.npy of a causal call with the given Q file (K.npy, V.npy), or NULL with a failure counted. */
static float *output_for(const char *qname, size_t count) {
    char args[2048], *out, *err;
    snprintf(args, sizeof args, "attention --q '%s' --k '%s' --v '%s' --out '%s' --causal",
             cli_path_in(cli_work, qname), cli_path_in(cli_work, "K.npy"), cli_path_in(cli_work, "V.npy"),
             cli_path_in(cli_work, "O.npy"));
    const int status = cli_run_tool(args, &out, &err);
    float *o = NULL;
    size_t shape[NPY_MAX_RANK];
    int rank = 0;
    if (status != 0 || err[0])
        fprintf(stderr, "FAIL --q %s: exit status %d, stderr: %s\n", qname, status, err);
    else
        o = npy_read_f32(cli_path_in(cli_work, "O.npy"), shape, &rank);
    if (o && (rank != 4 || shape[0] * shape[1] * shape[2] * shape[3] != count)) {
        free(o);
        o = NULL;
    }
    if (!o) tu_fail_count();
    remove(cli_path_in(cli_work, "O.npy"));
    free(out);
    free(err);
    return o;
}

/* The forms numpy saves that are not little-endian float32 in C order (float64 is its default, a
   transposed array is saved in Fortran order): the tool reads each as float32 in C order, so O is
   bitwise the O of the float32 file with the same values. */
static void check_input_forms(const tu_problem *p) {
    const ref_problem *r = &p->ref;
    const size_t qs[4] = {r->batch, r->seqlen_q, r->heads_q, r->head_dim};
    const size_t n = qs[0] * qs[1] * qs[2] * qs[3];
    const float *q = p->q.host;
    double *wide = malloc(n * sizeof(double));
    unsigned char *big = malloc(n * 4);
    uint16_t *half = malloc(n * sizeof(uint16_t));
    float *rounded = malloc(n * sizeof(float));
    REQUIRE(wide && big && half && rounded);
    for (size_t i = 0; i < n; ++i) {
        wide[i] = q[i];
        const uint32_t u = flashcl__float_bits(q[i]);
        for (int k = 0; k < 4; ++k) big[i * 4 + (size_t)k] = (unsigned char)(u >> (24 - 8 * k)); /* '>f4' */
        half[i] = flashcl__float_to_f16(q[i]);
        rounded[i] = flashcl__f16_to_float(half[i]);
    }
    REQUIRE(npy_write_raw(cli_path_in(cli_work, "Q_f8.npy"), "<f8", qs, 4, wide, sizeof(double)));
    REQUIRE(npy_write_raw(cli_path_in(cli_work, "Q_be.npy"), ">f4", qs, 4, big, 4));
    REQUIRE(npy_write_raw(cli_path_in(cli_work, "Q_f2.npy"), "<f2", qs, 4, half, sizeof(uint16_t)));
    REQUIRE(npy_write_f32(cli_path_in(cli_work, "Q_f2_as_f4.npy"), qs, 4, rounded));
    REQUIRE(npy_write_f32_fortran(cli_path_in(cli_work, "Q_fortran.npy"), qs, 4, q));
    static const char *const pairs[][3] = {{"float64", "Q_f8.npy", "Q.npy"},
                                           {"big-endian float32", "Q_be.npy", "Q.npy"},
                                           {"float16", "Q_f2.npy", "Q_f2_as_f4.npy"},
                                           {"Fortran order", "Q_fortran.npy", "Q.npy"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; ++i) {
        float *got = output_for(pairs[i][1], n), *want = output_for(pairs[i][2], n);
        if (got && want && memcmp(got, want, n * sizeof(float)) != 0) {
            fprintf(stderr, "FAIL --q as %s: O differs from the float32 C-order file's\n", pairs[i][0]);
            tu_fail_count();
        }
        free(got);
        free(want);
    }
    free(wide);
    free(big);
    free(half);
    free(rounded);
}

/* ------------------------------------------------------------ backward */

/* Gradients in the packed layouts the tool writes: dq [b, sq, hq, d]; dk, dv [b, sk, hkv, d]. */
typedef struct grads {
    double *dq, *dk, *dv;
} grads;

/*
 * The backward of attention straight from its definition, in double:
 * P = softmax(scale QK^T + mask), dV = P^T dO, dP = dO V^T,
 * dS = P * (dP - rowsum(P * dP)), dQ = scale dS K, dK = scale dS^T Q,
 * with dK and dV summed over the query heads of each kv head. It recomputes
 * P per row and shares nothing with the kernels (no LSE, no D = rowsum(dO*O)).
 */
static grads ref_backward(const ref_problem *r, const float *q, const float *k, const float *v, const float *dout) {
    const size_t d = r->head_dim, hq = r->heads_q, hkv = r->heads_kv;
    const size_t sq = r->seqlen_q, sk = r->seqlen_k, group = hq / hkv;
    grads g;
    g.dq = calloc(r->batch * sq * hq * d, sizeof(double));
    g.dk = calloc(r->batch * sk * hkv * d, sizeof(double));
    g.dv = calloc(r->batch * sk * hkv * d, sizeof(double));
    double *prob = malloc(sk * sizeof(double)), *dp = malloc(sk * sizeof(double));
    REQUIRE(g.dq && g.dk && g.dv && prob && dp);
#define QI(b, s, h) ((((b)*sq + (s)) * hq + (h)) * d)
#define KI(b, s, h) ((((b)*sk + (s)) * hkv + (h)) * d)
    for (size_t b = 0; b < r->batch; b++) {
        for (size_t h = 0; h < hq; h++) {
            size_t kh = h / group;
            for (size_t i = 0; i < sq; i++) {
                /* Bottom-right causal alignment: key j is visible iff j + sq <= i + sk. */
                size_t visible = sk;
                if (r->causal) visible = i + sk + 1 > sq ? (i + sk + 1 - sq < sk ? i + sk + 1 - sq : sk) : 0;
                if (visible == 0) continue; /* O = 0: no gradient flows through this row */
                double m = -INFINITY, sum = 0.0, rowdot = 0.0;
                for (size_t j = 0; j < visible; j++) {
                    double dot = 0.0;
                    for (size_t c = 0; c < d; c++) dot += (double)q[QI(b, i, h) + c] * (double)k[KI(b, j, kh) + c];
                    prob[j] = r->scale * dot;
                    m = prob[j] > m ? prob[j] : m;
                }
                for (size_t j = 0; j < visible; j++) sum += prob[j] = exp(prob[j] - m);
                for (size_t j = 0; j < visible; j++) {
                    prob[j] /= sum;
                    double dot = 0.0;
                    for (size_t c = 0; c < d; c++) dot += (double)dout[QI(b, i, h) + c] * (double)v[KI(b, j, kh) + c];
                    dp[j] = dot;
                    rowdot += prob[j] * dot;
                }
                for (size_t j = 0; j < visible; j++) {
                    double ds = prob[j] * (dp[j] - rowdot);
                    for (size_t c = 0; c < d; c++) {
                        g.dq[QI(b, i, h) + c] += r->scale * ds * (double)k[KI(b, j, kh) + c];
                        g.dk[KI(b, j, kh) + c] += r->scale * ds * (double)q[QI(b, i, h) + c];
                        g.dv[KI(b, j, kh) + c] += prob[j] * (double)dout[QI(b, i, h) + c];
                    }
                }
            }
        }
    }
#undef QI
#undef KI
    free(prob);
    free(dp);
    return g;
}

static void grads_free(grads *g) {
    free(g->dq);
    free(g->dk);
    free(g->dv);
}

/*
 * Reads one gradient file and checks its shape and every element:
 * |got - ref| <= 5e-5 + 5e-4 * |ref|: float32 sums of at most sk (or sq
 * times the group size) products, with headroom over what POCL shows
 * (~5e-7) for other devices' summation orders; NaN always fails.
 * Removes the file.
 */
static void check_gradient(const char *label, const char *name, const size_t *want_shape, const double *ref) {
    size_t shape[NPY_MAX_RANK];
    int rank = 0;
    const char *path = cli_path_in(cli_work, name);
    float *got = npy_read_f32(path, shape, &rank);
    CHECK(got != NULL);
    if (got == NULL) return;
    int shape_ok = rank == 4 && memcmp(shape, want_shape, 4 * sizeof shape[0]) == 0;
    CHECK(shape_ok);
    size_t count = want_shape[0] * want_shape[1] * want_shape[2] * want_shape[3];
    double worst = 0.0, worst_ratio = 0.0;
    size_t worst_at = 0;
    for (size_t i = 0; shape_ok && i < count; i++) {
        double err = fabs((double)got[i] - ref[i]);
        double ratio = err / (5e-5 + 5e-4 * fabs(ref[i]));
        if (!(ratio <= worst_ratio)) { /* also catches NaN */
            worst_ratio = isnan(ratio) ? INFINITY : ratio;
            worst = err;
            worst_at = i;
        }
    }
    if (shape_ok && worst_ratio > 1.0) {
        fprintf(stderr, "FAIL %s %s: element %zu is %.9g, reference %.9g (error %.3g)\n", label, name, worst_at,
                (double)got[worst_at], ref[worst_at], worst);
        tu_fail_count();
    } else if (shape_ok) {
        printf("%s %s: max error %.3g\n", label, name, worst);
    }
    free(got);
    remove(path);
}

/* A backward case: the inputs (Q, K, V of p, and dO) are in the work dir. */
static void expect_backward_success(const tu_problem *p, const grads *ref, const char *dout_name, const char *extra,
                                    const char *label) {
    const ref_problem *r = &p->ref;
    char args[4096], *out, *err;
    snprintf(args, sizeof args,
             "attention --q '%s' --k '%s' --v '%s' --out '%s' --lse '%s' --dout '%s' --dq '%s' "
             "--dk '%s' --dv '%s' %s",
             cli_path_in(cli_work, "Q.npy"), cli_path_in(cli_work, "K.npy"), cli_path_in(cli_work, "V.npy"),
             cli_path_in(cli_work, "O.npy"), cli_path_in(cli_work, "LSE.npy"), cli_path_in(cli_work, dout_name),
             cli_path_in(cli_work, "dQ.npy"), cli_path_in(cli_work, "dK.npy"), cli_path_in(cli_work, "dV.npy"), extra);
    int status = cli_run_tool(args, &out, &err);
    if (status != 0 || err[0]) {
        fprintf(stderr, "FAIL %s: exit status %d, stderr: %s\n", label, status, err);
        tu_fail_count();
    }
    if (status == 0) {
        check_outputs(p, label); /* the forward results come with the gradients */
        size_t qs[4] = {r->batch, r->seqlen_q, r->heads_q, r->head_dim};
        size_t ks[4] = {r->batch, r->seqlen_k, r->heads_kv, r->head_dim};
        check_gradient(label, "dQ.npy", qs, ref->dq);
        check_gradient(label, "dK.npy", ks, ref->dk);
        check_gradient(label, "dV.npy", ks, ref->dv);
    }
    free(out);
    free(err);
}

/* Random dO for p, written as dO.npy; returned for the reference (caller frees). */
static float *write_dout(const tu_problem *p, const char *name, uint64_t seed) {
    const ref_problem *r = &p->ref;
    size_t n = r->batch * r->seqlen_q * r->heads_q * r->head_dim;
    float *dout = malloc(n * sizeof(float));
    REQUIRE(dout != NULL);
    tu_rng rng = tu_rng_seed(seed);
    for (size_t i = 0; i < n; i++) dout[i] = tu_rng_float(&rng, -1.0f, 1.0f);
    size_t qs[4] = {r->batch, r->seqlen_q, r->heads_q, r->head_dim};
    REQUIRE(npy_write_f32(cli_path_in(cli_work, name), qs, 4, dout));
    return dout;
}

/* Both paths on the problem whose Q, K, V are in the work dir. */
static void check_backward(const tu_problem *p, const char *extra, const char *what) {
    float *dout = write_dout(p, "dO.npy", 7);
    grads ref = ref_backward(&p->ref, p->q.host, p->k.host, p->v.host, dout);
    char label[256], args[256];
    snprintf(label, sizeof label, "backward %s (flash)", what);
    expect_backward_success(p, &ref, "dO.npy", extra, label);
    snprintf(label, sizeof label, "backward %s (standard)", what);
    snprintf(args, sizeof args, "%s --path standard", extra);
    expect_backward_success(p, &ref, "dO.npy", args, label);
    grads_free(&ref);
    free(dout);
}

/* --dout and the gradient outputs go together; dO must be shaped like Q. */
static void check_backward_errors(const tu_problem *p) {
    const ref_problem *r = &p->ref;
    /* dO shaped like K: same rank and dtype, the wrong shape. */
    size_t ks[4] = {r->batch, r->seqlen_k, r->heads_kv, r->head_dim};
    REQUIRE(npy_write_f32(cli_path_in(cli_work, "dO_like_K.npy"), ks, 4, p->k.host));
    float *dout = write_dout(p, "dO.npy", 7);
    free(dout);

    char grads_args[2048], dq_only[1024], args[4096];
    snprintf(grads_args, sizeof grads_args, "--dq '%s' --dk '%s' --dv '%s'", cli_path_in(cli_work, "dQ.npy"),
             cli_path_in(cli_work, "dK.npy"), cli_path_in(cli_work, "dV.npy"));
    snprintf(dq_only, sizeof dq_only, "--dq '%s'", cli_path_in(cli_work, "dQ.npy"));
    expect_usage_error("--dq without --dout", "Q.npy", "K.npy", "V.npy", dq_only);
    expect_usage_error("--dq --dk --dv without --dout", "Q.npy", "K.npy", "V.npy", grads_args);

    snprintf(args, sizeof args, "--dout '%s' %s", cli_path_in(cli_work, "dO_like_K.npy"), grads_args);
    expect_usage_error("dO shaped like K", "Q.npy", "K.npy", "V.npy", args);
    snprintf(args, sizeof args, "--dout '%s' %s", cli_path_in(cli_work, "no_such_dO.npy"), grads_args);
    expect_usage_error("missing dO", "Q.npy", "K.npy", "V.npy", args);
    snprintf(args, sizeof args, "--dout '%s' %s", cli_path_in(cli_work, "dO.npy"), dq_only);
    expect_usage_error("--dout without --dk and --dv", "Q.npy", "K.npy", "V.npy", args);
    snprintf(args, sizeof args, "--dout '%s' --dq '%s' --dk '%s' --dv '%s'", cli_path_in(cli_work, "dO.npy"),
             cli_path_in(cli_work, "dQ.npy"), cli_path_in(cli_work, "dK.npy"), cli_path_in(cli_work, "dQ.npy"));
    expect_usage_error("--dv same file as --dq", "Q.npy", "K.npy", "V.npy", args);
    /* The same destination spelled differently, before either file exists. */
    snprintf(args, sizeof args, "--dout '%s' --dq '%s' --dk '%s' --dv '%s/./dQ.npy'", cli_path_in(cli_work, "dO.npy"),
             cli_path_in(cli_work, "dQ.npy"), cli_path_in(cli_work, "dK.npy"), cli_work);
    expect_usage_error("--dv same file as --dq, spelled with ./", "Q.npy", "K.npy", "V.npy", args);
    /* An output over an input file (before, the input was silently replaced by the result). */
    snprintf(args, sizeof args, "--dout '%s' --dq '%s' --dk '%s' --dv '%s'", cli_path_in(cli_work, "dO.npy"),
             cli_path_in(cli_work, "dO.npy"), cli_path_in(cli_work, "dK.npy"), cli_path_in(cli_work, "dV.npy"));
    expect_usage_error("--dq over the --dout file", "Q.npy", "K.npy", "V.npy", args);
    snprintf(args, sizeof args, "attention --q '%s' --k '%s' --v '%s' --out '%s'", cli_path_in(cli_work, "Q.npy"),
             cli_path_in(cli_work, "K.npy"), cli_path_in(cli_work, "V.npy"), cli_path_in(cli_work, "Q.npy"));
    cli_expect_usage_error_naming("--out over the --q file", args, "is the input file of --q");
    snprintf(args, sizeof args, "--dout '%s' %s --path standard", cli_path_in(cli_work, "dO_like_K.npy"), grads_args);
    expect_usage_error("dO shaped like K, --path standard", "Q.npy", "K.npy", "V.npy", args);
    remove(cli_path_in(cli_work, "dO.npy"));
}

/* Outputs go to a temporary file renamed over the destination: a symbolic link is written through
   (its target replaced, the link kept), and what a rename must not replace is refused (a FIFO
   here; as root, --out /dev/null used to replace the device node). */
static void check_output_destinations(const tu_problem *p) {
    const ref_problem *r = &p->ref;
    char fifo[1024], link[1024], target[1024], args[4096];
    snprintf(fifo, sizeof fifo, "%s", cli_path_in(cli_work, "fifo.npy"));
    REQUIRE(mkfifo(fifo, 0600) == 0);
    snprintf(args, sizeof args, "attention --q '%s' --k '%s' --v '%s' --out '%s'", cli_path_in(cli_work, "Q.npy"),
             cli_path_in(cli_work, "K.npy"), cli_path_in(cli_work, "V.npy"), fifo);
    cli_expect_usage_error_naming("--out a FIFO", args, "is not a regular file");
    remove(fifo);

    snprintf(target, sizeof target, "%s", cli_path_in(cli_work, "target.npy"));
    snprintf(link, sizeof link, "%s", cli_path_in(cli_work, "link.npy"));
    size_t one[1] = {1};
    const float zero = 0.0f;
    REQUIRE(npy_write_f32(target, one, 1, &zero));
    REQUIRE(symlink("target.npy", link) == 0);
    snprintf(args, sizeof args, "attention --q '%s' --k '%s' --v '%s' --out '%s'", cli_path_in(cli_work, "Q.npy"),
             cli_path_in(cli_work, "K.npy"), cli_path_in(cli_work, "V.npy"), link);
    char *out = NULL, *err = NULL;
    const int rc = cli_run_tool(args, &out, &err);
    struct stat st;
    size_t shape[4] = {0};
    int rank = 0;
    float *o = rc == 0 ? npy_read_f32(target, shape, &rank) : NULL;
    if (rc != 0 || lstat(link, &st) != 0 || !S_ISLNK(st.st_mode) || !o || rank != 4 || shape[1] != r->seqlen_q ||
        shape[3] != r->head_dim) {
        fprintf(stderr, "FAIL --out through a symbolic link: exit %d, link kept %d, target rank %d (%s)\n", rc,
                lstat(link, &st) == 0 && S_ISLNK(st.st_mode), rank, err ? err : "");
        tu_fail_count();
    } else {
        printf("ok   --out through a symbolic link: the target written, the link kept\n");
    }
    free(o), free(out), free(err);
    remove(link), remove(target);
}

/* Counts the lines of out that contain every one of keys. */
static size_t lines_with(const char *out, const char *const *keys, size_t nkeys) {
    size_t complete = 0;
    for (const char *line = out; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char *copy = malloc(len + 1);
        REQUIRE(copy != NULL);
        memcpy(copy, line, len);
        copy[len] = '\0';
        size_t found = 0;
        for (size_t i = 0; i < nkeys; i++) found += strstr(copy, keys[i]) != NULL;
        complete += found == nkeys;
        free(copy);
        line += len + (end != NULL);
    }
    return complete;
}

/* The number after "key": on the line of out that contains all of `where`; -1 when absent. */
static double json_field(const char *out, const char *const *where, size_t nwhere, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    for (const char *line = out; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char *copy = malloc(len + 1);
        REQUIRE(copy != NULL);
        memcpy(copy, line, len);
        copy[len] = '\0';
        size_t found = 0;
        for (size_t i = 0; i < nwhere; i++) found += strstr(copy, where[i]) != NULL;
        const char *at = found == nwhere ? strstr(copy, pattern) : NULL;
        double value = at ? strtod(at + strlen(pattern), NULL) : -1.0;
        free(copy);
        if (at) return value;
        line += len + (end != NULL);
    }
    return -1.0;
}

static void check_bench(void) {
    char *out, *err;
    int status = cli_run_tool("bench --seqlen 64 --heads 2 --iters 2 --json", &out, &err);
    if (status != 0) {
        fprintf(stderr, "FAIL bench: exit status %d, stderr: %s\n", status, err);
        tu_fail_count();
    }
    static const char *const keys[] = {"\"path\"", "\"ms\"", "\"tflops\"", "\"gbps\"", "\"bytes_extra\""};
    static const char *const summary[] = {"\"summary\"", "\"speedup\":", "\"agree\":true"};
    size_t complete = lines_with(out, keys, sizeof keys / sizeof keys[0]);
    if (complete != 2 || lines_with(out, summary, 3) != 1) {
        fprintf(stderr,
                "FAIL bench --json: %zu lines with all of path/ms/tflops/gbps/bytes_extra (expected 2), "
                "or no summary with a speedup that agrees:\n%s",
                complete, out);
        tu_fail_count();
    } else {
        printf("bench --json: %zu result line(s)\n", complete);
    }
    free(out);
    free(err);
}

/* One line per (path, pass), a summary that says the gradients agree, flash's scratch O(N). */
static void check_bench_backward(void) {
    char *out, *err;
    int status = cli_run_tool("bench --backward --seqlen 64 --heads 2 --iters 1 --json", &out, &err);
    if (status != 0) {
        fprintf(stderr, "FAIL bench --backward: exit status %d, stderr: %s\n", status, err);
        tu_fail_count();
    }
    static const char *const keys[] = {"\"path\"", "\"pass\"", "\"ms\"", "\"tflops\"", "\"gbps\"", "\"bytes_extra\""};
    const size_t nkeys = sizeof keys / sizeof keys[0];
    static const char *const fwd_bwd[] = {"\"pass\"", "fwd+bwd"};
    static const char *const summary[] = {"\"summary\"", "\"agree\":true"};
    size_t complete = lines_with(out, keys, nkeys);
    size_t combined = lines_with(out, fwd_bwd, 2);
    /* Two paths times three passes: fwd, bwd, fwd+bwd. */
    if (complete != 6 || combined != 2 || lines_with(out, summary, 2) != 1) {
        fprintf(stderr,
                "FAIL bench --backward --json: %zu complete (path, pass) lines (expected 6), "
                "%zu fwd+bwd lines (expected 2), or no summary that agrees:\n%s",
                complete, combined, out);
        tu_fail_count();
    } else {
        printf("bench --backward --json: %zu (path, pass) lines\n", complete);
    }
    /* bytes_extra of the backward: flash holds O(N) (D, one float a row: 2 heads x 64 rows
     * here, allowing 4 floats a row; on a CPU also dense copies of Q, dO, K and V, rows
     * padded to chunks of at most 96 and dims to 72), standard O(N^2) (P and dS, 2 x 64 x 64
     * floats each). */
    static const char *const flash_bwd[] = {"\"path\":\"flash\"", "\"pass\":\"bwd\""};
    static const char *const std_bwd[] = {"\"path\":\"standard\"", "\"pass\":\"bwd\""};
    double flash_bytes = json_field(out, flash_bwd, 2, "bytes_extra");
    double std_bytes = json_field(out, std_bwd, 2, "bytes_extra");
    const double packed = 4.0 * 2 * 96 * 72 * sizeof(float);
    int scratch_ok = flash_bytes >= 0 && flash_bytes <= 2.0 * 64 * 4 * sizeof(float) + packed &&
                     std_bytes >= 2.0 * 2 * 64 * 64 * sizeof(float);
    if (!scratch_ok) {
        fprintf(stderr, "FAIL bench --backward: bytes_extra flash %g, standard %g\n", flash_bytes, std_bytes);
        tu_fail_count();
    }
    free(out);
    free(err);
}

/* --kernels: every (path, pass) line carries its kernels' device times, the pass's planned kernel
   among them ("kernel" names the backward's for bwd and fwd+bwd, "fwd_kernel" the forward's). */
static void check_bench_kernels(void) {
    char *out, *err;
    int status =
        cli_run_tool("bench --backward --kernels --path flash --seqlen 64 --heads 2 --iters 1 --json", &out, &err);
    if (status != 0) {
        fprintf(stderr, "FAIL bench --kernels: exit status %d, stderr: %s\n", status, err);
        tu_fail_count();
    }
    size_t lines = 0, named = 0;
    for (char *line = out; *line;) {
        char *end = strchr(line, '\n');
        if (end) *end = '\0';
        const char *kernel = strstr(line, "\"kernel\":\"");
        const char *kernels = strstr(line, "\"kernels\":[{\"name\":");
        if (strstr(line, "\"pass\"") && kernel) {
            ++lines;
            /* A plan of several kernels names them joined by '+' (the portable backward's
               "flash_bwd_dkdv_tiles+flash_bwd_dq_tiles"): each must have its time. */
            const char *name = kernel + strlen("\"kernel\":\"");
            const size_t len = strcspn(name, "\"");
            int all_timed = kernels != NULL && !strstr(kernels, "\"ms\":null");
            for (size_t at = 0; at < len && all_timed;) {
                const size_t part = strcspn(name + at, "+\"");
                char want[96];
                snprintf(want, sizeof want, "{\"name\":\"%.*s\",\"ms\":", (int)(part < 60 ? part : 60), name + at);
                if (!strstr(kernels, want)) {
                    fprintf(stderr, "FAIL bench --kernels: no %s with a time in: %s\n", want, line);
                    all_timed = 0;
                }
                at += part + 1;
            }
            if (all_timed)
                ++named;
            else if (kernels == NULL || strstr(kernels, "\"ms\":null"))
                fprintf(stderr, "FAIL bench --kernels: a kernel without a time in: %s\n", line);
        }
        if (!end) break;
        line = end + 1;
    }
    if (lines != 3 || named != 3) {
        fprintf(stderr, "FAIL bench --kernels --json: %zu pass lines (expected 3), %zu name their kernel\n", lines,
                named);
        tu_fail_count();
    } else {
        printf("bench --kernels: 3 passes, each naming its kernel with a time\n");
    }
    free(out);
    free(err);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_cli PATH_TO_FLASHCL_TOOL\n");
        return 2;
    }
    g_tool = argv[1];
    flashcl_context *ctx = tu_context_create(); /* skips (77) without a device */
    cli_work = tu_tmpdir_make("flashcl-cli-work");
    g_logs = tu_tmpdir_make("flashcl-cli-logs");

    tu_shape shape = tu_shape_make(2, 4, 2, 33, 65, 32, 1, TU_BSHD);
    tu_problem p;
    tu_problem_init(&p, flashcl_context_cl_context(ctx), &shape);
    write_inputs(&p, "Q.npy", "K.npy", "V.npy");
    expect_success(&p, "--causal", "attention (flash)");
    expect_success(&p, "--causal --path standard", "attention --path standard");
    expect_success(&p, "--causal --path flash", "attention --path flash");

    /* Same data (same seed), other scale: only the reference changes. */
    tu_shape scaled = shape;
    scaled.desc.scale = 0.5f;
    tu_problem ps;
    tu_problem_init(&ps, flashcl_context_cl_context(ctx), &scaled);
    expect_success(&ps, "--causal --scale 0.5", "attention --scale 0.5");
    tu_problem_free(&ps);
    /* A negative scale is a softmax of the negated logits, as flash_attn takes it. */
    scaled.desc.scale = -0.5f;
    tu_problem_init(&ps, flashcl_context_cl_context(ctx), &scaled);
    expect_success(&ps, "--causal --scale -0.5", "attention --scale -0.5");
    tu_problem_free(&ps);

    check_bad_inputs(&p);
    check_input_forms(&p);
    check_backward(&p, "--causal", "GQA causal sq<sk");
    check_backward_errors(&p);
    check_output_destinations(&p);

    /* MQA, causal, sq > sk: the first sq - sk query rows see no key at all,
     * so their O, LSE (-inf) and gradients take the empty-row rules. */
    tu_shape masked = tu_shape_make(1, 4, 1, 40, 24, 16, 1, TU_BSHD);
    masked.seed = 3;
    tu_problem pm;
    tu_problem_init(&pm, flashcl_context_cl_context(ctx), &masked);
    write_inputs(&pm, "Q.npy", "K.npy", "V.npy");
    check_backward(&pm, "--causal", "MQA causal sq>sk");
    tu_problem_free(&pm);

    check_bench();
    check_bench_backward();
    check_bench_kernels();

    cli_check_variants();
    cli_check_variant_errors();
    cli_check_bench_variants();

    cli_check_kvcache();
    cli_check_bench_decode();

    tu_problem_free(&p);
    flashcl_context_destroy(ctx);
    tu_tmpdir_remove(cli_work);
    tu_tmpdir_remove(g_logs);
    free(cli_work);
    free(g_logs);
    return tu_finish("test_cli");
}
