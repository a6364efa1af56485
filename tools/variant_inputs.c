/* The arrays of the variant options; see variant_inputs.h. */
#include "variant_inputs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tool_errors.h"

/* xorshift64 (Marsaglia 2003): fast, and good enough for benchmark inputs. */
void random_fill_uniform(float *data, size_t count, uint64_t *state) {
    uint64_t x = *state != 0 ? *state : 0x9e3779b97f4a7c15u; /* 0 is a fixed point */
    for (size_t i = 0; i < count; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        /* The top 24 bits fill a float's mantissa exactly: k / 2^23 - 1 for
         * k in [0, 2^24) is uniform on [-1, 1) with no rounding. */
        data[i] = (float)(x >> 40) * (1.0f / 8388608.0f) - 1.0f;
    }
    *state = x;
}

/* ------------------------------------------------------------- arrays */

static bool is_word(const char *value, const char *word) { return strcmp(value, word) == 0; }

static size_t product(const size_t *shape, size_t ndim) {
    size_t n = 1;
    for (size_t i = 0; i < ndim; ++i) n *= shape[i];
    return n;
}

/* An array of `shape` to be filled here; float32 arrays get their data pointer too. */
static int make_array(const char *option, npy_dtype dtype, const size_t *shape, size_t ndim, npy_array *out) {
    memset(out, 0, sizeof *out);
    size_t count = product(shape, ndim), elem = dtype == NPY_UINT8 ? 1 : 4;
    out->bytes = malloc(count ? count * elem : 1);
    if (out->bytes == NULL) return tool_failure("out of host memory for %s", option);
    out->ndim = ndim;
    memcpy(out->shape, shape, ndim * sizeof shape[0]);
    out->count = count;
    out->dtype = dtype;
    out->data = dtype == NPY_FLOAT32 ? out->bytes : NULL;
    return 0;
}

static int load(const char *option, const char *path, unsigned accepted, npy_array *out) {
    char err[512];
    if (npy_read_file_typed(path, accepted, out, err, sizeof err) != 0)
        return tool_usage_error("%s: %s: %s", option, path, err);
    return 0;
}

/* Random float32 data of `shape`. */
static int make_random(const char *option, const size_t *shape, size_t ndim, uint64_t *state, npy_array *out) {
    int rc = make_array(option, NPY_FLOAT32, shape, ndim, out);
    if (rc == 0) random_fill_uniform(out->data, out->count, state);
    return rc;
}

/* Random bytes of `shape`: 1 with probability `keep`. */
static int make_random_mask(const char *option, const size_t *shape, size_t ndim, double keep, uint64_t *state,
                            npy_array *out) {
    int rc = make_array(option, NPY_UINT8, shape, ndim, out);
    if (rc != 0) return rc;
    float *uniform = malloc(out->count ? out->count * sizeof(float) : 1);
    if (uniform == NULL) {
        npy_array_free(out);
        return tool_failure("out of host memory for %s", option);
    }
    random_fill_uniform(uniform, out->count, state);
    unsigned char *bytes = out->bytes;
    for (size_t i = 0; i < out->count; ++i) bytes[i] = (uniform[i] + 1.0f) * 0.5f < keep;
    free(uniform);
    return 0;
}

/* A float32 mask file as 0/1 bytes (nonzero = attend); bool and uint8 masks already are bytes. */
static int mask_as_bytes(const char *option, npy_array *a) {
    if (a->dtype != NPY_FLOAT32) return 0;
    unsigned char *bytes = malloc(a->count ? a->count : 1);
    if (bytes == NULL) return tool_failure("out of host memory for %s", option);
    for (size_t i = 0; i < a->count; ++i) bytes[i] = a->data[i] != 0.0f;
    free(a->bytes);
    a->bytes = bytes;
    a->data = NULL;
    a->dtype = NPY_UINT8;
    return 0;
}

/* ------------------------------------------------------------- shapes */

/* cu_seqlens: int32 [b + 1], starting at 0, non-decreasing, ending at the total. */
static int check_cu(const char *option, const npy_array *cu, size_t total, size_t *longest) {
    if (cu->ndim != 1 || cu->count < 2)
        return tool_usage_error("%s: expected a 1-D int32 array [batch + 1] with batch >= 1, got %zu dimension(s) "
                                "and %zu element(s)",
                                option, cu->ndim, cu->count);
    const int32_t *v = cu->bytes;
    if (v[0] != 0) return tool_usage_error("%s: must start at 0, got %d", option, (int)v[0]);
    *longest = 0;
    for (size_t i = 1; i < cu->count; ++i) {
        if (v[i] < v[i - 1])
            return tool_usage_error("%s: element %zu (%d) is smaller than element %zu (%d)", option, i, (int)v[i],
                                    i - 1, (int)v[i - 1]);
        if ((size_t)(v[i] - v[i - 1]) > *longest) *longest = (size_t)(v[i] - v[i - 1]);
    }
    if ((size_t)v[cu->count - 1] != total)
        return tool_usage_error("%s: ends at %d but the packed tensors have %zu rows", option, (int)v[cu->count - 1],
                                total);
    return 0;
}

/*
 * [b|1, h|1, rows, cols], or [rows, cols] for every batch and head (as the
 * Python API takes it), against the problem; sets an explicit view (a
 * dimension of 1 gets stride 0, so it broadcasts).
 */
/* "n or 1" for a broadcastable dimension of n, "1" when n is 1. */
static const char *or_one(size_t n, char *buf, size_t cap) {
    if (n == 1)
        snprintf(buf, cap, "1");
    else
        snprintf(buf, cap, "%zu or 1", n);
    return buf;
}

static int check_matrix(const char *option, const npy_array *a, const flashcl_attention_desc *d, size_t rows,
                        size_t cols, const char *what, flashcl_matrix *m) {
    char shape[128];
    npy_format_shape(a->shape, a->ndim, shape, sizeof shape);
    const size_t two_d = a->ndim == 2;
    const size_t nb = two_d ? 1 : a->ndim == 4 ? a->shape[0] : 0, nh = two_d ? 1 : a->ndim == 4 ? a->shape[1] : 0;
    if ((a->ndim != 2 && a->ndim != 4) || (nb != 1 && nb != d->batch) || (nh != 1 && nh != d->heads_q) ||
        a->shape[a->ndim - 2] != rows || a->shape[a->ndim - 1] != cols) {
        char nb_text[32], nh_text[32];
        return tool_usage_error("%s: shape %s fits neither [%zu, %zu] nor [%s, %s, %zu, %zu] (%s)", option, shape, rows,
                                cols, or_one(d->batch, nb_text, sizeof nb_text),
                                or_one(d->heads_q, nh_text, sizeof nh_text), rows, cols, what);
    }
    memset(m, 0, sizeof *m);
    m->stride_row = cols;
    m->stride_head = nh == 1 ? 0 : rows * cols;
    m->stride_batch = nb == 1 ? 0 : nh * rows * cols;
    return 0;
}

/* ------------------------------------------------------------- made data */

/* ALiBi's usual slopes: 2^(-8k/n) for the largest power of two n <= heads, then odd steps. */
static void standard_slopes(size_t heads, float *slopes) {
    size_t n = 1;
    while (n * 2 <= heads) n *= 2;
    for (size_t k = 1; k <= n; ++k) slopes[k - 1] = (float)pow(2.0, -8.0 * (double)k / (double)n);
    for (size_t e = 0; n + e < heads; ++e) slopes[n + e] = (float)pow(2.0, -4.0 * (double)(2 * e + 1) / (double)n);
}

/* `total` rows cut into cu->count - 1 lengths alternating 25% above and below the mean. */
static void split_rows(size_t total, npy_array *cu) {
    int32_t *offsets = cu->bytes;
    size_t seqs = cu->count - 1, mean = total / seqs, quarter = mean / 4;
    offsets[0] = 0;
    for (size_t i = 0; i < seqs; ++i) {
        size_t len = i + 1 == seqs ? total - (size_t)offsets[i] : (i % 2 == 0 ? mean + quarter : mean - quarter);
        offsets[i + 1] = offsets[i] + (int32_t)len;
    }
}

/* ------------------------------------------------------------- prepare */

/* The varlen offsets; sets batch and max_seqlen_q/k. */
static int prepare_varlen(const variant_options *v, flashcl_attention_desc *d, variant_arrays *a) {
    int rc;
    if (v->cu_q) {
        if ((rc = load("--cu-seqlens-q", v->cu_q, NPY_INT32, &a->cu_q)) != 0 ||
            (rc = load("--cu-seqlens-k", v->cu_k, NPY_INT32, &a->cu_k)) != 0)
            return rc;
    } else if (v->varlen_seqs) {
        size_t rows = d->seqlen_q < d->seqlen_k ? d->seqlen_q : d->seqlen_k;
        if (v->varlen_seqs > rows)
            return tool_usage_error("--varlen: %zu sequences do not fit %zu rows", v->varlen_seqs, rows);
        size_t shape[1] = {v->varlen_seqs + 1};
        if ((rc = make_array("--varlen", NPY_INT32, shape, 1, &a->cu_q)) != 0 ||
            (rc = make_array("--varlen", NPY_INT32, shape, 1, &a->cu_k)) != 0)
            return rc;
        split_rows(d->seqlen_q, &a->cu_q);
        split_rows(d->seqlen_k, &a->cu_k);
    } else {
        return 0;
    }
    if ((rc = check_cu("--cu-seqlens-q", &a->cu_q, d->seqlen_q, &d->max_seqlen_q)) != 0 ||
        (rc = check_cu("--cu-seqlens-k", &a->cu_k, d->seqlen_k, &d->max_seqlen_k)) != 0)
        return rc;
    if (a->cu_q.count != a->cu_k.count)
        return tool_usage_error("--cu-seqlens-k: %zu sequences, but --cu-seqlens-q has %zu", a->cu_k.count - 1,
                                a->cu_q.count - 1);
    d->batch = a->cu_q.count - 1;
    return 0;
}

static int prepare_alibi(const variant_options *v, flashcl_attention_desc *d, variant_arrays *a) {
    int rc;
    if (is_word(v->alibi, VARIANT_STANDARD_SLOPES)) {
        size_t shape[1] = {d->heads_q};
        if ((rc = make_array("--alibi", NPY_FLOAT32, shape, 1, &a->alibi)) != 0) return rc;
        standard_slopes(d->heads_q, a->alibi.data);
    } else if ((rc = load("--alibi", v->alibi, NPY_FLOAT32, &a->alibi)) != 0) {
        return rc;
    }
    const npy_array *s = &a->alibi;
    bool per_head = s->ndim == 1 && s->shape[0] == d->heads_q;
    bool per_batch = s->ndim == 2 && s->shape[0] == d->batch && s->shape[1] == d->heads_q;
    if (!per_head && !per_batch) {
        char shape[128];
        npy_format_shape(s->shape, s->ndim, shape, sizeof shape);
        return tool_usage_error("--alibi: shape %s is neither [%zu] (heads_q) nor [%zu, %zu] (batch, heads_q)", shape,
                                d->heads_q, d->batch, d->heads_q);
    }
    d->alibi_stride_batch = per_batch ? d->heads_q : 0;
    return 0;
}

static int prepare_sinks(const variant_options *v, const flashcl_attention_desc *d, uint64_t *state,
                         variant_arrays *a) {
    size_t shape[1] = {d->heads_q};
    int rc = is_word(v->sinks, VARIANT_RANDOM) ? make_random("--sinks", shape, 1, state, &a->sinks)
                                               : load("--sinks", v->sinks, NPY_FLOAT32, &a->sinks);
    if (rc == 0 && (a->sinks.ndim != 1 || a->sinks.shape[0] != d->heads_q)) {
        char text[128];
        npy_format_shape(a->sinks.shape, a->sinks.ndim, text, sizeof text);
        return tool_usage_error("--sinks: shape %s is not [%zu] (one logit per query head)", text, d->heads_q);
    }
    return rc;
}

/* Bias, mask and block mask: [b|1, hq|1, rows, cols] (blocks for the block mask). */
static int prepare_matrices(const variant_options *v, flashcl_attention_desc *d, uint64_t *state, variant_arrays *a) {
    const unsigned masks = NPY_BOOL | NPY_UINT8 | NPY_FLOAT32;
    bool varlen = a->cu_q.bytes != NULL;
    size_t rows = varlen ? d->max_seqlen_q : d->seqlen_q, cols = varlen ? d->max_seqlen_k : d->seqlen_k;
    const char *what = varlen ? "max_seqlen_q x max_seqlen_k of the sequences" : "seqlen_q x seqlen_k";
    size_t dense[4] = {d->batch, d->heads_q, rows, cols};
    int rc = 0;
    if (v->bias) {
        rc = is_word(v->bias, VARIANT_RANDOM) ? make_random("--bias", dense, 4, state, &a->bias)
                                              : load("--bias", v->bias, NPY_FLOAT32, &a->bias);
        if (rc == 0) rc = check_matrix("--bias", &a->bias, d, rows, cols, what, &d->bias);
    }
    if (rc == 0 && v->mask) {
        rc = is_word(v->mask, VARIANT_RANDOM) ? make_random_mask("--mask", dense, 4, 0.9, state, &a->mask)
                                              : load("--mask", v->mask, masks, &a->mask);
        if (rc == 0) rc = check_matrix("--mask", &a->mask, d, rows, cols, what, &d->mask);
        if (rc == 0) rc = mask_as_bytes("--mask", &a->mask);
    }
    if (rc == 0 && (v->block_mask || v->block_sparsity >= 0.0f)) {
        const char *option = v->block_mask ? "--block-mask" : "--block-sparse";
        d->block_q = v->block_q;
        d->block_k = v->block_k;
        size_t blocks[4] = {d->batch, d->heads_q, (rows + v->block_q - 1) / v->block_q,
                            (cols + v->block_k - 1) / v->block_k};
        rc = v->block_mask
                 ? load(option, v->block_mask, masks, &a->block_mask)
                 : make_random_mask(option, blocks, 4, 1.0 - (double)v->block_sparsity, state, &a->block_mask);
        if (rc == 0)
            rc =
                check_matrix(option, &a->block_mask, d, blocks[2], blocks[3], "blocks of --block-size", &d->block_mask);
        if (rc == 0) rc = mask_as_bytes(option, &a->block_mask);
    }
    return rc;
}

int variant_arrays_prepare(const variant_options *v, flashcl_attention_desc *d, uint64_t *state, variant_arrays *a) {
    memset(a, 0, sizeof *a);
    d->dtype = v->dtype;
    d->allow_tf32 = v->allow_tf32;
    if (v->window) {
        d->window = 1;
        d->window_left = v->window_left;
        d->window_right = v->window_right;
    }
    d->softcap = v->softcap;
    if (v->dropout) {
        d->dropout_p = v->dropout_p;
        d->dropout_seed = v->dropout_seed;
        d->dropout_offset = v->dropout_offset;
    }
    int rc = prepare_varlen(v, d, a);
    if (rc == 0 && v->alibi) rc = prepare_alibi(v, d, a);
    if (rc == 0 && v->sinks) rc = prepare_sinks(v, d, state, a);
    if (rc == 0) rc = prepare_matrices(v, d, state, a);
    if (rc != 0) variant_arrays_free(a);
    return rc;
}

void variant_arrays_free(variant_arrays *a) {
    npy_array *all[] = {&a->alibi, &a->sinks, &a->bias, &a->mask, &a->block_mask, &a->cu_q, &a->cu_k};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) npy_array_free(all[i]);
}

/* -------------------------------------------------------------- device */

/* An input buffer filled from data, or (data NULL) an output of `bytes`. */
static int make_buffer(flashcl_context *ctx, const char *option, const void *data, size_t bytes, cl_mem *out) {
    cl_int err = CL_SUCCESS;
    cl_mem_flags flags = data ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_READ_WRITE;
    *out = clCreateBuffer(flashcl_context_cl_context(ctx), flags, bytes ? bytes : 1, (void *)(uintptr_t)data, &err);
    if (err != CL_SUCCESS) {
        *out = NULL;
        return tool_failure("cannot allocate the %s buffer (%zu bytes) on the device: %s", option, bytes,
                            flashcl_status_name(err));
    }
    return 0;
}

/* Bytes of an array as uploaded: masks are bytes, everything else 4-byte elements. */
static size_t array_bytes(const npy_array *a) {
    return a->count * (a->dtype == NPY_UINT8 || a->dtype == NPY_BOOL ? 1 : 4);
}

int variant_buffers_attach(flashcl_context *ctx, const variant_arrays *a, bool want_dsinks, flashcl_attention_desc *d,
                           variant_buffers *b) {
    memset(b, 0, sizeof *b);
    const struct {
        const char *option;
        const npy_array *array;
        cl_mem *buffer, *field;
    } inputs[] = {{"--alibi", &a->alibi, &b->alibi, &d->alibi_slopes},
                  {"--sinks", &a->sinks, &b->sinks, &d->sinks},
                  {"--bias", &a->bias, &b->bias, &d->bias.buffer},
                  {"--mask", &a->mask, &b->mask, &d->mask.buffer},
                  {"--block-mask", &a->block_mask, &b->block_mask, &d->block_mask.buffer},
                  {"--cu-seqlens-q", &a->cu_q, &b->cu_q, &d->cu_seqlens_q},
                  {"--cu-seqlens-k", &a->cu_k, &b->cu_k, &d->cu_seqlens_k}};
    int rc = 0;
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0] && rc == 0; ++i) {
        const npy_array *array = inputs[i].array;
        if (array->bytes == NULL) continue;
        rc = make_buffer(ctx, inputs[i].option, array->bytes, array_bytes(array), inputs[i].buffer);
        *inputs[i].field = *inputs[i].buffer;
    }
    if (rc == 0 && want_dsinks && (rc = make_buffer(ctx, "dsinks", NULL, d->heads_q * sizeof(float), &b->dsinks)) == 0)
        d->dsinks = b->dsinks;
    return rc;
}

int variant_read_dsinks(flashcl_context *ctx, const variant_buffers *b, size_t heads_q, float *out) {
    cl_int err = clEnqueueReadBuffer(flashcl_context_queue(ctx), b->dsinks, CL_TRUE, 0, heads_q * sizeof(float), out, 0,
                                     NULL, NULL);
    if (err != CL_SUCCESS) return tool_failure("reading dsinks failed: %s", flashcl_status_name(err));
    return 0;
}

void variant_buffers_release(variant_buffers *b) {
    cl_mem *all[] = {&b->alibi, &b->sinks, &b->dsinks, &b->bias, &b->mask, &b->block_mask, &b->cu_q, &b->cu_k};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) {
        if (*all[i]) clReleaseMemObject(*all[i]);
        *all[i] = NULL;
    }
}
