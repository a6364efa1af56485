/*
 * Plans of the decode family: the kernel (GPU or CPU), its rows per
 * work-group and keys per tile, and the split count.
 *
 * GPU (cl/flash_decode.cl, gpu_shape_for): key groups of lanes, each lane a
 * 16-byte vector of a K/V row (8 bytes for fp8), enough lanes for the row in
 * one pass, 128 work-items a group; on NVIDIA half those lanes (two vectors
 * each) and 256 work-items. Packed rows per work-group up to 16 while Q and
 * the outputs stay within 128 registers; 2 keys per group and step.
 * Its tensor-core form (DECODE_MMA, mma_shape_for): a warp per key group, 8 packed rows, 4 warps;
 * on NVIDIA sm_89+ for fp8 caches with d >= 128 (mma_wanted says why), FLASHCL_DECODE_MMA otherwise.
 * CPU (cl/flash_decode_cpu.cl): work-groups of one, 16-key chunks, up to 8
 * rows (their Q and output rows stay in float16 vectors), up to 8 KV heads
 * per work-item (cpu_heads_capacity, flashcl__decode_heads).
 *
 * Splits (FlashAttention-2's wave heuristic over "slots", the work-groups the
 * device runs at once: four per compute unit on a GPU, where several resident
 * groups keep enough loads in flight to reach the memory bandwidth, one per
 * core on a CPU): a grid that fills 80% of the slots runs unsplit; else the
 * smallest split count whose wave efficiency is within 85% of the best, at
 * most 128 and at most one split per key tile. desc->num_splits fixes it.
 *
 * The knobs above are the formula's; FLASHCL_TILE or a tuned plan (choice.c) sets them instead:
 * kernel=decode,br=rows,bc=keys per group and step,lanes=N,wg=N[,regs=N] or
 * kernel=decode_cpu,br=rows,bc=keys per chunk,heads=N.
 */
#include "decode.h"
#include "../../tile_override.h"
#include "../nvidia/nvidia.h"
#include "../../kvcache_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPU_WG 128
#define CPU_CHUNK 16
#define MAX_SPLITS 128

static int packed_rows(const flashcl_attention_desc *d) { return (int)(d->heads_q / d->heads_kv * d->max_seqlen_q); }

/* The GPU kernel's shape (cl/flash_decode.cl's knobs). */
typedef struct gpu_shape {
    int rows, lanes, vec, unroll, shfl, block_n;
    int fp8_cvt;       /* NVIDIA sm_89+: fp8 decoded by cvt.rn.f16x2.e4m3x2 / e5m2x2 */
    int stages;        /* NVIDIA sm_80+: steps of K/V in the kernel's cp.async ring (KV_STAGES), 0 none */
    int fused;         /* NVIDIA: the last split's group merges (FUSED_MERGE) */
    int wg;            /* work-items per group (WG_SIZE) */
    int max_registers; /* NVIDIA register cap (-cl-nv-maxrregcount), 0 none */
    size_t local_bytes;
    int mma;     /* DECODE_MMA: the packed rows as a tensor-core tile (rows 8, a warp per key group) */
    int mma_f16; /* its operands: float16 (f16 storage, fp8 caches) or bfloat16 */
} gpu_shape;

#define MMA_WG 128 /* the tensor-core form's work-items per group: 4 warps */

/* FLASHCL_DECODE_MMA: "0" keeps the lane kernel; "1" takes the tensor-core form wherever its shape
   is legal: off NVIDIA emulated (how the tests run it on POCL), on NVIDIA sm_80+ (sm_89+ with an
   fp8 cache, whose conversion it uses; never the sm_75 form); ",wg=N" and ",unroll=N" after either
   set its work-group and 16-key chunks per warp and step (measurement aids, as
   FLASHCL_DECODE_STAGES). Any other value is ignored, as if unset. Unset: mma_wanted's choice. */
/* FLASHCL_DECODE_FP8_CVT=0: fp8 decoded by moving bits even where NVIDIA's conversion exists
   (a measurement aid, as FLASHCL_DECODE_STAGES). */
static int fp8_cvt_allowed(void) {
    const char *env = getenv("FLASHCL_DECODE_FP8_CVT");
    return !(env && env[0] == '0' && env[1] == '\0');
}

typedef struct mma_request {
    int mode; /* -1 unset, 0 off, 1 on */
    int wg, unroll;
} mma_request;

static mma_request mma_request_from_env(void) {
    mma_request r = {-1, 0, 0};
    const char *env = getenv("FLASHCL_DECODE_MMA");
    /* Exactly "0" or "1", alone or before the knobs: "off" or " 1" must not turn the form on. */
    if (!env || (env[0] != '0' && env[0] != '1') || (env[1] != '\0' && env[1] != ',')) return r;
    r.mode = env[0] - '0';
    const char *wg = strstr(env, "wg="), *unroll = strstr(env, "unroll=");
    if (wg) r.wg = atoi(wg + 3);
    if (unroll) r.unroll = atoi(unroll + 7);
    if (r.wg != 32 && r.wg != 64 && r.wg != 128 && r.wg != 256) r.wg = 0;
    if (r.unroll != 1 && r.unroll != 2 && r.unroll != 4) r.unroll = 0;
    return r;
}

/* Whether a call's grid, before the split, is at most a quarter of the compute units (b = 1 to 4
   with 8 KV heads on the H200's 132, what was measured: the split then fills the device in about
   one wave of work-groups), with an automatic split count: a fixed num_splits keeps one plan
   whatever the batch, so that a sequence's rows stay bitwise the same in any batch. Such calls
   are bound by the K/V loads each work-group keeps in flight, not by the device's bandwidth. */
static int small_grid(const flashcl_context *ctx, const flashcl_attention_desc *d, int rows) {
    const size_t row_blocks = ((size_t)packed_rows(d) + (size_t)rows - 1) / (size_t)rows;
    return d->num_splits == 0 && 4 * d->batch * d->heads_kv * row_blocks <= (size_t)ctx->info.compute_units;
}

/* Whether the call's shape fits the tensor-core form (cl/flash_decode.cl, DECODE_MMA): 16-bit Q
   (float32 Q keeps the lane kernel's float32 dots), rows on 16 bytes, and head dims that give
   each lane whole 8-byte runs of K and V rows. */
static int mma_shape_legal(const flashcl_attention_desc *d, flashcl_cache_dtype cdt, int aligned) {
    const size_t dd = d->head_dim, dv = d->head_dim_v;
    if (!aligned || d->dtype == FLASHCL_DTYPE_F32 || dd > 256 || dv > 256) return 0;
    return cdt == FLASHCL_CACHE_DTYPE_SAME ? dd % 16 == 0 && dv % 32 == 0 : dd % 32 == 0 && dv % 64 == 0;
}

/* Whether the tensor-core form runs this call: not under decode knobs (FLASHCL_TILE or a tuned entry
   for the lane kernel), a legal shape, NVIDIA sm_80+ (sm_89+ for fp8, whose conversion it uses), and
   an fp8 cache with d >= 128, unless FLASHCL_DECODE_MMA says otherwise; off NVIDIA only when it says 1.
   Measured on the H200 (hq32 hkv8, b32 sk8192, README "Decode and KV cache"), form against lane
   kernel: fp8 e4m3 d = 256 1.50x (0.379 against 0.567 ms), d = 128 1.06x, e5m2 d = 128 1.10x; but
   fp8 d = 64 0.70x, and 16-bit storage 0.94-0.96x at d = 128 and slower at 64 and 256, where the
   lane kernel already reads at 85% of the bandwidth. Small grids (b1 sk32768) took the lane kernel
   at d = 128 (the form ran 0.0584 against 0.0556 ms) until the form split to four groups a compute
   unit (groups_per_cu below): then 0.0512 against 0.0555, and b4 sk8192 0.0477 against 0.0507. */
static int mma_wanted(flashcl_context *ctx, const flashcl_attention_desc *d, flashcl_cache_dtype cdt, int aligned,
                      int knobs, const mma_request *req) {
    if (knobs || req->mode == 0 || !mma_shape_legal(d, cdt, aligned)) return 0;
    if (!flashcl__mma_supported(ctx, NULL)) return req->mode == 1 && strstr(ctx->info.vendor, "NVIDIA") == NULL;
    const flashcl__nvidia_state *nv = flashcl__nvidia_state_of(ctx);
    if (!nv || nv->sm75 || nv->cc < 80 || (cdt != FLASHCL_CACHE_DTYPE_SAME && nv->cc < 89)) return 0;
    if (req->mode == 1) return 1;
    return cdt != FLASHCL_CACHE_DTYPE_SAME && d->head_dim >= 128;
}

/* The tensor-core form's shape; 0 when its __local does not fit (the lane kernel plans then). */
static int mma_shape_for(flashcl_context *ctx, const flashcl_attention_desc *d, flashcl_cache_dtype cdt,
                         const mma_request *req, gpu_shape *g) {
    memset(g, 0, sizeof *g);
    g->mma = 1;
    g->mma_f16 = cdt != FLASHCL_CACHE_DTYPE_SAME || d->dtype == FLASHCL_DTYPE_F16;
    g->rows = 8;
    g->lanes = 32;
    g->vec = 8; /* unused by the form */
    g->shfl = flashcl__mma_supported(ctx, NULL);
    g->fp8_cvt = g->shfl && cdt != FLASHCL_CACHE_DTYPE_SAME && fp8_cvt_allowed();
    g->fused = g->shfl;
    g->wg = req->wg > 0 && (size_t)req->wg <= ctx->info.max_work_group_size ? req->wg : MMA_WG;
    if ((size_t)g->wg > ctx->info.max_work_group_size) return 0; /* a device without 4-warp groups */
    g->unroll = req->unroll > 0 ? req->unroll : 1;
    g->block_n = g->wg / 32 * g->unroll * 16;
    /* The epilogue's states and output rows, the fused merge's weights, the emulation's exchange. */
    size_t floats = (size_t)(g->wg / 32) * (d->head_dim_v + 2);
    if (g->fused) floats += 1 + (size_t)g->rows * (MAX_SPLITS + 1);
    if (!g->shfl) floats += (size_t)g->wg * 7;
    g->local_bytes = floats * sizeof(float);
    return g->local_bytes <= ctx->info.local_mem_bytes;
}

static int pow2_at_least(int x) {
    int p = 1;
    while (p < x) p *= 2;
    return p;
}

/* __local bytes of cl/flash_decode.cl: the epilogue's per-group states and output rows, and,
   without shuffles, every work-item's partial dots. */
static size_t gpu_local(const gpu_shape *g, int dd, int dv, int elem) {
    const size_t groups = (size_t)(g->wg / g->lanes), chunk = (size_t)g->lanes * (size_t)g->vec;
    const size_t dvp = ((size_t)dv + chunk - 1) / chunk * chunk;
    size_t floats = groups * (dvp + 2);
    if (!g->shfl) floats += ((size_t)g->wg + groups) * (size_t)g->unroll * (size_t)g->rows;
    if (g->fused) floats += 1 + (size_t)g->rows * (MAX_SPLITS + 1); /* flag, each split's weight and the totals */
    const size_t chunks = ((size_t)dd + chunk - 1) / chunk + ((size_t)dv + chunk - 1) / chunk;
    const size_t ring = (size_t)g->stages * (size_t)g->unroll * chunks * (size_t)g->wg * (size_t)(g->vec * elem);
    return floats * sizeof(float) + ring;
}

/* Loads of 16 bytes per lane: VEC elements. Lanes per key: enough for the
   longer head dim in one pass, at most a warp (half that on NVIDIA, below). Rows: the call's packed rows (a power of two),
   while a work-item's Q and output elements stay within 64 + 64 registers. UNROLL: keys per
   group per step (below); less without shuffles when the exchange would not fit __local.
   0 when nothing fits the device. ov: the knobs FLASHCL_TILE or a tuned plan set (choice.c). */
static int gpu_shape_for(flashcl_context *ctx, const flashcl_attention_desc *d, flashcl_cache_dtype cdt, int paged,
                         int aligned, const flashcl__tile_override *ov, gpu_shape *g) {
    const int knobs = ov->present && ov->kernel == FLASHCL__TILE_KERNEL_DECODE;
    const mma_request req = mma_request_from_env();
    if (mma_wanted(ctx, d, cdt, aligned, knobs, &req) && mma_shape_for(ctx, d, cdt, &req, g)) return 1;
    memset(g, 0, sizeof *g);
    const int dd = (int)d->head_dim, dv = (int)d->head_dim_v, packed = packed_rows(d);
    /* fp8 caches load 8 bytes a lane (8 elements, as 16-bit storage does in 16 bytes): a lane's Q
       and output elements, the bulk of its registers, stay as many as for 16-bit storage. With
       16 fp8 elements a lane (one 16-byte load) they doubled: 247 registers against 165 on the
       H200, two resident groups a compute unit instead of three, and fp8 ran at 0.77x bf16's
       key rate. */
    const int elem = cdt != FLASHCL_CACHE_DTYPE_SAME ? 1 : (int)flashcl_dtype_size(d->dtype);
    g->vec = elem == 4 ? 4 : 8;
    const int longer = dd > dv ? dd : dv;
    g->lanes = pow2_at_least((longer + g->vec - 1) / g->vec);
    if (g->lanes > 32) g->lanes = 32;
    g->shfl = flashcl__mma_supported(ctx, NULL);
    /* NVIDIA (shuffles): half the lanes, each taking two vectors of a row, in groups of 256. One
       shuffle level less per key and twice the keys in flight per work-group; on the H200 this ran
       every decode shape measured 1.02-1.40x faster (d 64/128/256, f32/f16/bf16/fp8, b1 sk32768
       and b32 sk8192, hq32 hkv8; MHA and a GQA group of 8 too), README "Decode and KV cache". */
    const int nv_shape = g->shfl && g->lanes > 2;
    if (nv_shape) g->lanes /= 2;
    if (knobs && ov->lanes > 0) g->lanes = ov->lanes;
    g->wg = knobs && ov->work_group > 0 ? ov->work_group : nv_shape ? 2 * GPU_WG : GPU_WG;
    const int chunk = g->lanes * g->vec, per_row = ((dd + chunk - 1) / chunk + (dv + chunk - 1) / chunk) * g->vec;
    g->rows = 1;
    while (g->rows < packed && g->rows < 16 && 2 * g->rows * per_row <= 128) g->rows *= 2;
    /* Raw K/V of two steps (the one computed and the one in flight) take 8 registers per key
       and chunk: UNROLL keys so that they stay near 32 beside Q and the outputs, and never more
       than 2 (H200, bf16 d=128, 4 rows: 2 keys 161 registers and 2813 GB/s at b=32, 4 keys 223
       registers and 1250 GB/s; with the cp.async ring, which holds no raw K/V in registers, 4
       keys still ran 2.8x slower than 2, bf16 and fp8 alike). */
    const int raw_per_key = 2 * (g->vec * elem / 4) * (per_row / g->vec);
    /* NVIDIA's halved lanes ran 2 keys at 32 and 64 raw registers a key (bf16 d = 64..256, f32
       d = 128 and 256, fp8 d = 128: the README's decode figures); beyond that (MLA's 576/512,
       not measured) 1, as before. */
    g->unroll = raw_per_key <= (nv_shape ? 64 : 16) ? 2 : 1;
    /* A small grid (b = 1) on NVIDIA, 16-bit storage, d and d_v <= 128: 2 rows and 4 keys per
       group and step, twice the loads in flight per work-item and twice the work-groups per KV
       head. H200, hq32 hkv8, b1 sk32768, rows x keys: bf16 d = 128 0.0514 ms against 0.0553
       (formula 4 x 2), 0.0627 (2 x 2), 0.0741 (1 x 4), 0.101 (4 x 4); d = 64 0.0394 against 0.0399;
       at b4 sk8192 level (0.0515 against 0.0517). Not at d = 256 (2 x 4 ran 0.247 against 0.090:
       its registers) nor for fp8 caches (0.0570 against 0.0556). */
    if (!knobs && nv_shape && elem == 2 && longer <= 128 && g->rows >= 4 && g->unroll == 2 &&
        small_grid(ctx, d, g->rows)) {
        g->rows = 2;
        g->unroll = 4;
    }
    g->max_registers = 0;
    /* kernel=decode,br=R,bc=U[,regs=N] sets rows, keys per group and the register cap (tuning, tests). */
    if (knobs) {
        if (ov->block_rows > 0) g->rows = pow2_at_least(ov->block_rows < 16 ? ov->block_rows : 16);
        if (ov->block_cols > 0) g->unroll = pow2_at_least(ov->block_cols < 16 ? ov->block_cols : 16);
        if (ov->max_registers > 0) g->max_registers = ov->max_registers;
    }
    const flashcl__nvidia_state *nv = flashcl__nvidia_state_of(ctx);
    g->fp8_cvt = g->shfl && cdt != FLASHCL_CACHE_DTYPE_SAME && nv->cc >= 89 && fp8_cvt_allowed();
    g->fused = g->shfl;
    /* The ring where cp.async exists (sm_80+, not the sm_75 form) and the rows load as whole
       vectors: 4 steps, 3 in flight, while they fit 36 KiB. Not for paged caches: there the
       H200 ran b32 sk8192 pages of 16 at 0.478 ms with it against 0.404 without. */
    g->stages =
        g->shfl && !nv->sm75 && nv->cc >= 80 && aligned && !paged && dd % g->vec == 0 && dv % g->vec == 0 ? 4 : 0;
    const char *stages_env = getenv("FLASHCL_DECODE_STAGES"); /* measurement aid, see README */
    if (g->stages && stages_env) g->stages = atoi(stages_env);
    if (g->stages != 0 && g->stages != 2 && g->stages != 3 && g->stages != 4 && g->stages != 6 && g->stages != 8)
        g->stages = 4;
    while (g->stages > 2 && gpu_local(g, dd, dv, elem) > 36864)
        g->stages = g->stages == 6 || g->stages == 8 ? 4 : g->stages - 1;
    for (;;) {
        g->local_bytes = gpu_local(g, dd, dv, elem);
        if (g->local_bytes <= ctx->info.local_mem_bytes) break;
        if (g->stages > 2)
            --g->stages;
        else if (g->stages)
            g->stages = 0;
        else if (g->unroll > 1)
            g->unroll /= 2;
        else if (g->rows > 1)
            g->rows /= 2;
        else
            return 0;
    }
    g->block_n = (g->wg / g->lanes) * g->unroll;
    return 1;
}

static int cpu_rows(const flashcl_attention_desc *d) {
    const int packed = packed_rows(d);
    int r = 1;
    while (r < packed && r < 8) r *= 2;
    return r;
}

/* The most KV heads one CPU work-item takes (HEADS, the size of its state arrays): as many (up to
   8, a power of two) as keep their rows' state, Q and the output accumulators in float16 vectors,
   within 32 KiB (an L1 data cache). It depends only on d, d_v and the rows, never on h_kv, so the
   build does not either; each call then takes flashcl__decode_heads of them. One pass over the
   keys reads a key's rows of those heads, neighbours in a [.., h_kv, d] cache, as one run
   (cl/flash_decode_cpu.cl says why). */
static int cpu_heads_capacity(const flashcl_attention_desc *d, int rows) {
    const size_t per_head = (size_t)rows * ((d->head_dim + 15) / 16 + (d->head_dim_v + 15) / 16) * 64;
    int h = 8;
    while (h > 1 && (size_t)h * per_head > 32768) h /= 2;
    return h;
}

int flashcl__decode_heads(const flashcl_attention_desc *d, const flashcl__decode_plan *plan) {
    int h = plan->heads < (int)d->heads_kv ? plan->heads : (int)d->heads_kv;
    while (h > 1 && d->heads_kv % (size_t)h != 0) --h; /* the largest that divides h_kv */
    return h;
}

int flashcl__decode_splits(const flashcl_context *ctx, const flashcl_attention_desc *d,
                           const flashcl__decode_plan *plan, size_t max_seqlen_k) {
    const long tiles = (long)((max_seqlen_k + (size_t)plan->block_n - 1) / (size_t)plan->block_n);
    const long cap = tiles < 1 ? 1 : (tiles < MAX_SPLITS ? tiles : MAX_SPLITS);
    /* Compared as size_t: a num_splits of 2^63 or more cast to long was negative (a split count
       of 0 or less, a hang or an abort). */
    if (d->num_splits > 0) return (int)(d->num_splits < (size_t)cap ? (long)d->num_splits : cap);
    const int row_blocks = (packed_rows(d) + plan->rows - 1) / plan->rows;
    const double grid = (double)d->batch * (double)(d->heads_kv / (size_t)flashcl__decode_heads(d, plan)) * row_blocks;
    const double slots = (double)ctx->info.compute_units * plan->groups_per_cu;
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

size_t flashcl__decode_merge_counts(const flashcl_attention_desc *d, const flashcl__decode_plan *plan) {
    return d->batch * (d->heads_kv / (size_t)flashcl__decode_heads(d, plan)) *
           (size_t)((packed_rows(d) + plan->rows - 1) / plan->rows);
}

size_t flashcl__decode_scratch_bytes(const flashcl_attention_desc *d, const flashcl__decode_plan *plan, int splits) {
    if (splits <= 1) return 0;
    const size_t rows = (size_t)splits * d->batch * d->heads_q * d->max_seqlen_q;
    const size_t pitch = (d->head_dim_v + 15) / 16 * 16;
    const size_t counts = plan->fused_merge ? flashcl__decode_merge_counts(d, plan) * sizeof(cl_int) : 0;
    return rows * (pitch + 1) * sizeof(float) + counts;
}

/* Fails unless the built kernel takes `wg` work-items per group. On a GPU, its limit also says
   how many of our groups a compute unit holds at once: a driver caps a group at what the
   registers of one compute unit allow (NVIDIA: 161 registers -> 384 work-items -> 3 groups of
   128), and the split count fills the device in whole waves of that many groups. */
static flashcl_status kernel_fits(flashcl_context *ctx, cl_kernel k, size_t wg, const char *name, int *groups_per_cu) {
    size_t max_wg = 0;
    cl_int err = clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL);
    if (err != CL_SUCCESS) return flashcl__fail_cl(ctx, err, "clGetKernelWorkGroupInfo(decode)");
    if (max_wg < wg)
        return flashcl__fail(ctx, FLASHCL_ERR_NO_PLAN, "%s accepts %zu work-items per group, the plan needs %zu", name,
                             max_wg, wg);
    const size_t fit = max_wg / wg;
    *groups_per_cu = fit >= 4 ? 4 : (int)fit;
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
    if (st == FLASHCL_SUCCESS) st = kernel_fits(ctx, p->attend, p->wg, name, &p->groups_per_cu);
    if (p->cpu) p->groups_per_cu = 1; /* a CPU core runs one work-group of one at a time */
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
    pub->staging = FLASHCL_STAGING_DIRECT; /* both kernels read K/V straight into registers */
    pub->work_group_size = p->wg;
    pub->local_mem_bytes = local ? (size_t)local : p->local_bytes;
    pub->private_mem_bytes = (size_t)priv;
    flashcl__copy_str(pub->origin, sizeof pub->origin, "table");
    flashcl__copy_str(pub->build_options, sizeof pub->build_options, options);
    static const char *const storage[] = {"", ", fp8 e4m3 cache", ", fp8 e5m2 cache"};
    snprintf(pub->reason, sizeof pub->reason,
             "decode family (%s): %zu query rows per sequence, the %zu query head%s of each KV head packed as the "
             "rows of one work-group (%d per group), K/V read once per KV head %s%s, split-KV over enough "
             "work-groups to fill the device, partials merged by LSE (%s)",
             p->cpu   ? "CPU: work-groups of one, float16 vectors, the cache read in place"
             : p->mma ? "GPU, tensor cores: mma.sync m16n8k16 with float32 accumulators, the packed rows as the "
                        "rows of S = Q K^T (padded to 16) and the columns of O^T += V^T P^T, K/V rows read "
                        "straight into fragments"
                      : "GPU: key groups of lanes reading K/V rows into registers, several keys in flight",
             d->max_seqlen_q, d->heads_q / d->heads_kv, d->heads_q / d->heads_kv == 1 ? "" : "s", p->rows,
             paged ? "through the page table" : "from the views", storage[cdt],
             p->fused_merge ? "by the last split's work-group, in the same launch" : "flash_merge");
    return FLASHCL_SUCCESS;
}

/* The CPU kernel on CPU devices; kernel=decode or kernel=decode_cpu (FLASHCL_TILE or a tuned plan) picks the
   GPU or the CPU kernel anywhere, so each is tested on every device. */
static int use_cpu_kernel(flashcl_context *ctx, const flashcl__tile_override *ov, const flashcl_attention_desc *d,
                          flashcl_cache_dtype cdt, int aligned) {
    if (ov->present) {
        if (ov->kernel == FLASHCL__TILE_KERNEL_DECODE) return 0;
        if (ov->kernel == FLASHCL__TILE_KERNEL_DECODE_CPU) return 1;
    }
    /* FLASHCL_DECODE_MMA=1 on a CPU device: the GPU kernel's tensor-core form, emulated (tests). */
    const mma_request req = mma_request_from_env();
    gpu_shape g;
    if (ctx->info.is_cpu && mma_wanted(ctx, d, cdt, aligned, 0, &req) && mma_shape_for(ctx, d, cdt, &req, &g)) return 0;
    return ctx->info.is_cpu;
}

flashcl_status flashcl__decode_plan_for(flashcl_context *ctx, const flashcl_attention_desc *d, int paged,
                                        flashcl_cache_dtype cache_dtype, int aligned,
                                        const flashcl__decode_plan **out) {
    flashcl__decode_choice choice;
    flashcl_status st = flashcl__decode_choice_for(ctx, d, (int)cache_dtype, &choice);
    if (st != FLASHCL_SUCCESS) return st;
    const flashcl__tile_override *ov = &choice.ov;
    const int cpu = use_cpu_kernel(ctx, ov, d, cache_dtype, aligned);
    gpu_shape g = {cpu_rows(d), 1, 16, 1, 0, CPU_CHUNK, 0, 0, 0, 1, 0, 0, 0, 0};
    /* kernel=decode_cpu,br=R,bc=C,heads=H: rows per work-item, keys per chunk, the most KV heads per work-item. */
    const int cpu_knobs = cpu && ov->present && ov->kernel == FLASHCL__TILE_KERNEL_DECODE_CPU;
    if (cpu_knobs && ov->block_rows > 0) g.rows = ov->block_rows;
    if (cpu_knobs && ov->block_cols > 0) g.block_n = ov->block_cols;
    if (!cpu && !gpu_shape_for(ctx, d, cache_dtype, paged, aligned, ov, &g))
        return flashcl__fail(ctx, FLASHCL_ERR_NO_PLAN,
                             "decode: no shape for d=%zu, d_v=%zu fits %llu bytes of local memory", d->head_dim,
                             d->head_dim_v, (unsigned long long)ctx->info.local_mem_bytes);
    char variants[256], options[sizeof((flashcl__decode_plan *)0)->key], regs[48] = "";
    flashcl__variant_options(d, variants, sizeof variants);
    if (!cpu && g.shfl && g.max_registers > 0) snprintf(regs, sizeof regs, " -cl-nv-maxrregcount=%d", g.max_registers);
    const int heads = !cpu ? 1 : cpu_knobs && ov->heads > 0 ? ov->heads : cpu_heads_capacity(d, g.rows);
    if (cpu)
        snprintf(options, sizeof options,
                 "-D HEAD_DIM=%zu -D ROWS=%d -D HEADS=%d -D CHUNK=%d -D FP8_DENORM_MUL=%d -D PAGED=%d "
                 "-D CACHE_DTYPE=%d %s",
                 d->head_dim, g.rows, heads, g.block_n,
                 cache_dtype != FLASHCL_CACHE_DTYPE_SAME && ctx->info.fp32_denorms, paged, (int)cache_dtype, variants);
    else
        snprintf(options, sizeof options,
                 "-D HEAD_DIM=%zu -D ROWS=%d -D LANES=%d -D VEC=%d -D UNROLL=%d -D WG_SIZE=%d -D ALIGNED=%d "
                 "-D LANE_SHFL=%d -D FUSED_MERGE=%d -D KV_STAGES=%d -D FP8_CVT=%d -D FP8_DENORM_MUL=%d -D PAGED=%d "
                 "-D CACHE_DTYPE=%d %s%s%s",
                 d->head_dim, g.rows, g.lanes, g.vec, g.unroll, g.wg, aligned != 0, g.shfl, g.fused, g.stages,
                 g.fp8_cvt, cache_dtype != FLASHCL_CACHE_DTYPE_SAME && ctx->info.fp32_denorms, paged, (int)cache_dtype,
                 variants, regs,
                 g.mma ? (g.mma_f16 ? " -D DECODE_MMA=1 -D MMA_F16=1" : " -D DECODE_MMA=1 -D MMA_F16=0") : "");
    /* The same build under another origin (a tuned plan equal to the formula's) is another plan: its
       reason says where it came from. */
    for (flashcl__decode_plan *p = ctx->family[FLASHCL__FAMILY_DECODE]; p; p = p->next)
        if (strcmp(p->key, options) == 0 && strcmp(p->pub.origin, choice.origin) == 0) {
            *out = p;
            return FLASHCL_SUCCESS;
        }
    flashcl__decode_plan *p = calloc(1, sizeof *p);
    if (!p) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for a decode plan");
    p->cpu = cpu;
    p->rows = g.rows;
    p->heads = heads;
    p->block_n = g.block_n;
    p->wg = cpu ? 1 : (size_t)g.wg;
    p->local_bytes = cpu ? 0 : g.local_bytes;
    p->fused_merge = !cpu && g.fused;
    p->mma = !cpu && g.mma;
    st = build(ctx, d, paged, cache_dtype, options, p);
    /* The tensor-core form at d, d_v <= 128 with an fp8 cache (what was measured; 16-bit caches take
       it only when FLASHCL_DECODE_MMA forces it) is bound by the loads its groups keep in flight, not by
       how many the registers let a compute unit hold: split until about four groups a compute unit
       run. H200, fp8 e4m3 cache, hq32 hkv8, the same keys in all (ms, one lease): b32 sk8192 one
       split (what the kernel's work-group limit gave) 0.269, 2 splits 0.191, 4 0.199; b16
       sk16384 2 splits (before) 0.274, 4 0.190; b64 unsplit 0.354 was already the best. At
       d = 256 the fit's count stays: 1 split 0.374 against 0.403 with 2. Not registers: capped at
       128 or 96 (-cl-nv-maxrregcount), b32 with 2 splits ran 0.192 as without the cap. */
    if (st == FLASHCL_SUCCESS && p->mma && cache_dtype != FLASHCL_CACHE_DTYPE_SAME && d->head_dim <= 128 &&
        d->head_dim_v <= 128)
        p->groups_per_cu = 4;
    if (st != FLASHCL_SUCCESS) {
        if (p->attend) clReleaseKernel(p->attend);
        if (p->merge) clReleaseKernel(p->merge);
        free(p);
        return st;
    }
    if (heads > 1 && d->heads_kv > 1)
        flashcl__appendf(p->pub.reason, sizeof p->pub.reason, "; up to %d KV heads per work-item, rows read as one run",
                         heads);
    flashcl__append_variants(d, p->pub.reason, sizeof p->pub.reason);
    flashcl__copy_str(p->pub.origin, sizeof p->pub.origin, choice.origin);
    if (choice.why[0]) { /* first, so that a long reason's truncation never hides where the knobs came from */
        char rest[sizeof p->pub.reason];
        flashcl__copy_str(rest, sizeof rest, p->pub.reason);
        p->pub.reason[0] = '\0';
        flashcl__appendf(p->pub.reason, sizeof p->pub.reason, "%s; %s", choice.why, rest);
    }
    flashcl__copy_str(p->key, sizeof p->key, options);
    p->next = ctx->family[FLASHCL__FAMILY_DECODE];
    ctx->family[FLASHCL__FAMILY_DECODE] = p;
    *out = p;
    return FLASHCL_SUCCESS;
}

void flashcl__decode_release(flashcl_context *ctx) {
    flashcl__kv_release(ctx); /* flashcl_forward_kvcache's state: it runs on this family */
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
        const int ours = ov.kernel == FLASHCL__TILE_KERNEL_DECODE || ov.kernel == FLASHCL__TILE_KERNEL_DECODE_CPU;
        if (!ours) snprintf(why, cap, "FLASHCL_TILE forces another family");
        return ours;
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
    /* No override here (above), so the choice is a tuned plan or none, and cannot fail. */
    flashcl__decode_choice choice;
    flashcl__decode_choice_for(ctx, d, FLASHCL_CACHE_DTYPE_SAME, &choice);
    gpu_shape g;
    if (!use_cpu_kernel(ctx, &choice.ov, d, FLASHCL_CACHE_DTYPE_SAME, 1) &&
        !gpu_shape_for(ctx, d, FLASHCL_CACHE_DTYPE_SAME, 0, 1, &choice.ov, &g)) {
        snprintf(why, cap, "no decode tile for d=%zu fits the device's local memory", d->head_dim);
        return 0;
    }
    return 1;
}
