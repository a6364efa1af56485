/*
 * flashcl_forward_kvcache's state in a context (see kvcache_state.h).
 *
 * Why host copies: a per-call buffer created from the caller's arrays costs an
 * allocation and a synchronous copy each decode step (on the H200 it made the
 * call ~0.1 ms slower than the attention kernel alone). Instead each call
 * copies its tables into a fresh host block, writes that to two scratch slots
 * with non-blocking writes and frees the block from the second write's
 * completion callback: nothing waits on the host (a wait could deadlock behind
 * the caller's user events), and the caller's arrays are free on return. The
 * device copies need no such care: the chain waits for the scratch's last user
 * before writing them.
 */
#include "kvcache_state.h"
#include "backend.h"

#include <stdlib.h>
#include <string.h>

typedef struct kv_kernels {
    char key[400];
    cl_kernel append, rotate;
    struct kv_kernels *next;
} kv_kernels;

typedef struct kv_state {
    cl_mem unit_scale;
    kv_kernels *kernels;
} kv_state;

static kv_state *state_of(flashcl_context *ctx) {
    if (!ctx->family[FLASHCL__FAMILY_KVCACHE]) ctx->family[FLASHCL__FAMILY_KVCACHE] = calloc(1, sizeof(kv_state));
    return ctx->family[FLASHCL__FAMILY_KVCACHE];
}

static void CL_CALLBACK free_host_copy(cl_event event, cl_int status, void *copy) {
    (void)event;
    (void)status;
    free(copy);
}

flashcl_status flashcl__kv_upload_tables(flashcl_context *ctx, flashcl__chain *chain, const int32_t *table,
                                         size_t table_count, const int32_t *seqinfo, size_t seqinfo_count, int after,
                                         cl_mem *table_buf, cl_mem *seqinfo_buf, int *last) {
    flashcl_status st = flashcl__scratch(ctx, FLASHCL__SCRATCH_KV_TABLE, table_count * sizeof *table,
                                         "kvcache: the block table", table_buf);
    if (st == FLASHCL_SUCCESS)
        st = flashcl__scratch(ctx, FLASHCL__SCRATCH_KV_SEQINFO, seqinfo_count * sizeof *seqinfo,
                              "kvcache: the sequence lengths", seqinfo_buf);
    if (st != FLASHCL_SUCCESS) return st;
    int32_t *copy = malloc((table_count + seqinfo_count) * sizeof *copy);
    if (!copy) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for the block table");
    memcpy(copy, table, table_count * sizeof *table);
    memcpy(copy + table_count, seqinfo, seqinfo_count * sizeof *seqinfo);
    const int first = flashcl__chain_write(chain, *table_buf, table_count * sizeof *table, copy, after);
    /* The second write waits for the first: its completion frees the whole copy. */
    const int second = first < 0 ? -1
                                 : flashcl__chain_write(chain, *seqinfo_buf, seqinfo_count * sizeof *seqinfo,
                                                        copy + table_count, first);
    if (second < 0) {
        if (first >= 0) clWaitForEvents(1, (cl_event[]){flashcl__chain_event(chain, first)}); /* it reads the copy */
        free(copy);
        return chain->status;
    }
    cl_int err = clSetEventCallback(flashcl__chain_event(chain, second), CL_COMPLETE, free_host_copy, copy);
    if (err != CL_SUCCESS) {
        clWaitForEvents(1, (cl_event[]){flashcl__chain_event(chain, second)});
        free(copy);
    }
    *last = second;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl__kv_kernels(flashcl_context *ctx, const char *options, cl_kernel *append, cl_kernel *rotate) {
    kv_state *s = state_of(ctx);
    if (!s) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for the KV-cache state");
    kv_kernels *k = s->kernels;
    while (k && strcmp(k->key, options) != 0) k = k->next;
    if (!k) {
        cl_program program = NULL;
        flashcl_status st = flashcl__get_program(ctx, "kv_append.cl", options, &program);
        if (st != FLASHCL_SUCCESS) return st;
        k = calloc(1, sizeof *k);
        if (!k) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for the append kernels");
        st = flashcl__create_kernel(ctx, program, "kv_append", &k->append);
        if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "rotate_q", &k->rotate);
        if (st != FLASHCL_SUCCESS) {
            if (k->append) clReleaseKernel(k->append);
            free(k);
            return st;
        }
        flashcl__copy_str(k->key, sizeof k->key, options);
        k->next = s->kernels;
        s->kernels = k;
    }
    if (append) *append = k->append;
    if (rotate) *rotate = k->rotate;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl__kv_unit_scale(flashcl_context *ctx, cl_mem *out) {
    kv_state *s = state_of(ctx);
    if (!s) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for the KV-cache state");
    if (!s->unit_scale) {
        static const float unit = 1.0f;
        cl_int err = CL_SUCCESS;
        s->unit_scale =
            clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof unit, (void *)&unit, &err);
        if (err != CL_SUCCESS) {
            s->unit_scale = NULL;
            return flashcl__fail_cl(ctx, err, "clCreateBuffer(cache scale)");
        }
    }
    *out = s->unit_scale;
    return FLASHCL_SUCCESS;
}

void flashcl__kv_release(flashcl_context *ctx) {
    kv_state *s = ctx->family[FLASHCL__FAMILY_KVCACHE];
    if (!s) return;
    if (s->unit_scale) clReleaseMemObject(s->unit_scale);
    for (kv_kernels *k = s->kernels, *next; k; k = next) {
        next = k->next;
        clReleaseKernel(k->append);
        clReleaseKernel(k->rotate);
        free(k);
    }
    free(s);
    ctx->family[FLASHCL__FAMILY_KVCACHE] = NULL;
}
