/* fp8 (e4m3fn, e5m2) <-> float32 on the host; see storage_codec.h. */
#include "storage_codec.h"

#include <math.h>

float codec_fp8_max(int e4m3) { return e4m3 ? 448.0f : 57344.0f; }

uint8_t codec_float_to_fp8(float f, int e4m3) {
    const uint32_t sign = (flashcl__float_bits(f) >> 24) & 0x80u;
    const uint32_t mbits = e4m3 ? 3u : 2u, bias = e4m3 ? 7u : 15u;
    if (isnan(f)) return (uint8_t)(sign | (e4m3 ? 0x7fu : 0x7eu));
    const float a = fabsf(f);
    if (a < (e4m3 ? 0x1p-6f : 0x1p-14f)) {
        /* Subnormals are multiples of 2^(1 - bias - mbits); a result of 2^mbits is the smallest normal. */
        return (uint8_t)(sign | (uint32_t)rintf(a * (e4m3 ? 0x1p9f : 0x1p16f)));
    }
    uint32_t r = flashcl__float_bits(a);
    r += (1u << (22u - mbits)) - 1u + ((r >> (23u - mbits)) & 1u); /* round the dropped bits to even */
    const uint32_t kept = r & ~((1u << (23u - mbits)) - 1u);       /* the value rounded to the fp8 grid */
    const uint32_t e = ((kept >> 23) & 0xffu) - 127u + bias, m = (kept >> (23u - mbits)) & ((1u << mbits) - 1u);
    if (flashcl__bits_float(kept) > codec_fp8_max(e4m3))
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
