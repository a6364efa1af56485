/*
 * Double-precision CPU attention reference, written straight from the
 * definition in flashcl.h. It is deliberately naive (no tiling, no online
 * softmax) so that it shares no algorithmic shortcut with the kernels it checks.
 */
#ifndef FLASHCL_TEST_REFERENCE_H
#define FLASHCL_TEST_REFERENCE_H

#include <stddef.h>

#include "flashcl.h"

/* An attention problem with every "zero means default" field resolved. */
typedef struct ref_problem {
    size_t batch;
    size_t heads_q;
    size_t heads_kv;
    size_t seqlen_q;
    size_t seqlen_k;
    size_t head_dim;
    double scale;
    int causal;
} ref_problem;

/* Applies the defaults documented on flashcl_attention_desc. */
ref_problem ref_problem_from_desc(const flashcl_attention_desc *desc);

/*
 * The view with the "all three strides zero means packed [b, s, h, d]" rule
 * applied; `rows` and `heads` are the view's sequence length and head count.
 */
flashcl_tensor ref_resolve_view(const flashcl_tensor *view, size_t rows, size_t heads, size_t head_dim);

/* Element index of (b, h, r, c) in a resolved view. */
size_t ref_index(const flashcl_tensor *resolved, size_t b, size_t h, size_t r, size_t c);

/*
 * O = softmax(scale * Q K^T [+ bottom-right causal mask]) V and its natural-log
 * LSE. q, k and v are host images of whole buffers addressed through their
 * views (any strides; buffer fields ignored). Outputs are packed:
 * o [batch, heads_q, seqlen_q, head_dim], lse [batch, heads_q, seqlen_q].
 * A row with no visible key gets O = 0 and LSE = -inf.
 */
void ref_attention(const ref_problem *p, const float *q, const flashcl_tensor *q_view, const float *k,
                   const flashcl_tensor *k_view, const float *v, const flashcl_tensor *v_view, double *o, double *lse);

/*
 * Gradients of the attention above for an upstream gradient dO, computed
 * straight from the definition (reference_backward.c): with
 *   P_ij  = exp(scale q_i.k_j - lse_i)   (0 where masked or where lse_i = -inf)
 *   dP_ij = dO_i.v_j,   D_i = sum_j P_ij dP_ij,   dS_ij = P_ij (dP_ij - D_i)
 * it writes dQ_i = scale sum_j dS_ij k_j, dK_j = scale sum_i dS_ij q_i and
 * dV_j = sum_i P_ij dO_i, with dK and dV summed over each GQA group.
 * Inputs are addressed through their views like ref_attention; outputs are
 * packed: dq [batch, heads_q, seqlen_q, head_dim], dk and dv
 * [batch, heads_kv, seqlen_k, head_dim].
 */
void ref_attention_backward(const ref_problem *p, const float *q, const flashcl_tensor *q_view, const float *k,
                            const flashcl_tensor *k_view, const float *v, const flashcl_tensor *v_view,
                            const float *dout, const flashcl_tensor *dout_view, double *dq, double *dk, double *dv);

/* Keys visible to query row i: j < ref_visible_keys(p, i) (bottom-right causal). */
size_t ref_visible_keys(const ref_problem *p, size_t i);

#endif
