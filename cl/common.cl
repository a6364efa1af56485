/*
 * Helpers shared by every FlashCL kernel. The host prepends this file to each
 * kernel source, so the kernel files need no #include.
 */
#ifndef FLASHCL_COMMON_CL
#define FLASHCL_COMMON_CL

/* The constants every kernel spells one way. Scores are in the log2 domain
   (the host folds log2(e) into the scale): the kernels multiply natural-log
   quantities (LSE, bias, sinks, ALiBi slopes) by FLASHCL_LOG2E_F, which is
   the float nearest log2(e), 0x1.715476p+0, the value of M_LOG2E_F. */
#define FLASHCL_NEG_INF (-INFINITY)
#define FLASHCL_LOG2E_F 1.4426950408889634f

/* A tensor view: element offset plus strides for (batch, head, row). */
#define VIEW_ARGS(name) ulong name##_off, ulong name##_sb, ulong name##_sh, ulong name##_sr
#define VIEW_BASE(name, b, h) (name##_off + (ulong)(b)*name##_sb + (ulong)(h)*name##_sh)

/*
 * The exp2 base for a row whose running max is m: a fully masked row has
 * m = -inf, and exp2(-inf - -inf) would be NaN. Subtracting 0 instead gives
 * exp2(-inf) = 0 for every masked score, so the row stays all-zero.
 */
inline float flashcl_safe_base(float m) { return m == FLASHCL_NEG_INF ? 0.0f : m; }

/* The LSE of a row whose sum l is not positive: -inf when it saw no key (l = 0), NaN when a NaN or
   infinite input made the sum NaN (its output is NaN too; -inf would tell a backward or a merge
   that the row is empty). */
inline float flashcl_lse_empty(float l) { return isnan(l) ? l : FLASHCL_NEG_INF; }

/* num / l, the factor that normalises a finished row's output (l its softmax sum): 0 for a row that saw
   no key (l = 0), NaN when l is NaN. A NaN sum means a NaN or infinite score or sink reached the row;
   the output then says so as the LSE does (flashcl_lse_empty), instead of reading as an empty row of
   zeros (a NaN sink gave O = 0 with LSE NaN; the tensor-core forward and the merge already gave NaN). */
inline float flashcl_row_inv(float num, float l) { return l > 0.0f ? num / l : isnan(l) ? NAN : 0.0f; }

/* Natural-log LSE of a finished row from its log2-domain max m and sum l
   (relative to m): ln(2) * (m + log2(l)); flashcl_lse_empty when l is not positive. */
inline float flashcl_lse(float m, float l) { return l > 0.0f ? M_LN2_F * (m + log2(l)) : flashcl_lse_empty(l); }

/*
 * The online-softmax update (FlashAttention's running max and rescale) of one
 * row with log2-domain scores, when a tile of scores whose largest is
 * tile_max arrives: the row's running max m becomes upd.m = max(m, tile_max),
 * the tile's probabilities are p = exp2(s - upd.base), and what was summed
 * against the old max (the running sum l, the unnormalised output o) is
 * multiplied by upd.alpha = exp2(m - upd.base) before the tile's terms join:
 *     const flashcl_online upd = flashcl_online_update(m, tile_max);
 *     l = l * upd.alpha + sum(p);   o = o * upd.alpha + sum(p v);   m = upd.m;
 * upd.base is upd.m, or 0 while the row has seen no key (flashcl_safe_base):
 * such a row keeps l = 0 and o = 0 instead of NaN. The portable forward
 * kernels (rows, split, tiles) and the sink fold (flashcl_fold_sink) use it;
 * the CPU family and the tensor-core forward cannot (cpu_softmax_chunk and
 * flash_fwd_mma say why).
 */
typedef struct flashcl_online {
    float m;     /* the new running max */
    float base;  /* exp2 base of the tile's probabilities */
    float alpha; /* factor for what was accumulated against the old max */
} flashcl_online;

inline flashcl_online flashcl_online_update(float m, float tile_max) {
    flashcl_online upd;
    upd.m = fmax(m, tile_max);
    upd.base = flashcl_safe_base(upd.m);
    upd.alpha = exp2(m - upd.base);
    return upd;
}

/* Last key (inclusive) query row i may see under a bottom-right causal mask. */
inline long flashcl_causal_limit(long i, long seqlen_q, long seqlen_k) { return i + seqlen_k - seqlen_q; }

#ifdef HEAD_DIM
/* Four elements c4*4 .. c4*4+3 of a head_dim row, zero past HEAD_DIM (kernels
   specialised per head dim; any HEAD_DIM, not only multiples of 4). */
inline float4 flashcl_load_row4(__global const float *row, int c4) {
#if HEAD_DIM % 4 == 0
    return vload4(c4, row);
#else
    float4 r = (float4)(0.0f);
    int c = c4 * 4;
    r.x = row[c];
    if (c + 1 < HEAD_DIM) r.y = row[c + 1];
    if (c + 2 < HEAD_DIM) r.z = row[c + 2];
    if (c + 3 < HEAD_DIM) r.w = row[c + 3];
    return r;
#endif
}

/* Stores the elements of x that fall inside HEAD_DIM. */
inline void flashcl_store_row4(__global float *row, int c4, float4 x) {
    int c = c4 * 4;
    row[c] = x.x;
    if (c + 1 < HEAD_DIM) row[c + 1] = x.y;
    if (c + 2 < HEAD_DIM) row[c + 2] = x.z;
    if (c + 3 < HEAD_DIM) row[c + 3] = x.w;
}
#endif

inline float flashcl_sum4(float4 a) { return (a.x + a.y) + (a.z + a.w); }

/*
 * 2^x for 16 values, for the CPU kernels (where the OpenCL built-in is a
 * library call per element on POCL and showed in the profile): 2^round(x)
 * times a degree-6 polynomial on [-0.5, 0.5], relative error ~1e-7, for
 * -126 <= x <= 0 (larger x only loses range). Below -126 the unmasked form
 * returns about 2^-126, not 0 (for scores no mask touches); max and the
 * 1.5 * 2^23 rounding trick stand in for fmax and rint, which carry NaN
 * handling and a library call. A NaN input is kept, so it reaches the rows
 * it touches.
 */
inline float16 flashcl_exp2_16_unmasked(float16 x) {
    const float16 xc = max(x, (float16)(-126.0f));
    const float16 t = xc + (float16)(12582912.0f); /* round to nearest: n sits in t's low mantissa bits */
    const float16 n = t - (float16)(12582912.0f);
    const float16 f = xc - n;
    float16 p = (float16)(1.5403530393381608e-4f);
    p = fma(p, f, (float16)(1.3333558146428443e-3f));
    p = fma(p, f, (float16)(9.6181291076284772e-3f));
    p = fma(p, f, (float16)(5.5504108664821580e-2f));
    p = fma(p, f, (float16)(2.4022650695910071e-1f));
    p = fma(p, f, (float16)(6.9314718055994531e-1f));
    p = fma(p, f, (float16)(1.0f));
    const float16 r = as_float16(as_int16(p) + ((as_int16(t) - (int16)(0x4B400000)) << 23));
    return select(r, x, isnan(x));
}

/* The same, exactly 0 below -126 (and for masked scores, -inf), so a row that sees no key sums to 0. */
inline float16 flashcl_exp2_16(float16 x) {
    return select(flashcl_exp2_16_unmasked(x), (float16)(0.0f), x < (float16)(-126.0f));
}

/*
 * A loop the work-items of a group share: item `lid` of `wg` takes v = lid,
 * lid + wg, ... below n. Use it instead of `for (v = lid; v < n; v += wg)`
 * and follow it with the body:
 *     FLASHCL_SHARED_FOR(int, e, BLOCK_M * D4, lid, WG_SIZE) { ... }
 * The loop counts v_base, which is the same on every work-item, and tests v
 * in an `if` (folded away when n is a multiple of wg known at compile time:
 * then every item runs every iteration).
 *
 * Why: POCL 3.1 (LLVM 15, the default `loopvec` work-group method, seen on
 * AVX-512 hosts) miscompiles kernels with barriers in one pattern. Where a
 * barrier region holds a branch it must treat as uniform (an early `return`
 * or a tile-skipping `continue` ahead of barriers) it "peels" work-item 0 to
 * decide it, and work-item-dependent tests in the same region were then
 * decided with work-item 0's values for the whole group: a loop guard
 * `lid < n` (items n .. wg-1 ran an iteration and wrote past a __local array:
 * the tiled backward's NaN dK), or an epilogue's row test (stores past the
 * output). Hence, in the portable kernels: no loop starts at the local id
 * (tests/check_kernel_idioms.cmake), no early return ahead of barriers (an
 * `active` flag empties the loops instead), and a divergent write that
 * follows a skip decision gets a barrier of its own. test_shared_loop
 * (tests/pocl_shared_loop.c) reproduces the loop-guard case on the device.
 */
#define FLASHCL_SHARED_FOR(type, v, n, lid, wg)                                                                        \
    for (type v##_base = 0, v = (lid); v##_base < (n); v##_base += (wg), v = v##_base + (lid))                         \
        if ((n) % (wg) == 0 || v < (n))

/* A float4's lanes into 4 consecutive private floats, and 4 of them back into a float4: the tiles kernels
   hold a tile's 16-byte global loads in private arrays until the products before its __local stores end. */
#define FLASHCL_UNPACK4(dst, f4) ((dst)[0] = (f4).x, (dst)[1] = (f4).y, (dst)[2] = (f4).z, (dst)[3] = (f4).w)
#define FLASHCL_PACK4(src) ((float4)((src)[0], (src)[1], (src)[2], (src)[3]))

/* n consecutive floats from (to) 16-byte aligned __local memory, as float4 accesses where n
   is a multiple of 4, else one float at a time. The "% (n)" keeps indices in range when n < 4, where
   that branch is dead code. One 16-byte access is one instruction where four were: the tiles kernels'
   products read their operands this way. */
#define FLASHCL_LDS_READ(dst, src, n)                                                                                  \
    do {                                                                                                               \
        if ((n) % 4 == 0) {                                                                                            \
            for (int w_ = 0; w_ < (n); w_ += 4) {                                                                      \
                float4 t_ = vload4(0, (src) + w_);                                                                     \
                (dst)[w_ % (n)] = t_.x, (dst)[(w_ + 1) % (n)] = t_.y;                                                  \
                (dst)[(w_ + 2) % (n)] = t_.z, (dst)[(w_ + 3) % (n)] = t_.w;                                            \
            }                                                                                                          \
        } else {                                                                                                       \
            for (int u_ = 0; u_ < (n); ++u_) (dst)[u_] = (src)[u_];                                                    \
        }                                                                                                              \
    } while (0)
#define FLASHCL_LDS_WRITE(dst, src, n)                                                                                 \
    do {                                                                                                               \
        if ((n) % 4 == 0) {                                                                                            \
            for (int w_ = 0; w_ < (n); w_ += 4)                                                                        \
                vstore4((float4)((src)[w_ % (n)], (src)[(w_ + 1) % (n)], (src)[(w_ + 2) % (n)],                        \
                                 (src)[(w_ + 3) % (n)]),                                                               \
                        0, (dst) + w_);                                                                                \
        } else {                                                                                                       \
            for (int u_ = 0; u_ < (n); ++u_) (dst)[u_] = (src)[u_];                                                    \
        }                                                                                                              \
    } while (0)

#endif
