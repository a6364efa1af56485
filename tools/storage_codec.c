/* float32 <-> half, bfloat16 and fp8 on the host; see storage_codec.h. */
#include "storage_codec.h"

#include <math.h>
#include <string.h>

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t codec_float_to_bf16(float f) {
    uint32_t u = float_bits(f);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40u); /* stay a NaN: keep it quiet */
    u += 0x7fffu + ((u >> 16) & 1u);                    /* round the low half to even */
    return (uint16_t)(u >> 16);
}

float codec_bf16_to_float(uint16_t b) { return bits_float((uint32_t)b << 16); }

uint16_t codec_float_to_half(float f) {
    const uint32_t u = float_bits(f), sign = (u >> 16) & 0x8000u, mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (mag >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504: infinity */
    if (mag < 0x38800000u) {
        /* Below half's normal range: the subnormal grid, multiples of 2^-24, rounded to even. */
        return (uint16_t)(sign | (uint16_t)rintf(bits_float(mag) * 0x1p24f));
    }
    const uint32_t rounded = mag + 0xfffu + ((mag >> 13) & 1u);
    return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
}

float codec_half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        const float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));
    return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

float codec_fp8_max(int e4m3) { return e4m3 ? 448.0f : 57344.0f; }

uint8_t codec_float_to_fp8(float f, int e4m3) {
    const uint32_t sign = (float_bits(f) >> 24) & 0x80u;
    const uint32_t mbits = e4m3 ? 3u : 2u, bias = e4m3 ? 7u : 15u;
    if (isnan(f)) return (uint8_t)(sign | (e4m3 ? 0x7fu : 0x7eu));
    const float a = fabsf(f);
    if (a < (e4m3 ? 0x1p-6f : 0x1p-14f)) {
        /* Subnormals are multiples of 2^(1 - bias - mbits); a result of 2^mbits is the smallest normal. */
        return (uint8_t)(sign | (uint32_t)rintf(a * (e4m3 ? 0x1p9f : 0x1p16f)));
    }
    uint32_t r = float_bits(a);
    r += (1u << (22u - mbits)) - 1u + ((r >> (23u - mbits)) & 1u); /* round the dropped bits to even */
    const uint32_t kept = r & ~((1u << (23u - mbits)) - 1u);       /* the value rounded to the fp8 grid */
    const uint32_t e = ((kept >> 23) & 0xffu) - 127u + bias, m = (kept >> (23u - mbits)) & ((1u << mbits) - 1u);
    if (bits_float(kept) > codec_fp8_max(e4m3))
        return (uint8_t)(sign | (e4m3 ? 0x7eu : 0x7cu)); /* e4m3fn saturates at 448; e5m2 becomes infinity */
    return (uint8_t)(sign | (e << mbits) | m);
}

float codec_fp8_to_float(uint8_t x, int e4m3) {
    const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    const int e = (x & 0x7f) >> mbits, m = x & ((1 << mbits) - 1);
    float v;
    if (e4m3 && e == 15 && m == 7) return NAN;
    if (!e4m3 && e == 31) {
        if (m) return NAN;
        v = INFINITY;
    } else if (e == 0) {
        v = ldexpf((float)m, 1 - bias - mbits);
    } else {
        v = ldexpf(1.0f + (float)m / (float)(1 << mbits), e - bias);
    }
    return (x & 0x80) ? -v : v;
}

void codec_pack(flashcl_dtype dtype, const float *src, size_t n, void *dst) {
    if (dtype != FLASHCL_DTYPE_F16 && dtype != FLASHCL_DTYPE_BF16) {
        if (dst != (const void *)src) memmove(dst, src, n * sizeof(float));
        return;
    }
    uint16_t *out = dst;
    for (size_t i = 0; i < n; ++i) {
        const float x = src[i]; /* read before the (possibly overlapping) write */
        out[i] = dtype == FLASHCL_DTYPE_F16 ? codec_float_to_half(x) : codec_float_to_bf16(x);
    }
}

void codec_unpack(flashcl_dtype dtype, const void *src, size_t n, float *dst) {
    if (dtype != FLASHCL_DTYPE_F16 && dtype != FLASHCL_DTYPE_BF16) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    const uint16_t *in = src;
    for (size_t i = 0; i < n; ++i)
        dst[i] = dtype == FLASHCL_DTYPE_F16 ? codec_half_to_float(in[i]) : codec_bf16_to_float(in[i]);
}
