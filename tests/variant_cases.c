/* The variant case list; see variant_cases.h. */
#include "variant_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

vc_case *vc_list_add(vc_list *l) {
    if (l->count == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 32;
        l->items = realloc(l->items, l->cap * sizeof *l->items);
        REQUIRE(l->items != NULL);
    }
    vc_case *c = &l->items[l->count++];
    memset(c, 0, sizeof *c);
    return c;
}

static vc_case *push(vc_list *l, const char *name, flashcl_dtype dtype, size_t b, size_t hq, size_t hkv, size_t sq,
                     size_t sk, size_t d, size_t dv, int causal) {
    vc_case *c = vc_list_add(l);
    c->desc = (flashcl_attention_desc)FLASHCL_ATTENTION_DESC_INIT;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->desc.dtype = dtype;
    c->desc.batch = b;
    c->desc.heads_q = hq;
    c->desc.heads_kv = hkv;
    c->desc.seqlen_q = sq;
    c->desc.seqlen_k = sk;
    c->desc.head_dim = d;
    c->desc.head_dim_v = dv;
    c->desc.causal = causal;
    c->mask_density = 0.7;
    c->backward = 1;
    return c;
}

static void window(vc_case *c, int left, int right) {
    c->desc.window = 1;
    c->desc.window_left = left;
    c->desc.window_right = right;
}

static void dropout(vc_case *c, float p, uint64_t seed, uint64_t offset) {
    c->desc.dropout_p = p;
    c->desc.dropout_seed = seed;
    c->desc.dropout_offset = offset;
}

/* Varlen over n sequences; desc's batch and totals follow the lengths. */
static void varlen(vc_case *c, size_t n, const size_t *lq, const size_t *lk) {
    c->nseq = n;
    c->desc.batch = n;
    c->desc.seqlen_q = c->desc.seqlen_k = 0;
    for (size_t i = 0; i < n; i++) {
        c->len_q[i] = lq[i];
        c->len_k[i] = lk[i];
        c->desc.seqlen_q += lq[i];
        c->desc.seqlen_k += lk[i];
    }
}

static void block_mask(vc_case *c, vc_broadcast how, size_t bq, size_t bk, double density) {
    c->block_mask = how;
    c->desc.block_q = bq;
    c->desc.block_k = bk;
    c->mask_density = density;
}

void variant_cases_all(vc_list *l) {
    const flashcl_dtype F32 = FLASHCL_DTYPE_F32, F16 = FLASHCL_DTYPE_F16, BF16 = FLASHCL_DTYPE_BF16;
    vc_case *c;

    /* ---- sliding window: both sides, one side, the diagonal alone, with causal. */
    c = push(l, "window", F32, 1, 2, 2, 37, 45, 32, 32, 0);
    window(c, 5, 3);
    c = push(l, "window-left+causal", F32, 2, 2, 1, 40, 40, 32, 32, 1);
    window(c, 7, -1);
    c = push(l, "window-right-only sq>sk", F32, 1, 2, 2, 33, 20, 16, 16, 0);
    window(c, -1, 2);
    c = push(l, "window-diagonal", F32, 1, 1, 1, 19, 26, 16, 16, 0);
    window(c, 0, 0);

    /* ---- softcap: scale 0.5 and inputs in [-2, 2] put scores well into tanh's bend. */
    c = push(l, "softcap", F32, 1, 2, 2, 31, 47, 64, 64, 0);
    c->desc.softcap = 2.0f;
    c->desc.scale = 0.5f;
    c = push(l, "softcap+causal", F32, 2, 2, 2, 29, 29, 32, 32, 1);
    c->desc.softcap = 1.0f;

    /* ---- ALiBi: slopes per head, and per (batch, head) with causal and sq < sk. */
    c = push(l, "alibi", F32, 2, 4, 2, 29, 29, 32, 32, 0);
    c->alibi = 1;
    c = push(l, "alibi[b,h]+causal", F32, 2, 2, 2, 17, 50, 32, 32, 1);
    c->alibi = 2;

    /* ---- sinks: alone, and with causal sq > sk (rows with only the sink). */
    c = push(l, "sinks", F32, 2, 3, 3, 23, 31, 32, 32, 0);
    c->sinks = 1;
    c = push(l, "sinks+causal sq>sk", F32, 1, 2, 1, 40, 20, 32, 32, 1);
    c->sinks = 1;

    /* ---- dropout */
    c = push(l, "dropout", F32, 2, 2, 2, 33, 65, 32, 32, 0);
    dropout(c, 0.17f, 42, 7);
    c = push(l, "dropout+causal p=0.5 big offset", F32, 1, 3, 1, 48, 48, 32, 32, 1);
    dropout(c, 0.5f, 0x123456789abcdefull, 0xfedcba9876543210ull);

    /* ---- additive bias and boolean mask, in every broadcast. */
    c = push(l, "bias[b,h]", F32, 2, 2, 2, 21, 37, 32, 32, 0);
    c->bias = VC_FULL;
    c = push(l, "bias[1,h]+causal", F32, 2, 2, 2, 30, 30, 32, 32, 1);
    c->bias = VC_PER_HEAD;
    c = push(l, "bias[b,1]", F32, 2, 4, 2, 9, 70, 32, 32, 0);
    c->bias = VC_PER_BATCH;
    c = push(l, "mask[b,h]", F32, 2, 2, 2, 35, 27, 32, 32, 0);
    c->mask = VC_FULL;
    c->mask_density = 0.3;
    c = push(l, "mask[1,1]+causal", F32, 1, 2, 2, 44, 44, 32, 32, 1);
    c->mask = VC_SHARED;

    /* ---- block-sparse */
    c = push(l, "block-sparse", F32, 1, 2, 2, 70, 90, 32, 32, 0);
    block_mask(c, VC_FULL, 16, 16, 0.5);
    c = push(l, "block-sparse+causal", F32, 2, 2, 1, 96, 96, 32, 32, 1);
    block_mask(c, VC_PER_HEAD, 32, 16, 0.6);

    /* ---- varlen: a one-key sequence, sq > sk in a sequence, causal + sinks. */
    {
        static const size_t lq[3] = {5, 33, 17}, lk[3] = {9, 33, 1};
        c = push(l, "varlen", F32, 0, 2, 2, 0, 0, 32, 32, 0);
        varlen(c, 3, lq, lk);
    }
    {
        static const size_t lq[3] = {7, 20, 3}, lk[3] = {4, 20, 12};
        c = push(l, "varlen+causal+sinks", F32, 0, 4, 2, 0, 0, 32, 32, 1);
        varlen(c, 3, lq, lk);
        c->sinks = 1;
    }
    {
        /* Empty sequences (no rows, no keys, neither), and rows that see no key at all; the last
           sequence is longer than a chunk and ends the views (the CPU family's packed copies of
           the totals must hold the chunk that reads past it). The same build as the case above. */
        static const size_t lq[4] = {0, 9, 0, 45}, lk[4] = {6, 0, 0, 50};
        c = push(l, "varlen empty sequences+causal+sinks", F32, 0, 4, 2, 0, 0, 32, 32, 1);
        varlen(c, 4, lq, lk);
        c->sinks = 1;
    }

    /* ---- head dims: d_v != d_qk, the largest, the smallest. */
    c = push(l, "dv!=d 192/128", F32, 1, 2, 2, 19, 23, 192, 128, 0);
    c = push(l, "dv!=d 576/512 (MLA)", F32, 1, 1, 1, 9, 13, 576, 512, 1);
    c = push(l, "d=512", F32, 1, 1, 1, 11, 17, 512, 512, 0);
    c = push(l, "d=256 dv=64 causal", F32, 1, 2, 2, 21, 21, 256, 64, 1);
    c = push(l, "d=1", F32, 1, 2, 1, 13, 7, 1, 1, 1);
    c = push(l, "d=16 dv=1", F32, 1, 2, 2, 13, 24, 16, 1, 0);

    /* ---- storage types */
    c = push(l, "f16", F16, 1, 2, 2, 45, 61, 64, 64, 0);
    c = push(l, "bf16+causal", BF16, 2, 2, 1, 37, 37, 64, 64, 1);
    c = push(l, "f16 dv!=d 192/128", F16, 1, 2, 2, 19, 23, 192, 128, 0);
    c = push(l, "bf16+window+GQA", BF16, 1, 4, 2, 50, 64, 32, 32, 0);
    window(c, 16, 4);
    c = push(l, "f16+softcap+sinks+alibi", F16, 1, 2, 2, 27, 33, 32, 32, 1);
    c->desc.softcap = 3.0f;
    c->sinks = 1;
    c->alibi = 1;
    {
        static const size_t lq[2] = {19, 6}, lk[2] = {23, 30};
        c = push(l, "bf16+varlen+dropout", BF16, 0, 2, 2, 0, 0, 32, 32, 0);
        varlen(c, 2, lq, lk);
        dropout(c, 0.2f, 99, 3);
    }

    /* ---- combinations */
    c = push(l, "window+alibi+softcap+GQA", F32, 2, 4, 2, 50, 64, 32, 32, 0);
    window(c, 12, 6);
    c->alibi = 1;
    c->desc.softcap = 4.0f;
    c = push(l, "bias+mask+dropout", F32, 2, 2, 2, 33, 41, 32, 32, 0);
    c->bias = VC_PER_HEAD;
    c->mask = VC_PER_BATCH;
    dropout(c, 0.25f, 5, 0);
    c = push(l, "block-sparse+window+sinks", F32, 1, 2, 2, 64, 80, 32, 32, 0);
    block_mask(c, VC_SHARED, 16, 32, 0.7);
    window(c, 30, 10);
    c->sinks = 1;
    c = push(l, "everything", F32, 2, 4, 2, 37, 45, 48, 40, 1);
    window(c, 20, -1);
    c->desc.softcap = 3.0f;
    c->alibi = 2;
    c->sinks = 1;
    dropout(c, 0.1f, 17, 11);
    c->bias = VC_FULL;
    c->mask = VC_PER_HEAD;
    c->mask_density = 0.85;
    block_mask(c, VC_PER_BATCH, 8, 16, 0.85);
    /* Every variant but varlen and d_v != d in one bfloat16 build with GQA (the CPU family's forced
       run, test_variants_cpu, has "everything" and "everything varlen" in float32 as well). */
    c = push(l, "everything bf16 d_v=d", BF16, 2, 4, 2, 41, 53, 24, 24, 1);
    window(c, 25, -1);
    c->desc.softcap = 3.0f;
    c->alibi = 2;
    c->sinks = 1;
    dropout(c, 0.15f, 5, 9);
    c->bias = VC_PER_HEAD;
    c->mask = VC_FULL;
    c->mask_density = 0.85;
    block_mask(c, VC_PER_BATCH, 8, 16, 0.85);
    {
        static const size_t lq[3] = {11, 26, 1}, lk[3] = {30, 14, 5};
        c = push(l, "everything varlen", F32, 0, 2, 1, 0, 0, 32, 32, 1);
        varlen(c, 3, lq, lk);
        window(c, 9, -1);
        c->desc.softcap = 2.0f;
        c->alibi = 1;
        c->sinks = 1;
        dropout(c, 0.3f, 8, 1);
        c->bias = VC_FULL;
        c->mask = VC_FULL;
        c->mask_density = 0.85;
        block_mask(c, VC_FULL, 8, 8, 0.8);
    }
    /* Gemma-2's shape of attention at d = d_v = 256 (the tensor-core backward's two output slices),
       with a head dim that is not a multiple of 32 beside it (padded to 160 inside the kernels). */
    c = push(l, "d=256 causal+softcap+window+GQA", F32, 1, 4, 2, 70, 83, 256, 256, 1);
    c->desc.softcap = 5.0f;
    window(c, 40, -1);
    c = push(l, "d=144 sinks+alibi", F32, 1, 2, 1, 37, 52, 144, 144, 0);
    c->sinks = 1;
    c->alibi = 1;
    /* Bias and mask in whole 16-row, 16-key tiles (the CPU family's forward and dQ load those along
       the bias and mask rows and transpose them in registers) next to partial ones (rows 32..39,
       keys past the last whole chunk), with dropout. Last, so the cases above keep their numbers. */
    c = push(l, "bias+mask+dropout whole tiles", F32, 1, 2, 2, 40, 110, 32, 32, 0);
    c->bias = VC_FULL;
    c->mask = VC_FULL;
    c->mask_density = 0.7;
    dropout(c, 0.2f, 21, 2);
    /* The Hopper wgmma forms (cl/flash_fwd_mma.cl's MMA_WG, chosen on compute capability 9.0 in 16-bit
       storage): d = 128 with Q in __local and d = d_v = 256 with Q in registers, under the score terms
       their softmax shares with mma.sync (ALiBi, sinks, dropout, a window) and GQA, rows and keys that
       end inside a tile. Elsewhere they run the other families like any case. */
    c = push(l, "bf16 d=128 alibi+sinks+dropout+window+GQA", BF16, 1, 4, 2, 150, 170, 128, 128, 1);
    window(c, 60, -1);
    c->alibi = 1;
    c->sinks = 1;
    dropout(c, 0.1f, 7, 3);
    c = push(l, "bf16 d=256 alibi+sinks+dropout", BF16, 1, 2, 1, 90, 110, 256, 256, 0);
    c->alibi = 1;
    c->sinks = 1;
    dropout(c, 0.1f, 9, 0);
    /* The Hopper backward's dQ on wgmma (cl/flash_bwd_mma.cl's MB_WG: the general kernels at d = 64
       or 128): its own tile walk skips the block mask's tiles and double-buffers K/V, rows and
       keys end inside a tile, sequences of a varlen batch start mid-tile. */
    c = push(l, "bf16 d=64 block-sparse+bias+GQA", BF16, 2, 4, 2, 100, 140, 64, 64, 0);
    block_mask(c, VC_PER_HEAD, 32, 16, 0.6);
    c->bias = VC_FULL;
    {
        static const size_t lq[2] = {70, 33}, lk[2] = {90, 33};
        c = push(l, "bf16 d=128 varlen+causal+softcap", BF16, 0, 2, 1, 0, 0, 128, 128, 1);
        varlen(c, 2, lq, lk);
        c->desc.softcap = 5.0f;
    }
    /* An odd d_v past a whole 64-dim group: flash_fwd_tiles' narrow tail group (one dim a
       work-item, dims 64..79 of which 73..79 are never stored), with GQA and causal rows. */
    c = push(l, "d=40 dv=73 causal+GQA", F32, 1, 4, 2, 77, 150, 40, 73, 1);
    /* The tensor-core backward's dQ from stored dS (cl/flash_bwd_mma.cl's MB_DS) zeroes the
       fragments of tiles its dK/dV kernel skipped: the band's edges (a two-sided window), the
       block mask's dropped 32 x 64 tiles (32 x 32 blocks, so some key blocks are half kept), a
       boolean mask and a bias inside the kept tiles, sequences of a varlen batch ending mid-tile;
       then the sliced form above d = 128 (16-row dK/dV tiles, one dQ m-tile per warp) under a
       window and a block mask with GQA. The mask and the block mask share one density, 0.5: a
       32 x 64 tile is dropped one time in four. Last, so the cases above keep their numbers. */
    {
        static const size_t lq[2] = {100, 47}, lk[2] = {130, 66};
        c = push(l, "bf16 d=128 block-sparse+mask+bias+window varlen", BF16, 0, 2, 1, 0, 0, 128, 128, 0);
        varlen(c, 2, lq, lk);
        window(c, 70, 20);
        block_mask(c, VC_PER_HEAD, 32, 32, 0.5);
        c->mask = VC_FULL;
        c->bias = VC_PER_HEAD;
    }
    c = push(l, "bf16 d=192 block-sparse+window+GQA", BF16, 1, 4, 2, 90, 120, 192, 192, 0);
    window(c, 50, 10);
    block_mask(c, VC_PER_HEAD, 16, 32, 0.5);
}

void variant_cases_quick(vc_list *l) {
    /* Tiny shapes with every feature on, for Oclgrind (which interprets every work-item). */
    vc_case *c = push(l, "quick everything", FLASHCL_DTYPE_F32, 2, 2, 1, 9, 13, 8, 4, 1);
    window(c, 6, -1);
    c->desc.softcap = 2.0f;
    c->alibi = 2;
    c->sinks = 1;
    dropout(c, 0.3f, 3, 4);
    c->bias = VC_PER_HEAD;
    c->mask = VC_FULL;
    c->mask_density = 0.85;
    block_mask(c, VC_FULL, 4, 4, 0.8);
    {
        static const size_t lq[2] = {7, 2}, lk[2] = {5, 9};
        c = push(l, "quick everything varlen", FLASHCL_DTYPE_F32, 0, 2, 2, 0, 0, 8, 8, 1);
        varlen(c, 2, lq, lk);
        window(c, 3, -1);
        c->alibi = 1;
        c->sinks = 1;
        dropout(c, 0.2f, 1, 2);
        c->bias = VC_FULL;
        c->mask = VC_FULL;
        c->mask_density = 0.9;
        block_mask(c, VC_SHARED, 4, 4, 0.8);
    }
    /* Block masks whose blocks are whole tiles of the Oclgrind runs (16x16, and 64x64 in
       test_oclgrind_variants_tiles64), so whole tiles are skipped, with sinks, a window, GQA and
       partial last tiles: the shape of the block-sparse backward that once gave NaN dK on POCL. */
    c = push(l, "quick block-sparse skips 16x16 tiles", FLASHCL_DTYPE_F32, 1, 2, 1, 37, 45, 8, 8, 0);
    block_mask(c, VC_FULL, 16, 16, 0.5);
    window(c, 20, 4);
    c->sinks = 1;
    c = push(l, "quick block-sparse skips 64x64 tiles", FLASHCL_DTYPE_F32, 1, 1, 1, 66, 130, 8, 8, 0);
    block_mask(c, VC_SHARED, 64, 64, 0.5);
    window(c, 100, 10);
    c->sinks = 1;
    c = push(l, "quick f16 dv!=d", FLASHCL_DTYPE_F16, 1, 2, 2, 11, 6, 8, 16, 0);
    window(c, -1, 2);
    c = push(l, "quick bf16 softcap", FLASHCL_DTYPE_BF16, 1, 2, 1, 5, 12, 16, 16, 1);
    c->desc.softcap = 4.0f;
    /* The CPU family's whole 16-row, 48-key chunk, whose bias and mask rows the forward and dQ load
       in 16x16 tiles and transpose in registers, next to partial ones, with dropout: under
       Oclgrind, so its uninitialised-value check sees those shuffles and the Philox words. Last,
       so the cases above keep their numbers. */
    c = push(l, "quick bias+mask+dropout whole tiles", FLASHCL_DTYPE_F32, 1, 1, 1, 20, 53, 8, 8, 0);
    c->bias = VC_FULL;
    c->mask = VC_FULL;
    c->mask_density = 0.8;
    dropout(c, 0.25f, 5, 1);
}

void vc_list_free(vc_list *l) {
    free(l->items);
    memset(l, 0, sizeof *l);
}

static const char *broadcast_name(vc_broadcast b) {
    static const char *names[] = {"off", "[b,h]", "[1,h]", "[b,1]", "[1,1]"};
    return names[b];
}

void vc_describe(const vc_case *c, char *buf, size_t size) {
    const flashcl_attention_desc *d = &c->desc;
    static const char *dtypes[] = {"f32", "f32", "f16", "bf16"};
    int n = snprintf(buf, size, "%s: %s b=%zu hq=%zu hkv=%zu sq=%zu sk=%zu d=%zu dv=%zu causal=%d", c->name,
                     dtypes[d->dtype], d->batch, d->heads_q, d->heads_kv, d->seqlen_q, d->seqlen_k, d->head_dim,
                     d->head_dim_v, d->causal);
    size_t at = n > 0 && (size_t)n < size ? (size_t)n : size;
#define APPEND(...)                                                                                                    \
    do {                                                                                                               \
        if (at < size) {                                                                                               \
            int w = snprintf(buf + at, size - at, __VA_ARGS__);                                                        \
            at = w > 0 ? at + (size_t)w : at;                                                                          \
        }                                                                                                              \
    } while (0)
    if (d->window) APPEND(" window=(%d,%d)", d->window_left, d->window_right);
    if (d->softcap > 0.0f) APPEND(" softcap=%g", (double)d->softcap);
    if (c->alibi) APPEND(" alibi=%s", c->alibi == 2 ? "[b,h]" : "[h]");
    if (c->sinks) APPEND(" sinks");
    if (d->dropout_p > 0.0f) APPEND(" dropout=%g", (double)d->dropout_p);
    if (c->bias) APPEND(" bias=%s", broadcast_name(c->bias));
    if (c->mask) APPEND(" mask=%s", broadcast_name(c->mask));
    if (c->block_mask) APPEND(" block_mask=%s/%zux%zu", broadcast_name(c->block_mask), d->block_q, d->block_k);
    if (c->nseq) {
        APPEND(" varlen q=");
        for (size_t i = 0; i < c->nseq; i++) APPEND("%s%zu", i ? "," : "", c->len_q[i]);
        APPEND(" k=");
        for (size_t i = 0; i < c->nseq; i++) APPEND("%s%zu", i ? "," : "", c->len_k[i]);
    }
#undef APPEND
}
