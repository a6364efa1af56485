/*
 * What fuzz_attention's targets share: the input bytes read one at a time
 * (zeros once they run out, so a short input is still a complete case) and
 * device buffers whose bytes outside what a call may write are checked
 * afterwards (guard regions). Any failure aborts, which libFuzzer reports.
 */
#ifndef FLASHCL_FUZZ_INPUT_H
#define FLASHCL_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "flashcl.h"

typedef struct fuzz_reader {
    const uint8_t *p;
    size_t n;
} fuzz_reader;

unsigned fuzz_next(fuzz_reader *r);

/* A device buffer and the bytes it was created with. */
typedef struct fuzz_buffer {
    cl_mem mem;
    size_t bytes;
    unsigned char *init;
} fuzz_buffer;

/* Makes a buffer of `bytes` bytes holding `init` (copied); aborts on failure. */
void fuzz_buffer_make(fuzz_buffer *b, flashcl_context *ctx, size_t bytes, const void *init);
/* Reads the buffer back (a malloc'd copy); aborts on failure. */
unsigned char *fuzz_buffer_read(const fuzz_buffer *b, flashcl_context *ctx);
/* Aborts, naming `what`, if a byte with covered[i] == 0 differs from the initial
   contents (covered NULL: no byte may change). */
void fuzz_buffer_check_guard(const fuzz_buffer *b, const unsigned char *now, const unsigned char *covered,
                             const char *what, flashcl_status st);
void fuzz_buffer_free(fuzz_buffer *b);

/* Input values for a float buffer: small, varied, finite. */
void fuzz_fill_floats(float *out, size_t n, unsigned salt);

#endif
