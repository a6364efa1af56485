/*
 * Host conversions between float32 and the device storage types the tool
 * uploads and reads back: IEEE half and bfloat16 (round to nearest even, as
 * the library's host API rounds), and the fp8 formats of a KV cache, OCP
 * e4m3fn and e5m2 (round to nearest even; e4m3 saturates at 448, e5m2
 * overflows to infinity, as the library's append does).
 */
#ifndef FLASHCL_TOOLS_STORAGE_CODEC_H
#define FLASHCL_TOOLS_STORAGE_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include <flashcl.h>

uint16_t codec_float_to_half(float f);
uint16_t codec_float_to_bf16(float f);
float codec_half_to_float(uint16_t h);
float codec_bf16_to_float(uint16_t b);

/* e4m3: nonzero for e4m3fn, zero for e5m2. */
uint8_t codec_float_to_fp8(float f, int e4m3);
float codec_fp8_to_float(uint8_t x, int e4m3);

/* The largest finite value of an fp8 format: 448 (e4m3) or 57344 (e5m2). */
float codec_fp8_max(int e4m3);

/*
 * n floats into dtype's storage at dst (float32 copied; f16/bf16 two bytes
 * each). dst may be src itself: element i is read before it is written.
 */
void codec_pack(flashcl_dtype dtype, const float *src, size_t n, void *dst);
/* n elements of dtype's storage back to floats; dst must not overlap src. */
void codec_unpack(flashcl_dtype dtype, const void *src, size_t n, float *dst);

#endif
