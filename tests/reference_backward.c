/*
 * Double-precision attention gradients, one query row at a time, written
 * from the definition in reference.h. D_i is taken as sum_j P_ij dP_ij, not
 * as rowsum(dO * O) like the kernels: the two agree only if the forward is
 * right, so the reference leans on neither the forward's O nor that identity.
 */
#include "reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double dot(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t c = 0; c < n; c++) s += (double)a[c] * (double)b[c];
    return s;
}

/* The resolved views and sizes one row's gradient needs. */
typedef struct grad_ctx {
    const ref_problem *p;
    const float *q, *k, *v, *dout;
    flashcl_tensor qv, kv, vv, dov;
    double *prob, *ds; /* seqlen_k each */
} grad_ctx;

/*
 * Row i of (batch b, query head h): adds its share to dK and dV of kv head
 * kvh and writes its dQ row. Rows with no visible key have P = 0 throughout,
 * so they contribute nothing and their dQ is 0.
 */
static void grad_row(const grad_ctx *g, size_t b, size_t h, size_t kvh, size_t i, double *dq_row, double *dk_head,
                     double *dv_head) {
    const ref_problem *p = g->p;
    size_t d = p->head_dim;
    size_t visible = ref_visible_keys(p, i);
    for (size_t c = 0; c < d; c++) dq_row[c] = 0.0;
    if (visible == 0) return;
    const float *qrow = g->q + ref_index(&g->qv, b, h, i, 0);
    const float *grow = g->dout + ref_index(&g->dov, b, h, i, 0);

    /* lse_i in double, then P_ij = exp(s_ij - lse_i). */
    double m = -INFINITY;
    for (size_t j = 0; j < visible; j++) {
        g->prob[j] = p->scale * dot(qrow, g->k + ref_index(&g->kv, b, kvh, j, 0), d);
        if (g->prob[j] > m) m = g->prob[j];
    }
    double sum = 0.0;
    for (size_t j = 0; j < visible; j++) sum += exp(g->prob[j] - m);
    double lse = m + log(sum);
    for (size_t j = 0; j < visible; j++) g->prob[j] = exp(g->prob[j] - lse);

    /* dP_ij = dO_i.v_j, D_i = sum_j P_ij dP_ij, dS_ij = P_ij (dP_ij - D_i). */
    double drow = 0.0;
    for (size_t j = 0; j < visible; j++) {
        g->ds[j] = dot(grow, g->v + ref_index(&g->vv, b, kvh, j, 0), d);
        drow += g->prob[j] * g->ds[j];
    }
    for (size_t j = 0; j < visible; j++) g->ds[j] = g->prob[j] * (g->ds[j] - drow);

    for (size_t j = 0; j < visible; j++) {
        const float *krow = g->k + ref_index(&g->kv, b, kvh, j, 0);
        double *dk_row = dk_head + j * d;
        double *dv_row = dv_head + j * d;
        for (size_t c = 0; c < d; c++) {
            dq_row[c] += p->scale * g->ds[j] * (double)krow[c];
            dk_row[c] += p->scale * g->ds[j] * (double)qrow[c];
            dv_row[c] += g->prob[j] * (double)grow[c];
        }
    }
}

void ref_attention_backward(const ref_problem *p, const float *q, const flashcl_tensor *q_view, const float *k,
                            const flashcl_tensor *k_view, const float *v, const flashcl_tensor *v_view,
                            const float *dout, const flashcl_tensor *dout_view, double *dq, double *dk, double *dv) {
    size_t d = p->head_dim;
    grad_ctx g;
    g.p = p;
    g.q = q;
    g.k = k;
    g.v = v;
    g.dout = dout;
    g.qv = ref_resolve_view(q_view, p->seqlen_q, p->heads_q, d);
    g.kv = ref_resolve_view(k_view, p->seqlen_k, p->heads_kv, d);
    g.vv = ref_resolve_view(v_view, p->seqlen_k, p->heads_kv, d);
    g.dov = ref_resolve_view(dout_view, p->seqlen_q, p->heads_q, d);
    g.prob = malloc(p->seqlen_k * sizeof *g.prob);
    g.ds = malloc(p->seqlen_k * sizeof *g.ds);
    if (!g.prob || !g.ds) {
        /* A test without its reference cannot judge anything: stop loudly. */
        fprintf(stderr, "reference: out of host memory\n");
        exit(1);
    }
    size_t kv_count = p->batch * p->heads_kv * p->seqlen_k * d;
    memset(dk, 0, kv_count * sizeof *dk);
    memset(dv, 0, kv_count * sizeof *dv);
    size_t group = p->heads_q / p->heads_kv;
    for (size_t b = 0; b < p->batch; b++)
        for (size_t h = 0; h < p->heads_q; h++) {
            size_t kvh = h / group;
            /* Every query head of a group adds into the same kv-head slice: the GQA sum. */
            size_t kv_head = (b * p->heads_kv + kvh) * p->seqlen_k * d;
            for (size_t i = 0; i < p->seqlen_q; i++) {
                size_t row = (b * p->heads_q + h) * p->seqlen_q + i;
                grad_row(&g, b, h, kvh, i, dq + row * d, dk + kv_head, dv + kv_head);
            }
        }
    free(g.prob);
    free(g.ds);
}
