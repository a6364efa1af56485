/* The checks that span every buffer of a call, the views' and the variants': no output shares
   memory with another argument, and no buffer's access flags forbid what the call does with it. */
#include "internal.h"

#include <stdint.h>

void flashcl__memory_root(cl_mem buf, cl_mem *root, size_t *shift_bytes) {
    cl_mem parent = NULL;
    size_t offset = 0;
    *root = buf;
    *shift_bytes = 0;
    if (clGetMemObjectInfo(buf, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL) == CL_SUCCESS && parent &&
        clGetMemObjectInfo(buf, CL_MEM_OFFSET, sizeof offset, &offset, NULL) == CL_SUCCESS) {
        *root = parent;
        *shift_bytes = offset;
    }
}

void flashcl__range_add(flashcl__ranges *r, const char *name, cl_mem buf, size_t offset_bytes, size_t bytes,
                        int is_output) {
    if (!buf || r->count >= FLASHCL__MAX_RANGES) return; /* absent; the list is sized for every argument */
    flashcl__range *e = &r->items[r->count++];
    e->name = name;
    e->buffer = buf;
    e->is_output = is_output;
    size_t shift = 0;
    flashcl__memory_root(buf, &e->root, &shift);
    e->begin = shift + offset_bytes;
    e->end = bytes > SIZE_MAX - e->begin ? SIZE_MAX : e->begin + bytes;
}

/* A small array of `count` elements of `elem` bytes from element `offset` (bounds already checked). */
static void add_small(flashcl__ranges *r, const char *name, cl_mem buf, size_t elem, size_t offset, size_t count,
                      int is_output) {
    flashcl__range_add(r, name, buf, offset * elem, count * elem, is_output);
}

/* A bias or mask matrix: from its offset to one past its farthest element (bounds already checked). */
static void add_matrix(flashcl__ranges *r, const flashcl_attention_desc *d, const char *name, const flashcl_matrix *m,
                       size_t elem, size_t rows, size_t cols) {
    if (!m->buffer) return;
    cl_ulong v[4];
    flashcl__matrix_strides(d, m, rows, cols, v);
    const size_t nb = v[1] ? d->batch : 1, nh = v[2] ? d->heads_q : 1;
    const size_t last = (size_t)v[0] + (nb - 1) * (size_t)v[1] + (nh - 1) * (size_t)v[2] +
                        (rows - 1) * (size_t)v[3] + cols; /* checked not to wrap by check_matrix */
    flashcl__range_add(r, name, m->buffer, (size_t)v[0] * elem, (last - (size_t)v[0]) * elem, 0);
}

void flashcl__variant_ranges(const flashcl_attention_desc *d, int backward, flashcl__ranges *r) {
    if (d->alibi_slopes)
        add_small(r, "alibi_slopes", d->alibi_slopes, sizeof(float), d->alibi_offset,
                  (d->batch - 1) * d->alibi_stride_batch + d->heads_q, 0);
    if (d->sinks) add_small(r, "sinks", d->sinks, sizeof(float), d->sinks_offset, d->heads_q, 0);
    if (backward && d->dsinks) add_small(r, "dsinks", d->dsinks, sizeof(float), d->dsinks_offset, d->heads_q, 1);
    add_matrix(r, d, "bias", &d->bias, sizeof(float), d->max_seqlen_q, d->max_seqlen_k);
    add_matrix(r, d, "mask", &d->mask, 1, d->max_seqlen_q, d->max_seqlen_k);
    if (d->block_mask.buffer)
        add_matrix(r, d, "block_mask", &d->block_mask, 1, flashcl__block_rows(d), flashcl__block_cols(d));
    flashcl__varlen_ranges(d, r);
}

void flashcl__varlen_ranges(const flashcl_attention_desc *d, flashcl__ranges *r) {
    if (!flashcl__is_varlen(d)) return;
    add_small(r, "cu_seqlens_q", d->cu_seqlens_q, sizeof(cl_int), 0, d->batch + 1, 0);
    add_small(r, "cu_seqlens_k", d->cu_seqlens_k, sizeof(cl_int), 0, d->batch + 1, 0);
}

/* What the buffer's flags forbid: writing a CL_MEM_READ_ONLY buffer, reading a CL_MEM_WRITE_ONLY
   one (undefined behaviour in OpenCL: POCL lets it pass, a GPU driver may fault). */
static flashcl_status check_access(flashcl_context *ctx, const flashcl__range *e) {
    cl_mem_flags flags = 0;
    cl_int err = clGetMemObjectInfo(e->buffer, CL_MEM_FLAGS, sizeof flags, &flags, NULL);
    if (err != CL_SUCCESS)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_BUFFER, "%s is not a valid cl_mem (clGetMemObjectInfo: %s)",
                             e->name, flashcl__cl_error_name(err));
    if (e->is_output && (flags & CL_MEM_READ_ONLY))
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_BUFFER,
                             "%s: its buffer is CL_MEM_READ_ONLY, but the call writes it", e->name);
    if (e->is_output != 1 && (flags & CL_MEM_WRITE_ONLY))
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_BUFFER,
                             "%s: its buffer is CL_MEM_WRITE_ONLY, but the call reads it", e->name);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl__check_ranges(flashcl_context *ctx, const flashcl__ranges *r, int first_new) {
    for (int i = 0; i < r->count; ++i) {
        flashcl_status st = check_access(ctx, &r->items[i]);
        if (st != FLASHCL_SUCCESS) return st;
    }
    /* Pairs of ranges before first_new were compared element by element (flashcl__validate_views). */
    for (int i = 0; i < r->count; ++i) {
        const flashcl__range *o = &r->items[i];
        if (!o->is_output) continue;
        for (int j = 0; j < r->count; ++j) {
            const flashcl__range *x = &r->items[j];
            if (j == i || (i < first_new && j < first_new) || x->root != o->root) continue;
            if (x->begin < o->end && o->begin < x->end)
                return flashcl__fail(ctx, FLASHCL_ERR_ALIASED_OUTPUT, "%s overlaps %s in the same buffer", o->name,
                                     x->name);
        }
    }
    return FLASHCL_SUCCESS;
}
