/* xorshift64 (Marsaglia 2003): fast, and good enough for benchmark inputs. */
#include "random_fill.h"

void random_fill_uniform(float *data, size_t count, uint64_t *state)
{
    uint64_t x = *state != 0 ? *state : 0x9e3779b97f4a7c15u; /* 0 is a fixed point */
    for (size_t i = 0; i < count; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        /* The top 24 bits fill a float's mantissa exactly: k / 2^23 - 1 for
         * k in [0, 2^24) is uniform on [-1, 1) with no rounding. */
        data[i] = (float)(x >> 40) * (1.0f / 8388608.0f) - 1.0f;
    }
    *state = x;
}
