/*
 * One attention-variant problem on the device: random inputs rounded to the
 * storage type (so the library and the reference see the same numbers), the
 * variant buffers (slopes, sinks, bias, masks, cu_seqlens) the case asks for,
 * the outputs, and the checks of O, LSE, dQ, dK, dV and dsinks against the
 * double-precision reference (reference_variants.h).
 *
 * Tolerances: float32 storage uses the sweeps' float32 tolerances (O as
 * tu_compare_o, LSE as tu_compare_lse, gradients as grad_check.h). f16 and
 * bf16 use FlashAttention's criterion: the largest error against the fp64
 * reference may be at most twice that of a plain implementation in the same
 * storage type (fp32 scores, P rounded to the storage type, fp32
 * accumulation, outputs rounded) plus a tiny absolute floor. LSE is float32
 * in every storage type and keeps the float32 tolerance.
 */
#ifndef FLASHCL_TEST_VARIANT_PROBLEM_H
#define FLASHCL_TEST_VARIANT_PROBLEM_H

#include <stdint.h>

#include "reference_variants.h"
#include "testutil.h"
#include "variant_cases.h"

typedef struct vp_problem {
    vc_case c;
    flashcl_attention_desc desc; /* the case's desc with every buffer attached */
    rv_problem ref;              /* the exact reference */
    rv_problem base;             /* the plain low-precision implementation (f16/bf16) */
    size_t nq, nk, no;           /* elements of q (and dq), k (and dk), o (and dout) */
    size_t nv;                   /* elements of v (and dv) */
    size_t keep_bytes;           /* size of the dropout mask (0 without dropout) */
    float *q, *k, *v, *dout;     /* host inputs, already rounded to the storage type */
    float *slopes, *sinks, *bias;
    unsigned char *mask, *block, *keep;
    int32_t cu_q[VC_MAX_SEQS + 1], cu_k[VC_MAX_SEQS + 1];
    cl_mem q_buf, k_buf, v_buf, o_buf, lse_buf, dout_buf, dq_buf, dk_buf, dv_buf;
    cl_mem slopes_buf, sinks_buf, dsinks_buf, bias_buf, mask_buf, block_buf, cuq_buf, cuk_buf, keep_buf;
    flashcl_tensor qv, kv, vv, ov, doutv, dqv, dkv, dvv;
} vp_problem;

/* Makes the inputs and every buffer in cl_ctx (uploaded; outputs NaN-filled). */
void vp_init(vp_problem *p, cl_context cl_ctx, const vc_case *c, uint64_t seed);
void vp_free(vp_problem *p);

/*
 * flashcl_dropout_mask into the problem's keep buffer, read back into
 * p->keep (which the reference then uses). Only with dropout.
 */
flashcl_status vp_dropout_mask(flashcl_context *ctx, vp_problem *p);

/* Checks p->keep against the host Philox and the kept fraction against 1 - p (5 sigma). */
int vp_check_dropout_mask(const vp_problem *p, const char *label);

flashcl_status vp_forward(flashcl_context *ctx, vp_problem *p, cl_event *event);
flashcl_status vp_backward(flashcl_context *ctx, vp_problem *p, cl_uint num_wait, const cl_event *wait,
                           cl_event *event);

/* Reads O and LSE (after `after`) and checks them; returns 1 when they pass. */
int vp_check_forward(vp_problem *p, cl_command_queue queue, cl_event after, const char *label);
/* Reads dQ, dK, dV (and dsinks) and checks them; returns 1 when they pass. In f16/bf16,
   dQ, dK and dsinks also allow for D = rowsum(dO * O) taken from the stored, rounded O, as
   FlashAttention's backward takes it (the plain implementation sums P dP instead). */
int vp_check_backward(vp_problem *p, cl_command_queue queue, cl_event after, const char *label);

/* Reads an output of the storage type back as floats (n elements). */
void vp_read_storage(const vp_problem *p, cl_command_queue queue, cl_mem buf, size_t n, cl_event after, float *out);

#endif
