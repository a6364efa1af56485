/*
 * The smallest complete FlashCL program: attention over OpenCL buffers in the
 * FlashAttention layout [batch, seqlen, heads, head_dim], with GQA and a
 * causal mask, on whatever device FlashCL picks (FLASHCL_DEVICE to choose).
 * Built with the project and run by CTest, so the README's example stays true.
 */
#include <flashcl.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    enum { B = 2, SQ = 100, SK = 120, HQ = 8, HKV = 2, D = 64 };
    char err[512];
    flashcl_context *ctx = NULL;
    flashcl_status st = flashcl_context_create(&ctx, NULL, err, sizeof err);
    if (st != FLASHCL_SUCCESS) {
        fprintf(stderr, "%s: %s\n", flashcl_status_name(st), err);
        return st == FLASHCL_ERR_NO_DEVICE ? 77 : 1;
    }

    /* Inputs on the host, then in device buffers of the context. */
    size_t nq = (size_t)B * SQ * HQ * D, nk = (size_t)B * SK * HKV * D, nl = (size_t)B * HQ * SQ;
    float *q = malloc(nq * sizeof *q), *k = malloc(nk * sizeof *k), *v = malloc(nk * sizeof *v);
    float *o = malloc(nq * sizeof *o), *lse = malloc(nl * sizeof *lse);
    for (size_t i = 0; i < nq; ++i) q[i] = sinf((float)i);
    for (size_t i = 0; i < nk; ++i) k[i] = cosf((float)i), v[i] = sinf(0.5f * (float)i);

    cl_context cl = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    cl_int e = CL_SUCCESS;
    cl_mem qb = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nq * 4, q, &e);
    cl_mem kb = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nk * 4, k, &e);
    cl_mem vb = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nk * 4, v, &e);
    cl_mem ob = clCreateBuffer(cl, CL_MEM_WRITE_ONLY, nq * 4, NULL, &e);
    cl_mem lb = clCreateBuffer(cl, CL_MEM_WRITE_ONLY, nl * 4, NULL, &e);

    /* One descriptor; zero fields are defaults (scale 1/sqrt(d), seqlen_k = seqlen_q ...). */
    flashcl_attention_desc desc = FLASHCL_ATTENTION_DESC_INIT;
    desc.batch = B;
    desc.heads_q = HQ;
    desc.heads_kv = HKV; /* 4 query heads share each K/V head */
    desc.seqlen_q = SQ;
    desc.seqlen_k = SK;
    desc.head_dim = D;
    desc.causal = 1; /* bottom-right aligned, as FlashAttention 2.1+ */

    flashcl_tensor tq = flashcl_tensor_bshd(qb, SQ, HQ, D);
    flashcl_tensor tk = flashcl_tensor_bshd(kb, SK, HKV, D);
    flashcl_tensor tv = flashcl_tensor_bshd(vb, SK, HKV, D);
    flashcl_tensor to = flashcl_tensor_bshd(ob, SQ, HQ, D);

    cl_event done = NULL;
    st = flashcl_forward(ctx, &desc, &tq, &tk, &tv, &to, lb, 0, 0, NULL, &done);
    if (st != FLASHCL_SUCCESS) {
        fprintf(stderr, "%s: %s\n", flashcl_status_name(st), flashcl_last_error(ctx));
        return 1;
    }
    clEnqueueReadBuffer(queue, ob, CL_TRUE, 0, nq * 4, o, 1, &done, NULL);
    clEnqueueReadBuffer(queue, lb, CL_TRUE, 0, nl * 4, lse, 1, &done, NULL);
    clReleaseEvent(done);

    flashcl_plan plan;
    flashcl_plan_query(ctx, &desc, &plan);
    printf("ran %s (Br=%d, Bc=%d, %zu work-items): O[0,0,0,0]=%.6f LSE[0,0,0]=%.6f\n", plan.kernel, plan.block_rows,
           plan.block_cols, plan.work_group_size, o[0], lse[0]);

    int ok = isfinite(o[0]) && isfinite(lse[0]);
    clReleaseMemObject(qb), clReleaseMemObject(kb), clReleaseMemObject(vb);
    clReleaseMemObject(ob), clReleaseMemObject(lb);
    flashcl_context_destroy(ctx);
    free(q), free(k), free(v), free(o), free(lse);
    return ok ? 0 : 1;
}
