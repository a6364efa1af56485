/*
 * The CPU kernel family (cl/flash_cpu.cl): forward, and the backward's
 * D / dK,dV / dQ kernels, each work-item owning 16 rows in the lanes of a
 * float16 (see the kernel file). Chosen on CPU devices; FLASHCL_TILE=kernel=cpu
 * and FLASHCL_BWD_KERNEL=cpu force it anywhere, FLASHCL_TILE=kernel=rows and
 * FLASHCL_BWD_KERNEL=rows force the portable row kernels instead.
 */
#ifndef FLASHCL_CPU_FAMILY_H
#define FLASHCL_CPU_FAMILY_H

#include "internal.h"
#include "tile_override.h"

#define FLASHCL__CPU_FWD_KERNEL "flash_fwd_cpu"
#define FLASHCL__CPU_DKDV_KERNEL "flash_bwd_cpu_dkdv"

/* Whether the planner should take the CPU family for desc: forced by the
   override, or a CPU device and a problem the family supports. */
int flashcl__cpu_forward_wanted(const flashcl_context *ctx, const flashcl_attention_desc *desc,
                                const flashcl__tile_override *ov);
int flashcl__cpu_backward_wanted(const flashcl_context *ctx, const flashcl_attention_desc *desc,
                                 const flashcl__bwd_override *ov);

/* Build the family's kernels and fill the plan (origin, reason, sizes). */
flashcl_status flashcl__plan_flash_cpu(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                       const flashcl__tile_override *ov, flashcl__flash_plan *out);
flashcl_status flashcl__plan_backward_cpu(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                          const flashcl__bwd_override *ov, flashcl__backward_plan *out);

/* Device scratch a call needs: the packed copies (K, V; for the backward also Q, dO, and not counting D). */
size_t flashcl__cpu_forward_scratch_bytes(const flashcl__flash_plan *plan, const flashcl_attention_desc *d);
size_t flashcl__cpu_backward_scratch_bytes(const flashcl__backward_plan *plan, const flashcl_attention_desc *d);

int flashcl__is_cpu_flash_plan(const flashcl__flash_plan *plan);
int flashcl__is_cpu_backward_plan(const flashcl__backward_plan *plan);

/* Launches (after the checks), with the arguments of flashcl__enqueue_flash(_backward). */
flashcl_status flashcl__enqueue_flash_cpu(flashcl_context *ctx, const flashcl__flash_plan *plan,
                                          const flashcl_attention_desc *d, const flashcl_tensor *views, cl_mem lse,
                                          size_t lse_offset, cl_uint num_wait, const cl_event *wait_list,
                                          cl_event *event);
flashcl_status flashcl__enqueue_backward_cpu(flashcl_context *ctx, const flashcl__backward_plan *plan,
                                             const flashcl_attention_desc *d, const flashcl_tensor *views, cl_mem lse,
                                             size_t lse_offset, cl_uint num_wait, const cl_event *wait_list,
                                             cl_event *event);

#endif
