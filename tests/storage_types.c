/* Host f16/bf16 conversions; see storage_types.h. */
#include "storage_types.h"

#include <math.h>
#include <string.h>

static uint32_t float_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bits_float(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

uint16_t st_f16_bits(float x) {
    uint32_t u = float_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    float a = fabsf(x);
    if (isnan(x)) return (uint16_t)(sign | 0x7e00u);
    if (a >= 65520.0f) /* rounds to infinity (65504 + half an ulp) */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 6.103515625e-05f) {
        /* Subnormal half: a multiple of 2^-24; rint rounds half to even. */
        return (uint16_t)(sign | (uint16_t)rintf(a * 16777216.0f));
    }
    uint32_t au = float_bits(a);
    uint32_t mant = au & 0x7fffffu;
    int exp = (int)(au >> 23) - 127 + 15;
    uint32_t half = ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
        half++; /* a carry into the exponent is still the right value */
    return (uint16_t)(sign | half);
}

float st_f16_value(uint16_t bits) {
    uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
    uint32_t exp = (bits >> 10) & 0x1fu, mant = bits & 0x3ffu;
    if (exp == 0) {
        float v = (float)mant / 16777216.0f;
        return sign ? -v : v;
    }
    if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
    return bits_float(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t st_bf16_bits(float x) {
    uint32_t u = float_bits(x);
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x40u);
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)((u + rounding) >> 16);
}

float st_bf16_value(uint16_t bits) { return bits_float((uint32_t)bits << 16); }

float st_round(flashcl_dtype dtype, float x) {
    switch (dtype) {
    case FLASHCL_DTYPE_F16:
        return st_f16_value(st_f16_bits(x));
    case FLASHCL_DTYPE_BF16:
        return st_bf16_value(st_bf16_bits(x));
    default:
        return x;
    }
}

double st_round_f16(double x) { return st_round(FLASHCL_DTYPE_F16, (float)x); }

double st_round_bf16(double x) { return st_round(FLASHCL_DTYPE_BF16, (float)x); }

float st_round_tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) return x; /* inf, NaN */
    /* The magnitude's 13 low bits: adding half of them and truncating rounds ties away from zero. */
    u = (u + 0x1000u) & ~0x1fffu;
    memcpy(&x, &u, sizeof x);
    return x;
}

double st_round_tf32_d(double x) { return st_round_tf32((float)x); }

void st_round_array(flashcl_dtype dtype, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = st_round(dtype, x[i]);
}

double st_epsilon(flashcl_dtype dtype) {
    switch (dtype) {
    case FLASHCL_DTYPE_F16:
        return ldexp(1.0, -11);
    case FLASHCL_DTYPE_BF16:
        return ldexp(1.0, -8);
    default:
        return ldexp(1.0, -24);
    }
}

const char *st_name(flashcl_dtype dtype) {
    switch (dtype) {
    case FLASHCL_DTYPE_F16:
        return "f16";
    case FLASHCL_DTYPE_BF16:
        return "bf16";
    default:
        return "f32";
    }
}

void st_pack(flashcl_dtype dtype, const float *src, size_t n, void *dst) {
    if (dtype == FLASHCL_DTYPE_F16 || dtype == FLASHCL_DTYPE_BF16) {
        uint16_t *out = dst;
        for (size_t i = 0; i < n; i++) out[i] = dtype == FLASHCL_DTYPE_F16 ? st_f16_bits(src[i]) : st_bf16_bits(src[i]);
    } else {
        memcpy(dst, src, n * sizeof(float));
    }
}

void st_unpack(flashcl_dtype dtype, const void *src, size_t n, float *dst) {
    if (dtype == FLASHCL_DTYPE_F16 || dtype == FLASHCL_DTYPE_BF16) {
        const uint16_t *in = src;
        for (size_t i = 0; i < n; i++) dst[i] = dtype == FLASHCL_DTYPE_F16 ? st_f16_value(in[i]) : st_bf16_value(in[i]);
    } else {
        memcpy(dst, src, n * sizeof(float));
    }
}
