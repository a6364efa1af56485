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
 * Any head dim, any sequence lengths (rows past the end are computed on a
 * clamped row and never stored, keys past the end are padding and masked),
 * GQA, bottom-right causal masks with the loops cut at the last visible
 * chunk. A row that sees no key gets O = 0, LSE = -inf and zero gradients.
 */

#ifndef HEAD_DIM
#define HEAD_DIM 64
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
/* Head dim rounded up to whole micro-tiles; pad columns read a clamped column and are never stored. */
#define DIM_PAD ((HEAD_DIM + STEP - 1) / STEP * STEP)

/* 2^x: the polynomial flashcl_exp2_16 (cl/common.cl) by default, which at d = 64 matters: a
   score costs only 128 FMAs there and the library exp2 would take a third of the time. */
inline float16 cpu_exp2_unmasked(float16 x) {
#if FAST_EXP2
    return flashcl_exp2_16_unmasked(x);
#else
    return exp2(x);
#endif
}
inline float16 cpu_exp2(float16 x) {
#if FAST_EXP2
    return flashcl_exp2_16(x);
#else
    return select(exp2(x), (float16)(0.0f), x < (float16)(-126.0f));
#endif
}

/* out[c * 16 + r] = scale * rows[min(first + r, count - 1)][c]: 16 rows transposed. */
inline void cpu_load_transposed(__global const float *base, ulong stride, int first, int count, float scale,
                                float *out) {
    for (int r = 0; r < LANES; ++r) {
        __global const float *row = base + (ulong)min(first + r, count - 1) * stride;
        for (int c = 0; c < HEAD_DIM; ++c) out[c * LANES + r] = scale * row[c];
    }
}

/* Stores 16 transposed rows (acc[c * 16 + r]) times scale into rows first .. count-1 of a view. */
inline void cpu_store_transposed(const float *acc, float scale, __global float *base, ulong stride, int first,
                                 int count) {
    for (int r = 0; r < min(LANES, count - first); ++r) {
        __global float *row = base + (ulong)(first + r) * stride;
        for (int c = 0; c < HEAD_DIM; ++c) row[c] = acc[c * LANES + r] * scale;
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

/* c^T[n][lanes] = a^T . chunk[n]^T for the CHUNK rows n of a packed chunk
   (a holds HEAD_DIM float16 rows: a transposed, pre-scaled group of 16 rows). */
inline void cpu_product_rows(const float *a, __global const float *chunk, float *c) {
    for (int n0 = 0; n0 < CHUNK; n0 += STEP) cpu_rank_update(a, HEAD_DIM, chunk, DIM_PAD, 1, 1, (float16)(1.0f), c, n0);
}

/* acc^T[c][lanes] = keep * acc^T[c] + sum_{i < rows} p^T[i] * chunk[i][c] (p's rows past `rows` are never read). */
inline void cpu_accumulate_cols(const float *p, __global const float *chunk, int rows, float16 keep, float *acc) {
    for (int c0 = 0; c0 < DIM_PAD; c0 += STEP) cpu_rank_update(p, rows, chunk, 1, DIM_PAD, 0, keep, acc, c0);
}

/* Rows padded to whole chunks in a packed copy. */
inline int cpu_padded(int rows) { return (rows + CHUNK - 1) / CHUNK * CHUNK; }

/*
 * Copies a view into a dense [batch][heads][rows padded to CHUNK][DIM_PAD]
 * buffer, pad rows and columns repeating the last real one (finite values;
 * the kernels mask them). The kernels read their streamed side (K and V, or
 * Q and dO) from such a copy: rows of a [b, s, h, d] view lie h*d floats
 * apart, a power of two, so the rows of a chunk would share a few L1 sets and
 * defeat the prefetchers; the dense copy costs one pass over the tensor.
 * Grid: (ceil(rows_padded / BLOCK), heads, batch).
 */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void flash_cpu_pack(__global const float *X, VIEW_ARGS(x),
                                                                            __global float *out, int rows, int heads) {
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const int padded = cpu_padded(rows);
    __global const float *xb = X + VIEW_BASE(x, b, h);
    __global float *ob = out + ((ulong)b * heads + h) * (ulong)padded * DIM_PAD;
    const int first = (int)get_group_id(0) * BLOCK;
    for (int r = first; r < min(first + BLOCK, padded); ++r) {
        __global const float *row = xb + (ulong)min(r, rows - 1) * x_sr;
        __global float *dst = ob + (ulong)r * DIM_PAD;
        for (int c = 0; c < HEAD_DIM; ++c) dst[c] = row[c];
        for (int c = HEAD_DIM; c < DIM_PAD; ++c) dst[c] = row[HEAD_DIM - 1];
    }
}

/* The packed copy of head h of batch b. */
inline __global const float *cpu_packed(__global const float *base, int b, int heads, int h, int rows) {
    return base + ((ulong)b * heads + h) * (ulong)cpu_padded(rows) * DIM_PAD;
}

/* Last key (inclusive) each of the 16 rows first .. first+15 may see. */
inline int16 cpu_key_limit(int first, int seqlen_q, int seqlen_k, int causal) {
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const int16 all = (int16)(seqlen_k - 1);
    return causal ? min(all, (int16)(first + seqlen_k - seqlen_q) + lane) : all;
}

/* ------------------------------------------------------------------ forward */

/* The online softmax of one chunk of keys for one 16-row group: s holds the
   group's S^T and leaves with P^T; m and l are the running max and sum.
   Keys past a row's limit are masked, but only in chunks that reach past the
   group's smallest limit (masked = 1): the rest skip the compare and select.
   Returns the rescale factor of the group's output so far.
   This is flashcl_online_update (cl/common.cl) for 16 rows at once, and it
   cannot call that scalar helper: the rows are the lanes of a float16, and
   the helper's fmax and exp2 are what this family replaced, for speed, by
   max and the polynomial cpu_exp2 (see cpu_exp2_unmasked). */
inline float16 cpu_softmax_chunk(float *s, int j0, int16 limit, int masked, float16 *m, float16 *l) {
    float16 mx = *m;
    if (masked) {
        for (int j = 0; j < CHUNK; ++j) {
            const float16 x = select(vload16(j, s), (float16)(FLASHCL_NEG_INF), (int16)(j0 + j) > limit);
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

/* Whether a chunk of keys from j0 reaches past a limit of one of 16 rows (first is the group's first row). */
inline int cpu_chunk_masked(int j0, int first, int seqlen_q, int seqlen_k, int causal) {
    const int smallest = causal ? min(seqlen_k - 1, first + seqlen_k - seqlen_q) : seqlen_k - 1;
    return j0 + CHUNK - 1 > smallest;
}

/* Grid: (ceil(seqlen_q / BLOCK), heads_q, batch), BLOCK = GROUPS * 16 rows;
   blocks in reverse so a causal problem's heavy (late) blocks start first.
   Kp, Vp: K and V packed by flash_cpu_pack; each chunk of them feeds all GROUPS groups. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
flash_fwd_cpu(__global const float *Q, VIEW_ARGS(q), __global const float *Kp, __global const float *Vp,
              __global float *O, VIEW_ARGS(o), __global float *LSE, ulong lse_off, int write_lse, int seqlen_q,
              int seqlen_k, int heads_q, int group, float scale_log2, int causal) {
    const int row0 = ((int)get_num_groups(0) - 1 - (int)get_group_id(0)) * BLOCK;
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    __global const float *qb = Q + VIEW_BASE(q, b, h);
    __global const float *kb = cpu_packed(Kp, b, heads_q / group, h / group, seqlen_k);
    __global const float *vb = cpu_packed(Vp, b, heads_q / group, h / group, seqlen_k);
    const int last_row = min(row0 + BLOCK, seqlen_q) - 1;
    const int groups = (last_row - row0) / LANES + 1; /* groups holding real rows */

    float qt[GROUPS][HEAD_DIM * LANES]; /* q^T, pre-scaled */
    float ot[GROUPS][DIM_PAD * LANES];  /* O^T, unnormalised */
    float s[GROUPS][CHUNK * LANES];     /* S^T of one chunk of keys, then P^T */
    float16 m[GROUPS], l[GROUPS], alpha[GROUPS];
    int16 limit[GROUPS];
    for (int g = 0; g < groups; ++g) {
        cpu_load_transposed(qb, q_sr, row0 + g * LANES, seqlen_q, scale_log2, qt[g]);
        for (int i = 0; i < DIM_PAD * LANES; ++i) ot[g][i] = 0.0f;
        m[g] = (float16)(FLASHCL_NEG_INF);
        l[g] = (float16)(0.0f);
        limit[g] = cpu_key_limit(row0 + g * LANES, seqlen_q, seqlen_k, causal);
    }
    const int key_end = causal ? min(seqlen_k, last_row + seqlen_k - seqlen_q + 1) : seqlen_k;

    for (int j0 = 0; j0 < key_end; j0 += CHUNK) {
        for (int g = 0; g < groups; ++g) {
            cpu_product_rows(qt[g], kb + (ulong)j0 * DIM_PAD, s[g]);
            const int masked = cpu_chunk_masked(j0, row0 + g * LANES, seqlen_q, seqlen_k, causal);
            alpha[g] = cpu_softmax_chunk(s[g], j0, limit[g], masked, &m[g], &l[g]);
        }
        for (int g = 0; g < groups; ++g)
            cpu_accumulate_cols(s[g], vb + (ulong)j0 * DIM_PAD, min(CHUNK, key_end - j0), alpha[g], ot[g]);
    }

    /* Normalise, transpose back to rows, store; LSE = (m + log2 l) / log2(e). */
    __global float *ob = O + VIEW_BASE(o, b, h);
    for (int g = 0; g < groups; ++g) {
        const int16 empty = l[g] == (float16)(0.0f);
        float inv[LANES], lse[LANES];
        vstore16(select(1.0f / l[g], (float16)(0.0f), empty), 0, inv);
        vstore16(select((m[g] + log2(l[g])) * M_LN2_F, (float16)(FLASHCL_NEG_INF), empty), 0, lse);
        const int first = row0 + g * LANES;
        for (int r = 0; r < min(LANES, last_row + 1 - first); ++r) {
            __global float *orow = ob + (ulong)(first + r) * o_sr;
            for (int c = 0; c < HEAD_DIM; ++c) orow[c] = ot[g][c * LANES + r] * inv[r];
            if (write_lse) LSE[lse_off + ((ulong)b * heads_q + h) * seqlen_q + first + r] = lse[r];
        }
    }
}

/* ----------------------------------------------------------------- backward */
/*
 * With s2 = (scale log2 e) q.k and lse2 = lse log2 e: P = exp2(s2 - lse2),
 * dV += P^T dO, dP = dO V^T, dS = P (dP - D), dK += scale dS^T Q,
 * dQ += scale dS K. Two kernels recompute P (one per key block for dK/dV,
 * looping over the query heads of its GQA group, one per query block for
 * dQ), so there are no atomics and results are bitwise reproducible.
 */

/* D = rowsum(dO * O). Grid: (ceil(seqlen_q / BLOCK), heads_q, batch). */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void flash_bwd_cpu_dot(__global const float *dO,
                                                                               VIEW_ARGS(dout), __global const float *O,
                                                                               VIEW_ARGS(o), __global float *Dsum,
                                                                               int seqlen_q, int heads_q) {
    const int row0 = (int)get_group_id(0) * BLOCK;
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    __global const float *gb = dO + VIEW_BASE(dout, b, h);
    __global const float *yb = O + VIEW_BASE(o, b, h);
    for (int i = row0; i < min(row0 + BLOCK, seqlen_q); ++i) {
        __global const float *g = gb + (ulong)i * dout_sr;
        __global const float *y = yb + (ulong)i * o_sr;
        float acc = 0.0f;
        for (int c = 0; c < HEAD_DIM; ++c) acc = fma(g[c], y[c], acc);
        Dsum[((ulong)b * heads_q + h) * seqlen_q + i] = acc;
    }
}

/* Grid: (ceil(seqlen_k / BLOCK), heads_kv, batch): GROUPS groups of 16 keys in
   the lanes. Qp, dOp: Q and dO packed by flash_cpu_pack; each chunk of query
   rows feeds all groups. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
flash_bwd_cpu_dkdv(__global const float *Qp, __global const float *dOp, __global const float *K, VIEW_ARGS(k),
                   __global const float *V, VIEW_ARGS(v), __global const float *LSE, ulong lse_off,
                   __global const float *Dsum, __global float *dK, VIEW_ARGS(dk), __global float *dV, VIEW_ARGS(dv),
                   int seqlen_q, int seqlen_k, int heads_q, int group, float scale_log2, float scale, int causal) {
    const int key0 = (int)get_group_id(0) * BLOCK;
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
    const int offset = seqlen_k - seqlen_q; /* key j is visible to row i iff j <= i + offset */
    const int groups = (min(key0 + BLOCK, seqlen_k) - 1 - key0) / LANES + 1;
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);

    float kt[GROUPS][HEAD_DIM * LANES], vt[GROUPS][HEAD_DIM * LANES]; /* K^T (pre-scaled), V^T */
    float dkt[GROUPS][DIM_PAD * LANES], dvt[GROUPS][DIM_PAD * LANES];
    for (int g = 0; g < groups; ++g) {
        cpu_load_transposed(K + VIEW_BASE(k, b, hk), k_sr, key0 + g * LANES, seqlen_k, scale_log2, kt[g]);
        cpu_load_transposed(V + VIEW_BASE(v, b, hk), v_sr, key0 + g * LANES, seqlen_k, 1.0f, vt[g]);
        for (int i = 0; i < DIM_PAD * LANES; ++i) dkt[g][i] = dvt[g][i] = 0.0f;
    }
    float s[CHUNK * LANES], dp[CHUNK * LANES]; /* one group's S then P, dP then dS: [row][key] */

    /* The first chunk holding a query row that sees any key of this block. */
    const int row_start = causal ? max(0, key0 - offset) / CHUNK * CHUNK : 0;
    for (int hh = 0; hh < group; ++hh) {
        const int h = hk * group + hh;
        __global const float *qb = cpu_packed(Qp, b, heads_q, h, seqlen_q);
        __global const float *gb = cpu_packed(dOp, b, heads_q, h, seqlen_q);
        __global const float *lse = LSE + lse_off + ((ulong)b * heads_q + h) * seqlen_q;
        __global const float *dsum = Dsum + ((ulong)b * heads_q + h) * seqlen_q;
        for (int i0 = row_start; i0 < seqlen_q; i0 += CHUNK) {
            __global const float *qc = qb + (ulong)i0 * DIM_PAD, *gc = gb + (ulong)i0 * DIM_PAD;
            const int rows = min(CHUNK, seqlen_q - i0);
            for (int g = 0; g < groups; ++g) {
                const int16 key = (int16)(key0 + g * LANES) + lane;
                cpu_product_rows(kt[g], qc, s);
                cpu_product_rows(vt[g], gc, dp);
                /* Unmasked when every key of the group is visible to the chunk's first row. */
                const int masked = causal && key0 + g * LANES + LANES - 1 > i0 + offset;
                for (int i = 0; i < rows; ++i) {
                    const float l2 = lse[i0 + i] * FLASHCL_LOG2E_F;
                    float16 p = cpu_exp2_unmasked(vload16(i, s) - l2); /* masks applied below */
                    if (masked) p = select(p, (float16)(0.0f), key > (int16)(i0 + i + offset));
                    if (l2 == FLASHCL_NEG_INF) p = (float16)(0.0f); /* the row saw no key in the forward */
                    vstore16(p, i, s);
                    vstore16(p * (vload16(i, dp) - dsum[i0 + i]), i, dp);
                }
                cpu_accumulate_cols(s, gc, rows, (float16)(1.0f), dvt[g]);
                cpu_accumulate_cols(dp, qc, rows, (float16)(1.0f), dkt[g]);
            }
        }
    }
    for (int g = 0; g < groups; ++g) {
        cpu_store_transposed(dkt[g], scale, dK + VIEW_BASE(dk, b, hk), dk_sr, key0 + g * LANES, seqlen_k);
        cpu_store_transposed(dvt[g], 1.0f, dV + VIEW_BASE(dv, b, hk), dv_sr, key0 + g * LANES, seqlen_k);
    }
}

/* Grid: (ceil(seqlen_q / BLOCK), heads_q, batch): GROUPS groups of 16 query
   rows in the lanes. Kp, Vp: K and V packed by flash_cpu_pack. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
flash_bwd_cpu_dq(__global const float *Q, VIEW_ARGS(q), __global const float *dO, VIEW_ARGS(dout),
                 __global const float *Kp, __global const float *Vp, __global const float *LSE, ulong lse_off,
                 __global const float *Dsum, __global float *dQ, VIEW_ARGS(dq), int seqlen_q, int seqlen_k, int heads_q,
                 int group, float scale_log2, float scale, int causal) {
    const int row0 = ((int)get_num_groups(0) - 1 - (int)get_group_id(0)) * BLOCK;
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    __global const float *kb = cpu_packed(Kp, b, heads_q / group, h / group, seqlen_k);
    __global const float *vb = cpu_packed(Vp, b, heads_q / group, h / group, seqlen_k);
    const int last_row = min(row0 + BLOCK, seqlen_q) - 1;
    const int groups = (last_row - row0) / LANES + 1;

    float qt[GROUPS][HEAD_DIM * LANES], gt[GROUPS][HEAD_DIM * LANES]; /* Q^T (pre-scaled), dO^T */
    float dqt[GROUPS][DIM_PAD * LANES];
    float16 l2[GROUPS], dsum[GROUPS];
    int16 limit[GROUPS];
    for (int g = 0; g < groups; ++g) {
        const int first = row0 + g * LANES;
        cpu_load_transposed(Q + VIEW_BASE(q, b, h), q_sr, first, seqlen_q, scale_log2, qt[g]);
        cpu_load_transposed(dO + VIEW_BASE(dout, b, h), dout_sr, first, seqlen_q, 1.0f, gt[g]);
        for (int i = 0; i < DIM_PAD * LANES; ++i) dqt[g][i] = 0.0f;
        float lr[LANES], dr[LANES];
        for (int r = 0; r < LANES; ++r) {
            const ulong i = ((ulong)b * heads_q + h) * seqlen_q + (ulong)min(first + r, seqlen_q - 1);
            lr[r] = LSE[lse_off + i] * FLASHCL_LOG2E_F;
            dr[r] = Dsum[i];
        }
        l2[g] = vload16(0, lr);
        dsum[g] = vload16(0, dr);
        limit[g] = cpu_key_limit(first, seqlen_q, seqlen_k, causal);
    }
    const int key_end = causal ? min(seqlen_k, last_row + seqlen_k - seqlen_q + 1) : seqlen_k;

    float s[CHUNK * LANES], dp[CHUNK * LANES]; /* one group's [key][row]: S then dS, dP */
    for (int j0 = 0; j0 < key_end; j0 += CHUNK) {
        __global const float *kc = kb + (ulong)j0 * DIM_PAD, *vc = vb + (ulong)j0 * DIM_PAD;
        for (int g = 0; g < groups; ++g) {
            cpu_product_rows(qt[g], kc, s);
            cpu_product_rows(gt[g], vc, dp);
            const int16 empty = l2[g] == (float16)(FLASHCL_NEG_INF);
            if (cpu_chunk_masked(j0, row0 + g * LANES, seqlen_q, seqlen_k, causal) || any(empty)) {
                for (int j = 0; j < CHUNK; ++j) {
                    const int16 hidden = empty | ((int16)(j0 + j) > limit[g]);
                    const float16 p = select(cpu_exp2(vload16(j, s) - l2[g]), (float16)(0.0f), hidden);
                    vstore16(p * (vload16(j, dp) - dsum[g]), j, s);
                }
            } else {
                for (int j = 0; j < CHUNK; ++j) {
                    const float16 p = cpu_exp2_unmasked(vload16(j, s) - l2[g]);
                    vstore16(p * (vload16(j, dp) - dsum[g]), j, s);
                }
            }
            cpu_accumulate_cols(s, kc, min(CHUNK, key_end - j0), (float16)(1.0f), dqt[g]);
        }
    }
    for (int g = 0; g < groups; ++g)
        cpu_store_transposed(dqt[g], scale, dQ + VIEW_BASE(dq, b, h), dq_sr, row0 + g * LANES, seqlen_q);
}
