/* Argument checks, done before anything is enqueued: a bad call writes nothing
   and its message names the offending field. */
#include "internal.h"

#include <limits.h>
#include <stdio.h>
#include <math.h>
#include <string.h>

/* Largest size the kernels index with 32-bit ints (sequence lengths, heads, batch). */
#define MAX_DIM ((size_t)INT_MAX)

flashcl_status flashcl__resolve_desc(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                     flashcl_attention_desc *out) {
    if (!desc) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "desc is NULL");
    flashcl_attention_desc d = *desc;
    switch (d.dtype) {
    case FLASHCL_DTYPE_DEFAULT:
    case FLASHCL_DTYPE_F32:
        d.dtype = FLASHCL_DTYPE_F32;
        break;
    case FLASHCL_DTYPE_F16:
    case FLASHCL_DTYPE_BF16:
        return flashcl__fail(ctx, FLASHCL_ERR_UNSUPPORTED_DTYPE, "dtype: %s storage is not supported yet (use float32)",
                             d.dtype == FLASHCL_DTYPE_F16 ? "f16" : "bf16");
    default:
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_DTYPE, "dtype: unknown value %d", (int)d.dtype);
    }
    if (d.heads_kv == 0) d.heads_kv = d.heads_q;
    if (d.seqlen_k == 0) d.seqlen_k = d.seqlen_q;
    const struct {
        const char *name;
        size_t value;
    } dims[] = {{"batch", d.batch}, {"heads_q", d.heads_q}, {"seqlen_q", d.seqlen_q},
                {"heads_kv", d.heads_kv}, {"seqlen_k", d.seqlen_k}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i) {
        if (dims[i].value == 0) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_SHAPE, "%s is 0", dims[i].name);
        if (dims[i].value > MAX_DIM)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_SHAPE, "%s (%zu) is larger than %zu", dims[i].name,
                                 dims[i].value, MAX_DIM);
    }
    if (d.batch * d.heads_q > MAX_DIM)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_SHAPE, "batch*heads_q (%zu*%zu) is larger than %zu", d.batch,
                             d.heads_q, MAX_DIM);
    if (d.heads_kv > d.heads_q || d.heads_q % d.heads_kv != 0)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_HEADS, "heads_kv (%zu) must divide heads_q (%zu)", d.heads_kv,
                             d.heads_q);
    if (d.head_dim == 0 || d.head_dim > FLASHCL_MAX_HEAD_DIM)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_HEAD_DIM, "head_dim (%zu) must be in 1..%d", d.head_dim,
                             FLASHCL_MAX_HEAD_DIM);
    if (!(d.scale >= 0.0f) || !isfinite(d.scale))
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_SCALE, "scale (%g) must be a finite number >= 0 (0 = 1/sqrt(head_dim))",
                             (double)d.scale);
    if (d.scale == 0.0f) d.scale = (float)(1.0 / sqrt((double)d.head_dim));
    *out = d;
    return FLASHCL_SUCCESS;
}

/* a*b + c without wrapping; returns 0 on overflow. */
static int mul_add(size_t a, size_t b, size_t c, size_t *out) {
    if (a != 0 && b > (SIZE_MAX - c) / a) return 0;
    *out = a * b + c;
    return 1;
}

/* One past the last element a view touches; 0 on overflow. */
static size_t view_end(const flashcl_tensor *t, size_t batch, size_t heads, size_t rows, size_t dim) {
    size_t end = t->offset + dim;
    if (end < dim) return 0;
    if (!mul_add(batch - 1, t->stride_batch, end, &end)) return 0;
    if (!mul_add(heads - 1, t->stride_head, end, &end)) return 0;
    if (!mul_add(rows - 1, t->stride_row, end, &end)) return 0;
    return end;
}

static flashcl_status check_buffer(flashcl_context *ctx, const char *name, cl_mem buf, size_t *floats) {
    if (!buf) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_BUFFER, "%s is NULL", name);
    cl_context owner = NULL;
    size_t bytes = 0;
    cl_int err = clGetMemObjectInfo(buf, CL_MEM_CONTEXT, sizeof owner, &owner, NULL);
    if (err == CL_SUCCESS) err = clGetMemObjectInfo(buf, CL_MEM_SIZE, sizeof bytes, &bytes, NULL);
    if (err != CL_SUCCESS)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_BUFFER, "%s is not a valid cl_mem (clGetMemObjectInfo: %d)", name,
                             (int)err);
    if (owner != ctx->cl_ctx)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_BUFFER, "%s belongs to another OpenCL context than this FlashCL context",
                             name);
    *floats = bytes / sizeof(float);
    return FLASHCL_SUCCESS;
}

/* Whether the view's (batch, head, row) rows can land on the same element:
   sorted by stride, each stride must step past everything the smaller ones cover. */
static int view_overlaps(const flashcl_tensor *t, size_t batch, size_t heads, size_t rows, size_t dim) {
    size_t stride[3] = {t->stride_batch, t->stride_head, t->stride_row};
    size_t count[3] = {batch, heads, rows};
    for (int i = 0; i < 3; ++i)
        for (int j = i + 1; j < 3; ++j)
            if (stride[j] < stride[i]) {
                size_t s = stride[i], c = count[i];
                stride[i] = stride[j];
                count[i] = count[j];
                stride[j] = s;
                count[j] = c;
            }
    size_t extent = dim; /* elements covered by the dims sorted so far */
    for (int i = 0; i < 3; ++i) {
        if (count[i] == 1) continue;
        if (stride[i] < extent) return 1;
        if (!mul_add(count[i] - 1, stride[i], extent, &extent)) return 1;
    }
    return 0;
}

static flashcl_status check_view(flashcl_context *ctx, const flashcl__view_spec *s, size_t batch, size_t dim,
                                 flashcl_tensor *resolved, size_t *begin, size_t *end) {
    char field[32];
    snprintf(field, sizeof field, "%s.buffer", s->name);
    size_t floats = 0;
    flashcl_status st = check_buffer(ctx, field, s->t->buffer, &floats);
    if (st != FLASHCL_SUCCESS) return st;
    flashcl_tensor t = *s->t;
    if (t.stride_batch == 0 && t.stride_head == 0 && t.stride_row == 0) {
        t.stride_batch = s->rows * s->heads * dim;
        t.stride_head = dim;
        t.stride_row = s->heads * dim;
    }
    if (s->rows > 1 && t.stride_row < dim)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_STRIDE, "%s.stride_row (%zu) is smaller than head_dim (%zu)",
                             s->name, t.stride_row, dim);
    if (s->is_output && view_overlaps(&t, batch, s->heads, s->rows, dim))
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_STRIDE,
                             "%s.stride_batch/stride_head/stride_row (%zu/%zu/%zu) make output rows overlap", s->name,
                             t.stride_batch, t.stride_head, t.stride_row);
    size_t last = view_end(&t, batch, s->heads, s->rows, dim);
    if (last == 0 || last > floats)
        return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_BOUNDS,
                             "%s: the view (%s.offset %zu, strides %zu/%zu/%zu) reaches element %zu but %s.buffer holds %zu floats",
                             s->name, s->name, t.offset, t.stride_batch, t.stride_head, t.stride_row, last, s->name, floats);
    *resolved = t;
    *begin = t.offset;
    *end = last;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl__validate_views(flashcl_context *ctx, const flashcl_attention_desc *d,
                                       const flashcl__view_spec *views, int count, const flashcl__lse_spec *lse,
                                       cl_uint num_wait, const cl_event *wait_list, flashcl_tensor *resolved) {
    for (int i = 0; i < count; ++i)
        if (!views[i].t) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "%s is NULL", views[i].name);
    size_t begin[FLASHCL__MAX_VIEWS], end[FLASHCL__MAX_VIEWS];
    for (int i = 0; i < count; ++i) {
        flashcl_status st = check_view(ctx, &views[i], d->batch, d->head_dim, &resolved[i], &begin[i], &end[i]);
        if (st != FLASHCL_SUCCESS) return st;
    }
    size_t lse_begin = 0, lse_end = 0;
    if (lse->required && !lse->buffer)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_BUFFER, "lse is NULL (the backward pass needs the forward's LSE)");
    if (lse->buffer) {
        size_t floats = 0;
        flashcl_status st = check_buffer(ctx, "lse", lse->buffer, &floats);
        if (st != FLASHCL_SUCCESS) return st;
        size_t rows = d->batch * d->heads_q;
        if (!mul_add(rows, d->seqlen_q, lse->offset, &lse_end) || lse_end > floats)
            return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_BOUNDS,
                                 "lse: needs %zu floats from lse_offset %zu but the buffer holds %zu", rows * d->seqlen_q,
                                 lse->offset, floats);
        lse_begin = lse->offset;
    }
    /* An output sharing memory with an input or another output would race. */
    for (int o = 0; o < count; ++o) {
        if (!views[o].is_output) continue;
        for (int i = 0; i < count; ++i)
            if (i != o && views[o].t->buffer == views[i].t->buffer && begin[o] < end[i] && begin[i] < end[o])
                return flashcl__fail(ctx, FLASHCL_ERR_ALIASED_OUTPUT, "%s overlaps %s in the same buffer", views[o].name,
                                     views[i].name);
        if (lse->buffer && lse->buffer == views[o].t->buffer && lse_begin < end[o] && begin[o] < lse_end)
            return flashcl__fail(ctx, FLASHCL_ERR_ALIASED_OUTPUT, "%s overlaps lse in the same buffer", views[o].name);
    }
    if (lse->buffer && lse->is_output) {
        for (int i = 0; i < count; ++i)
            if (lse->buffer == views[i].t->buffer && lse_begin < end[i] && begin[i] < lse_end)
                return flashcl__fail(ctx, FLASHCL_ERR_ALIASED_OUTPUT, "lse overlaps %s in the same buffer", views[i].name);
    }
    if ((num_wait > 0) != (wait_list != NULL))
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "wait_list and num_wait disagree (%u events, list %s)",
                             (unsigned)num_wait, wait_list ? "set" : "NULL");
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl__validate_call(flashcl_context *ctx, const flashcl_attention_desc *d,
                                      const flashcl_tensor *q, const flashcl_tensor *k,
                                      const flashcl_tensor *v, const flashcl_tensor *o,
                                      cl_mem lse, size_t lse_offset, cl_uint num_wait,
                                      const cl_event *wait_list, flashcl_tensor resolved[4]) {
    const flashcl__view_spec views[4] = {{"q", q, d->heads_q, d->seqlen_q, 0},
                                         {"k", k, d->heads_kv, d->seqlen_k, 0},
                                         {"v", v, d->heads_kv, d->seqlen_k, 0},
                                         {"o", o, d->heads_q, d->seqlen_q, 1}};
    const flashcl__lse_spec lse_spec = {lse, lse_offset, 0, 1};
    return flashcl__validate_views(ctx, d, views, 4, &lse_spec, num_wait, wait_list, resolved);
}
