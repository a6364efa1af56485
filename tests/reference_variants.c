/* The double-precision variant reference; see reference_variants.h. */
#include "reference_variants.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *rv_alloc(size_t n, size_t size) {
    void *ptr = calloc(n ? n : 1, size);
    if (!ptr) {
        /* A test without its reference cannot judge anything: stop loudly. */
        fprintf(stderr, "reference_variants: out of host memory\n");
        exit(1);
    }
    return ptr;
}

static double rv_apply_round(const rv_problem *p, double x) { return p->round ? p->round(x) : x; }

/* ------------------------------------------------------------- geometry */

size_t rv_seq_len_q(const rv_problem *p, size_t b) {
    return p->cu_q ? (size_t)(p->cu_q[b + 1] - p->cu_q[b]) : p->seqlen_q;
}

size_t rv_seq_len_k(const rv_problem *p, size_t b) {
    return p->cu_k ? (size_t)(p->cu_k[b + 1] - p->cu_k[b]) : p->seqlen_k;
}

size_t rv_seq_row_q(const rv_problem *p, size_t b) { return p->cu_q ? (size_t)p->cu_q[b] : b * p->seqlen_q; }

size_t rv_seq_row_k(const rv_problem *p, size_t b) { return p->cu_k ? (size_t)p->cu_k[b] : b * p->seqlen_k; }

size_t rv_rows_q(const rv_problem *p) { return p->cu_q ? p->seqlen_q : p->batch * p->seqlen_q; }

size_t rv_rows_k(const rv_problem *p) { return p->cu_k ? p->seqlen_k : p->batch * p->seqlen_k; }

size_t rv_lse_index(const rv_problem *p, size_t b, size_t h, size_t i) {
    if (p->cu_q) return h * p->seqlen_q + (size_t)p->cu_q[b] + i; /* [heads_q, total_q] */
    return (b * p->heads_q + h) * p->seqlen_q + i;
}

size_t rv_lse_count(const rv_problem *p) { return p->heads_q * rv_rows_q(p); }

size_t rv_mask_rows(const rv_problem *p) { return p->cu_q ? p->max_seqlen_q : p->seqlen_q; }

size_t rv_mask_cols(const rv_problem *p) { return p->cu_k ? p->max_seqlen_k : p->seqlen_k; }

static size_t matrix_index(const rv_matrix *m, size_t b, size_t h, size_t r, size_t c) {
    return m->offset + b * m->stride_batch + h * m->stride_head + r * m->stride_row + c;
}

int rv_visible(const rv_problem *p, size_t b, size_t h, size_t i, size_t j) {
    /* Bottom-right alignment, per sequence: diagonal at j = i + sk - sq. */
    long diag = (long)i + (long)rv_seq_len_k(p, b) - (long)rv_seq_len_q(p, b);
    long left = p->window ? p->window_left : -1;
    long right = p->window ? p->window_right : -1;
    if (p->causal) right = 0;
    if (left >= 0 && (long)j < diag - left) return 0;
    if (right >= 0 && (long)j > diag + right) return 0;
    if (p->mask.data) {
        const unsigned char *m = p->mask.data;
        if (!m[matrix_index(&p->mask, b, h, i, j)]) return 0;
    }
    if (p->block_mask.data) {
        const unsigned char *m = p->block_mask.data;
        if (!m[matrix_index(&p->block_mask, b, h, i / p->block_q, j / p->block_k)]) return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- scores */

/* What one query row needs: scores, probabilities and the tanh of softcap. */
typedef struct rv_row {
    size_t len_k;   /* keys of the sequence */
    size_t visible; /* how many of them are visible */
    double *s;      /* final logits (valid where vis) */
    double *t;      /* tanh(scale q.k / cap) (softcap only) */
    double *prob;   /* P_ij = exp(s_ij - lse_i), 0 where masked */
    unsigned char *vis;
    double lse;    /* -inf when nothing (not even a sink) is in the row */
    double p_sink; /* exp(sink - lse), 0 without sinks */
} rv_row;

static void row_alloc(rv_row *r, size_t max_k) {
    memset(r, 0, sizeof *r);
    r->s = rv_alloc(max_k, sizeof(double));
    r->t = rv_alloc(max_k, sizeof(double));
    r->prob = rv_alloc(max_k, sizeof(double));
    r->vis = rv_alloc(max_k, 1);
}

static void row_free(rv_row *r) {
    free(r->s);
    free(r->t);
    free(r->prob);
    free(r->vis);
}

static size_t max_len_k(const rv_problem *p) {
    size_t m = 0;
    for (size_t b = 0; b < p->batch; b++)
        if (rv_seq_len_k(p, b) > m) m = rv_seq_len_k(p, b);
    return m;
}

static double keep_scale(const rv_problem *p, size_t b, size_t h, size_t i, size_t j) {
    if (p->dropout_p <= 0.0) return 1.0;
    size_t at = ((b * p->heads_q + h) * rv_mask_rows(p) + i) * rv_mask_cols(p) + j;
    return p->keep[at] ? rv_dropout_scale(p->dropout_p) : 0.0;
}

/*
 * Scores, LSE and probabilities of row i of (sequence b, query head h), in
 * the order flashcl.h gives: scale, softcap, + ALiBi + bias, masks, softmax
 * with the sink in the denominator only.
 */
static void row_compute(const rv_problem *p, const float *q, const float *k, size_t b, size_t h, size_t i, rv_row *r) {
    size_t d = p->head_dim, kvh = h / (p->heads_q / p->heads_kv);
    size_t len_q = rv_seq_len_q(p, b);
    r->len_k = rv_seq_len_k(p, b);
    r->visible = 0;
    const float *qrow = q + ((rv_seq_row_q(p, b) + i) * p->heads_q + h) * d;
    double slope = p->alibi_slopes ? p->alibi_slopes[b * p->alibi_stride_batch + h] : 0.0;
    double m = -INFINITY;
    for (size_t j = 0; j < r->len_k; j++) {
        r->vis[j] = (unsigned char)rv_visible(p, b, h, i, j);
        if (!r->vis[j]) continue;
        r->visible++;
        const float *krow = k + ((rv_seq_row_k(p, b) + j) * p->heads_kv + kvh) * d;
        double dot = 0.0;
        for (size_t c = 0; c < d; c++) dot += (double)qrow[c] * (double)krow[c];
        double s = p->scale * dot;
        if (p->softcap > 0.0) {
            r->t[j] = tanh(s / p->softcap);
            s = p->softcap * r->t[j];
        }
        if (p->alibi_slopes) s -= slope * fabs((double)i + (double)r->len_k - (double)len_q - (double)j);
        if (p->bias.data) s += ((const float *)p->bias.data)[matrix_index(&p->bias, b, h, i, j)];
        r->s[j] = s;
        if (s > m) m = s;
    }
    double sink = p->sinks ? (double)p->sinks[h] : -INFINITY;
    if (sink > m) m = sink;
    double sum = 0.0;
    for (size_t j = 0; j < r->len_k; j++)
        if (r->vis[j]) sum += exp(r->s[j] - m);
    if (p->sinks) sum += exp(sink - m);
    r->lse = sum > 0.0 ? m + log(sum) : -INFINITY;
    for (size_t j = 0; j < r->len_k; j++) r->prob[j] = r->vis[j] ? exp(r->s[j] - r->lse) : 0.0;
    r->p_sink = p->sinks && sum > 0.0 ? exp(sink - r->lse) : 0.0;
}

/* ------------------------------------------------- softcap error weight */

void rv_softcap_lse_weight(const rv_problem *p, const float *q, const float *k, double *weight) {
    rv_row r;
    row_alloc(&r, max_len_k(p));
    for (size_t b = 0; b < p->batch; b++)
        for (size_t h = 0; h < p->heads_q; h++)
            for (size_t i = 0; i < rv_seq_len_q(p, b); i++) {
                row_compute(p, q, k, b, h, i, &r);
                double w = 0.0;
                if (p->softcap > 0.0)
                    for (size_t j = 0; j < r.len_k; j++)
                        if (r.vis[j]) w += r.prob[j] * p->softcap * fabs(r.t[j]);
                weight[rv_lse_index(p, b, h, i)] = w;
            }
    row_free(&r);
}

/* --------------------------------------------------------------- forward */

void rv_forward(const rv_problem *p, const float *q, const float *k, const float *v, double *o, double *lse) {
    size_t dv = p->head_dim_v;
    rv_row r;
    row_alloc(&r, max_len_k(p));
    for (size_t b = 0; b < p->batch; b++)
        for (size_t h = 0; h < p->heads_q; h++) {
            size_t kvh = h / (p->heads_q / p->heads_kv);
            for (size_t i = 0; i < rv_seq_len_q(p, b); i++) {
                double *orow = o + ((rv_seq_row_q(p, b) + i) * p->heads_q + h) * dv;
                row_compute(p, q, k, b, h, i, &r);
                lse[rv_lse_index(p, b, h, i)] = r.lse;
                for (size_t c = 0; c < dv; c++) orow[c] = 0.0;
                for (size_t j = 0; j < r.len_k; j++) {
                    if (!r.vis[j]) continue;
                    /* Dropout acts on the normalised probabilities: LSE is pre-dropout. */
                    double w = rv_apply_round(p, rv_apply_round(p, r.prob[j]) * keep_scale(p, b, h, i, j));
                    const float *vrow = v + ((rv_seq_row_k(p, b) + j) * p->heads_kv + kvh) * dv;
                    for (size_t c = 0; c < dv; c++) orow[c] += w * (double)vrow[c];
                }
                if (!p->exact_output)
                    for (size_t c = 0; c < dv; c++) orow[c] = rv_apply_round(p, orow[c]);
            }
        }
    row_free(&r);
}

/* -------------------------------------------------------------- backward */

void rv_backward(const rv_problem *p, const float *q, const float *k, const float *v, const float *dout, double *dq,
                 double *dk, double *dv_out, double *dsinks) {
    size_t d = p->head_dim, dv = p->head_dim_v;
    size_t nq = rv_rows_q(p) * p->heads_q, nk = rv_rows_k(p) * p->heads_kv;
    memset(dq, 0, nq * d * sizeof *dq);
    memset(dk, 0, nk * d * sizeof *dk);
    memset(dv_out, 0, nk * dv * sizeof *dv_out);
    if (dsinks) memset(dsinks, 0, p->heads_q * sizeof *dsinks);
    size_t maxk = max_len_k(p);
    rv_row r;
    row_alloc(&r, maxk);
    double *dp = rv_alloc(maxk, sizeof(double));
    for (size_t b = 0; b < p->batch; b++)
        for (size_t h = 0; h < p->heads_q; h++) {
            size_t kvh = h / (p->heads_q / p->heads_kv);
            for (size_t i = 0; i < rv_seq_len_q(p, b); i++) {
                row_compute(p, q, k, b, h, i, &r);
                if (r.visible == 0) continue; /* P = 0: no gradient flows through this row */
                size_t qi = (rv_seq_row_q(p, b) + i) * p->heads_q + h;
                const float *qrow = q + qi * d;
                const float *grow = dout + qi * dv;
                /* dP_ij = dO_i . v_j * Z_ij / (1 - p); D_i = sum_j P_ij dP_ij. */
                double big_d = 0.0;
                for (size_t j = 0; j < r.len_k; j++) {
                    if (!r.vis[j]) continue;
                    const float *vrow = v + ((rv_seq_row_k(p, b) + j) * p->heads_kv + kvh) * dv;
                    double acc = 0.0;
                    for (size_t c = 0; c < dv; c++) acc += (double)grow[c] * (double)vrow[c];
                    dp[j] = rv_apply_round(p, acc * keep_scale(p, b, h, i, j));
                    big_d += r.prob[j] * dp[j];
                }
                /* The sink is a logit with no value: its dP is 0, so dS_sink = -P_sink D
                 * (stored, like every dS, in the storage type by the plain baseline). */
                if (dsinks && p->sinks) dsinks[h] -= rv_apply_round(p, rv_apply_round(p, r.p_sink) * big_d);
                for (size_t j = 0; j < r.len_k; j++) {
                    if (!r.vis[j]) continue;
                    size_t kj = (rv_seq_row_k(p, b) + j) * p->heads_kv + kvh;
                    double ds = r.prob[j] * (dp[j] - big_d);
                    if (p->softcap > 0.0) ds *= 1.0 - r.t[j] * r.t[j]; /* d(cap tanh(u/cap))/du */
                    ds = rv_apply_round(p, ds);
                    double w = rv_apply_round(p, rv_apply_round(p, r.prob[j]) * keep_scale(p, b, h, i, j));
                    const float *krow = k + kj * d;
                    for (size_t c = 0; c < d; c++) {
                        dq[qi * d + c] += p->scale * ds * (double)krow[c];
                        dk[kj * d + c] += p->scale * ds * (double)qrow[c];
                    }
                    for (size_t c = 0; c < dv; c++) dv_out[kj * dv + c] += w * (double)grow[c];
                }
            }
        }
    if (p->round && !p->exact_output) {
        for (size_t e = 0; e < nq * d; e++) dq[e] = p->round(dq[e]);
        for (size_t e = 0; e < nk * d; e++) dk[e] = p->round(dk[e]);
        for (size_t e = 0; e < nk * dv; e++) dv_out[e] = p->round(dv_out[e]);
    }
    free(dp);
    row_free(&r);
}

/* --------------------------------------------------------------- dropout */

void rv_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += 0x9E3779B9u; /* the key schedule bumps between rounds */
            k1 += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

double rv_dropout_scale(double p) {
    const double threshold = floor(p * 65536.0 + 0.5);
    return threshold < 65536.0 ? 65536.0 / (65536.0 - threshold) : 0.0;
}

int rv_dropout_keep(uint64_t seed, uint64_t offset, double p, size_t heads_q, size_t b, size_t h, size_t i, size_t j) {
    uint32_t counter[4] = {(uint32_t)(4 * (j / 16) + (j / 2) % 4), (uint32_t)(8 * (i / 16) + i % 8),
                           (uint32_t)(b * heads_q + h), (uint32_t)offset};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32) ^ (uint32_t)(offset >> 32)};
    uint32_t words[4];
    rv_philox4x32_10(counter, key, words);
    const uint32_t word = words[2 * ((i / 8) % 2) + (j / 8) % 2], bits = j % 2 ? word >> 16 : word & 0xffffu;
    return (double)bits >= floor(p * 65536.0 + 0.5);
}

void rv_dropout_mask(const rv_problem *p, uint64_t seed, uint64_t offset, unsigned char *keep) {
    size_t rows = rv_mask_rows(p), cols = rv_mask_cols(p);
    memset(keep, 0, p->batch * p->heads_q * rows * cols);
    for (size_t b = 0; b < p->batch; b++)
        for (size_t h = 0; h < p->heads_q; h++)
            for (size_t i = 0; i < rv_seq_len_q(p, b); i++)
                for (size_t j = 0; j < rv_seq_len_k(p, b); j++)
                    keep[((b * p->heads_q + h) * rows + i) * cols + j] =
                        (unsigned char)rv_dropout_keep(seed, offset, p->dropout_p, p->heads_q, b, h, i, j);
}

void rv_alibi_standard_slopes(size_t heads, float *slopes) {
    /* The closest power of two n <= heads gets 2^(-8k/n), k = 1..n; the
     * rest interleave from the sequence for 2n: 2^(-4k/n) for odd k. */
    size_t n = 1;
    while (n * 2 <= heads) n *= 2;
    for (size_t k = 1; k <= n; k++) slopes[k - 1] = (float)pow(2.0, -8.0 * (double)k / (double)n);
    for (size_t e = 0; n + e < heads; e++) slopes[n + e] = (float)pow(2.0, -4.0 * (double)(2 * e + 1) / (double)n);
}
