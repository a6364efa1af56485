/*
 * Double-precision reference for every attention variant of flashcl.h:
 * storage rounding, d_v != d_qk, softcap, ALiBi, additive bias, boolean mask,
 * block mask, sliding window, attention sinks, dropout (with the keep mask
 * given by the caller) and variable-length batches; forward (O, LSE) and
 * backward (dQ, dK, dV, dsinks).
 *
 * Written straight from the descriptor's comments, one query row at a time,
 * with no tiling and no online softmax, so it shares no shortcut with the
 * kernels it judges. Its gradients are themselves checked against finite
 * differences of its forward (test_reference_variants).
 *
 * Layouts (all packed, host arrays):
 *   q, o, dout, dq   [rows_q, heads_q, d] / [rows_q, heads_q, d_v] for o, dout
 *   k, dk            [rows_k, heads_kv, d]
 *   v, dv            [rows_k, heads_kv, d_v]
 * where rows_q = batch * seqlen_q (sequence b owns rows b*seqlen_q ...), or,
 * with varlen, the packed total (sequence b owns rows cu_q[b] .. cu_q[b+1]-1).
 * This is the [b, s, h, d] layout of flash_attn_func and the [total, h, d] of
 * flash_attn_varlen_func alike.
 *   lse   [batch, heads_q, seqlen_q], or with varlen [heads_q, total_q]
 *   dsinks [heads_q]
 */
#ifndef FLASHCL_TEST_REFERENCE_VARIANTS_H
#define FLASHCL_TEST_REFERENCE_VARIANTS_H

#include <stddef.h>
#include <stdint.h>

/*
 * A [batch|1, heads|1, R, C] matrix on the host (bias: float, mask and block
 * mask: unsigned char), strides in elements and already resolved: a zero
 * batch or head stride broadcasts. data == NULL means the feature is off.
 */
typedef struct rv_matrix {
    const void *data;
    size_t offset, stride_batch, stride_head, stride_row;
} rv_matrix;

/*
 * A rounding applied where a low-precision framework would store an
 * intermediate (see rv_problem.round). NULL means exact (the fp64 reference).
 */
typedef double (*rv_round_fn)(double);

typedef struct rv_problem {
    size_t batch; /* sequences */
    size_t heads_q, heads_kv;
    size_t seqlen_q, seqlen_k; /* per sequence; with varlen: the packed totals */
    size_t head_dim, head_dim_v;
    double scale; /* already resolved (never 0) */
    int causal;
    int window; /* nonzero: window_left/right apply (-1 unbounded) */
    long window_left, window_right;
    double softcap;            /* 0 = off */
    const float *alibi_slopes; /* [heads_q] or [batch, heads_q]; NULL = off */
    size_t alibi_stride_batch; /* 0 or heads_q */
    const float *sinks;        /* [heads_q]; NULL = off */
    double dropout_p;          /* 0 = off */
    /* Keep mask [batch, heads_q, mask_rows, mask_cols] (1 = kept), as
       flashcl_dropout_mask writes it; required when dropout_p > 0. */
    const unsigned char *keep;
    rv_matrix bias;       /* float */
    rv_matrix mask;       /* unsigned char, nonzero = attend */
    rv_matrix block_mask; /* unsigned char, 0 = block skipped */
    size_t block_q, block_k;
    const int32_t *cu_q, *cu_k;        /* [batch + 1]; NULL = not varlen */
    size_t max_seqlen_q, max_seqlen_k; /* resolved: with varlen the bound, else the seqlens */
    /*
     * The "plain implementation in the storage type" baseline: when not NULL,
     * P (after the softmax), O, dP, dS and the gradients are rounded with it,
     * as a framework computing S = QK^T, softmax, PV in f16/bf16 tensors with
     * float32 accumulation would. NULL: the exact reference.
     */
    rv_round_fn round;
    /* With round: O and the gradients stay unrounded (the float32 outputs of the TF32 kernels,
       whose only rounding past the inputs is P's and dS's). */
    int exact_output;
} rv_problem;

/* Rows of the packed q/o arrays and of the k/v arrays. */
size_t rv_rows_q(const rv_problem *p);
size_t rv_rows_k(const rv_problem *p);
/* Length and first packed row of sequence b. */
size_t rv_seq_len_q(const rv_problem *p, size_t b);
size_t rv_seq_len_k(const rv_problem *p, size_t b);
size_t rv_seq_row_q(const rv_problem *p, size_t b);
size_t rv_seq_row_k(const rv_problem *p, size_t b);
/* Index of (sequence b, head h, sequence-local row i) in the LSE array. */
size_t rv_lse_index(const rv_problem *p, size_t b, size_t h, size_t i);
/* Elements of the LSE array. */
size_t rv_lse_count(const rv_problem *p);

/*
 * Whether key j is visible to query i of sequence b, head h (causal/window,
 * mask and block mask), before any score is computed.
 */
int rv_visible(const rv_problem *p, size_t b, size_t h, size_t i, size_t j);

/*
 * Forward: o [rows_q, heads_q, d_v], lse (natural log). A row that sees no
 * key gets O = 0 and LSE = -inf without sinks, LSE = sink with them (the
 * log of the denominator, which then holds the sink term alone).
 */
void rv_forward(const rv_problem *p, const float *q, const float *k, const float *v, double *o, double *lse);

/*
 * Per LSE row, sum_j P_ij |softcap tanh(s_ij / softcap)|: the P-weighted size of the softcapped
 * logits. A tanh with relative error e moves each such logit by at most e times its size, and the
 * LSE (whose gradient in the logits is P) by at most e times this weight. 0 without softcap.
 */
void rv_softcap_lse_weight(const rv_problem *p, const float *q, const float *k, double *weight);

/*
 * Backward for upstream gradient dout [rows_q, heads_q, d_v]: dq, dk, dv (dK
 * and dV summed over each GQA group) and, when dsinks is not NULL and sinks
 * are on, dsinks [heads_q]. D_i = sum_j P_ij dP_ij is computed from its
 * definition, not from O.
 */
void rv_backward(const rv_problem *p, const float *q, const float *k, const float *v, const float *dout, double *dq,
                 double *dk, double *dv, double *dsinks);

/* ---------------------------------------------------------------- dropout */

/* Philox4x32-10 (Salmon et al. 2011, Random123's philox4x32 with 10 rounds). */
void rv_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

/*
 * The keep bit flashcl.h defines for element (b, h, i, j): the 16-bit half
 * j mod 2 (0: low) of Philox word 2 (i/8 mod 2) + j/8 mod 2 of counter
 * (4 (j/16) + j/2 mod 4, 8 (i/16) + i mod 8, b*heads_q + h, low32(offset)) and
 * key (low32(seed), high32(seed) ^ high32(offset)), kept iff
 * >= floor(p * 2^16 + 1/2).
 */
int rv_dropout_keep(uint64_t seed, uint64_t offset, double p, size_t heads_q, size_t b, size_t h, size_t i, size_t j);

/* The factor of a kept element: 1 / the keep probability the 16-bit threshold gives,
   2^16 / (2^16 - floor(p * 2^16 + 1/2)) (0 when nothing is kept). */
double rv_dropout_scale(double p);

/*
 * The whole mask flashcl_dropout_mask writes: [batch, heads_q, rows, cols]
 * with rows x cols = seqlen_q x seqlen_k, or max_seqlen_q x max_seqlen_k
 * under varlen with 0 outside each sequence. keep must hold that many bytes.
 */
void rv_dropout_mask(const rv_problem *p, uint64_t seed, uint64_t offset, unsigned char *keep);

/* Rows and columns of the keep mask: seqlen_q/k, or max_seqlen_q/k with varlen. */
size_t rv_mask_rows(const rv_problem *p);
size_t rv_mask_cols(const rv_problem *p);

/* ALiBi slopes of the usual geometric sequence for `heads` heads (Press et al.). */
void rv_alibi_standard_slopes(size_t heads, float *slopes);

#endif
