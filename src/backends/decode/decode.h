/*
 * The decode family: split-KV attention for short queries (seqlen_q up to 16:
 * decoding, speculative decoding), the query heads of each KV head packed
 * into one work-group so K and V are read once per KV head, the key range
 * split over enough work-groups to fill the device, partials merged by LSE.
 * Kernels: cl/flash_decode.cl (GPUs), cl/flash_decode_cpu.cl (CPUs: one
 * work-item per work-group, float16 vectors, the cache read in place),
 * cl/flash_merge.cl, and cl/kv_append.cl for flashcl_forward_kvcache.
 * It serves flashcl_forward calls with short queries (through the family list)
 * and every flashcl_forward_kvcache call (contiguous or paged caches, append,
 * rotary, fp8).
 */
#ifndef FLASHCL_BACKENDS_DECODE_H
#define FLASHCL_BACKENDS_DECODE_H

#include "../../backend.h"
#include "../../launch.h"
#include "../../tile_override.h"

#define FLASHCL__DECODE_MAX_SEQLEN_Q 16 /* longest query the family takes from flashcl_forward */

/* What a decode launch needs to know about the keys beyond the descriptor. */
typedef struct flashcl__decode_keys {
    int paged;                   /* 1: through table/seqinfo (KV cache calls) */
    flashcl_cache_dtype dtype;   /* cache storage */
    const flashcl_tensor *k, *v; /* the views (forward) or pools (paged) */
    cl_mem table, seqinfo;       /* paged: int32 [batch, max_pages], int32 [batch][4] */
    int max_pages;
    long page_size;
    size_t max_seqlen_k;     /* the longest sequence's keys (splits are planned on it) */
    cl_mem k_scale, v_scale; /* fp8: float32 [1] or [heads_kv] (NULL = 1) */
    int scale_per_head;
} flashcl__decode_keys;

/* One built decode shape: the attention kernel and its merge. */
typedef struct flashcl__decode_plan {
    flashcl_plan pub;
    cl_kernel attend;   /* flash_decode or flash_decode_cpu (a run-time flag selects partials or O) */
    cl_kernel merge;    /* flash_merge for the partials */
    int rows;           /* packed rows per work-group */
    int heads;          /* the most KV heads per work-group (the CPU kernel's HEADS; 1 on GPUs) */
    int block_n;        /* keys per tile (chunk on CPUs) */
    size_t wg;          /* work-items per group */
    size_t local_bytes; /* __local the GPU kernel declares (the plan's figure when the driver reports none) */
    int cpu;            /* the CPU kernel */
    int groups_per_cu;  /* work-groups a compute unit runs at once, as the split count assumes (1 to 4; 4 for
                           the tensor-core form at d <= 128, which needs that many loads in flight) */
    int fused_merge;    /* the GPU kernel's FUSED_MERGE: the last split's group merges (no flash_merge launch) */
    int mma;            /* the GPU kernel's tensor-core form (DECODE_MMA) */
    char key[640];
    struct flashcl__decode_plan *next;
} flashcl__decode_plan;

/* Where a plan's knobs come from (choice.c): FLASHCL_TILE naming a decode kernel, else the tuned plan of the
   call's decode key, else none (ov.present 0: plan.c's formula). */
typedef struct flashcl__decode_choice {
    flashcl__tile_override ov; /* kernel FLASHCL__TILE_KERNEL_DECODE or _DECODE_CPU when present */
    const char *origin;        /* the plan's origin: "env", "tuned", or "table" (built-in table or formula) */
    char why[384];             /* the front of the plan's reason: the source, or why a tuned entry was set aside */
} flashcl__decode_choice;

/* Fails (FLASHCL_ERR_INVALID_TILE, naming the field) only for an override whose values its kernel does not
   take; a tuned entry with such values is set aside (why says so). cache_dtype: the call's KV cache storage. */
flashcl_status flashcl__decode_choice_for(flashcl_context *ctx, const flashcl_attention_desc *d, int cache_dtype,
                                          flashcl__decode_choice *out);

/* The plan of a call: d's head dims, variant switches and rows per (sequence, KV head); `paged`
   and `cache_dtype` select the key addressing and storage; `aligned`: every K/V row starts on
   16 bytes (whole vectors load as such). Built once per context and key. */
flashcl_status flashcl__decode_plan_for(flashcl_context *ctx, const flashcl_attention_desc *d, int paged,
                                        flashcl_cache_dtype cache_dtype, int aligned, const flashcl__decode_plan **out);
/* Whether every row of a K/V view or page pool of `elem`-byte elements starts on 16 bytes. */
int flashcl__decode_rows_aligned(const flashcl_tensor *t, size_t elem);
void flashcl__decode_release(flashcl_context *ctx);

/* Whether the family takes a flashcl_forward call; why when not. */
int flashcl__decode_covers(flashcl_context *ctx, const flashcl_attention_desc *d, char *why, size_t cap);
/* Splits per (row block, KV head, sequence): desc->num_splits, or enough to fill the device. */
/* KV heads per work-group for d's h_kv: the largest divisor of it up to plan->heads. */
int flashcl__decode_heads(const flashcl_attention_desc *d, const flashcl__decode_plan *plan);
int flashcl__decode_splits(const flashcl_context *ctx, const flashcl_attention_desc *d,
                           const flashcl__decode_plan *plan, size_t max_seqlen_k);
/* The fused merge's counts: one per (row block, KV-head group, sequence). */
size_t flashcl__decode_merge_counts(const flashcl_attention_desc *d, const flashcl__decode_plan *plan);
/* Scratch of the partials and the fused merge's counts (0 with one split). */
size_t flashcl__decode_scratch_bytes(const flashcl_attention_desc *d, const flashcl__decode_plan *plan, int splits);

/* Enqueues the attention (and the merge when split) on the chain after launch `after`; *last is the final launch. */
flashcl_status flashcl__decode_enqueue(flashcl_context *ctx, flashcl__chain *chain, int after,
                                       const flashcl_attention_desc *d, const flashcl_tensor *q,
                                       const flashcl__decode_keys *keys, const flashcl_tensor *o, cl_mem lse,
                                       size_t lse_offset, int *last);

flashcl_status flashcl__decode_forward(flashcl_context *ctx, const flashcl__call *call);

/* The merge kernel for `dim` output dims in `dtype` with or without sinks (flashcl_merge_states, and split decode). */
flashcl_status flashcl__merge_kernel(flashcl_context *ctx, const flashcl_attention_desc *d, cl_kernel *out);

#endif
