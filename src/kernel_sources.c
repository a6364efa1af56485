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
    if (!f) return flashcl__fail(ctx, FLASHCL_ERR_KERNEL_SOURCE, "cannot open kernel source %s (FLASHCL_KERNEL_DIR)", path);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *p = cap <= MAX_SOURCE_BYTES ? realloc(buf, cap) : NULL;
            if (!p) {
                free(buf);
                fclose(f);
                return flashcl__fail(ctx, FLASHCL_ERR_KERNEL_SOURCE, "kernel source %s is too large or out of memory", path);
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

/* Every kernel sees these first, in this order: the shared helpers, then the variant layer. */
static const char *const prelude[] = {"common.cl", "variants.cl"};
#define PRELUDE_COUNT (sizeof prelude / sizeof prelude[0])

flashcl_status flashcl__load_kernel_source(flashcl_context *ctx, const char *name, char **out) {
    *out = NULL;
    char *parts[PRELUDE_COUNT + 1] = {NULL};
    size_t lens[PRELUDE_COUNT + 1] = {0};
    flashcl_status st = FLASHCL_SUCCESS;
    for (size_t i = 0; i <= PRELUDE_COUNT && st == FLASHCL_SUCCESS; ++i)
        st = get_text(ctx, i < PRELUDE_COUNT ? prelude[i] : name, &parts[i], &lens[i]);
    size_t total = 1;
    for (size_t i = 0; i <= PRELUDE_COUNT; ++i) total += lens[i] + 1;
    char *all = st == FLASHCL_SUCCESS ? malloc(total) : NULL;
    if (st == FLASHCL_SUCCESS && !all)
        st = flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory joining kernel sources");
    if (all) {
        size_t at = 0;
        for (size_t i = 0; i <= PRELUDE_COUNT; ++i) {
            memcpy(all + at, parts[i], lens[i]);
            at += lens[i];
            all[at++] = '\n';
        }
        all[at] = '\0';
        *out = all;
    }
    for (size_t i = 0; i <= PRELUDE_COUNT; ++i) free(parts[i]);
    return st;
}
