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
 *   stage   max(16 * (2 LDM + 2 LDN), ROW_SLICE * HEAD_DIM): phase A's four
 *           slices and phase B's row slice share it (never live together)
 *   Pb/Sb   BLOCK_M * LDP: P then dS (dK/dV), dS (dQ). P and dS share one
 *           buffer so 64x64 tiles fit 48 KiB at d = 256
 *   Ls, Ds  2 * BLOCK_M (dK/dV only: its rows change with every block)
 * 64x64, ROW_SLICE 16, d <= 264: 4224 + 5120 + 128 floats = 37,888 bytes.
 * The host mirrors this count (src/plan_backward.c) and shrinks the tiles or
 * ROW_SLICE on devices with less local memory.
 *
 * Registers per work-item: dK/dV 2 * TILE_N * ceil(d/16) accumulators, S and
 * dP 2 * TILE_M * TILE_N, operands TILE_M + TILE_N (phase A) or TILE_N +
 * ceil(d/16) (phase B). 64x64 at d = 128: 64 + 32 + 16 floats; the host uses
 * BLOCK_N = 32 for d > 128 so that dK/dV stay at 64 accumulators.
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
#define DIMS_PER_ITEM ((HEAD_DIM + GRID - 1) / GRID)
#define LOG2E_F 1.4426950408889634f

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
#define STAGE_B (ROW_SLICE * HEAD_DIM)
#define STAGE_FLOATS (STAGE_A > STAGE_B ? STAGE_A : STAGE_B)

#if BLOCK_M % GRID != 0 || BLOCK_N % GRID != 0
#error "BLOCK_M and BLOCK_N must be multiples of 16"
#endif
#if GRID % ROW_SLICE != 0
#error "ROW_SLICE must divide 16"
#endif

/*
 * Stages dims [c0, c0 + 16) of rows [first, first + nrows) of a view into
 * dst[dim * ld + row], times mul; rows at or past `end` and dims past
 * HEAD_DIM are zero. Consecutive work-items read consecutive dims of a row.
 */
inline void bwdt_stage_slice(__local float *dst, int ld, __global const float *base, ulong stride, long first,
                             long end, int nrows, int c0, float mul, int lid) {
    for (int e = lid; e < SLICE * nrows; e += WG_ITEMS) {
        int r = e / SLICE, c = e - r * SLICE;
        long row = first + r;
        dst[c * ld + r] = (row < end && c0 + c < HEAD_DIM) ? base[row * stride + c0 + c] * mul : 0.0f;
    }
}

/* Stages ROW_SLICE whole rows [first, first + ROW_SLICE) into dst[row * HEAD_DIM + dim]; zero at or past `end`. */
inline void bwdt_stage_rows(__local float *dst, __global const float *base, ulong stride, long first, long end,
                            int lid) {
    for (int e = lid; e < ROW_SLICE * HEAD_DIM; e += WG_ITEMS) {
        int r = e / HEAD_DIM, c = e - r * HEAD_DIM;
        long row = first + r;
        dst[e] = row < end ? base[row * stride + c] : 0.0f;
    }
}

/*
 * Phase A of both kernels: s = (scale*log2e*Q) K^T and dp = dO V^T for the
 * work-item's TILE_M x TILE_N block, from 16-dim slices of Q, dO, K and V
 * staged in `stage` (Q and dO [SLICE][LDM], then K and V [SLICE][LDN]).
 * Contains barriers: every work-item of the group must call it.
 */
inline void bwdt_scores_and_dp(float s[TILE_M][TILE_N], float dp[TILE_M][TILE_N], __local float *stage,
                               __global const float *Qb, ulong q_sr, __global const float *Gb, ulong dout_sr,
                               __global const float *Kb, ulong k_sr, __global const float *Vb, ulong v_sr,
                               long row0, long key0, int seqlen_q, int seqlen_k, float scale_log2, int lid, int tx,
                               int ty) {
    __local float *Qs = stage;
    __local float *Gs = stage + SLICE * LDM;
    __local float *Ks = Gs + SLICE * LDM;
    __local float *Vs = Ks + SLICE * LDN;
    for (int i = 0; i < TILE_M; ++i)
        for (int j = 0; j < TILE_N; ++j) s[i][j] = dp[i][j] = 0.0f;
    for (int c0 = 0; c0 < HEAD_DIM; c0 += SLICE) {
        bwdt_stage_slice(Qs, LDM, Qb, q_sr, row0, seqlen_q, BLOCK_M, c0, scale_log2, lid);
        bwdt_stage_slice(Gs, LDM, Gb, dout_sr, row0, seqlen_q, BLOCK_M, c0, 1.0f, lid);
        bwdt_stage_slice(Ks, LDN, Kb, k_sr, key0, seqlen_k, BLOCK_N, c0, 1.0f, lid);
        bwdt_stage_slice(Vs, LDN, Vb, v_sr, key0, seqlen_k, BLOCK_N, c0, 1.0f, lid);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int c = 0; c < SLICE; ++c) {
            float qa[TILE_M], ga[TILE_M], kb[TILE_N], vb[TILE_N];
            for (int i = 0; i < TILE_M; ++i) {
                qa[i] = Qs[c * LDM + ty + GRID * i];
                ga[i] = Gs[c * LDM + ty + GRID * i];
            }
            for (int j = 0; j < TILE_N; ++j) {
                kb[j] = Ks[c * LDN + tx + GRID * j];
                vb[j] = Vs[c * LDN + tx + GRID * j];
            }
            for (int i = 0; i < TILE_M; ++i)
                for (int j = 0; j < TILE_N; ++j) {
                    s[i][j] = fma(qa[i], kb[j], s[i][j]);
                    dp[i][j] = fma(ga[i], vb[j], dp[i][j]);
                }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* Dim k of a work-item, clamped so pad dims (past HEAD_DIM) read a real, staged value that is never stored. */
inline int bwdt_dim(int tx, int k) {
    int c = tx + GRID * k;
    return c < HEAD_DIM ? c : 0;
}

/* Grid: (ceil(seqlen_k / BLOCK_N) * 256, heads_kv, batch). */
__kernel __attribute__((reqd_work_group_size(WG_ITEMS, 1, 1)))
void flash_bwd_dkdv_tiles(__global const float *Q, VIEW_ARGS(q),
                          __global const float *K, VIEW_ARGS(k),
                          __global const float *V, VIEW_ARGS(v),
                          __global const float *dO, VIEW_ARGS(dout),
                          __global const float *LSE, ulong lse_off,
                          __global const float *Dsum,
                          __global float *dK, VIEW_ARGS(dk),
                          __global float *dV, VIEW_ARGS(dv),
                          int seqlen_q, int seqlen_k, int heads_q, int group,
                          float scale_log2, float scale, int causal)
{
    const int lid = (int)get_local_id(0);
    const int tx = lid % GRID, ty = lid / GRID;
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
    /* Natural order: under a causal mask the first key blocks see the most rows, so they start first. */
    const long key0 = (long)get_group_id(0) * BLOCK_N;
    const long offset = (long)seqlen_k - seqlen_q; /* key j visible to row i iff j <= i + offset */

    __global const float *Kb = K + VIEW_BASE(k, b, hk);
    __global const float *Vb = V + VIEW_BASE(v, b, hk);

    __local float stage[STAGE_FLOATS];
    __local float Pb[BLOCK_M * LDP]; /* [row][key]: P for the dV pass, then dS for the dK pass */
    __local float Ls[BLOCK_M];       /* lse2 of the block's rows (-inf past seqlen_q) */
    __local float Ds[BLOCK_M];
    /* stage: phase A's Q, dO, K, V slices (bwdt_scores_and_dp), then phase B's rows. */
    __local float *Rs = stage; /* phase B: [ROW_SLICE][HEAD_DIM], dO then Q */

    float dk[TILE_N][DIMS_PER_ITEM], dv[TILE_N][DIMS_PER_ITEM];
    for (int j = 0; j < TILE_N; ++j)
        for (int k = 0; k < DIMS_PER_ITEM; ++k) dk[j][k] = dv[j][k] = 0.0f;

    /* With a causal mask, rows before key0 - offset see none of this block's keys: skip their blocks. */
    long first_row = causal ? max(0L, key0 - offset) : 0;
    first_row = first_row / BLOCK_M * BLOCK_M;

    for (int g = 0; g < group; ++g) {
        const int h = hk * group + g;
        __global const float *Qb = Q + VIEW_BASE(q, b, h);
        __global const float *Gb = dO + VIEW_BASE(dout, b, h);
        __global const float *Lb = LSE + lse_off + ((ulong)b * heads_q + h) * seqlen_q;
        __global const float *Db = Dsum + ((ulong)b * heads_q + h) * seqlen_q;
        for (long row0 = first_row; row0 < seqlen_q; row0 += BLOCK_M) {
            /* Published by the first slice's barrier below; the previous block's readers are past its last barrier. */
            for (int r = lid; r < BLOCK_M; r += WG_ITEMS) {
                long i = row0 + r;
                Ls[r] = i < seqlen_q ? Lb[i] * LOG2E_F : FLASHCL_NEG_INF;
                Ds[r] = i < seqlen_q ? Db[i] : 0.0f;
            }

            /* Phase A: S (log2 domain) and dP, 16 dims at a time. */
            float s[TILE_M][TILE_N], dp[TILE_M][TILE_N];
            bwdt_scores_and_dp(s, dp, stage, Qb, q_sr, Gb, dout_sr, Kb, k_sr, Vb, v_sr, row0, key0, seqlen_q,
                               seqlen_k, scale_log2, lid, tx, ty);

            /* P = exp2(s2 - lse2), 0 where masked, past either length, or where the row saw no key
               (lse = -inf); dS = P (dP - D) overwrites dP. P goes to Pb for the dV pass. */
            for (int i = 0; i < TILE_M; ++i) {
                const int r = ty + GRID * i;
                const long row = row0 + r;
                const float lse2 = Ls[r], drow = Ds[r];
                for (int j = 0; j < TILE_N; ++j) {
                    const long key = key0 + tx + GRID * j;
                    const int visible = key < seqlen_k && lse2 != FLASHCL_NEG_INF && (!causal || key <= row + offset);
                    const float p = visible ? exp2(s[i][j] - lse2) : 0.0f;
                    dp[i][j] = p * (dp[i][j] - drow);
                    Pb[r * LDP + tx + GRID * j] = p;
                }
            }

            /* dV += P^T dO. The first barrier publishes Pb (phase A's last barrier freed the stage). */
            for (int r0 = 0; r0 < BLOCK_M; r0 += ROW_SLICE) {
                barrier(CLK_LOCAL_MEM_FENCE);
                bwdt_stage_rows(Rs, Gb, dout_sr, row0 + r0, seqlen_q, lid);
                barrier(CLK_LOCAL_MEM_FENCE);
                for (int r = 0; r < ROW_SLICE; ++r) {
                    float pa[TILE_N], gb[DIMS_PER_ITEM];
                    for (int j = 0; j < TILE_N; ++j) pa[j] = Pb[(r0 + r) * LDP + ty + GRID * j];
                    for (int k = 0; k < DIMS_PER_ITEM; ++k) gb[k] = Rs[r * HEAD_DIM + bwdt_dim(tx, k)];
                    for (int j = 0; j < TILE_N; ++j)
                        for (int k = 0; k < DIMS_PER_ITEM; ++k) dv[j][k] = fma(pa[j], gb[k], dv[j][k]);
                }
            }

            /* Every work-item is done reading P: dS takes its place. */
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int i = 0; i < TILE_M; ++i)
                for (int j = 0; j < TILE_N; ++j) Pb[(ty + GRID * i) * LDP + tx + GRID * j] = dp[i][j];

            /* dK += dS^T Q (scale applied once, at the store). Q is staged unscaled here. */
            for (int r0 = 0; r0 < BLOCK_M; r0 += ROW_SLICE) {
                barrier(CLK_LOCAL_MEM_FENCE);
                bwdt_stage_rows(Rs, Qb, q_sr, row0 + r0, seqlen_q, lid);
                barrier(CLK_LOCAL_MEM_FENCE);
                for (int r = 0; r < ROW_SLICE; ++r) {
                    float da[TILE_N], qb[DIMS_PER_ITEM];
                    for (int j = 0; j < TILE_N; ++j) da[j] = Pb[(r0 + r) * LDP + ty + GRID * j];
                    for (int k = 0; k < DIMS_PER_ITEM; ++k) qb[k] = Rs[r * HEAD_DIM + bwdt_dim(tx, k)];
                    for (int j = 0; j < TILE_N; ++j)
                        for (int k = 0; k < DIMS_PER_ITEM; ++k) dk[j][k] = fma(da[j], qb[k], dk[j][k]);
                }
            }
            /* The next block rewrites Ls, Ds, the stage and Pb. */
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }

    __global float *dKb = dK + VIEW_BASE(dk, b, hk);
    __global float *dVb = dV + VIEW_BASE(dv, b, hk);
    for (int j = 0; j < TILE_N; ++j) {
        const long key = key0 + ty + GRID * j;
        if (key >= seqlen_k) continue;
        for (int k = 0; k < DIMS_PER_ITEM; ++k) {
            const int c = tx + GRID * k;
            if (c >= HEAD_DIM) continue;
            dKb[key * dk_sr + c] = dk[j][k] * scale;
            dVb[key * dv_sr + c] = dv[j][k];
        }
    }
}

/* Grid: (ceil(seqlen_q / BLOCK_M) * 256, heads_q, batch). */
__kernel __attribute__((reqd_work_group_size(WG_ITEMS, 1, 1)))
void flash_bwd_dq_tiles(__global const float *Q, VIEW_ARGS(q),
                        __global const float *K, VIEW_ARGS(k),
                        __global const float *V, VIEW_ARGS(v),
                        __global const float *dO, VIEW_ARGS(dout),
                        __global const float *LSE, ulong lse_off,
                        __global const float *Dsum,
                        __global float *dQ, VIEW_ARGS(dq),
                        int seqlen_q, int seqlen_k, int heads_q, int group,
                        float scale_log2, float scale, int causal)
{
    const int lid = (int)get_local_id(0);
    const int tx = lid % GRID, ty = lid / GRID;
    /* Reverse order: under a causal mask the last query blocks see the most keys, so they start first. */
    const int block = (int)get_num_groups(0) - 1 - (int)get_group_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const int hk = h / group;
    const long row0 = (long)block * BLOCK_M;
    const long offset = (long)seqlen_k - seqlen_q;

    __global const float *Qb = Q + VIEW_BASE(q, b, h);
    __global const float *Gb = dO + VIEW_BASE(dout, b, h);
    __global const float *Kb = K + VIEW_BASE(k, b, hk);
    __global const float *Vb = V + VIEW_BASE(v, b, hk);

    __local float stage[STAGE_FLOATS];
    __local float Sb[BLOCK_M * LDP]; /* dS, [row][key] */
    /* stage: phase A's Q, dO, K, V slices (bwdt_scores_and_dp), then phase B's rows. */
    __local float *Rs = stage; /* phase B: [ROW_SLICE keys][HEAD_DIM] of K */

    /* This kernel's rows never change: their lse2 and D live in registers. */
    float lse2[TILE_M], drow[TILE_M];
    long limit[TILE_M];
    for (int i = 0; i < TILE_M; ++i) {
        const long row = row0 + ty + GRID * i;
        const ulong stat = ((ulong)b * heads_q + h) * seqlen_q + row;
        lse2[i] = row < seqlen_q ? LSE[lse_off + stat] * LOG2E_F : FLASHCL_NEG_INF;
        drow[i] = row < seqlen_q ? Dsum[stat] : 0.0f;
        limit[i] = causal ? row + offset : (long)seqlen_k - 1;
    }
    float dq[TILE_M][DIMS_PER_ITEM];
    for (int i = 0; i < TILE_M; ++i)
        for (int k = 0; k < DIMS_PER_ITEM; ++k) dq[i][k] = 0.0f;

    /* Keys past the block's last visible one (causal) are never loaded; a fully masked block loads none. */
    long kv_end = seqlen_k;
    if (causal) kv_end = clamp(min(row0 + BLOCK_M, (long)seqlen_q) - 1 + offset + 1, 0L, (long)seqlen_k);

    for (long key0 = 0; key0 < kv_end; key0 += BLOCK_N) {
        float s[TILE_M][TILE_N], dp[TILE_M][TILE_N];
        bwdt_scores_and_dp(s, dp, stage, Qb, q_sr, Gb, dout_sr, Kb, k_sr, Vb, v_sr, row0, key0, seqlen_q,
                               seqlen_k, scale_log2, lid, tx, ty);

        for (int i = 0; i < TILE_M; ++i)
            for (int j = 0; j < TILE_N; ++j) {
                const long key = key0 + tx + GRID * j;
                const int visible = key < seqlen_k && key <= limit[i] && lse2[i] != FLASHCL_NEG_INF;
                const float p = visible ? exp2(s[i][j] - lse2[i]) : 0.0f;
                Sb[(ty + GRID * i) * LDP + tx + GRID * j] = p * (dp[i][j] - drow[i]);
            }

        /* dQ += dS K, ROW_SLICE keys at a time. The first barrier publishes Sb. */
        for (int k0 = 0; k0 < BLOCK_N; k0 += ROW_SLICE) {
            barrier(CLK_LOCAL_MEM_FENCE);
            bwdt_stage_rows(Rs, Kb, k_sr, key0 + k0, seqlen_k, lid);
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int r = 0; r < ROW_SLICE; ++r) {
                float da[TILE_M], kv[DIMS_PER_ITEM];
                for (int i = 0; i < TILE_M; ++i) da[i] = Sb[(ty + GRID * i) * LDP + k0 + r];
                for (int k = 0; k < DIMS_PER_ITEM; ++k) kv[k] = Rs[r * HEAD_DIM + bwdt_dim(tx, k)];
                for (int i = 0; i < TILE_M; ++i)
                    for (int k = 0; k < DIMS_PER_ITEM; ++k) dq[i][k] = fma(da[i], kv[k], dq[i][k]);
            }
        }
        /* The next key block rewrites the stage and Sb. */
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    __global float *dQb = dQ + VIEW_BASE(dq, b, h);
    for (int i = 0; i < TILE_M; ++i) {
        const long row = row0 + ty + GRID * i;
        if (row >= seqlen_q) continue;
        for (int k = 0; k < DIMS_PER_ITEM; ++k) {
            const int c = tx + GRID * k;
            if (c < HEAD_DIM) dQb[row * dq_sr + c] = dq[i][k] * scale;
        }
    }
}
