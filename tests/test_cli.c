/*
 * The `flashcl` command line on .npy files this test writes itself:
 * attention results against the reference (flash and --standard, GQA,
 * causal, sq != sk, an explicit --scale), bad input rejected with exit
 * status 2, one line on stderr and no output file, and `bench --json`.
 *
 *   test_cli PATH_TO_FLASHCL_TOOL
 */
#define _POSIX_C_SOURCE 200809L /* WEXITSTATUS */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "npyio.h"
#include "problem.h"
#include "tmpdir.h"

static const char *g_tool;
static char *g_work; /* inputs and outputs */
static char *g_logs; /* captured stdout/stderr, kept apart so the work dir stays exact */

static char *path_in(const char *dir, const char *name)
{
    static char buf[8][1024];
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

static char *slurp(const char *path)
{
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

/* Runs the tool with `args`; returns its exit status, output in *out / *err (malloc'd). */
static int run_tool(const char *args, char **out, char **err)
{
    char cmd[4096];
    const char *out_path = path_in(g_logs, "stdout.txt");
    const char *err_path = path_in(g_logs, "stderr.txt");
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>'%s'", g_tool, args, out_path, err_path);
    int status = system(cmd);
    REQUIRE(status != -1 && WIFEXITED(status));
    *out = slurp(out_path);
    *err = slurp(err_path);
    return WEXITSTATUS(status);
}

/* Q [b, sq, hq, d]; K and V [b, sk, hkv, d]: packed BSHD host images, as the tool reads them. */
static void write_inputs(const tu_problem *p, const char *qname, const char *kname,
                         const char *vname)
{
    const ref_problem *r = &p->ref;
    size_t qs[4] = {r->batch, r->seqlen_q, r->heads_q, r->head_dim};
    size_t ks[4] = {r->batch, r->seqlen_k, r->heads_kv, r->head_dim};
    REQUIRE(npy_write_f32(path_in(g_work, qname), qs, 4, p->q.host));
    REQUIRE(npy_write_f32(path_in(g_work, kname), ks, 4, p->k.host));
    REQUIRE(npy_write_f32(path_in(g_work, vname), ks, 4, p->v.host));
}

static void check_outputs(const tu_problem *p, const char *label)
{
    const ref_problem *r = &p->ref;
    size_t shape[NPY_MAX_RANK];
    int rank = 0;
    float *o = npy_read_f32(path_in(g_work, "O.npy"), shape, &rank);
    CHECK(o != NULL);
    if (o) {
        int shape_ok = rank == 4 && shape[0] == r->batch && shape[1] == r->seqlen_q &&
                       shape[2] == r->heads_q && shape[3] == r->head_dim;
        CHECK(shape_ok);
        flashcl_tensor view = flashcl_tensor_bshd(NULL, r->seqlen_q, r->heads_q, r->head_dim);
        if (shape_ok)
            tu_compare_o(label, r, o, &view, p->ref_o);
        free(o);
    }
    float *lse = npy_read_f32(path_in(g_work, "LSE.npy"), shape, &rank);
    CHECK(lse != NULL);
    if (lse) {
        int shape_ok = rank == 3 && shape[0] == r->batch && shape[1] == r->heads_q &&
                       shape[2] == r->seqlen_q;
        CHECK(shape_ok);
        if (shape_ok)
            tu_compare_lse(label, r, lse, p->ref_lse);
        free(lse);
    }
    remove(path_in(g_work, "O.npy"));
    remove(path_in(g_work, "LSE.npy"));
}

static void expect_success(const tu_problem *p, const char *extra, const char *label)
{
    char args[2048], *out, *err;
    snprintf(args, sizeof args, "attention --q '%s' --k '%s' --v '%s' --out '%s' --lse '%s' %s",
             path_in(g_work, "Q.npy"), path_in(g_work, "K.npy"), path_in(g_work, "V.npy"),
             path_in(g_work, "O.npy"), path_in(g_work, "LSE.npy"), extra);
    int status = run_tool(args, &out, &err);
    if (status != 0 || err[0]) {
        fprintf(stderr, "FAIL %s: exit status %d, stderr: %s\n", label, status, err);
        tu_fail_count();
    }
    if (status == 0)
        check_outputs(p, label);
    free(out);
    free(err);
}

/* Exit status 2, exactly one line on stderr, and nothing new in the work dir. */
static void expect_usage_error(const char *label, const char *q, const char *k, const char *extra)
{
    char args[2048], *out, *err;
    snprintf(args, sizeof args, "attention --q '%s' --k '%s' --v '%s' --out '%s' --lse '%s' %s",
             path_in(g_work, q), path_in(g_work, k), path_in(g_work, "V.npy"),
             path_in(g_work, "O.npy"), path_in(g_work, "LSE.npy"), extra);
    size_t before = tu_tmpdir_files(g_work, NULL, NULL);
    int status = run_tool(args, &out, &err);
    size_t lines = 0;
    for (const char *c = err; *c; c++)
        lines += *c == '\n';
    size_t len = strlen(err);
    int one_line = lines == 1 && len > 1 && err[len - 1] == '\n';
    if (status != 2 || !one_line) {
        fprintf(stderr, "FAIL %s: exit status %d (expected 2), stderr (%zu lines): %s\n", label,
                status, lines, err);
        tu_fail_count();
    } else {
        printf("%s: exit 2, %s", label, err);
    }
    if (tu_path_exists(path_in(g_work, "O.npy")) || tu_path_exists(path_in(g_work, "LSE.npy")) ||
        tu_tmpdir_files(g_work, NULL, NULL) != before) {
        fprintf(stderr, "FAIL %s: an output file was left behind\n", label);
        tu_fail_count();
        remove(path_in(g_work, "O.npy"));
        remove(path_in(g_work, "LSE.npy"));
    }
    free(out);
    free(err);
}

static void check_bad_inputs(const tu_problem *p)
{
    const ref_problem *r = &p->ref;
    size_t n_q = r->batch * r->seqlen_q * r->heads_q * r->head_dim;
    double *wide = calloc(n_q, sizeof(double));
    REQUIRE(wide != NULL);
    size_t qs[4] = {r->batch, r->seqlen_q, r->heads_q, r->head_dim};
    REQUIRE(npy_write_raw(path_in(g_work, "Q_f8.npy"), "<f8", qs, 4, wide, sizeof(double)));
    free(wide);
    size_t q3[3] = {r->batch * r->seqlen_q, r->heads_q, r->head_dim};
    REQUIRE(npy_write_f32(path_in(g_work, "Q_rank3.npy"), q3, 3, p->q.host));
    /* Same element count as K, but head_dim halved. */
    size_t kd[4] = {r->batch, r->seqlen_k, r->heads_kv * 2, r->head_dim / 2};
    REQUIRE(npy_write_f32(path_in(g_work, "K_halfd.npy"), kd, 4, p->k.host));
    /* 3 kv heads cannot serve 4 query heads. */
    size_t n_k3 = r->batch * r->seqlen_k * 3 * r->head_dim;
    float *k3 = calloc(n_k3, sizeof(float));
    REQUIRE(k3 != NULL);
    size_t ks3[4] = {r->batch, r->seqlen_k, 3, r->head_dim};
    REQUIRE(npy_write_f32(path_in(g_work, "K_3heads.npy"), ks3, 4, k3));
    free(k3);

    expect_usage_error("missing file", "no_such_file.npy", "K.npy", "");
    expect_usage_error("float64 Q", "Q_f8.npy", "K.npy", "");
    expect_usage_error("rank-3 Q", "Q_rank3.npy", "K.npy", "");
    expect_usage_error("head_dim mismatch", "Q.npy", "K_halfd.npy", "");
    expect_usage_error("heads_q not a multiple of heads_kv", "Q.npy", "K_3heads.npy", "");
    expect_usage_error("unknown option", "Q.npy", "K.npy", "--bogus");
    expect_usage_error("--scale nan", "Q.npy", "K.npy", "--scale nan");
    expect_usage_error("--scale -1", "Q.npy", "K.npy", "--scale -1");
}

static void check_bench(void)
{
    char *out, *err;
    int status = run_tool("bench --seqlen 64 --heads 2 --iters 2 --json", &out, &err);
    if (status != 0) {
        fprintf(stderr, "FAIL bench: exit status %d, stderr: %s\n", status, err);
        tu_fail_count();
    }
    static const char *keys[] = {"\"path\"", "\"ms\"", "\"tflops\"", "\"gbps\"", "\"bytes_extra\""};
    size_t complete = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        size_t found = 0;
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            found += strstr(line, keys[i]) != NULL;
        complete += found == sizeof keys / sizeof keys[0];
    }
    if (complete == 0) {
        fprintf(stderr, "FAIL bench --json: no line has all of path/ms/tflops/gbps/bytes_extra\n");
        tu_fail_count();
    } else {
        printf("bench --json: %zu result line(s)\n", complete);
    }
    free(out);
    free(err);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_cli PATH_TO_FLASHCL_TOOL\n");
        return 2;
    }
    g_tool = argv[1];
    flashcl_context *ctx = tu_context_create(); /* skips (77) without a device */
    g_work = tu_tmpdir_make("flashcl-cli-work");
    g_logs = tu_tmpdir_make("flashcl-cli-logs");

    tu_shape shape = tu_shape_make(2, 4, 2, 33, 65, 32, 1, TU_BSHD);
    tu_problem p;
    tu_problem_init(&p, flashcl_context_cl_context(ctx), &shape);
    write_inputs(&p, "Q.npy", "K.npy", "V.npy");
    expect_success(&p, "--causal", "attention (flash)");
    expect_success(&p, "--causal --standard", "attention --standard");

    /* Same data (same seed), other scale: only the reference changes. */
    tu_shape scaled = shape;
    scaled.desc.scale = 0.5f;
    tu_problem ps;
    tu_problem_init(&ps, flashcl_context_cl_context(ctx), &scaled);
    expect_success(&ps, "--causal --scale 0.5", "attention --scale 0.5");
    tu_problem_free(&ps);

    check_bad_inputs(&p);
    check_bench();

    tu_problem_free(&p);
    flashcl_context_destroy(ctx);
    tu_tmpdir_remove(g_work);
    tu_tmpdir_remove(g_logs);
    free(g_work);
    free(g_logs);
    return tu_finish("test_cli");
}
