/* The backward kernels' shared argument lists (see backward_args.h). */
#include "backward_args.h"

/* Bound for the buffers of variants that are off (never read); Q is never written. */
static cl_mem dummy_of(const flashcl__call *call) { return call->views[FLASHCL__VQ].buffer; }

void flashcl__arg_bwd_dot(flashcl__args *a, const flashcl__call *call, cl_mem dsum) {
    static const int dot_views[] = {FLASHCL__VDO, FLASHCL__VO};
    const flashcl_attention_desc *d = call->d;
    flashcl__arg_views(a, call->views, dot_views, 2);
    flashcl__arg_mem(a, dsum);
    flashcl__arg_int(a, (cl_int)d->seqlen_q);
    flashcl__arg_int(a, (cl_int)d->seqlen_k);
    flashcl__arg_int(a, (cl_int)d->heads_q);
    flashcl__arg_variants(a, d, dummy_of(call));
}

void flashcl__arg_bwd_main(flashcl__args *a, const flashcl__call *call, cl_mem dsum, int dq) {
    static const int in_views[] = {FLASHCL__VQ, FLASHCL__VK, FLASHCL__VV, FLASHCL__VDO};
    static const int dkdv_out[] = {FLASHCL__VDK, FLASHCL__VDV}, dq_out[] = {FLASHCL__VDQ};
    flashcl__arg_views(a, call->views, in_views, 4);
    flashcl__arg_mem(a, call->lse);
    flashcl__arg_ulong(a, call->lse_offset);
    flashcl__arg_mem(a, dsum);
    if (dq)
        flashcl__arg_views(a, call->views, dq_out, 1);
    else
        flashcl__arg_views(a, call->views, dkdv_out, 2);
    flashcl__arg_backward_sizes(a, call->d);
}

flashcl_status flashcl__bwd_dsum(flashcl_context *ctx, const flashcl_attention_desc *d, cl_mem *dsum) {
    return flashcl__scratch(ctx, FLASHCL__SCRATCH_ROWS, flashcl__row_count(d) * sizeof(float),
                            "backward: D = rowsum(dO*O)", dsum);
}

size_t flashcl__bwd_dsum_scratch_bytes(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d) {
    (void)ctx;
    return pass == FLASHCL__FORWARD ? 0 : flashcl__row_count(d) * sizeof(float);
}

static void arg_bwd_dsinks(flashcl__args *a, const flashcl__call *call, cl_mem dsum) {
    const flashcl_attention_desc *d = call->d;
    flashcl__arg_mem(a, call->lse);
    flashcl__arg_ulong(a, call->lse_offset);
    flashcl__arg_mem(a, dsum);
    flashcl__arg_mem(a, d->dsinks);
    flashcl__arg_ulong(a, d->dsinks_offset);
    flashcl__arg_int(a, (cl_int)d->batch);
    flashcl__arg_int(a, (cl_int)d->seqlen_q);
    flashcl__arg_int(a, (cl_int)d->seqlen_k);
    flashcl__arg_int(a, (cl_int)d->heads_q);
    flashcl__arg_variants(a, d, dummy_of(call));
}

flashcl_status flashcl__bwd_dsinks_args(flashcl_context *ctx, cl_kernel dsinks, const flashcl__call *call,
                                        cl_mem dsum) {
    flashcl__args a = flashcl__args_for(dsinks, "flash_bwd_dsinks");
    arg_bwd_dsinks(&a, call, dsum);
    return flashcl__args_check(ctx, &a);
}
