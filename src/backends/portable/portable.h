/*
 * The portable kernel family: what every OpenCL device runs, with every
 * variant. Forward, one kernel per file: flash_fwd_rows (cl/flash_fwd_rows.cl,
 * one work-item per query row; CPUs), flash_fwd_split (cl/flash_fwd_split.cl,
 * several work-items per row; plain float32 only) and flash_fwd_tiles
 * (cl/flash_fwd_tiles.cl, 16x16 work-items, register-blocked like a GEMM; GPUs).
 * Backward: flash_bwd_dot (D = rowsum(dO * O)), then dK/dV and dQ from the
 * row kernels (cl/flash_bwd.cl) or the GPU tiles (cl/flash_bwd_tiles.cl),
 * and flash_bwd_dsinks with sinks.
 */
#ifndef FLASHCL_BACKENDS_PORTABLE_H
#define FLASHCL_BACKENDS_PORTABLE_H

#include "../../backend.h"

typedef struct flashcl__flash_plan {
    flashcl_plan pub;
    cl_program program;
    cl_kernel kernel;
    char key[320]; /* head dims + variant switches: one plan per distinct build */
    struct flashcl__flash_plan *next;
} flashcl__flash_plan;

typedef struct flashcl__backward_plan {
    flashcl_plan pub;
    int tiles;             /* 1: flash_bwd_dkdv_tiles + flash_bwd_dq_tiles; 0: the row kernels */
    size_t dot_wg;         /* flash_bwd_dot: one work-item per query row, dot_wg per group */
    size_t main_wg;        /* work-items per group of the dK/dV and dQ kernels */
    size_t keys_per_group; /* keys one dK/dV work-group owns */
    size_t rows_per_group; /* query rows one dQ work-group owns */
    cl_kernel dot, dkdv, dq;
    cl_kernel dsinks; /* flash_bwd_dsinks (rows build, dot_wg work-items), only with sinks */
    char key[320];
    struct flashcl__backward_plan *next;
} flashcl__backward_plan;

/* The family's plans in ctx->family[FLASHCL__FAMILY_PORTABLE]. */
typedef struct flashcl__portable_state {
    flashcl__flash_plan *forward;
    flashcl__backward_plan *backward;
} flashcl__portable_state;

/* Plans are computed once per context and (head dims, variant switches), and owned by it. */
flashcl_status flashcl__plan_flash(flashcl_context *ctx, const flashcl_attention_desc *d,
                                   const flashcl__flash_plan **out);
flashcl_status flashcl__plan_backward(flashcl_context *ctx, const flashcl_attention_desc *d,
                                      const flashcl__backward_plan **out);
void flashcl__release_flash_plans(flashcl__portable_state *state);
void flashcl__release_backward_plans(flashcl__portable_state *state);
/* The family's state, created on first use (NULL when out of host memory, with the error set). */
flashcl__portable_state *flashcl__portable_state_of(flashcl_context *ctx);

flashcl_status flashcl__portable_forward(flashcl_context *ctx, const flashcl__call *call);
flashcl_status flashcl__portable_backward(flashcl_context *ctx, const flashcl__call *call);

#endif
