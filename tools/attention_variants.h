/*
 * The attention-variant options of `flashcl attention`: storage type,
 * window, softcap, ALiBi, sinks (and their gradient), dropout, bias, masks,
 * block mask and varlen. Parsing, the rules between flags, loading and
 * checking the .npy inputs against the problem's sizes, and the device
 * buffers the descriptor points at. Every failure prints one line naming
 * the option and returns TOOL_EXIT_USAGE (or TOOL_EXIT_FAILED for the device).
 */
#ifndef FLASHCL_TOOLS_ATTENTION_VARIANTS_H
#define FLASHCL_TOOLS_ATTENTION_VARIANTS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <flashcl.h>

#include "npy.h"
#include "options.h"

typedef struct variant_args {
    flashcl_dtype dtype;
    bool window;
    int window_left, window_right;
    float softcap;
    bool dropout;
    float dropout_p;
    uint64_t dropout_seed, dropout_offset;
    bool block_size;
    size_t block_q, block_k;
    const char *alibi_path, *sinks_path, *dsinks_path, *bias_path, *mask_path;
    const char *block_mask_path, *cu_q_path, *cu_k_path;
} variant_args;

/*
 * Takes the current option if it is a variant option: returns 1 (taken),
 * 0 (not a variant option) or -1 (bad value; the error is printed).
 */
int variant_parse_option(option_cursor *c, variant_args *a);

/* Rules between flags (after parsing): pairs that go together. */
int variant_check_args(const variant_args *a, bool backward);

/* Whether --cu-seqlens-q/-k were given (Q, K, V are then [total, h, d]). */
bool variant_is_varlen(const variant_args *a);

/* The loaded variant inputs; arrays not asked for stay zeroed. */
typedef struct variant_inputs {
    npy_array alibi, sinks, bias, mask, block_mask, cu_q, cu_k;
    unsigned char *mask_bytes; /* the mask as 0/1 bytes, whatever its dtype */
} variant_inputs;

/* Loads every variant file. Returns 0 or TOOL_EXIT_USAGE. */
int variant_load(const variant_args *a, variant_inputs *in);

/*
 * Checks the loaded arrays against desc's sizes (filled from Q, K, V) and
 * sets desc's scalar variant fields and varlen sizes (batch, max_seqlen_q/k).
 * For varlen, desc->seqlen_q/k are the packed totals and batch is set from
 * the cu_seqlens arrays. Returns 0 or TOOL_EXIT_USAGE.
 */
int variant_apply(const variant_args *a, variant_inputs *in, flashcl_attention_desc *desc);

void variant_inputs_free(variant_inputs *in);

/* The device buffers the descriptor's variant fields point at. */
typedef struct variant_buffers {
    cl_mem alibi, sinks, dsinks, bias, mask, block_mask, cu_q, cu_k;
} variant_buffers;

/* Creates and fills the buffers in ctx and points desc at them. Returns 0 or TOOL_EXIT_FAILED. */
int variant_attach(flashcl_context *ctx, const variant_inputs *in, bool want_dsinks,
                   flashcl_attention_desc *desc, variant_buffers *bufs);

/* Reads dsinks ([heads_q] floats) back after the backward. Returns 0 or TOOL_EXIT_FAILED. */
int variant_read_dsinks(flashcl_context *ctx, const variant_buffers *bufs, size_t heads_q,
                        float *out);

void variant_buffers_release(variant_buffers *bufs);

/* The help text of the variant options. */
void variant_help(FILE *out);

#endif
