/* 64-bit FNV-1a: keys the program caches. Not cryptographic; the disk cache
   also stores and compares the full key text, so a collision cannot load a
   wrong binary. */
#include "internal.h"

uint64_t flashcl__fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
