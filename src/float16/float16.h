/*
 * float32 <-> IEEE half (f16) and bfloat16 on the host, one element or whole
 * arrays, rounding to nearest even. One source for every target that
 * converts: float16.c is compiled
 * into the library (src/ is globbed), the `flashcl` tool, the test helpers
 * and the MPI component, each its own copy, because the library exports only
 * include/flashcl.h and these are not public API (hence the flashcl__ prefix:
 * the copy in a static libflashcl.a must not take an application's names).
 * Self-contained: it needs only flashcl.h's flashcl_dtype.
 */
#ifndef FLASHCL_FLOAT16_H
#define FLASHCL_FLOAT16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <flashcl.h>

/* A float's bit pattern and back (through memcpy, which breaks no aliasing rule). */
static inline uint32_t flashcl__float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float flashcl__bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* NaN stays a (quiet) NaN with its sign; past 65504 (after rounding) is infinity; subnormals are exact. */
uint16_t flashcl__float_to_f16(float f);
float flashcl__f16_to_float(uint16_t h);
/* The high half of the float, rounded to nearest even; NaN stays a quiet NaN. */
uint16_t flashcl__float_to_bf16(float f);
float flashcl__bf16_to_float(uint16_t h);

/* n floats into dtype's storage at dst (n * flashcl_dtype_size bytes: float32 copied, f16/bf16 two bytes
   each); dst may be src itself. Other dtypes are copied as float32. */
void flashcl__to_storage(flashcl_dtype dtype, const float *src, void *dst, size_t n);
/* n elements of dtype's storage back to floats; dst must not overlap src. */
void flashcl__from_storage(flashcl_dtype dtype, const void *src, float *dst, size_t n);

#endif
