/*
 * Host conversions between float32 and the device storage types the tool
 * uploads and reads back. IEEE half and bfloat16, elements and whole arrays
 * (flashcl__to_storage, flashcl__from_storage), are the library's own
 * conversions in src/float16/float16.h, included here; this file adds the fp8
 * formats of a KV cache, OCP e4m3fn and e5m2 (round to nearest even; e4m3
 * saturates at 448, e5m2 overflows to infinity, as the library's append does).
 */
#ifndef FLASHCL_TOOLS_STORAGE_CODEC_H
#define FLASHCL_TOOLS_STORAGE_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include <flashcl.h>

#include "float16.h"

/* e4m3: nonzero for e4m3fn, zero for e5m2. */
uint8_t codec_float_to_fp8(float f, int e4m3);
float codec_fp8_to_float(uint8_t x, int e4m3);

/* The largest finite value of an fp8 format: 448 (e4m3) or 57344 (e5m2). */
float codec_fp8_max(int e4m3);

#endif
