/*
 * Variant fields under the fuzzer: storage type, head_dim_v, window,
 * softcap, dropout, ALiBi slopes, sinks, bias/mask/block-mask matrices and
 * varlen cu_seqlens, each buffer with a random size, offset and strides.
 * cu_seqlens hold random, often invalid, contents: validation cannot read
 * device memory and the kernels clamp them, so there only "no crash and no
 * write outside the outputs" is checkable. Every buffer the call only reads
 * must come back unchanged, O and LSE outside their views too.
 */
#include "fuzz_variants.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    F_ALIBI = 1,
    F_SINKS = 2,
    F_BIAS = 4,
    F_MASK = 8,
    F_BLOCK_MASK = 16,
    F_VARLEN = 32,
    F_LSE = 64,
    F_DROPMASK = 128
};
enum { B_ALIBI, B_SINKS, B_BIAS, B_MASK, B_BLOCK_MASK, B_CU_Q, B_CU_K, B_LSE, B_DROPMASK, B_COUNT };
static const char *const k_names[B_COUNT] = {
    "alibi_slopes", "sinks", "bias", "mask", "block_mask", "cu_seqlens_q", "cu_seqlens_k", "lse", "dropout mask out"};

/* A buffer of `elems` elements of `elem` bytes: floats for float buffers, else varied bytes. */
static cl_mem make_side(flashcl_context *ctx, fuzz_buffer *b, size_t elems, size_t elem, int floats, unsigned salt) {
    unsigned char *init = malloc(elems * elem);
    if (!init) abort();
    if (floats)
        fuzz_fill_floats((float *)(void *)init, elems, salt);
    else
        for (size_t j = 0; j < elems * elem; ++j) init[j] = (unsigned char)((j * 7 + salt) % 3 ? 1 : 0);
    fuzz_buffer_make(b, ctx, elems * elem, init);
    free(init);
    return b->mem;
}

static void read_matrix(flashcl_context *ctx, fuzz_reader *r, flashcl_matrix *m, fuzz_buffer *b, size_t elem,
                        unsigned salt) {
    size_t elems = 1 + (fuzz_next(r) | (fuzz_next(r) & 1) << 8); /* 1..512 */
    m->buffer = make_side(ctx, b, elems, elem, elem == sizeof(float), salt);
    m->offset = fuzz_next(r) % 16;
    if (fuzz_next(r) & 1) { /* else packed */
        m->stride_batch = fuzz_next(r) % 100;
        m->stride_head = fuzz_next(r) % 50;
        m->stride_row = fuzz_next(r) % 12;
    }
}

/* An int32 cu_seqlens array: mostly small values, sometimes extremes or a short buffer. */
static cl_mem make_cu(flashcl_context *ctx, fuzz_reader *r, fuzz_buffer *b, size_t batch) {
    size_t n = fuzz_next(r) % (batch + 3); /* batch + 1 is what validation needs */
    if (n == 0) return NULL;               /* the other one alone is invalid */
    cl_int *cu = malloc(n * sizeof *cu);
    if (!cu) abort();
    for (size_t i = 0; i < n; ++i) {
        unsigned v = fuzz_next(r);
        cu[i] = v == 255 ? INT_MAX : v == 254 ? INT_MIN : v == 253 ? -1 : (cl_int)(v % 8);
    }
    fuzz_buffer_make(b, ctx, n * sizeof *cu, cu);
    free(cu);
    return b->mem;
}

/* Marks the bytes of a [batch, heads, rows, dim] view (resolved like the library does); aborts past the buffer. */
static void cover_view(const flashcl_tensor *v, size_t batch, size_t heads, size_t rows, size_t dim, int varlen,
                       size_t elem, size_t buffer_bytes, unsigned char *covered) {
    size_t sb = v->stride_batch, sh = v->stride_head, sr = v->stride_row;
    if (sb == 0 && sh == 0 && sr == 0) sb = varlen ? 0 : rows * heads * dim, sh = dim, sr = heads * dim;
    for (size_t b = 0; b < batch; ++b)
        for (size_t h = 0; h < heads; ++h)
            for (size_t i = 0; i < rows; ++i)
                for (size_t c = 0; c < dim; ++c) {
                    size_t at = (v->offset + b * sb + h * sh + i * sr + c) * elem;
                    if (at + elem > buffer_bytes) abort(); /* validation let a view past its buffer */
                    memset(covered + at, 1, elem);
                }
}

static void check_unchanged(flashcl_context *ctx, const fuzz_buffer *b, const char *what, flashcl_status st) {
    if (!b->mem) return;
    unsigned char *now = fuzz_buffer_read(b, ctx);
    fuzz_buffer_check_guard(b, now, NULL, what, st);
    free(now);
}

/* Checks an output buffer against the region [from, to) bytes the call may write. */
static void check_region(flashcl_context *ctx, const fuzz_buffer *b, size_t from, size_t to, const char *what,
                         flashcl_status st) {
    unsigned char *now = fuzz_buffer_read(b, ctx);
    unsigned char *covered = calloc(b->bytes, 1);
    if (!covered) abort();
    if (to > b->bytes) abort(); /* validation let the region past its buffer */
    memset(covered + from, 1, to - from);
    fuzz_buffer_check_guard(b, now, covered, what, st);
    free(covered);
    free(now);
}

static void require_message(flashcl_context *ctx, flashcl_status st) {
    /* FLASHCL_FUZZ_TRACE=1: each call's status, to see what a seed reaches. */
    if (getenv("FLASHCL_FUZZ_TRACE"))
        fprintf(stderr, "fuzz_attention: %s %s\n", flashcl_status_name(st), flashcl_last_error(ctx));
    if ((st == FLASHCL_SUCCESS) != (*flashcl_last_error(ctx) == '\0')) {
        fprintf(stderr, "fuzz_attention: status %s with message \"%s\"\n", flashcl_status_name(st),
                flashcl_last_error(ctx));
        abort();
    }
}

void fuzz_variant_forward(flashcl_context *ctx, flashcl_attention_desc *d, const flashcl_tensor views[4],
                          const fuzz_buffer bufs[4], fuzz_reader *r) {
    d->dtype = (flashcl_dtype)(fuzz_next(r) % 5); /* 4 is unknown */
    d->head_dim_v = (fuzz_next(r) % 3) * 4;       /* 0 = head_dim */
    unsigned w = fuzz_next(r);
    d->window = w & 1;
    d->window_left = (int)(fuzz_next(r) % 9) - 2; /* -2 is invalid, -1 unbounded */
    d->window_right = (int)(fuzz_next(r) % 9) - 2;
    unsigned sc = fuzz_next(r);
    d->softcap = sc < 160 ? 0.0f : sc < 250 ? (float)(sc - 159) / 8.0f : sc == 250 ? -1.0f : sc == 251 ? NAN : INFINITY;
    unsigned dp = fuzz_next(r);
    d->dropout_p = dp < 160 ? 0.0f : dp < 253 ? (float)(dp - 159) / 100.0f : dp == 253 ? 1.0f : dp == 254 ? -0.5f : NAN;
    d->dropout_seed = (uint64_t)fuzz_next(r) << 40 | fuzz_next(r);
    d->dropout_offset = (uint64_t)fuzz_next(r) << 33 | fuzz_next(r);
    unsigned features = fuzz_next(r);

    fuzz_buffer side[B_COUNT];
    memset(side, 0, sizeof side);
    if (features & F_ALIBI) {
        d->alibi_slopes = make_side(ctx, &side[B_ALIBI], 1 + fuzz_next(r) % 12, sizeof(float), 1, 1);
        d->alibi_offset = fuzz_next(r) % 4;
        d->alibi_stride_batch = fuzz_next(r) % 5;
    }
    if (features & F_SINKS) {
        d->sinks = make_side(ctx, &side[B_SINKS], 1 + fuzz_next(r) % 6, sizeof(float), 1, 2);
        d->sinks_offset = fuzz_next(r) % 4;
    }
    if (features & F_BIAS) read_matrix(ctx, r, &d->bias, &side[B_BIAS], sizeof(float), 3);
    if (features & F_MASK) read_matrix(ctx, r, &d->mask, &side[B_MASK], 1, 4);
    if (features & F_BLOCK_MASK) {
        read_matrix(ctx, r, &d->block_mask, &side[B_BLOCK_MASK], 1, 5);
        d->block_q = fuzz_next(r) % 4; /* 0 is invalid */
        d->block_k = fuzz_next(r) % 4;
    }
    int varlen = 0;
    if (features & F_VARLEN) {
        d->cu_seqlens_q = make_cu(ctx, r, &side[B_CU_Q], d->batch);
        d->cu_seqlens_k = make_cu(ctx, r, &side[B_CU_K], d->batch);
        d->max_seqlen_q = fuzz_next(r) % 7; /* 0 = the total; over the total is invalid */
        d->max_seqlen_k = fuzz_next(r) % 7;
        varlen = d->cu_seqlens_q || d->cu_seqlens_k;
    }
    size_t lse_offset = 0;
    cl_mem lse = NULL;
    if (features & F_LSE) {
        lse = make_side(ctx, &side[B_LSE], 1 + fuzz_next(r) % 64, sizeof(float), 1, 6);
        lse_offset = fuzz_next(r) % 8;
    }

    flashcl_status st =
        flashcl_forward(ctx, d, &views[0], &views[1], &views[2], &views[3], lse, lse_offset, 0, NULL, NULL);
    require_message(ctx, st);

    /* What the call may write: the O view, the LSE rows. Sizes as the library resolves them. */
    const size_t heads_q = d->heads_q, seqlen_q = d->seqlen_q, head_dim_v = d->head_dim_v ? d->head_dim_v : d->head_dim;
    const size_t elem = flashcl_dtype_size(d->dtype), view_batch = varlen ? 1 : d->batch;
    unsigned char *out = fuzz_buffer_read(&bufs[3], ctx);
    unsigned char *covered = calloc(bufs[3].bytes, 1);
    if (!covered) abort();
    if (st == FLASHCL_SUCCESS)
        cover_view(&views[3], view_batch, heads_q, seqlen_q, head_dim_v, varlen, elem, bufs[3].bytes, covered);
    fuzz_buffer_check_guard(&bufs[3], out, covered, "o", st);
    free(covered);
    free(out);
    if (lse) {
        size_t from = st == FLASHCL_SUCCESS ? lse_offset * sizeof(float) : 0;
        size_t to = st == FLASHCL_SUCCESS ? (lse_offset + view_batch * heads_q * seqlen_q) * sizeof(float) : 0;
        check_region(ctx, &side[B_LSE], from, to, "lse", st);
    }
    for (int i = 0; i < 3; ++i) check_unchanged(ctx, &bufs[i], i == 0 ? "q" : i == 1 ? "k" : "v", st);
    for (int i = 0; i < B_LSE; ++i) check_unchanged(ctx, &side[i], k_names[i], st);

    /* The dropout mask entry point on the same descriptor: [planes, rows, cols] bytes from its offset. */
    if (features & F_DROPMASK) {
        size_t bytes = 1 + (fuzz_next(r) | (fuzz_next(r) & 1) << 8), offset = fuzz_next(r) % 16;
        make_side(ctx, &side[B_DROPMASK], bytes, 1, 0, 7);
        st = flashcl_dropout_mask(ctx, d, side[B_DROPMASK].mem, offset, 0, NULL, NULL);
        require_message(ctx, st);
        /* max_seqlen_* count only with varlen (0 = the totals). */
        const size_t seqlen_k = d->seqlen_k ? d->seqlen_k : seqlen_q;
        size_t rows = varlen && d->max_seqlen_q ? d->max_seqlen_q : seqlen_q;
        size_t cols = varlen && d->max_seqlen_k ? d->max_seqlen_k : seqlen_k;
        size_t need = st == FLASHCL_SUCCESS ? d->batch * heads_q * rows * cols : 0;
        check_region(ctx, &side[B_DROPMASK], st == FLASHCL_SUCCESS ? offset : 0,
                     st == FLASHCL_SUCCESS ? offset + need : 0, k_names[B_DROPMASK], st);
    }
    for (int i = 0; i < B_COUNT; ++i)
        if (side[i].mem) fuzz_buffer_free(&side[i]);
}
