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
 * sequence return before any barrier.
 *
 * Both are a 16x16 grid of work-items (tx = lid % 16, ty = lid / 16). Per
 * (query block, key block) pair:
 *   phase A  S = (scale*log2e Q) K^T and dP = dO V^T together, each work-item
 *            owning rows ty + 16i and keys tx + 16j (TILE_M x TILE_N of each),
 *            from 16-dim slices of Q, dO, K and V staged in __local. Then
 *            P = exp2(S - lse2) and dS = P (dP - D) in registers.
 *   phase B  dK/dV: P (then dS) goes to __local, and each work-item adds its
 *            keys ty + 16j x dims tx + 16k of P^T dO (then dS^T Q), dO (Q)
 *            streaming through __local ROW_SLICE rows at a time.
 *            dQ: dS goes to __local, each work-item adds its rows ty + 16i x
 *            dims tx + 16k of dS K, K streaming ROW_SLICE keys at a time.
 * Phase A's ownership (rows by ty, keys by tx) is free to choose because S
 * goes through __local anyway; it makes the P/dS stores contiguous across tx.
 *
 * __local floats (LDM = BLOCK_M + 2, LDN = BLOCK_N + 2, LDP below):
 *   stage   max(16 * (2 LDM + 2 LDN), ROW_SLICE * max(HEAD_DIM, HEAD_DIM_V)): phase A's four
 *           slices and phase B's row slice share it (never live together)
 *   Pb/Sb   BLOCK_M * LDP: P then dS (dK/dV), dS (dQ). P and dS share one
 *           buffer so 64x64 tiles fit 48 KiB at d = 256
 *   Ls, Ds  2 * BLOCK_M (dK/dV only: its rows change with every block)
 * 64x64, ROW_SLICE 16, d <= 264: 4224 + 5120 + 128 floats = 37,888 bytes.
 * The host mirrors this count (src/plan_backward.c) and shrinks the tiles or
 * ROW_SLICE on devices with less local memory.
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
 * Leading dims chosen for 32 banks of 4 bytes. Phase-A slices are stored
 * transposed ([dim][row]) by work-items that read 16 consecutive dims of 2
 * rows: with a leading dim = 2 (mod 32) those 32 stores hit 32 banks. P/dS
 * rows are written by 2 values of ty x 16 of tx, and the dQ pass reads
 * column entries of 2 rows: a leading dim = 16 (mod 32) keeps both apart.
 */
#define LDM (BLOCK_M + 2)
#define LDN (BLOCK_N + 2)
#define LDP (BLOCK_N / 32 * 32 + 16)
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
 * lid + 256 t of it.
 */

/* A work-item's share of dims [c0, c0 + 16) of rows [first, first + 16 n) of a view, times mul, into
   v[n]; rows at or past `end` and dims past `dim` are zero. Consecutive work-items read consecutive dims. */
inline void bwdt_load_slice(float *v, int n, __global const store_t *base, ulong stride, long first, long end, int c0,
                            int dim, float mul, int lid) {
    const int c = c0 + lid % SLICE;
    for (int t = 0; t < n; ++t) {
        const long row = first + lid / SLICE + (long)t * (WG_ITEMS / SLICE);
        v[t] = (row < end && c < dim) ? FLASHCL_LOAD(base, row * stride + c) * mul : 0.0f;
    }
}

/* ... and into dst[dim * ld + row] (transposed, as the products read it). */
inline void bwdt_store_slice(__local float *dst, int ld, const float *v, int n, int lid) {
    for (int t = 0; t < n; ++t) dst[(lid % SLICE) * ld + lid / SLICE + t * (WG_ITEMS / SLICE)] = v[t];
}

/* A phase-B row slice: ROW_SLICE whole rows of up to DIM_MAX elements. */
#define ROWS_SHARE ((ROW_SLICE * DIM_MAX + WG_ITEMS - 1) / WG_ITEMS)

/* A work-item's share of rows [first, first + ROW_SLICE) of `dim` elements (element e = lid + 256 t at
   row e / dim, column e % dim) into v; zero at or past `end`. */
inline void bwdt_load_rows(float *v, __global const store_t *base, ulong stride, long first, long end, int dim,
                           int lid) {
    FLASHCL_SHARED_FOR(int, e, ROW_SLICE *dim, lid, WG_ITEMS) {
        const int r = e / dim, c = e - r * dim;
        const long row = first + r;
        v[e_base / WG_ITEMS] = row < end ? FLASHCL_LOAD(base, row * stride + c) : 0.0f;
    }
}

/* ... and into dst[row * dim + c]. */
inline void bwdt_store_rows(__local float *dst, const float *v, int dim, int lid) {
    FLASHCL_SHARED_FOR(int, e, ROW_SLICE *dim, lid, WG_ITEMS) { dst[e] = v[e_base / WG_ITEMS]; }
}

/*
 * Phase A of both kernels: s = (scale*log2e*Q) K^T over HEAD_DIM and dp = dO V^T
 * over HEAD_DIM_V for the work-item's TILE_M x TILE_N block, from 16-dim slices
 * staged in `stage` (Q and dO [SLICE][LDM], then K and V [SLICE][LDN]). The
 * views start at the sequence's first row; rows at or past sq (sk) read as zero.
 * Contains barriers: every work-item of the group must call it. It starts by
 * writing the stage (whose readers must be past a barrier) and returns after
 * a barrier (the stage is free again).
 */
inline void bwdt_scores_and_dp(float s[TILE_M][TILE_N], float dp[TILE_M][TILE_N], __local float *stage,
                               __global const store_t *Qb, ulong q_sr, __global const store_t *Gb, ulong dout_sr,
                               __global const store_t *Kb, ulong k_sr, __global const store_t *Vb, ulong v_sr,
                               long row0, long key0, long sq, long sk, float scale_log2, int lid, int tx, int ty) {
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
            bwdt_load_slice(qn, TILE_M, Qb, q_sr, row0, sq, (c0), HEAD_DIM, scale_log2, lid);                          \
            bwdt_load_slice(kn, TILE_N, Kb, k_sr, key0, sk, (c0), HEAD_DIM, 1.0f, lid);                                \
        }                                                                                                              \
        if ((c0) < HEAD_DIM_V) {                                                                                       \
            bwdt_load_slice(gn, TILE_M, Gb, dout_sr, row0, sq, (c0), HEAD_DIM_V, 1.0f, lid);                           \
            bwdt_load_slice(vn, TILE_N, Vb, v_sr, key0, sk, (c0), HEAD_DIM_V, 1.0f, lid);                              \
        }                                                                                                              \
    } while (0)
#define BWDT_STORE_A(c0)                                                                                               \
    do {                                                                                                               \
        if ((c0) < HEAD_DIM) {                                                                                         \
            bwdt_store_slice(Qs, LDM, qn, TILE_M, lid);                                                                \
            bwdt_store_slice(Ks, LDN, kn, TILE_N, lid);                                                                \
        }                                                                                                              \
        if ((c0) < HEAD_DIM_V) {                                                                                       \
            bwdt_store_slice(Gs, LDM, gn, TILE_M, lid);                                                                \
            bwdt_store_slice(Vs, LDN, vn, TILE_N, lid);                                                                \
        }                                                                                                              \
    } while (0)
/* acc[i][j] += sum over the slice's dims of A[row i] B[key j], A [SLICE][LDM] and B [SLICE][LDN] staged. */
#define BWDT_SLICE_PRODUCT(acc, As, Bs)                                                                                \
    do {                                                                                                               \
        for (int c = 0; c < SLICE; ++c) {                                                                              \
            float a_[TILE_M], b_[TILE_N];                                                                              \
            for (int i = 0; i < TILE_M; ++i) a_[i] = (As)[c * LDM + ty + GRID * i];                                    \
            for (int j = 0; j < TILE_N; ++j) b_[j] = (Bs)[c * LDN + tx + GRID * j];                                    \
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

/* Dim k of a work-item in a row of `dim`, clamped so pad dims read a real, staged value that is never stored. */
inline int bwdt_dim(int tx, int k, int dim) {
    int c = tx + GRID * k;
    return c < dim ? c : 0;
}

/* Grid: (ceil(max_seqlen_k / BLOCK_N) * 256, heads_kv, batch). */
__kernel __attribute__((reqd_work_group_size(WG_ITEMS, 1, 1))) void
flash_bwd_dkdv_tiles(__global const store_t *Q, VIEW_ARGS(q), __global const store_t *K, VIEW_ARGS(k),
                     __global const store_t *V, VIEW_ARGS(v), __global const store_t *dO, VIEW_ARGS(dout),
                     __global const float *LSE, ulong lse_off, __global const float *Dsum, __global store_t *dK,
                     VIEW_ARGS(dk), __global store_t *dV, VIEW_ARGS(dv), int seqlen_q, int seqlen_k, int heads_q,
                     int group, float scale_log2, float scale, VARIANT_ARGS) {
    const int lid = (int)get_local_id(0);
    const int tx = lid % GRID, ty = lid / GRID;
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

    __local float stage[STAGE_FLOATS];
    __local float Pb[BLOCK_M * LDP]; /* [row][key]: P Z for the dV pass, then dS for the dK pass */
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
                               scale_log2, lid, tx, ty);

            /* dS overwrites dP; P Z goes to Pb for the dV pass. */
            const int plain =
                !HAS_SCORE_TERMS && flashcl_tile_plain(hd, row0, row_end, key0, key_end, win_left, win_right);
            for (int i = 0; i < TILE_M; ++i) {
                const int r = ty + GRID * i;
                const float lse2 = Ls[r], drow = Ds[r];
                for (int j = 0; j < TILE_N; ++j) {
                    float pz;
                    dp[i][j] = bwdt_grad(s[i][j], dp[i][j], lse2, drow, plain, hd, row0 + r, key0 + tx + GRID * j, &pz,
                                         VARIANT_PASS);
                    Pb[r * LDP + tx + GRID * j] = pz;
                }
            }

            /* dV += (P Z)^T dO, then dK += dS^T Q (scale applied once, at the store; Q staged unscaled),
               ROW_SLICE rows at a time, pipelined; the last slice of each pass is peeled, and Q's first
               slice loads during dV's last. (Phase A's last barrier freed the stage.) */
            float rn[ROWS_SHARE];
            bwdt_load_rows(rn, Gb, dout_sr, row0, hd.sq, HEAD_DIM_V, lid);
            bwdt_store_rows(Rs, rn, HEAD_DIM_V, lid);
            barrier(CLK_LOCAL_MEM_FENCE); /* publishes Pb and the first dO rows */
/* acc[j][k] += Pb[r0 + r][key j] x Rs[r][dim k] over the slice's rows: dV (P Z, dO) or dK (dS, Q). */
#define BWDT_KEY_ROWS(acc, per_item, dim, r0)                                                                          \
    do {                                                                                                               \
        for (int r = 0; r < ROW_SLICE; ++r) {                                                                          \
            float pa[TILE_N], rb[per_item];                                                                            \
            for (int j = 0; j < TILE_N; ++j) pa[j] = Pb[((r0) + r) * LDP + ty + GRID * j];                             \
            for (int k = 0; k < (per_item); ++k) rb[k] = Rs[r * (dim) + bwdt_dim(tx, k, (dim))];                       \
            for (int j = 0; j < TILE_N; ++j)                                                                           \
                for (int k = 0; k < (per_item); ++k) acc[j][k] = fma(pa[j], rb[k], acc[j][k]);                         \
        }                                                                                                              \
    } while (0)
#define BWDT_DV_ROWS(r0) BWDT_KEY_ROWS(dv, DIMS_V_PER_ITEM, HEAD_DIM_V, r0)
#define BWDT_DK_ROWS(r0) BWDT_KEY_ROWS(dk, DIMS_PER_ITEM, HEAD_DIM, r0)
            int r0 = 0;
            for (; r0 + ROW_SLICE < BLOCK_M; r0 += ROW_SLICE) {
                bwdt_load_rows(rn, Gb, dout_sr, row0 + r0 + ROW_SLICE, hd.sq, HEAD_DIM_V, lid);
                BWDT_DV_ROWS(r0);
                barrier(CLK_LOCAL_MEM_FENCE);
                bwdt_store_rows(Rs, rn, HEAD_DIM_V, lid);
                barrier(CLK_LOCAL_MEM_FENCE);
            }
            bwdt_load_rows(rn, Qb, q_sr, row0, hd.sq, HEAD_DIM, lid);
            BWDT_DV_ROWS(r0);

            /* Every work-item is done reading P and the last dO rows: dS and Q's first rows take their place. */
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int i = 0; i < TILE_M; ++i)
                for (int j = 0; j < TILE_N; ++j) Pb[(ty + GRID * i) * LDP + tx + GRID * j] = dp[i][j];
            bwdt_store_rows(Rs, rn, HEAD_DIM, lid);
            barrier(CLK_LOCAL_MEM_FENCE);
            for (r0 = 0; r0 + ROW_SLICE < BLOCK_M; r0 += ROW_SLICE) {
                bwdt_load_rows(rn, Qb, q_sr, row0 + r0 + ROW_SLICE, hd.sq, HEAD_DIM, lid);
                BWDT_DK_ROWS(r0);
                barrier(CLK_LOCAL_MEM_FENCE);
                bwdt_store_rows(Rs, rn, HEAD_DIM, lid);
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
        const long key = key0 + ty + GRID * j;
        if (key >= hd0.sk) continue;
        for (int k = 0; k < DIMS_PER_ITEM; ++k) {
            const int c = tx + GRID * k;
            if (c < HEAD_DIM) FLASHCL_STORE(dKb, key * dk_sr + c, dk[j][k] * scale);
        }
        for (int k = 0; k < DIMS_V_PER_ITEM; ++k) {
            const int c = tx + GRID * k;
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
    const int tx = lid % GRID, ty = lid / GRID;
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

    __local float stage[STAGE_FLOATS];
    __local float Sb[BLOCK_M * LDP]; /* dS, [row][key] */
    /* stage: phase A's Q, dO, K, V slices (bwdt_scores_and_dp), then phase B's rows. */
    __local float *Rs = stage; /* phase B: [ROW_SLICE keys][HEAD_DIM] of K */

    /* This kernel's rows never change: their lse2 and D live in registers. */
    float lse2[TILE_M], drow[TILE_M];
    for (int i = 0; i < TILE_M; ++i) {
        const long row = row0 + ty + GRID * i;
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
                           scale_log2, lid, tx, ty);

        const int plain = !HAS_SCORE_TERMS && flashcl_tile_plain(hd, row0, row_end, key0, key_end, win_left, win_right);
        for (int i = 0; i < TILE_M; ++i)
            for (int j = 0; j < TILE_N; ++j) {
                float pz;
                Sb[(ty + GRID * i) * LDP + tx + GRID * j] =
                    bwdt_grad(s[i][j], dp[i][j], lse2[i], drow[i], plain, hd, row0 + ty + GRID * i,
                              key0 + tx + GRID * j, &pz, VARIANT_PASS);
            }

        /* dQ += dS K, ROW_SLICE keys at a time, pipelined as in dK/dV (the last slice peeled). */
        float rn[ROWS_SHARE];
        bwdt_load_rows(rn, Kb, k_sr, key0, hd.sk, HEAD_DIM, lid);
        bwdt_store_rows(Rs, rn, HEAD_DIM, lid);
        barrier(CLK_LOCAL_MEM_FENCE); /* publishes Sb and the first K rows */
#define BWDT_DQ_ROWS(k0)                                                                                               \
    do {                                                                                                               \
        for (int r = 0; r < ROW_SLICE; ++r) {                                                                          \
            float da[TILE_M], kv[DIMS_PER_ITEM];                                                                       \
            for (int i = 0; i < TILE_M; ++i) da[i] = Sb[(ty + GRID * i) * LDP + (k0) + r];                             \
            for (int k = 0; k < DIMS_PER_ITEM; ++k) kv[k] = Rs[r * HEAD_DIM + bwdt_dim(tx, k, HEAD_DIM)];              \
            for (int i = 0; i < TILE_M; ++i)                                                                           \
                for (int k = 0; k < DIMS_PER_ITEM; ++k) dq[i][k] = fma(da[i], kv[k], dq[i][k]);                        \
        }                                                                                                              \
    } while (0)
        int k0 = 0;
        for (; k0 + ROW_SLICE < BLOCK_N; k0 += ROW_SLICE) {
            bwdt_load_rows(rn, Kb, k_sr, key0 + k0 + ROW_SLICE, hd.sk, HEAD_DIM, lid);
            BWDT_DQ_ROWS(k0);
            barrier(CLK_LOCAL_MEM_FENCE);
            bwdt_store_rows(Rs, rn, HEAD_DIM, lid);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        BWDT_DQ_ROWS(k0);
#undef BWDT_DQ_ROWS
        /* The next key block rewrites the stage and Sb. */
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    __global store_t *dQb = dQ + VIEW_BASE(dq, b, h) + hd.q0 * dq_sr;
    for (int i = 0; i < TILE_M; ++i) {
        const long row = row0 + ty + GRID * i;
        if (row >= hd.sq) continue;
        for (int k = 0; k < DIMS_PER_ITEM; ++k) {
            const int c = tx + GRID * k;
            if (c < HEAD_DIM) FLASHCL_STORE(dQb, row * dq_sr + c, dq[i][k] * scale);
        }
    }
}
