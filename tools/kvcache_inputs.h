/*
 * The .npy inputs of `flashcl attention`'s KV-cache call (--k-cache and its
 * companions, kv_options.h), loaded and checked against each other: ranks,
 * the dimensions the files share, dtypes (int32 tables, float32 data). What
 * only the values can tell (a page index past the pool, a length past the
 * capacity, a left pad past the length) is the library's to check: it names
 * the field. Each failure here prints one line naming the option and returns
 * TOOL_EXIT_USAGE, before anything is computed or written.
 */
#ifndef FLASHCL_TOOLS_KVCACHE_INPUTS_H
#define FLASHCL_TOOLS_KVCACHE_INPUTS_H

#include <stdbool.h>
#include <stddef.h>

#include "kv_options.h"
#include "npy.h"

typedef struct kvcache_inputs {
    npy_array q, k_cache, v_cache;         /* float32 [b, sq, hq, d]; the pools [slots, rows, hkv, d | d_v] */
    npy_array block_table;                 /* int32 [b, max_pages], or none (bytes NULL) */
    npy_array seqlens, leftpad, batch_idx; /* int32 [b] each, or none */
    npy_array k_new, v_new;                /* float32 [b, s_new, hkv, d | d_v], or none */
    npy_array cos, sin;                    /* float32 [seqlen_ro, rotary_dim / 2], or none */
    float *k_scale, *v_scale;              /* fp8: scale_count floats each, else NULL */
    size_t scale_count;                    /* 1 (per tensor) or heads_kv (per head) */
    size_t batch, seqlen_q, heads_q, heads_kv, head_dim, head_dim_v;
    bool paged;
    size_t slots, rows; /* pool: pages and page_size, or cache sequences and capacity */
    size_t max_pages, seqlen_new, seqlen_ro, rotary_dim;
} kvcache_inputs;

/* Loads --q and every cache file kv names. Returns 0 or the exit status (in is freed then). */
int kvcache_inputs_load(const char *q_path, const kv_options *kv, kvcache_inputs *in);

void kvcache_inputs_free(kvcache_inputs *in);

#endif
