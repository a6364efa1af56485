/*
 * f16 and bf16 on the host: values rounded to a storage type and back, and
 * the types' unit roundoff and names. The conversions themselves, elements
 * (IEEE half as vstore_half writes it, bfloat16 as the high half of a float,
 * both rounding to nearest even) and whole arrays (flashcl__to_storage,
 * flashcl__from_storage), are the library's own in src/float16/float16.h,
 * included here.
 */
#ifndef FLASHCL_TEST_STORAGE_TYPES_H
#define FLASHCL_TEST_STORAGE_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "flashcl.h"

#include "float16.h"

/* x rounded to the storage type and back (f32: unchanged). */
float st_round(flashcl_dtype dtype, float x);
/* The same in double, for rv_problem.round (through float first, as a framework would). */
double st_round_f16(double x);
double st_round_bf16(double x);
/* TF32 (NVIDIA's tensor-core float32: 10-bit mantissa, 8-bit exponent), rounded to nearest with
   ties away from zero as cvt.rna.tf32.f32 does; in float and in double (through float). */
float st_round_tf32(float x);
double st_round_tf32_d(double x);

/* Rounds every element in place. */
void st_round_array(flashcl_dtype dtype, float *x, size_t n);

/* Unit roundoff of the storage type: 2^-24 (f32), 2^-11 (f16), 2^-8 (bf16). */
double st_epsilon(flashcl_dtype dtype);

const char *st_name(flashcl_dtype dtype);

#endif
