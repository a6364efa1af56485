/*
 * The CPU kernel family (cl/flash_cpu.cl): forward, and the backward's
 * D / dK,dV / dQ kernels (or D and the fused dK,dV,dQ kernel, one work-item
 * per sequence and KV head, when those fill the cores), each work-item owning
 * 16 rows in the lanes of a float16 (see the kernel file); the side a kernel
 * streams is packed into dense scratch first. It covers float32, float16 and bfloat16 storage with
 * every variant (causal, window, softcap, ALiBi, sinks and their gradient,
 * dropout, bias, masks, block masks, varlen; GQA, any lengths and strides,
 * d and d_v != d each up to 256) on CPU devices; FLASHCL_TILE=kernel=cpu
 * and FLASHCL_BWD_KERNEL=cpu force it anywhere (and make an uncovered call an
 * error that says why), FLASHCL_TILE=kernel=rows / FLASHCL_BWD_KERNEL=rows
 * hand the call to the portable row kernels instead.
 */
#ifndef FLASHCL_BACKENDS_CPU_H
#define FLASHCL_BACKENDS_CPU_H

#include "../../backend.h"
#include "../../tile_override.h"

#define FLASHCL__CPU_FWD_KERNEL "flash_fwd_cpu"
#define FLASHCL__CPU_DKDV_KERNEL "flash_bwd_cpu_dkdv"
#define FLASHCL__CPU_FUSED_KERNEL "flash_bwd_cpu_fused"

typedef struct flashcl__cpu_plan {
    flashcl_plan pub;  /* block_rows: rows per work-item; block_cols: the chunk */
    cl_kernel main[5]; /* forward: flash_fwd_cpu; backward: dot, dK/dV, dQ, dsinks (sinks builds), fused */
    cl_kernel pack;    /* flash_cpu_pack */
    int head_dim;
    char variants[256]; /* the variant switches (flashcl__variant_options, HEAD_DIM_V included) it was built with */
    int causal;         /* a tuned plan may differ between causal and not */
    struct flashcl__cpu_plan *next;
} flashcl__cpu_plan;

/* The family's plans, by pass, head dim and variant switches, in ctx->family[FLASHCL__FAMILY_CPU]. */
typedef struct flashcl__cpu_state {
    flashcl__cpu_plan *plans[2]; /* [flashcl__pass] */
} flashcl__cpu_state;

/* Whether the family takes the pass: forced by the override, or a CPU device and a call it supports. */
int flashcl__cpu_wanted(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d, char *why,
                        size_t cap);
/* The pass's plan (built once per head dim and variant build); a forced call the family does not support is an error. */
flashcl_status flashcl__cpu_plan_for(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                                     const flashcl__cpu_plan **out);
void flashcl__cpu_release_plans(flashcl__cpu_state *state);

/* Device scratch a call needs: the packed copies (K, V; for the backward also Q, dO; the fused
   backward has its float32 dQ in place of K and V), D excluded. */
size_t flashcl__cpu_packed_scratch(flashcl_context *ctx, const flashcl__cpu_plan *plan, flashcl__pass pass,
                                   const flashcl_attention_desc *d);

/* Whether the backward of d runs fused (flash_bwd_cpu_fused) rather than as the dK/dV and dQ
   kernels; why (may be NULL) says which and why, for the plan's reason. */
int flashcl__cpu_bwd_fused(flashcl_context *ctx, const flashcl__cpu_plan *plan, const flashcl_attention_desc *d,
                           char *why, size_t cap);

flashcl_status flashcl__cpu_forward(flashcl_context *ctx, const flashcl__call *call);
flashcl_status flashcl__cpu_backward(flashcl_context *ctx, const flashcl__call *call);

#endif
