#include "problem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tu_layout_name(tu_layout layout) {
    switch (layout) {
    case TU_BSHD:
        return "bshd";
    case TU_BHSD:
        return "bhsd";
    case TU_PADDED:
        return "padded";
    case TU_ZERO:
        return "zero-strides";
    }
    return "?";
}

tu_shape tu_shape_make(size_t batch, size_t heads_q, size_t heads_kv, size_t seqlen_q, size_t seqlen_k, size_t head_dim,
                       int causal, tu_layout layout) {
    tu_shape s;
    memset(&s, 0, sizeof s);
    s.desc = (flashcl_attention_desc)FLASHCL_ATTENTION_DESC_INIT;
    s.desc.batch = batch;
    s.desc.heads_q = heads_q;
    s.desc.heads_kv = heads_kv;
    s.desc.seqlen_q = seqlen_q;
    s.desc.seqlen_k = seqlen_k;
    s.desc.head_dim = head_dim;
    s.desc.causal = causal;
    s.layout_q = s.layout_k = s.layout_v = s.layout_o = layout;
    s.seed = 1;
    return s;
}

void tu_shape_describe(const tu_shape *shape, char *buf, size_t size) {
    const flashcl_attention_desc *d = &shape->desc;
    char scale[32] = "default";
    if (d->scale != 0.0f) snprintf(scale, sizeof scale, "%g", (double)d->scale);
    snprintf(buf, size, "b=%zu hq=%zu hkv=%zu sq=%zu sk=%zu d=%zu causal=%d scale=%s layout=%s/%s/%s/%s lse_off=%zu",
             d->batch, d->heads_q, d->heads_kv, d->seqlen_q, d->seqlen_k, d->head_dim, d->causal, scale,
             tu_layout_name(shape->layout_q), tu_layout_name(shape->layout_k), tu_layout_name(shape->layout_v),
             tu_layout_name(shape->layout_o), shape->lse_offset);
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    REQUIRE(p != NULL);
    return p;
}

flashcl_tensor tu_view_make(tu_layout layout, tu_dims dims) {
    flashcl_tensor t;
    memset(&t, 0, sizeof t);
    switch (layout) {
    case TU_BSHD:
        t = flashcl_tensor_bshd(NULL, dims.rows, dims.heads, dims.head_dim);
        break;
    case TU_BHSD:
        t = flashcl_tensor_bhsd(NULL, dims.rows, dims.heads, dims.head_dim);
        break;
    case TU_PADDED:
        /* Like a q/k/v slice of a fused [b, s, 3, h, d] tensor, with odd
         * padding so that rows start at unaligned element offsets. */
        t.offset = 13;
        t.stride_head = dims.head_dim + 3;
        t.stride_row = dims.heads * t.stride_head + 5;
        t.stride_batch = dims.rows * t.stride_row + 7;
        break;
    case TU_ZERO:
        break;
    }
    return t;
}

void tu_buffer_init(tu_buffer *t, cl_context cl_ctx, tu_layout layout, tu_dims dims, size_t lead, size_t guard,
                    tu_rng *rng, float lo, float hi) {
    t->dims = dims;
    t->view = tu_view_make(layout, dims);
    t->view.offset += lead;
    t->count = tu_view_extent(&t->view, dims) + guard;
    t->host = xcalloc(t->count, sizeof(float));
    /* Padding holds NaN: a kernel that lets out-of-view data into its math shows up. */
    tu_fill_sentinel(t->host, t->count);
    if (rng) tu_fill_view(t->host, &t->view, dims, rng, lo, hi);
    t->view.buffer = tu_buffer_create(cl_ctx, t->count, t->host);
}

void tu_problem_init(tu_problem *p, cl_context cl_ctx, const tu_shape *shape) {
    memset(p, 0, sizeof *p);
    p->shape = *shape;
    p->ref = ref_problem_from_desc(&shape->desc);
    const ref_problem *r = &p->ref;
    tu_dims qd = {r->batch, r->heads_q, r->seqlen_q, r->head_dim};
    tu_dims kd = {r->batch, r->heads_kv, r->seqlen_k, r->head_dim};
    tu_rng rng = tu_rng_seed(shape->seed);
    /* Inputs are sized exactly to their views, so any read past a view's end
     * is an out-of-bounds access that Oclgrind reports. Q is wider than K so
     * that the logits span a few units and the softmax is not nearly flat. */
    tu_buffer_init(&p->q, cl_ctx, shape->layout_q, qd, 0, 0, &rng, -3.0f, 3.0f);
    tu_buffer_init(&p->k, cl_ctx, shape->layout_k, kd, 0, 0, &rng, -1.0f, 1.0f);
    tu_buffer_init(&p->v, cl_ctx, shape->layout_v, kd, 0, 0, &rng, -1.0f, 1.0f);
    tu_buffer_init(&p->o, cl_ctx, shape->layout_o, qd, 0, TU_GUARD, NULL, 0.0f, 0.0f);

    size_t rows = r->batch * r->heads_q * r->seqlen_q;
    p->lse_count = shape->lse_offset + rows + TU_GUARD;
    p->lse_host = xcalloc(p->lse_count, sizeof(float));
    tu_fill_sentinel(p->lse_host, p->lse_count);
    p->lse = tu_buffer_create(cl_ctx, p->lse_count, p->lse_host);

    p->ref_o = xcalloc(rows * r->head_dim, sizeof(double));
    p->ref_lse = xcalloc(rows, sizeof(double));
    ref_attention(r, p->q.host, &p->q.view, p->k.host, &p->k.view, p->v.host, &p->v.view, p->ref_o, p->ref_lse);
}

void tu_buffer_release(tu_buffer *t) {
    if (t->view.buffer) clReleaseMemObject(t->view.buffer);
    free(t->host);
    memset(t, 0, sizeof *t);
}

void tu_problem_free(tu_problem *p) {
    tu_buffer *all[4] = {&p->q, &p->k, &p->v, &p->o};
    for (int i = 0; i < 4; i++) tu_buffer_release(all[i]);
    if (p->lse) clReleaseMemObject(p->lse);
    free(p->lse_host);
    free(p->ref_o);
    free(p->ref_lse);
    memset(p, 0, sizeof *p);
}

void tu_problem_reset_outputs(tu_problem *p, cl_command_queue queue) {
    tu_buffer_write(queue, p->o.view.buffer, p->o.count, p->o.host);
    tu_buffer_write(queue, p->lse, p->lse_count, p->lse_host);
}

flashcl_status tu_problem_run(flashcl_context *ctx, tu_problem *p, flashcl_path path, cl_uint num_wait,
                              const cl_event *wait, cl_event *event) {
    flashcl_attention_desc d = p->shape.desc;
    d.path = path;
    return flashcl_forward(ctx, &d, &p->q.view, &p->k.view, &p->v.view, &p->o.view, p->lse, p->shape.lse_offset,
                           num_wait, wait, event);
}

void tu_problem_read(tu_problem *p, cl_command_queue queue, cl_event after, float **o, float **lse) {
    *o = xcalloc(p->o.count, sizeof(float));
    *lse = xcalloc(p->lse_count, sizeof(float));
    tu_buffer_read(queue, p->o.view.buffer, p->o.count, *o, after);
    tu_buffer_read(queue, p->lse, p->lse_count, *lse, after);
}

int tu_problem_verify(tu_problem *p, cl_command_queue queue, cl_event after, const char *label) {
    float *o, *lse;
    tu_problem_read(p, queue, after, &o, &lse);
    unsigned char *o_mask = xcalloc(p->o.count, 1);
    unsigned char *lse_mask = xcalloc(p->lse_count, 1);
    tu_view_mask(o_mask, p->o.count, &p->o.view, p->o.dims);
    size_t rows = p->ref.batch * p->ref.heads_q * p->ref.seqlen_q;
    memset(lse_mask + p->shape.lse_offset, 1, rows);

    char what[256];
    int ok = 1;
    ok &= tu_compare_o(label, &p->ref, o, &p->o.view, p->ref_o);
    ok &= tu_compare_lse(label, &p->ref, lse + p->shape.lse_offset, p->ref_lse);
    snprintf(what, sizeof what, "%s (O padding/guard)", label);
    ok &= tu_check_untouched(what, o, p->o.host, o_mask, p->o.count);
    snprintf(what, sizeof what, "%s (LSE offset/guard)", label);
    ok &= tu_check_untouched(what, lse, p->lse_host, lse_mask, p->lse_count);
    free(o);
    free(lse);
    free(o_mask);
    free(lse_mask);
    return ok;
}
