/* The byte reader and the guarded device buffers of fuzz_input.h. */
#include "fuzz_input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

unsigned fuzz_next(fuzz_reader *r) {
    if (!r->n) return 0;
    --r->n;
    return *r->p++;
}

void fuzz_buffer_make(fuzz_buffer *b, flashcl_context *ctx, size_t bytes, const void *init) {
    cl_int err;
    b->bytes = bytes;
    b->init = malloc(bytes);
    if (!b->init) abort();
    memcpy(b->init, init, bytes);
    b->mem =
        clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, b->init, &err);
    if (err != CL_SUCCESS) abort();
}

unsigned char *fuzz_buffer_read(const fuzz_buffer *b, flashcl_context *ctx) {
    unsigned char *now = malloc(b->bytes);
    if (!now) abort();
    /* Blocking read on the library's queue: it also waits for the call under test. */
    if (clEnqueueReadBuffer(flashcl_context_queue(ctx), b->mem, CL_TRUE, 0, b->bytes, now, 0, NULL, NULL) != CL_SUCCESS)
        abort();
    return now;
}

void fuzz_buffer_check_guard(const fuzz_buffer *b, const unsigned char *now, const unsigned char *covered,
                             const char *what, flashcl_status st) {
    for (size_t i = 0; i < b->bytes; ++i)
        if ((!covered || !covered[i]) && now[i] != b->init[i]) {
            fprintf(stderr,
                    "fuzz_attention: status %s but %s byte %zu (of %zu), outside what the call may write, changed\n",
                    flashcl_status_name(st), what, i, b->bytes);
            abort();
        }
}

void fuzz_buffer_free(fuzz_buffer *b) {
    clReleaseMemObject(b->mem);
    free(b->init);
    b->mem = NULL;
    b->init = NULL;
}

void fuzz_fill_floats(float *out, size_t n, unsigned salt) {
    for (size_t j = 0; j < n; ++j) out[j] = (float)((j * 37 + salt * 11) % 23) / 11.0f - 1.0f;
}
