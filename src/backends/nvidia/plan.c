/*
 * The NVIDIA tensor-core plans: when the family applies, the forward's shape
 * (table or FLASHCL_MMA_FWD) and build, the backward's build, and the forward's
 * launch. Whatever it does not cover (float32, head dims that are not
 * multiples of 8 or above 256, scale <= 0, views not 16-byte aligned, a
 * device without the probe's blessing, bf16 in the sm_75 form; in the backward d_v != d) goes to
 * the next family, and the plan query says why.
 */
#include "nvidia.h"
#include "../../launch.h"
#include "../../tile_override.h"
#include "../../tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MMA_WARPS 4 /* the backward's warps per work-group */

/* Forward shape: warps per work-group, keys per tile, 16-row tiles per warp,
   Q resident in __local (1) or in registers (0), and the instruction: mma.sync (wg 0) or
   Hopper's wgmma (wg 1: one 64-row warpgroup per 4 warps, K/V in __local, Q in __local or, above
   d = 128, in registers). */
typedef struct mma_shape {
    int warps, bc, mt, qlocal, wg;
} mma_shape;

/* The user's head dim rounded up to the mma's k step (16); the padding lives in __local and registers only. */
static size_t padded_dim(size_t d) { return (d + 15) / 16 * 16; }

/* The wgmma form's head dims (cl/flash_fwd_mma.cl's MMA_WG): d padded to 64 or 128, above that to a
   multiple of 64; d_v to 64, 128 or 256. Zeros fill the padding in __local and registers only. */
static size_t wg_dim_k(size_t d) { return d <= 64 ? 64 : d <= 128 ? 128 : (d + 63) / 64 * 64; }
static size_t wg_dim_v(size_t d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; }

/* __local bytes of a forward shape with `esize`-byte elements, as the kernel lays them out
   (16-byte row padding unless QL). */
static size_t shape_local_bytes(mma_shape s, size_t dk, size_t dv, size_t esize) {
    if (s.wg) {
        dk = wg_dim_k(dk);
        dv = wg_dim_v(dv);
        if (!s.qlocal) return esize * (size_t)s.bc * (dk + dv); /* Q straight into registers */
    }
    const size_t pad = 16 / esize, ldk = s.qlocal ? dk : dk + pad, ldv = s.qlocal ? dv : dv + pad;
    const size_t q = (size_t)16 * s.mt * s.warps * ldk, kv = (size_t)s.bc * (ldk + ldv);
    return esize * (s.qlocal ? q + kv : (q > kv ? q : kv));
}

/* float32 storage on the TF32 mma (MMA_TF32): the caller's opt-in. */
static int is_tf32(const flashcl_attention_desc *d) { return d->dtype == FLASHCL_DTYPE_F32 && d->allow_tf32; }
static size_t element_bytes(const flashcl_attention_desc *d) { return is_tf32(d) ? 4 : 2; }

/* The built-in choice per (padded) head dim, measured on the H200 (bf16, dev/mma_harness.c
   and flashcl bench). 32 query rows per warp up to d = 128: each K/V fragment read
   from __local feeds 4 mma. At d = 128, Q in registers spilled (255 registers,
   284 B of spills) at Bc = 64 and still at Bc = 32; Q resident in swizzled
   __local with Bc = 32 (exactly 48 KiB) does not, and ran 5% faster (256 -> 269
   TF/s non-causal, 220 -> 232 causal). At d = 64 the registers fit and
   reloading Q per tile only costs (230 -> 206 TF/s), so Q stays in registers.
   Dims between 96 and 128 that cannot swizzle take Bc = 32 for the registers.
   Above 128 the accumulators alone are 4 registers per 8 dims: 16 rows per warp. */
static mma_shape mma_table_shape(size_t dk, size_t dv, int tf32) {
    const size_t d = dk > dv ? dk : dv;
    mma_shape s = {4, 64, 2, 0, 0};
    if (tf32) {
        /* TF32: a 16 x 16 Q slice is 8 registers (twice 16-bit's) and the float tiles twice the
           bytes, so 16 rows per warp, Q in registers, and 32 keys per tile above d = 64 (48 KiB). */
        s.mt = 1;
        s.bc = d > 64 ? 32 : 64;
    } else if (d > 128) {
        s.bc = 32;
        s.mt = 1;
    } else if (d > 96) {
        s.bc = 32;
        s.qlocal = dk % 64 == 0 && dv % 64 == 0;
    }
    return s;
}

/* The shapes the wgmma form takes (cl/flash_fwd_mma.cl's MMA_WG): 16-bit storage, 16 rows per warp in
   one or two warpgroups, Bc 32, 48, 64 or 128; with Q resident in __local head dims 64 or 128, with Q
   in registers d a multiple of 64 up to 256 and d_v 64, 128 or 256, after wg_dim_k/wg_dim_v's padding.
   dk and dv are the caller's head dims (the padding rule weighs what it adds to them). */
static int wg_shape_ok(mma_shape s, size_t dk, size_t dv, size_t esize) {
    /* Up to 128 the padding may add at most 1/7 (d = 112, 64, 128): on the H200 (b4 h16 N4096, TF/s,
       mma.sync -> wgmma) d = 112 went 221 -> 269, d = 96 245 -> 231 and d = 80 258 -> 194, so those keep
       mma.sync. Above 128 it paid at every dim measured: 144 187 -> 209, 160 189 -> 228, 192 206 -> 276,
       224 228 -> 273. */
    if (dk < 64 || dv < 64 || (dk <= 128 && wg_dim_k(dk) * 7 > dk * 8) || (dv <= 128 && wg_dim_v(dv) * 7 > dv * 8))
        return 0;
    dk = wg_dim_k(dk);
    dv = wg_dim_v(dv);
    if (esize != 2 || s.mt != 1 || (s.warps != 4 && s.warps != 8) ||
        (s.bc != 32 && s.bc != 48 && s.bc != 64 && s.bc != 128))
        return 0;
    if (s.qlocal) return (dk == 64 || dk == 128) && (dv == 64 || dv == 128);
    return dk % 64 == 0 && dk <= 256 && (dv == 64 || dv == 128 || dv == 256);
}

/* The built-in wgmma shape, measured on the H200 (bf16, flashcl bench --no-plain, b4 h16 N4096, TF/s
   non-causal / causal). Q in __local up to d = d_v = 128: at d = 128 two warpgroups (128 rows) sharing K/V
   tiles of 32 keys (Q 32 KiB + K/V 16 KiB) 326 / 279, one warpgroup with Bc = 64 300 / 273 (mma.sync
   261 / 226); at d = 64 (b16 h16 N1024) one warpgroup with Bc = 128 251, two with 64 or 128 keys 184-201
   (mma.sync 223). There Q in registers measured slower (d = 128: 265-281 with Bc 48/64, 219 with 32;
   d = 64: 204-212): wgmma's A from registers costs where N is small. Above 128 Q cannot share 48 KiB
   with K and V, so it stays in registers, two warpgroups, and the key tile 64 where d + d_v <= 320, else
   48, else 32, whichever first fits `local_bytes` (the larger tiles won wherever they were measured; 64 at
   d + d_v > 320 was not): d = 256 303 / 273 with Bc 48, 292 / 264 with 32, one warpgroup 260
   (mma.sync 230 / 216); d = 192, d_v = 128 310 with Bc 64, 294 with 48 (mma.sync 218); d = 256,
   d_v = 128 317 with 48, 269 with 32 (mma.sync 226). */
static mma_shape wg_table_shape(size_t dk, size_t dv, size_t local_bytes) {
    dk = wg_dim_k(dk);
    dv = wg_dim_v(dv);
    if (dk > 128 || dv > 128) {
        mma_shape big = {8, 32, 1, 0, 1};
        static const int key_tiles[] = {64, 48};
        for (size_t i = 0; i < sizeof key_tiles / sizeof key_tiles[0]; ++i)
            if ((key_tiles[i] < 64 || dk + dv <= 320) && 2 * (size_t)key_tiles[i] * (dk + dv) <= local_bytes) {
                big.bc = key_tiles[i];
                break;
            }
        return big;
    }
    const int d128 = dk > 64 || dv > 64;
    mma_shape s = {d128 ? 8 : 4, d128 ? 32 : 128, 1, 1, 1};
    return s;
}

/* FLASHCL_MMA_FWD=W:BC:MT:QL overrides the table for every head dim (kernel
   tuning on NVIDIA hardware); QL = 1 applies where both padded dims are
   multiples of 64 (the swizzle needs rows of 8 chunks), other dims keep Q in
   registers. 0 when unset, 1 when valid, -1 (with why) when not. */
static int mma_env_shape(flashcl_context *ctx, const flashcl_attention_desc *d, size_t dk, size_t dv, size_t esize,
                         mma_shape *out, char *why, size_t cap) {
    const char *e = getenv("FLASHCL_MMA_FWD");
    if (!e || !*e) return 0;
    mma_shape s = {0, 0, 0, 0, 0};
    int used = 0, used_wg = 0, whole = sscanf(e, "%d:%d:%d:%d%n", &s.warps, &s.bc, &s.mt, &s.qlocal, &used) == 4;
    if (whole && e[used] == ':') /* the optional WG field, then nothing */
        whole = sscanf(e + used + 1, "%d%n", &s.wg, &used_wg) == 1 && e[used + 1 + used_wg] == '\0';
    else if (whole)
        whole = e[used] == '\0';
    if (!whole || (s.warps != 1 && s.warps != 2 && s.warps != 4 && s.warps != 8) ||
        (s.bc != 16 && s.bc != 32 && s.bc != 64 && !((s.bc == 48 || s.bc == 128) && s.wg)) ||
        (s.mt != 1 && s.mt != 2) || (s.qlocal != 0 && s.qlocal != 1) || (s.wg != 0 && s.wg != 1)) {
        snprintf(why, cap,
                 "FLASHCL_MMA_FWD: expected W:BC:MT:QL[:WG] with W in {1,2,4,8}, BC in {16,32,64} (48, 128 with WG), "
                 "MT in {1,2}, QL in {0,1}, WG in {0,1}, got '%s'",
                 e);
        return -1;
    }
    if (s.wg && !(wg_shape_ok(s, d->head_dim, d->head_dim_v, esize) && flashcl__wgmma_supported(ctx, NULL)))
        s.wg = 0; /* as QL below: the shape where it applies, mma.sync elsewhere */
    if (s.bc == 128 && !s.wg) s.bc = 64;
    if (s.bc == 48 && !s.wg) s.bc = 32;
    if (!s.wg && (dk % 64 != 0 || dv % 64 != 0 || esize != 2)) s.qlocal = 0; /* TF32 keeps Q in registers */
    const size_t bytes = shape_local_bytes(s, dk, dv, esize);
    if (bytes > ctx->info.local_mem_bytes) {
        snprintf(why, cap, "FLASHCL_MMA_FWD=%s needs %zu B of __local, the device has %llu", e, bytes,
                 (unsigned long long)ctx->info.local_mem_bytes);
        return -1;
    }
    *out = s;
    return 1;
}

/* kernel=mma,warps=W,bc=BC,mt=MT,ql=QL (FLASHCL_TILE or a tuned plan): FLASHCL_MMA_FWD's shape in the
   tile grammar, fields not given from `base`. Unlike FLASHCL_MMA_FWD it must fit exactly: ql=1 where Q
   cannot stay in __local is refused, not dropped. 1 when valid (*out set), 0 with why when not. */
static int mma_tile_shape(const flashcl_context *ctx, const flashcl__tile_override *ov, mma_shape base, size_t dk,
                          size_t dv, size_t esize, mma_shape *out, char *why, size_t cap) {
    mma_shape s = base;
    if (ov->warps > 0) s.warps = ov->warps;
    if (ov->block_cols > 0) s.bc = ov->block_cols;
    if (ov->row_tiles > 0) s.mt = ov->row_tiles;
    if (ov->q_local >= 0) s.qlocal = ov->q_local;
    if (ov->block_rows > 0 || ov->threads_per_row > 0 || ov->staging >= 0 || ov->max_registers > 0) {
        snprintf(why, cap, "kernel=mma takes warps, bc, mt and ql only (rows per work-group are 16 x mt x warps)");
        return 0;
    }
    if ((s.warps != 1 && s.warps != 2 && s.warps != 4 && s.warps != 8) || (s.bc != 16 && s.bc != 32 && s.bc != 64) ||
        (s.mt != 1 && s.mt != 2)) {
        snprintf(why, cap, "kernel=mma needs warps in {1,2,4,8}, bc in {16,32,64}, mt in {1,2} (got %d, %d, %d)",
                 s.warps, s.bc, s.mt);
        return 0;
    }
    if (s.qlocal && (dk % 64 != 0 || dv % 64 != 0 || esize != 2)) {
        snprintf(why, cap,
                 "kernel=mma: ql=1 needs 16-bit storage and padded head dims that are multiples of 64 "
                 "(the swizzle's rows of 8 chunks), not %zu/%zu",
                 dk, dv);
        return 0;
    }
    const size_t bytes = shape_local_bytes(s, dk, dv, esize);
    if (bytes > ctx->info.local_mem_bytes) {
        snprintf(why, cap, "kernel=mma,warps=%d,bc=%d,mt=%d,ql=%d needs %zu B of __local, the device has %llu", s.warps,
                 s.bc, s.mt, s.qlocal, bytes, (unsigned long long)ctx->info.local_mem_bytes);
        return 0;
    }
    *out = s;
    return 1;
}

static int desc_applies(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d, char *why,
                        size_t cap);

/* The forward's shape, most specific first: FLASHCL_TILE=kernel=mma (origin "env", always mma.sync),
   FLASHCL_MMA_FWD (origin "vendor", as before it), the wgmma form where it applies ("vendor"), the
   tuned plan of a 16-bit call (tuning.h: "tuned" or "table"), the built-in choice above ("vendor"). A tuned plan the device rejects falls back to the built-in
   choice, and `note` says why (it opens the plan's reason). Fails only for an override that does not fit. */
static flashcl_status choose_shape(flashcl_context *ctx, const flashcl_attention_desc *d, size_t dk, size_t dv,
                                   size_t esize, int tf32, mma_shape *sh, const char **origin, char *note, size_t cap) {
    char why[256];
    *sh = mma_table_shape(dk, dv, tf32);
    *origin = "vendor";
    note[0] = '\0';
    const mma_shape wg = wg_table_shape(dk, dv, (size_t)ctx->info.local_mem_bytes);
    flashcl__tile_override ov;
    if (flashcl__read_tile_override(NULL, &ov) == FLASHCL_SUCCESS && ov.present &&
        ov.kernel == FLASHCL__TILE_KERNEL_MMA) {
        if (!desc_applies(ctx, FLASHCL__FORWARD, d, why, sizeof why))
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE, "FLASHCL_TILE=kernel=mma: %s", why);
        if (!mma_tile_shape(ctx, &ov, *sh, dk, dv, esize, sh, why, sizeof why))
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE, "FLASHCL_TILE: %s", why);
        *origin = "env";
        snprintf(note, cap, "shape from FLASHCL_TILE");
        return FLASHCL_SUCCESS;
    }
    const int from_env = mma_env_shape(ctx, d, dk, dv, esize, sh, why, sizeof why);
    if (from_env < 0) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE, "%s", why);
    if (from_env > 0) {
        snprintf(note, cap, "shape from FLASHCL_MMA_FWD");
        return FLASHCL_SUCCESS;
    }
    /* The wgmma form where it applies, before any tuned plan: `flashcl tune` measures mma.sync shapes,
       which the form beats on every plain/causal/window case measured (1.2-1.25x on the H200). Not with a
       softcap and Q in __local: there it measured 0.92x of mma.sync (b2 hq16 hkv8 N8192 d128 causal
       softcap 30, 3.35 vs 3.09 ms), and with the SFU's tanh 0.85x (187 against 221 TF/s; Q in registers
       200), so those calls keep mma.sync; with Q in registers at d = 256 (Gemma-2's softcap 50 and
       window 4095) it measured 1.31x (314 against 240 TF/s). */
    if (wg_shape_ok(wg, d->head_dim, d->head_dim_v, esize) && !(d->softcap > 0.0f && wg.qlocal) &&
        shape_local_bytes(wg, dk, dv, esize) <= ctx->info.local_mem_bytes && flashcl__wgmma_supported(ctx, NULL)) {
        *sh = wg;
        return FLASHCL_SUCCESS;
    }
    /* TF32 calls share float32's tuning key with the portable kernels' plans: they keep the table. */
    const char *tuned_origin = NULL;
    char entry[256];
    if (!tf32 && flashcl__tuned_plan(ctx, d, &ov, &tuned_origin, entry, sizeof entry) &&
        ov.kernel == FLASHCL__TILE_KERNEL_MMA) {
        if (mma_tile_shape(ctx, &ov, *sh, dk, dv, esize, sh, why, sizeof why)) {
            *origin = tuned_origin;
            flashcl__appendf(note, cap, "%s", entry);
            return FLASHCL_SUCCESS;
        }
        flashcl__appendf(note, cap, "%s rejected (%s), the built-in shape instead", entry, why);
    }
    return FLASHCL_SUCCESS;
}

static int dtype_slot(flashcl_dtype t) { return t == FLASHCL_DTYPE_F16 ? 1 : t == FLASHCL_DTYPE_BF16 ? 0 : -1; }

/* The descriptor-level conditions of a pass (the views' alignment is checked per call). */
static int desc_applies(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d, char *why,
                        size_t cap) {
    const char *probe_why = NULL;
    if (dtype_slot(d->dtype) < 0 && !is_tf32(d)) {
        snprintf(why, cap, "tensor-core path needs f16 or bf16 storage (or float32 with allow_tf32)");
        return 0;
    }
    if (is_tf32(d) && (d->head_dim % 8 != 0 || d->head_dim > 128 || d->head_dim_v % 8 != 0 || d->head_dim_v > 128)) {
        /* Above 128 the forward's float Q staging of 64 rows passes 48 KiB, and the backward's
           float K/V fragments would need slices of less than 64 dims. */
        snprintf(why, cap, "TF32 covers head dims d, d_v that are multiples of 8 up to 128 (not %zu/%zu)", d->head_dim,
                 d->head_dim_v);
        return 0;
    }
    if (pass == FLASHCL__FORWARD) {
        /* cp.async moves 8 elements: rows must be whole chunks; the mma's k step is padded inside. */
        if (d->head_dim % 8 != 0 || d->head_dim > 256 || d->head_dim_v % 8 != 0 || d->head_dim_v > 256) {
            snprintf(why, cap,
                     "tensor-core forward covers head dims d, d_v that are multiples of 8 up to 256 (not %zu/%zu)",
                     d->head_dim, d->head_dim_v);
            return 0;
        }
    } else if (d->head_dim % 8 != 0 || d->head_dim > 256 || d->head_dim_v != d->head_dim) {
        snprintf(why, cap,
                 "tensor-core backward covers head dims that are multiples of 8 up to 256 with d_v = d (not %zu/%zu)",
                 d->head_dim, d->head_dim_v);
        return 0;
    }
    if (!(d->scale > 0.0f)) {
        snprintf(why, cap, "tensor-core path needs scale > 0");
        return 0;
    }
    if (!flashcl__mma_supported(ctx, &probe_why)) {
        snprintf(why, cap, "tensor-core path off: %s", probe_why);
        return 0;
    }
    /* sm_75 has no bf16 mma. Rounding bf16 to f16 would overflow above 65504 and flush below 6e-8 (bf16
       spans 1e-38..3e38): correct only after a range check of every tile, so bf16 keeps the portable path. */
    if (flashcl__nvidia_state_of(ctx)->sm75 && d->dtype != FLASHCL_DTYPE_F16) {
        snprintf(why, cap, "tensor-core path runs f16 only in the sm_75 form (no bf16 or TF32 mma.sync; %s)",
                 probe_why);
        return 0;
    }
    return 1;
}

size_t flashcl__mma_chunk_elems(const flashcl_attention_desc *d) { return 16 / element_bytes(d); }

int flashcl__mma_views_aligned(const flashcl_tensor *views, int n, size_t chunk) {
    for (int i = 0; i < n; ++i)
        if ((views[i].offset | views[i].stride_batch | views[i].stride_head | views[i].stride_row) % chunk != 0)
            return 0;
    return 1;
}

flashcl_status flashcl__mma_plan_for(flashcl_context *ctx, const flashcl_attention_desc *d,
                                     const flashcl__mma_plan **out) {
    const int tf32 = is_tf32(d), slot = tf32 ? 0 : dtype_slot(d->dtype);
    const size_t esize = element_bytes(d);
    flashcl__nvidia_state *state = flashcl__nvidia_state_of(ctx);
    if (!state) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory (mma plan)");
    size_t dk = padded_dim(d->head_dim), dv = padded_dim(d->head_dim_v);
    mma_shape sh;
    const char *origin = NULL;
    char note[384];
    flashcl_status st = choose_shape(ctx, d, dk, dv, esize, tf32, &sh, &origin, note, sizeof note);
    if (st != FLASHCL_SUCCESS) return st;
    if (sh.wg) { /* the wgmma form's own padding (shape_local_bytes applies it as well) */
        dk = wg_dim_k(dk);
        dv = wg_dim_v(dv);
    }
    if (shape_local_bytes(sh, dk, dv, esize) > ctx->info.local_mem_bytes)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                             "tensor-core forward at d=%zu, d_v=%zu needs %zu B of __local, the device has %llu",
                             d->head_dim, d->head_dim_v, shape_local_bytes(sh, dk, dv, esize),
                             (unsigned long long)ctx->info.local_mem_bytes);
    char variants[256], options[sizeof((flashcl_plan *)0)->build_options];
    flashcl__variant_options(d, variants, sizeof variants);
    /* The SFU's tanh for a softcap only where this call's backward runs on the tensor cores too, so that
       its P matches this forward's LSE; cl/ptx.cl's MMA_TANH says why. */
    char bwd_why[256];
    const int tanh_sfu = d->softcap > 0.0f && desc_applies(ctx, FLASHCL__BACKWARD, d, bwd_why, sizeof bwd_why);
    snprintf(options, sizeof options,
             "-cl-mad-enable -DHEAD_DIM=%zu -DMMA_DK_REAL=%zu -DMMA_DV=%zu -DMMA_WARPS=%d -DMMA_MT=%d -DMMA_BC=%d "
             "-DMMA_QLOCAL=%d -DMMA_F16=%d -DMMA_SM75=%d -DMMA_TF32=%d -DMMA_WG=%d -DMMA_TANH_SFU=%d %s",
             dk, d->head_dim, dv, sh.warps, sh.mt, sh.bc, sh.qlocal, slot, state->sm75, tf32, sh.wg, tanh_sfu,
             variants);
    for (flashcl__mma_plan *p = state->plans; p; p = p->next)
        if (strcmp(p->pub.build_options, options) == 0 && strcmp(p->pub.origin, origin) == 0) {
            *out = p;
            return FLASHCL_SUCCESS;
        }
    flashcl__mma_plan *p = calloc(1, sizeof *p);
    if (!p) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory (mma plan)");
    snprintf(p->pub.build_options, sizeof p->pub.build_options, "%s", options);
    cl_program program = NULL;
    if (sh.wg)
        st = flashcl__get_patched_program(ctx, "flash_fwd_mma.cl", p->pub.build_options, "sm_90a", flashcl__wgmma_patch,
                                          &program);
    else
        st = flashcl__get_program(ctx, "flash_fwd_mma.cl", p->pub.build_options, &program);
    if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "flash_fwd_mma", &p->kernel);
    if (st != FLASHCL_SUCCESS) {
        free(p);
        if (!sh.wg) return st;
        /* The probe passed but this build did not: the context keeps mma.sync from now on, and its
           plans say why (below). */
        snprintf(state->wg_why, sizeof state->wg_why, "a wgmma build failed (%.110s)", flashcl_last_error(ctx));
        state->wg_probe = -1;
        flashcl__clear_error(ctx);
        return flashcl__mma_plan_for(ctx, d, out);
    }
    cl_ulong lm = 0, pm = 0;
    clGetKernelWorkGroupInfo(p->kernel, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof lm, &lm, NULL);
    clGetKernelWorkGroupInfo(p->kernel, ctx->device, CL_KERNEL_PRIVATE_MEM_SIZE, sizeof pm, &pm, NULL);
    snprintf(p->pub.kernel, sizeof p->pub.kernel, "flash_fwd_mma");
    p->pub.block_rows = 16 * sh.mt * sh.warps;
    p->pub.block_cols = sh.bc;
    p->pub.threads_per_row = 1;
    p->pub.staging = FLASHCL_STAGING_LOCAL;
    p->pub.work_group_size = 32 * (size_t)sh.warps;
    p->pub.local_mem_bytes = (size_t)lm;
    p->pub.private_mem_bytes = (size_t)pm;
    snprintf(p->pub.origin, sizeof p->pub.origin, "%s", origin);
    /* Where the shape came from goes first, so that a long reason's truncation never hides it. */
    if (snprintf(p->pub.reason, sizeof p->pub.reason,
                 "%s%sNVIDIA tensor cores (%s): %s %s, %d warps x %d query rows, Br=%d, Bc=%d, Q %s, "
                 "K/V %s __local; needs views 16-byte aligned (offsets and strides multiples of %zu)",
                 note, note[0] ? "; " : "", sh.wg ? state->wg_why : state->why,
                 sh.wg ? "wgmma (sm_90a PTX)" : "mma.sync",
                 tf32   ? "tf32 (allow_tf32: inputs and P rounded to a 10-bit mantissa, float32 accumulation)"
                 : slot ? "f16"
                        : "bf16",
                 sh.warps, 16 * sh.mt, p->pub.block_rows, sh.bc,
                 sh.wg && !sh.qlocal ? "in registers (wgmma's A operand)"
                 : sh.wg             ? "in __local (128-byte swizzle, wgmma reads it there)"
                 : sh.qlocal         ? "in swizzled __local, reloaded per key tile"
                                     : "in registers",
                 state->sm75 ? "loaded into" : "via cp.async in", 16 / esize) >= (int)sizeof p->pub.reason)
        flashcl__mark_truncated(p->pub.reason, sizeof p->pub.reason);
    if (dk != d->head_dim || dv != d->head_dim_v)
        flashcl__appendf(p->pub.reason, sizeof p->pub.reason, "; head dims padded to %zu/%zu inside the kernel", dk,
                         dv);
    if (!sh.wg && state->wg_probe < 0 && state->cc == 90) /* Hopper without the wgmma form: why */
        flashcl__appendf(p->pub.reason, sizeof p->pub.reason, "; not wgmma: %s", state->wg_why);
    p->next = state->plans;
    state->plans = p;
    *out = p;
    return FLASHCL_SUCCESS;
}

int flashcl__mma_covers(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d, char *why,
                        size_t cap) {
    return desc_applies(ctx, pass, d, why, cap);
}

/* Whether a build's dQ reads the dK/dV kernel's dS (cl/flash_bwd_mma.cl's MB_DS) instead of
   recomputing it: 16-bit calls on sm_80+, where recomputing S and dP (and a variant's terms) costs
   more than storing dS. H100, bf16 backward ms, recompute -> dS: b4 h16 N4096 d128 7.77 -> 6.52
   (1.19x), b2 hq32 hkv8 N8192 d128 causal 15.96 -> 13.73 (1.16x); the general kernels: d128
   window 4095 6.75 -> 5.45, d256 Gemma-2 23.67 -> 17.35, and at d = 64 b8 hq16 hkv8 N2048 causal
   softcap 30 1.60 -> 1.15, b16 h16 N1024 causal window 255 0.53 -> 0.47. Plain builds keep the
   recompute at d <= 64: b16 h16 N1024 d64 1.167 -> 1.207 (0.97x), its dK/dV kernel (0.69 ms) took
   0.22 ms more for the stores than dQ saved. */
static int ds_wanted(int sm75, int tf32, size_t dk, int plain) { return !sm75 && !tf32 && (dk > 64 || !plain); }

/* 16-row m-tiles per warp of flash_bwd_mma_dq_ds (MB_DSQ_MT: 128 or 64 query rows per work-group):
   2 up to d = 128, whose K tiles serve twice the rows (dQ kernel 1.32 -> 1.07 ms at d128 above); 1
   above (two m-tiles of dQ accumulators would not fit the registers); FLASHCL_BWD_DS_MT=1 gives 1
   for measurements, read when a backward is first built. */
static int ds_m_tiles(size_t dk) {
    const char *env = getenv("FLASHCL_BWD_DS_MT");
    return dk > 128 || (env && strcmp(env, "1") == 0) ? 1 : 2;
}

/* The backward's build options; mb_part: 0 both dK and dV (unsliced), 1 dV only, 2 dK only, 3 dS only; ds and
   ds_mt: ds_wanted and ds_m_tiles of the build. */
static void bwd_options(char *out, size_t cap, const flashcl_attention_desc *d, size_t dk, int br, int bcq, int plain,
                        int slices, int mb_part, const char *variants, int sm75, int wg, int ds, int ds_mt) {
    snprintf(out, cap,
             "-cl-mad-enable -DHEAD_DIM=%zu -DMB_D_REAL=%zu -DMMA_WARPS=%d -DMMA_F16=%d -DMMA_SM75=%d -DMMA_TF32=%d "
             "-DMMA_BWD_BR=%d -DMMA_BWD_BCQ=%d -DMMA_PLAIN=%d -DMB_SLICES=%d -DMB_PART=%d -DMMA_WG=%d -DMB_WG=%d "
             "-DMB_DS=%d -DMB_DSQ_MT=%d -DMMA_TANH_SFU=%d %s",
             dk, d->head_dim, MMA_WARPS, dtype_slot(d->dtype) == 1, sm75, is_tf32(d), br, bcq, plain, slices, mb_part,
             wg != 0, wg, ds, ds_mt, d->softcap > 0.0f, variants);
}

/* The backward's dQ kernel on wgmma (cl/flash_bwd_mma.cl's MB_WG): on Hopper after the wgmma probe,
   at d = 64 or 128 (the forms it has; the kernel can pad other dims, but that was never run on a
   device), unless FLASHCL_WGMMA_BWD=0 (read when a plan's backward is first built) or a build of it
   failed in this context. */
static int bwd_wgmma(flashcl_context *ctx, const flashcl_attention_desc *d) {
    const char *env = getenv("FLASHCL_WGMMA_BWD");
    return (d->head_dim == 64 || d->head_dim == 128) && !(env && strcmp(env, "0") == 0) &&
           !flashcl__nvidia_state_of(ctx)->wg_bwd_failed && flashcl__wgmma_supported(ctx, NULL);
}

flashcl_status flashcl__mma_backward_plan_for(flashcl_context *ctx, const flashcl_attention_desc *d,
                                              const flashcl__mma_bwd **out) {
    const flashcl__mma_plan *cp = NULL;
    flashcl_status st = flashcl__mma_plan_for(ctx, d, &cp);
    if (st != FLASHCL_SUCCESS) return st;
    /* Plain and causal calls at the head dims measured before the variants run the kernels as
       they were then (MMA_PLAIN; cl/flash_bwd_mma.cl says why). */
    flashcl_attention_desc f32 = *d;
    f32.dtype = FLASHCL_DTYPE_F32;
    const int tf32 = is_tf32(d); /* the general kernels only (cl/flash_bwd_mma.cl's MMA_TF32) */
    const int plain =
        !tf32 && flashcl__desc_is_plain(&f32) && d->head_dim % 16 == 0 && d->head_dim >= 32 && d->head_dim <= 128;
    flashcl__mma_bwd *w = &((flashcl__mma_plan *)cp)->bwd[plain];
    if (!w->k[0]) {
        /* On Hopper the general kernels' dQ runs on wgmma (MB_WG). Plain and causal calls keep the
           MMA_PLAIN mma.sync dQ, which measured 1.02-1.07x faster than the general one on wgmma. */
        const int wg = !plain && !tf32 && bwd_wgmma(ctx, d);
        /* dK/dV: 32 query rows per step at d > 64 (registers), 64 below; dQ: 32 or 64 keys per step.
           Above 128: two output slices (the head dim padded to 32 so each is whole 16-dim steps),
           16 rows / keys per step, and the dK/dV kernel built as a dV part and a dK part. TF32's
           fragments are twice the registers and its tiles twice the bytes of 16-bit ones at the
           same d: 32 rows / keys per step up to 64 (64 rows measured the same on an H100), slices
           above, there with 32 query rows per dK/dV step (its two 32-row tiles fit in the space of
           the 64-key one; 1.04-1.10x faster than 16 on an H100 at d = 96 and 128) and dQ's 16 keys
           (two stages of 32 would not fit 48 KiB). */
        const int slices = d->head_dim > (tf32 ? 64 : 128) ? 2 : 1;
        const size_t dk = slices > 1 ? (d->head_dim + 31) / 32 * 32 : padded_dim(d->head_dim);
        const int bcq = slices > 1 ? 16 : dk > 64 || tf32 ? 32 : 64, br = tf32 ? 32 : bcq;
        const int sm75 = flashcl__nvidia_state_of(ctx)->sm75;
        const int ds = ds_wanted(sm75, tf32, dk, plain), ds_mt = ds_m_tiles(dk); /* dQ from stored dS */
        char variants[256], options[sizeof w->pub.build_options];
        flashcl__variant_options(d, variants, sizeof variants);
        cl_program program = NULL, program_dk = NULL;
        static const char *const names[3] = {"flash_bwd_mma_dot", "flash_bwd_mma_dkdv", "flash_bwd_mma_dq"};
        cl_kernel k[4] = {NULL, NULL, NULL, NULL}, dsinks = NULL;
        /* Sliced: the dK part's program first; then the dV part's (with dot and dQ, which own every
           output dim: cl/flash_bwd_mma.cl's MB_OUT), whose options the plan reports. */
        for (int mb_part = slices > 1 ? 2 : 0; st == FLASHCL_SUCCESS; mb_part = 1) {
            bwd_options(options, sizeof options, d, dk, br, bcq, plain, slices, mb_part, variants, sm75, wg, ds, ds_mt);
            cl_program *built = mb_part == 2 ? &program_dk : &program;
            if (wg)
                st = flashcl__get_patched_program(ctx, "flash_bwd_mma.cl", options, "sm_90a", flashcl__wgmma_patch,
                                                  built);
            else
                st = flashcl__get_program(ctx, "flash_bwd_mma.cl", options, built);
            if (mb_part != 2) break;
            if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program_dk, names[1], &k[3]);
        }
        for (int i = 0; i < 3 && st == FLASHCL_SUCCESS; ++i) st = flashcl__create_kernel(ctx, program, names[i], &k[i]);
        cl_kernel dq_ds = NULL, ds_part = NULL, dk_ds = NULL, dv_ps = NULL; /* built with MB_DS (bwd_options) */
        if (st == FLASHCL_SUCCESS && ds) st = flashcl__create_kernel(ctx, program, "flash_bwd_mma_dq_ds", &dq_ds);
        if (st == FLASHCL_SUCCESS && ds && slices > 1) {
            /* dK from the scratch: the dS part's program (MB_PART = 3), dk_ds from the dV part's. The
               dK slices stay built for calls whose scratch is too large. */
            char ds_options[sizeof options];
            cl_program program_ds = NULL;
            bwd_options(ds_options, sizeof ds_options, d, dk, br, bcq, plain, slices, 3, variants, sm75, wg, ds, ds_mt);
            st = flashcl__get_program(ctx, "flash_bwd_mma.cl", ds_options, &program_ds); /* never wgmma when sliced */
            if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program_ds, names[1], &ds_part);
            if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "flash_bwd_mma_dk_ds", &dk_ds);
            if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, program, "flash_bwd_mma_dk_ds", &dv_ps);
        }
        const int wg_failed = wg && st != FLASHCL_SUCCESS; /* the wgmma program or its kernels, not d(sinks) */
        if (st == FLASHCL_SUCCESS && d->sinks) {
            /* d(sinks) is a per-head reduction over D and LSE: the portable kernel's (cl/flash_bwd.cl). */
            char sink_options[sizeof options];
            snprintf(sink_options, sizeof sink_options, "-D HEAD_DIM=%zu -D BLOCK_M=%d -D BLOCK_N=%d %s", d->head_dim,
                     FLASHCL__MMA_DSINKS_WG, FLASHCL__MMA_DSINKS_WG, variants);
            cl_program sp = NULL;
            st = flashcl__get_program(ctx, "flash_bwd.cl", sink_options, &sp);
            if (st == FLASHCL_SUCCESS) st = flashcl__create_kernel(ctx, sp, "flash_bwd_dsinks", &dsinks);
        }
        if (st != FLASHCL_SUCCESS) {
            for (int i = 0; i < 4; ++i)
                if (k[i]) clReleaseKernel(k[i]);
            if (dsinks) clReleaseKernel(dsinks);
            if (dq_ds) clReleaseKernel(dq_ds);
            if (ds_part) clReleaseKernel(ds_part);
            if (dk_ds) clReleaseKernel(dk_ds);
            if (dv_ps) clReleaseKernel(dv_ps);
            if (!wg_failed) return st;
            /* The probe passed but this build did not: the backward keeps mma.sync in this context,
               and its plans say why (the end of the error, where a build log's cause is). */
            flashcl__nvidia_state *state = flashcl__nvidia_state_of(ctx);
            const char *err = flashcl_last_error(ctx);
            const size_t len = strlen(err);
            snprintf(state->wg_bwd_why, sizeof state->wg_bwd_why, "a wgmma backward build failed (%s: ...%s)",
                     flashcl_status_name(st), err + (len > 100 ? len - 100 : 0));
            state->wg_bwd_failed = 1;
            flashcl__clear_error(ctx);
            return flashcl__mma_backward_plan_for(ctx, d, out);
        }
        memcpy(w->k, k, sizeof k);
        w->dsinks = dsinks;
        w->dq_ds = dq_ds;
        w->ds_part = ds_part;
        w->dk_ds = dk_ds;
        w->dv_ps = dv_ps;
        w->dq_ds_rows = dq_ds ? 16 * MMA_WARPS * ds_mt : 0;
        w->plain = plain;
        w->slices = slices;
        /* The plan reports the dK/dV kernel: it does most of the work and needs the most __local/registers. */
        flashcl_plan *bp = &w->pub;
        cl_ulong lm = 0, pm = 0;
        clGetKernelWorkGroupInfo(k[1], ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof lm, &lm, NULL);
        clGetKernelWorkGroupInfo(k[1], ctx->device, CL_KERNEL_PRIVATE_MEM_SIZE, sizeof pm, &pm, NULL);
        snprintf(bp->kernel, sizeof bp->kernel, "flash_bwd_mma");
        bp->block_rows = br;
        bp->block_cols = 16 * MMA_WARPS;
        bp->threads_per_row = 1;
        bp->staging = FLASHCL_STAGING_LOCAL;
        bp->work_group_size = 32 * MMA_WARPS;
        bp->local_mem_bytes = (size_t)lm;
        bp->private_mem_bytes = (size_t)pm;
        snprintf(bp->origin, sizeof bp->origin, "vendor");
        snprintf(bp->build_options, sizeof bp->build_options, "%s", options);
        snprintf(bp->reason, sizeof bp->reason,
                 "NVIDIA tensor cores (%.100s): mma.sync %s; flash_bwd_mma_dot (D = rowsum(dO*O)), "
                 "flash_bwd_mma_dkdv (%d keys per work-group, %d-row query tiles), ",
                 flashcl__nvidia_state_of(ctx)->why,
                 tf32                   ? "tf32 (allow_tf32)"
                 : dtype_slot(d->dtype) ? "f16"
                                        : "bf16",
                 16 * MMA_WARPS, br);
        flashcl__appendf(bp->reason, sizeof bp->reason, "%s (%d rows per work-group, %d-key tiles%s)%s, no atomics; ",
                         dq_ds ? "flash_bwd_mma_dq_ds (dQ = dS K from the dK/dV kernel's dS: 2 bytes of scratch a "
                                 "query-key pair, within 1/8 of the device memory, else flash_bwd_mma_dq)"
                               : "flash_bwd_mma_dq",
                         dq_ds ? w->dq_ds_rows : 16 * MMA_WARPS, dq_ds ? FLASHCL__MMA_DSQ_KEYS : bcq,
                         !wg     ? ""
                         : dq_ds ? "; flash_bwd_mma_dq on wgmma (sm_90a PTX)"
                                 : ", on wgmma (sm_90a PTX), Q/dO in registers, double-buffered",
                         dsinks ? " and flash_bwd_dsinks" : "");
        flashcl__appendf(bp->reason, sizeof bp->reason,
                         "all eight views 16-byte aligned (offsets, strides multiples of %zu)",
                         flashcl__mma_chunk_elems(d));
        if (slices > 1 && dk_ds)
            flashcl__appendf(
                bp->reason, sizeof bp->reason,
                "; d > 128: dK (and dV if a second scratch fits) by flash_bwd_mma_dk_ds from a dS kernel's stores");
        else if (slices > 1)
            flashcl__appendf(bp->reason, sizeof bp->reason, "; d > %d: a dV kernel and a dK kernel over half the dims",
                             tf32 ? 64 : 128);
        if (dk != d->head_dim)
            flashcl__appendf(bp->reason, sizeof bp->reason, "; head dim padded to %zu inside the kernels", dk);
        /* (TF32 never takes wgmma: a failed 16-bit wgmma build is not its reason) */
        if (!plain && !tf32 && (d->head_dim == 64 || d->head_dim == 128) &&
            flashcl__nvidia_state_of(ctx)->wg_bwd_failed)
            flashcl__appendf(bp->reason, sizeof bp->reason, "; not wgmma: %s",
                             flashcl__nvidia_state_of(ctx)->wg_bwd_why);
        if (strlen(bp->reason) + 1 >= sizeof bp->reason) flashcl__mark_truncated(bp->reason, sizeof bp->reason);
    }
    *out = w;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl__mma_forward(flashcl_context *ctx, const flashcl__call *call) {
    const flashcl_attention_desc *d = call->d;
    const flashcl__mma_plan *plan = NULL;
    flashcl_status st = flashcl__mma_plan_for(ctx, d, &plan);
    if (st != FLASHCL_SUCCESS) return st;
    /* Only FLASHCL_TILE=kernel=mma brings views the family does not cover this far (nvidia_covers). */
    if (!flashcl__mma_views_aligned(call->views, FLASHCL__FORWARD_VIEWS, flashcl__mma_chunk_elems(d)))
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                             "FLASHCL_TILE=kernel=mma: the tensor-core forward needs views 16-byte aligned (offsets "
                             "and strides multiples of %zu)",
                             flashcl__mma_chunk_elems(d));
    static const int in_out[] = {FLASHCL__VQ, FLASHCL__VK, FLASHCL__VV, FLASHCL__VO};
    flashcl__args a = flashcl__args_for(plan->kernel, "flash_fwd_mma");
    flashcl__arg_views(&a, call->views, in_out, 4);
    const cl_mem dummy = call->views[FLASHCL__VQ].buffer;
    flashcl__arg_forward(&a, d, call->lse, call->lse_offset, dummy);
    flashcl__arg_variants(&a, d, dummy);
    st = flashcl__args_check(ctx, &a);
    if (st != FLASHCL_SUCCESS) return st;
    /* Varlen: blocks for the longest sequence; a block past its own sequence returns at once. */
    const size_t wg = plan->pub.work_group_size, br = (size_t)plan->pub.block_rows;
    const size_t global[3] = {(d->max_seqlen_q + br - 1) / br * wg, d->heads_q, d->batch}, local[3] = {wg, 1, 1};
    flashcl__chain chain;
    st = flashcl__chain_begin(&chain, ctx, call->num_wait, call->wait_list, 0);
    if (st != FLASHCL_SUCCESS) return st;
    const int done =
        flashcl__chain_launch(&chain, plan->kernel, "flash_fwd_mma", 3, global, local, FLASHCL__AFTER_START);
    return flashcl__chain_end(&chain, 1, &done, call->event);
}

void flashcl__mma_release_plans(flashcl__nvidia_state *state) {
    while (state->plans) {
        flashcl__mma_plan *p = state->plans;
        state->plans = p->next;
        if (p->kernel) clReleaseKernel(p->kernel);
        for (int s = 0; s < 2; ++s) {
            for (int k = 0; k < 4; ++k)
                if (p->bwd[s].k[k]) clReleaseKernel(p->bwd[s].k[k]);
            if (p->bwd[s].dsinks) clReleaseKernel(p->bwd[s].dsinks);
            if (p->bwd[s].dq_ds) clReleaseKernel(p->bwd[s].dq_ds);
            if (p->bwd[s].ds_part) clReleaseKernel(p->bwd[s].ds_part);
            if (p->bwd[s].dk_ds) clReleaseKernel(p->bwd[s].dk_ds);
            if (p->bwd[s].dv_ps) clReleaseKernel(p->bwd[s].dv_ps);
        }
        free(p);
    }
}
