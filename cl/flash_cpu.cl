/*
 * FlashAttention forward and backward for CPUs (POCL).
 *
 * POCL runs a work-group as a loop over its work-items and leaves wide code
 * to LLVM's loop vectoriser, which does little with kernels that keep private
 * arrays and data-dependent loops. So here a work-group is one work-item and
 * the vectors are explicit: a work-item owns GROUPS groups of 16 rows (query
 * rows, or keys in the dK/dV kernel), each group the 16 lanes of a float16
 * (two AVX2 registers, one AVX-512 register), and streams the other side in
 * chunks of CHUNK rows from a dense copy that flash_cpu_pack made once per
 * call (K and V; Q and dO for dK/dV). Each chunk serves every group of the
 * work-item from L1 before the next is read.
 *
 * Every product is one micro-kernel (cpu_rank_update): C^T[n][16 lanes] +=
 * sum_i A^T[i][16 lanes] * B(n, i), STEP columns n at a time, with A^T in a
 * private array (one vector load feeds STEP FMAs) and B broadcast from the
 * packed chunk (one scalar load feeds 16 FMAs), as the inner loop of a GEMM:
 *
 *   forward  S^T[key][row]  = q^T . K        (A = q^T,  B(key, c) = K[key][c])
 *            O^T[c][row]   += P^T . V        (A = P^T,  B(c, key) = V[key][c])
 *   dQ       S^T, dP^T[key][row] = dO^T . V, dQ^T[c][row] += dS^T . K
 *   dK/dV    S[row][key]    = K^T . Q,  dP = V^T . dO,
 *            dV^T[c][key]  += P . dO,   dK^T[c][key] += dS . Q
 *
 * With the 16 rows in lanes the online softmax is vertical as well (running
 * max, rescale, sum are float16 operations, no horizontal reductions).
 * Scores are in the log2 domain (log2(e) folded into the scale by the host);
 * exp2 is a short polynomial (cpu_exp2) because at d = 64 a score costs only
 * 128 FMAs and the library exp2 would take a third of the time.
 *
 * Any head dims (Q and K have HEAD_DIM columns, V, O, dO and dV HEAD_DIM_V;
 * the two products of each kernel and the packed copies are sized by their
 * own), any sequence lengths (rows past the end are computed on a clamped
 * row and never stored, keys past the end are padding and masked), GQA,
 * bottom-right causal masks with the loops cut at the last visible chunk. A
 * row that sees no key gets O = 0, LSE = -inf and zero gradients.
 *
 * Varlen (VARLEN, cu_seqlens): the views are [total, heads, dim] and
 * sequence b is rows hd.q0 .. hd.q0 + hd.sq - 1 (keys hd.k0 ..); every
 * length, mask and band above is that sequence's own (flashcl_head_setup).
 * The grids cover the longest sequence and blocks past a shorter one return
 * at once; an empty sequence writes nothing. The packed copies hold each
 * head's whole [total] rows plus one chunk of padding, so a chunk that starts
 * inside a sequence never reads past the copy (the rows it reads past the
 * sequence's end are the next sequence's, masked like any padding).
 *
 * Variants (cl/variants.cl, the same switches and VARIANT_ARGS as the
 * portable kernels, and the same semantics): Q/K/V/O and the gradients are
 * store_t (float, half or bfloat16), converted to float where they are
 * loaded (the resident side) or packed (flash_cpu_pack writes float), and
 * rounded where they are stored. The window (causal is the window (left, 0))
 * bounds the chunks visited; chunks inside every row's band take the
 * unmasked path. Softcap and ALiBi are vector operations on the chunk's
 * scores; bias, boolean and block masks are gathered per element; chunks the
 * block mask drops are skipped; dropout multiplies P with the Philox words of
 * flashcl_dropout_call (the portable kernels' mask, bit for bit); sinks are
 * folded into each row at the end (flashcl_fold_sink), and their gradient has
 * a kernel of its own.
 */

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM
#endif
/* Keys (forward, dQ) or query rows (dK/dV) per pass; a multiple of STEP. */
#ifndef CHUNK
#define CHUNK 48
#endif
/* Columns per micro-tile: 16 * STEP lanes of accumulators (2 * STEP ymm). */
#ifndef STEP
#define STEP 6
#endif
/* 1: the polynomial exp2 below; 0: the OpenCL built-in. */
#ifndef FAST_EXP2
#define FAST_EXP2 1
#endif

#define LANES 16
/* 16-row groups per work-item: each packed chunk of the other side feeds GROUPS groups. */
#ifndef GROUPS
#define GROUPS 1
#endif
#define BLOCK (GROUPS * LANES)
/* Head dims rounded up to whole micro-tiles (the packed rows' pitch, the accumulators' columns);
   pad columns read a clamped column and are never stored. DIM_PAD: Q, K; DIM_PAD_V: V, dO. */
#define DIM_PAD ((HEAD_DIM + STEP - 1) / STEP * STEP)
#define DIM_PAD_V ((HEAD_DIM_V + STEP - 1) / STEP * STEP)

/* 2^x: the polynomial flashcl_exp2_16 (cl/common.cl) by default, which at d = 64 matters: a
   score costs only 128 FMAs there and the library exp2 would take a third of the time.
   Both forms give exactly 0 below 2^-64 (CPU_FLUSH): such a probability is far below float's
   resolution of any row sum (the largest term is 1: 2048 keys of 2^-64 are 1e-16 of it), and
   kept, its products down the chain (P dO, P (dP - D), then times Q or K) reach float's
   denormal range, which x86 computes in microcode: the ALiBi backward, whose far keys sit
   hundreds below the row max, ran 9-18x slower than plain with the cut at 2^-126 or 2^-100,
   at plain speed with 2^-60 (measured). cpu_exp2_unmasked is for scores with no -inf (no mask
   applied); it differs from cpu_exp2 only with FAST_EXP2 = 0. */
#define CPU_FLUSH (-64.0f)
inline float16 cpu_exp2_unmasked(float16 x) {
#if FAST_EXP2
    return select(flashcl_exp2_16_unmasked(x), (float16)(0.0f), x < (float16)(CPU_FLUSH));
#else
    return select(exp2(x), (float16)(0.0f), x < (float16)(CPU_FLUSH));
#endif
}
inline float16 cpu_exp2(float16 x) {
#if FAST_EXP2
    return select(flashcl_exp2_16_unmasked(x), (float16)(0.0f), x < (float16)(CPU_FLUSH));
#else
    return select(exp2(x), (float16)(0.0f), x < (float16)(CPU_FLUSH));
#endif
}

/* out[c * 16 + r] = scale * rows[min(first + r, count - 1)][c], c < dim: 16 rows transposed. */
inline void cpu_load_transposed(__global const store_t *base, ulong stride, int first, int count, float scale,
                                float *out, int dim) {
    for (int r = 0; r < LANES; ++r) {
        __global const store_t *row = base + (ulong)min(first + r, count - 1) * stride;
        for (int c = 0; c < dim; ++c) out[c * LANES + r] = scale * FLASHCL_LOAD(row, c);
    }
}

/* Stores 16 transposed rows (acc[c * 16 + r], c < dim) times scale into rows first .. count-1 of a view. */
inline void cpu_store_transposed(const float *acc, float scale, __global store_t *base, ulong stride, int first,
                                 int count, int dim) {
    for (int r = 0; r < min(LANES, count - first); ++r) {
        __global store_t *row = base + (ulong)(first + r) * stride;
        for (int c = 0; c < dim; ++c) FLASHCL_STORE(row, c, acc[c * LANES + r] * scale);
    }
}

/*
 * The micro-kernel: for the STEP columns n0 .. n0+STEP-1,
 *   c[n] = keep * c[n] + sum_{i < inner} a[i] * b[n * n_stride + i * i_stride]
 * where a[i] and c[n] are float16 rows of private arrays and b, a packed
 * chunk (flash_cpu_pack), is broadcast. keep is a per-lane rescale (the
 * forward's alpha; 1 to accumulate); fresh products pass fresh = 1 and never read c.
 */
inline void cpu_rank_update(const float *a, int inner, __global const float *b, int n_stride, int i_stride, int fresh,
                            float16 keep, float *c, int n0) {
    float16 acc[STEP];
#pragma unroll
    for (int t = 0; t < STEP; ++t) acc[t] = fresh ? (float16)(0.0f) : vload16(n0 + t, c) * keep;
    __global const float *bp = b + n0 * n_stride;
    /* Unrolled: a few percent less loop overhead around the 12 FMAs (measured). */
#pragma unroll 4
    for (int i = 0; i < inner; ++i) {
        const float16 x = vload16(i, a);
#pragma unroll
        for (int t = 0; t < STEP; ++t) acc[t] = fma(x, (float16)(bp[t * n_stride]), acc[t]);
        bp += i_stride;
    }
#pragma unroll
    for (int t = 0; t < STEP; ++t) vstore16(acc[t], n0 + t, c);
}

/* c^T[n][lanes] = a^T . chunk[n]^T for the CHUNK rows n of a packed chunk of `dim` columns (pitch
   its rounded width; a holds dim float16 rows: a transposed, pre-scaled group of 16 rows). The
   callers pass constants (HEAD_DIM, DIM_PAD or HEAD_DIM_V, DIM_PAD_V): after inlining the loops
   are the fixed-size ones. */
inline void cpu_product_rows(const float *a, __global const float *chunk, float *c, int dim, int pitch) {
    for (int n0 = 0; n0 < CHUNK; n0 += STEP) cpu_rank_update(a, dim, chunk, pitch, 1, 1, (float16)(1.0f), c, n0);
}

/* acc^T[c][lanes] = keep * acc^T[c] + sum_{i < rows} p^T[i] * chunk[i][c] for the pitch columns c of
   a packed chunk (p's rows past `rows` are never read). */
inline void cpu_accumulate_cols(const float *p, __global const float *chunk, int rows, float16 keep, float *acc,
                                int pitch) {
    for (int c0 = 0; c0 < pitch; c0 += STEP) cpu_rank_update(p, rows, chunk, 1, pitch, 0, keep, acc, c0);
}

/* Rows padded to whole chunks. */
inline int cpu_padded(int rows) { return (rows + CHUNK - 1) / CHUNK * CHUNK; }

/* Rows of one head's packed copy: its rows padded to whole chunks, or with varlen the total of
   every sequence's rows and one chunk more (a chunk starts at most CHUNK - 1 rows before a
   sequence's end, so it ends inside the copy). */
inline int cpu_pack_rows(int rows) {
#if VARLEN
    return rows + CHUNK;
#else
    return cpu_padded(rows);
#endif
}

/* A packed row's width: dim (HEAD_DIM or HEAD_DIM_V) rounded up to whole micro-tiles. */
inline int cpu_pitch(int dim) { return (dim + STEP - 1) / STEP * STEP; }

/*
 * Copies a view of `dim` columns into a dense [batch][heads][cpu_pack_rows][cpu_pitch(dim)]
 * buffer ([1][heads][..] with varlen: a head's rows of every sequence), pad rows and columns
 * repeating the last real one (finite values; the kernels mask them). The kernels read their
 * streamed side (K and V, or Q and dO) from such a copy: rows of a [b, s, h, d] view lie h*d
 * floats apart, a power of two, so the rows of a chunk would share a few L1 sets and defeat the
 * prefetchers; the dense copy costs one pass over the tensor. Half and bfloat16 views are
 * converted here, once, so the kernels stream float. dim is an argument, so that one kernel
 * packs K and V (Q and dO) when d_v != d.
 * Grid: (ceil(cpu_pack_rows / BLOCK), heads, batch or 1 with varlen).
 */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
flash_cpu_pack(__global const store_t *X, VIEW_ARGS(x), __global float *out, int rows, int heads, int dim) {
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const int padded = cpu_pack_rows(rows), pitch = cpu_pitch(dim);
    __global const store_t *xb = X + VIEW_BASE(x, b, h);
    __global float *ob = out + ((ulong)b * heads + h) * (ulong)padded * (ulong)pitch;
    const int first = (int)get_group_id(0) * BLOCK;
    for (int r = first; r < min(first + BLOCK, padded); ++r) {
        __global const store_t *row = xb + (ulong)min(r, rows - 1) * x_sr;
        __global float *dst = ob + (ulong)r * (ulong)pitch;
        for (int c = 0; c < dim; ++c) dst[c] = FLASHCL_LOAD(row, c);
        for (int c = dim; c < pitch; ++c) dst[c] = FLASHCL_LOAD(row, dim - 1);
    }
}

/* Row `first` (a sequence's first row with varlen, else 0) of head h of batch b in a packed copy
   of `rows` rows per head (the view's) and `pitch` floats per row. */
inline __global const float *cpu_packed(__global const float *base, int b, int heads, int h, int rows, int pitch,
                                        long first) {
#if VARLEN
    b = 0; /* one [total] copy per head */
#endif
    return base + (((ulong)b * heads + h) * (ulong)cpu_pack_rows(rows) + (ulong)first) * (ulong)pitch;
}

#define CPU_LANE_IDS ((int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))

/* A prefetch of the cache line holding *p where the compiler has one for the target: x86 under
   POCL (prefetcht0; OpenCL's prefetch() compiles to nothing there, POCL 3.1). Elsewhere (GPUs,
   Oclgrind) nothing. */
#if defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#define CPU_PREFETCH(p) __builtin_prefetch(p)
#else
#define CPU_PREFETCH(p) ((void)0)
#endif

/* First and last key (inclusive) each of the 16 rows first .. first+15 may see (window, causal, length). */
inline void cpu_key_range(flashcl_head hd, int first, int win_left, int win_right, int16 *lo, int16 *hi) {
    int a[LANES], z[LANES];
    for (int r = 0; r < LANES; ++r) {
        a[r] = (int)flashcl_key_lo(hd, first + r, win_left);
        z[r] = (int)flashcl_key_hi(hd, first + r, win_right);
    }
    *lo = vload16(0, a);
    *hi = vload16(0, z);
}

/* tanh for the softcap, (1 - e) / (1 + e) with e = 2^(-2 log2(e) |y|) through the polynomial exp2:
   a few vector operations where the built-in is a library call per lane on POCL. Below |y| = 1/4
   its series, where 1 - e cancels: a softcap C scales the score by C / |y|, so
   only a relative error of a few ulp keeps a large C exact (with 1 - e alone, C = 1e4 was off by
   1e-4 and C = 1e30 by everything). NaN stays NaN. */
inline float16 cpu_tanh(float16 y) {
    const float16 e = flashcl_exp2_16((float16)(-2.0f * FLASHCL_LOG2E_F) * fabs(y));
    const float16 big = copysign(((float16)(1.0f) - e) / ((float16)(1.0f) + e), y);
    const float16 y2 = y * y;
    const float16 small =
        y + y * y2 * (-1.0f / 3 + y2 * (2.0f / 15 + y2 * (-17.0f / 315 + y2 * (62.0f / 2835))));
    return select(big, small, fabs(y) < (float16)(0.25f));
}

/* t[c][r] = t[r][c] for a 16x16 tile in 16 float16: four rounds of the perfect shuffle (out[2k],
   out[2k+1] = the lane-by-lane interleave of in[k] and in[k+8]), each rotating the 8-bit
   (row, lane) address left by one bit, so four swap row and lane. 64 two-source shuffles. */
inline void cpu_transpose16(float16 t[LANES]) {
#pragma unroll
    for (int round = 0; round < 4; ++round) {
        float16 u[LANES];
#pragma unroll
        for (int k = 0; k < LANES / 2; ++k) {
            const float16 a = t[k], b = t[k + LANES / 2];
            u[2 * k] = (float16)(a.s0, b.s0, a.s1, b.s1, a.s2, b.s2, a.s3, b.s3, a.s4, b.s4, a.s5, b.s5, a.s6, b.s6,
                                 a.s7, b.s7);
            u[2 * k + 1] = (float16)(a.s8, b.s8, a.s9, b.s9, a.sa, b.sa, a.sb, b.sb, a.sc, b.sc, a.sd, b.sd, a.se, b.se,
                                     a.sf, b.sf);
        }
#pragma unroll
        for (int k = 0; k < LANES; ++k) t[k] = u[k];
    }
}

/*
 * The score terms of a chunk with rows in lanes (forward, dQ): s[j][r] = s2
 * of row first+r and key j0+j becomes flashcl_score's logit before the window
 * (softcap, ALiBi, bias, boolean and block mask). With want_grad (the
 * backward) grad[j][r] gets d(logit)/d(s2), the softcap's 1 - tanh^2.
 * Pad rows and keys read the last real row and key; they are never stored.
 */
inline void cpu_terms_rows(float *s, float *grad, int want_grad, flashcl_head hd, int first, int j0, VARIANT_ARGS) {
#if HAS_SOFTCAP || HAS_ALIBI
    const float16 pos = convert_float16((int16)(first + (int)hd.off) + CPU_LANE_IDS);
    for (int j = 0; j < CHUNK; ++j) {
        float16 x = vload16(j, s);
#if HAS_SOFTCAP
        const float16 t = cpu_tanh(x * (1.0f / softcap2));
        x = softcap2 * t;
        if (want_grad) vstore16((float16)(1.0f) - t * t, j, grad);
#endif
#if HAS_ALIBI
        x -= hd.slope2 * fabs(pos - (float)(j0 + j));
#endif
        vstore16(x, j, s);
    }
#endif
#if HAS_BIAS || HAS_MASK
    /* Keys 0 .. jv-1 of the chunk in 16x16 tiles where all 16 rows and keys are real: 16 vector
       loads along the bias (mask) rows, transposed in registers (cpu_transpose16), in place of
       256 scalar loads into strided lanes. The rest element by element. */
    int jv = 0;
    if (first + LANES <= hd.sq && j0 + CHUNK <= hd.sk) {
        for (; jv + LANES <= CHUNK; jv += LANES) {
            float16 t[LANES];
#if HAS_BIAS
#pragma unroll
            for (int r = 0; r < LANES; ++r)
                t[r] = vload16(0, bias + hd.bias_at + (ulong)(first + r) * bias_sr + (ulong)(j0 + jv));
            cpu_transpose16(t);
#pragma unroll
            for (int c = 0; c < LANES; ++c) vstore16(vload16(jv + c, s) + t[c] * FLASHCL_LOG2E_F, jv + c, s);
#endif
#if HAS_MASK
#pragma unroll
            for (int r = 0; r < LANES; ++r)
                t[r] = convert_float16(vload16(0, mask + hd.mask_at + (ulong)(first + r) * mask_sr + (ulong)(j0 + jv)));
            cpu_transpose16(t);
#pragma unroll
            for (int c = 0; c < LANES; ++c)
                vstore16(select(vload16(jv + c, s), (float16)(FLASHCL_NEG_INF), t[c] == (float16)(0.0f)), jv + c, s);
#endif
        }
    }
    for (int r = 0; r < LANES; ++r) {
        const ulong i = (ulong)min((long)(first + r), hd.sq - 1);
        for (int j = jv; j < CHUNK; ++j) {
            const ulong key = (ulong)min((long)(j0 + j), hd.sk - 1);
            float x = s[j * LANES + r];
#if HAS_BIAS
            x += bias[hd.bias_at + i * bias_sr + key] * FLASHCL_LOG2E_F;
#endif
#if HAS_MASK
            if (!mask[hd.mask_at + i * mask_sr + key]) x = FLASHCL_NEG_INF;
#endif
            s[j * LANES + r] = x;
        }
    }
#endif
#if HAS_BLOCK_MASK
    for (int r = 0; r < LANES; ++r) {
        const ulong i = (ulong)min((long)(first + r), hd.sq - 1);
        for (int j = 0; j < CHUNK; ++j) {
            const ulong key = (ulong)min((long)(j0 + j), hd.sk - 1);
            if (!bmask[hd.bmask_at + (i / (ulong)bmask_bq) * bmask_sr + key / (ulong)bmask_bk])
                s[j * LANES + r] = FLASHCL_NEG_INF;
        }
    }
#endif
}

/* The Philox key of flashcl_dropout_call. */
#define CPU_DROPOUT_KEY ((uint2)(seed_lo, seed_hi ^ drop_off_hi))

/* flashcl_philox16 of the counters (q[h], y0 + c, bh, off) in lane 8h + c: only y differs between
   the lanes of a half, so the first three rounds are in part scalar (per half: round 1 multiplies
   x and z, both uniform; round 2 z, round 3 x, as the uniform words move through the state); from
   round 4 every word differs. The same operations as flashcl_philox16, so the same words. */
inline void cpu_philox16_rows(const uint q[2], uint y0, uint bh, uint off, uint2 k, uint16 w[4]) {
    const uint2 inc = (uint2)(0x9E3779B9u, 0xBB67AE85u);
    const ulong8 lane = (ulong8)(0, 1, 2, 3, 4, 5, 6, 7);
    /* Round 1: y is the only lane-varying input. */
    const ulong a1 = (ulong)bh * 0xCD9E8D57ul;
    ulong8 x1[2];
    uint z1[2], w1[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const ulong a0 = (ulong)q[h] * 0xD2511F53ul;
        x1[h] = (ulong8)((ulong)(((uint)(a1 >> 32)) ^ k.x)) ^ ((ulong8)(y0) + lane);
        z1[h] = (uint)(a0 >> 32) ^ off ^ k.y;
        w1[h] = (uint)a0;
    }
    const uint y1 = (uint)a1;
    k += inc;
    /* Round 2: x varies, z is uniform. */
    uint x2[2], y2[2];
    ulong8 z2[2], w2[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const ulong b1 = (ulong)z1[h] * 0xCD9E8D57ul;
        x2[h] = (uint)(b1 >> 32) ^ y1 ^ k.x;
        y2[h] = (uint)b1;
        const ulong8 p0 = (x1[h] & (ulong8)(0xFFFFFFFFul)) * (ulong8)(0xD2511F53ul);
        z2[h] = (p0 >> 32) ^ (ulong8)((ulong)(w1[h] ^ k.y));
        w2[h] = p0;
    }
    k += inc;
    /* Round 3: x is uniform, z varies. */
    ulong8 x[2], y[2], z[2], wv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const ulong c0 = (ulong)x2[h] * 0xD2511F53ul;
        const ulong8 p1 = (z2[h] & (ulong8)(0xFFFFFFFFul)) * (ulong8)(0xCD9E8D57ul);
        x[h] = (p1 >> 32) ^ (ulong8)((ulong)(y2[h] ^ k.x));
        y[h] = p1;
        z[h] = (ulong8)((ulong)((uint)(c0 >> 32) ^ k.y)) ^ w2[h];
        wv[h] = (ulong8)((ulong)(uint)c0);
    }
    k += inc;
    flashcl_philox16_rounds(x, y, z, wv, k, 7);
    w[0] = flashcl_philox16_join(x);
    w[1] = flashcl_philox16_join(y);
    w[2] = flashcl_philox16_join(z);
    w[3] = flashcl_philox16_join(wv);
}

/* The dropout factors (0 or 1/(1-p)) of sixteen 16-bit RNG halves: the high (hi) or low halves
   of w (cl/variants.cl, flashcl_dropout_keep). */
inline float16 cpu_keep_factors(uint16 w, int hi, VARIANT_ARGS) {
    const uint16 bits = hi ? w >> 16 : w & (uint16)(0xffffu);
    return select((float16)(0.0f), (float16)(drop_scale), bits >= (uint16)(drop_threshold));
}

/* Lanes 8h .. 8h+7 of a, then the same of b, gathered lane by lane (flashcl_philox16_join says why). */
inline uint16 cpu_join_half(uint16 a, uint16 b, int h) {
    return h ? (uint16)(a.s8, a.s9, a.sa, a.sb, a.sc, a.sd, a.se, a.sf, b.s8, b.s9, b.sa, b.sb, b.sc, b.sd, b.se, b.sf)
             : (uint16)(a.s0, a.s1, a.s2, a.s3, a.s4, a.s5, a.s6, a.s7, b.s0, b.s1, b.s2, b.s3, b.s4, b.s5, b.s6, b.s7);
}

/* Multiplies x[j][r] (rows in lanes, keys j0 + j) by the dropout factor of (first + r, j0 + j) (first
   a multiple of 16). A call of the mask's RNG (cl/variants.cl) covers rows c, c + 8 and keys
   2u + {0, 1, 8, 9} of a 16 x 16 block: one cpu_philox16_rows takes the 8 row pairs of two u for
   eight keys of all 16 rows. */
inline void cpu_dropout_rows(float *x, flashcl_head hd, int first, int j0, VARIANT_ARGS) {
#if HAS_DROPOUT
    const uint y0 = (uint)((first >> 4) << 3);
    for (int blk = j0 >> 4; blk * 16 < j0 + CHUNK; ++blk)
        for (int u0 = 0; u0 < 4; u0 += 2) {
            const uint q[2] = {(uint)(4 * blk + u0), (uint)(4 * blk + u0 + 1)};
            uint16 w[4];
            cpu_philox16_rows(q, y0, hd.bh, drop_off_lo, CPU_DROPOUT_KEY, w);
            for (int h = 0; h < 2; ++h)
                for (int n = 0; n < 2; ++n) {
                    const uint16 bits = cpu_join_half(w[n], w[2 + n], h); /* rows 0-7: word n; 8-15: word 2 + n */
                    for (int odd = 0; odd < 2; ++odd) {
                        const int j = 16 * blk + 8 * n + 2 * (u0 + h) + odd - j0;
                        if (j >= 0 && j < CHUNK)
                            vstore16(vload16(j, x) * cpu_keep_factors(bits, odd, VARIANT_PASS), j, x);
                    }
                }
        }
#endif
}

/* One row of cpu_dropout_keys16's result, block row rb (0: rows 0-7) and lanes C, C8 (= C + 8) of
   the factors f[s][word][hi]: key 8n + 2u + hi is word 2 rb + n of call s = u >> 1, lane
   8 (u & 1) + c. */
#define CPU_DROP_ROW(f, rb, C, C8)                                                                                     \
    (float16)(f[0][2 * rb][0].C, f[0][2 * rb][1].C, f[0][2 * rb][0].C8, f[0][2 * rb][1].C8, f[1][2 * rb][0].C,          \
              f[1][2 * rb][1].C, f[1][2 * rb][0].C8, f[1][2 * rb][1].C8, f[0][2 * rb + 1][0].C, f[0][2 * rb + 1][1].C,  \
              f[0][2 * rb + 1][0].C8, f[0][2 * rb + 1][1].C8, f[1][2 * rb + 1][0].C, f[1][2 * rb + 1][1].C,             \
              f[1][2 * rb + 1][0].C8, f[1][2 * rb + 1][1].C8)

/* The dropout factors of rows i .. i+15 (i a multiple of 16) for the 16 keys k_first ..
   k_first+15 (a multiple of 16): z[r] lane j is key k_first + j of row i + r. The block's 32
   calls are two flashcl_philox16, call s's lane 8h + c the counter of key group u = 2s + h and
   rows c, c + 8. Rows past the sequence get factors nobody reads. */
inline void cpu_dropout_keys16(flashcl_head hd, long i, int k_first, float16 z[16], VARIANT_ARGS) {
#if HAS_DROPOUT
    float16 f[2][4][2];
    for (int s = 0; s < 2; ++s) {
        ulong8 cx[2], cy[2], cz[2], cw[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            cx[h] = (ulong8)((ulong)(uint)(4 * (k_first >> 4) + 2 * s + h));
            cy[h] = (ulong8)((ulong)(uint)((i >> 4) << 3)) + (ulong8)(0, 1, 2, 3, 4, 5, 6, 7);
            cz[h] = (ulong8)((ulong)hd.bh);
            cw[h] = (ulong8)((ulong)drop_off_lo);
        }
        uint16 w[4];
        flashcl_philox16(cx, cy, cz, cw, CPU_DROPOUT_KEY, w);
        for (int t = 0; t < 4; ++t) {
            f[s][t][0] = cpu_keep_factors(w[t], 0, VARIANT_PASS);
            f[s][t][1] = cpu_keep_factors(w[t], 1, VARIANT_PASS);
        }
    }
    z[0] = CPU_DROP_ROW(f, 0, s0, s8);
    z[1] = CPU_DROP_ROW(f, 0, s1, s9);
    z[2] = CPU_DROP_ROW(f, 0, s2, sa);
    z[3] = CPU_DROP_ROW(f, 0, s3, sb);
    z[4] = CPU_DROP_ROW(f, 0, s4, sc);
    z[5] = CPU_DROP_ROW(f, 0, s5, sd);
    z[6] = CPU_DROP_ROW(f, 0, s6, se);
    z[7] = CPU_DROP_ROW(f, 0, s7, sf);
    z[8] = CPU_DROP_ROW(f, 1, s0, s8);
    z[9] = CPU_DROP_ROW(f, 1, s1, s9);
    z[10] = CPU_DROP_ROW(f, 1, s2, sa);
    z[11] = CPU_DROP_ROW(f, 1, s3, sb);
    z[12] = CPU_DROP_ROW(f, 1, s4, sc);
    z[13] = CPU_DROP_ROW(f, 1, s5, sd);
    z[14] = CPU_DROP_ROW(f, 1, s6, se);
    z[15] = CPU_DROP_ROW(f, 1, s7, sf);
#else
    for (int r = 0; r < 16; ++r) z[r] = (float16)(1.0f);
#endif
}
#undef CPU_DROP_ROW

/* The score terms of row i against the 16 keys k_first + lane (keys in lanes: dK/dV); grad as in
   cpu_terms_rows. */
inline float16 cpu_terms_keys(float16 x, float16 *grad, flashcl_head hd, long i, int k_first, VARIANT_ARGS) {
#if HAS_SOFTCAP
    const float16 t = cpu_tanh(x * (1.0f / softcap2));
    x = softcap2 * t;
    *grad = (float16)(1.0f) - t * t;
#endif
#if HAS_ALIBI
    x -= hd.slope2 * fabs((float)(i + hd.off) - convert_float16((int16)(k_first) + CPU_LANE_IDS));
#endif
#if HAS_BIAS || HAS_MASK
    /* The row's 16 keys lie side by side in a bias or mask row: vector loads where all are real. */
    if (k_first + LANES <= hd.sk) {
#if HAS_BIAS
        x += vload16(0, bias + hd.bias_at + (ulong)i * bias_sr + (ulong)k_first) * FLASHCL_LOG2E_F;
#endif
#if HAS_MASK
        const uchar16 keep = vload16(0, mask + hd.mask_at + (ulong)i * mask_sr + (ulong)k_first);
        x = select(x, (float16)(FLASHCL_NEG_INF), convert_int16(keep) == (int16)(0));
#endif
    } else {
        float v[LANES];
        vstore16(x, 0, v);
        for (int r = 0; r < LANES; ++r) {
            const ulong key = (ulong)min((long)(k_first + r), hd.sk - 1);
#if HAS_BIAS
            v[r] += bias[hd.bias_at + (ulong)i * bias_sr + key] * FLASHCL_LOG2E_F;
#endif
#if HAS_MASK
            if (!mask[hd.mask_at + (ulong)i * mask_sr + key]) v[r] = FLASHCL_NEG_INF;
#endif
        }
        x = vload16(0, v);
    }
#endif
#if HAS_BLOCK_MASK
    float v[LANES];
    vstore16(x, 0, v);
    for (int r = 0; r < LANES; ++r) {
        const ulong key = (ulong)min((long)(k_first + r), hd.sk - 1);
        if (!bmask[hd.bmask_at + ((ulong)i / (ulong)bmask_bq) * bmask_sr + key / (ulong)bmask_bk])
            v[r] = FLASHCL_NEG_INF;
    }
    x = vload16(0, v);
#endif
    return x;
}

/* Prefetches the bias and mask of row i, keys k_first .. k_first+15 (cpu_terms_keys' loads), where
   all are real. dK/dV reads them a row at a time, rows a bias row apart: each load missed the
   caches and the hardware prefetchers did not run ahead (a fifth of dK/dV with a bias stalled on
   it, in perf), so the loop asks for a row some rows ahead. */
#define CPU_PREFETCH_ROWS 8
inline void cpu_prefetch_terms_keys(flashcl_head hd, long i, int k_first, VARIANT_ARGS) {
#if HAS_BIAS || HAS_MASK
    if (i < hd.sq && k_first + LANES <= hd.sk) {
#if HAS_BIAS
        __global const float *b = bias + hd.bias_at + (ulong)i * bias_sr + (ulong)k_first;
        CPU_PREFETCH(b);
        CPU_PREFETCH(b + LANES - 1);
#endif
#if HAS_MASK
        __global const uchar *m = mask + hd.mask_at + (ulong)i * mask_sr + (ulong)k_first;
        CPU_PREFETCH(m);
        CPU_PREFETCH(m + LANES - 1);
#endif
    }
#endif
}

/* Whether a chunk can hold a -inf logit or a key outside some row's band, so that it needs the
   masked softmax: the window/length test of flashcl_tile_plain (always for masks), and always
   with a bias (a -inf bias is a mask the host cannot see). */
inline int cpu_needs_mask(flashcl_head hd, long r0, long r1, long k0, long k1, int win_left, int win_right) {
    return HAS_BIAS || !flashcl_tile_plain(hd, r0, r1, k0, k1, win_left, win_right);
}

/* ------------------------------------------------------------------ forward */

/* The online softmax of one chunk of keys for one 16-row group: s holds the
   group's logits^T and leaves with P^T; m and l are the running max and sum.
   Keys outside a row's band [lo, hi] are masked, but only in chunks that need
   it (masked = 1): the rest skip the compare and select and use the
   unmasked exp2. Returns the rescale factor of the group's output so far.
   This is flashcl_online_update (cl/common.cl) for 16 rows at once, and it
   cannot call that scalar helper: the rows are the lanes of a float16, and
   the helper's fmax and exp2 are what this family replaced, for speed, by
   max and the polynomial cpu_exp2 (see cpu_exp2_unmasked). */
inline float16 cpu_softmax_chunk(float *s, int j0, int16 lo, int16 hi, int masked, float16 *m, float16 *l) {
    float16 mx = *m;
    if (masked) {
        for (int j = 0; j < CHUNK; ++j) {
            const int16 key = (int16)(j0 + j);
            const float16 x = select(vload16(j, s), (float16)(FLASHCL_NEG_INF), (key > hi) | (key < lo));
            vstore16(x, j, s);
            mx = max(mx, x);
        }
    } else {
        for (int j = 0; j < CHUNK; ++j) mx = max(mx, vload16(j, s));
    }
    /* A row with no visible key so far keeps m = -inf; against base 0 its exponentials are 0. */
    const float16 base = select(mx, (float16)(0.0f), mx == (float16)(FLASHCL_NEG_INF));
    const float16 alpha = cpu_exp2(*m - base);
    float16 sum = (float16)(0.0f);
    if (masked) {
        for (int j = 0; j < CHUNK; ++j) {
            const float16 p = cpu_exp2(vload16(j, s) - base);
            vstore16(p, j, s);
            sum += p;
        }
    } else {
        /* Every score here is finite and the row max is one of them. */
        for (int j = 0; j < CHUNK; ++j) {
            const float16 p = cpu_exp2_unmasked(vload16(j, s) - base);
            vstore16(p, j, s);
            sum += p;
        }
    }
    *l = *l * alpha + sum;
    *m = mx;
    return alpha;
}

/* Grid: (ceil(max_seqlen_q / BLOCK), heads_q, batch), BLOCK = GROUPS * 16 rows;
   blocks in reverse so a causal problem's heavy (late) blocks start first.
   Kp, Vp: K and V packed by flash_cpu_pack; each chunk of them feeds all GROUPS groups. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
flash_fwd_cpu(__global const store_t *Q, VIEW_ARGS(q), __global const float *Kp, __global const float *Vp,
              __global store_t *O, VIEW_ARGS(o), FWD_ARGS) {
    const int row0 = ((int)get_num_groups(0) - 1 - (int)get_group_id(0)) * BLOCK;
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    if (row0 >= hd.sq) return; /* varlen: past this sequence's rows */
    const int sq = (int)hd.sq;
    __global const store_t *qb = Q + VIEW_BASE(q, b, h) + (ulong)hd.q0 * q_sr;
    __global const float *kb = cpu_packed(Kp, b, heads_q / group, h / group, seqlen_k, DIM_PAD, hd.k0);
    __global const float *vb = cpu_packed(Vp, b, heads_q / group, h / group, seqlen_k, DIM_PAD_V, hd.k0);
    const int last_row = min(row0 + BLOCK, sq) - 1;
    const int groups = (last_row - row0) / LANES + 1; /* groups holding real rows */

    float qt[GROUPS][HEAD_DIM * LANES];  /* q^T, pre-scaled */
    float ot[GROUPS][DIM_PAD_V * LANES]; /* O^T, unnormalised */
    float s[GROUPS][CHUNK * LANES];      /* S^T of one chunk of keys, then P^T */
    float16 m[GROUPS], l[GROUPS], alpha[GROUPS];
    int16 lo[GROUPS], hi[GROUPS];
    for (int g = 0; g < groups; ++g) {
        cpu_load_transposed(qb, q_sr, row0 + g * LANES, sq, scale_log2, qt[g], HEAD_DIM);
        for (int i = 0; i < DIM_PAD_V * LANES; ++i) ot[g][i] = 0.0f;
        m[g] = (float16)(FLASHCL_NEG_INF);
        l[g] = (float16)(0.0f);
        cpu_key_range(hd, row0 + g * LANES, win_left, win_right, &lo[g], &hi[g]);
    }
    /* Only the chunks inside the block's band. */
    const int key_begin = (int)flashcl_kv_begin(hd, row0, CHUNK, win_left);
    const int key_end = (int)flashcl_kv_end(hd, last_row, win_right);

    for (int j0 = key_begin; j0 < key_end; j0 += CHUNK) {
        if (flashcl_tile_skipped(hd, row0, last_row, j0, j0 + CHUNK - 1, VARIANT_PASS)) continue;
        for (int g = 0; g < groups; ++g) {
            const int first = row0 + g * LANES;
            cpu_product_rows(qt[g], kb + (ulong)j0 * DIM_PAD, s[g], HEAD_DIM, DIM_PAD);
            cpu_terms_rows(s[g], s[g], 0, hd, first, j0, VARIANT_PASS);
            const int masked = cpu_needs_mask(hd, first, first + LANES - 1, j0, j0 + CHUNK - 1, win_left, win_right);
            alpha[g] = cpu_softmax_chunk(s[g], j0, lo[g], hi[g], masked, &m[g], &l[g]);
            /* The normaliser counts every probability; only P V sees the dropped ones. */
            cpu_dropout_rows(s[g], hd, first, j0, VARIANT_PASS);
        }
        for (int g = 0; g < groups; ++g)
            cpu_accumulate_cols(s[g], vb + (ulong)j0 * DIM_PAD_V, min(CHUNK, key_end - j0), alpha[g], ot[g], DIM_PAD_V);
    }

    /* Fold the sinks in, normalise, transpose back to rows, store; LSE in natural log. */
    __global store_t *ob = O + VIEW_BASE(o, b, h) + (ulong)hd.q0 * o_sr;
    for (int g = 0; g < groups; ++g) {
        float mr[LANES], lr[LANES];
        vstore16(m[g], 0, mr);
        vstore16(l[g], 0, lr);
        const int first = row0 + g * LANES;
        for (int r = 0; r < min(LANES, last_row + 1 - first); ++r) {
            const float a = flashcl_fold_sink(&mr[r], &lr[r], hd.sink2);
            const float inv = flashcl_row_inv(a, lr[r]);
            __global store_t *orow = ob + (ulong)(first + r) * o_sr;
            for (int c = 0; c < HEAD_DIM_V; ++c) FLASHCL_STORE(orow, c, ot[g][c * LANES + r] * inv);
            if (write_lse)
                LSE[lse_off + flashcl_row_index(hd, b, h, heads_q, seqlen_q, first + r)] = flashcl_lse(mr[r], lr[r]);
        }
    }
}

/* ----------------------------------------------------------------- backward */
/*
 * With s2 = (scale log2 e) q.k, f = the logit (score terms, masks),
 * lse2 = lse log2 e and Z the dropout factor: P = exp2(f - lse2),
 * dV += (P Z)^T dO, dP = (dO V^T) Z, dS = P (dP - D) f'(s2),
 * dK += scale dS^T Q, dQ += scale dS K. Two forms, both without atomics and
 * bitwise reproducible: two kernels that each recompute P (one per key block
 * for dK/dV, looping over the query heads of its GQA group, one per query
 * block for dQ), or flash_bwd_cpu_fused, one work-item per (sequence, KV
 * head) that computes P and dS once and also sums dQ into float32 rows it
 * owns; the host takes the fused one when its fewer work-items fill the cores.
 */

/* D = rowsum(dO * O) over the HEAD_DIM_V columns. cu_q: cu_seqlens_q with varlen (else unread).
   Grid: (ceil(max_seqlen_q / BLOCK), heads_q, batch). */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
flash_bwd_cpu_dot(__global const store_t *dO, VIEW_ARGS(dout), __global const store_t *O, VIEW_ARGS(o),
                  __global float *Dsum, int seqlen_q, int heads_q, __global const int *cu_q) {
    const int row0 = (int)get_group_id(0) * BLOCK;
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
#if VARLEN
    const long q0 = flashcl_cu(cu_q, b, seqlen_q);
    const int sq = (int)max(flashcl_cu(cu_q, b + 1, seqlen_q) - q0, 0L);
    __global float *db = Dsum + (ulong)h * seqlen_q + q0; /* [heads_q, total_q] */
#else
    const long q0 = 0;
    const int sq = seqlen_q;
    __global float *db = Dsum + ((ulong)b * heads_q + h) * seqlen_q;
#endif
    __global const store_t *gb = dO + VIEW_BASE(dout, b, h) + (ulong)q0 * dout_sr;
    __global const store_t *yb = O + VIEW_BASE(o, b, h) + (ulong)q0 * o_sr;
    for (int i = row0; i < min(row0 + BLOCK, sq); ++i) {
        __global const store_t *g = gb + (ulong)i * dout_sr;
        __global const store_t *y = yb + (ulong)i * o_sr;
        float acc = 0.0f;
        for (int c = 0; c < HEAD_DIM_V; ++c) acc = fma(FLASHCL_LOAD(g, c), FLASHCL_LOAD(y, c), acc);
        db[i] = acc;
    }
}

#if HAS_SINKS
/* dsinks[h] = -sum over (b, i) of exp(sink_h - lse) D (the sink is one more logit with no value
   row: dP = 0, dS = -P_sink D). One work-item per head, 16 partial sums in a fixed order:
   deterministic, no atomics. Grid: (1, heads_q, 1). */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
flash_bwd_cpu_dsinks(__global const float *LSE, ulong lse_off, __global const float *Dsum, __global float *dsinks,
                     ulong dsinks_off, int batch, int seqlen_q, int seqlen_k, int heads_q, VARIANT_ARGS) {
    const int h = (int)get_group_id(1);
    const float sink = sinks[sinks_off + (ulong)h];
    float part[LANES];
    for (int u = 0; u < LANES; ++u) part[u] = 0.0f;
    for (int b = 0; b < batch; ++b) {
        const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
        for (long i = 0; i < hd.sq; ++i) {
            const ulong at = flashcl_row_index(hd, b, h, heads_q, seqlen_q, i);
            const float lse = LSE[lse_off + at];
            if (lse != FLASHCL_NEG_INF) part[i % LANES] += exp(sink - lse) * Dsum[at];
        }
    }
    float total = 0.0f;
    for (int u = 0; u < LANES; ++u) total += part[u];
    dsinks[dsinks_off + (ulong)h] = -total;
}
#endif

/* A view's four arguments (VIEW_ARGS), passed on to a helper. */
#define CPU_VIEW(name) name##_off, name##_sb, name##_sh, name##_sr

/* A dQ scratch row's pitch (the fused backward's float32 dQ): HEAD_DIM rounded up to whole float16s. */
#define DIM_PAD16 ((HEAD_DIM + LANES - 1) / LANES * LANES)
/* float16s of dQ columns updated per pass of cpu_dq_update: 4 (8 ymm / 4 zmm accumulators) leave
   registers for the broadcast and the K operand. */
#define DQ_TILE 4

/* dq[i][c] += sum_{k < 16} ds[i][k] * kr[k][c] for the rows i < rows of a chunk and the DIM_PAD16
   columns c: the fused backward's dQ += dS K with the 16 keys of a group as the inner dimension.
   The keys are in the lanes of dS, so here the lanes are dQ's columns instead (kr: the group's K
   rows, row-major, unscaled) and dS is broadcast; dq is the work-item's own float32 scratch rows. */
inline void cpu_dq_update(const float *ds, const float *kr, int rows, __global float *dq) {
    for (int i = 0; i < rows; ++i) {
        __global float *row = dq + (ulong)i * DIM_PAD16;
        for (int c0 = 0; c0 < DIM_PAD16 / LANES; c0 += DQ_TILE) {
            const int n = min(DQ_TILE, DIM_PAD16 / LANES - c0);
            float16 acc[DQ_TILE];
#pragma unroll
            for (int t = 0; t < DQ_TILE; ++t) acc[t] = t < n ? vload16(c0 + t, row) : (float16)(0.0f);
            for (int k = 0; k < LANES; ++k) {
                const float16 w = (float16)(ds[i * LANES + k]);
#pragma unroll
                for (int t = 0; t < DQ_TILE; ++t)
                    if (t < n) acc[t] = fma(w, vload16(k * (DIM_PAD16 / LANES) + c0 + t, kr), acc[t]);
            }
#pragma unroll
            for (int t = 0; t < DQ_TILE; ++t)
                if (t < n) vstore16(acc[t], c0 + t, row);
        }
    }
}

/* dK and dV of the keys key0 .. key0 + BLOCK - 1 of KV head hk of sequence b: GROUPS groups of 16
   keys in the lanes, passing over the query rows of every head of the GQA group in chunks from the
   packed Q and dO (Qp, dOp), each chunk feeding all groups. With dqs (the fused kernel; 0 for
   flash_bwd_cpu_dkdv, where the branches fold away after inlining) each chunk's dS also goes into
   dQ: dqs + the packed offset of (b, h) holds head h's float32 dQ rows, pitch DIM_PAD16. */
inline void cpu_dkdv_block(__global const float *Qp, __global const float *dOp, __global const store_t *K, VIEW_ARGS(k),
                           __global const store_t *V, VIEW_ARGS(v), __global const float *LSE, ulong lse_off,
                           __global const float *Dsum, __global store_t *dK, VIEW_ARGS(dk), __global store_t *dV,
                           VIEW_ARGS(dv), __global float *dqs, int key0, int hk, int b, int seqlen_q, int seqlen_k,
                           int heads_q, int group, float scale_log2, float scale, VARIANT_ARGS) {
    /* The sequence's geometry (the same for every head of the group). */
    const flashcl_head hd0 = flashcl_head_setup(b, hk * group, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    const int sq = (int)hd0.sq, sk = (int)hd0.sk;
    const int key_last = min(key0 + BLOCK, sk) - 1;
    const int groups = (key_last - key0) / LANES + 1;
    __global const store_t *kb = K + VIEW_BASE(k, b, hk) + (ulong)hd0.k0 * k_sr;
    __global const store_t *vb = V + VIEW_BASE(v, b, hk) + (ulong)hd0.k0 * v_sr;

    float kt[GROUPS][HEAD_DIM * LANES], vt[GROUPS][HEAD_DIM_V * LANES]; /* K^T (pre-scaled), V^T */
    float dkt[GROUPS][DIM_PAD * LANES], dvt[GROUPS][DIM_PAD_V * LANES];
    float kr[GROUPS][LANES * DIM_PAD16]; /* K rows for dQ (fused only), pad columns 0 */
    for (int g = 0; g < groups; ++g) {
        cpu_load_transposed(kb, k_sr, key0 + g * LANES, sk, scale_log2, kt[g], HEAD_DIM);
        cpu_load_transposed(vb, v_sr, key0 + g * LANES, sk, 1.0f, vt[g], HEAD_DIM_V);
        for (int i = 0; i < DIM_PAD * LANES; ++i) dkt[g][i] = 0.0f;
        for (int i = 0; i < DIM_PAD_V * LANES; ++i) dvt[g][i] = 0.0f;
        if (dqs)
            for (int r = 0; r < LANES; ++r) {
                __global const store_t *row = kb + (ulong)min(key0 + g * LANES + r, sk - 1) * k_sr;
                for (int c = 0; c < DIM_PAD16; ++c)
                    kr[g][r * DIM_PAD16 + c] = c < HEAD_DIM ? FLASHCL_LOAD(row, c) : 0.0f;
            }
    }
    float s[CHUNK * LANES], dp[CHUNK * LANES]; /* one group's S then P, dP then dS: [row][key] */

    /* Only the query rows whose band reaches this block's keys (the same for every head). */
    const int row_begin = (int)flashcl_q_begin(hd0, key0, CHUNK, win_right);
    const int row_end = (int)flashcl_q_end(hd0, key_last, win_left);
    for (int hh = 0; hh < group; ++hh) {
        const int h = hk * group + hh;
        const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
        __global const float *qb = cpu_packed(Qp, b, heads_q, h, seqlen_q, DIM_PAD, hd.q0);
        __global const float *gb = cpu_packed(dOp, b, heads_q, h, seqlen_q, DIM_PAD_V, hd.q0);
        __global float *dqb = dqs ? (__global float *)cpu_packed(dqs, b, heads_q, h, seqlen_q, DIM_PAD16, hd.q0) : 0;
        for (int i0 = row_begin; i0 < row_end; i0 += CHUNK) {
            if (flashcl_tile_skipped(hd, i0, i0 + CHUNK - 1, key0, key_last, VARIANT_PASS)) continue;
            __global const float *qc = qb + (ulong)i0 * DIM_PAD, *gc = gb + (ulong)i0 * DIM_PAD_V;
            const int rows = min(CHUNK, sq - i0);
            for (int g = 0; g < groups; ++g) {
                const int k_first = key0 + g * LANES;
                const int16 key = (int16)(k_first) + CPU_LANE_IDS;
                cpu_product_rows(kt[g], qc, s, HEAD_DIM, DIM_PAD);
                cpu_product_rows(vt[g], gc, dp, HEAD_DIM_V, DIM_PAD_V);
                const int masked =
                    cpu_needs_mask(hd, i0, i0 + rows - 1, k_first, k_first + LANES - 1, win_left, win_right);
                float16 z16[16]; /* dropout factors of the 16-row block holding row i0 + i */
                for (int i = 0; i < rows; ++i) {
                    const long row = i0 + i;
                    const ulong at = flashcl_row_index(hd, b, h, heads_q, seqlen_q, row);
                    const float l2 = LSE[lse_off + at] * FLASHCL_LOG2E_F;
                    float16 grad = (float16)(1.0f);
                    cpu_prefetch_terms_keys(hd, row + CPU_PREFETCH_ROWS, k_first, VARIANT_PASS);
                    const float16 f = cpu_terms_keys(vload16(i, s), &grad, hd, row, k_first, VARIANT_PASS);
                    float16 p;
                    if (masked) {
                        const int16 out = (key < (int16)((int)flashcl_key_lo(hd, row, win_left))) |
                                          (key > (int16)((int)flashcl_key_hi(hd, row, win_right)));
                        p = select(cpu_exp2(f - l2), (float16)(0.0f), out);
                    } else {
                        p = cpu_exp2_unmasked(f - l2);
                    }
                    if (l2 == FLASHCL_NEG_INF) p = (float16)(0.0f); /* the row saw no key in the forward */
#if HAS_DROPOUT
                    if (i == 0 || (row & 15) == 0) cpu_dropout_keys16(hd, row & ~15L, k_first, z16, VARIANT_PASS);
                    const float16 z = z16[row & 15];
#else
                    const float16 z = (float16)(1.0f);
#endif
                    vstore16(p * z, i, s);
                    vstore16(p * (vload16(i, dp) * z - Dsum[at]) * grad, i, dp);
                }
                cpu_accumulate_cols(s, gc, rows, (float16)(1.0f), dvt[g], DIM_PAD_V);
                cpu_accumulate_cols(dp, qc, rows, (float16)(1.0f), dkt[g], DIM_PAD);
                if (dqs) cpu_dq_update(dp, kr[g], rows, dqb + (ulong)i0 * DIM_PAD16);
            }
        }
    }
    for (int g = 0; g < groups; ++g) {
        cpu_store_transposed(dkt[g], scale, dK + VIEW_BASE(dk, b, hk) + (ulong)hd0.k0 * dk_sr, dk_sr, key0 + g * LANES,
                             sk, HEAD_DIM);
        cpu_store_transposed(dvt[g], 1.0f, dV + VIEW_BASE(dv, b, hk) + (ulong)hd0.k0 * dv_sr, dv_sr, key0 + g * LANES,
                             sk, HEAD_DIM_V);
    }
}

/* Grid: (ceil(max_seqlen_k / BLOCK), heads_kv, batch): one block of keys per work-item. Qp, dOp:
   Q and dO packed by flash_cpu_pack. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
flash_bwd_cpu_dkdv(__global const float *Qp, __global const float *dOp, __global const store_t *K, VIEW_ARGS(k),
                   __global const store_t *V, VIEW_ARGS(v), __global const float *LSE, ulong lse_off,
                   __global const float *Dsum, __global store_t *dK, VIEW_ARGS(dk), __global store_t *dV, VIEW_ARGS(dv),
                   int seqlen_q, int seqlen_k, int heads_q, int group, float scale_log2, float scale, VARIANT_ARGS) {
    const int key0 = (int)get_group_id(0) * BLOCK;
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
    const flashcl_head hd0 = flashcl_head_setup(b, hk * group, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    if (key0 >= hd0.sk) return; /* varlen: past this sequence's keys */
    cpu_dkdv_block(Qp, dOp, K, CPU_VIEW(k), V, CPU_VIEW(v), LSE, lse_off, Dsum, dK, CPU_VIEW(dk), dV, CPU_VIEW(dv), 0,
                   key0, hk, b, seqlen_q, seqlen_k, heads_q, group, scale_log2, scale, VARIANT_PASS);
}

/*
 * The fused backward: one work-item per (sequence b, KV head hk) runs every key block of the head
 * (cpu_dkdv_block) and, from the same S, P, dP and dS, accumulates dQ += dS K for the query heads
 * of the GQA group into dQs, float32 rows that only this work-item touches (no atomics; the key
 * blocks are visited in a fixed order, so the sums repeat bit for bit). Five products per tile
 * where flash_bwd_cpu_dkdv + flash_bwd_cpu_dq take seven (S and dP are computed once), at the
 * price of batch * heads_kv work-items only: the host picks it when those fill the cores.
 * dQs: [batch][heads_q][cpu_pack_rows][DIM_PAD16] (the packed layout). Grid: (1, heads_kv, batch).
 */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
flash_bwd_cpu_fused(__global const float *Qp, __global const float *dOp, __global const store_t *K, VIEW_ARGS(k),
                    __global const store_t *V, VIEW_ARGS(v), __global const float *LSE, ulong lse_off,
                    __global const float *Dsum, __global store_t *dK, VIEW_ARGS(dk), __global store_t *dV,
                    VIEW_ARGS(dv), __global float *dQs, __global store_t *dQ, VIEW_ARGS(dq), int seqlen_q, int seqlen_k,
                    int heads_q, int group, float scale_log2, float scale, VARIANT_ARGS) {
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
    const flashcl_head hd0 = flashcl_head_setup(b, hk * group, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    const int sq = (int)hd0.sq;
    for (int hh = 0; hh < group; ++hh) { /* zero this work-item's dQ rows */
        __global float *z = (__global float *)cpu_packed(dQs, b, heads_q, hk * group + hh, seqlen_q, DIM_PAD16, hd0.q0);
        for (long i = 0; i < (long)sq * DIM_PAD16; ++i) z[i] = 0.0f;
    }
    for (int key0 = 0; key0 < hd0.sk; key0 += BLOCK)
        cpu_dkdv_block(Qp, dOp, K, CPU_VIEW(k), V, CPU_VIEW(v), LSE, lse_off, Dsum, dK, CPU_VIEW(dk), dV, CPU_VIEW(dv),
                       dQs, key0, hk, b, seqlen_q, seqlen_k, heads_q, group, scale_log2, scale, VARIANT_PASS);
    for (int hh = 0; hh < group; ++hh) { /* dQ = scale * sum dS K, rounded to the storage type once */
        const int h = hk * group + hh;
        const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
        __global const float *src = cpu_packed(dQs, b, heads_q, h, seqlen_q, DIM_PAD16, hd.q0);
        __global store_t *dst = dQ + VIEW_BASE(dq, b, h) + (ulong)hd.q0 * dq_sr;
        for (int i = 0; i < sq; ++i)
            for (int c = 0; c < HEAD_DIM; ++c)
                FLASHCL_STORE(dst + (ulong)i * dq_sr, c, src[(ulong)i * DIM_PAD16 + c] * scale);
    }
}

/* Grid: (ceil(max_seqlen_q / BLOCK), heads_q, batch): GROUPS groups of 16 query
   rows in the lanes. Kp, Vp: K and V packed by flash_cpu_pack. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
flash_bwd_cpu_dq(__global const store_t *Q, VIEW_ARGS(q), __global const store_t *dO, VIEW_ARGS(dout),
                 __global const float *Kp, __global const float *Vp, __global const float *LSE, ulong lse_off,
                 __global const float *Dsum, __global store_t *dQ, VIEW_ARGS(dq), int seqlen_q, int seqlen_k,
                 int heads_q, int group, float scale_log2, float scale, VARIANT_ARGS) {
    const int row0 = ((int)get_num_groups(0) - 1 - (int)get_group_id(0)) * BLOCK;
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    if (row0 >= hd.sq) return; /* varlen: past this sequence's rows */
    const int sq = (int)hd.sq;
    __global const float *kb = cpu_packed(Kp, b, heads_q / group, h / group, seqlen_k, DIM_PAD, hd.k0);
    __global const float *vb = cpu_packed(Vp, b, heads_q / group, h / group, seqlen_k, DIM_PAD_V, hd.k0);
    const int last_row = min(row0 + BLOCK, sq) - 1;
    const int groups = (last_row - row0) / LANES + 1;

    float qt[GROUPS][HEAD_DIM * LANES], gt[GROUPS][HEAD_DIM_V * LANES]; /* Q^T (pre-scaled), dO^T */
    float dqt[GROUPS][DIM_PAD * LANES];
    float16 l2[GROUPS], dsum[GROUPS];
    int16 lo[GROUPS], hi[GROUPS];
    for (int g = 0; g < groups; ++g) {
        const int first = row0 + g * LANES;
        cpu_load_transposed(Q + VIEW_BASE(q, b, h) + (ulong)hd.q0 * q_sr, q_sr, first, sq, scale_log2, qt[g], HEAD_DIM);
        cpu_load_transposed(dO + VIEW_BASE(dout, b, h) + (ulong)hd.q0 * dout_sr, dout_sr, first, sq, 1.0f, gt[g],
                            HEAD_DIM_V);
        for (int i = 0; i < DIM_PAD * LANES; ++i) dqt[g][i] = 0.0f;
        float lr[LANES], dr[LANES];
        for (int r = 0; r < LANES; ++r) {
            const ulong i = flashcl_row_index(hd, b, h, heads_q, seqlen_q, min(first + r, sq - 1));
            lr[r] = LSE[lse_off + i] * FLASHCL_LOG2E_F;
            dr[r] = Dsum[i];
        }
        l2[g] = vload16(0, lr);
        dsum[g] = vload16(0, dr);
        cpu_key_range(hd, first, win_left, win_right, &lo[g], &hi[g]);
    }
    const int key_begin = (int)flashcl_kv_begin(hd, row0, CHUNK, win_left);
    const int key_end = (int)flashcl_kv_end(hd, last_row, win_right);

    float s[CHUNK * LANES], dp[CHUNK * LANES]; /* one group's [key][row]: S then dS, dP */
#if HAS_SOFTCAP
    float grad[CHUNK * LANES]; /* the softcap's d(logit)/d(s2) */
#else
    float *grad = s; /* never read */
#endif
    for (int j0 = key_begin; j0 < key_end; j0 += CHUNK) {
        if (flashcl_tile_skipped(hd, row0, last_row, j0, j0 + CHUNK - 1, VARIANT_PASS)) continue;
        __global const float *kc = kb + (ulong)j0 * DIM_PAD, *vc = vb + (ulong)j0 * DIM_PAD_V;
        for (int g = 0; g < groups; ++g) {
            const int first = row0 + g * LANES;
            cpu_product_rows(qt[g], kc, s, HEAD_DIM, DIM_PAD);
            cpu_product_rows(gt[g], vc, dp, HEAD_DIM_V, DIM_PAD_V);
            cpu_terms_rows(s, grad, 1, hd, first, j0, VARIANT_PASS);
            cpu_dropout_rows(dp, hd, first, j0, VARIANT_PASS); /* dP Z */
            const int16 empty = l2[g] == (float16)(FLASHCL_NEG_INF);
            if (cpu_needs_mask(hd, first, first + LANES - 1, j0, j0 + CHUNK - 1, win_left, win_right) || any(empty)) {
                for (int j = 0; j < CHUNK; ++j) {
                    const int16 key = (int16)(j0 + j);
                    const int16 hidden = empty | (key > hi[g]) | (key < lo[g]);
                    const float16 p = select(cpu_exp2(vload16(j, s) - l2[g]), (float16)(0.0f), hidden);
                    float16 ds = p * (vload16(j, dp) - dsum[g]);
#if HAS_SOFTCAP
                    ds *= vload16(j, grad);
#endif
                    vstore16(ds, j, s);
                }
            } else {
                for (int j = 0; j < CHUNK; ++j) {
                    const float16 p = cpu_exp2_unmasked(vload16(j, s) - l2[g]);
                    float16 ds = p * (vload16(j, dp) - dsum[g]);
#if HAS_SOFTCAP
                    ds *= vload16(j, grad);
#endif
                    vstore16(ds, j, s);
                }
            }
            cpu_accumulate_cols(s, kc, min(CHUNK, key_end - j0), (float16)(1.0f), dqt[g], DIM_PAD);
        }
    }
    for (int g = 0; g < groups; ++g)
        cpu_store_transposed(dqt[g], scale, dQ + VIEW_BASE(dq, b, h) + (ulong)hd.q0 * dq_sr, dq_sr, row0 + g * LANES,
                             sq, HEAD_DIM);
}
