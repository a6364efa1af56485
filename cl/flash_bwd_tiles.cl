/*
 * FlashAttention backward for GPUs: the same math and loop order as
 * cl/flash_bwd.cl (see the comment there), with every product register-
 * blocked like a GEMM instead of one work-item per row. The row kernels keep
 * four d-float rows per work-item, which a CPU holds in L1 but a GPU spills;
 * here no work-item holds more than its share of the accumulators.
 *
 *   flash_bwd_dkdv_tiles  one work-group per (batch, kv head, BLOCK_N keys);
 *                         loops over the query heads of its GQA group and the
 *                         query blocks of BLOCK_M rows. dK and dV stay in
 *                         registers, already summed over the group (no atomics).
 *   flash_bwd_dq_tiles    one work-group per (batch, query head, BLOCK_M rows);
 *                         loops over key blocks, dQ stays in registers.
 * D = rowsum(dO * O) comes from flash_bwd_dot (cl/flash_bwd.cl) beforehand.
 *
 * Variants (cl/variants.cl), the same terms as the forward and the row kernels:
 * store_t storage, HEAD_DIM for Q/K/dQ/dK and HEAD_DIM_V for V/dO/dV; only
 * the query blocks (dK/dV) or key blocks (dQ) inside the causal/window band
 * are visited and block-mask-dropped tiles are skipped, both uniformly per
 * work-group; the other terms are per element in bwdt_grad (P from the final
 * logit, dropout Z on P for dV and on dP, the softcap derivative on dS);
 * varlen views start at the sequence's packed row and blocks past the
 * sequence visit nothing (an `active` flag; no return ahead of a barrier).
 *
 * Both are a 16x16 grid of work-items. Per (query block, key block) pair:
 *   phase A  S = (scale*log2e Q) K^T and dP = dO V^T together, each work-item
 *            owning TILE_M consecutive rows TILE_M py + i and TILE_N consecutive
 *            keys TILE_N px + j, from 16-dim slices of Q, dO, K and V staged in
 *            __local. Then P = exp2(S - lse2) and dS = P (dP - D) in registers.
 *   phase B  dK/dV: P (then dS) goes to __local, and each work-item (tx = lid
 *            % 16, ty = lid / 16) adds its keys TILE_N ty + j x its dims (bwdt_dim)
 *            of P^T dO (then dS^T Q), dO (Q) streaming through __local ROW_SLICE
 *            rows at a time.
 *            dQ: dS goes to __local (transposed), each work-item adds its rows
 *            TILE_M ty + i x its dims of dS K, K streaming ROW_SLICE keys at a time.
 * Every operand a product reads from __local is a run of consecutive floats, read
 * 16 bytes at a time where the run allows (FLASHCL_LDS_READ): a 4 x 4 tile's
 * phase A reads 4 float4s per dim where it read 16 floats. Phase A's ownership
 * is free to choose because S goes through __local anyway: a warp's 32 items
 * are 8 px x 4 py (PHASE_A_X/Y), so with 4 x 4 tiles each read touches 8
 * (keys) or 4 (rows) 16-byte runs, one __local wavefront.
 *
 * __local floats (LDM = BLOCK_M + 4, LDN = BLOCK_N + 4):
 *   stage   max(16 * (2 LDM + 2 LDN), ROW_SLICE * max(HEAD_DIM, HEAD_DIM_V)): phase A's four
 *           slices and phase B's row slice share it (never live together)
 *   Pb      BLOCK_M * LDN: P then dS (dK/dV). P and dS share one buffer so
 *           64x64 tiles fit 48 KiB at d = 256
 *   Sb      BLOCK_N * LDM: dS transposed (dQ), [key][row]
 *   Ls, Ds  2 * BLOCK_M (dK/dV only: its rows change with every block)
 * 64x64, ROW_SLICE 16, d <= 272: 4352 + 4352 + 128 floats = 35,328 bytes.
 * The host mirrors this count (src/backends/portable/plan_backward.c) and
 * shrinks the tiles or ROW_SLICE on devices with less local memory.
 *
 * Registers per work-item: dK/dV TILE_N * (ceil(d/16) + ceil(d_v/16))
 * accumulators, S and dP 2 * TILE_M * TILE_N, operands TILE_M + TILE_N
 * (phase A) or TILE_N + ceil(d/16) (phase B). 64x64 at d = 128: 64 + 32 + 16
 * floats; the host narrows BLOCK_N (and BLOCK_M) for larger head dims so that
 * dK/dV (and dQ) stay near 64 accumulators.
 */

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef BLOCK_M
#define BLOCK_M 64
#endif
#ifndef BLOCK_N
#define BLOCK_N 64
#endif
#ifndef ROW_SLICE
#define ROW_SLICE 16
#endif

#define GRID 16
#define WG_ITEMS (GRID * GRID)
#define SLICE 16 /* dims per phase-A slice */
#define TILE_M (BLOCK_M / GRID)
#define TILE_N (BLOCK_N / GRID)
#define DIMS_PER_ITEM ((HEAD_DIM + GRID - 1) / GRID)     /* of dQ and dK rows */
#define DIMS_V_PER_ITEM ((HEAD_DIM_V + GRID - 1) / GRID) /* of dV rows */
#define DIM_MAX (HEAD_DIM > HEAD_DIM_V ? HEAD_DIM : HEAD_DIM_V)

/*
 * Leading dims: the block plus 4 floats, so every row of a __local array starts 16-byte aligned for
 * the float4 accesses, and (a multiple of 16, plus 4) rows 4 or 8 apart fall in alternate halves of
 * the 32 banks. Phase-A slices ([dim][row]) are stored by warps covering 16 dims x 2 rows (scalar
 * loads) or 4 x 4 dims x 8 rows (float4 loads): 2-way conflicts, against 4x fewer reads. A warp
 * writes P/dS to Pb ([row][key], leading dim LDN) as 4 rows x 8 float4s (4 x 4 tiles: each row's
 * 128 bytes fill the banks once, the least a 512-byte store takes) or as scalars (2-way), and dS to
 * Sb (dQ, [key][row], LDM) as 8 keys x 4 float4s, consecutive px in alternate bank halves.
 */
#define LDM (BLOCK_M + 4)
#define LDN (BLOCK_N + 4)
/* Phase A's position of work-item lid in the 16 x 16 grid: warp w (32 items) covers px 8 (w % 2)
   .. + 7 and py 4 (w / 2) .. + 3 (see above). */
#define PHASE_A_X(lid) ((lid) / 32 % 2 * 8 + (lid) % 8)
#define PHASE_A_Y(lid) ((lid) / 64 * 4 + (lid) % 32 / 8)
#define STAGE_A (SLICE * (2 * LDM + 2 * LDN))
#define STAGE_B (ROW_SLICE * DIM_MAX)
#define STAGE_FLOATS (STAGE_A > STAGE_B ? STAGE_A : STAGE_B)

#if BLOCK_M % GRID != 0 || BLOCK_N % GRID != 0
#error "BLOCK_M and BLOCK_N must be multiples of 16"
#endif
#if GRID % ROW_SLICE != 0
#error "ROW_SLICE must divide 16"
#endif

/*
 * Every slice that streams through __local is software-pipelined: each
 * work-item loads its share of the next slice from global memory into
 * registers before the FMAs of the current slice and stores it to __local
 * after them (a barrier on each side of the store), so the loads' latency
 * hides behind the FMAs (the forward's flash_fwd_tiles measured 1.2-1.4x in
 * float32 from the same change). A work-item's share of a phase-A slice is
 * rows lid / 16 + 16 t at dim lid % 16; of a phase-B row slice, elements
 * lid + 256 t of it (float4s e = lid + 256 t where the view allows them).
 */

/*
 * A work-item's share of dims [c0, c0 + 16) of rows [first, first + 16 n) of a view, times mul, into
 * v[n]; rows at or past `end` and dims past `dim` are zero. Consecutive work-items read consecutive
 * dims. `vec` (uniform: n a multiple of 4, dim of 4, the view's rows 16-byte aligned): as float4s
 * instead, float4 e = lid + 256 t of the slice at row e / 4, dims 4 (e % 4) .. + 3, one load and
 * one bounds check per 4 floats (the forward measured 1.11x at d = 128 on the H200 from the same
 * change).
 */
inline void bwdt_load_slice(float *v, int n, __global const store_t *base, ulong stride, long first, long end, int c0,
                            int dim, float mul, int lid, int vec) {
    if (vec) {
        for (int t = 0; t < n / 4; ++t) {
            const int e = lid + t * WG_ITEMS, c = c0 + e % 4 * 4;
            const long row = first + e / 4;
            const float4 x =
                (row < end && c < dim) ? FLASHCL_LOAD4_ALIGNED(base, row * stride + c) * mul : (float4)(0.0f);
            FLASHCL_UNPACK4(v + 4 * t, x);
        }
        return;
    }
    const int c = c0 + lid % SLICE;
    for (int t = 0; t < n; ++t) {
        const long row = first + lid / SLICE + (long)t * (WG_ITEMS / SLICE);
        v[t] = (row < end && c < dim) ? FLASHCL_LOAD(base, row * stride + c) * mul : 0.0f;
    }
}

/* ... and into dst[dim * ld + row] (transposed, as the products read it); vec as above. */
inline void bwdt_store_slice(__local float *dst, int ld, const float *v, int n, int lid, int vec) {
    if (vec) {
        for (int t = 0; t < n / 4; ++t) {
            const int e = lid + t * WG_ITEMS;
            for (int u = 0; u < 4; ++u) dst[(e % 4 * 4 + u) * ld + e / 4] = v[4 * t + u];
        }
        return;
    }
    for (int t = 0; t < n; ++t) dst[(lid % SLICE) * ld + lid / SLICE + t * (WG_ITEMS / SLICE)] = v[t];
}

/* A phase-B row slice: ROW_SLICE whole rows of up to DIM_MAX elements. */
#define ROWS_SHARE_1 ((ROW_SLICE * DIM_MAX + WG_ITEMS - 1) / WG_ITEMS)
/* float4 shares (in floats), where some head dim allows them */
#define ROWS_SHARE_4                                                                                                   \
    (HEAD_DIM % 4 == 0 || HEAD_DIM_V % 4 == 0 ? 4 * ((ROW_SLICE * DIM_MAX / 4 + WG_ITEMS - 1) / WG_ITEMS) : 0)
#define ROWS_SHARE (ROWS_SHARE_1 > ROWS_SHARE_4 ? ROWS_SHARE_1 : ROWS_SHARE_4)
/* Phase A's float4 loads need whole float4 shares of every slice; the views' alignment is checked at
   run time (VEC_ROWS). */
#define VEC_A (TILE_M % 4 == 0 && TILE_N % 4 == 0 && HEAD_DIM % 4 == 0 && HEAD_DIM_V % 4 == 0)
#define VEC_ROWS(p, sr, dim) ((dim) % 4 == 0 && FLASHCL_ROWS_ALIGNED(p, sr))

/* A work-item's share of rows [first, first + ROW_SLICE) of `dim` elements (element e = lid + 256 t at
   row e / dim, column e % dim) into v; zero at or past `end`. `vec` (uniform: dim a multiple of 4, the
   view's rows 16-byte aligned): float4 e = lid + 256 t instead, elements 4 e .. + 3 (a row holds whole
   float4s), into v[4 t ..]. */
inline void bwdt_load_rows(float *v, __global const store_t *base, ulong stride, long first, long end, int dim,
                           int lid, int vec) {
    if (vec) {
        FLASHCL_SHARED_FOR(int, e, ROW_SLICE *dim / 4, lid, WG_ITEMS) {
            const int r = 4 * e / dim, c = 4 * e - r * dim, t = e_base / WG_ITEMS;
            const long row = first + r;
            const float4 x = row < end ? FLASHCL_LOAD4_ALIGNED(base, row * stride + c) : (float4)(0.0f);
            FLASHCL_UNPACK4(v + 4 * t, x);
        }
        return;
    }
    FLASHCL_SHARED_FOR(int, e, ROW_SLICE *dim, lid, WG_ITEMS) {
        const int r = e / dim, c = e - r * dim;
        const long row = first + r;
        v[e_base / WG_ITEMS] = row < end ? FLASHCL_LOAD(base, row * stride + c) : 0.0f;
    }
}

/* ... and into dst[row * dim + c] (16-byte aligned); vec as above. */
inline void bwdt_store_rows(__local float *dst, const float *v, int dim, int lid, int vec) {
    if (vec) {
        FLASHCL_SHARED_FOR(int, e, ROW_SLICE *dim / 4, lid, WG_ITEMS) {
            const int t = e_base / WG_ITEMS;
            vstore4(FLASHCL_PACK4(v + 4 * t), e, dst);
        }
        return;
    }
    FLASHCL_SHARED_FOR(int, e, ROW_SLICE *dim, lid, WG_ITEMS) { dst[e] = v[e_base / WG_ITEMS]; }
}

/*
 * Phase A of both kernels: s = (scale*log2e*Q) K^T over HEAD_DIM and dp = dO V^T
 * over HEAD_DIM_V for the work-item's TILE_M x TILE_N block (rows TILE_M py + i,
 * keys TILE_N px + j), from 16-dim slices
 * staged in `stage` (Q and dO [SLICE][LDM], then K and V [SLICE][LDN]). The
 * views start at the sequence's first row; rows at or past sq (sk) read as zero.
 * Contains barriers: every work-item of the group must call it. It starts by
 * writing the stage (whose readers must be past a barrier) and returns after
 * a barrier (the stage is free again).
 */
inline void bwdt_scores_and_dp(float s[TILE_M][TILE_N], float dp[TILE_M][TILE_N], __local float *stage,
                               __global const store_t *Qb, ulong q_sr, __global const store_t *Gb, ulong dout_sr,
                               __global const store_t *Kb, ulong k_sr, __global const store_t *Vb, ulong v_sr,
                               long row0, long key0, long sq, long sk, float scale_log2, int lid, int px, int py,
                               int vec) {
    __local float *Qs = stage;
    __local float *Gs = stage + SLICE * LDM;
    __local float *Ks = Gs + SLICE * LDM;
    __local float *Vs = Ks + SLICE * LDN;
    for (int i = 0; i < TILE_M; ++i)
        for (int j = 0; j < TILE_N; ++j) s[i][j] = dp[i][j] = 0.0f;
    float qn[TILE_M], gn[TILE_M], kn[TILE_N], vn[TILE_N];
    /* With d_v != d the shorter side's slices end early (the conditions are uniform). */
#define BWDT_LOAD_A(c0)                                                                                                \
    do {                                                                                                               \
        if ((c0) < HEAD_DIM) {                                                                                         \
            bwdt_load_slice(qn, TILE_M, Qb, q_sr, row0, sq, (c0), HEAD_DIM, scale_log2, lid, vec);                     \
            bwdt_load_slice(kn, TILE_N, Kb, k_sr, key0, sk, (c0), HEAD_DIM, 1.0f, lid, vec);                           \
        }                                                                                                              \
        if ((c0) < HEAD_DIM_V) {                                                                                       \
            bwdt_load_slice(gn, TILE_M, Gb, dout_sr, row0, sq, (c0), HEAD_DIM_V, 1.0f, lid, vec);                      \
            bwdt_load_slice(vn, TILE_N, Vb, v_sr, key0, sk, (c0), HEAD_DIM_V, 1.0f, lid, vec);                         \
        }                                                                                                              \
    } while (0)
#define BWDT_STORE_A(c0)                                                                                               \
    do {                                                                                                               \
        if ((c0) < HEAD_DIM) {                                                                                         \
            bwdt_store_slice(Qs, LDM, qn, TILE_M, lid, vec);                                                           \
            bwdt_store_slice(Ks, LDN, kn, TILE_N, lid, vec);                                                           \
        }                                                                                                              \
        if ((c0) < HEAD_DIM_V) {                                                                                       \
            bwdt_store_slice(Gs, LDM, gn, TILE_M, lid, vec);                                                           \
            bwdt_store_slice(Vs, LDN, vn, TILE_N, lid, vec);                                                           \
        }                                                                                                              \
    } while (0)
/* acc[i][j] += sum over the slice's dims of A[row i] B[key j], A [SLICE][LDM] and B [SLICE][LDN] staged. */
#define BWDT_SLICE_PRODUCT(acc, As, Bs)                                                                                \
    do {                                                                                                               \
        for (int c = 0; c < SLICE; ++c) {                                                                              \
            float a_[TILE_M], b_[TILE_N];                                                                              \
            FLASHCL_LDS_READ(a_, (As) + c * LDM + TILE_M * py, TILE_M);                                                \
            FLASHCL_LDS_READ(b_, (Bs) + c * LDN + TILE_N * px, TILE_N);                                                \
            for (int i = 0; i < TILE_M; ++i)                                                                           \
                for (int j = 0; j < TILE_N; ++j) acc[i][j] = fma(a_[i], b_[j], acc[i][j]);                             \
        }                                                                                                              \
    } while (0)
#define BWDT_PRODUCTS_A(c0)                                                                                            \
    do {                                                                                                               \
        if ((c0) < HEAD_DIM) BWDT_SLICE_PRODUCT(s, Qs, Ks);                                                            \
        if ((c0) < HEAD_DIM_V) BWDT_SLICE_PRODUCT(dp, Gs, Vs);                                                         \
    } while (0)
    BWDT_LOAD_A(0);
    BWDT_STORE_A(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    /* The last slice is peeled: the loop's body loads unconditionally (a branch there cost the
       forward 7%). */
    int c0 = 0;
    for (; c0 + SLICE < DIM_MAX; c0 += SLICE) {
        BWDT_LOAD_A(c0 + SLICE);
        BWDT_PRODUCTS_A(c0);
        barrier(CLK_LOCAL_MEM_FENCE);
        BWDT_STORE_A(c0 + SLICE);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    BWDT_PRODUCTS_A(c0);
    barrier(CLK_LOCAL_MEM_FENCE);
#undef BWDT_LOAD_A
#undef BWDT_STORE_A
#undef BWDT_PRODUCTS_A
#undef BWDT_SLICE_PRODUCT
}

/*
 * From the raw log2-domain score s and dP of one (row, key) pair: returns dS
 * (with the softcap's derivative) and sets *pz = P Z, what dV accumulates.
 * P = exp2(f - lse2) with f the final logit (-inf where masked, past either
 * length, or outside the band); lse2 = -inf (a row that saw no key) gives 0.
 * `plain`: the tile needs no per-element terms (every pair visible, no score terms).
 */
inline float bwdt_grad(float s, float dp, float lse2, float drow, int plain, flashcl_head hd, long row, long key,
                       float *pz, VARIANT_ARGS) {
    const int inside = row < hd.sq && key < hd.sk;
    const float f = plain ? s : inside ? flashcl_score(s, hd, row, key, VARIANT_PASS) : FLASHCL_NEG_INF;
    const float p = lse2 != FLASHCL_NEG_INF ? exp2(f - lse2) : 0.0f;
    const float z = inside ? flashcl_dropout_factor(hd, row, key, VARIANT_PASS) : 0.0f;
    *pz = p * z;
    return p * (dp * z - drow) * flashcl_score_grad(s, softcap2);
}

/* Phase B's dims of a work-item in a row of `dim`: where dim is a multiple of 64, four consecutive dims
   per 64 (dims 64 g + 4 tx + u, k = 4 g + u), read as one float4; else tx + 16 k. bwdt_dim_raw may
   pass dim (pad dims, never stored); bwdt_dim clamps those to a real, staged value. */
inline int bwdt_dim_raw(int tx, int k, int dim) { return dim % 64 == 0 ? k / 4 * 64 + tx * 4 + k % 4 : tx + GRID * k; }
inline int bwdt_dim(int tx, int k, int dim) {
    int c = bwdt_dim_raw(tx, k, dim);
    return c < dim ? c : 0;
}

/* A work-item's per_item phase-B dims of one staged row (16-byte aligned) into dst. */
#define BWDT_DIMS_READ(dst, row, dim, per_item, tx)                                                                    \
    do {                                                                                                               \
        if ((dim) % 64 == 0) {                                                                                         \
            for (int g_ = 0; g_ < (per_item) / 4; ++g_) FLASHCL_LDS_READ((dst) + 4 * g_, (row) + g_ * 64 + (tx)*4, 4); \
        } else {                                                                                                       \
            for (int k_ = 0; k_ < (per_item); ++k_) (dst)[k_] = (row)[bwdt_dim((tx), k_, (dim))];                      \
        }                                                                                                              \
    } while (0)

/* Grid: (ceil(max_seqlen_k / BLOCK_N) * 256, heads_kv, batch). */
__kernel __attribute__((reqd_work_group_size(WG_ITEMS, 1, 1))) void
flash_bwd_dkdv_tiles(__global const store_t *Q, VIEW_ARGS(q), __global const store_t *K, VIEW_ARGS(k),
                     __global const store_t *V, VIEW_ARGS(v), __global const store_t *dO, VIEW_ARGS(dout),
                     __global const float *LSE, ulong lse_off, __global const float *Dsum, __global store_t *dK,
                     VIEW_ARGS(dk), __global store_t *dV, VIEW_ARGS(dv), int seqlen_q, int seqlen_k, int heads_q,
                     int group, float scale_log2, float scale, VARIANT_ARGS) {
    const int lid = (int)get_local_id(0);
    const int tx = lid % GRID, ty = lid / GRID, px = PHASE_A_X(lid), py = PHASE_A_Y(lid);
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
    /* The sequence geometry (lengths, packed offsets) is the same for every head of the group. */
    const flashcl_head hd0 = flashcl_head_setup(b, hk * group, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    /* Natural order: under a causal mask the first key blocks see the most rows, so they start first. */
    const long key0 = (long)get_group_id(0) * BLOCK_N;
    /* varlen: a block past this sequence visits nothing and stores nothing; no early return
       ahead of the barriers below (POCL 3.1's work-item-0 peeling, cl/common.cl). */
    const int active = key0 < hd0.sk;
    const long key_last = min(key0 + BLOCK_N, hd0.sk) - 1;

    __global const store_t *Kb = K + VIEW_BASE(k, b, hk) + hd0.k0 * k_sr;
    __global const store_t *Vb = V + VIEW_BASE(v, b, hk) + hd0.k0 * v_sr;

    __local float stage[STAGE_FLOATS] __attribute__((aligned(16)));
    __local float Pb[BLOCK_M * LDN] __attribute__((aligned(16))); /* [row][key]: P Z (dV pass), then dS (dK pass) */
    __local float Ls[BLOCK_M];       /* lse2 of the block's rows (-inf past the sequence) */
    __local float Ds[BLOCK_M];
    /* stage: phase A's Q, dO, K, V slices (bwdt_scores_and_dp), then phase B's rows. */
    __local float *Rs = stage; /* phase B: [ROW_SLICE][HEAD_DIM_V] of dO, then [ROW_SLICE][HEAD_DIM] of Q */

    float dk[TILE_N][DIMS_PER_ITEM], dv[TILE_N][DIMS_V_PER_ITEM];
    for (int j = 0; j < TILE_N; ++j) {
        for (int k = 0; k < DIMS_PER_ITEM; ++k) dk[j][k] = 0.0f;
        for (int k = 0; k < DIMS_V_PER_ITEM; ++k) dv[j][k] = 0.0f;
    }

    /* Only the query blocks whose causal/window band reaches this block's keys. */
    const long q_begin = flashcl_q_begin(hd0, key0, BLOCK_M, win_right);
    const long q_end = active ? flashcl_q_end(hd0, key_last, win_left) : q_begin;

    for (int g = 0; g < group; ++g) {
        const int h = hk * group + g;
        const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
        __global const store_t *Qb = Q + VIEW_BASE(q, b, h) + hd.q0 * q_sr;
        __global const store_t *Gb = dO + VIEW_BASE(dout, b, h) + hd.q0 * dout_sr;
        /* 16-byte loads where the views allow them (uniform: the same for the whole group). */
        const int vec_q = VEC_ROWS(Qb, q_sr, HEAD_DIM), vec_g = VEC_ROWS(Gb, dout_sr, HEAD_DIM_V);
#if VEC_A
        const int vec_a = vec_q && vec_g && VEC_ROWS(Kb, k_sr, HEAD_DIM) && VEC_ROWS(Vb, v_sr, HEAD_DIM_V);
#else
        const int vec_a = 0;
#endif
        for (long row0 = q_begin; row0 < q_end; row0 += BLOCK_M) {
            const long row_end = row0 + BLOCK_M - 1, key_end = key0 + BLOCK_N - 1;
            /* Uniform across the group: a dropped tile is neither loaded nor computed. */
            if (flashcl_tile_skipped(hd, row0, row_end, key0, key_end, VARIANT_PASS)) continue;
            /* The previous block's readers are past its last barrier. */
            FLASHCL_SHARED_FOR(int, r, BLOCK_M, lid, WG_ITEMS) {
                long i = row0 + r;
                ulong at = flashcl_row_index(hd, b, h, heads_q, seqlen_q, i < hd.sq ? i : 0);
                Ls[r] = i < hd.sq ? LSE[lse_off + at] * FLASHCL_LOG2E_F : FLASHCL_NEG_INF;
                Ds[r] = i < hd.sq ? Dsum[at] : 0.0f;
            }
            /* Phase A's first barrier would publish Ls and Ds too, but only items lid < BLOCK_M write
               them, and with no barrier between this write and phase A's loop POCL 3.1 (loopvec,
               AVX-512 host) compiled that test as one branch for the whole group, taken with
               work-item 0's lid (seen in its parallel.bc): items BLOCK_M.. wrote -inf past Ls into
               Ds and the block-sparse cases gave NaN dK. A barrier right after the write keeps the
               divergent test in a region of its own (see FLASHCL_SHARED_FOR, cl/common.cl). */
            barrier(CLK_LOCAL_MEM_FENCE);

            /* Phase A: S (log2 domain) and dP, 16 dims at a time. */
            float s[TILE_M][TILE_N], dp[TILE_M][TILE_N];
            bwdt_scores_and_dp(s, dp, stage, Qb, q_sr, Gb, dout_sr, Kb, k_sr, Vb, v_sr, row0, key0, hd.sq, hd.sk,
                               scale_log2, lid, px, py, vec_a);

            /* dS overwrites dP; P Z goes to Pb for the dV pass. */
            const int plain =
                !HAS_SCORE_TERMS && flashcl_tile_plain(hd, row0, row_end, key0, key_end, win_left, win_right);
            for (int i = 0; i < TILE_M; ++i) {
                const int r = TILE_M * py + i;
                const float lse2 = Ls[r], drow = Ds[r];
                float pz[TILE_N];
                for (int j = 0; j < TILE_N; ++j)
                    dp[i][j] = bwdt_grad(s[i][j], dp[i][j], lse2, drow, plain, hd, row0 + r, key0 + TILE_N * px + j,
                                         &pz[j], VARIANT_PASS);
                FLASHCL_LDS_WRITE(Pb + r * LDN + TILE_N * px, pz, TILE_N);
            }

            /* dV += (P Z)^T dO, then dK += dS^T Q (scale applied once, at the store; Q staged unscaled),
               ROW_SLICE rows at a time, pipelined; the last slice of each pass is peeled, and Q's first
               slice loads during dV's last. (Phase A's last barrier freed the stage.) */
            float rn[ROWS_SHARE];
            bwdt_load_rows(rn, Gb, dout_sr, row0, hd.sq, HEAD_DIM_V, lid, vec_g);
            bwdt_store_rows(Rs, rn, HEAD_DIM_V, lid, vec_g);
            barrier(CLK_LOCAL_MEM_FENCE); /* publishes Pb and the first dO rows */
/* acc[j][k] += Pb[r0 + r][key j] x Rs[r][dim k] over the slice's rows: dV (P Z, dO) or dK (dS, Q). */
#define BWDT_KEY_ROWS(acc, per_item, dim, r0)                                                                          \
    do {                                                                                                               \
        for (int r = 0; r < ROW_SLICE; ++r) {                                                                          \
            float pa[TILE_N], rb[per_item];                                                                            \
            FLASHCL_LDS_READ(pa, Pb + ((r0) + r) * LDN + TILE_N * ty, TILE_N);                                         \
            BWDT_DIMS_READ(rb, Rs + r * (dim), (dim), (per_item), tx);                                                 \
            for (int j = 0; j < TILE_N; ++j)                                                                           \
                for (int k = 0; k < (per_item); ++k) acc[j][k] = fma(pa[j], rb[k], acc[j][k]);                         \
        }                                                                                                              \
    } while (0)
#define BWDT_DV_ROWS(r0) BWDT_KEY_ROWS(dv, DIMS_V_PER_ITEM, HEAD_DIM_V, r0)
#define BWDT_DK_ROWS(r0) BWDT_KEY_ROWS(dk, DIMS_PER_ITEM, HEAD_DIM, r0)
            int r0 = 0;
            for (; r0 + ROW_SLICE < BLOCK_M; r0 += ROW_SLICE) {
                bwdt_load_rows(rn, Gb, dout_sr, row0 + r0 + ROW_SLICE, hd.sq, HEAD_DIM_V, lid, vec_g);
                BWDT_DV_ROWS(r0);
                barrier(CLK_LOCAL_MEM_FENCE);
                bwdt_store_rows(Rs, rn, HEAD_DIM_V, lid, vec_g);
                barrier(CLK_LOCAL_MEM_FENCE);
            }
            bwdt_load_rows(rn, Qb, q_sr, row0, hd.sq, HEAD_DIM, lid, vec_q);
            BWDT_DV_ROWS(r0);

            /* Every work-item is done reading P and the last dO rows: dS and Q's first rows take their place. */
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int i = 0; i < TILE_M; ++i)
                FLASHCL_LDS_WRITE(Pb + (TILE_M * py + i) * LDN + TILE_N * px, dp[i], TILE_N);
            bwdt_store_rows(Rs, rn, HEAD_DIM, lid, vec_q);
            barrier(CLK_LOCAL_MEM_FENCE);
            for (r0 = 0; r0 + ROW_SLICE < BLOCK_M; r0 += ROW_SLICE) {
                bwdt_load_rows(rn, Qb, q_sr, row0 + r0 + ROW_SLICE, hd.sq, HEAD_DIM, lid, vec_q);
                BWDT_DK_ROWS(r0);
                barrier(CLK_LOCAL_MEM_FENCE);
                bwdt_store_rows(Rs, rn, HEAD_DIM, lid, vec_q);
                barrier(CLK_LOCAL_MEM_FENCE);
            }
            BWDT_DK_ROWS(r0);
#undef BWDT_DV_ROWS
#undef BWDT_DK_ROWS
#undef BWDT_KEY_ROWS
            /* The next block rewrites Ls, Ds, the stage and Pb. */
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }

    __global store_t *dKb = dK + VIEW_BASE(dk, b, hk) + hd0.k0 * dk_sr;
    __global store_t *dVb = dV + VIEW_BASE(dv, b, hk) + hd0.k0 * dv_sr;
    for (int j = 0; j < TILE_N; ++j) {
        const long key = key0 + TILE_N * ty + j;
        if (key >= hd0.sk) continue;
        for (int k = 0; k < DIMS_PER_ITEM; ++k) {
            const int c = bwdt_dim_raw(tx, k, HEAD_DIM);
            if (c < HEAD_DIM) FLASHCL_STORE(dKb, key * dk_sr + c, dk[j][k] * scale);
        }
        for (int k = 0; k < DIMS_V_PER_ITEM; ++k) {
            const int c = bwdt_dim_raw(tx, k, HEAD_DIM_V);
            if (c < HEAD_DIM_V) FLASHCL_STORE(dVb, key * dv_sr + c, dv[j][k]);
        }
    }
}

/* Grid: (ceil(max_seqlen_q / BLOCK_M) * 256, heads_q, batch). */
__kernel __attribute__((reqd_work_group_size(WG_ITEMS, 1, 1))) void
flash_bwd_dq_tiles(__global const store_t *Q, VIEW_ARGS(q), __global const store_t *K, VIEW_ARGS(k),
                   __global const store_t *V, VIEW_ARGS(v), __global const store_t *dO, VIEW_ARGS(dout),
                   __global const float *LSE, ulong lse_off, __global const float *Dsum, __global store_t *dQ,
                   VIEW_ARGS(dq), int seqlen_q, int seqlen_k, int heads_q, int group, float scale_log2, float scale,
                   VARIANT_ARGS) {
    const int lid = (int)get_local_id(0);
    const int tx = lid % GRID, ty = lid / GRID, px = PHASE_A_X(lid), py = PHASE_A_Y(lid);
    /* Reverse order: under a causal mask the last query blocks see the most keys, so they start first. */
    const int block = (int)get_num_groups(0) - 1 - (int)get_group_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const int hk = h / group;
    const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    const long row0 = (long)block * BLOCK_M;
    /* varlen: a block past this sequence visits nothing and stores nothing; no early return
       ahead of the barriers below (POCL 3.1's work-item-0 peeling, cl/common.cl). */
    const int active = row0 < hd.sq;
    const long row_last = min(row0 + BLOCK_M, hd.sq) - 1;

    __global const store_t *Qb = Q + VIEW_BASE(q, b, h) + hd.q0 * q_sr;
    __global const store_t *Gb = dO + VIEW_BASE(dout, b, h) + hd.q0 * dout_sr;
    __global const store_t *Kb = K + VIEW_BASE(k, b, hk) + hd.k0 * k_sr;
    __global const store_t *Vb = V + VIEW_BASE(v, b, hk) + hd.k0 * v_sr;
    /* 16-byte loads where the views allow them (uniform). */
    const int vec_k = VEC_ROWS(Kb, k_sr, HEAD_DIM);
#if VEC_A
    const int vec_a =
        vec_k && VEC_ROWS(Qb, q_sr, HEAD_DIM) && VEC_ROWS(Gb, dout_sr, HEAD_DIM_V) && VEC_ROWS(Vb, v_sr, HEAD_DIM_V);
#else
    const int vec_a = 0;
#endif

    __local float stage[STAGE_FLOATS] __attribute__((aligned(16)));
    __local float Sb[BLOCK_N * LDM] __attribute__((aligned(16))); /* dS, [key][row] */
    /* stage: phase A's Q, dO, K, V slices (bwdt_scores_and_dp), then phase B's rows. */
    __local float *Rs = stage; /* phase B: [ROW_SLICE keys][HEAD_DIM] of K */

    /* This kernel's rows never change: phase A's (TILE_M py + i) lse2 and D live in registers. */
    float lse2[TILE_M], drow[TILE_M];
    for (int i = 0; i < TILE_M; ++i) {
        const long row = row0 + TILE_M * py + i;
        const ulong stat = flashcl_row_index(hd, b, h, heads_q, seqlen_q, row < hd.sq ? row : 0);
        lse2[i] = row < hd.sq ? LSE[lse_off + stat] * FLASHCL_LOG2E_F : FLASHCL_NEG_INF;
        drow[i] = row < hd.sq ? Dsum[stat] : 0.0f;
    }
    float dq[TILE_M][DIMS_PER_ITEM];
    for (int i = 0; i < TILE_M; ++i)
        for (int k = 0; k < DIMS_PER_ITEM; ++k) dq[i][k] = 0.0f;

    /* Key blocks outside the causal/window band are never loaded; a block that sees no key loads none. */
    const long kv_begin = flashcl_kv_begin(hd, row0, BLOCK_N, win_left);
    const long kv_end = active ? flashcl_kv_end(hd, row_last, win_right) : kv_begin;

    for (long key0 = kv_begin; key0 < kv_end; key0 += BLOCK_N) {
        const long row_end = row0 + BLOCK_M - 1, key_end = key0 + BLOCK_N - 1;
        if (flashcl_tile_skipped(hd, row0, row_end, key0, key_end, VARIANT_PASS)) continue;
        float s[TILE_M][TILE_N], dp[TILE_M][TILE_N];
        bwdt_scores_and_dp(s, dp, stage, Qb, q_sr, Gb, dout_sr, Kb, k_sr, Vb, v_sr, row0, key0, hd.sq, hd.sk,
                           scale_log2, lid, px, py, vec_a);

        const int plain = !HAS_SCORE_TERMS && flashcl_tile_plain(hd, row0, row_end, key0, key_end, win_left, win_right);
        for (int j = 0; j < TILE_N; ++j) {
            float ds[TILE_M], pz;
            for (int i = 0; i < TILE_M; ++i)
                ds[i] = bwdt_grad(s[i][j], dp[i][j], lse2[i], drow[i], plain, hd, row0 + TILE_M * py + i,
                                  key0 + TILE_N * px + j, &pz, VARIANT_PASS);
            FLASHCL_LDS_WRITE(Sb + (TILE_N * px + j) * LDM + TILE_M * py, ds, TILE_M);
        }

        /* dQ += dS K, ROW_SLICE keys at a time, pipelined as in dK/dV (the last slice peeled). */
        float rn[ROWS_SHARE];
        bwdt_load_rows(rn, Kb, k_sr, key0, hd.sk, HEAD_DIM, lid, vec_k);
        bwdt_store_rows(Rs, rn, HEAD_DIM, lid, vec_k);
        barrier(CLK_LOCAL_MEM_FENCE); /* publishes Sb and the first K rows */
#define BWDT_DQ_ROWS(k0)                                                                                               \
    do {                                                                                                               \
        for (int r = 0; r < ROW_SLICE; ++r) {                                                                          \
            float da[TILE_M], kv[DIMS_PER_ITEM];                                                                       \
            FLASHCL_LDS_READ(da, Sb + ((k0) + r) * LDM + TILE_M * ty, TILE_M);                                         \
            BWDT_DIMS_READ(kv, Rs + r * HEAD_DIM, HEAD_DIM, DIMS_PER_ITEM, tx);                                        \
            for (int i = 0; i < TILE_M; ++i)                                                                           \
                for (int k = 0; k < DIMS_PER_ITEM; ++k) dq[i][k] = fma(da[i], kv[k], dq[i][k]);                        \
        }                                                                                                              \
    } while (0)
        int k0 = 0;
        for (; k0 + ROW_SLICE < BLOCK_N; k0 += ROW_SLICE) {
            bwdt_load_rows(rn, Kb, k_sr, key0 + k0 + ROW_SLICE, hd.sk, HEAD_DIM, lid, vec_k);
            BWDT_DQ_ROWS(k0);
            barrier(CLK_LOCAL_MEM_FENCE);
            bwdt_store_rows(Rs, rn, HEAD_DIM, lid, vec_k);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        BWDT_DQ_ROWS(k0);
#undef BWDT_DQ_ROWS
        /* The next key block rewrites the stage and Sb. */
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    __global store_t *dQb = dQ + VIEW_BASE(dq, b, h) + hd.q0 * dq_sr;
    for (int i = 0; i < TILE_M; ++i) {
        const long row = row0 + TILE_M * ty + i;
        if (row >= hd.sq) continue;
        for (int k = 0; k < DIMS_PER_ITEM; ++k) {
            const int c = bwdt_dim_raw(tx, k, HEAD_DIM);
            if (c < HEAD_DIM) FLASHCL_STORE(dQb, row * dq_sr + c, dq[i][k] * scale);
        }
    }
}
