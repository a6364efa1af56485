#include "reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

ref_problem ref_problem_from_desc(const flashcl_attention_desc *desc) {
    ref_problem p;
    p.batch = desc->batch;
    p.heads_q = desc->heads_q;
    p.heads_kv = desc->heads_kv ? desc->heads_kv : desc->heads_q;
    p.seqlen_q = desc->seqlen_q;
    p.seqlen_k = desc->seqlen_k ? desc->seqlen_k : desc->seqlen_q;
    p.head_dim = desc->head_dim;
    /* Computed in double on purpose: the library's float scale differs by
     * about 1e-8 relative, far inside the comparison tolerance. */
    p.scale = desc->scale != 0.0f ? (double)desc->scale : 1.0 / sqrt((double)desc->head_dim);
    p.causal = desc->causal != 0;
    return p;
}

flashcl_tensor ref_resolve_view(const flashcl_tensor *view, size_t rows, size_t heads, size_t head_dim) {
    flashcl_tensor t = *view;
    if (t.stride_batch == 0 && t.stride_head == 0 && t.stride_row == 0) {
        t.stride_batch = rows * heads * head_dim;
        t.stride_head = head_dim;
        t.stride_row = heads * head_dim;
    }
    return t;
}

size_t ref_index(const flashcl_tensor *resolved, size_t b, size_t h, size_t r, size_t c) {
    return resolved->offset + b * resolved->stride_batch + h * resolved->stride_head + r * resolved->stride_row + c;
}

size_t ref_visible_keys(const ref_problem *p, size_t i) {
    if (!p->causal) return p->seqlen_k;
    /* Bottom-right alignment: key j is visible iff j <= i + sk - sq. */
    if (i + p->seqlen_k < p->seqlen_q) return 0;
    size_t last = i + p->seqlen_k - p->seqlen_q;
    return last + 1 < p->seqlen_k ? last + 1 : p->seqlen_k;
}

/* One query row: scores for the visible keys, then max-shifted softmax. */
static void ref_row(const ref_problem *p, const float *qrow, const float *k, const flashcl_tensor *kv, const float *v,
                    const flashcl_tensor *vv, size_t b, size_t kvh, size_t visible, double *scores, double *o_row,
                    double *lse) {
    size_t d = p->head_dim;
    double m = -INFINITY;
    for (size_t j = 0; j < visible; j++) {
        const float *krow = k + ref_index(kv, b, kvh, j, 0);
        double dot = 0.0;
        for (size_t c = 0; c < d; c++) dot += (double)qrow[c] * (double)krow[c];
        scores[j] = p->scale * dot;
        if (scores[j] > m) m = scores[j];
    }
    double sum = 0.0;
    for (size_t j = 0; j < visible; j++) {
        scores[j] = exp(scores[j] - m);
        sum += scores[j];
    }
    for (size_t c = 0; c < d; c++) o_row[c] = 0.0;
    for (size_t j = 0; j < visible; j++) {
        const float *vrow = v + ref_index(vv, b, kvh, j, 0);
        double w = scores[j] / sum;
        for (size_t c = 0; c < d; c++) o_row[c] += w * (double)vrow[c];
    }
    *lse = m + log(sum);
}

void ref_attention(const ref_problem *p, const float *q, const flashcl_tensor *q_view, const float *k,
                   const flashcl_tensor *k_view, const float *v, const flashcl_tensor *v_view, double *o, double *lse) {
    flashcl_tensor qv = ref_resolve_view(q_view, p->seqlen_q, p->heads_q, p->head_dim);
    flashcl_tensor kv = ref_resolve_view(k_view, p->seqlen_k, p->heads_kv, p->head_dim);
    flashcl_tensor vv = ref_resolve_view(v_view, p->seqlen_k, p->heads_kv, p->head_dim);
    size_t group = p->heads_q / p->heads_kv;
    size_t d = p->head_dim;
    double *scores = malloc(p->seqlen_k * sizeof *scores);
    if (!scores) {
        /* A test without its reference cannot judge anything: stop loudly. */
        fprintf(stderr, "reference: out of host memory\n");
        exit(1);
    }
    for (size_t b = 0; b < p->batch; b++) {
        for (size_t h = 0; h < p->heads_q; h++) {
            size_t kvh = h / group;
            for (size_t i = 0; i < p->seqlen_q; i++) {
                size_t row = (b * p->heads_q + h) * p->seqlen_q + i;
                double *o_row = o + row * d;
                size_t visible = ref_visible_keys(p, i);
                if (visible == 0) {
                    for (size_t c = 0; c < d; c++) o_row[c] = 0.0;
                    lse[row] = -INFINITY;
                    continue;
                }
                ref_row(p, q + ref_index(&qv, b, h, i, 0), k, &kv, v, &vv, b, kvh, visible, scores, o_row, &lse[row]);
            }
        }
    }
    free(scores);
}
