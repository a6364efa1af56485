/* The standard forward: S = scale*QK^T, softmax, O = PV through global memory, three launches in a chain. */
#include "standard.h"
#include "../../launch.h"

#include <stdint.h>

flashcl_status flashcl__standard_forward(flashcl_context *ctx, const flashcl__call *call) {
    const flashcl_attention_desc *d = call->d;
    const flashcl_tensor *views = call->views;
    flashcl_status st = flashcl__require_plain(ctx, d, "standard path");
    if (st != FLASHCL_SUCCESS) return st;
    const flashcl__standard_plan *plan = NULL;
    st = flashcl__plan_standard(ctx, &plan);
    if (st != FLASHCL_SUCCESS) return st;
    flashcl__standard_sizes n;
    st = flashcl__standard_scratch_sizes(ctx, d, 0, &n);
    if (st != FLASHCL_SUCCESS) return st;
    const size_t rows = d->batch * d->heads_q * d->seqlen_q;
    cl_mem s = NULL;
    st = flashcl__scratch(ctx, FLASHCL__SCRATCH_SCORES, n.scores * sizeof(float),
                          "standard path: S/P (batch*heads_q*seqlen_q*seqlen_k floats)", &s);
    if (st != FLASHCL_SUCCESS) return st;
    const cl_int sq = (cl_int)d->seqlen_q, sk = (cl_int)d->seqlen_k, dim = (cl_int)d->head_dim, hq = (cl_int)d->heads_q;
    const cl_int group = (cl_int)(d->heads_q / d->heads_kv);

    flashcl__args scores = flashcl__args_for(plan->scores, "std_scores");
    flashcl__arg_view(&scores, &views[FLASHCL__VQ]);
    flashcl__arg_view(&scores, &views[FLASHCL__VK]);
    flashcl__arg_mem(&scores, s);
    flashcl__arg_int(&scores, sq);
    flashcl__arg_int(&scores, sk);
    flashcl__arg_int(&scores, dim);
    flashcl__arg_int(&scores, hq);
    flashcl__arg_int(&scores, group);
    flashcl__arg_float(&scores, d->scale);
    flashcl__arg_int(&scores, d->causal != 0);
    flashcl__args softmax = flashcl__args_for(plan->softmax, "std_softmax");
    flashcl__arg_mem(&softmax, s);
    flashcl__arg_int(&softmax, sk);
    flashcl__arg_mem(&softmax, call->lse ? call->lse : views[FLASHCL__VQ].buffer);
    flashcl__arg_ulong(&softmax, call->lse_offset);
    flashcl__arg_int(&softmax, call->lse != NULL);
    flashcl__args pv = flashcl__args_for(plan->pv, "std_pv");
    flashcl__arg_mem(&pv, s);
    flashcl__arg_view(&pv, &views[FLASHCL__VV]);
    flashcl__arg_view(&pv, &views[FLASHCL__VO]);
    flashcl__arg_int(&pv, sq);
    flashcl__arg_int(&pv, sk);
    flashcl__arg_int(&pv, dim);
    flashcl__arg_int(&pv, hq);
    flashcl__arg_int(&pv, group);
    flashcl__arg_float(&pv, 1.0f);
    st = flashcl__args_check(ctx, &scores);
    if (st == FLASHCL_SUCCESS) st = flashcl__args_check(ctx, &softmax);
    if (st == FLASHCL_SUCCESS) st = flashcl__args_check(ctx, &pv);
    if (st != FLASHCL_SUCCESS) return st;

    const size_t tile = (size_t)plan->tile, rts = (size_t)(plan->tile / plan->wpt), z = d->batch * d->heads_q;
    const size_t g1[3] = {(d->seqlen_k + tile - 1) / tile * rts, (d->seqlen_q + tile - 1) / tile * rts, z};
    const size_t l1[3] = {rts, rts, 1};
    const size_t g2[1] = {rows * (size_t)plan->softmax_wg}, l2[1] = {(size_t)plan->softmax_wg};
    const size_t g3[3] = {(d->head_dim + tile - 1) / tile * rts, (d->seqlen_q + tile - 1) / tile * rts, z};
    /* The first launch waits for the caller's events and for the previous user of the scratch. */
    flashcl__chain chain;
    st = flashcl__chain_begin(&chain, ctx, call->num_wait, call->wait_list, 1);
    if (st != FLASHCL_SUCCESS) return st;
    int last = flashcl__chain_launch(&chain, plan->scores, "std_scores", 3, g1, l1, FLASHCL__AFTER_START);
    last = flashcl__chain_launch(&chain, plan->softmax, "std_softmax", 1, g2, l2, last);
    last = flashcl__chain_launch(&chain, plan->pv, "std_pv", 3, g3, l1, last);
    return flashcl__chain_end(&chain, 1, &last, call->event);
}
