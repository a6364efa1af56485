/* float32 <-> f16 / bf16, elements and arrays, round to nearest even; see float16.h. */
#include "float16.h"

#include <string.h>

uint16_t flashcl__float_to_bf16(float f) {
    uint32_t u = flashcl__float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float flashcl__bf16_to_float(uint16_t h) { return flashcl__bits_float((uint32_t)h << 16); }

uint16_t flashcl__float_to_f16(float f) {
    uint32_t u = flashcl__float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (mag >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504: inf */
    if (mag < 0x38800000u) {                                   /* subnormal or zero in f16 */
        if (mag < 0x33000000u) return (uint16_t)sign;          /* below half the smallest subnormal */
        uint32_t mant = (mag & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(mag >> 23); /* value = mant * 2^(e-150); subnormal units are 2^-24 */
        uint32_t half_ulp = 1u << (shift - 1);
        uint32_t rounded = mant + half_ulp - 1 + ((mant >> shift) & 1u);
        return (uint16_t)(sign | (rounded >> shift));
    }
    uint32_t rounded = mag + 0xfffu + ((mag >> 13) & 1u); /* round to nearest even at bit 13 */
    return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
}

float flashcl__f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) return flashcl__bits_float(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0) return flashcl__bits_float(sign);
        float f = (float)mant * (1.0f / 16777216.0f); /* mant * 2^-24 */
        return sign ? -f : f;
    }
    return flashcl__bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* Each element is read before it is written: in place (dst == src) the 2-byte results stay behind the floats still
   to be read. */
void flashcl__to_storage(flashcl_dtype dtype, const float *src, void *dst, size_t n) {
    uint16_t *h = dst;
    if (dtype == FLASHCL_DTYPE_F16)
        for (size_t i = 0; i < n; ++i) h[i] = flashcl__float_to_f16(src[i]);
    else if (dtype == FLASHCL_DTYPE_BF16)
        for (size_t i = 0; i < n; ++i) h[i] = flashcl__float_to_bf16(src[i]);
    else if (dst != (const void *)src)
        memmove(dst, src, n * sizeof(float));
}

void flashcl__from_storage(flashcl_dtype dtype, const void *src, float *dst, size_t n) {
    const uint16_t *h = src;
    if (dtype == FLASHCL_DTYPE_F16)
        for (size_t i = 0; i < n; ++i) dst[i] = flashcl__f16_to_float(h[i]);
    else if (dtype == FLASHCL_DTYPE_BF16)
        for (size_t i = 0; i < n; ++i) dst[i] = flashcl__bf16_to_float(h[i]);
    else
        memcpy(dst, src, n * sizeof(float));
}
