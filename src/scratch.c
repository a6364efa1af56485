/* Context-owned device scratch: buffers that grow on demand and are freed on
   destroy. Every call that uses scratch waits for the previous user, so an
   out-of-order queue cannot run two calls over the same scratch at once. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

flashcl_status flashcl__scratch_fits(flashcl_context *ctx, size_t bytes, const char *what) {
    if (bytes > ctx->info.max_alloc_bytes || bytes > ctx->info.global_mem_bytes)
        return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_DEVICE_MEMORY,
                             "%s needs %zu bytes of scratch but the device allows %llu bytes per buffer", what, bytes,
                             (unsigned long long)ctx->info.max_alloc_bytes);
    return FLASHCL_SUCCESS;
}

static flashcl_status scratch_slot(flashcl_context *ctx, int slot, size_t bytes, int zeroed, const char *what,
                                   cl_mem *out) {
    if (bytes == 0) bytes = sizeof(float);
    if (ctx->scratch[slot] && ctx->scratch_bytes[slot] >= bytes) {
        *out = ctx->scratch[slot];
        return FLASHCL_SUCCESS;
    }
    flashcl_status fits = flashcl__scratch_fits(ctx, bytes, what);
    if (fits != FLASHCL_SUCCESS) return fits;
    if (ctx->scratch[slot]) {
        /* OpenCL frees the old buffer once the commands using it have finished. */
        clReleaseMemObject(ctx->scratch[slot]);
        ctx->scratch[slot] = NULL;
        ctx->scratch_bytes[slot] = 0;
        ++ctx->scratch_generation[slot];
    }
    cl_int err = CL_SUCCESS;
    void *zeros = NULL;
    if (zeroed && !(zeros = calloc(1, bytes)))
        return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "%s: out of host memory for %zu zero bytes", what,
                             bytes);
    cl_mem buf =
        clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE | (zeroed ? CL_MEM_COPY_HOST_PTR : 0), bytes, zeros, &err);
    free(zeros);
    if (err != CL_SUCCESS) {
        flashcl_status st =
            err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES || err == CL_INVALID_BUFFER_SIZE
                ? FLASHCL_ERR_OUT_OF_DEVICE_MEMORY
                : (flashcl_status)err;
        return flashcl__fail(ctx, st, "%s: clCreateBuffer for %zu bytes of scratch failed: %s (%d)", what, bytes,
                             flashcl__cl_error_name(err), (int)err);
    }
    ctx->scratch[slot] = buf;
    ctx->scratch_bytes[slot] = bytes;
    ++ctx->scratch_generation[slot];
    *out = buf;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl__scratch(flashcl_context *ctx, int slot, size_t bytes, const char *what, cl_mem *out) {
    return scratch_slot(ctx, slot, bytes, 0, what, out);
}

flashcl_status flashcl__scratch_zeroed(flashcl_context *ctx, int slot, size_t bytes, const char *what, cl_mem *out) {
    return scratch_slot(ctx, slot, bytes, 1, what, out);
}

flashcl_status flashcl__scratch_waits(flashcl_context *ctx, cl_uint num_wait, const cl_event *wait_list,
                                      flashcl__waits *out) {
    const cl_uint cap = (cl_uint)(sizeof out->events / sizeof out->events[0]) - 1;
    if (num_wait > cap)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "wait_list: at most %u events", (unsigned)cap);
    if (num_wait) memcpy(out->events, wait_list, num_wait * sizeof *wait_list);
    out->count = num_wait;
    if (ctx->scratch_last_use) out->events[out->count++] = ctx->scratch_last_use;
    return FLASHCL_SUCCESS;
}

void flashcl__scratch_used_by(flashcl_context *ctx, cl_event last) {
    clRetainEvent(last);
    if (ctx->scratch_last_use) clReleaseEvent(ctx->scratch_last_use);
    ctx->scratch_last_use = last;
}

void flashcl__release_scratch(flashcl_context *ctx) {
    if (ctx->scratch_last_use) clReleaseEvent(ctx->scratch_last_use);
    ctx->scratch_last_use = NULL;
    for (int i = 0; i < FLASHCL__SCRATCH_SLOTS; ++i) {
        if (ctx->scratch[i]) clReleaseMemObject(ctx->scratch[i]);
        ctx->scratch[i] = NULL;
        ctx->scratch_bytes[i] = 0;
        ++ctx->scratch_generation[i];
    }
}

size_t flashcl_context_scratch_bytes(const flashcl_context *ctx) {
    size_t total = 0;
    if (!ctx) return 0;
    for (int i = 0; i < FLASHCL__SCRATCH_SLOTS; ++i) total += ctx->scratch_bytes[i];
    return total;
}

void flashcl_context_release_scratch(flashcl_context *ctx) {
    if (ctx) flashcl__release_scratch(ctx);
}
