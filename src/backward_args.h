/*
 * The argument lists every family's backward kernels share, in the order the
 * kernels take them: the D = rowsum(dO * O) pre-pass, the dK/dV and dQ
 * kernels' common head (inputs, LSE, D, outputs, sizes; each family appends
 * its own tail) and flash_bwd_dsinks (cl/flash_bwd.cl); and the scratch
 * buffer for D that they all pass.
 */
#ifndef FLASHCL_BACKWARD_ARGS_H
#define FLASHCL_BACKWARD_ARGS_H

#include "backend.h"
#include "launch.h"

/* dO, O, D, seqlen_q, seqlen_k, heads_q and the VARIANT_ARGS group. */
void flashcl__arg_bwd_dot(flashcl__args *a, const flashcl__call *call, cl_mem dsum);
/* Q, K, V, dO, LSE (buffer, offset), D, then dK and dV (dq = 0) or dQ (dq = 1), then the sizes. */
void flashcl__arg_bwd_main(flashcl__args *a, const flashcl__call *call, cl_mem dsum, int dq);
/* flash_bwd_dsinks' arguments, set on the kernel and checked: LSE (buffer, offset), D, dsinks (buffer, offset),
   batch, seqlen_q, seqlen_k, heads_q, VARIANT_ARGS. */
flashcl_status flashcl__bwd_dsinks_args(flashcl_context *ctx, cl_kernel dsinks, const flashcl__call *call, cl_mem dsum);

/* The D buffer every family's backward fills first: one float per query row (flashcl__row_count), in the rows
   scratch slot. */
flashcl_status flashcl__bwd_dsum(flashcl_context *ctx, const flashcl_attention_desc *d, cl_mem *dsum);
/* The scratch_bytes of a family whose only scratch is D (nvidia, portable): none forward, D's bytes backward. */
size_t flashcl__bwd_dsum_scratch_bytes(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d);

#endif
