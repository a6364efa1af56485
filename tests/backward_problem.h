/*
 * One backward problem on the device: a forward problem (Q, K, V, and the
 * O and LSE buffers flashcl_forward fills), a random dO, sentinel-filled
 * dQ/dK/dV outputs with guard regions before and after each view, and the
 * double-precision reference gradients. Shared by the backward tests so they
 * all judge gradients the same way.
 */
#ifndef FLASHCL_TEST_BACKWARD_PROBLEM_H
#define FLASHCL_TEST_BACKWARD_PROBLEM_H

#include "problem.h"

typedef struct bw_shape {
    tu_shape fwd; /* q, k, v, o layouts, lse_offset, seed */
    tu_layout layout_dout, layout_dq, layout_dk, layout_dv;
} bw_shape;

/* Every tensor in `layout`; otherwise as tu_shape_make. */
bw_shape bw_shape_make(size_t batch, size_t heads_q, size_t heads_kv, size_t seqlen_q, size_t seqlen_k, size_t head_dim,
                       int causal, tu_layout layout);
/* tu_shape_describe plus the layouts of dout/dq/dk/dv. */
void bw_shape_describe(const bw_shape *shape, char *buf, size_t size);

/* The three outputs of one backward call. */
typedef struct bw_grads {
    tu_buffer dq, dk, dv;
} bw_grads;

typedef struct bw_problem {
    bw_shape shape;
    tu_problem fwd;
    tu_buffer dout;
    bw_grads grads;
    double *ref_dq; /* [b, hq, sq, d] */
    double *ref_dk; /* [b, hkv, sk, d] */
    double *ref_dv; /* [b, hkv, sk, d] */
} bw_problem;

/* Creates every buffer in cl_ctx and computes the reference gradients. */
void bw_problem_init(bw_problem *p, cl_context cl_ctx, const bw_shape *shape);
void bw_problem_free(bw_problem *p);

/* Another set of sentinel-filled outputs in the problem's layouts (for reruns). */
void bw_grads_init(bw_grads *g, cl_context cl_ctx, const bw_problem *p);
void bw_grads_release(bw_grads *g);

/* flashcl_forward into the problem's O and LSE (what the backward consumes). */
flashcl_status bw_problem_forward(flashcl_context *ctx, bw_problem *p, cl_event *event);

/* flashcl_backward on `path` with the problem's views, writing `out`. */
flashcl_status bw_problem_backward(flashcl_context *ctx, const bw_problem *p, flashcl_path path, const bw_grads *out,
                                   cl_uint num_wait, const cl_event *wait, cl_event *event);

/* Reads the three output buffers back whole (after `after` when not NULL); the caller frees them. */
void bw_grads_read(const bw_grads *g, cl_command_queue queue, cl_event after, float *host[3]);

/*
 * Reads `g` back and checks dQ, dK and dV against the reference, that every
 * element outside the views kept its sentinel, and that dQ rows with no
 * visible key are exactly zero. Returns 1 when all hold.
 */
int bw_grads_verify(const bw_problem *p, const bw_grads *g, cl_command_queue queue, cl_event after, const char *label);

/* Whether two output sets hold the same bytes, buffer for buffer (guards included). */
int bw_grads_same_bits(const bw_grads *a, const bw_grads *b, cl_command_queue queue, const char *label);

#endif
