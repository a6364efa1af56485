#include "backward_problem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grad_check.h"

bw_shape bw_shape_make(size_t batch, size_t heads_q, size_t heads_kv, size_t seqlen_q, size_t seqlen_k, size_t head_dim,
                       int causal, tu_layout layout) {
    bw_shape s;
    s.fwd = tu_shape_make(batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, layout);
    s.layout_dout = s.layout_dq = s.layout_dk = s.layout_dv = layout;
    return s;
}

void bw_shape_describe(const bw_shape *shape, char *buf, size_t size) {
    char fwd[256];
    tu_shape_describe(&shape->fwd, fwd, sizeof fwd);
    snprintf(buf, size, "%s grads=%s/%s/%s/%s", fwd, tu_layout_name(shape->layout_dout),
             tu_layout_name(shape->layout_dq), tu_layout_name(shape->layout_dk), tu_layout_name(shape->layout_dv));
}

static tu_dims q_dims(const ref_problem *r) {
    tu_dims d = {r->batch, r->heads_q, r->seqlen_q, r->head_dim};
    return d;
}

static tu_dims kv_dims(const ref_problem *r) {
    tu_dims d = {r->batch, r->heads_kv, r->seqlen_k, r->head_dim};
    return d;
}

static double *alloc_doubles(size_t n) {
    double *p = calloc(n ? n : 1, sizeof *p);
    REQUIRE(p != NULL);
    return p;
}

void bw_grads_init(bw_grads *g, cl_context cl_ctx, const bw_problem *p) {
    const ref_problem *r = &p->fwd.ref;
    /* Guards on both sides: a write before or after a view changes a sentinel. */
    tu_buffer_init(&g->dq, cl_ctx, p->shape.layout_dq, q_dims(r), TU_GUARD, TU_GUARD, NULL, 0, 0);
    tu_buffer_init(&g->dk, cl_ctx, p->shape.layout_dk, kv_dims(r), TU_GUARD, TU_GUARD, NULL, 0, 0);
    tu_buffer_init(&g->dv, cl_ctx, p->shape.layout_dv, kv_dims(r), TU_GUARD, TU_GUARD, NULL, 0, 0);
}

void bw_grads_release(bw_grads *g) {
    tu_buffer_release(&g->dq);
    tu_buffer_release(&g->dk);
    tu_buffer_release(&g->dv);
}

void bw_problem_init(bw_problem *p, cl_context cl_ctx, const bw_shape *shape) {
    memset(p, 0, sizeof *p);
    p->shape = *shape;
    tu_problem_init(&p->fwd, cl_ctx, &shape->fwd);
    const ref_problem *r = &p->fwd.ref;
    /* Its own stream, so dO does not repeat Q's values. Exactly sized, like
     * the other inputs, so an over-read runs off the buffer. */
    tu_rng rng = tu_rng_seed(shape->fwd.seed ^ 0xd0d0d0d0u);
    tu_buffer_init(&p->dout, cl_ctx, shape->layout_dout, q_dims(r), 0, 0, &rng, -1.0f, 1.0f);
    bw_grads_init(&p->grads, cl_ctx, p);

    size_t nq = r->batch * r->heads_q * r->seqlen_q * r->head_dim;
    size_t nk = r->batch * r->heads_kv * r->seqlen_k * r->head_dim;
    p->ref_dq = alloc_doubles(nq);
    p->ref_dk = alloc_doubles(nk);
    p->ref_dv = alloc_doubles(nk);
    ref_attention_backward(r, p->fwd.q.host, &p->fwd.q.view, p->fwd.k.host, &p->fwd.k.view, p->fwd.v.host,
                           &p->fwd.v.view, p->dout.host, &p->dout.view, p->ref_dq, p->ref_dk, p->ref_dv);
}

void bw_problem_free(bw_problem *p) {
    tu_problem_free(&p->fwd);
    tu_buffer_release(&p->dout);
    bw_grads_release(&p->grads);
    free(p->ref_dq);
    free(p->ref_dk);
    free(p->ref_dv);
    memset(p, 0, sizeof *p);
}

flashcl_status bw_problem_forward(flashcl_context *ctx, bw_problem *p, cl_event *event) {
    return tu_problem_run(ctx, &p->fwd, FLASHCL_PATH_FLASH, 0, NULL, event);
}

flashcl_status bw_problem_backward(flashcl_context *ctx, const bw_problem *p, flashcl_path path, const bw_grads *out,
                                   cl_uint num_wait, const cl_event *wait, cl_event *event) {
    const tu_problem *f = &p->fwd;
    flashcl_attention_desc d = f->shape.desc;
    d.path = path;
    return flashcl_backward(ctx, &d, &f->q.view, &f->k.view, &f->v.view, &f->o.view, &p->dout.view, f->lse,
                            f->shape.lse_offset, &out->dq.view, &out->dk.view, &out->dv.view, num_wait, wait, event);
}

void bw_grads_read(const bw_grads *g, cl_command_queue queue, cl_event after, float *host[3]) {
    const tu_buffer *all[3] = {&g->dq, &g->dk, &g->dv};
    for (int i = 0; i < 3; i++) {
        host[i] = malloc(all[i]->count * sizeof(float));
        REQUIRE(host[i] != NULL);
        tu_buffer_read(queue, all[i]->view.buffer, all[i]->count, host[i], after);
    }
}

int bw_grads_verify(const bw_problem *p, const bw_grads *g, cl_command_queue queue, cl_event after, const char *label) {
    static const char *names[3] = {"dq", "dk", "dv"};
    const tu_buffer *all[3] = {&g->dq, &g->dk, &g->dv};
    const double *refs[3] = {p->ref_dq, p->ref_dk, p->ref_dv};
    float *host[3];
    bw_grads_read(g, queue, after, host);
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        const tu_buffer *t = all[i];
        ok &= grad_compare(label, names[i], host[i], &t->view, t->dims, refs[i], GRAD_ABS_TOL, GRAD_REL_TOL);
        unsigned char *mask = calloc(t->count, 1);
        REQUIRE(mask != NULL);
        tu_view_mask(mask, t->count, &t->view, t->dims);
        char what[400];
        snprintf(what, sizeof what, "%s (%s outside the view)", label, names[i]);
        ok &= tu_check_untouched(what, host[i], t->host, mask, t->count);
        free(mask);
    }
    /* Rows that see no key (causal, sq > sk) have P = 0: their dQ is exactly 0,
     * not merely small, and in particular not NaN from exp(-inf - -inf). */
    const ref_problem *r = &p->fwd.ref;
    size_t masked = 0;
    while (masked < r->seqlen_q && ref_visible_keys(r, masked) == 0) masked++;
    if (masked) ok &= grad_rows_zero(label, "dq", host[0], &g->dq.view, g->dq.dims, masked);
    for (int i = 0; i < 3; i++) free(host[i]);
    return ok;
}

int bw_grads_same_bits(const bw_grads *a, const bw_grads *b, cl_command_queue queue, const char *label) {
    static const char *names[3] = {"dq", "dk", "dv"};
    const tu_buffer *as[3] = {&a->dq, &a->dk, &a->dv}, *bs[3] = {&b->dq, &b->dk, &b->dv};
    float *ha[3], *hb[3];
    bw_grads_read(a, queue, NULL, ha);
    bw_grads_read(b, queue, NULL, hb);
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        REQUIRE(as[i]->count == bs[i]->count);
        if (memcmp(ha[i], hb[i], as[i]->count * sizeof(float)) != 0) {
            size_t at = 0;
            while (memcmp(&ha[i][at], &hb[i][at], sizeof(float)) == 0) at++;
            fprintf(stderr,
                    "FAIL %s: %s differs between two identical runs; first at buffer "
                    "index %zu: %.9g vs %.9g\n",
                    label, names[i], at, (double)ha[i][at], (double)hb[i][at]);
            tu_fail_count();
            ok = 0;
        }
        free(ha[i]);
        free(hb[i]);
    }
    return ok;
}
