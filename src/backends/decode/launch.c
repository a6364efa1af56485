/* Launches of the decode family: the split-KV attention kernel, then (with several splits) the merge. */
#include "decode.h"

/* The partials of a split call: [split][batch][heads_q][max_seqlen_q] rows of `pitch` floats, and their LSE. */
typedef struct partials {
    cl_mem o, lse, counts; /* counts: the fused merge's (plan->fused_merge), else NULL */
    size_t pitch, rows_per_state;
} partials;

static flashcl_status alloc_partials(flashcl_context *ctx, const flashcl_attention_desc *d,
                                     const flashcl__decode_plan *plan, int splits, partials *p) {
    p->pitch = (d->head_dim_v + 15) / 16 * 16;
    p->rows_per_state = d->batch * d->heads_q * d->max_seqlen_q;
    const size_t rows = (size_t)splits * p->rows_per_state;
    flashcl_status st = flashcl__scratch(ctx, FLASHCL__SCRATCH_SCORES, rows * p->pitch * sizeof(float),
                                         "decode: partial O of the splits", &p->o);
    if (st == FLASHCL_SUCCESS)
        st = flashcl__scratch(ctx, FLASHCL__SCRATCH_SCORES2, rows * sizeof(float), "decode: partial LSE of the splits",
                              &p->lse);
    if (st == FLASHCL_SUCCESS && plan->fused_merge)
        st = flashcl__scratch_zeroed(ctx, FLASHCL__SCRATCH_DECODE_COUNTS,
                                     flashcl__decode_merge_counts(d, plan) * sizeof(cl_int),
                                     "decode: the split counts of the fused merge", &p->counts);
    return st;
}

int flashcl__decode_rows_aligned(const flashcl_tensor *t, size_t elem) {
    return ((t->offset | t->stride_batch | t->stride_head | t->stride_row) * elem) % 16 == 0;
}

/* Whether both K and V rows start on 16 bytes (the kernel then loads whole vectors as such). */
static int keys_aligned(const flashcl_attention_desc *d, const flashcl__decode_keys *keys) {
    const size_t elem = keys->dtype == FLASHCL_CACHE_DTYPE_SAME ? flashcl_dtype_size(d->dtype) : 1;
    return flashcl__decode_rows_aligned(keys->k, elem) && flashcl__decode_rows_aligned(keys->v, elem);
}

/* The K or V side of the attention kernel's arguments: buffer, offset, page/batch, head and row strides. */
static void arg_keys(flashcl__args *a, const flashcl_tensor *t) {
    flashcl__arg_mem(a, t->buffer);
    flashcl__arg_ulong(a, t->offset);
    flashcl__arg_ulong(a, t->stride_batch);
    flashcl__arg_ulong(a, t->stride_head);
    flashcl__arg_ulong(a, t->stride_row);
}

flashcl_status flashcl__decode_enqueue(flashcl_context *ctx, flashcl__chain *chain, int after,
                                       const flashcl_attention_desc *d, const flashcl_tensor *q,
                                       const flashcl__decode_keys *keys, const flashcl_tensor *o, cl_mem lse,
                                       size_t lse_offset, int *last) {
    const flashcl__decode_plan *plan = NULL;
    flashcl_status st = flashcl__decode_plan_for(ctx, d, keys->paged, keys->dtype, keys_aligned(d, keys), &plan);
    if (st != FLASHCL_SUCCESS) return st;
    const int splits = flashcl__decode_splits(ctx, d, plan, keys->max_seqlen_k);
    const int group = (int)(d->heads_q / d->heads_kv);
    const int packed = group * (int)d->max_seqlen_q, row_blocks = (packed + plan->rows - 1) / plan->rows;
    partials parts = {NULL, NULL, NULL, 0, 0};
    if (splits > 1) {
        st = alloc_partials(ctx, d, plan, splits, &parts);
        if (st != FLASHCL_SUCCESS) return st;
    }
    /* Q's buffer stands in for the arguments a build never reads (no pages, no fp8, no partials). */
    const cl_mem dummy = q->buffer;
    flashcl__args a = flashcl__args_for(plan->attend, plan->pub.kernel);
    flashcl__arg_view(&a, q);
    arg_keys(&a, keys->k);
    arg_keys(&a, keys->v);
    flashcl__arg_view(&a, o);
    flashcl__arg_mem(&a, lse ? lse : dummy);
    flashcl__arg_ulong(&a, lse_offset);
    flashcl__arg_int(&a, lse != NULL);
    flashcl__arg_mem(&a, parts.o ? parts.o : dummy);
    flashcl__arg_mem(&a, parts.lse ? parts.lse : dummy);
    flashcl__arg_int(&a, splits > 1);
    flashcl__arg_int(&a, (cl_int)d->max_seqlen_q);
    flashcl__arg_mem(&a, keys->table ? keys->table : dummy);
    flashcl__arg_int(&a, keys->max_pages);
    flashcl__arg(&a, sizeof(cl_long), &(cl_long){(cl_long)keys->page_size});
    flashcl__arg_mem(&a, keys->seqinfo ? keys->seqinfo : dummy);
    flashcl__arg_mem(&a, keys->k_scale ? keys->k_scale : dummy);
    flashcl__arg_mem(&a, keys->v_scale ? keys->v_scale : dummy);
    flashcl__arg_int(&a, keys->scale_per_head);
    flashcl__arg_int(&a, (cl_int)d->seqlen_q);
    flashcl__arg_int(&a, (cl_int)d->seqlen_k);
    flashcl__arg_int(&a, (cl_int)d->heads_q);
    flashcl__arg_int(&a, group);
    flashcl__arg_int(&a, splits);
    flashcl__arg_int(&a, row_blocks);
    const int heads = flashcl__decode_heads(d, plan);
    flashcl__arg_int(&a, heads);
    flashcl__arg_float(&a, (cl_float)(d->scale * FLASHCL__LOG2E));
    flashcl__arg_variants(&a, d, dummy);
    if (!plan->cpu) flashcl__arg_mem(&a, parts.counts ? parts.counts : dummy); /* the GPU kernel's last */
    st = flashcl__args_check(ctx, &a);
    if (st != FLASHCL_SUCCESS) return st;
    const size_t wg = plan->wg;
    const size_t global[3] = {(size_t)row_blocks * (size_t)splits * wg, d->heads_kv / (size_t)heads, d->batch},
                 local[3] = {wg, 1, 1};
    *last = flashcl__chain_launch(chain, plan->attend, plan->pub.kernel, 3, global, local, after);
    if (splits == 1 || plan->fused_merge) return chain->status;

    /* The partials are views of state s: row (b, h, i) at ((s*B + b)*hq + h)*msq + i. */
    const size_t msq = d->max_seqlen_q, hq = d->heads_q;
    flashcl__args m = flashcl__args_for(plan->merge, "flash_merge");
    flashcl__arg_mem(&m, parts.o);
    flashcl__arg_ulong(&m, 0);
    flashcl__arg_ulong(&m, hq * msq * parts.pitch);
    flashcl__arg_ulong(&m, msq * parts.pitch);
    flashcl__arg_ulong(&m, parts.pitch);
    flashcl__arg_ulong(&m, parts.rows_per_state * parts.pitch);
    flashcl__arg_mem(&m, parts.lse);
    flashcl__arg_ulong(&m, 0);
    flashcl__arg_ulong(&m, hq * msq);
    flashcl__arg_ulong(&m, msq);
    flashcl__arg_ulong(&m, parts.rows_per_state);
    flashcl__arg_view(&m, o);
    flashcl__arg_mem(&m, lse ? lse : dummy);
    flashcl__arg_ulong(&m, lse_offset);
    flashcl__arg_int(&m, lse != NULL);
    flashcl__arg_int(&m, splits);
    flashcl__arg_int(&m, (cl_int)d->seqlen_q);
    flashcl__arg_int(&m, (cl_int)d->seqlen_k);
    flashcl__arg_int(&m, (cl_int)d->heads_q);
    flashcl__arg_variants(&m, d, dummy);
    st = flashcl__args_check(ctx, &m);
    if (st != FLASHCL_SUCCESS) return st;
    const size_t dv4 = (d->head_dim_v + 3) / 4, items = msq * dv4;
    const size_t mglobal[3] = {(items + 63) / 64 * 64, d->heads_q, d->batch}, mlocal[3] = {64, 1, 1};
    *last = flashcl__chain_launch(chain, plan->merge, "flash_merge", 3, mglobal, mlocal, *last);
    return chain->status;
}

flashcl_status flashcl__decode_forward(flashcl_context *ctx, const flashcl__call *call) {
    const flashcl_attention_desc *d = call->d;
    const flashcl_tensor *views = call->views;
    const flashcl__decode_keys keys = {0,
                                       FLASHCL_CACHE_DTYPE_SAME,
                                       &views[FLASHCL__VK],
                                       &views[FLASHCL__VV],
                                       NULL,
                                       NULL,
                                       1,
                                       0,
                                       d->max_seqlen_k,
                                       NULL,
                                       NULL,
                                       0};
    /* Plan first: the split count says whether the call uses scratch (and so waits for its last user). */
    const flashcl__decode_plan *plan = NULL;
    flashcl_status st = flashcl__decode_plan_for(ctx, d, 0, FLASHCL_CACHE_DTYPE_SAME, keys_aligned(d, &keys), &plan);
    if (st != FLASHCL_SUCCESS) return st;
    const int splits = flashcl__decode_splits(ctx, d, plan, keys.max_seqlen_k);
    flashcl__chain chain;
    st = flashcl__chain_begin(&chain, ctx, call->num_wait, call->wait_list, splits > 1);
    if (st != FLASHCL_SUCCESS) return st;
    int last = -1;
    st = flashcl__decode_enqueue(ctx, &chain, FLASHCL__AFTER_START, d, &views[FLASHCL__VQ], &keys, &views[FLASHCL__VO],
                                 call->lse, call->lse_offset, &last);
    if (st != FLASHCL_SUCCESS) return flashcl__chain_abort(&chain, st);
    return flashcl__chain_end(&chain, 1, &last, call->event);
}
