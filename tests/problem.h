/*
 * One attention problem on the device: random inputs in the requested
 * layouts, a sentinel-filled O (with a guard region after the view) and LSE,
 * and the double-precision reference answer. Shared by every test that runs
 * the kernels, so they all judge results the same way.
 */
#ifndef FLASHCL_TEST_PROBLEM_H
#define FLASHCL_TEST_PROBLEM_H

#include "testutil.h"

/* How a tensor view is laid out inside its buffer. */
typedef enum tu_layout {
    TU_BSHD = 0,   /* flashcl_tensor_bshd */
    TU_BHSD = 1,   /* flashcl_tensor_bhsd */
    TU_PADDED = 2, /* nonzero offset, every stride padded: rows not 16-byte aligned */
    TU_ZERO = 3    /* all strides zero: the library's packed [b, s, h, d] default */
} tu_layout;

const char *tu_layout_name(tu_layout layout);

/* Guard floats after the O view and around LSE that no call may touch. */
#define TU_GUARD 64

typedef struct tu_shape {
    flashcl_attention_desc desc;
    tu_layout layout_q, layout_k, layout_v, layout_o;
    size_t lse_offset;
    uint64_t seed;
} tu_shape;

typedef struct tu_buffer {
    flashcl_tensor view; /* what FlashCL is given */
    tu_dims dims;
    size_t count; /* floats in the buffer */
    float *host;  /* the buffer contents as uploaded */
} tu_buffer;

/* The view of `layout` for dims, with no buffer attached yet. */
flashcl_tensor tu_view_make(tu_layout layout, tu_dims dims);

/*
 * Creates a buffer for a view of `layout`: `lead` floats before the view
 * (added to its offset) and `guard` after it. Everything outside the view is
 * a sentinel; the view is filled from rng in [lo, hi), or is sentinel too
 * (an output) when rng is NULL. host keeps the uploaded contents.
 */
void tu_buffer_init(tu_buffer *t, cl_context cl_ctx, tu_layout layout, tu_dims dims, size_t lead, size_t guard,
                    tu_rng *rng, float lo, float hi);
void tu_buffer_release(tu_buffer *t);

typedef struct tu_problem {
    tu_shape shape;
    ref_problem ref;
    tu_buffer q, k, v, o;
    cl_mem lse;
    size_t lse_count; /* floats in the LSE buffer, offset and guard included */
    float *lse_host;  /* the LSE buffer contents as uploaded (sentinel) */
    double *ref_o;    /* [b, hq, sq, d] */
    double *ref_lse;  /* [b, hq, sq] */
} tu_problem;

/* A shape with every layout the same, lse_offset 0, seed 1. */
tu_shape tu_shape_make(size_t batch, size_t heads_q, size_t heads_kv, size_t seqlen_q, size_t seqlen_k, size_t head_dim,
                       int causal, tu_layout layout);
/* "b=1 hq=2 hkv=1 sq=7 sk=63 d=16 causal=1 scale=default layout=bshd/..." */
void tu_shape_describe(const tu_shape *shape, char *buf, size_t size);

/* Creates the buffers in cl_ctx, uploads them and computes the reference. */
void tu_problem_init(tu_problem *p, cl_context cl_ctx, const tu_shape *shape);
void tu_problem_free(tu_problem *p);
/* Rewrites the O and LSE buffers with their sentinels (before a rerun). */
void tu_problem_reset_outputs(tu_problem *p, cl_command_queue queue);

/* flashcl_forward on `path` (the descriptor's path set to it) with the problem's views. */
flashcl_status tu_problem_run(flashcl_context *ctx, tu_problem *p, flashcl_path path, cl_uint num_wait,
                              const cl_event *wait, cl_event *event);

/* Reads O and LSE back (after `after`, when not NULL); the caller frees both. */
void tu_problem_read(tu_problem *p, cl_command_queue queue, cl_event after, float **o, float **lse);

/*
 * Reads the outputs back and checks O and LSE against the reference and that
 * nothing outside the O view or the LSE range changed. Returns 1 when all hold.
 */
int tu_problem_verify(tu_problem *p, cl_command_queue queue, cl_event after, const char *label);

#endif
