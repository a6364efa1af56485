/*
 * The NVIDIA tensor-core family (cl/flash_fwd_mma.cl, cl/flash_bwd_mma.cl):
 * mma.sync, ldmatrix and cp.async through inline PTX. The forward covers
 * f16/bf16 storage (and float32 with allow_tf32 on the TF32 mma, d <= 128),
 * head dims d and d_v that are multiples of 8 up to 256, every variant
 * (window, softcap, ALiBi, sinks, dropout, bias, masks, block masks, varlen,
 * GQA), scale > 0, views whose offsets and strides are 16-byte multiples, on a device whose probe passed (probe.c); the
 * backward the same with d = d_v (above 128, TF32 above 64: dV, and dK from stored dS or in two output-dim slices). Every other call goes to
 * the next family.
 */
#ifndef FLASHCL_BACKENDS_NVIDIA_H
#define FLASHCL_BACKENDS_NVIDIA_H

#include "../../backend.h"

#define FLASHCL__MMA_DSINKS_WG 32 /* work-items of the d(sinks) reduction (cl/flash_bwd.cl's BLOCK_M) */
#define FLASHCL__MMA_DSQ_KEYS 32  /* keys per tile of flash_bwd_mma_dq_ds (cl/flash_bwd_mma.cl's MB_DSQ_BC) */

/* The backward kernels of one build. */
typedef struct flashcl__mma_bwd {
    /* flash_bwd_mma_dot, _dkdv, _dq, and when sliced (slices = 2) k[1] is the dV-only build of
       _dkdv (one work-group per key block, every output dim, built with _dot and _dq) and k[3]
       the dK-only one (one work-group per block and slice; cl/flash_bwd_mma.cl's MB_PART) */
    cl_kernel k[4];
    cl_kernel dsinks; /* cl/flash_bwd.cl's flash_bwd_dsinks, with sinks */
    cl_kernel dq_ds;  /* 16-bit sm_80+ builds but plain ones at d <= 64 (MB_DS): dQ from stored dS (launch.c) */
    /* Sliced MB_DS builds: the dS part of _dkdv (MB_PART = 3: one work-group per key block stores
       dS^T, no accumulators) and flash_bwd_mma_dk_ds (dK = dS^T Q from it, in the dV part's
       program); where the call has the scratch they replace the dK slices k[3]. */
    cl_kernel ds_part, dk_ds;
    cl_kernel dv_ps;  /* flash_bwd_mma_dk_ds again, its arguments set to form dV = (P Z)^T dO */
    int dq_ds_rows;   /* its query rows per work-group (MB_DSQ_ROWS) */
    int plain;        /* built with MMA_PLAIN: dK/dV and dQ take causal as their last argument */
    int slices;       /* output-dim slices of dK per key block: 1, or 2 above d = 128 (TF32: 64) */
    flashcl_plan pub; /* what flashcl_backward_plan_query reports */
} flashcl__mma_bwd;

/* One built forward and its backward builds, keyed by the forward's build options. */
typedef struct flashcl__mma_plan {
    struct flashcl__mma_plan *next;
    flashcl_plan pub; /* the forward */
    cl_kernel kernel; /* flash_fwd_mma */
    /* The backward, built on first use: [0] the general kernels, [1] MMA_PLAIN (plain and
       causal calls; a window runs with the same forward build but needs [0]). */
    flashcl__mma_bwd bwd[2];
} flashcl__mma_plan;

/* The family's state in ctx->family[FLASHCL__FAMILY_NVIDIA]. */
typedef struct flashcl__nvidia_state {
    int probe;                /* 0 not yet probed, 1 usable, -1 not */
    int sm75;                 /* the sm_75 form (cl/ptx.cl's MMA_SM75): f16 only, no cp.async */
    int cc;                   /* compute capability, major * 10 + minor (0 when not queried) */
    char why[160];            /* what the probe found */
    int wg_probe;             /* the wgmma form (wgmma.c): 0 not yet probed, 1 usable, -1 not */
    char wg_why[160];         /* what its probe found */
    int wg_bwd_failed;        /* a wgmma backward build failed: the backward keeps mma.sync */
    char wg_bwd_why[160];     /* why */
    flashcl__mma_plan *plans; /* every variant built so far, newest first */
} flashcl__nvidia_state;

/* The state, created on first use (NULL when out of host memory). */
flashcl__nvidia_state *flashcl__nvidia_state_of(flashcl_context *ctx);
/* 1 when the probe passed on this context's device; *why says what was found. */
int flashcl__mma_supported(flashcl_context *ctx, const char **why);
/* Runs a probe kernel (arguments: its input buffer, its output buffer) as one work-group of
   `work_items` on a private queue, so the application's queue is never drained, and reads the
   output back: CL_SUCCESS or the first failure. */
cl_int flashcl__run_probe_kernel(flashcl_context *ctx, cl_kernel kernel, const void *in, size_t in_bytes, void *out,
                                 size_t out_bytes, size_t work_items);
/* 1 when the wgmma form (sm_90a, cl/flash_fwd_mma.cl's MMA_WG) passed its probe; *why says what was found. */
int flashcl__wgmma_supported(flashcl_context *ctx, const char **why);
/* The driver's PTX of an MMA_WG build -> sm_90a PTX (a flashcl__binary_patch). */
int flashcl__wgmma_patch(const unsigned char *in, size_t n, unsigned char **out, size_t *out_n, char *why, size_t cap);
/* The descriptor-level test of a pass (storage, head dims, variants, probe); why when not. */
int flashcl__mma_covers(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d, char *why,
                        size_t cap);
/* cp.async moves 16 bytes: every row start must be a multiple of `chunk` elements (8 of 16 bits,
   4 floats with TF32: flashcl__mma_chunk_elems). */
size_t flashcl__mma_chunk_elems(const flashcl_attention_desc *d);
int flashcl__mma_views_aligned(const flashcl_tensor *views, int n, size_t chunk);
/* The plan of the descriptor's storage and head dim; the backward kernels built on demand. */
flashcl_status flashcl__mma_plan_for(flashcl_context *ctx, const flashcl_attention_desc *d,
                                     const flashcl__mma_plan **out);
flashcl_status flashcl__mma_backward_plan_for(flashcl_context *ctx, const flashcl_attention_desc *d,
                                              const flashcl__mma_bwd **out);
void flashcl__mma_release_plans(flashcl__nvidia_state *state);

flashcl_status flashcl__mma_forward(flashcl_context *ctx, const flashcl__call *call);
/* Bytes of the dS scratch a backward uses for dQ (launch.c), 0 when it recomputes dS; the
   scratch's key rows and query columns. */
size_t flashcl__mma_ds_bytes(const flashcl_context *ctx, const flashcl_attention_desc *d, const flashcl__mma_bwd *plan,
                             size_t *keys, size_t *pitch);
/* The (P Z)^T scratch of a call whose dS scratch is ds_bytes (launch.c): 0 or ds_bytes. */
size_t flashcl__mma_ps_bytes(const flashcl_context *ctx, const flashcl__mma_bwd *plan, size_t ds_bytes);
flashcl_status flashcl__mma_backward(flashcl_context *ctx, const flashcl__call *call);

#endif
