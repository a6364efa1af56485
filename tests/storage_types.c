/* Host f16/bf16 rounding and array packing; see storage_types.h. */
#include "storage_types.h"

#include <math.h>
#include <string.h>

float st_round(flashcl_dtype dtype, float x) {
    switch (dtype) {
    case FLASHCL_DTYPE_F16:
        return flashcl__f16_to_float(flashcl__float_to_f16(x));
    case FLASHCL_DTYPE_BF16:
        return flashcl__bf16_to_float(flashcl__float_to_bf16(x));
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
