/* Kernel text: the copies embedded at build time, or FLASHCL_KERNEL_DIR for kernel development. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SOURCE_BYTES (16u << 20)

static const flashcl__kernel_source *find_embedded(const char *name) {
    for (size_t i = 0; i < flashcl__kernel_source_count; ++i)
        if (strcmp(flashcl__kernel_sources[i].name, name) == 0) return &flashcl__kernel_sources[i];
    return NULL;
}

/* Reads dir/name into a malloc'd buffer; *size excludes the terminator. */
static flashcl_status read_file(flashcl_context *ctx, const char *dir, const char *name, char **out, size_t *size) {
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof path)
        return flashcl__fail(ctx, FLASHCL_ERR_KERNEL_SOURCE, "FLASHCL_KERNEL_DIR path is too long");
    FILE *f = fopen(path, "rb");
    if (!f)
        return flashcl__fail(ctx, FLASHCL_ERR_KERNEL_SOURCE, "cannot open kernel source %s (FLASHCL_KERNEL_DIR)", path);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *p = cap <= MAX_SOURCE_BYTES ? realloc(buf, cap) : NULL;
            if (!p) {
                free(buf);
                fclose(f);
                return flashcl__fail(ctx, FLASHCL_ERR_KERNEL_SOURCE, "kernel source %s is too large or out of memory",
                                     path);
            }
            buf = p;
        }
        size_t got = fread(buf + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return flashcl__fail(ctx, FLASHCL_ERR_KERNEL_SOURCE, "error reading kernel source %s", path);
    }
    buf[len] = '\0';
    *out = buf;
    *size = len;
    return FLASHCL_SUCCESS;
}

static flashcl_status get_text(flashcl_context *ctx, const char *name, char **out, size_t *size) {
    const char *dir = getenv("FLASHCL_KERNEL_DIR");
    if (dir && *dir) return read_file(ctx, dir, name, out, size);
    const flashcl__kernel_source *src = find_embedded(name);
    if (!src) return flashcl__fail(ctx, FLASHCL_ERR_KERNEL_SOURCE, "no embedded kernel source named %s", name);
    char *buf = malloc(src->size + 1);
    if (!buf) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory copying %s", name);
    memcpy(buf, src->data, src->size);
    buf[src->size] = '\0';
    *out = buf;
    *size = src->size;
    return FLASHCL_SUCCESS;
}

/* What a kernel source sees first, in this order: the shared helpers, the variant layer and, for the
   tensor-core sources (names ending in _mma.cl, built on NVIDIA devices only) and the GPU decode
   kernel, the PTX wrappers. The decode kernel is built for every device: cl/ptx.cl compiles to
   nothing when the source says LANE_SHFL=0 (every device but NVIDIA). */
static const char *const prelude[] = {"common.cl", "variants.cl", "ptx.cl"};
#define PRELUDE_MAX (sizeof prelude / sizeof prelude[0])

static size_t prelude_count(const char *name) {
    static const char nvidia_suffix[] = "_mma.cl";
    const size_t n = strlen(name), s = sizeof nvidia_suffix - 1;
    const int ptx = (n >= s && strcmp(name + n - s, nvidia_suffix) == 0) || strcmp(name, "flash_decode.cl") == 0;
    return ptx ? PRELUDE_MAX : PRELUDE_MAX - 1;
}

flashcl_status flashcl__load_kernel_source(flashcl_context *ctx, const char *name, char **out) {
    *out = NULL;
    const size_t count = prelude_count(name);
    char *parts[PRELUDE_MAX + 1] = {NULL};
    size_t lens[PRELUDE_MAX + 1] = {0};
    flashcl_status st = FLASHCL_SUCCESS;
    for (size_t i = 0; i <= count && st == FLASHCL_SUCCESS; ++i)
        st = get_text(ctx, i < count ? prelude[i] : name, &parts[i], &lens[i]);
    size_t total = 1;
    for (size_t i = 0; i <= count; ++i) total += lens[i] + 1;
    char *all = st == FLASHCL_SUCCESS ? malloc(total) : NULL;
    if (st == FLASHCL_SUCCESS && !all)
        st = flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory joining kernel sources");
    if (all) {
        size_t at = 0;
        for (size_t i = 0; i <= count; ++i) {
            memcpy(all + at, parts[i], lens[i]);
            at += lens[i];
            all[at++] = '\n';
        }
        all[at] = '\0';
        *out = all;
    }
    for (size_t i = 0; i <= count; ++i) free(parts[i]);
    return st;
}
