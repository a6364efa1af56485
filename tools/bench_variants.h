/*
 * `flashcl bench` with attention variants: what each feature costs. Flash
 * with the requested features and plain float32 flash run on the same sizes
 * in one process, side by side (the standard path supports no variant, so it
 * is not run). Inputs are synthetic: random Q, K, V in the storage type,
 * standard ALiBi slopes, random sinks, bias and mask, a random block mask of
 * the requested sparsity, equal-ish varlen sequences.
 */
#ifndef FLASHCL_TOOLS_BENCH_VARIANTS_H
#define FLASHCL_TOOLS_BENCH_VARIANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <flashcl.h>

#include "bench_run.h"
#include "options.h"

typedef struct bench_variant_args {
    flashcl_dtype dtype;
    bool window;
    int window_left, window_right;
    float softcap;
    bool alibi, sinks, bias, mask;
    float dropout_p;
    float block_sparsity; /* fraction of blocks skipped; < 0 = no block mask */
    size_t block_size;    /* block_q = block_k */
    size_t varlen_seqs;   /* 0 = not varlen */
    size_t head_dim_v;    /* 0 = head_dim */
    bool no_plain;        /* --no-plain: skip the plain float32 run (no cost ratio) */
} bench_variant_args;

/* Defaults: every feature off. */
void bench_variant_defaults(bench_variant_args *v);

/* Takes the current option if it is a variant option: 1 taken, 0 not one, -1 bad value. */
int bench_variant_parse_option(option_cursor *c, bench_variant_args *v);

/* Whether any variant was asked for. */
bool bench_variant_any(const bench_variant_args *v);

/* Rules between flags, after parsing; head_dim is the problem's. Returns 0 or TOOL_EXIT_USAGE. */
int bench_variant_check(const bench_variant_args *v, size_t head_dim);

/* "window(16,0),softcap,alibi,..." into buf. */
void bench_variant_describe(const bench_variant_args *v, char *buf, size_t size);

/* The problem to run: sizes in `base` (batch, heads, seqlens, head_dim, causal). */
typedef struct bench_variant_run {
    flashcl_attention_desc base;
    bench_variant_args var;
    bench_settings settings;
    bool backward; /* also time the backward pass */
    bool json;
    const char *device;
} bench_variant_run;

/* Runs both paths and prints the report. Returns the exit status. */
int bench_variants(const bench_variant_run *run);

/* The help text of the variant flags. */
void bench_variant_help(FILE *out);

#endif
