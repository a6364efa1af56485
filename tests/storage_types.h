/*
 * f16 and bf16 on the host: conversion to and from the bit patterns FlashCL
 * stores (IEEE half as vstore_half writes it, bfloat16 as the high half of a
 * float), both rounding to nearest even, and uploads/downloads of whole
 * float arrays in a storage type.
 */
#ifndef FLASHCL_TEST_STORAGE_TYPES_H
#define FLASHCL_TEST_STORAGE_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "flashcl.h"

uint16_t st_f16_bits(float x);
float st_f16_value(uint16_t bits);
uint16_t st_bf16_bits(float x);
float st_bf16_value(uint16_t bits);

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

/* Packs n floats into dst (n * flashcl_dtype_size bytes) in the storage type. */
void st_pack(flashcl_dtype dtype, const float *src, size_t n, void *dst);
/* Unpacks n elements of the storage type into floats. */
void st_unpack(flashcl_dtype dtype, const void *src, size_t n, float *dst);

#endif
