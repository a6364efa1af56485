/*
 * Plans of the decode family: the kernel (GPU or CPU), its rows per
 * work-group and keys per tile, and the split count.
 *
 * GPU (cl/flash_decode.cl): 128 work-items; keys per tile 32, 16 or 8 and
 * packed rows per work-group 4, 8 or 16, the largest that fit __local (K and
 * V tiles as float, Q rows, scores) with rows no more than the call has.
 * CPU (cl/flash_decode_cpu.cl): work-groups of one, 16-key chunks, up to 8
 * rows (their Q and output rows stay in float16 vectors).
 *
 * Splits (FlashAttention-2's wave heuristic over "slots", the work-groups the
 * device runs at once: four per compute unit on a GPU, where several resident
 * groups keep enough loads in flight to reach the memory bandwidth, one per
 * core on a CPU): a grid that fills 80% of the slots runs unsplit; else the
 * smallest split count whose wave efficiency is within 85% of the best, at
 * most 128 and at most one split per key tile. desc->num_splits fixes it.
 */
#include "decode.h"
#include "../../tile_override.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPU_WG 128
#define CPU_CHUNK 16
#define MAX_SPLITS 128

static int round_up(int x, int m) { return (x + m - 1) / m * m; }

static int packed_rows(const flashcl_attention_desc *d) {
    return (int)(d->heads_q / d->heads_kv * d->max_seqlen_q);
}

/* __local floats of cl/flash_decode.cl (mirrors its LDK, LDV, LDS). */
static size_t gpu_local_bytes(int rows, int block_n, int d, int dv) {
    const size_t ldk = (size_t)round_up(d, 4) + 4, ldv = (size_t)round_up(dv, 4), lds = (size_t)block_n + 1;
    return 4 * ((size_t)rows * ldk + (size_t)block_n * ldk + (size_t)block_n * ldv + (size_t)rows * lds + 3 * (size_t)rows);
}

/* The GPU shape for the call, or 0 when nothing fits the device's __local. */
static int gpu_shape(const flashcl_context *ctx, const flashcl_attention_desc *d, int *rows, int *block_n) {
    const int dd = (int)d->head_dim, dv = (int)d->head_dim_v, packed = packed_rows(d);
    static const int tiles[] = {32, 16, 8}, row_options[] = {4, 8, 16};
    for (int t = 0; t < 3; ++t) {
        if (gpu_local_bytes(4, tiles[t], dd, dv) > ctx->info.local_mem_bytes) continue;
        int best = 4;
        for (int r = 1; r < 3 && row_options[r - 1] < packed; ++r)
            if (gpu_local_bytes(row_options[r], tiles[t], dd, dv) <= ctx->info.local_mem_bytes) best = row_options[r];
        *rows = best;
        *block_n = tiles[t];
        return 1;
    }
    return 0;
}

static int cpu_rows(const flashcl_attention_desc *d) {
    const int packed = packed_rows(d);
    int r = 1;
    while (r < packed && r < 8) r *= 2;
    return r;
}

int flashcl__decode_splits(const flashcl_context *ctx, const flashcl_attention_desc *d, const flashcl__decode_plan *plan,
                           size_t max_seqlen_k) {
    const long tiles = (long)((max_seqlen_k + (size_t)plan->block_n - 1) / (size_t)plan->block_n);
    const long cap = tiles < 1 ? 1 : (tiles < MAX_SPLITS ? tiles : MAX_SPLITS);
    if (d->num_splits > 0) return (int)((long)d->num_splits < cap ? (long)d->num_splits : cap);
    const int row_blocks = (packed_rows(d) + plan->rows - 1) / plan->rows;
    const double grid = (double)d->batch * (double)d->heads_kv * row_blocks;
    const double slots = (double)ctx->info.compute_units * (plan->cpu ? 1 : 4);
    if (grid >= 0.8 * slots) return 1;
    double eff[MAX_SPLITS + 1], best = 0.0;
    for (long n = 1; n <= cap; ++n) {
        const double waves = grid * (double)n / slots;
        const double whole = waves > (double)(long)waves ? (double)(long)waves + 1.0 : waves;
        eff[n] = waves / whole;
        if (eff[n] > best) best = eff[n];
    }
    for (long n = 1; n <= cap; ++n)
        if (eff[n] >= 0.85 * best) return (int)n;
    return 1;
}

size_t flashcl__decode_scratch_bytes(const flashcl_attention_desc *d, const flashcl__decode_plan *plan, int splits) {
    (void)plan;
    if (splits <= 1) return 0;
    const size_t rows = (size_t)splits * d->batch * d->heads_q * d->max_seqlen_q;
    const size_t pitch = (d->head_dim_v + 15) / 16 * 16;
    return rows * (pitch + 1) * sizeof(float);
}

static flashcl_status kernel_fits(flashcl_context *ctx, cl_kernel k, size_t wg, const char *name) {
    size_t max_wg = 0;
    cl_int err = clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL);
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clGetKernelWorkGroupInfo(decode)");
    if (max_wg < wg)
        return flashcl__fail(ctx, FLASHCL_ERR_NO_PLAN, "%s accepts %zu work-items per group, the plan needs %zu", name,
                             max_wg, wg);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl__merge_kernel(flashcl_context *ctx, const flashcl_attention_desc *d, cl_kernel *out) {
    char variants[256], options[320];
    flashcl__variant_options(d, variants, sizeof variants);
    snprintf(options, sizeof options, "%s", variants);
    cl_program program = NULL;
    flashcl_status st = flashcl__get_program(ctx, "flash_merge.cl", options, &program);
    if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "flash_merge", out);
    return st;
}

static flashcl_status build(flashcl_context *ctx, const flashcl_attention_desc *d, int paged, flashcl_cache_dtype cdt,
                            const char *options, flashcl__decode_plan *p) {
    const char *source = p->cpu ? "flash_decode_cpu.cl" : "flash_decode.cl";
    const char *name = p->cpu ? "flash_decode_cpu" : "flash_decode";
    cl_program program = NULL;
    flashcl_status st = flashcl__get_program(ctx, source, options, &program);
    if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, name, &p->attend);
    if (st == FLASHCL_SUCCESS) st = kernel_fits(ctx, p->attend, p->wg, name);
    if (st == FLASHCL_SUCCESS) st = flashcl__merge_kernel(ctx, d, &p->merge);
    if (st != FLASHCL_SUCCESS) return st;
    cl_ulong local = 0, priv = 0;
    clGetKernelWorkGroupInfo(p->attend, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    clGetKernelWorkGroupInfo(p->attend, ctx->device, CL_KERNEL_PRIVATE_MEM_SIZE, sizeof priv, &priv, NULL);
    flashcl_plan *pub = &p->pub;
    flashcl__copy_str(pub->kernel, sizeof pub->kernel, name);
    pub->block_rows = p->rows;
    pub->block_cols = p->block_n;
    pub->threads_per_row = 1;
    pub->staging = p->cpu ? FLASHCL_STAGING_DIRECT : FLASHCL_STAGING_LOCAL;
    pub->work_group_size = p->wg;
    pub->local_mem_bytes = local ? (size_t)local
                                 : (p->cpu ? 0 : gpu_local_bytes(p->rows, p->block_n, (int)d->head_dim, (int)d->head_dim_v));
    pub->private_mem_bytes = (size_t)priv;
    flashcl__copy_str(pub->origin, sizeof pub->origin, "table");
    flashcl__copy_str(pub->build_options, sizeof pub->build_options, options);
    static const char *const storage[] = {"", ", fp8 e4m3 cache", ", fp8 e5m2 cache"};
    snprintf(pub->reason, sizeof pub->reason,
             "decode family (%s): %zu query rows per sequence, the %zu query heads of each KV head packed as the "
             "rows of one work-group (%d per group), K/V read once per KV head %s%s, split-KV over enough "
             "work-groups to fill the device, partials merged by LSE (flash_merge)",
             p->cpu ? "CPU: work-groups of one, float16 vectors, the cache read in place"
                    : "GPU: K/V tiles in __local, one key per work-item for the scores",
             d->max_seqlen_q, d->heads_q / d->heads_kv, p->rows, paged ? "through the page table" : "from the views",
             storage[cdt]);
    return FLASHCL_SUCCESS;
}

/* The CPU kernel on CPU devices; FLASHCL_TILE=kernel=decode,staging=local|direct picks the GPU (K/V
   tiles in __local) or the CPU kernel (direct reads) anywhere, so each is tested on every device. */
static int use_cpu_kernel(const flashcl_context *ctx) {
    flashcl__tile_override ov;
    if (flashcl__read_tile_override(NULL, &ov) == FLASHCL_SUCCESS && ov.present && ov.kernel == FLASHCL__TILE_KERNEL_DECODE &&
        ov.staging >= 0)
        return ov.staging == FLASHCL_STAGING_DIRECT;
    return ctx->info.is_cpu;
}

flashcl_status flashcl__decode_plan_for(flashcl_context *ctx, const flashcl_attention_desc *d, int paged,
                                        flashcl_cache_dtype cache_dtype, const flashcl__decode_plan **out) {
    const int cpu = use_cpu_kernel(ctx);
    int rows = 0, block_n = CPU_CHUNK;
    if (cpu) rows = cpu_rows(d);
    else if (!gpu_shape(ctx, d, &rows, &block_n))
        return flashcl__fail(ctx, FLASHCL_ERR_NO_PLAN, "decode: no tile for d=%zu, d_v=%zu fits %llu bytes of local memory",
                             d->head_dim, d->head_dim_v, (unsigned long long)ctx->info.local_mem_bytes);
    char variants[256], options[sizeof ((flashcl__decode_plan *)0)->key];
    flashcl__variant_options(d, variants, sizeof variants);
    if (cpu)
        snprintf(options, sizeof options, "-w -D HEAD_DIM=%zu -D ROWS=%d -D CHUNK=%d -D PAGED=%d -D CACHE_DTYPE=%d %s",
                 d->head_dim, rows, block_n, paged, (int)cache_dtype, variants);
    else
        snprintf(options, sizeof options,
                 "-D HEAD_DIM=%zu -D ROWS=%d -D BLOCK_N=%d -D WG_SIZE=%d -D PAGED=%d -D CACHE_DTYPE=%d %s", d->head_dim,
                 rows, block_n, GPU_WG, paged, (int)cache_dtype, variants);
    for (flashcl__decode_plan *p = ctx->family[FLASHCL__FAMILY_DECODE]; p; p = p->next)
        if (strcmp(p->key, options) == 0) {
            *out = p;
            return FLASHCL_SUCCESS;
        }
    flashcl__decode_plan *p = calloc(1, sizeof *p);
    if (!p) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for a decode plan");
    p->cpu = cpu;
    p->rows = rows;
    p->block_n = block_n;
    p->wg = cpu ? 1 : GPU_WG;
    flashcl_status st = build(ctx, d, paged, cache_dtype, options, p);
    if (st != FLASHCL_SUCCESS) {
        if (p->attend) clReleaseKernel(p->attend);
        if (p->merge) clReleaseKernel(p->merge);
        free(p);
        return st;
    }
    flashcl__append_variants(d, p->pub.reason, sizeof p->pub.reason);
    flashcl__copy_str(p->key, sizeof p->key, options);
    p->next = ctx->family[FLASHCL__FAMILY_DECODE];
    ctx->family[FLASHCL__FAMILY_DECODE] = p;
    *out = p;
    return FLASHCL_SUCCESS;
}

void flashcl__decode_release(flashcl_context *ctx) {
    flashcl__decode_plan *p = ctx->family[FLASHCL__FAMILY_DECODE];
    while (p) {
        flashcl__decode_plan *next = p->next;
        if (p->attend) clReleaseKernel(p->attend);
        if (p->merge) clReleaseKernel(p->merge);
        free(p);
        p = next;
    }
    ctx->family[FLASHCL__FAMILY_DECODE] = NULL;
}

int flashcl__decode_covers(flashcl_context *ctx, const flashcl_attention_desc *d, char *why, size_t cap) {
    flashcl__tile_override ov;
    if (flashcl__read_tile_override(NULL, &ov) != FLASHCL_SUCCESS) {
        snprintf(why, cap, "FLASHCL_TILE does not parse");
        return 0;
    }
    if (ov.present) {
        if (ov.kernel != FLASHCL__TILE_KERNEL_DECODE) snprintf(why, cap, "FLASHCL_TILE forces another family");
        return ov.kernel == FLASHCL__TILE_KERNEL_DECODE;
    }
    if (d->max_seqlen_q > FLASHCL__DECODE_MAX_SEQLEN_Q) {
        snprintf(why, cap, "seqlen_q %zu > %d (the decode family is for short queries)", d->max_seqlen_q,
                 FLASHCL__DECODE_MAX_SEQLEN_Q);
        return 0;
    }
    if (d->bias.buffer || d->mask.buffer || d->block_mask.buffer || d->dropout_p > 0.0f) {
        snprintf(why, cap, "the decode family has no bias, masks or dropout");
        return 0;
    }
    int rows = 0, block_n = 0;
    if (!use_cpu_kernel(ctx) && !gpu_shape(ctx, d, &rows, &block_n)) {
        snprintf(why, cap, "no decode tile for d=%zu fits the device's local memory", d->head_dim);
        return 0;
    }
    return 1;
}
