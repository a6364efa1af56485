/*
 * flashcl_forward_kvcache's state in a context (see kvcache_state.h).
 *
 * Why host copies: a per-call buffer created from the caller's arrays costs an
 * allocation and a synchronous copy each decode step (on the H200 it made the
 * call ~0.1 ms slower than the attention kernel alone). Instead each call
 * copies its tables into a fresh host block, writes that to two scratch slots
 * with non-blocking writes and frees the block from the last write's
 * completion callback: nothing waits on the host (a wait could deadlock behind
 * the caller's user events), and the caller's arrays are free on return. The
 * device copies need no such care: the chain waits for the scratch's last user
 * before writing them.
 *
 * Why a slot is written only when its content changes: a write is a command of
 * its own, and on the H200 each cost about as much as a tenth of a b1 decode
 * call. A model calls attention once per layer with the same block table and
 * lengths within a token (FlashInfer's plan once, run per layer), so all but
 * the first layer's call find the values already there; the state keeps a host
 * copy of what each slot holds, valid while the slot's buffer is the same
 * (scratch.c's generation) and forgotten when a call fails after its writes.
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

/* What a table slot holds on the device (valid while the slot's generation is unchanged). */
typedef struct kv_held {
    int32_t *values;
    size_t count, capacity;
    unsigned long generation;
    int valid;
} kv_held;

typedef struct kv_state {
    cl_mem unit_scale;
    kv_kernels *kernels;
    kv_held held[2]; /* the block table's slot, the sequence lengths' slot */
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

/* Frees `copy` once link `link` of the chain (the last write reading it) has completed. */
static void free_copy_after(flashcl__chain *chain, int link, int32_t *copy) {
    const cl_event done = flashcl__chain_event(chain, link);
    if (clSetEventCallback(done, CL_COMPLETE, free_host_copy, copy) != CL_SUCCESS) {
        clWaitForEvents(1, &done);
        free(copy);
    }
}

/* Whether slot `which` of the state already holds values[0..count) on the device. */
static int already_there(const flashcl_context *ctx, const kv_state *s, int which, int slot, const int32_t *values,
                         size_t count) {
    const kv_held *h = &s->held[which];
    return h->valid && h->generation == ctx->scratch_generation[slot] && h->count == count &&
           memcmp(h->values, values, count * sizeof *values) == 0;
}

/* Remembers values[0..count) as what slot `which` holds once its write has run. */
static void remember(const flashcl_context *ctx, kv_state *s, int which, int slot, const int32_t *values,
                     size_t count) {
    kv_held *h = &s->held[which];
    h->valid = 0;
    if (count > h->capacity) {
        int32_t *grown = realloc(h->values, count * sizeof *grown);
        if (!grown) return; /* nothing remembered: the next call writes again */
        h->values = grown;
        h->capacity = count;
    }
    memcpy(h->values, values, count * sizeof *values);
    h->count = count;
    h->generation = ctx->scratch_generation[slot];
    h->valid = 1;
}

flashcl_status flashcl__kv_upload_tables(flashcl_context *ctx, flashcl__chain *chain, const int32_t *table,
                                         size_t table_count, const int32_t *seqinfo, size_t seqinfo_count, int after,
                                         cl_mem *table_buf, cl_mem *seqinfo_buf, int *last) {
    kv_state *s = state_of(ctx);
    if (!s) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for the KV-cache state");
    flashcl_status st = flashcl__scratch(ctx, FLASHCL__SCRATCH_KV_TABLE, table_count * sizeof *table,
                                         "kvcache: the block table", table_buf);
    if (st == FLASHCL_SUCCESS)
        st = flashcl__scratch(ctx, FLASHCL__SCRATCH_KV_SEQINFO, seqinfo_count * sizeof *seqinfo,
                              "kvcache: the sequence lengths", seqinfo_buf);
    if (st != FLASHCL_SUCCESS) return st;
    const int slots[2] = {FLASHCL__SCRATCH_KV_TABLE, FLASHCL__SCRATCH_KV_SEQINFO};
    const int32_t *values[2] = {table, seqinfo};
    const size_t counts[2] = {table_count, seqinfo_count};
    const cl_mem buffers[2] = {*table_buf, *seqinfo_buf};
    int write[2];
    size_t total = 0;
    for (int i = 0; i < 2; ++i) {
        write[i] = !already_there(ctx, s, i, slots[i], values[i], counts[i]);
        if (write[i]) total += counts[i];
    }
    *last = after;
    if (total == 0) return FLASHCL_SUCCESS;
    int32_t *copy = malloc(total * sizeof *copy);
    if (!copy) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for the block table");
    int32_t *at = copy;
    int link = after;
    for (int i = 0; i < 2; ++i) {
        if (!write[i]) continue;
        memcpy(at, values[i], counts[i] * sizeof *at);
        /* A write waits for the one before it: the last one's completion frees the whole copy. */
        const int done = flashcl__chain_write(chain, buffers[i], counts[i] * sizeof *at, at, link);
        if (done < 0) {
            if (link == after)
                free(copy);
            else
                free_copy_after(chain, link, copy); /* the first write still runs, and reads it */
            *last = link;
            return chain->status;
        }
        remember(ctx, s, i, slots[i], values[i], counts[i]);
        link = done;
        at += counts[i];
    }
    free_copy_after(chain, link, copy);
    *last = link;
    return FLASHCL_SUCCESS;
}

void flashcl__kv_forget_tables(flashcl_context *ctx) {
    kv_state *s = ctx->family[FLASHCL__FAMILY_KVCACHE];
    if (s) s->held[0].valid = s->held[1].valid = 0;
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
    free(s->held[0].values);
    free(s->held[1].values);
    free(s);
    ctx->family[FLASHCL__FAMILY_KVCACHE] = NULL;
}
