/* flashcl_merge_states and flashcl_merge_states_host: partial attention states merged by their LSE. */
#include "backends/decode/decode.h"

#include <math.h>
#include <string.h>

#define MERGE_MIN_SIZE (offsetof(flashcl_merge_desc, lse_state_stride) + sizeof(size_t))

static flashcl_status resolve_merge(flashcl_context *ctx, const flashcl_merge_desc *in, flashcl_merge_desc *m) {
    if (!in) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "m is NULL");
    if (in->struct_size < MERGE_MIN_SIZE)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_STRUCT_SIZE,
                             "m->struct_size (%zu) is 0 or too small: start it from FLASHCL_MERGE_DESC_INIT",
                             in->struct_size);
    memset(m, 0, sizeof *m);
    memcpy(m, in, in->struct_size < sizeof *m ? in->struct_size : sizeof *m);
    const struct {
        const char *name;
        size_t value;
    } dims[] = {{"num_states", m->num_states}, {"batch", m->batch}, {"heads", m->heads}, {"seqlen", m->seqlen}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i)
        if (dims[i].value == 0 || dims[i].value > INT32_MAX)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_SHAPE, "m->%s (%zu) must be in 1..%d", dims[i].name,
                                 dims[i].value, INT32_MAX);
    if (m->head_dim == 0 || m->head_dim > FLASHCL_MAX_HEAD_DIM)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_HEAD_DIM, "m->head_dim (%zu) must be in 1..%d", m->head_dim,
                             FLASHCL_MAX_HEAD_DIM);
    if (m->dtype == FLASHCL_DTYPE_DEFAULT) m->dtype = FLASHCL_DTYPE_F32;
    if (m->dtype != FLASHCL_DTYPE_F32 && m->dtype != FLASHCL_DTYPE_F16 && m->dtype != FLASHCL_DTYPE_BF16)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_DTYPE, "m->dtype: unknown value %d", (int)m->dtype);
    const size_t rows = m->batch * m->heads * m->seqlen;
    if (m->o_state_stride == 0) m->o_state_stride = rows * m->head_dim;
    if (m->lse_state_stride == 0) m->lse_state_stride = rows;
    if (m->lse_state_stride < rows)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_STRIDE,
                             "m->lse_state_stride (%zu) is smaller than a state's batch*heads*seqlen (%zu) LSE values",
                             m->lse_state_stride, rows);
    return FLASHCL_SUCCESS;
}

/* Every check flashcl_merge_states makes before it enqueues: *m, *d and views[3] resolved. */
static flashcl_status prepare_merge(flashcl_context *ctx, const flashcl_merge_desc *desc,
                                    const flashcl_tensor *o_states, cl_mem lse_states, size_t lse_states_offset,
                                    const flashcl_tensor *o, cl_mem lse, size_t lse_offset, cl_uint num_wait,
                                    const cl_event *wait_list, flashcl_merge_desc *mp, flashcl_attention_desc *dp,
                                    flashcl_tensor views[3]) {
    flashcl_status st = resolve_merge(ctx, desc, mp);
    if (st != FLASHCL_SUCCESS) return st;
    const flashcl_merge_desc m = *mp;
    if (!o_states || !o) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "%s is NULL", o ? "o_states" : "o");
    /* The merge as an attention descriptor: the same rows, the merged output's dtype. */
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.dtype = m.dtype;
    d.batch = m.batch;
    d.heads_q = d.heads_kv = m.heads;
    d.seqlen_q = d.seqlen_k = m.seqlen;
    d.head_dim = d.head_dim_v = m.head_dim;
    st = flashcl__resolve_desc(ctx, &d, &d);
    if (st != FLASHCL_SUCCESS) return st;
    *dp = d;
    /* State 0's view, then the span of all states: the last state must fit the buffer too. */
    flashcl_tensor last = *o_states;
    if (last.stride_batch == 0 && last.stride_head == 0 && last.stride_row == 0)
        last = flashcl_tensor_bshd(o_states->buffer, m.seqlen, m.heads, m.head_dim), last.offset = o_states->offset;
    flashcl_tensor first = last;
    /* Only state 0 and the last are checked below: what lies between is in bounds only if the
       states' offsets do not wrap around on the way. */
    const size_t rows = m.batch * m.heads * m.seqlen, later = m.num_states - 1;
    if (later && m.o_state_stride > (SIZE_MAX - last.offset) / later)
        return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_BOUNDS,
                             "o_states: the last state's offset (%zu + %zu * o_state_stride %zu) overflows",
                             last.offset, later, m.o_state_stride);
    if (later && m.lse_state_stride > (SIZE_MAX - rows) / later)
        return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_BOUNDS, "lse_states: %zu states of lse_state_stride %zu overflow",
                             m.num_states, m.lse_state_stride);
    last.offset += later * m.o_state_stride;
    const flashcl__view_spec specs[3] = {
        {"o_states", &first, m.heads, m.seqlen, m.head_dim, 0, 0, sizeof(float)},
        {"o_states (last state)", &last, m.heads, m.seqlen, m.head_dim, 0, 0, sizeof(float)},
        {"o", o, m.heads, m.seqlen, m.head_dim, 1, 0, 0},
    };
    const flashcl__lse_spec lse_spec = {lse, lse_offset, 0, 1};
    st = flashcl__validate_views(ctx, &d, specs, 3, &lse_spec, num_wait, wait_list, views);
    if (st == FLASHCL_SUCCESS)
        st = flashcl__validate_small(ctx, "lse_states", lse_states, sizeof(float), lse_states_offset,
                                     later * m.lse_state_stride + rows);
    if (st == FLASHCL_SUCCESS) { /* lse_states against the outputs; every buffer's access flags */
        flashcl__ranges r = {0};
        flashcl__view_ranges(&d, specs, 3, views, &lse_spec, &r);
        const int first_new = r.count;
        flashcl__range_add(&r, "lse_states", lse_states, lse_states_offset * sizeof(float),
                           (later * m.lse_state_stride + rows) * sizeof(float), 0);
        st = flashcl__check_ranges(ctx, &r, first_new);
    }
    /* The states between the first and the last (views[0] and [1] above) against the outputs. */
    if (st == FLASHCL_SUCCESS && later > 1)
        st = flashcl__validate_states_apart(ctx, &d, &specs[0], &views[0], m.o_state_stride, 1, later, &specs[2],
                                            &views[2], &lse_spec);
    return st;
}

flashcl_status flashcl__check_merge_states(flashcl_context *ctx, const flashcl_merge_desc *desc,
                                           const flashcl_tensor *o_states, cl_mem lse_states, size_t lse_states_offset,
                                           const flashcl_tensor *o, cl_mem lse, size_t lse_offset, cl_uint num_wait,
                                           const cl_event *wait_list, flashcl_tensor *o_resolved) {
    flashcl__clear_error(ctx);
    flashcl_merge_desc m;
    flashcl_attention_desc d;
    flashcl_tensor views[3];
    flashcl_status st = prepare_merge(ctx, desc, o_states, lse_states, lse_states_offset, o, lse, lse_offset, num_wait,
                                      wait_list, &m, &d, views);
    if (st == FLASHCL_SUCCESS && o_resolved) *o_resolved = views[2];
    return st;
}

flashcl_status flashcl_merge_states(flashcl_context *ctx, const flashcl_merge_desc *desc,
                                    const flashcl_tensor *o_states, cl_mem lse_states, size_t lse_states_offset,
                                    const flashcl_tensor *o, cl_mem lse, size_t lse_offset, cl_uint num_wait,
                                    const cl_event *wait_list, cl_event *event) {
    if (!ctx) return FLASHCL_ERR_INVALID_CONTEXT;
    flashcl__clear_error(ctx);
    if (event) *event = NULL;
    flashcl_merge_desc m;
    flashcl_attention_desc d;
    flashcl_tensor views[3];
    flashcl_status st = prepare_merge(ctx, desc, o_states, lse_states, lse_states_offset, o, lse, lse_offset, num_wait,
                                      wait_list, &m, &d, views);
    if (st != FLASHCL_SUCCESS) return st;
    cl_kernel kernel = NULL;
    st = flashcl__merge_kernel(ctx, &d, &kernel);
    if (st != FLASHCL_SUCCESS) return st;
    flashcl__args a = flashcl__args_for(kernel, "flash_merge");
    flashcl__arg_mem(&a, views[0].buffer);
    flashcl__arg_ulong(&a, views[0].offset);
    flashcl__arg_ulong(&a, views[0].stride_batch);
    flashcl__arg_ulong(&a, views[0].stride_head);
    flashcl__arg_ulong(&a, views[0].stride_row);
    flashcl__arg_ulong(&a, m.o_state_stride);
    flashcl__arg_mem(&a, lse_states);
    flashcl__arg_ulong(&a, lse_states_offset);
    flashcl__arg_ulong(&a, m.heads * m.seqlen);
    flashcl__arg_ulong(&a, m.seqlen);
    flashcl__arg_ulong(&a, m.lse_state_stride);
    flashcl__arg_view(&a, &views[2]);
    flashcl__arg_mem(&a, lse ? lse : lse_states);
    flashcl__arg_ulong(&a, lse_offset);
    flashcl__arg_int(&a, lse != NULL);
    flashcl__arg_int(&a, (cl_int)m.num_states);
    flashcl__arg_int(&a, (cl_int)m.seqlen);
    flashcl__arg_int(&a, (cl_int)m.seqlen);
    flashcl__arg_int(&a, (cl_int)m.heads);
    flashcl__arg_variants(&a, &d, lse_states);
    st = flashcl__args_check(ctx, &a);
    flashcl__chain chain;
    if (st == FLASHCL_SUCCESS) st = flashcl__chain_begin(&chain, ctx, num_wait, wait_list, 0);
    if (st == FLASHCL_SUCCESS) {
        const size_t items = m.seqlen * ((m.head_dim + 3) / 4);
        const size_t global[3] = {(items + 63) / 64 * 64, m.heads, m.batch}, local[3] = {64, 1, 1};
        const int done = flashcl__chain_launch(&chain, kernel, "flash_merge", 3, global, local, FLASHCL__AFTER_START);
        st = flashcl__chain_end(&chain, 1, &done, event);
    }
    clReleaseKernel(kernel);
    return st;
}

flashcl_status flashcl_merge_states_host(const flashcl_merge_desc *desc, const float *o_states, const float *lse_states,
                                         float *o, float *lse) {
    flashcl_merge_desc m;
    flashcl_status st = resolve_merge(NULL, desc, &m);
    if (st != FLASHCL_SUCCESS) return st;
    if (!o_states || !lse_states || !o) return FLASHCL_ERR_INVALID_ARGUMENT;
    if (m.dtype != FLASHCL_DTYPE_F32) return FLASHCL_ERR_UNSUPPORTED_DTYPE; /* host arrays are float32 */
    const size_t n = m.num_states, dim = m.head_dim;
    for (size_t b = 0; b < m.batch; ++b)
        for (size_t h = 0; h < m.heads; ++h)
            for (size_t i = 0; i < m.seqlen; ++i) {
                const size_t lrow = (b * m.heads + h) * m.seqlen + i;         /* [b, h, s] */
                const size_t orow = ((b * m.seqlen + i) * m.heads + h) * dim; /* [b, s, h, d] */
                double mx = -INFINITY;
                for (size_t s = 0; s < n; ++s) mx = fmax(mx, lse_states[s * m.lse_state_stride + lrow]);
                const double base = isinf(mx) && mx < 0 ? 0.0 : mx;
                double total = 0.0;
                for (size_t s = 0; s < n; ++s) total += exp(lse_states[s * m.lse_state_stride + lrow] - base);
                for (size_t c = 0; c < dim; ++c) {
                    double acc = 0.0;
                    for (size_t s = 0; s < n; ++s) {
                        const double w = exp(lse_states[s * m.lse_state_stride + lrow] - base);
                        if (w > 0.0) acc += w * o_states[s * m.o_state_stride + orow + c];
                    }
                    /* A NaN (or +inf) LSE makes total NaN: pass it on rather than report an empty row. */
                    o[orow + c] = total > 0.0 ? (float)(acc / total) : isnan(total) ? NAN : 0.0f;
                }
                if (lse) lse[lrow] = total > 0.0 ? (float)(base + log(total)) : isnan(total) ? NAN : -INFINITY;
            }
    return FLASHCL_SUCCESS;
}
