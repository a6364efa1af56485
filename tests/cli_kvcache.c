/*
 * `flashcl attention` with a KV cache (--k-cache and its companions) against
 * the double-precision reference, and `bench` in its decode and KV-cache
 * modes. The attention cases: a contiguous cache with left padding and
 * cache_batch_idx; a paged cache (pages shuffled in the pool, spare pages)
 * with rows appended and rotated (GPT-NeoX and GPT-J), causal, MQA, d_v != d;
 * an fp8 e4m3 cache with per-head and per-tensor scales. The cache after the
 * call (--k-cache-out, --v-cache-out) is checked against the host's append.
 * The reference attends over each sequence's keys as one sequence of a
 * varlen batch (reference_variants.h), from values this file computes itself
 * (the appended rows rotated here in float, as the library's kernel does).
 * Then bad inputs: shapes and dtypes refused by the tool (exit 2), table
 * values refused by the library (exit 1, the message names the field), no
 * output written either way.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_harness.h"
#include "npyio.h"
#include "reference_variants.h"
#include "testutil.h"
#include "tmpdir.h"
#include "variant_compare.h"

#define MAXB 3
#define MAX_TABLE 32

static const char *work(const char *name) { return cli_path_in(cli_work, name); }

static float *floats(size_t n) {
    float *x = calloc(n ? n : 1, sizeof(float));
    REQUIRE(x != NULL);
    return x;
}

typedef struct kv_cli_case {
    const char *label;
    size_t b, hq, hkv, sq, d, dv;
    int paged;
    size_t slots, rows, max_pages; /* pool: pages x page size, or cache sequences x capacity */
    int32_t table[MAX_TABLE];
    int32_t seqlens[MAXB], leftpad[MAXB], bidx[MAXB];
    int has_leftpad, has_bidx;
    size_t s_new;
    size_t rotary_dim, seqlen_ro;
    int interleaved, causal;
    int fp8;         /* e4m3 with values the format holds exactly */
    float kscale[2]; /* per kv head */
    float vscale;    /* per tensor */
    float *q, *kc, *vc, *kn, *vn, *cos, *sin;
} kv_cli_case;

/* A value fp8 e4m3 holds exactly: +-(8 + m) / 8 * 2^e, m in 0..7, e in -3..0. */
static float exact_e4m3(tu_rng *rng) {
    float m = (float)(8 + (int)(tu_rng_next(rng) % 8)) / 8.0f;
    float v = ldexpf(m, -(int)(tu_rng_next(rng) % 4));
    return (tu_rng_next(rng) & 1) ? -v : v;
}

static void fill(kv_cli_case *c, float *x, size_t n, size_t dim, int is_v, tu_rng *rng) {
    for (size_t i = 0; i < n; i++) {
        size_t h = (i / dim) % c->hkv;
        x[i] = c->fp8 ? exact_e4m3(rng) * (is_v ? c->vscale : c->kscale[h]) : tu_rng_float(rng, -1.0f, 1.0f);
    }
}

static size_t pool_elems(const kv_cli_case *c, size_t dim) { return c->slots * c->rows * c->hkv * dim; }

/* Index of row j, head h of sequence s in a pool of `dim`. */
static size_t pool_at(const kv_cli_case *c, size_t s, size_t j, size_t h, size_t dim) {
    size_t slot, row;
    if (c->paged) {
        slot = (size_t)c->table[s * c->max_pages + j / c->rows];
        row = j % c->rows;
    } else {
        slot = c->has_bidx ? (size_t)c->bidx[s] : s;
        row = j;
    }
    return ((slot * c->rows + row) * c->hkv + h) * dim;
}

/* Element e of `row` turned to position pos, in float as the kernel does it. */
static float rotate(const kv_cli_case *c, const float *row, size_t e, size_t pos) {
    const size_t half = c->rotary_dim / 2;
    if (e >= c->rotary_dim) return row[e];
    if (c->interleaved) {
        const size_t i = e / 2;
        const float cs = c->cos[pos * half + i], sn = c->sin[pos * half + i];
        return (e & 1) ? row[e] * cs + row[e - 1] * sn : row[e] * cs - row[e + 1] * sn;
    }
    const size_t i = e < half ? e : e - half;
    const float cs = c->cos[pos * half + i], sn = c->sin[pos * half + i];
    return e < half ? row[e] * cs - row[e + half] * sn : row[e] * cs + row[e - half] * sn;
}

static void write_i32(const char *name, const size_t *shape, int rank, const int32_t *data) {
    REQUIRE(npy_write_raw(work(name), "<i4", shape, rank, data, sizeof(int32_t)));
}

/* Draws the data and writes every input file of the case. */
static void write_case(kv_cli_case *c, uint64_t seed) {
    tu_rng rng = tu_rng_seed(seed);
    size_t nq = c->b * c->sq * c->hq * c->d, nnew = c->b * c->s_new * c->hkv;
    c->q = floats(nq);
    for (size_t i = 0; i < nq; i++) c->q[i] = tu_rng_float(&rng, -1.0f, 1.0f);
    c->kc = floats(pool_elems(c, c->d));
    c->vc = floats(pool_elems(c, c->dv));
    fill(c, c->kc, pool_elems(c, c->d), c->d, 0, &rng);
    fill(c, c->vc, pool_elems(c, c->dv), c->dv, 1, &rng);
    c->kn = floats(nnew * c->d);
    c->vn = floats(nnew * c->dv);
    fill(c, c->kn, nnew * c->d, c->d, 0, &rng);
    fill(c, c->vn, nnew * c->dv, c->dv, 1, &rng);
    size_t qs[4] = {c->b, c->sq, c->hq, c->d};
    size_t ks[4] = {c->slots, c->rows, c->hkv, c->d}, vs[4] = {c->slots, c->rows, c->hkv, c->dv};
    REQUIRE(npy_write_f32(work("kvQ.npy"), qs, 4, c->q));
    REQUIRE(npy_write_f32(work("KC.npy"), ks, 4, c->kc));
    REQUIRE(npy_write_f32(work("VC.npy"), vs, 4, c->vc));
    size_t per_seq[1] = {c->b};
    write_i32("lens.npy", per_seq, 1, c->seqlens);
    if (c->has_leftpad) write_i32("pad.npy", per_seq, 1, c->leftpad);
    if (c->has_bidx) write_i32("bidx.npy", per_seq, 1, c->bidx);
    if (c->paged) {
        size_t ts[2] = {c->b, c->max_pages};
        write_i32("table.npy", ts, 2, c->table);
    }
    if (c->s_new) {
        size_t kns[4] = {c->b, c->s_new, c->hkv, c->d}, vns[4] = {c->b, c->s_new, c->hkv, c->dv};
        REQUIRE(npy_write_f32(work("KN.npy"), kns, 4, c->kn));
        REQUIRE(npy_write_f32(work("VN.npy"), vns, 4, c->vn));
    }
    if (c->rotary_dim) {
        const size_t half = c->rotary_dim / 2;
        c->cos = floats(c->seqlen_ro * half);
        c->sin = floats(c->seqlen_ro * half);
        for (size_t p = 0; p < c->seqlen_ro; p++)
            for (size_t i = 0; i < half; i++) {
                double theta = (double)p * pow(10000.0, -2.0 * (double)i / (double)c->rotary_dim);
                c->cos[p * half + i] = (float)cos(theta);
                c->sin[p * half + i] = (float)sin(theta);
            }
        size_t rs[2] = {c->seqlen_ro, half};
        REQUIRE(npy_write_f32(work("cos.npy"), rs, 2, c->cos));
        REQUIRE(npy_write_f32(work("sin.npy"), rs, 2, c->sin));
    }
    if (c->fp8) {
        size_t hs[1] = {c->hkv};
        REQUIRE(npy_write_f32(work("kscale.npy"), hs, 1, c->kscale));
    }
}

static void free_case(kv_cli_case *c) {
    float *all[] = {c->q, c->kc, c->vc, c->kn, c->vn, c->cos, c->sin};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    const char *files[] = {"kvQ.npy",   "KC.npy", "VC.npy", "lens.npy", "pad.npy", "bidx.npy",
                           "table.npy", "KN.npy", "VN.npy", "cos.npy",  "sin.npy", "kscale.npy"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) remove(work(files[i]));
}

/* The command line of a case: every file it has, then `extra`. */
static void case_args(const kv_cli_case *c, const char *extra, char *args, size_t size) {
    int n = snprintf(args, size,
                     "attention --q '%s' --k-cache '%s' --v-cache '%s' --cache-seqlens '%s' --out '%s' --lse '%s' "
                     "--k-cache-out '%s' --v-cache-out '%s'%s",
                     work("kvQ.npy"), work("KC.npy"), work("VC.npy"), work("lens.npy"), work("O.npy"), work("LSE.npy"),
                     work("KCout.npy"), work("VCout.npy"), c->causal ? " --causal" : "");
    if (c->has_leftpad) n += snprintf(args + n, size - (size_t)n, " --cache-leftpad '%s'", work("pad.npy"));
    if (c->has_bidx) n += snprintf(args + n, size - (size_t)n, " --cache-batch-idx '%s'", work("bidx.npy"));
    if (c->paged) n += snprintf(args + n, size - (size_t)n, " --block-table '%s'", work("table.npy"));
    if (c->s_new)
        n += snprintf(args + n, size - (size_t)n, " --k-new '%s' --v-new '%s'", work("KN.npy"), work("VN.npy"));
    if (c->rotary_dim)
        n += snprintf(args + n, size - (size_t)n, " --rotary-cos '%s' --rotary-sin '%s'%s", work("cos.npy"),
                      work("sin.npy"), c->interleaved ? " --rotary-interleaved" : "");
    if (c->fp8)
        n += snprintf(args + n, size - (size_t)n, " --cache-dtype fp8_e4m3 --k-scale '%s' --v-scale %g",
                      work("kscale.npy"), (double)c->vscale);
    snprintf(args + n, size - (size_t)n, " %s", extra);
}

/* The host's caches after the call: the new rows (K rotated) written at cache_seqlens. */
static void host_append(const kv_cli_case *c, float *kc, float *vc) {
    memcpy(kc, c->kc, pool_elems(c, c->d) * sizeof(float));
    memcpy(vc, c->vc, pool_elems(c, c->dv) * sizeof(float));
    for (size_t s = 0; s < c->b; s++)
        for (size_t t = 0; t < c->s_new; t++)
            for (size_t h = 0; h < c->hkv; h++) {
                const float *krow = c->kn + ((s * c->s_new + t) * c->hkv + h) * c->d;
                const float *vrow = c->vn + ((s * c->s_new + t) * c->hkv + h) * c->dv;
                const size_t j = (size_t)c->seqlens[s] + t;
                const size_t pos = (size_t)c->seqlens[s] + t; /* the cache row (cache_leftpad does not shift it) */
                for (size_t e = 0; e < c->d; e++)
                    kc[pool_at(c, s, j, h, c->d) + e] = c->rotary_dim ? rotate(c, krow, e, pos) : krow[e];
                memcpy(vc + pool_at(c, s, j, h, c->dv), vrow, c->dv * sizeof(float));
            }
}

/* O and LSE of the reference: each sequence's keys (leftpad .. end) as one varlen sequence. */
static void reference(const kv_cli_case *c, const float *kc, const float *vc, double *ref_o, double *ref_lse) {
    int32_t cu_q[MAXB + 1] = {0}, cu_k[MAXB + 1] = {0};
    size_t max_k = 0;
    for (size_t s = 0; s < c->b; s++) {
        size_t len = (size_t)(c->seqlens[s] + (int)c->s_new - (c->has_leftpad ? c->leftpad[s] : 0));
        cu_q[s + 1] = (int32_t)((s + 1) * c->sq);
        cu_k[s + 1] = cu_k[s] + (int32_t)len;
        max_k = len > max_k ? len : max_k;
    }
    size_t total_k = (size_t)cu_k[c->b];
    float *q = floats(c->b * c->sq * c->hq * c->d), *k = floats(total_k * c->hkv * c->d);
    float *v = floats(total_k * c->hkv * c->dv);
    for (size_t s = 0; s < c->b; s++) {
        const size_t first = (size_t)(c->seqlens[s] - (c->has_leftpad ? c->leftpad[s] : 0));
        for (size_t i = 0; i < c->sq; i++)
            for (size_t h = 0; h < c->hq; h++) {
                const float *row = c->q + ((s * c->sq + i) * c->hq + h) * c->d;
                for (size_t e = 0; e < c->d; e++)
                    q[((s * c->sq + i) * c->hq + h) * c->d + e] =
                        c->rotary_dim ? rotate(c, row, e, first + (c->causal ? i : 0)) : row[e];
            }
        for (size_t j = 0; j < (size_t)(cu_k[s + 1] - cu_k[s]); j++)
            for (size_t h = 0; h < c->hkv; h++) {
                const size_t src = (size_t)(c->has_leftpad ? c->leftpad[s] : 0) + j, dst = (size_t)cu_k[s] + j;
                memcpy(k + (dst * c->hkv + h) * c->d, kc + pool_at(c, s, src, h, c->d), c->d * sizeof(float));
                memcpy(v + (dst * c->hkv + h) * c->dv, vc + pool_at(c, s, src, h, c->dv), c->dv * sizeof(float));
            }
    }
    rv_problem p;
    memset(&p, 0, sizeof p);
    p.batch = c->b, p.heads_q = c->hq, p.heads_kv = c->hkv;
    p.seqlen_q = c->b * c->sq, p.seqlen_k = total_k;
    p.head_dim = c->d, p.head_dim_v = c->dv;
    p.scale = 1.0 / sqrt((double)c->d);
    p.causal = c->causal;
    p.cu_q = cu_q, p.cu_k = cu_k;
    p.max_seqlen_q = c->sq, p.max_seqlen_k = max_k;
    double *lse_varlen = calloc(rv_lse_count(&p), sizeof(double));
    REQUIRE(lse_varlen != NULL);
    rv_forward(&p, q, k, v, ref_o, lse_varlen);
    /* The reference's varlen LSE is [hq, total_q]; the cache call's [b, hq, sq]. */
    for (size_t s = 0; s < c->b; s++)
        for (size_t h = 0; h < c->hq; h++)
            for (size_t i = 0; i < c->sq; i++)
                ref_lse[(s * c->hq + h) * c->sq + i] = lse_varlen[rv_lse_index(&p, s, h, i)];
    free(lse_varlen);
    free(q);
    free(k);
    free(v);
}

/* An output of the given shape (removed afterwards); NULL (a failure counted) when missing or misshapen. */
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

/* A written cache against the host's: the rows appended by rotation within float rounding, the rest exact. */
static void check_cache_out(const char *label, const char *name, const float *got, const float *want, size_t n) {
    double worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - (double)want[i]);
        if (!(err <= worst)) worst = isnan(err) ? INFINITY : err, at = i;
    }
    if (worst > 1e-6) {
        fprintf(stderr, "FAIL %s: %s element %zu is %g, the host's append gives %g\n", label, name, at, (double)got[at],
                (double)want[at]);
        tu_fail_count();
    }
}

static void run_case(kv_cli_case *c, uint64_t seed) {
    write_case(c, seed);
    char args[8192], *out, *err;
    case_args(c, "", args, sizeof args);
    int failures = tu_failures();
    int status = cli_run_tool(args, &out, &err);
    if (status != 0 || err[0]) {
        fprintf(stderr, "FAIL %s: exit status %d, stderr: %s\n", c->label, status, err);
        tu_fail_count();
    } else {
        float *kc = floats(pool_elems(c, c->d)), *vc = floats(pool_elems(c, c->dv));
        host_append(c, kc, vc);
        size_t no = c->b * c->sq * c->hq * c->dv, nl = c->b * c->hq * c->sq;
        double *ref_o = calloc(no, sizeof(double)), *ref_lse = calloc(nl, sizeof(double));
        REQUIRE(ref_o && ref_lse);
        reference(c, kc, vc, ref_o, ref_lse);
        size_t os[4] = {c->b, c->sq, c->hq, c->dv}, ls[3] = {c->b, c->hq, c->sq};
        size_t ks[4] = {c->slots, c->rows, c->hkv, c->d}, vs[4] = {c->slots, c->rows, c->hkv, c->dv};
        float *o = read_output("O.npy", os, 4, c->label), *lse = read_output("LSE.npy", ls, 3, c->label);
        float *kout = read_output("KCout.npy", ks, 4, c->label), *vout = read_output("VCout.npy", vs, 4, c->label);
        if (o) vcmp_elementwise(c->label, "O", o, ref_o, no, 2e-5, 1e-4);
        if (lse) vcmp_elementwise(c->label, "LSE", lse, ref_lse, nl, 2e-5, 1e-5);
        if (kout) check_cache_out(c->label, "--k-cache-out", kout, kc, pool_elems(c, c->d));
        if (vout) check_cache_out(c->label, "--v-cache-out", vout, vc, pool_elems(c, c->dv));
        if (tu_failures() == failures) printf("%s: O, LSE and the caches after the call match\n", c->label);
        free(o), free(lse), free(kout), free(vout), free(kc), free(vc), free(ref_o), free(ref_lse);
    }
    free(out);
    free(err);
}

/* A contiguous cache of 3 sequences, entries reading sequences 2 and 0, left padding, GQA 2. */
static kv_cli_case contiguous_case(void) {
    kv_cli_case c;
    memset(&c, 0, sizeof c);
    c.label = "attention, contiguous cache (leftpad, batch_idx)";
    c.b = 2, c.hq = 4, c.hkv = 2, c.sq = 1, c.d = 32, c.dv = 32;
    c.slots = 3, c.rows = 40;
    c.seqlens[0] = 33, c.seqlens[1] = 17;
    c.leftpad[0] = 2, c.leftpad[1] = 0, c.has_leftpad = 1;
    c.bidx[0] = 2, c.bidx[1] = 0, c.has_bidx = 1;
    return c;
}

/* Pages of 3 rows dealt out of 14 (2 spare) in a scrambled order, 2 rows appended and rotated, causal. */
static kv_cli_case paged_case(int interleaved) {
    kv_cli_case c;
    memset(&c, 0, sizeof c);
    c.label = interleaved ? "attention, paged cache, append, GPT-J rotary, causal"
                          : "attention, paged cache, append, NeoX rotary, causal";
    c.b = 2, c.hq = 4, c.hkv = 1, c.sq = 2, c.d = 32, c.dv = 16;
    c.paged = 1, c.slots = 14, c.rows = 3, c.max_pages = 6;
    static const int32_t table[12] = {9, 2, 13, 0, 7, 4, 11, 5, 1, 12, 3, 8};
    memcpy(c.table, table, sizeof table);
    c.seqlens[0] = 10, c.seqlens[1] = 4;
    c.s_new = 2;
    c.rotary_dim = interleaved ? 32 : 16, c.seqlen_ro = 20, c.interleaved = interleaved;
    c.causal = 1;
    return c;
}

/* fp8 e4m3, per-head K scales and a per-tensor V scale, one row appended; values the format holds exactly. */
static kv_cli_case fp8_case(void) {
    kv_cli_case c;
    memset(&c, 0, sizeof c);
    c.label = "attention, fp8 e4m3 cache with scales, append";
    c.b = 1, c.hq = 4, c.hkv = 2, c.sq = 1, c.d = 16, c.dv = 16;
    c.slots = 1, c.rows = 24;
    c.seqlens[0] = 20;
    c.s_new = 1;
    c.fp8 = 1, c.kscale[0] = 0.5f, c.kscale[1] = 0.25f, c.vscale = 0.125f;
    return c;
}

/* Exit 1 (the library refused), one line naming `want`, no output file. */
static void expect_library_error(const char *label, const char *args, const char *want) {
    char *out, *err;
    size_t before = tu_tmpdir_files(cli_work, NULL, NULL);
    int status = cli_run_tool(args, &out, &err);
    size_t lines = 0;
    for (const char *p = err; *p; p++) lines += *p == '\n';
    if (status != 1 || lines != 1 || !strstr(err, want)) {
        fprintf(stderr, "FAIL %s: exit %d (expected 1), %zu lines, not naming \"%s\": %s\n", label, status, lines, want,
                err);
        tu_fail_count();
    } else {
        printf("%s: exit 1, %s", label, err);
    }
    if (tu_tmpdir_files(cli_work, NULL, NULL) != before) {
        fprintf(stderr, "FAIL %s: an output file was left behind\n", label);
        tu_fail_count();
        const char *outputs[] = {"O.npy", "LSE.npy", "KCout.npy", "VCout.npy"};
        for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++) remove(work(outputs[i]));
    }
    free(out);
    free(err);
}

/* Bad tables and files on the paged case's inputs. */
static void check_errors(void) {
    kv_cli_case c = paged_case(0);
    write_case(&c, 5);
    char args[8192];
    /* Page 99 of a 14-page pool: only the library knows the values are wrong. */
    kv_cli_case bad = c;
    bad.table[7] = 99;
    size_t ts[2] = {c.b, c.max_pages};
    write_i32("table.npy", ts, 2, bad.table);
    case_args(&c, "", args, sizeof args);
    expect_library_error("block table out of range", args, "block_table");
    write_i32("table.npy", ts, 2, c.table);
    /* 17 rows + 2 appended do not fit 6 pages of 3. */
    int32_t long_lens[2] = {17, 4};
    size_t per_seq[1] = {2};
    write_i32("lens.npy", per_seq, 1, long_lens);
    expect_library_error("cache_seqlens past the capacity", args, "cache_seqlens");
    write_i32("lens.npy", per_seq, 1, c.seqlens);

    /* The tool's own checks: exit 2, the option named. */
    size_t k3[3] = {c.slots * c.rows, c.hkv, c.d};
    REQUIRE(npy_write_f32(work("K3.npy"), k3, 3, c.kc));
    REQUIRE(npy_write_f32(work("table_f32.npy"), ts, 2, c.kc));
    int32_t short_lens[3] = {1, 2, 3};
    size_t three[1] = {3};
    write_i32("lens3.npy", three, 1, short_lens);
    const char *base = "--q '%s' --k-cache '%s' --v-cache '%s' --out '%s'";
    const struct {
        const char *label, *extra, *want;
    } refused[] = {
        {"--k-cache of rank 3", "--block-table '%s'", "--k-cache"},
        {"--block-table float32", "--block-table '%s'", "--block-table"},
        {"--cache-seqlens of the wrong length", "--cache-seqlens '%s'", "--cache-seqlens"},
        {"--k-new without --v-new", "--k-new '%s'", "--k-new"},
        {"--k with --k-cache", "--k '%s'", "--k"},
        {"--k-scale without an fp8 cache", "--k-scale 0.5 %s", "--k-scale"},
        {"--rotary-interleaved alone", "--rotary-interleaved %s", "--rotary-interleaved"},
        {"--dout with --k-cache", "--dout '%s' --dq a.npy --dk b.npy --dv c.npy", "--dout"},
        {"--cache-dtype fp9", "--cache-dtype fp9 %s", "--cache-dtype"},
        {"--dropout with --k-cache", "--dropout 0.1 %s", "--dropout"},
        {"--bias with --k-cache", "--bias '%s'", "--bias"},
        {"--varlen with --k-cache", "--varlen 2 %s", "--varlen"},
        {"--cache-batch-idx with --block-table", "--block-table '%s' --cache-batch-idx '%s'", "--cache-batch-idx"},
    };
    /* File names, made paths in the loop: work() hands out a ring of 16 buffers. */
    const char *files[] = {"table.npy", "table_f32.npy", "lens3.npy", "KN.npy",   "KC.npy", "", "", "kvQ.npy", "",
                           "",          "KC.npy",        "",          "table.npy"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char tail[1024], full[4096];
        snprintf(tail, sizeof tail, refused[i].extra, files[i][0] ? work(files[i]) : "", work("lens.npy"));
        int n = snprintf(full, sizeof full, "attention ");
        n += snprintf(full + n, sizeof full - (size_t)n, base, work("kvQ.npy"),
                      i == 0 ? work("K3.npy") : work("KC.npy"), work("VC.npy"), work("O.npy"));
        snprintf(full + n, sizeof full - (size_t)n, " %s", tail);
        cli_expect_usage_error_naming(refused[i].label, full, refused[i].want);
    }
    snprintf(args, sizeof args, "attention --q '%s' --k '%s' --v '%s' --out '%s' --k-cache-out '%s'", work("kvQ.npy"),
             work("KC.npy"), work("VC.npy"), work("O.npy"), work("KCout.npy"));
    cli_expect_usage_error_naming("--k-cache-out without --k-cache", args, "--k-cache-out");
    /* New rows without --cache-seqlens (a full cache: no row to append into) are the tool's to name; the
       library refused them as "cache->cache_seqlens is NULL", exit 1. */
    snprintf(args, sizeof args,
             "attention --q '%s' --k-cache '%s' --v-cache '%s' --block-table '%s' --out '%s' --k-new '%s' --v-new '%s'",
             work("kvQ.npy"), work("KC.npy"), work("VC.npy"), work("table.npy"), work("O.npy"), work("KN.npy"),
             work("VN.npy"));
    cli_expect_usage_error_naming("--k-new without --cache-seqlens", args, "--k-new: needs --cache-seqlens");
    snprintf(args, sizeof args, "attention --q '%s' --k-cache '%s' --v-cache '%s' --k-cache '%s' --out '%s'",
             work("kvQ.npy"), work("KC.npy"), work("VC.npy"), work("VC.npy"), work("O.npy"));
    cli_expect_usage_error_naming("--k-cache twice", args, "--k-cache");
    remove(work("long.npy")), remove(work("K3.npy")), remove(work("table_f32.npy")), remove(work("lens3.npy"));
    free_case(&c);
}

void cli_check_kvcache(void) {
    kv_cli_case cases[] = {contiguous_case(), paged_case(0), paged_case(1), fp8_case()};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_case(&cases[i], 40 + i);
        free_case(&cases[i]);
    }
    check_errors();
}

/* ------------------------------------------------------------------ bench */

/* The line of out holding every one of keys, or NULL (a copy: free it). */
static char *line_with(const char *out, const char *const *keys, size_t nkeys) {
    for (const char *line = out; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char *copy = malloc(len + 1);
        REQUIRE(copy != NULL);
        memcpy(copy, line, len);
        copy[len] = '\0';
        size_t found = 0;
        for (size_t i = 0; i < nkeys; i++) found += strstr(copy, keys[i]) != NULL;
        if (found == nkeys) return copy;
        free(copy);
        line += len + (end != NULL);
    }
    return NULL;
}

/* Runs bench with args; its stdout when it exits 0 (caller frees), else NULL after counting a failure. */
static char *bench_ok(const char *label, const char *args) {
    char *out, *err;
    int status = cli_run_tool(args, &out, &err);
    if (status != 0) {
        fprintf(stderr, "FAIL %s: exit status %d, stderr: %s\n", label, status, err);
        tu_fail_count();
        free(out);
        out = NULL;
    }
    free(err);
    return out;
}

/* Every key set must be on some line of out. */
static void expect_lines(const char *label, const char *out, const char *const *const *sets, const size_t *counts,
                         size_t nsets) {
    for (size_t i = 0; i < nsets; i++) {
        char *line = line_with(out, sets[i], counts[i]);
        if (line == NULL) {
            fprintf(stderr, "FAIL %s: no line with all of", label);
            for (size_t k = 0; k < counts[i]; k++) fprintf(stderr, " %s", sets[i][k]);
            fprintf(stderr, " in:\n%s", out);
            tu_fail_count();
            return;
        }
        free(line);
    }
    printf("%s: the expected lines are there\n", label);
}

#define DECODE_SHAPE "bench --seqlen 1 --seqlen-k 512 --heads 4 --kv-heads 2 --head-dim 64 --iters 2"

void cli_check_bench_decode(void) {
    /* The table of a decode shape: the read bandwidth measured on the device, and the %bw column. */
    char *out = bench_ok("bench decode", DECODE_SHAPE " --path flash");
    if (out) {
        static const char *const bw_line[] = {"read bw ", "GB/s (measured: ", "%bw = GB/s / read bw"};
        static const char *const header[] = {"GB/s", "%bw", "bytes_extra"};
        static const char *const row[] = {"flash ", "%"};
        const char *const *sets[] = {bw_line, header, row};
        const size_t counts[] = {3, 3, 2};
        expect_lines("bench decode (table)", out, sets, counts, 3);
        free(out);
    }
    /* Its JSON: the measured rate in every row and in the summary. */
    out = bench_ok("bench decode --json", DECODE_SHAPE " --path flash --json");
    if (out) {
        static const char *const row[] = {"\"path\":\"flash\"", "\"gbps\":",        "\"read_gbps\":",
                                          "\"bw_percent\":",    "\"num_splits\":0", "\"cache\":\"none\""};
        static const char *const summary[] = {"\"summary\"", "\"read_gbps\":", "\"read_bw_source\":\"measured: "};
        const char *const *sets[] = {row, summary};
        const size_t counts[] = {6, 3};
        expect_lines("bench decode --json", out, sets, counts, 2);
        if (strstr(out, "\"read_gbps\":null") || strstr(out, "\"bw_percent\":null")) {
            fprintf(stderr, "FAIL bench decode --json: no read bandwidth:\n%s", out);
            tu_fail_count();
        }
        free(out);
    }
    /* Paged against contiguous: the same keys, so the outputs agree; cost and key rate in the summary. */
    out = bench_ok("bench --page-size 16", DECODE_SHAPE " --page-size 16 --read-bw 20 --json");
    if (out) {
        static const char *const paged[] = {"\"path\":\"kvcache\"",     "\"cache\":\"paged\"", "\"page_size\":16",
                                            "\"cache_dtype\":\"same\"", "\"read_gbps\":20",    "\"bw_percent\":"};
        static const char *const plain[] = {"\"path\":\"flash\"", "\"cache\":\"none\""};
        static const char *const summary[] = {"\"summary\"", "\"cost\":", "\"key_rate_ratio\":", "\"agree\":true",
                                              "\"cache_description\":\"paged, 16 rows a page, 32 pages"};
        const char *const *sets[] = {paged, plain, summary};
        const size_t counts[] = {6, 2, 5};
        expect_lines("bench --page-size 16 --json", out, sets, counts, 3);
        free(out);
    }
    /* bf16 in a contiguous cache through the cache call: checked against plain bf16 flash. */
    out = bench_ok("bench --kv-cache --dtype bf16", DECODE_SHAPE " --kv-cache --dtype bf16 --read-bw 20 --json");
    if (out) {
        static const char *const row[] = {"\"path\":\"kvcache\"", "\"cache\":\"contiguous\"", "\"dtype\":\"bfloat16\""};
        static const char *const summary[] = {"\"summary\"", "\"agree\":true"};
        const char *const *sets[] = {row, summary};
        const size_t counts[] = {3, 2};
        expect_lines("bench --kv-cache --dtype bf16 --json", out, sets, counts, 2);
        free(out);
    }
    /* --num-splits 0 is the automatic count, as desc.num_splits = 0 and the rows' "num_splits":0 (it was refused). */
    out = bench_ok("bench --num-splits 0", DECODE_SHAPE " --path flash --num-splits 0 --read-bw 20 --json");
    if (out) {
        static const char *const row[] = {"\"path\":\"flash\"", "\"num_splits\":0"};
        const char *const *sets[] = {row};
        const size_t counts[] = {2};
        expect_lines("bench --num-splits 0 --json", out, sets, counts, 1);
        free(out);
    }
    /* fp8: half the bytes of K and V counted; not checked (quantised); a fixed split count. */
    out = bench_ok("bench --cache-dtype fp8_e4m3",
                   DECODE_SHAPE " --dtype bf16 --cache-dtype fp8_e4m3 --num-splits 2 --read-bw 20 --json");
    if (out) {
        static const char *const fp8[] = {"\"path\":\"kvcache\"", "\"cache_dtype\":\"fp8_e4m3\"", "\"num_splits\":2",
                                          "\"bytes\":132096"};
        static const char *const bf16[] = {"\"path\":\"flash\"", "\"num_splits\":2", "\"bytes\":263168"};
        static const char *const summary[] = {"\"summary\"", "\"agree\":null", "\"cost\":", "fp8_e4m3"};
        const char *const *sets[] = {fp8, bf16, summary};
        const size_t counts[] = {4, 3, 4};
        expect_lines("bench --cache-dtype fp8_e4m3 --json", out, sets, counts, 3);
        free(out);
    }
    static const struct {
        const char *args, *want;
    } refused[] = {{"bench --page-size 0", "--page-size"},
                   {"bench --kv-cache --page-size 16", "--kv-cache"},
                   {"bench --seqlen 1 --page-size 16 --backward", "--backward"},
                   {"bench --kv-cache --path standard", "--path standard"},
                   {"bench --read-bw -1", "--read-bw"},
                   {"bench --read-bw fast", "--read-bw"},
                   {"bench --cache-dtype fp9", "--cache-dtype"},
                   {"bench --num-splits -1", "--num-splits"},
                   {"bench --num-splits 4097", "--num-splits"},
                   /* What the cache call does not take: a usage error before anything runs, as in
                      `attention` (it was the library's refusal after the setup, exit 1). */
                   {"bench --seqlen 1 --kv-cache --dropout 0.1", "--dropout"},
                   {"bench --seqlen 1 --page-size 4 --bias random", "--bias"},
                   {"bench --seqlen 1 --cache-dtype fp8_e4m3 --mask random", "--mask"},
                   {"bench --seqlen 1 --kv-cache --block-sparse 0.5 --block-size 16", "--block-sparse"},
                   {"bench --seqlen 2 --page-size 4 --varlen 2", "--varlen"}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char *err;
        int status = cli_run_tool(refused[i].args, &out, &err);
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
