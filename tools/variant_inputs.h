/*
 * The arrays behind the variant options (variant_options.h), for `attention`
 * and `bench` alike: read from their .npy files or made from the problem's
 * sizes ('standard' slopes, 'random' data, --block-sparse, --varlen),
 * checked against the problem, and uploaded into buffers the descriptor
 * points at. Every failure prints one line naming the option and returns
 * TOOL_EXIT_USAGE (a bad file or shape) or TOOL_EXIT_FAILED (memory, device).
 */
#ifndef FLASHCL_TOOLS_VARIANT_INPUTS_H
#define FLASHCL_TOOLS_VARIANT_INPUTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <flashcl.h>

#include "npy.h"
#include "variant_options.h"

/* The state every run's random data starts from, so all runs see the same inputs. */
#define VARIANT_RANDOM_SEED 0x853c49e6748fea9bu

/* Fills data with values uniform in [-1, 1) (xorshift64), advancing *state (never 0). */
void random_fill_uniform(float *data, size_t count, uint64_t *state);

/* The host arrays; one not asked for has bytes == NULL. Masks are bytes (or float32 from a file). */
typedef struct variant_arrays {
    npy_array alibi, sinks, bias, mask, block_mask, cu_q, cu_k;
} variant_arrays;

/*
 * Reads or makes every array `v` asks for, in this order: the varlen
 * offsets, slopes, sinks, bias, mask, block mask (random data draws from
 * *state in that order). desc comes with its sizes set (with varlen,
 * seqlen_q/k are the packed totals and batch is ignored); this sets its
 * scalar variant fields, the varlen batch and max_seqlen_q/k, the block
 * sizes and the views of bias and masks. Returns 0 or the exit status.
 */
int variant_arrays_prepare(const variant_options *v, flashcl_attention_desc *desc, uint64_t *state,
                           variant_arrays *arrays);

void variant_arrays_free(variant_arrays *arrays);

/* The device buffers the descriptor's variant fields point at. */
typedef struct variant_buffers {
    cl_mem alibi, sinks, dsinks, bias, mask, block_mask, cu_q, cu_k;
} variant_buffers;

/*
 * Uploads the arrays into buffers of ctx and points desc at them; with
 * want_dsinks also a [heads_q] float buffer for the sinks' gradient.
 * Returns 0 or TOOL_EXIT_FAILED; release the buffers either way.
 */
int variant_buffers_attach(flashcl_context *ctx, const variant_arrays *arrays, bool want_dsinks,
                           flashcl_attention_desc *desc, variant_buffers *buffers);

/* Reads dsinks ([heads_q] floats) back after the backward. Returns 0 or TOOL_EXIT_FAILED. */
int variant_read_dsinks(flashcl_context *ctx, const variant_buffers *buffers, size_t heads_q, float *out);

void variant_buffers_release(variant_buffers *buffers);

#endif
