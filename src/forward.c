/* flashcl_forward and flashcl_plan_query: the checks, then the family that covers the call (src/dispatch.c). */
#include "backend.h"

flashcl_status flashcl__prepare_forward(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                        const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                        const flashcl_tensor *o, cl_mem lse, size_t lse_offset, cl_uint num_wait,
                                        const cl_event *wait_list, flashcl_attention_desc *d,
                                        flashcl_tensor views[FLASHCL__FORWARD_VIEWS]) {
    flashcl_status st = flashcl__resolve_desc(ctx, desc, d);
    if (st != FLASHCL_SUCCESS) return st;
    return flashcl__validate_call(ctx, d, q, k, v, o, lse, lse_offset, num_wait, wait_list, views);
}

flashcl_status flashcl_forward(flashcl_context *ctx, const flashcl_attention_desc *desc, const flashcl_tensor *q,
                               const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o, cl_mem lse,
                               size_t lse_offset, cl_uint num_wait, const cl_event *wait_list, cl_event *event) {
    if (!ctx) return FLASHCL_ERR_INVALID_CONTEXT;
    flashcl__clear_error(ctx);
    if (event) *event = NULL;
    flashcl_attention_desc d;
    flashcl_tensor views[FLASHCL__FORWARD_VIEWS];
    flashcl_status st =
        flashcl__prepare_forward(ctx, desc, q, k, v, o, lse, lse_offset, num_wait, wait_list, &d, views);
    if (st != FLASHCL_SUCCESS) return st;
    const flashcl__call call = {&d, views, lse, lse_offset, num_wait, wait_list, event};
    return flashcl__dispatch(ctx, FLASHCL__FORWARD, &call);
}

flashcl_status flashcl_plan_query(flashcl_context *ctx, const flashcl_attention_desc *desc, flashcl_plan *out) {
    return flashcl__plan_query(ctx, FLASHCL__FORWARD, desc, out);
}
