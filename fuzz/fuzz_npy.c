/*
 * libFuzzer target for the CLI's .npy reader (tools/npy.c): any byte string
 * must be either refused with a message or parsed into an array whose shape
 * and element count agree with each other and with the input's size.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    npy_array a;
    char err[256];
    memset(&a, 0, sizeof a);
    err[0] = '\0';
    if (npy_read_memory(data, size, &a, err, sizeof err) != 0) {
        /* A refusal must say why, and must not hand back memory. */
        if (err[0] == '\0' || a.data != NULL) abort();
        return 0;
    }
    size_t count = 1;
    for (size_t i = 0; i < a.ndim; ++i) count *= a.shape[i];
    if (a.ndim > NPY_MAX_DIMS || count != a.count) abort();
    /* The file is header + data exactly, so the data cannot exceed the input (float16, the
       narrowest float, has two bytes an element; the caller gets float32 either way). */
    if (a.count > size / 2) abort();
    /* Touch every element: ASan flags a short allocation. */
    volatile float sink = 0.0f;
    for (size_t i = 0; i < a.count; ++i) sink += a.data[i];
    (void)sink;
    npy_array_free(&a);
    return 0;
}
