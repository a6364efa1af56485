#include "tile_override.h"

#include <stdlib.h>
#include <string.h>

static int parse_positive(const char *s, size_t n, int *out) {
    if (n == 0 || n > 6) return 0;
    int v = 0;
    for (size_t i = 0; i < n; ++i) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (s[i] - '0');
    }
    if (v < 1) return 0;
    *out = v;
    return 1;
}

flashcl_status flashcl__read_tile_override(flashcl_context *ctx, flashcl__tile_override *out) {
    const char *env = getenv("FLASHCL_TILE");
    if (!env || !*env) {
        out->present = 0;
        out->block_rows = out->block_cols = out->threads_per_row = out->staging = out->kernel = out->max_registers = -1;
        return FLASHCL_SUCCESS;
    }
    return flashcl__parse_tile_spec(ctx, env, out);
}

flashcl_status flashcl__parse_tile_spec(flashcl_context *ctx, const char *spec, flashcl__tile_override *out) {
    out->present = 1;
    out->block_rows = out->block_cols = out->threads_per_row = out->staging = out->kernel = out->max_registers = -1;
    const char *p = spec;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE, "FLASHCL_TILE: \"%.*s\" is not key=value", (int)len, p);
        size_t klen = (size_t)(eq - p), vlen = len - klen - 1;
        const char *val = eq + 1;
        int ok = 1;
        if (klen == 2 && strncmp(p, "br", 2) == 0)
            ok = parse_positive(val, vlen, &out->block_rows);
        else if (klen == 2 && strncmp(p, "bc", 2) == 0)
            ok = parse_positive(val, vlen, &out->block_cols);
        else if (klen == 3 && strncmp(p, "tpr", 3) == 0)
            ok = parse_positive(val, vlen, &out->threads_per_row);
        else if (klen == 4 && strncmp(p, "regs", 4) == 0)
            ok = parse_positive(val, vlen, &out->max_registers);
        else if (klen == 7 && strncmp(p, "staging", 7) == 0) {
            if (vlen == 5 && strncmp(val, "local", 5) == 0)
                out->staging = FLASHCL_STAGING_LOCAL;
            else if (vlen == 6 && strncmp(val, "direct", 6) == 0)
                out->staging = FLASHCL_STAGING_DIRECT;
            else
                ok = 0;
        } else if (klen == 6 && strncmp(p, "kernel", 6) == 0) {
            static const char *const names[] = {"rows", "split", "tiles", "cpu", "decode", "decode_cpu"};
            for (int i = 0; i < 6; ++i)
                if (vlen == strlen(names[i]) && strncmp(val, names[i], vlen) == 0) out->kernel = i;
            ok = out->kernel >= 0;
        } else
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                                 "FLASHCL_TILE: unknown key \"%.*s\" (keys: kernel, br, bc, tpr, staging, regs)",
                                 (int)klen, p);
        if (!ok)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE, "FLASHCL_TILE: bad value in \"%.*s\"", (int)len, p);
        p = comma ? comma + 1 : p + len;
    }
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl__read_bwd_override(flashcl_context *ctx, flashcl__bwd_override *out) {
    out->present = 0;
    out->tiles = 0;
    out->block_rows = out->block_cols = out->slice = -1;
    const char *env = getenv("FLASHCL_BWD_KERNEL");
    if (!env || !*env) return FLASHCL_SUCCESS;
    out->present = 1;
    size_t flen = strcspn(env, ",");
    if (flen == 4 && strncmp(env, "rows", 4) == 0)
        out->tiles = 0;
    else if (flen == 5 && strncmp(env, "tiles", 5) == 0)
        out->tiles = 1;
    else if (flen == 3 && strncmp(env, "cpu", 3) == 0)
        out->tiles = FLASHCL__BWD_KERNEL_CPU;
    else
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE, "FLASHCL_BWD_KERNEL: \"%.*s\" is not rows, tiles or cpu",
                             (int)flen, env);
    const char *p = env + flen;
    if (*p && !out->tiles)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                             "FLASHCL_BWD_KERNEL: the row kernels take no sizes (\"%s\")", env);
    while (*p) {
        ++p; /* the comma */
        size_t len = strcspn(p, ",");
        const char *eq = memchr(p, '=', len);
        if (!eq)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE, "FLASHCL_BWD_KERNEL: \"%.*s\" is not key=value",
                                 (int)len, p);
        size_t klen = (size_t)(eq - p), vlen = len - klen - 1;
        int *field = NULL;
        if (klen == 2 && strncmp(p, "br", 2) == 0)
            field = &out->block_rows;
        else if (klen == 2 && strncmp(p, "bc", 2) == 0)
            field = &out->block_cols;
        else if (klen == 5 && strncmp(p, "slice", 5) == 0)
            field = &out->slice;
        else
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                                 "FLASHCL_BWD_KERNEL: unknown key \"%.*s\" (keys: br, bc, slice)", (int)klen, p);
        if (!parse_positive(eq + 1, vlen, field))
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE, "FLASHCL_BWD_KERNEL: bad value in \"%.*s\"", (int)len,
                                 p);
        p += len;
    }
    if (out->tiles == FLASHCL__BWD_KERNEL_CPU && out->slice > 0)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                             "FLASHCL_BWD_KERNEL: the cpu kernels take br and bc only (\"%s\")", env);
    return FLASHCL_SUCCESS;
}
