/* Argument checks, done before anything is enqueued: a bad call writes nothing
   and its message names the offending field. */
#include "internal.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

/* Largest size the kernels index with 32-bit ints (sequence lengths, heads, batch). */
#define MAX_DIM ((size_t)INT_MAX)

/* The first descriptor with a struct_size (FlashCL 0.2.0 as first released) ends with `path`
   (num_splits and allow_tf32 came later, still as 0.2.0): no caller's is shorter. */
#define DESC_MIN_SIZE (offsetof(flashcl_attention_desc, path) + sizeof(flashcl_path))

/* Copies the caller's descriptor, whatever header it was built with: fields it lacks read as
   zero (off); fields this library lacks must be zero. */
static flashcl_status copy_desc(flashcl_context *ctx, const flashcl_attention_desc *desc, flashcl_attention_desc *d) {
    const size_t n = desc->struct_size;
    if (n == 0)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_STRUCT_SIZE,
                             "desc->struct_size is 0: start the descriptor from FLASHCL_ATTENTION_DESC_INIT");
    if (n < DESC_MIN_SIZE)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_STRUCT_SIZE,
                             "desc->struct_size (%zu) is smaller than the smallest FlashCL descriptor (%zu bytes)", n,
                             (size_t)DESC_MIN_SIZE);
    memset(d, 0, sizeof *d);
    memcpy(d, desc, n < sizeof *d ? n : sizeof *d);
    const unsigned char *extra = (const unsigned char *)desc;
    for (size_t i = sizeof *d; i < n; ++i)
        if (extra[i] != 0)
            return flashcl__fail(ctx, FLASHCL_ERR_UNSUPPORTED_FIELD,
                                 "desc sets a field at byte %zu, past the %zu bytes of FlashCL %s's descriptor (built "
                                 "against a newer flashcl.h?)",
                                 i, sizeof *d, FLASHCL_VERSION_STRING);
    d->struct_size = sizeof *d;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl__resolve_desc(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                     flashcl_attention_desc *out) {
    if (!desc) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "desc is NULL");
    flashcl_attention_desc d;
    flashcl_status st = copy_desc(ctx, desc, &d);
    if (st != FLASHCL_SUCCESS) return st;
    if (d.path != FLASHCL_PATH_FLASH && d.path != FLASHCL_PATH_STANDARD)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_PATH, "path: unknown value %d", (int)d.path);
    switch (d.dtype) {
    case FLASHCL_DTYPE_DEFAULT:
    case FLASHCL_DTYPE_F32:
        d.dtype = FLASHCL_DTYPE_F32;
        break;
    case FLASHCL_DTYPE_F16:
    case FLASHCL_DTYPE_BF16:
        break;
    default:
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_DTYPE, "dtype: unknown value %d", (int)d.dtype);
    }
    if (d.heads_kv == 0) d.heads_kv = d.heads_q;
    if (d.seqlen_k == 0) d.seqlen_k = d.seqlen_q;
    const struct {
        const char *name;
        size_t value;
    } dims[] = {{"batch", d.batch},
                {"heads_q", d.heads_q},
                {"seqlen_q", d.seqlen_q},
                {"heads_kv", d.heads_kv},
                {"seqlen_k", d.seqlen_k}};
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
    /* Any scale whose product with log2(e), which the kernels scale by in float32, stays finite; a
       negative one is a softmax of the negated logits (every kernel scales the scores before their
       running max; the tensor-core path, which does not, declines scale <= 0). */
    if (!(fabsf(d.scale) <= (float)FLASHCL_MAX_SCALE))
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_SCALE,
                             "scale (%g) must be a finite number of magnitude at most %g (the kernels scale by it "
                             "times log2(e) in float32; 0 = 1/sqrt(head_dim))",
                             (double)d.scale, FLASHCL_MAX_SCALE);
    if (d.scale == 0.0f) d.scale = (float)(1.0 / sqrt((double)d.head_dim));
    st = flashcl__resolve_variants(ctx, &d);
    if (st != FLASHCL_SUCCESS) return st;
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

/* Checks that buf is a cl_mem of this context; *elems = its size in elements of elem bytes. */
static flashcl_status check_buffer(flashcl_context *ctx, const char *name, cl_mem buf, size_t elem, size_t *elems) {
    if (!buf) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_BUFFER, "%s is NULL", name);
    cl_context owner = NULL;
    size_t bytes = 0;
    cl_int err = clGetMemObjectInfo(buf, CL_MEM_CONTEXT, sizeof owner, &owner, NULL);
    if (err == CL_SUCCESS) err = clGetMemObjectInfo(buf, CL_MEM_SIZE, sizeof bytes, &bytes, NULL);
    if (err != CL_SUCCESS)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_BUFFER, "%s is not a valid cl_mem (clGetMemObjectInfo: %s)", name,
                             flashcl__cl_error_name(err));
    if (owner != ctx->cl_ctx)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_BUFFER,
                             "%s belongs to another OpenCL context than this FlashCL context", name);
    *elems = bytes / elem;
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

/* A view's batch count and element size: its own, else the descriptor's. */
static size_t spec_batch(const flashcl__view_spec *s, const flashcl_attention_desc *d) {
    return s->batch ? s->batch : (flashcl__is_varlen(d) ? 1 : d->batch);
}
static size_t spec_elem(const flashcl__view_spec *s, const flashcl_attention_desc *d) {
    return s->elem ? s->elem : flashcl_dtype_size(d->dtype);
}

static flashcl_status check_view(flashcl_context *ctx, const flashcl__view_spec *s, const flashcl_attention_desc *d,
                                 flashcl_tensor *resolved, size_t *begin, size_t *end) {
    char field[32];
    snprintf(field, sizeof field, "%s.buffer", s->name);
    size_t floats = 0; /* elements of the storage type */
    const size_t dim = s->dim;
    const int varlen = flashcl__is_varlen(d) && !s->batch;
    const size_t batch = spec_batch(s, d); /* varlen views are [total, heads, dim] */
    flashcl_status st = check_buffer(ctx, field, s->t->buffer, spec_elem(s, d), &floats);
    if (st != FLASHCL_SUCCESS) return st;
    flashcl_tensor t = *s->t;
    if (t.stride_batch == 0 && t.stride_head == 0 && t.stride_row == 0) {
        t.stride_batch = varlen ? 0 : s->rows * s->heads * dim;
        t.stride_head = dim;
        t.stride_row = s->heads * dim;
    }
    if (varlen && t.stride_batch != 0)
        return flashcl__fail(
            ctx, FLASHCL_ERR_INVALID_STRIDE,
            "%s.stride_batch (%zu) must be 0 with varlen (cu_seqlens): the views are [total, heads, dim]", s->name,
            t.stride_batch);
    if (s->rows > 1 && t.stride_row < dim)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_STRIDE,
                             "%s.stride_row (%zu) is smaller than head_dim (%zu): rows may not overlap (a view "
                             "broadcast along the sequence needs a packed copy)",
                             s->name, t.stride_row, dim);
    if (s->is_output && view_overlaps(&t, batch, s->heads, s->rows, dim))
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_STRIDE,
                             "%s.stride_batch/stride_head/stride_row (%zu/%zu/%zu) make output rows overlap", s->name,
                             t.stride_batch, t.stride_head, t.stride_row);
    size_t last = view_end(&t, batch, s->heads, s->rows, dim);
    if (last == 0 || last > floats)
        return flashcl__fail(
            ctx, FLASHCL_ERR_OUT_OF_BOUNDS,
            "%s: the view (%s.offset %zu, strides %zu/%zu/%zu) reaches element %zu but %s.buffer holds %zu elements",
            s->name, s->name, t.offset, t.stride_batch, t.stride_head, t.stride_row, last, s->name, floats);
    *resolved = t;
    *begin = t.offset;
    *end = last;
    return FLASHCL_SUCCESS;
}

/* Whether delta = sum_k j_k*stride_k + dc for some |dc| < dim and
   -(nb_k - 1) <= j_k <= na_k - 1, strides sorted ascending and nested (each
   stride steps past what the smaller ones cover), so at each level only the
   two nearest multiples can work. */
static int difference_reachable(long long delta, const long long *stride, const long long *na, const long long *nb,
                                int level, long long dim) {
    if (level < 0) return delta > -dim && delta < dim;
    long long s = stride[level];
    long long j0 = s > 0 ? delta / s : 0;
    for (long long j = j0 - 1; j <= j0 + 1; ++j) {
        if (j > na[level] - 1 || j < -(nb[level] - 1)) continue;
        if (difference_reachable(delta - j * s, stride, na, nb, level - 1, dim)) return 1;
    }
    return 0;
}

/*
 * Whether views a and b (same root buffer) share an element. Views with the
 * same strides are compared exactly, so interleaved outputs such as the
 * q/k/v slots of one packed [b, s, 3, h, d] buffer are allowed; otherwise
 * their [first, last] extents must not intersect.
 */
static int views_share_element(const flashcl__view_spec *sa, const flashcl_tensor *a, size_t shift_a,
                               const flashcl__view_spec *sb, const flashcl_tensor *b, size_t shift_b,
                               const flashcl_attention_desc *d, const size_t *begin, const size_t *end, int ia,
                               int ib) {
    /* The caller found their byte extents intersecting; views of different element sizes (an fp8
       cache next to a float32 output) are not compared element by element: they conflict. */
    if (spec_elem(sa, d) != spec_elem(sb, d)) return 1;
    size_t a0 = begin[ia] + shift_a, a1 = end[ia] + shift_a, b0 = begin[ib] + shift_b, b1 = end[ib] + shift_b;
    if (a1 <= b0 || b1 <= a0) return 0;
    if (a->stride_batch != b->stride_batch || a->stride_head != b->stride_head || a->stride_row != b->stride_row)
        return 1;
    long long stride[3] = {(long long)a->stride_batch, (long long)a->stride_head, (long long)a->stride_row};
    const long long dim = (long long)(sa->dim > sb->dim ? sa->dim : sb->dim);
    long long na[3] = {(long long)spec_batch(sa, d), (long long)sa->heads, (long long)sa->rows};
    long long nb[3] = {(long long)spec_batch(sb, d), (long long)sb->heads, (long long)sb->rows};
    for (int i = 0; i < 3; ++i) /* sort by stride */
        for (int j = i + 1; j < 3; ++j)
            if (stride[j] < stride[i]) {
                long long t = stride[i];
                stride[i] = stride[j], stride[j] = t;
                t = na[i], na[i] = na[j], na[j] = t;
                t = nb[i], nb[i] = nb[j], nb[j] = t;
            }
    long long extent = dim; /* nesting, over the larger of the two counts */
    for (int i = 0; i < 3; ++i) {
        long long n = na[i] > nb[i] ? na[i] : nb[i];
        if (n == 1) continue;
        if (stride[i] < extent) return 1; /* not nested: stay conservative */
        extent += (n - 1) * stride[i];
    }
    long long delta = (long long)(b->offset + shift_b) - (long long)(a->offset + shift_a);
    /* a's element (i, c) equals b's (i', c') iff (i - i').strides + (c - c') = delta. */
    return difference_reachable(delta, stride, na, nb, 2, dim);
}

flashcl_status flashcl__validate_views(flashcl_context *ctx, const flashcl_attention_desc *d,
                                       const flashcl__view_spec *views, int count, const flashcl__lse_spec *lse,
                                       cl_uint num_wait, const cl_event *wait_list, flashcl_tensor *resolved) {
    for (int i = 0; i < count; ++i)
        if (!views[i].t) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "%s is NULL", views[i].name);
    size_t begin[FLASHCL__MAX_VIEWS], end[FLASHCL__MAX_VIEWS];
    for (int i = 0; i < count; ++i) {
        flashcl_status st = check_view(ctx, &views[i], d, &resolved[i], &begin[i], &end[i]);
        if (st != FLASHCL_SUCCESS) return st;
    }
    if (lse->required && !lse->buffer)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_BUFFER,
                             "lse is NULL (the backward pass needs the forward's LSE)");
    size_t lse_begin = 0, lse_end = 0;
    if (lse->buffer) {
        size_t floats = 0;
        flashcl_status st = check_buffer(ctx, "lse", lse->buffer, sizeof(float), &floats);
        if (st != FLASHCL_SUCCESS) return st;
        size_t rows = (flashcl__is_varlen(d) ? 1 : d->batch) * d->heads_q; /* varlen: [heads_q, total_q] */
        if (!mul_add(rows, d->seqlen_q, lse->offset, &lse_end) || lse_end > floats)
            return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_BOUNDS,
                                 "lse: needs %zu floats from lse_offset %zu but the buffer holds %zu",
                                 rows * d->seqlen_q, lse->offset, floats);
        lse_begin = lse->offset;
    }
    /* An output sharing memory with an input or another output would race.
       Sub-buffers are compared through their parent buffer; views among
       themselves in elements (one storage type), against LSE in bytes. */
    cl_mem root[FLASHCL__MAX_VIEWS + 1];
    size_t shift[FLASHCL__MAX_VIEWS + 1], shift_elems[FLASHCL__MAX_VIEWS];
    for (int i = 0; i < count; ++i) {
        flashcl__memory_root(views[i].t->buffer, &root[i], &shift[i]);
        shift_elems[i] = shift[i] / spec_elem(&views[i], d);
    }
    if (lse->buffer) flashcl__memory_root(lse->buffer, &root[count], &shift[count]);
    const size_t lse_b0 = lse_begin * sizeof(float) + shift[count], lse_b1 = lse_end * sizeof(float) + shift[count];
    for (int o = 0; o < count; ++o) {
        const size_t elem = spec_elem(&views[o], d);
        const size_t o_b0 = begin[o] * elem + shift[o], o_b1 = end[o] * elem + shift[o];
        if (!views[o].is_output) continue;
        for (int i = 0; i < count; ++i) {
            if (i == o || root[o] != root[i]) continue;
            /* Bytes first: views of different element sizes (fp8 caches) may share a buffer without sharing memory. */
            const size_t ie = spec_elem(&views[i], d), i_b0 = begin[i] * ie + shift[i], i_b1 = end[i] * ie + shift[i];
            if (i_b0 < o_b1 && o_b0 < i_b1 &&
                views_share_element(&views[o], &resolved[o], shift_elems[o], &views[i], &resolved[i], shift_elems[i], d,
                                    begin, end, o, i))
                return flashcl__fail(ctx, FLASHCL_ERR_ALIASED_OUTPUT, "%s overlaps %s in the same buffer",
                                     views[o].name, views[i].name);
        }
        if (lse->buffer && root[count] == root[o] && lse_b0 < o_b1 && o_b0 < lse_b1)
            return flashcl__fail(ctx, FLASHCL_ERR_ALIASED_OUTPUT, "%s overlaps lse in the same buffer", views[o].name);
    }
    if (lse->buffer && lse->is_output) {
        for (int i = 0; i < count; ++i)
            if (root[count] == root[i] && lse_b0 < end[i] * spec_elem(&views[i], d) + shift[i] &&
                begin[i] * spec_elem(&views[i], d) + shift[i] < lse_b1)
                return flashcl__fail(ctx, FLASHCL_ERR_ALIASED_OUTPUT, "lse overlaps %s in the same buffer",
                                     views[i].name);
    }
    return flashcl__validate_wait_list(ctx, num_wait, wait_list);
}

/* floor(a / b) and ceil(a / b) for b > 0. */
static long long floor_div(long long a, long long b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
static long long ceil_div(long long a, long long b) { return a >= 0 ? (a + b - 1) / b : -(-a / b); }

/* Most states compared element by element with one output; past it, overlapping extents are refused. */
#define FLASHCL__STATES_COMPARED 4096

flashcl_status flashcl__validate_states_apart(flashcl_context *ctx, const flashcl_attention_desc *d,
                                              const flashcl__view_spec *states, const flashcl_tensor *first,
                                              size_t state_stride, size_t from, size_t to,
                                              const flashcl__view_spec *out, const flashcl_tensor *o,
                                              const flashcl__lse_spec *lse) {
    if (from >= to) return FLASHCL_SUCCESS;
    cl_mem s_root;
    size_t s_shift;
    flashcl__memory_root(first->buffer, &s_root, &s_shift);
    const size_t se = spec_elem(states, d);
    const size_t s_begin = first->offset,
                 s_end = view_end(first, spec_batch(states, d), states->heads, states->rows, states->dim);
    /* Byte offsets in the root buffer: every state was checked to lie inside it (and so to fit). */
    const long long step = (long long)(state_stride * se), s0 = (long long)(s_begin * se + s_shift),
                    s1 = (long long)(s_end * se + s_shift);
    for (int k = 0; k < 2; ++k) {
        cl_mem root;
        size_t shift, oe = spec_elem(out, d), o_end = 0;
        long long b0, b1;
        if (k == 0) {
            flashcl__memory_root(o->buffer, &root, &shift);
            o_end = view_end(o, spec_batch(out, d), out->heads, out->rows, out->dim);
            b0 = (long long)(o->offset * oe + shift);
            b1 = (long long)(o_end * oe + shift);
        } else {
            if (!lse->buffer || !lse->is_output) continue;
            flashcl__memory_root(lse->buffer, &root, &shift);
            const size_t rows = (flashcl__is_varlen(d) ? 1 : d->batch) * d->heads_q * d->seqlen_q;
            b0 = (long long)(lse->offset * sizeof(float) + shift);
            b1 = b0 + (long long)(rows * sizeof(float));
        }
        if (root != s_root) continue;
        /* State s covers bytes [s0 + s*step, s1 + s*step): it meets [b0, b1) for s in [lo, hi]. */
        long long lo = floor_div(b0 - s1, step) + 1, hi = ceil_div(b1 - s0, step) - 1;
        if (lo < (long long)from) lo = (long long)from;
        if (hi > (long long)to - 1) hi = (long long)to - 1;
        if (lo > hi) continue;
        const char *name = k == 0 ? out->name : "lse";
        if (k == 1 || hi - lo >= FLASHCL__STATES_COMPARED)
            return flashcl__fail(ctx, FLASHCL_ERR_ALIASED_OUTPUT,
                                 "%s overlaps %s (state %lld of %zu) in the same buffer", name, states->name, lo,
                                 to + 1);
        for (long long i = lo; i <= hi; ++i) {
            flashcl_tensor t = *first;
            t.offset += (size_t)i * state_stride;
            const size_t begin[2] = {o->offset, t.offset}, end[2] = {o_end, s_end + (size_t)i * state_stride};
            if (views_share_element(out, o, shift / oe, states, &t, s_shift / se, d, begin, end, 0, 1))
                return flashcl__fail(ctx, FLASHCL_ERR_ALIASED_OUTPUT,
                                     "%s overlaps %s (state %lld of %zu) in the same buffer", name, states->name, i,
                                     to + 1);
        }
    }
    return FLASHCL_SUCCESS;
}

void flashcl__view_ranges(const flashcl_attention_desc *d, const flashcl__view_spec *views, int count,
                          const flashcl_tensor *resolved, const flashcl__lse_spec *lse, flashcl__ranges *r) {
    for (int i = 0; i < count; ++i) {
        const size_t elem = spec_elem(&views[i], d);
        const size_t end = view_end(&resolved[i], spec_batch(&views[i], d), views[i].heads, views[i].rows,
                                    views[i].dim); /* checked: in bounds */
        flashcl__range_add(r, views[i].name, resolved[i].buffer, resolved[i].offset * elem,
                           (end - resolved[i].offset) * elem, views[i].is_output);
    }
    if (lse->buffer) {
        const size_t rows = (flashcl__is_varlen(d) ? 1 : d->batch) * d->heads_q;
        flashcl__range_add(r, "lse", lse->buffer, lse->offset * sizeof(float), rows * d->seqlen_q * sizeof(float),
                           lse->is_output);
    }
}

flashcl_status flashcl__validate_apart(flashcl_context *ctx, const flashcl_attention_desc *d, int backward,
                                       const flashcl__view_spec *views, int count, const flashcl_tensor *resolved,
                                       const flashcl__lse_spec *lse, const flashcl__ranges *extra) {
    flashcl__ranges r = {0};
    flashcl__view_ranges(d, views, count, resolved, lse, &r);
    const int first_new = r.count;
    flashcl__variant_ranges(d, backward, &r);
    for (int i = 0; extra && i < extra->count && r.count < FLASHCL__MAX_RANGES; ++i)
        r.items[r.count++] = extra->items[i];
    return flashcl__check_ranges(ctx, &r, first_new);
}

flashcl_status flashcl__validate_wait_list(flashcl_context *ctx, cl_uint num_wait, const cl_event *wait_list) {
    if ((num_wait > 0) != (wait_list != NULL))
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "wait_list and num_wait disagree (%u events, list %s)",
                             (unsigned)num_wait, wait_list ? "set" : "NULL");
    /* What the enqueue would refuse (CL_INVALID_EVENT_WAIT_LIST, CL_INVALID_CONTEXT) on a strict
       driver, and some drivers let pass: refused here, before anything is enqueued. */
    for (cl_uint i = 0; i < num_wait; ++i) {
        if (!wait_list[i])
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "wait_list[%u] is NULL", (unsigned)i);
        cl_context owner = NULL;
        cl_int err = clGetEventInfo(wait_list[i], CL_EVENT_CONTEXT, sizeof owner, &owner, NULL);
        if (err != CL_SUCCESS)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "wait_list[%u] is not an event (%s)", (unsigned)i,
                                 flashcl__cl_error_name(err));
        if (owner != ctx->cl_ctx)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT,
                                 "wait_list[%u] belongs to another OpenCL context than the FlashCL context's",
                                 (unsigned)i);
    }
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl__validate_call(flashcl_context *ctx, const flashcl_attention_desc *d, const flashcl_tensor *q,
                                      const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                      cl_mem lse, size_t lse_offset, cl_uint num_wait, const cl_event *wait_list,
                                      flashcl_tensor resolved[4]) {
    const flashcl__view_spec views[4] = {{"q", q, d->heads_q, d->seqlen_q, d->head_dim, 0, 0, 0},
                                         {"k", k, d->heads_kv, d->seqlen_k, d->head_dim, 0, 0, 0},
                                         {"v", v, d->heads_kv, d->seqlen_k, d->head_dim_v, 0, 0, 0},
                                         {"o", o, d->heads_q, d->seqlen_q, d->head_dim_v, 1, 0, 0}};
    const flashcl__lse_spec lse_spec = {lse, lse_offset, 0, 1};
    flashcl_status st = flashcl__validate_views(ctx, d, views, 4, &lse_spec, num_wait, wait_list, resolved);
    if (st == FLASHCL_SUCCESS) st = flashcl__validate_variant_buffers(ctx, d, 0, num_wait, wait_list);
    if (st == FLASHCL_SUCCESS) st = flashcl__validate_apart(ctx, d, 0, views, 4, resolved, &lse_spec, NULL);
    return st;
}

flashcl_status flashcl__validate_small(flashcl_context *ctx, const char *name, cl_mem buf, size_t elem, size_t offset,
                                       size_t count) {
    size_t have = 0;
    flashcl_status st = check_buffer(ctx, name, buf, elem, &have);
    if (st != FLASHCL_SUCCESS) return st;
    size_t need = 0;
    if (!mul_add(count, 1, offset, &need) || need > have)
        return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_BOUNDS,
                             "%s: needs %zu elements from offset %zu but the buffer holds %zu", name, count, offset,
                             have);
    return FLASHCL_SUCCESS;
}

/* A [b|1, h|1, rows, cols] matrix: strides sane, every element in bounds. */
static flashcl_status check_matrix(flashcl_context *ctx, const flashcl_attention_desc *d, const char *name,
                                   const flashcl_matrix *m, size_t elem, size_t rows, size_t cols) {
    char field[48];
    snprintf(field, sizeof field, "%s.buffer", name);
    size_t have = 0;
    flashcl_status st = check_buffer(ctx, field, m->buffer, elem, &have);
    if (st != FLASHCL_SUCCESS) return st;
    cl_ulong v[4];
    flashcl__matrix_strides(d, m, rows, cols, v);
    if (rows > 1 && v[3] < cols)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_STRIDE,
                             "%s.stride_row (%llu) is smaller than its row length (%zu)", name,
                             (unsigned long long)v[3], cols);
    flashcl_tensor t = {m->buffer, (size_t)v[0], (size_t)v[1], (size_t)v[2], (size_t)v[3]};
    size_t nb = v[1] ? d->batch : 1, nh = v[2] ? d->heads_q : 1;
    size_t last = view_end(&t, nb, nh, rows, cols);
    if (last == 0 || last > have)
        return flashcl__fail(
            ctx, FLASHCL_ERR_OUT_OF_BOUNDS,
            "%s: [%zu, %zu, %zu, %zu] from offset %zu (strides %llu/%llu/%llu) reaches element %zu but "
            "%s.buffer holds %zu",
            name, nb, nh, rows, cols, m->offset, (unsigned long long)v[1], (unsigned long long)v[2],
            (unsigned long long)v[3], last, name, have);
    return FLASHCL_SUCCESS;
}

/* The length of sequence b as the kernels see it (cl/variants.cl's flashcl_cu: each offset
   clamped into [0, total], an inverted pair empty). */
static long varlen_length(const cl_int *cu, size_t b, size_t total) {
    const long lo = cu[b] < 0 ? 0 : (long)cu[b] > (long)total ? (long)total : (long)cu[b];
    const long hi = cu[b + 1] < 0 ? 0 : (long)cu[b + 1] > (long)total ? (long)total : (long)cu[b + 1];
    return hi > lo ? hi - lo : 0;
}

static flashcl_status validate_varlen_lengths(flashcl_context *ctx, const flashcl_attention_desc *d, cl_uint num_wait,
                                              const cl_event *wait_list) {
    if (!flashcl__is_varlen(d) || (!d->bias.buffer && !d->mask.buffer && !d->block_mask.buffer)) return FLASHCL_SUCCESS;
    const size_t n = d->batch + 1;
    cl_int *cu = malloc(2 * n * sizeof *cu);
    if (!cu) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for cu_seqlens");
    cl_int err =
        clEnqueueReadBuffer(ctx->queue, d->cu_seqlens_q, CL_TRUE, 0, n * sizeof *cu, cu, num_wait, wait_list, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(ctx->queue, d->cu_seqlens_k, CL_TRUE, 0, n * sizeof *cu, cu + n, num_wait, wait_list,
                                  NULL);
    flashcl_status st = FLASHCL_SUCCESS;
    if (err != CL_SUCCESS) st = flashcl__fail_cl(ctx, err, "clEnqueueReadBuffer(cu_seqlens)");
    for (size_t b = 0; st == FLASHCL_SUCCESS && b < d->batch; ++b) {
        const long lq = varlen_length(cu, b, d->seqlen_q), lk = varlen_length(cu + n, b, d->seqlen_k);
        if ((size_t)lq > d->max_seqlen_q)
            st = flashcl__fail(ctx, FLASHCL_ERR_INVALID_VARIANT,
                               "cu_seqlens_q: sequence %zu has %ld query rows, more than max_seqlen_q (%zu), the rows "
                               "of the bias/mask/block_mask matrices",
                               b, lq, d->max_seqlen_q);
        else if ((size_t)lk > d->max_seqlen_k)
            st = flashcl__fail(ctx, FLASHCL_ERR_INVALID_VARIANT,
                               "cu_seqlens_k: sequence %zu has %ld keys, more than max_seqlen_k (%zu), the columns of "
                               "the bias/mask/block_mask matrices",
                               b, lk, d->max_seqlen_k);
    }
    free(cu);
    return st;
}

flashcl_status flashcl__validate_variant_buffers(flashcl_context *ctx, const flashcl_attention_desc *d, int backward,
                                                 cl_uint num_wait, const cl_event *wait_list) {
    flashcl_status st = FLASHCL_SUCCESS;
    const size_t sq = d->max_seqlen_q, sk = d->max_seqlen_k;
    if (d->alibi_slopes) {
        size_t extent = 0;
        if (!mul_add(d->batch - 1, d->alibi_stride_batch, d->heads_q, &extent))
            return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_BOUNDS, "alibi_stride_batch (%zu) is too large",
                                 d->alibi_stride_batch);
        st = flashcl__validate_small(ctx, "alibi_slopes", d->alibi_slopes, sizeof(float), d->alibi_offset, extent);
    }
    if (st == FLASHCL_SUCCESS && d->sinks)
        st = flashcl__validate_small(ctx, "sinks", d->sinks, sizeof(float), d->sinks_offset, d->heads_q);
    if (st == FLASHCL_SUCCESS && backward && d->dsinks) /* its overlaps: flashcl__validate_apart */
        st = flashcl__validate_small(ctx, "dsinks", d->dsinks, sizeof(float), d->dsinks_offset, d->heads_q);
    if (st == FLASHCL_SUCCESS && d->bias.buffer) st = check_matrix(ctx, d, "bias", &d->bias, sizeof(float), sq, sk);
    if (st == FLASHCL_SUCCESS && d->mask.buffer) st = check_matrix(ctx, d, "mask", &d->mask, 1, sq, sk);
    if (st == FLASHCL_SUCCESS && d->block_mask.buffer)
        st = check_matrix(ctx, d, "block_mask", &d->block_mask, 1, flashcl__block_rows(d), flashcl__block_cols(d));
    if (st == FLASHCL_SUCCESS && flashcl__is_varlen(d)) {
        st = flashcl__validate_small(ctx, "cu_seqlens_q", d->cu_seqlens_q, sizeof(cl_int), 0, d->batch + 1);
        if (st == FLASHCL_SUCCESS)
            st = flashcl__validate_small(ctx, "cu_seqlens_k", d->cu_seqlens_k, sizeof(cl_int), 0, d->batch + 1);
    }
    if (st == FLASHCL_SUCCESS) st = validate_varlen_lengths(ctx, d, num_wait, wait_list);
    return st;
}
