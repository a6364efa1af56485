/*
 * The KV cache of a `bench` path that runs flashcl_forward_kvcache: the
 * same keys and values as the plain problem (the float32 K and V bench
 * draws), put into a contiguous cache [b, seqlen_k, hkv, d] or into page
 * pools [num_pages, page_size, hkv, d] whose pages are dealt out to the
 * sequences in a shuffled order (as an allocator hands out free pages, so
 * neighbouring pages of a sequence are far apart), stored in the
 * descriptor's dtype or as fp8 with a per-tensor scale (amax / the format's
 * largest value). Every sequence is full: cache_seqlens = seqlen_k.
 */
#ifndef FLASHCL_TOOLS_BENCH_CACHE_H
#define FLASHCL_TOOLS_BENCH_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <flashcl.h>

/* What cache to make. */
typedef struct bench_cache_spec {
    size_t page_size;          /* 0: contiguous */
    flashcl_cache_dtype dtype; /* SAME: the descriptor's dtype */
} bench_cache_spec;

typedef struct bench_cache {
    flashcl_kv_cache kv;  /* what flashcl_forward_kvcache takes (views, tables, scales) */
    cl_mem pool[2];       /* K and V: the cache, or the page pools */
    cl_mem scale[2];      /* fp8: the per-tensor scales */
    float scale_value[2]; /* their values */
    int32_t *block_table; /* paged: [batch, max_pages] */
    int32_t *seqlens;     /* [batch], all seqlen_k */
    size_t elem;          /* bytes per cache element */
} bench_cache;

/* Bytes per element of the cache: 1 for fp8, else the storage type's. */
size_t bench_cache_elem(const bench_cache_spec *spec, flashcl_dtype dtype);

/*
 * The tables and the layout for desc's sizes (batch, heads_kv, seqlen_k,
 * head dims): call first. Returns 0, or the exit status after printing why.
 */
int bench_cache_layout(const bench_cache_spec *spec, const flashcl_attention_desc *desc, bench_cache *cache);

/*
 * Uploads K (which = 0) or V (which = 1) from its packed float32 values
 * [b, seqlen_k, hkv, dim] into the cache. Returns 0 or the exit status.
 */
int bench_cache_upload(flashcl_context *ctx, const bench_cache_spec *spec, const flashcl_attention_desc *desc,
                       int which, const float *values, bench_cache *cache);

/* "paged, 16 rows a page, 4096 pages in a shuffled order, fp8_e4m3 (per-tensor scales 0.00223, 0.00223)". */
void bench_cache_describe(const bench_cache_spec *spec, const bench_cache *cache, char *buf, size_t size);

void bench_cache_release(bench_cache *cache);

#endif
