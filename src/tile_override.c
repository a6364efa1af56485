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

static void clear(flashcl__tile_override *out, int present) {
    out->present = present;
    out->block_rows = out->block_cols = out->threads_per_row = out->staging = out->kernel = out->max_registers = -1;
    out->lanes = out->work_group = out->heads = out->warps = out->row_tiles = out->q_local = -1;
}

flashcl_status flashcl__read_tile_override(flashcl_context *ctx, flashcl__tile_override *out) {
    const char *env = getenv("FLASHCL_TILE");
    if (!env || !*env) {
        clear(out, 0);
        return FLASHCL_SUCCESS;
    }
    return flashcl__parse_tile_spec(ctx, env, out);
}

/* The keys whose value is a positive count, and where each goes. */
static int *count_field(flashcl__tile_override *out, const char *key, size_t klen) {
    static const char *const names[] = {"br", "bc", "tpr", "regs", "lanes", "wg", "heads", "warps", "mt"};
    int *const fields[] = {&out->block_rows, &out->block_cols, &out->threads_per_row, &out->max_registers, &out->lanes,
                           &out->work_group, &out->heads,      &out->warps,           &out->row_tiles};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
        if (klen == strlen(names[i]) && strncmp(key, names[i], klen) == 0) return fields[i];
    return NULL;
}

flashcl_status flashcl__parse_tile_spec(flashcl_context *ctx, const char *spec, flashcl__tile_override *out) {
    clear(out, 1);
    const char *p = spec;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE, "FLASHCL_TILE: \"%.*s\" is not key=value", (int)len, p);
        size_t klen = (size_t)(eq - p), vlen = len - klen - 1;
        const char *val = eq + 1;
        int ok = 1, *count = count_field(out, p, klen);
        if (count)
            ok = parse_positive(val, vlen, count);
        else if (klen == 2 && strncmp(p, "ql", 2) == 0) {
            ok = vlen == 1 && (val[0] == '0' || val[0] == '1');
            out->q_local = val[0] - '0';
        } else if (klen == 7 && strncmp(p, "staging", 7) == 0) {
            if (vlen == 5 && strncmp(val, "local", 5) == 0)
                out->staging = FLASHCL_STAGING_LOCAL;
            else if (vlen == 6 && strncmp(val, "direct", 6) == 0)
                out->staging = FLASHCL_STAGING_DIRECT;
            else
                ok = 0;
        } else if (klen == 6 && strncmp(p, "kernel", 6) == 0) {
            static const char *const names[] = {"rows", "split", "tiles", "cpu", "decode", "decode_cpu", "mma"};
            for (int i = 0; i < 7; ++i)
                if (vlen == strlen(names[i]) && strncmp(val, names[i], vlen) == 0) out->kernel = i;
            ok = out->kernel >= 0;
        } else
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                                 "FLASHCL_TILE: unknown key \"%.*s\" (keys: kernel, br, bc, tpr, staging, regs, lanes, "
                                 "wg, heads, warps, mt, ql)",
                                 (int)klen, p);
        if (!ok)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE, "FLASHCL_TILE: bad value in \"%.*s\"", (int)len, p);
        p = comma ? comma + 1 : p + len;
    }
    /* A knob of one kernel given to another would be silently dropped: name it instead. */
    const struct {
        int given, kernel;
        const char *key, *names;
    } owned[] = {
        {out->lanes > 0, FLASHCL__TILE_KERNEL_DECODE, "lanes", "kernel=decode"},
        {out->work_group > 0, FLASHCL__TILE_KERNEL_DECODE, "wg", "kernel=decode"},
        {out->heads > 0, FLASHCL__TILE_KERNEL_DECODE_CPU, "heads", "kernel=decode_cpu"},
        {out->warps > 0, FLASHCL__TILE_KERNEL_MMA, "warps", "kernel=mma"},
        {out->row_tiles > 0, FLASHCL__TILE_KERNEL_MMA, "mt", "kernel=mma"},
        {out->q_local >= 0, FLASHCL__TILE_KERNEL_MMA, "ql", "kernel=mma"},
    };
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; ++i)
        if (owned[i].given && out->kernel != owned[i].kernel)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE, "FLASHCL_TILE: %s= belongs to %s (\"%s\")",
                                 owned[i].key, owned[i].names, spec);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl__read_bwd_override(flashcl_context *ctx, flashcl__bwd_override *out) {
    out->present = 0;
    out->tiles = 0;
    out->block_rows = out->block_cols = out->slice = out->fused = -1;
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
        else if (klen == 5 && strncmp(p, "fused", 5) == 0) {
            if (vlen != 1 || (eq[1] != '0' && eq[1] != '1'))
                return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE, "FLASHCL_BWD_KERNEL: fused is 0 or 1 (\"%.*s\")",
                                     (int)len, p);
            out->fused = eq[1] - '0';
            p += len;
            continue;
        } else
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                                 "FLASHCL_BWD_KERNEL: unknown key \"%.*s\" (keys: br, bc, slice, fused)", (int)klen, p);
        if (!parse_positive(eq + 1, vlen, field))
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE, "FLASHCL_BWD_KERNEL: bad value in \"%.*s\"", (int)len,
                                 p);
        p += len;
    }
    if (out->tiles == FLASHCL__BWD_KERNEL_CPU && out->slice > 0)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                             "FLASHCL_BWD_KERNEL: the cpu kernels take br, bc and fused only (\"%s\")", env);
    if (out->tiles != FLASHCL__BWD_KERNEL_CPU && out->fused >= 0)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE, "FLASHCL_BWD_KERNEL: fused= belongs to cpu (\"%s\")", env);
    return FLASHCL_SUCCESS;
}
