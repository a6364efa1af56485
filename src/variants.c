/*
 * The variant fields of a descriptor (storage type, d_v, window, softcap,
 * ALiBi, sinks, dropout, bias, masks, varlen): their defaults and scalar
 * checks, the build switches they turn on in cl/variants.cl, and the kernel
 * arguments (VARIANT_ARGS) every flash kernel takes.
 */
#include "launch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

size_t flashcl_dtype_size(flashcl_dtype dtype) {
    switch (dtype) {
    case FLASHCL_DTYPE_DEFAULT:
    case FLASHCL_DTYPE_F32:
        return 4;
    case FLASHCL_DTYPE_F16:
    case FLASHCL_DTYPE_BF16:
        return 2;
    }
    return 0;
}

int flashcl__dtype_code(flashcl_dtype dtype) {
    return dtype == FLASHCL_DTYPE_F16 ? 1 : dtype == FLASHCL_DTYPE_BF16 ? 2 : 0;
}

const char *flashcl__dtype_name(flashcl_dtype dtype) {
    return dtype == FLASHCL_DTYPE_F16 ? "f16" : dtype == FLASHCL_DTYPE_BF16 ? "bf16" : "f32";
}

int flashcl__is_varlen(const flashcl_attention_desc *d) { return d->cu_seqlens_q != NULL || d->cu_seqlens_k != NULL; }

static int matrix_set(const flashcl_matrix *m) { return m->buffer != NULL; }

flashcl_status flashcl__resolve_variants(flashcl_context *ctx, flashcl_attention_desc *d) {
    if (d->head_dim_v == 0) d->head_dim_v = d->head_dim;
    if (d->head_dim_v > FLASHCL_MAX_HEAD_DIM)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_HEAD_DIM, "head_dim_v (%zu) must be in 1..%d", d->head_dim_v,
                             FLASHCL_MAX_HEAD_DIM);
    if (d->window) {
        if (d->window_left < -1 || d->window_right < -1)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_VARIANT,
                                 "window_left/window_right (%d, %d) must be >= -1 (-1 = unbounded)", d->window_left,
                                 d->window_right);
    } else {
        d->window_left = -1;
        d->window_right = -1;
    }
    /* Causal is the window (left, 0), as in FlashAttention-2. */
    if (d->causal) d->window_right = 0;
    /* The kernels take softcap * log2(e) and its inverse: both must stay normal floats. */
    if (!(d->softcap >= 0.0f && d->softcap <= 1e37f))
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_VARIANT, "softcap (%g) must be a number in [0, 1e37] (0 = off)",
                             (double)d->softcap);
    if (!(d->dropout_p >= 0.0f && d->dropout_p < 1.0f))
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_VARIANT, "dropout_p (%g) must be in [0, 1)",
                             (double)d->dropout_p);
    if (matrix_set(&d->block_mask) &&
        (d->block_q == 0 || d->block_k == 0 || d->block_q > INT32_MAX || d->block_k > INT32_MAX))
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_VARIANT,
                             "block_q/block_k (%zu, %zu) must be in 1..%d when block_mask is set", d->block_q,
                             d->block_k, INT32_MAX);
    if (flashcl__is_varlen(d)) {
        if (!d->cu_seqlens_q || !d->cu_seqlens_k)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_VARIANT,
                                 "%s is NULL: varlen needs both cu_seqlens_q and cu_seqlens_k",
                                 d->cu_seqlens_q ? "cu_seqlens_k" : "cu_seqlens_q");
        if (d->max_seqlen_q == 0) d->max_seqlen_q = d->seqlen_q;
        if (d->max_seqlen_k == 0) d->max_seqlen_k = d->seqlen_k;
        if (d->max_seqlen_q > d->seqlen_q || d->max_seqlen_k > d->seqlen_k)
            return flashcl__fail(
                ctx, FLASHCL_ERR_INVALID_VARIANT,
                "max_seqlen_q/max_seqlen_k (%zu, %zu) exceed the packed totals seqlen_q/seqlen_k (%zu, %zu)",
                d->max_seqlen_q, d->max_seqlen_k, d->seqlen_q, d->seqlen_k);
    } else {
        d->max_seqlen_q = d->seqlen_q;
        d->max_seqlen_k = d->seqlen_k;
        /* A left bound past every key is no bound (FlashAttention-2 normalises it the same way). */
        if (d->window_left >= 0 && (size_t)d->window_left >= d->seqlen_k) d->window_left = -1;
    }
    if (!d->sinks && d->dsinks)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_VARIANT, "dsinks is set but sinks is NULL");
    return FLASHCL_SUCCESS;
}

int flashcl__desc_is_plain(const flashcl_attention_desc *d) {
    return d->dtype == FLASHCL_DTYPE_F32 && d->head_dim_v == d->head_dim && d->window_left < 0 &&
           (d->window_right < 0 || (d->causal && d->window_right == 0)) && d->softcap == 0.0f && !d->alibi_slopes &&
           !d->sinks && d->dropout_p == 0.0f && !matrix_set(&d->bias) && !matrix_set(&d->mask) &&
           !matrix_set(&d->block_mask) && !flashcl__is_varlen(d);
}

/* The features past plain attention, each after ", " (the storage type is not one of them). */
static void append_features(const flashcl_attention_desc *d, char *out, size_t cap) {
    if (d->head_dim_v != d->head_dim) flashcl__appendf(out, cap, ", d_v=%zu", d->head_dim_v);
    if (d->window_left >= 0 || d->window_right > 0 || (d->window_right == 0 && !d->causal))
        flashcl__appendf(out, cap, ", window (%d, %d)", d->window_left, d->window_right);
    if (d->softcap > 0.0f) flashcl__appendf(out, cap, ", softcap");
    if (d->alibi_slopes) flashcl__appendf(out, cap, ", ALiBi");
    if (d->sinks) flashcl__appendf(out, cap, ", sinks");
    if (d->dropout_p > 0.0f) flashcl__appendf(out, cap, ", dropout");
    if (matrix_set(&d->bias)) flashcl__appendf(out, cap, ", bias");
    if (matrix_set(&d->mask)) flashcl__appendf(out, cap, ", mask");
    if (matrix_set(&d->block_mask)) flashcl__appendf(out, cap, ", block mask");
    if (flashcl__is_varlen(d)) flashcl__appendf(out, cap, ", varlen");
}

void flashcl__describe_variants(const flashcl_attention_desc *d, char *out, size_t cap) {
    out[0] = '\0';
    flashcl__appendf(out, cap, "%s", flashcl__dtype_name(d->dtype));
    append_features(d, out, cap);
}

void flashcl__describe_features(const flashcl_attention_desc *d, char *out, size_t cap) {
    char features[160] = "";
    if (d->dtype != FLASHCL_DTYPE_F32)
        snprintf(features, sizeof features, ", %s storage", flashcl__dtype_name(d->dtype));
    append_features(d, features, sizeof features);
    flashcl__copy_str(out, cap, features[0] ? features + 2 : "");
}

void flashcl__append_variants(const flashcl_attention_desc *d, char *reason, size_t cap) {
    if (flashcl__desc_is_plain(d)) return;
    char features[160];
    flashcl__describe_variants(d, features, sizeof features);
    flashcl__appendf(reason, cap, "; variants: %s", features);
}

void flashcl__variant_options(const flashcl_attention_desc *d, char *out, size_t cap) {
    out[0] = '\0';
    flashcl__appendf(out, cap, "-D HEAD_DIM_V=%zu", d->head_dim_v);
    if (d->dtype != FLASHCL_DTYPE_F32)
        flashcl__appendf(out, cap, " -D FLASHCL_DTYPE=%d", flashcl__dtype_code(d->dtype));
    if (d->softcap > 0.0f) flashcl__appendf(out, cap, " -D HAS_SOFTCAP=1");
    if (d->alibi_slopes) flashcl__appendf(out, cap, " -D HAS_ALIBI=1");
    if (matrix_set(&d->bias)) flashcl__appendf(out, cap, " -D HAS_BIAS=1");
    if (matrix_set(&d->mask)) flashcl__appendf(out, cap, " -D HAS_MASK=1");
    if (matrix_set(&d->block_mask)) flashcl__appendf(out, cap, " -D HAS_BLOCK_MASK=1");
    if (d->sinks) flashcl__appendf(out, cap, " -D HAS_SINKS=1");
    if (d->dropout_p > 0.0f) flashcl__appendf(out, cap, " -D HAS_DROPOUT=1");
    if (flashcl__is_varlen(d)) flashcl__appendf(out, cap, " -D VARLEN=1");
}

/* Resolved strides of a matrix whose rows are `cols` long (packed default applied). */
void flashcl__matrix_strides(const flashcl_attention_desc *d, const flashcl_matrix *m, size_t rows, size_t cols,
                             cl_ulong out[4]) {
    out[0] = m->offset;
    if (m->stride_batch == 0 && m->stride_head == 0 && m->stride_row == 0) {
        out[1] = (cl_ulong)(d->heads_q * rows * cols);
        out[2] = (cl_ulong)(rows * cols);
        out[3] = (cl_ulong)cols;
    } else {
        out[1] = m->stride_batch;
        out[2] = m->stride_head;
        out[3] = m->stride_row;
    }
}

size_t flashcl__block_rows(const flashcl_attention_desc *d) { return (d->max_seqlen_q + d->block_q - 1) / d->block_q; }
size_t flashcl__block_cols(const flashcl_attention_desc *d) { return (d->max_seqlen_k + d->block_k - 1) / d->block_k; }

/* A buffer argument; a feature that is off binds `dummy` (never read), since
   some drivers mishandle NULL buffer arguments. */
static void arg_buffer(flashcl__args *a, cl_mem m, cl_mem dummy) { flashcl__arg_mem(a, m ? m : dummy); }

static void arg_matrix(flashcl__args *a, const flashcl_attention_desc *d, const flashcl_matrix *m, size_t rows,
                       size_t cols, cl_mem dummy) {
    cl_ulong v[4] = {0, 0, 0, 0};
    if (m->buffer) flashcl__matrix_strides(d, m, rows, cols, v);
    arg_buffer(a, m->buffer, dummy);
    for (int i = 0; i < 4; ++i) flashcl__arg_ulong(a, v[i]);
}

void flashcl__arg_variants(flashcl__args *a, const flashcl_attention_desc *d, cl_mem dummy) {
    size_t bq = d->block_mask.buffer ? flashcl__block_rows(d) : 1,
           bk = d->block_mask.buffer ? flashcl__block_cols(d) : 1;
    flashcl__arg_int(a, d->window_left);
    flashcl__arg_int(a, d->window_right);
    flashcl__arg_float(a, (cl_float)(d->softcap * FLASHCL__LOG2E));
    arg_buffer(a, d->alibi_slopes, dummy);
    flashcl__arg_ulong(a, d->alibi_offset);
    flashcl__arg_ulong(a, d->alibi_stride_batch);
    arg_buffer(a, d->sinks, dummy);
    flashcl__arg_ulong(a, d->sinks_offset);
    arg_matrix(a, d, &d->bias, d->max_seqlen_q, d->max_seqlen_k, dummy);
    arg_matrix(a, d, &d->mask, d->max_seqlen_q, d->max_seqlen_k, dummy);
    arg_matrix(a, d, &d->block_mask, bq, bk, dummy);
    flashcl__arg_int(a, (cl_int)d->block_q);
    flashcl__arg_int(a, (cl_int)d->block_k);
    arg_buffer(a, d->cu_seqlens_q, dummy);
    arg_buffer(a, d->cu_seqlens_k, dummy);
    /* Keep iff a key's 16 RNG bits >= p * 2^16 rounded to nearest (cl/variants.cl,
       flashcl_dropout_keep), so an element is kept with probability (2^16 - threshold) / 2^16: the
       kept ones are scaled by its inverse, which keeps the expectation exact (1/(1-p) was 7% off at
       p = 0.9999). A threshold of 2^16 (p within 2^-17 of 1) keeps nothing. */
    const double threshold = floor((double)d->dropout_p * 65536.0 + 0.5);
    flashcl__arg_uint(a, (cl_uint)threshold);
    flashcl__arg_float(a, threshold < 65536.0 ? (cl_float)(65536.0 / (65536.0 - threshold)) : 0.0f);
    flashcl__arg_uint(a, (cl_uint)d->dropout_seed);
    flashcl__arg_uint(a, (cl_uint)(d->dropout_seed >> 32));
    flashcl__arg_uint(a, (cl_uint)d->dropout_offset);
    flashcl__arg_uint(a, (cl_uint)(d->dropout_offset >> 32));
}

flashcl_status flashcl__require_plain(flashcl_context *ctx, const flashcl_attention_desc *d, const char *path) {
    flashcl_attention_desc f32 = *d;
    f32.dtype = FLASHCL_DTYPE_F32;
    if (flashcl__desc_is_plain(&f32) && d->dtype != FLASHCL_DTYPE_F32)
        return flashcl__fail(ctx, FLASHCL_ERR_UNSUPPORTED_DTYPE, "dtype: the %s runs float32 only (got %s)", path,
                             flashcl__dtype_name(d->dtype));
    if (!flashcl__desc_is_plain(d)) {
        char features[160];
        flashcl__describe_features(d, features, sizeof features);
        return flashcl__fail(ctx, FLASHCL_ERR_UNSUPPORTED_VARIANT,
                             "the %s is the plain-attention baseline (causal at most); this call uses: %s", path,
                             features);
    }
    return FLASHCL_SUCCESS;
}
