/* One create / forward / backward / standard / destroy round (scenario.h). */
#include "scenario.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward_problem.h"
#include "testutil.h"

static void pause_shim(const cl_shim_api *shim, int paused) {
    if (shim) shim->pause_faults(paused);
}

static int failed(flashcl_context *ctx, flashcl_status st, const char *step, scenario_result *out) {
    if (st == FLASHCL_SUCCESS) return 0;
    out->status = st;
    out->step = step;
    snprintf(out->message, sizeof out->message, "%s", flashcl_last_error(ctx));
    return 1;
}

/* The host-array calls on the problem's packed inputs; checked against the device results' reference. */
static flashcl_status run_host_calls(flashcl_context *ctx, const bw_problem *p, int *ok) {
    const ref_problem *r = &p->fwd.ref;
    size_t nq = r->batch * r->seqlen_q * r->heads_q * r->head_dim;
    size_t nk = r->batch * r->seqlen_k * r->heads_kv * r->head_dim;
    size_t nl = r->batch * r->heads_q * r->seqlen_q;
    float *q = calloc(nq, sizeof *q), *k = calloc(nk, sizeof *k), *v = calloc(nk, sizeof *v);
    float *o = calloc(nq, sizeof *o), *lse = calloc(nl, sizeof *lse), *dout = calloc(nq, sizeof *dout);
    float *dq = calloc(nq, sizeof *dq), *dk = calloc(nk, sizeof *dk), *dv = calloc(nk, sizeof *dv);
    REQUIRE(q && k && v && o && lse && dout && dq && dk && dv);
    tu_rng rng = tu_rng_seed(7);
    for (size_t i = 0; i < nq; ++i) q[i] = tu_rng_float(&rng, -1, 1), dout[i] = tu_rng_float(&rng, -1, 1);
    for (size_t i = 0; i < nk; ++i) k[i] = tu_rng_float(&rng, -1, 1), v[i] = tu_rng_float(&rng, -1, 1);
    flashcl_attention_desc d = p->shape.fwd.desc;
    flashcl_status st = flashcl_forward_host(ctx, &d, q, k, v, o, lse);
    d.path = FLASHCL_PATH_STANDARD;
    if (st == FLASHCL_SUCCESS) st = flashcl_backward_host(ctx, &d, q, k, v, o, dout, lse, dq, dk, dv);
    if (st == FLASHCL_SUCCESS) {
        /* Only finiteness and one known value here; the numbers are the sweeps' job. */
        *ok = 1;
        for (size_t i = 0; i < nq; ++i) *ok &= o[i] == o[i] && dq[i] == dq[i];
        for (size_t i = 0; i < nk; ++i) *ok &= dk[i] == dk[i] && dv[i] == dv[i];
    }
    free(q), free(k), free(v), free(o), free(lse), free(dout), free(dq), free(dk), free(dv);
    return st;
}

/*
 * The variant code paths (cl/variants.cl, src/variants.c): the flash forward
 * with a softcap far above every logit (|s| < 3 here, so softcap*tanh(s/softcap)
 * is s to within 1e-7) must match the plain reference; flashcl_dropout_mask at
 * p = 0.5 must write 0s and 1s, some of each.
 */
static flashcl_status run_variant_calls(flashcl_context *ctx, tu_problem *p, const cl_shim_api *shim, int *ok) {
    cl_command_queue queue = flashcl_context_queue(ctx);
    flashcl_attention_desc d = p->shape.desc;
    d.softcap = 1e4f;
    pause_shim(shim, 1);
    tu_problem_reset_outputs(p, queue);
    pause_shim(shim, 0);
    flashcl_status st = flashcl_forward(ctx, &d, &p->q.view, &p->k.view, &p->v.view, &p->o.view, p->lse,
                                        p->shape.lse_offset, 0, NULL, NULL);
    if (st != FLASHCL_SUCCESS) return st;
    pause_shim(shim, 1);
    *ok = tu_problem_verify(p, queue, NULL, "scenario softcap forward");
    const ref_problem *r = &p->ref;
    size_t n = r->batch * r->heads_q * r->seqlen_q * r->seqlen_k;
    cl_int err;
    cl_mem mask = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE, n, NULL, &err);
    REQUIRE(err == CL_SUCCESS);
    pause_shim(shim, 0);
    d = p->shape.desc;
    d.dropout_p = 0.5f;
    st = flashcl_dropout_mask(ctx, &d, mask, 0, 0, NULL, NULL);
    pause_shim(shim, 1);
    if (st == FLASHCL_SUCCESS) {
        unsigned char *bytes = malloc(n);
        REQUIRE(bytes);
        REQUIRE(clEnqueueReadBuffer(queue, mask, CL_TRUE, 0, n, bytes, 0, NULL, NULL) == CL_SUCCESS);
        size_t kept = 0, bad = 0;
        for (size_t i = 0; i < n; ++i) kept += bytes[i] == 1, bad += bytes[i] > 1;
        if (bad || kept == 0 || kept == n) {
            fprintf(stderr, "FAIL scenario dropout mask: %zu of %zu kept, %zu not 0/1\n", kept, n, bad);
            *ok = 0;
        }
        free(bytes);
    }
    clReleaseMemObject(mask);
    pause_shim(shim, 0);
    return st;
}

/*
 * flashcl_forward_kvcache over the problem's K/V as a full contiguous cache (the plain forward's
 * answer, checked against the same reference), twice: the second call finds its block table and
 * lengths already on the device and writes nothing (src/kvcache_state.c). After a fault in the
 * first, the recovery runs both again: what the context remembers must still be true.
 */
static flashcl_status run_kvcache_calls(flashcl_context *ctx, tu_problem *p, const cl_shim_api *shim, int *ok) {
    cl_command_queue queue = flashcl_context_queue(ctx);
    flashcl_attention_desc d = p->shape.desc;
    flashcl_kv_cache cache = FLASHCL_KV_CACHE_INIT;
    cache.k = p->k.view;
    cache.v = p->v.view;
    cache.capacity = p->ref.seqlen_k;
    *ok = 1;
    for (int call = 0; call < 2; ++call) {
        pause_shim(shim, 1);
        tu_problem_reset_outputs(p, queue);
        pause_shim(shim, 0);
        flashcl_status st = flashcl_forward_kvcache(ctx, &d, &p->q.view, &cache, &p->o.view, p->lse,
                                                    p->shape.lse_offset, 0, NULL, NULL);
        if (st != FLASHCL_SUCCESS) return st;
        pause_shim(shim, 1);
        *ok &= tu_problem_verify(p, queue, NULL, call ? "scenario kvcache, tables reused" : "scenario kvcache");
        pause_shim(shim, 0);
    }
    return FLASHCL_SUCCESS;
}

void scenario_run(const cl_shim_api *shim, scenario_result *out) {
    memset(out, 0, sizeof *out);
    out->status = FLASHCL_SUCCESS;
    flashcl_context *ctx = NULL;
    char err[1024] = "";
    flashcl_status st = flashcl_context_create(&ctx, NULL, err, sizeof err);
    if (st != FLASHCL_SUCCESS) {
        out->status = st;
        out->step = "flashcl_context_create";
        snprintf(out->message, sizeof out->message, "%s", err);
        if (ctx) out->context_created = -1; /* must never happen: *out is NULL on failure */
        return;
    }
    out->context_created = 1;
    cl_command_queue queue = flashcl_context_queue(ctx);

    /* Causal GQA with sq != sk: every kernel family, small enough to be quick. */
    bw_shape shape = bw_shape_make(1, 2, 1, 5, 9, 8, 1, TU_BSHD);
    bw_problem p;
    pause_shim(shim, 1);
    bw_problem_init(&p, flashcl_context_cl_context(ctx), &shape);
    bw_grads std_grads;
    bw_grads_init(&std_grads, flashcl_context_cl_context(ctx), &p);
    pause_shim(shim, 0);

    int ok = 1, host_ok = 0;
    /* Setting the queue it already has: the queue checks run, nothing changes. */
    if (failed(ctx, flashcl_context_set_queue(ctx, queue), "flashcl_context_set_queue", out)) goto recover;
    if (failed(ctx, bw_problem_forward(ctx, &p, NULL), "flashcl_forward", out)) goto recover;
    if (failed(ctx, bw_problem_backward(ctx, &p, FLASHCL_PATH_FLASH, &p.grads, 0, NULL, NULL), "flashcl_backward", out))
        goto recover;
    if (failed(ctx, bw_problem_backward(ctx, &p, FLASHCL_PATH_STANDARD, &std_grads, 0, NULL, NULL),
               "flashcl_standard_backward", out))
        goto recover;
    pause_shim(shim, 1);
    ok &= tu_problem_verify(&p.fwd, queue, NULL, "scenario flash forward");
    ok &= bw_grads_verify(&p, &p.grads, queue, NULL, "scenario flash backward");
    ok &= bw_grads_verify(&p, &std_grads, queue, NULL, "scenario standard backward");
    tu_problem_reset_outputs(&p.fwd, queue);
    pause_shim(shim, 0);
    if (failed(ctx, tu_problem_run(ctx, &p.fwd, FLASHCL_PATH_STANDARD, 0, NULL, NULL), "flashcl_standard_forward", out))
        goto recover;
    pause_shim(shim, 1);
    ok &= tu_problem_verify(&p.fwd, queue, NULL, "scenario standard forward");
    pause_shim(shim, 0);
    if (failed(ctx, run_host_calls(ctx, &p, &host_ok), "flashcl_forward_host/backward_host", out)) goto recover;
    int variant_ok = 0;
    if (failed(ctx, run_variant_calls(ctx, &p.fwd, shim, &variant_ok), "variant forward/flashcl_dropout_mask", out))
        goto recover;
    int kv_ok = 0;
    if (failed(ctx, run_kvcache_calls(ctx, &p.fwd, shim, &kv_ok), "flashcl_forward_kvcache", out)) goto recover;
    out->results_ok = ok && host_ok && variant_ok && kv_ok;
    goto done;

recover:
    /* The failure is gone (the test disarms it first); the same context must work. */
    if (shim) shim->set_fault(NULL, 0, 0);
    pause_shim(shim, 1);
    tu_problem_reset_outputs(&p.fwd, queue);
    pause_shim(shim, 0);
    st = tu_problem_run(ctx, &p.fwd, FLASHCL_PATH_FLASH, 0, NULL, NULL);
    pause_shim(shim, 1);
    out->context_reusable = st == FLASHCL_SUCCESS && tu_problem_verify(&p.fwd, queue, NULL, "forward after a fault");
    pause_shim(shim, 0);
    int kv_after = 0;
    out->context_reusable &= run_kvcache_calls(ctx, &p.fwd, shim, &kv_after) == FLASHCL_SUCCESS && kv_after;
done:
    pause_shim(shim, 1);
    clFinish(queue);
    bw_grads_release(&std_grads);
    bw_problem_free(&p);
    pause_shim(shim, 0);
    flashcl_context_destroy(ctx);
}
