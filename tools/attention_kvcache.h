/*
 * `flashcl attention` with --k-cache: flashcl_forward_kvcache on .npy files
 * (FlashAttention-2's flash_attn_with_kvcache): contiguous or paged caches,
 * rows appended in place (optionally rotated), left padding, cache_batch_idx,
 * fp8 caches with their scales. Writes O and LSE as the plain call does, and
 * with --k-cache-out / --v-cache-out the caches after the call (the appended
 * rows included), all of them or none.
 */
#ifndef FLASHCL_TOOLS_ATTENTION_KVCACHE_H
#define FLASHCL_TOOLS_ATTENTION_KVCACHE_H

#include <stdbool.h>

#include "kv_options.h"
#include "variant_options.h"

typedef struct kvcache_request {
    const char *q_path, *out_path, *lse_path, *device;
    float scale;
    bool causal, verbose;
    const variant_options *var; /* --dtype, --window, --softcap, --alibi, --sinks (the library refuses the rest) */
    const kv_options *kv;
} kvcache_request;

/* Loads, checks, computes and writes. Returns the exit status. */
int attention_kvcache(const kvcache_request *req);

#endif
