/*
 * The attention-variant options, one grammar for `flashcl attention` and
 * `flashcl bench`: storage type, window, softcap, dropout, ALiBi, sinks,
 * bias, mask, block mask and varlen. An option whose value is data takes a
 * .npy file or a word that makes the data (`--alibi standard`,
 * `--sinks random`, `--block-sparse F`, `--varlen N`), so either command
 * can run a feature with real or synthetic inputs (variant_inputs.h turns
 * the options into arrays). Every bad value prints one line naming the
 * option.
 */
#ifndef FLASHCL_TOOLS_VARIANT_OPTIONS_H
#define FLASHCL_TOOLS_VARIANT_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <flashcl.h>

#include "options.h"

/* The words that make data instead of naming a file. */
#define VARIANT_STANDARD_SLOPES "standard"
#define VARIANT_RANDOM "random"

typedef struct variant_options {
    flashcl_dtype dtype;
    bool window;
    int window_left, window_right;
    float softcap;
    bool dropout;
    float dropout_p;
    uint64_t dropout_seed, dropout_offset;
    /* Each NULL when not asked for; a .npy path or one of the words above. */
    const char *alibi, *sinks, *bias, *mask, *block_mask, *cu_q, *cu_k;
    float block_sparsity; /* --block-sparse: fraction of blocks skipped; < 0: none */
    bool block_size;      /* --block-size given */
    size_t block_q, block_k;
    size_t varlen_seqs; /* --varlen N: the rows cut into N sequences; 0: none */
    const char *dsinks; /* attention --dsinks OUT.npy */
    size_t head_dim_v;  /* bench --head-dim-v (attention takes V's); 0: head_dim */
    bool allow_tf32;    /* --allow-tf32: desc.allow_tf32 (float32 on TF32 tensor cores where they exist) */
} variant_options;

/* Every feature off. */
void variant_defaults(variant_options *v);

/*
 * Takes the current option if it is one of the shared variant options:
 * returns 1 (taken), 0 (not a variant option) or -1 (bad value; printed).
 */
int variant_parse_option(option_cursor *c, variant_options *v);

/* Rules between options, after parsing. Returns 0 or TOOL_EXIT_USAGE. */
int variant_check(const variant_options *v);

/*
 * What flashcl_forward_kvcache does not take (dropout, bias, mask, block mask, varlen, --dsinks),
 * refused by both commands before anything runs: 0, or TOOL_EXIT_USAGE with one line naming the option.
 */
int variant_check_cache_call(const variant_options *v);

/*
 * The standard path takes no feature (a 16-bit dtype included): both commands refuse such a call before
 * anything runs, naming what it uses. 0, or TOOL_EXIT_USAGE with that line.
 */
int variant_check_standard_path(const variant_options *v);

/* Whether any feature was asked for. */
bool variant_any(const variant_options *v);

/* Whether the problem is varlen (--cu-seqlens-q/k or --varlen). */
bool variant_is_varlen(const variant_options *v);

/* "bf16,window(16,0),softcap=30,..." into buf; "" for none. */
void variant_describe(const variant_options *v, char *buf, size_t size);

/* The help text of the shared options. */
void variant_help(FILE *out);

#endif
