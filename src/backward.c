/* flashcl_backward and flashcl_backward_plan_query: the checks, then the family that covers the call. */
#include "backend.h"

flashcl_status flashcl__prepare_backward(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                         const flashcl_tensor *const in[FLASHCL__BACKWARD_VIEWS], cl_mem lse,
                                         size_t lse_offset, cl_uint num_wait, const cl_event *wait_list,
                                         flashcl_attention_desc *d, flashcl_tensor views[FLASHCL__BACKWARD_VIEWS]) {
    flashcl_status st = flashcl__resolve_desc(ctx, desc, d);
    if (st != FLASHCL_SUCCESS) return st;
    const size_t hq = d->heads_q, hk = d->heads_kv, sq = d->seqlen_q, sk = d->seqlen_k;
    const size_t dqk = d->head_dim, dv = d->head_dim_v;
    const flashcl__view_spec specs[FLASHCL__BACKWARD_VIEWS] = {
        {"q", in[FLASHCL__VQ], hq, sq, dqk, 0, 0, 0},    {"k", in[FLASHCL__VK], hk, sk, dqk, 0, 0, 0},
        {"v", in[FLASHCL__VV], hk, sk, dv, 0, 0, 0},     {"o", in[FLASHCL__VO], hq, sq, dv, 0, 0, 0},
        {"dout", in[FLASHCL__VDO], hq, sq, dv, 0, 0, 0}, {"dq", in[FLASHCL__VDQ], hq, sq, dqk, 1, 0, 0},
        {"dk", in[FLASHCL__VDK], hk, sk, dqk, 1, 0, 0},  {"dv", in[FLASHCL__VDV], hk, sk, dv, 1, 0, 0},
    };
    const flashcl__lse_spec lse_spec = {lse, lse_offset, 1, 0};
    st = flashcl__validate_views(ctx, d, specs, FLASHCL__BACKWARD_VIEWS, &lse_spec, num_wait, wait_list, views);
    if (st == FLASHCL_SUCCESS) st = flashcl__validate_variant_buffers(ctx, d, 1, num_wait, wait_list);
    if (st == FLASHCL_SUCCESS)
        st = flashcl__validate_apart(ctx, d, 1, specs, FLASHCL__BACKWARD_VIEWS, views, &lse_spec, NULL);
    return st;
}

flashcl_status flashcl_backward(flashcl_context *ctx, const flashcl_attention_desc *desc, const flashcl_tensor *q,
                                const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                const flashcl_tensor *dout, cl_mem lse, size_t lse_offset, const flashcl_tensor *dq,
                                const flashcl_tensor *dk, const flashcl_tensor *dv, cl_uint num_wait,
                                const cl_event *wait_list, cl_event *event) {
    if (!ctx) return FLASHCL_ERR_INVALID_CONTEXT;
    flashcl__clear_error(ctx);
    if (event) *event = NULL;
    const flashcl_tensor *const in[FLASHCL__BACKWARD_VIEWS] = {q, k, v, o, dout, dq, dk, dv};
    flashcl_attention_desc d;
    flashcl_tensor views[FLASHCL__BACKWARD_VIEWS];
    flashcl_status st = flashcl__prepare_backward(ctx, desc, in, lse, lse_offset, num_wait, wait_list, &d, views);
    if (st != FLASHCL_SUCCESS) return st;
    const flashcl__call call = {&d, views, lse, lse_offset, num_wait, wait_list, event};
    return flashcl__dispatch(ctx, FLASHCL__BACKWARD, &call);
}

flashcl_status flashcl_backward_plan_query(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                           flashcl_plan *out) {
    return flashcl__plan_query(ctx, FLASHCL__BACKWARD, desc, out);
}
