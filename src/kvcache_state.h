/*
 * What flashcl_forward_kvcache keeps in a context between calls, so that a
 * decode step costs its kernel launches and little else: the device copies of
 * the block table and the per-sequence lengths (two scratch slots, written by
 * non-blocking writes when their content changes), the append/rotary kernels
 * of each shape, and an fp8 scale of 1.
 */
#ifndef FLASHCL_KVCACHE_STATE_H
#define FLASHCL_KVCACHE_STATE_H

#include "launch.h"

/* Links of `chain` that write table[0..table_count) and seqinfo[0..seqinfo_count) to the device
   (after `after`); *table / *seqinfo are the buffers, *last the link to wait for. The host arrays
   are copied first: the caller may change them as soon as this returns. A slot that already
   holds the same values is not written (*last is then `after` when neither is). On failure
   *last is the write already enqueued, if any (the caller forgets the tables and makes that
   write the scratch's last use). */
flashcl_status flashcl__kv_upload_tables(flashcl_context *ctx, flashcl__chain *chain, const int32_t *table,
                                         size_t table_count, const int32_t *seqinfo, size_t seqinfo_count, int after,
                                         cl_mem *table_buf, cl_mem *seqinfo_buf, int *last);
/* Forgets what the table slots hold (a call failed after writing them: the next one writes again). */
void flashcl__kv_forget_tables(flashcl_context *ctx);
/* The kv_append / rotate_q kernels built with `options` (either may be NULL when not needed). */
flashcl_status flashcl__kv_kernels(flashcl_context *ctx, const char *options, cl_kernel *append, cl_kernel *rotate);
/* A float32 [1] buffer holding 1 (the scale of an fp8 cache given none). */
flashcl_status flashcl__kv_unit_scale(flashcl_context *ctx, cl_mem *out);
/* Frees the state (with the decode family, at context destroy). */
void flashcl__kv_release(flashcl_context *ctx);

#endif
