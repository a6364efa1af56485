/*
 * The KV-cache options of `flashcl attention` and `flashcl bench`, one
 * grammar: the cache's storage (--cache-dtype same|fp8_e4m3|fp8_e5m2) and the
 * split count (--num-splits N, desc.num_splits, also for the plain forward)
 * for both; bench's synthetic caches (--page-size P, --kv-cache); the .npy
 * files of attention's cache call (--k-cache, --v-cache, --block-table, ...).
 * Every bad value prints one line naming the option.
 */
#ifndef FLASHCL_TOOLS_KV_OPTIONS_H
#define FLASHCL_TOOLS_KV_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <flashcl.h>

#include "options.h"

typedef struct kv_options {
    flashcl_cache_dtype cache_dtype; /* --cache-dtype; SAME: the descriptor's dtype */
    bool cache_dtype_given;
    size_t num_splits; /* --num-splits; 0: automatic */
    /* bench: the cache it makes */
    size_t page_size; /* --page-size P: paged pools of P rows; 0: none */
    bool kv_cache;    /* --kv-cache: a contiguous cache through flashcl_forward_kvcache */
    /* attention: the cache call's files (NULL: not given) and flags */
    const char *k_cache, *v_cache, *block_table, *cache_seqlens, *cache_leftpad, *cache_batch_idx;
    const char *k_new, *v_new, *rotary_cos, *rotary_sin, *k_scale, *v_scale;
    const char *k_cache_out, *v_cache_out;
    bool rotary_interleaved;
} kv_options;

/* Which command parses: each takes the shared options and its own. */
typedef enum kv_command { KV_FOR_ATTENTION, KV_FOR_BENCH } kv_command;

void kv_defaults(kv_options *kv);

/* Takes the current option if it is a KV-cache option of `command`: 1 taken, 0 not one, -1 bad value (printed). */
int kv_parse_option(option_cursor *c, kv_command command, kv_options *kv);

/* bench: whether a cache is asked for (--page-size, --kv-cache or an fp8 --cache-dtype). */
bool kv_bench_wants_cache(const kv_options *kv);

/* attention: whether the cache call is asked for (--k-cache). */
bool kv_attention_wants_cache(const kv_options *kv);

/* Rules between the options of `command`, after parsing. Returns 0 or TOOL_EXIT_USAGE. */
int kv_check(const kv_options *kv, kv_command command);

/* "same", "fp8_e4m3", "fp8_e5m2". */
const char *kv_cache_dtype_name(flashcl_cache_dtype dtype);

/* The help text of the options of `command`. */
void kv_help(FILE *out, kv_command command);

#endif
