/*
 * The attention variants every flash kernel shares (forward and backward):
 * storage types, the per-sequence geometry (varlen), the visible key range
 * (causal and sliding window), the score terms (softcap, ALiBi, bias, masks),
 * attention sinks and the dropout RNG. The host prepends this file (after
 * common.cl) to each kernel source.
 *
 * Compile-time switches, all 0 unless the host sets them, so a plain call
 * compiles to exactly the plain kernel:
 *   FLASHCL_DTYPE   0 float, 1 half (vload_half/vstore_half), 2 bfloat16 (ushort)
 *   HAS_SOFTCAP HAS_ALIBI HAS_BIAS HAS_MASK HAS_BLOCK_MASK HAS_SINKS HAS_DROPOUT VARLEN
 * Run-time values arrive through VARIANT_ARGS, the same trailing arguments
 * of every flash kernel (src/launch.c sets them), and VARIANT_PASS forwards
 * them to the helpers below.
 *
 * Scores are in the log2 domain: the kernels fold scale*log2(e) into q, so
 * s2 = log2(e) * scale * q.k, and every term added here is scaled the same way.
 */
#ifndef FLASHCL_VARIANTS_CL
#define FLASHCL_VARIANTS_CL

#ifndef FLASHCL_DTYPE
#define FLASHCL_DTYPE 0
#endif
#ifndef HAS_SOFTCAP
#define HAS_SOFTCAP 0
#endif
#ifndef HAS_ALIBI
#define HAS_ALIBI 0
#endif
#ifndef HAS_BIAS
#define HAS_BIAS 0
#endif
#ifndef HAS_MASK
#define HAS_MASK 0
#endif
#ifndef HAS_BLOCK_MASK
#define HAS_BLOCK_MASK 0
#endif
#ifndef HAS_SINKS
#define HAS_SINKS 0
#endif
#ifndef HAS_DROPOUT
#define HAS_DROPOUT 0
#endif
#ifndef VARLEN
#define VARLEN 0
#endif

/* Terms that change every score (not only masks): such tiles always take the per-element path. */
#define HAS_SCORE_TERMS (HAS_SOFTCAP || HAS_ALIBI || HAS_BIAS)
#ifndef HEAD_DIM_V
#ifdef HEAD_DIM
#define HEAD_DIM_V HEAD_DIM
#endif
#endif

/* ------------------------------------------------------------ storage */

/* bfloat16 is the top half of a float32. */
inline float flashcl_bf16_to_float(ushort x) { return as_float((uint)x << 16); }

/* Round to nearest, ties to even; NaN stays a (quiet) NaN. */
inline ushort flashcl_float_to_bf16(float f) {
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}

#if FLASHCL_DTYPE == 0
typedef float store_t;
#define FLASHCL_LOAD(p, i) ((p)[i])
#define FLASHCL_STORE(p, i, x) ((p)[i] = (x))
#define FLASHCL_LOAD4(p, i) vload4(0, (p) + (i))
#elif FLASHCL_DTYPE == 1
/* A pointer to half needs no cl_khr_fp16; only vload_half/vstore_half touch it. */
typedef half store_t;
#define FLASHCL_LOAD(p, i) vload_half((i), (p))
#define FLASHCL_STORE(p, i, x) vstore_half_rte((x), (i), (p))
#define FLASHCL_LOAD4(p, i) vload_half4(0, (p) + (i))
#else
typedef ushort store_t;
#define FLASHCL_LOAD(p, i) flashcl_bf16_to_float((p)[i])
#define FLASHCL_STORE(p, i, x) ((p)[i] = flashcl_float_to_bf16(x))
inline float4 flashcl_bf16x4(ushort4 u) { return as_float4(convert_uint4(u) << 16); }
#define FLASHCL_LOAD4(p, i) flashcl_bf16x4(vload4(0, (p) + (i)))
#endif

/* Four elements at an offset aligned to four elements (16 bytes of float, 8 of 16-bit: one load where
   FLASHCL_LOAD4's vload4 may be split), for views whose rows all start aligned:
   FLASHCL_ROWS_ALIGNED(base, row stride), checked at run time by the tiles kernels. */
#if FLASHCL_DTYPE == 0
#define FLASHCL_LOAD4_ALIGNED(p, i) (*(__global const float4 *)((p) + (i)))
#elif FLASHCL_DTYPE == 2
#define FLASHCL_LOAD4_ALIGNED(p, i) flashcl_bf16x4(*(__global const ushort4 *)((p) + (i)))
#else
#define FLASHCL_LOAD4_ALIGNED(p, i) FLASHCL_LOAD4(p, i)
#endif
#define FLASHCL_ROWS_ALIGNED(p, sr) (((ulong)(p)) % (4 * sizeof(store_t)) == 0 && (sr) % 4 == 0)

/* ------------------------------------------------------- 8-bit KV caches */

/* OCP fp8 e4m3fn to float: bias 7, no infinities, S.1111.111 is NaN, subnormals m * 2^-9. */
inline float flashcl_e4m3_to_float(uchar x) {
    const uint e = (x >> 3) & 0xFu, m = x & 7u;
    float mag = e ? as_float(((e + 120u) << 23) | (m << 20)) : (float)m * 0x1p-9f;
    mag = (e == 15u && m == 7u) ? NAN : mag;
    return (x & 0x80u) ? -mag : mag;
}

/* OCP fp8 e5m2 to float: bias 15, IEEE-like (e = 31 is inf or NaN), subnormals m * 2^-16. */
inline float flashcl_e5m2_to_float(uchar x) {
    const uint e = (x >> 2) & 0x1Fu, m = x & 3u;
    float mag = e ? as_float(((e + 112u) << 23) | (m << 21)) : (float)m * 0x1p-16f;
    mag = e == 31u ? (m ? NAN : INFINITY) : mag;
    return (x & 0x80u) ? -mag : mag;
}

/* Float to fp8, round to nearest even. mant_bits 3 / exp bias 7 (e4m3fn, saturating to 448, NaN
   to 0x7F) or mant_bits 2 / bias 15 (e5m2, overflow to inf). Subnormals round on the fixed grid. */
inline uchar flashcl_float_to_fp8(float f, int e4m3) {
    const uint u = as_uint(f), sign = (u >> 24) & 0x80u;
    const uint mbits = e4m3 ? 3u : 2u, bias = e4m3 ? 7u : 15u;
    const float a = fabs(f);
    if (isnan(f)) return (uchar)(sign | (e4m3 ? 0x7Fu : 0x7Eu));
    const float max_normal = e4m3 ? 448.0f : 57344.0f;
    const float min_normal = e4m3 ? 0x1p-6f : 0x1p-14f;
    if (a < min_normal) {
        /* Subnormal grid: multiples of 2^(1 - bias - mbits); rint rounds half to even. */
        const float q = rint(a * (e4m3 ? 0x1p9f : 0x1p16f));
        return (uchar)(sign | (uint)q); /* q = 2^mbits becomes the smallest normal: same bits */
    }
    uint r = as_uint(a);
    r += (1u << (22u - mbits)) - 1u + ((r >> (23u - mbits)) & 1u); /* round the dropped bits to even */
    uint e = ((r >> 23) & 0xFFu) - 127u + bias, m = (r >> (23u - mbits)) & ((1u << mbits) - 1u);
    /* Overflow is judged on the rounded value (dropped bits cleared): 57344 itself is e5m2's largest. */
    if (as_float(r & ~((1u << (23u - mbits)) - 1u)) > max_normal || e >= (e4m3 ? 16u : 31u)) {
        if (e4m3) return (uchar)(sign | 0x7Eu); /* 448: e4m3fn saturates */
        return (uchar)(sign | 0x7Cu);           /* e5m2: inf */
    }
    return (uchar)(sign | (e << mbits) | m);
}

/* ------------------------------------------------ KV caches (decode family) */

/* CACHE_DTYPE: 0 the cache is store_t, 1 fp8 e4m3, 2 fp8 e5m2. PAGED: keys through a page table. */
#ifndef CACHE_DTYPE
#define CACHE_DTYPE 0
#endif
#ifndef PAGED
#define PAGED 0
#endif
#if CACHE_DTYPE == 0
#define cache_t store_t
#define CACHE_LOAD(p, i) FLASHCL_LOAD(p, i)
#elif CACHE_DTYPE == 1
#define cache_t uchar
#define CACHE_LOAD(p, i) flashcl_e4m3_to_float((p)[i])
#else
#define cache_t uchar
#define CACHE_LOAD(p, i) flashcl_e5m2_to_float((p)[i])
#endif

/* Where K/V row j (counted within the sequence's keys) of sequence b starts, in elements, for
   KV head hk: through the page table (PAGED: page table[b][(kv_start + j) / page_size]; a
   contiguous cache is one page per sequence), else in a flashcl_forward K/V view (k0: varlen). */
inline ulong flashcl_kv_row(int b, long j, int hk, __global const int *table, int max_pages, long page_size,
                            long kv_start, ulong off, ulong sp, ulong sh, ulong sr, long k0) {
#if PAGED
    const long at = kv_start + j;
    const long page = table[(long)b * max_pages + at / page_size];
    return off + (ulong)page * sp + (ulong)hk * sh + (ulong)(at % page_size) * sr;
#else
    return off + (ulong)b * sp + (ulong)hk * sh + (ulong)(k0 + j) * sr;
#endif
}

/* Elements 4*c4 .. 4*c4+3 of a row of `dim` elements, zero past dim. */
inline float4 flashcl_ld4(__global const store_t *row, int c4, int dim) {
    int c = c4 * 4;
    if (c + 4 <= dim) return FLASHCL_LOAD4(row, c);
    float4 r = (float4)(0.0f);
    if (c < dim) r.x = FLASHCL_LOAD(row, c);
    if (c + 1 < dim) r.y = FLASHCL_LOAD(row, c + 1);
    if (c + 2 < dim) r.z = FLASHCL_LOAD(row, c + 2);
    return r;
}

/* The same for a KV-cache row (cache_t, dequantised when fp8). */
inline float4 flashcl_cache_ld4(__global const cache_t *row, int c4, int dim) {
#if CACHE_DTYPE == 0
    return flashcl_ld4(row, c4, dim);
#else
    const int c = c4 * 4;
    return (float4)(c < dim ? CACHE_LOAD(row, c) : 0.0f, c + 1 < dim ? CACHE_LOAD(row, c + 1) : 0.0f,
                    c + 2 < dim ? CACHE_LOAD(row, c + 2) : 0.0f, c + 3 < dim ? CACHE_LOAD(row, c + 3) : 0.0f);
#endif
}

/* Stores the elements of x that fall inside dim. */
inline void flashcl_st4(__global store_t *row, int c4, float4 x, int dim) {
    int c = c4 * 4;
    if (c < dim) FLASHCL_STORE(row, c, x.x);
    if (c + 1 < dim) FLASHCL_STORE(row, c + 1, x.y);
    if (c + 2 < dim) FLASHCL_STORE(row, c + 2, x.z);
    if (c + 3 < dim) FLASHCL_STORE(row, c + 3, x.w);
}

/* ------------------------------------------------------- kernel arguments */

/* win_left/win_right: the resolved window (causal folded in), -1 = unbounded.
   softcap2 = softcap * log2(e). drop_threshold = p * 2^16 rounded to nearest (a key's 16 RNG bits >= it: kept),
   drop_scale = 2^16 / (2^16 - drop_threshold), the inverse of the keep probability (src/variants.c). */
#define VARIANT_ARGS                                                                                                   \
    int win_left, int win_right, float softcap2, __global const float *alibi, ulong alibi_off, ulong alibi_sb,         \
        __global const float *sinks, ulong sinks_off, __global const float *bias, ulong bias_off, ulong bias_sb,       \
        ulong bias_sh, ulong bias_sr, __global const uchar *mask, ulong mask_off, ulong mask_sb, ulong mask_sh,        \
        ulong mask_sr, __global const uchar *bmask, ulong bmask_off, ulong bmask_sb, ulong bmask_sh, ulong bmask_sr,   \
        int bmask_bq, int bmask_bk, __global const int *cu_q, __global const int *cu_k, uint drop_threshold,           \
        float drop_scale, uint seed_lo, uint seed_hi, uint drop_off_lo, uint drop_off_hi
#define VARIANT_PASS                                                                                                   \
    win_left, win_right, softcap2, alibi, alibi_off, alibi_sb, sinks, sinks_off, bias, bias_off, bias_sb, bias_sh,     \
        bias_sr, mask, mask_off, mask_sb, mask_sh, mask_sr, bmask, bmask_off, bmask_sb, bmask_sh, bmask_sr, bmask_bq,  \
        bmask_bk, cu_q, cu_k, drop_threshold, drop_scale, seed_lo, seed_hi, drop_off_lo, drop_off_hi

/* The arguments every portable forward kernel (cl/flash_fwd_rows.cl, _split.cl,
   _tiles.cl) takes after its four views. */
#define FWD_ARGS                                                                                                       \
    __global float *LSE, ulong lse_off, int write_lse, int seqlen_q, int seqlen_k, int heads_q, int group,             \
        float scale_log2, VARIANT_ARGS

/* ------------------------------------------------- one (batch, head) pair */

typedef struct flashcl_head {
    long sq, sk;                      /* this sequence's query and key lengths */
    long off;                         /* sk - sq: bottom-right alignment of causal, window and ALiBi */
    long q0, k0;                      /* first packed row of the sequence (varlen), else 0 */
    float slope2;                     /* ALiBi slope * log2(e) */
    float sink2;                      /* sink logit * log2(e); -inf without sinks */
    ulong bias_at, mask_at, bmask_at; /* element offsets of row 0 of this (b, h) */
    uint bh;                          /* b * heads_q + h: the dropout RNG's head coordinate */
} flashcl_head;

/* A cumulative offset clamped into [0, total]: a bad cu_seqlens array can
   give empty or clipped sequences but never an access outside the views. */
inline long flashcl_cu(__global const int *cu, int i, long total) { return clamp((long)cu[i], 0L, total); }

inline flashcl_head flashcl_head_setup(int b, int h, int heads_q, int seqlen_q, int seqlen_k, VARIANT_ARGS) {
    flashcl_head hd;
#if VARLEN
    hd.q0 = flashcl_cu(cu_q, b, seqlen_q);
    hd.sq = max(flashcl_cu(cu_q, b + 1, seqlen_q) - hd.q0, 0L);
    hd.k0 = flashcl_cu(cu_k, b, seqlen_k);
    hd.sk = max(flashcl_cu(cu_k, b + 1, seqlen_k) - hd.k0, 0L);
#else
    hd.q0 = 0;
    hd.k0 = 0;
    hd.sq = seqlen_q;
    hd.sk = seqlen_k;
#endif
    hd.off = hd.sk - hd.sq;
#if HAS_ALIBI
    hd.slope2 = alibi[alibi_off + (ulong)b * alibi_sb + (ulong)h] * FLASHCL_LOG2E_F;
#else
    hd.slope2 = 0.0f;
#endif
#if HAS_SINKS
    hd.sink2 = sinks[sinks_off + (ulong)h] * FLASHCL_LOG2E_F;
#else
    hd.sink2 = FLASHCL_NEG_INF;
#endif
    hd.bias_at = bias_off + (ulong)b * bias_sb + (ulong)h * bias_sh;
    hd.mask_at = mask_off + (ulong)b * mask_sb + (ulong)h * mask_sh;
    hd.bmask_at = bmask_off + (ulong)b * bmask_sb + (ulong)h * bmask_sh;
    hd.bh = (uint)b * (uint)heads_q + (uint)h;
    return hd;
}

/* A decode work-group's sequence b, for KV head hk's first query head: its geometry (with a
   paged cache, the cache's own length from seqinfo: per sequence {kv_start, kv_len, append
   row, first position}) and in *kv_start where its keys start in the cache (0 unless paged). */
inline flashcl_head flashcl_decode_sequence(int b, int h, int heads_q, int seqlen_q, int seqlen_k,
                                            __global const int *seqinfo, long *kv_start, VARIANT_ARGS) {
    flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
#if PAGED
    *kv_start = seqinfo[4 * b];
    hd.sk = seqinfo[4 * b + 1];
    hd.off = hd.sk - hd.sq;
#else
    *kv_start = 0;
#endif
    return hd;
}

/* An fp8 cache's dequantisation scale of KV head hk (per-tensor or per head); 1 otherwise. */
inline float flashcl_cache_scale(__global const float *scale, int per_head, int hk) {
    return CACHE_DTYPE ? scale[per_head ? hk : 0] : 1.0f;
}

/* Index of LSE (and of the backward's D) for row i of the sequence:
   [batch, heads_q, seqlen_q], or [heads_q, total_q] with varlen. */
inline ulong flashcl_row_index(flashcl_head hd, int b, int h, int heads_q, int seqlen_q, long i) {
#if VARLEN
    return (ulong)h * (ulong)seqlen_q + (ulong)(hd.q0 + i);
#else
    return ((ulong)b * (ulong)heads_q + (ulong)h) * (ulong)seqlen_q + (ulong)i;
#endif
}

/* ------------------------------------------------- visible keys of a row */

/* First and last key (inclusive) query row i may see: causal/window and the length. */
inline long flashcl_key_lo(flashcl_head hd, long i, int win_left) {
    return win_left < 0 ? 0 : max(0L, i + hd.off - win_left);
}
inline long flashcl_key_hi(flashcl_head hd, long i, int win_right) {
    return win_right < 0 ? hd.sk - 1 : min(hd.sk - 1, i + hd.off + win_right);
}

/* Key tiles of width block_n a query block [r0, r1] must visit: [begin, end),
   begin a multiple of block_n. Tiles outside the band are never loaded. */
inline long flashcl_kv_begin(flashcl_head hd, long r0, int block_n, int win_left) {
    long lo = flashcl_key_lo(hd, r0, win_left);
    return lo / block_n * block_n;
}
inline long flashcl_kv_end(flashcl_head hd, long r1, int win_right) {
    return max(flashcl_key_hi(hd, r1, win_right) + 1, 0L);
}

/* Query rows [begin, end) that can see some key of [k0, k1] (backward's dK/dV
   blocks): the inverse of the band. begin is rounded down to block_m. */
inline long flashcl_q_begin(flashcl_head hd, long k0, int block_m, int win_right) {
    long first = win_right < 0 ? 0 : max(0L, k0 - hd.off - win_right);
    return first / block_m * block_m;
}
inline long flashcl_q_end(flashcl_head hd, long k1, int win_left) {
    return win_left < 0 ? hd.sq : clamp(k1 - hd.off + win_left + 1, 0L, hd.sq);
}

/* Whether every pair of rows [r0, r1] x keys [k0, k1] is visible and unmasked,
   so the tile needs no per-element checks. */
inline int flashcl_tile_plain(flashcl_head hd, long r0, long r1, long k0, long k1, int win_left, int win_right) {
#if HAS_MASK || HAS_BLOCK_MASK
    return 0;
#else
    return k0 >= flashcl_key_lo(hd, r1, win_left) && k1 <= flashcl_key_hi(hd, r0, win_right) && r1 < hd.sq;
#endif
}

/* Whether the block mask drops every pair of the tile [r0, r1] x [k0, k1]
   (then it is neither loaded nor computed). Uniform across a work-group. */
inline int flashcl_tile_skipped(flashcl_head hd, long r0, long r1, long k0, long k1, VARIANT_ARGS) {
#if HAS_BLOCK_MASK
    r1 = min(r1, hd.sq - 1);
    k1 = min(k1, hd.sk - 1);
    for (long bi = r0 / bmask_bq; bi <= r1 / bmask_bq; ++bi)
        for (long bj = k0 / bmask_bk; bj <= k1 / bmask_bk; ++bj)
            if (bmask[hd.bmask_at + (ulong)bi * bmask_sr + (ulong)bj]) return 0;
    return 1;
#else
    return 0;
#endif
}

/* ------------------------------------------------------------ the score */

/* Whether key j is visible to row i: the causal/window band, the boolean mask and the block mask. */
inline int flashcl_visible(flashcl_head hd, long i, long j, VARIANT_ARGS) {
    if (j < flashcl_key_lo(hd, i, win_left) || j > flashcl_key_hi(hd, i, win_right)) return 0;
#if HAS_MASK
    if (!mask[hd.mask_at + (ulong)i * mask_sr + (ulong)j]) return 0;
#endif
#if HAS_BLOCK_MASK
    if (!bmask[hd.bmask_at + (ulong)(i / bmask_bq) * bmask_sr + (ulong)(j / bmask_bk)]) return 0;
#endif
    return 1;
}

/* The bias of row i, key j in the log2 domain (0 without a bias). */
inline float flashcl_bias2(flashcl_head hd, long i, long j, VARIANT_ARGS) {
#if HAS_BIAS
    return bias[hd.bias_at + (ulong)i * bias_sr + (ulong)j] * FLASHCL_LOG2E_F;
#else
    return 0.0f;
#endif
}

/* The final log2-domain logit of row i, key j from s2 = log2(e)*scale*q.k:
   -inf where not visible, else the softcap, ALiBi and bias terms applied. */
inline float flashcl_score(float s2, flashcl_head hd, long i, long j, VARIANT_ARGS) {
    if (!flashcl_visible(hd, i, j, VARIANT_PASS)) return FLASHCL_NEG_INF;
#if HAS_SOFTCAP
    s2 = softcap2 * tanh(s2 / softcap2); /* the tensor-core kernels: the SFU's (ptx_tanh, cl/ptx.cl) */
#endif
#if HAS_ALIBI
    s2 -= hd.slope2 * fabs((float)(i + hd.off - j));
#endif
    return s2 + flashcl_bias2(hd, i, j, VARIANT_PASS);
}

/* d(final logit)/d(scaled logit): the softcap's 1 - tanh^2, else 1. */
inline float flashcl_score_grad(float s2, float softcap2) {
#if HAS_SOFTCAP
    float t = tanh(s2 / softcap2);
    return 1.0f - t * t;
#else
    return 1.0f;
#endif
}

/* ------------------------------------------------------------- sinks */

/*
 * Folds the sink logit into a finished row (running max m, sum l, both log2
 * domain, l relative to m): returns the factor the unnormalised output must be
 * multiplied by before dividing by the new *l, and moves *m to the joint max.
 * A row with no visible key keeps l = 0 (output 0) unless the sink is finite.
 */
inline float flashcl_fold_sink(float *m, float *l, float sink2) {
#if HAS_SINKS
    /* The sink is one more key of the row, with score sink2 and no value row. */
    const flashcl_online upd = flashcl_online_update(*m, sink2);
    *l = *l * upd.alpha + exp2(sink2 - upd.base);
    *m = upd.m;
    return upd.alpha;
#else
    return 1.0f;
#endif
}

/* ------------------------------------------------------------ dropout */

/* Philox4x32-10 (Salmon et al., SC'11): ten rounds of two 32x32->64 products. */
inline uint4 flashcl_philox(uint4 c, uint2 k) {
    for (int r = 0; r < 10; ++r) {
        uint hi0 = mul_hi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
        uint hi1 = mul_hi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
        c = (uint4)(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
        k += (uint2)(0x9E3779B9u, 0xBB67AE85u);
    }
    return c;
}

/* `rounds` Philox rounds from key k on 16 counters held as two halves of 8 in the low words of
   64-bit lanes (x[h], y[h], z[h], w[h]): a 32x32->64 product is then one vpmuludq (the masks below
   are free, the instruction reads the low words only), where mul_hi on uint16 took several 32-bit
   multiplies and the shifts and adds between them. The high words of y and w carry the other
   half of the product, which nothing reads (x and z are masked before each product, and the
   results are truncated). The loop over the halves is unrolled, so every index is a constant and
   the eight state vectors stay in registers: left as a loop, POCL kept them on the stack, a store
   and a load in every round's dependency chain. The rounds stay a loop: unrolled too, clang 15
   ran out of registers compiling the family for gfx1100 (test_offline_gfx1100). */
inline void flashcl_philox16_rounds(ulong8 x[2], ulong8 y[2], ulong8 z[2], ulong8 w[2], uint2 k, int rounds) {
    const ulong8 m32 = (ulong8)(0xFFFFFFFFul);
    for (int r = 0; r < rounds; ++r) {
        const ulong8 kx = (ulong8)((ulong)k.x), ky = (ulong8)((ulong)k.y);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const ulong8 p0 = (x[h] & m32) * (ulong8)(0xD2511F53ul);
            const ulong8 p1 = (z[h] & m32) * (ulong8)(0xCD9E8D57ul);
            x[h] = (p1 >> 32) ^ y[h] ^ kx;
            y[h] = p1;
            z[h] = (p0 >> 32) ^ w[h] ^ ky;
            w[h] = p0;
        }
        k += (uint2)(0x9E3779B9u, 0xBB67AE85u);
    }
}

/* The low words of two halves as one uint16, written lane by lane. LLVM's optimiser makes it the
   same one shuffle as (uint16)(convert_uint8(v[0]), convert_uint8(v[1])) would be, but unoptimised
   (Oclgrind's runs) that concatenation and any multi-lane swizzle (.lo, .hi, .s89ab) are
   shufflevectors, whose undefined mask lanes and index 11 Oclgrind 21.10's uninitialised-value
   checker misreads (a crash, or a defined lane reported as uninitialised: tests/CMakeLists.txt);
   single-lane reads and writes are not. So the CPU family builds vectors from parts of others
   lane by lane. */
inline uint16 flashcl_philox16_join(const ulong8 v[2]) {
    return (uint16)((uint)v[0].s0, (uint)v[0].s1, (uint)v[0].s2, (uint)v[0].s3, (uint)v[0].s4, (uint)v[0].s5,
                    (uint)v[0].s6, (uint)v[0].s7, (uint)v[1].s0, (uint)v[1].s1, (uint)v[1].s2, (uint)v[1].s3,
                    (uint)v[1].s4, (uint)v[1].s5, (uint)v[1].s6, (uint)v[1].s7);
}

/* flashcl_philox on 16 counters at once, for kernels with explicit vectors (the CPU family), where
   a scalar Philox per four keys costs several times the scores themselves: lane 8h + n has the
   counter (cx[h].sn, cy[h].sn, cz[h].sn, cw[h].sn) (low 32 bits; the high ones are ignored) and one
   key. The same operations lane by lane, so the same words, bit for bit; the four words come out
   as uint16 (lane 8h + n), word[0..3] = Philox's x, y, z, w. The rounds run on local copies: on
   the caller's arrays, which may alias for all the compiler knows, every round stored and
   reloaded the state. */
inline void flashcl_philox16(const ulong8 cx[2], const ulong8 cy[2], const ulong8 cz[2], const ulong8 cw[2], uint2 k,
                             uint16 word[4]) {
    ulong8 x[2] = {cx[0], cx[1]}, y[2] = {cy[0], cy[1]}, z[2] = {cz[0], cz[1]}, w[2] = {cw[0], cw[1]};
    flashcl_philox16_rounds(x, y, z, w, k, 10);
    word[0] = flashcl_philox16_join(x);
    word[1] = flashcl_philox16_join(y);
    word[2] = flashcl_philox16_join(z);
    word[3] = flashcl_philox16_join(w);
}

/*
 * The dropout mask's RNG: element (i, j) (sequence-local positions) takes 16 bits of one
 * Philox4x32-10 call, whose counter and word are laid out so that one call covers the eight scores
 * an mma.sync lane holds in a 16 x 16 block (rows i and i + 8, keys 2u, 2u + 1, 2u + 8, 2u + 9):
 *   counter (4 floor(j/16) + floor(j/2) mod 4, 8 floor(i/16) + i mod 8, b hq + h, low32(offset)),
 *   key (low32(seed), high32(seed) ^ high32(offset)),
 *   word 2 (floor(i/8) mod 2) + floor(j/8) mod 2, its low 16 bits for an even j, high for odd,
 *   kept iff those bits >= drop_threshold (p 2^16 rounded to nearest).
 * Sixteen bits a score, not thirty-two, so a call serves eight scores (the calls are most of what
 * dropout costs); p is resolved to 2^-17 (FlashAttention's 8-bit threshold: 2^-9).
 */
inline uint4 flashcl_dropout_call(flashcl_head hd, long i, long j, uint seed_lo, uint seed_hi, uint drop_off_lo,
                                  uint drop_off_hi) {
    const uint x = (uint)(((j >> 4) << 2) + ((j >> 1) & 3)), y = (uint)(((i >> 4) << 3) + (i & 7));
    return flashcl_philox((uint4)(x, y, hd.bh, drop_off_lo), (uint2)(seed_lo, seed_hi ^ drop_off_hi));
}

/* Element (i, j)'s word of its call. */
inline uint flashcl_dropout_word(uint4 w, long i, long j) {
    const int t = (int)((((i >> 3) & 1) << 1) + ((j >> 3) & 1));
    return t == 0 ? w.x : t == 1 ? w.y : t == 2 ? w.z : w.w;
}

/* Key j's 16 bits of the word that holds it. */
inline uint flashcl_dropout_half(uint word, long j) { return (j & 1) ? word >> 16 : word & 0xffffu; }

/* Whether element (i, j) survives dropout. One Philox call per element; the tensor-core kernels
   draw each call once for the eight scores it covers. */
inline int flashcl_dropout_keep(flashcl_head hd, long i, long j, uint drop_threshold, uint seed_lo, uint seed_hi,
                                uint drop_off_lo, uint drop_off_hi) {
    const uint4 w = flashcl_dropout_call(hd, i, j, seed_lo, seed_hi, drop_off_lo, drop_off_hi);
    return flashcl_dropout_half(flashcl_dropout_word(w, i, j), j) >= drop_threshold;
}

/* The factor dropout applies to probability (i, j): 0 or 1/(1-p); 1 without dropout. */
inline float flashcl_dropout_factor(flashcl_head hd, long i, long j, VARIANT_ARGS) {
#if HAS_DROPOUT
    return flashcl_dropout_keep(hd, i, j, drop_threshold, seed_lo, seed_hi, drop_off_lo, drop_off_hi) ? drop_scale
                                                                                                      : 0.0f;
#else
    return 1.0f;
#endif
}

#endif
