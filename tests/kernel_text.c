/*
 * Writes the OpenCL C programs the library builds, for the offline compile
 * check (tests/compile_offline.cmake): each portable kernel source joined
 * with its preludes by the library itself (flashcl__load_kernel_source),
 * under the -D options of each kernel family. A kernel that takes the
 * variant layer is written three times: plain float32, then with every
 * variant switch on (the switches the library derives from a descriptor
 * with every feature set: flashcl__variant_options) in float16 and in
 * bfloat16 storage, with d = 72 and d_v = 40 (neither a multiple of
 * the 16-wide slices, so the partial-slice code is compiled too). The tensor-core sources and their PTX
 * prelude (*_mma.cl, ptx.cl: inline PTX) are left out: only NVIDIA's compiler takes them
 * (flash_decode.cl carries ptx.cl too, compiled to nothing by its LANE_SHFL=0).
 *
 *   kernel_text OUT_DIR   writes OUT_DIR/<name>.cl and OUT_DIR/<name>.options
 * No OpenCL device is needed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct family {
    const char *name;    /* output file stem */
    const char *source;  /* cl/<source> */
    const char *options; /* the planner's knobs for one representative shape */
    int variants;        /* 1: the kernel takes cl/variants.cl's switches */
} family;

/* One entry per kernel family and the knobs its planner sets (src/plan_*.c). */
static const family k_families[] = {
    {"fwd_rows", "flash_fwd_rows.cl", "-D BLOCK_M=32 -D BLOCK_N=32 -D STAGE_LOCAL=1", 1},
    {"fwd_split", "flash_fwd_split.cl", "-D BLOCK_M=16 -D BLOCK_N=32 -D THREADS_PER_ROW=4", 0},
    {"fwd_tiles", "flash_fwd_tiles.cl", "-D BLOCK_M=64 -D BLOCK_N=64 -D TILE_M=4 -D TILE_N=4", 1},
    {"bwd_rows", "flash_bwd.cl", "-D BLOCK_M=32 -D BLOCK_N=32", 1},
    {"bwd_tiles", "flash_bwd_tiles.cl", "-D BLOCK_M=64 -D BLOCK_N=64 -D ROW_SLICE=16", 1},
    {"cpu", "flash_cpu.cl", "-w -D GROUPS=2 -D CHUNK=48 -D STEP=6", 1},
    {"standard", "standard.cl", "-D TILE=64 -D WPT=4 -D TILE_K=16 -D SOFTMAX_WG=256", 0},
    {"dropout_mask", "dropout_mask.cl", "-D VARLEN=1", 0},
    {"decode", "flash_decode.cl",
     "-D ROWS=8 -D LANES=16 -D VEC=8 -D UNROLL=4 -D WG_SIZE=128 -D ALIGNED=1 -D LANE_SHFL=0 -D PAGED=1 -D "
     "CACHE_DTYPE=1",
     1},
    {"decode_cpu", "flash_decode_cpu.cl", "-D ROWS=4 -D CHUNK=16 -D PAGED=1 -D CACHE_DTYPE=2", 1},
    {"merge", "flash_merge.cl", "", 1},
    {"kv_append", "kv_append.cl", "-D ROTARY_DIM=32 -D INTERLEAVED=1 -D CACHE_DTYPE=1 -D PAGED=1", 1},
};

static int write_file(const char *dir, const char *name, const char *ext, const char *text) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "kernel_text: cannot write %s\n", path);
        return 0;
    }
    int ok = fputs(text, f) >= 0;
    ok &= fclose(f) == 0;
    return ok;
}

/* The -D switches of a call with every variant on, in `dtype` storage (flashcl__variant_options). */
static void all_variant_options(flashcl_dtype dtype, char *out, size_t cap) {
    /* Only compared against NULL by flashcl__variant_options: nothing is ever read through it. */
    static char placeholder;
    cl_mem some = (cl_mem)(void *)&placeholder;
    flashcl_attention_desc d;
    d = (flashcl_attention_desc)FLASHCL_ATTENTION_DESC_INIT;
    d.dtype = dtype;
    d.head_dim = 72;
    d.head_dim_v = 40;
    d.softcap = 30.0f;
    d.alibi_slopes = some;
    d.bias.buffer = some;
    d.mask.buffer = some;
    d.block_mask.buffer = some;
    d.sinks = some;
    d.dropout_p = 0.1f;
    d.cu_seqlens_q = some;
    d.cu_seqlens_k = some;
    flashcl__variant_options(&d, out, cap);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: kernel_text OUT_DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    int written = 0;
    for (size_t i = 0; i < sizeof k_families / sizeof k_families[0]; ++i) {
        const family *f = &k_families[i];
        char *text = NULL;
        if (flashcl__load_kernel_source(NULL, f->source, &text) != FLASHCL_SUCCESS) {
            fprintf(stderr, "kernel_text: no kernel source %s\n", f->source);
            return 1;
        }
        static const struct {
            const char *suffix;
            int variants;
            flashcl_dtype dtype;
        } forms[] = {{"plain", 0, FLASHCL_DTYPE_F32},
                     {"variants_f16", 1, FLASHCL_DTYPE_F16},
                     {"variants_bf16", 1, FLASHCL_DTYPE_BF16}};
        for (size_t v = 0; v < sizeof forms / sizeof forms[0]; ++v) {
            if (forms[v].variants && !f->variants) continue;
            char variant[512] = "", options[1024], name[128];
            if (forms[v].variants) all_variant_options(forms[v].dtype, variant, sizeof variant);
            snprintf(options, sizeof options, "-D HEAD_DIM=%d %s %s\n", forms[v].variants ? 72 : 64, f->options,
                     variant);
            snprintf(name, sizeof name, "%s_%s", f->name, forms[v].suffix);
            if (!write_file(dir, name, "cl", text) || !write_file(dir, name, "options", options)) {
                free(text);
                return 1;
            }
            ++written;
        }
        free(text);
    }
    printf("kernel_text: %d programs written to %s\n", written, dir);
    return 0;
}
