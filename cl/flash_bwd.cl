/*
 * FlashAttention backward by recomputation (FlashAttention-2's loop order,
 * no atomics, so results are bitwise reproducible):
 *   flash_bwd_dot   D = rowsum(dO * O), one work-item per query row.
 *   flash_bwd_dkdv  one work-item per key row; the work-group owns BLOCK_N
 *                   keys of one (batch, kv head) and loops over every query
 *                   head of its GQA group and every query block, recomputing
 *                   P = exp2(s - lse) from Q, K and the forward's LSE. dK and
 *                   dV accumulate in private memory, already summed over the group.
 *   flash_bwd_dq    one work-item per query row; loops over key tiles and
 *                   accumulates dQ in private memory.
 * Query (or key) tiles of BLOCK_M (BLOCK_N) rows go through __local; P, dP
 * and dS only ever exist one element at a time in registers.
 *
 * With s2 = (scale*log2 e) q.k and lse2 = lse*log2 e: P = exp2(s2 - lse2),
 * dV += P dO, dP = dO.v, dS = P (dP - D), dK += scale dS q, dQ += scale dS k.
 */

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef BLOCK_M
#define BLOCK_M 32
#endif
#ifndef BLOCK_N
#define BLOCK_N 32
#endif

#define D4 ((HEAD_DIM + 3) / 4)
#define LOG2E_F 1.4426950408889634f

/* P for one (query, key) pair; 0 where masked or where the row saw no key (lse = -inf). */
inline float bwd_prob(float s2, float lse2, int visible) {
    return (visible && lse2 != FLASHCL_NEG_INF) ? exp2(s2 - lse2) : 0.0f;
}

/* Grid: (ceil(seqlen_q / BLOCK_M) * BLOCK_M, heads_q, batch). */
__kernel __attribute__((reqd_work_group_size(BLOCK_M, 1, 1)))
void flash_bwd_dot(__global const float *dO, VIEW_ARGS(dout),
                   __global const float *O, VIEW_ARGS(o),
                   __global float *Dsum, int seqlen_q, int heads_q)
{
    const long i = get_global_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    if (i >= seqlen_q) return;
    __global const float *g = dO + VIEW_BASE(dout, b, h) + i * dout_sr;
    __global const float *y = O + VIEW_BASE(o, b, h) + i * o_sr;
    float4 acc = (float4)(0.0f);
    for (int c4 = 0; c4 < D4; ++c4) acc = fma(flashcl_load_row4(g, c4), flashcl_load_row4(y, c4), acc);
    Dsum[((ulong)b * heads_q + h) * seqlen_q + i] = flashcl_sum4(acc);
}

/* Grid: (ceil(seqlen_k / BLOCK_N) * BLOCK_N, heads_kv, batch). */
__kernel __attribute__((reqd_work_group_size(BLOCK_N, 1, 1)))
void flash_bwd_dkdv(__global const float *Q, VIEW_ARGS(q),
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
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
    const long key0 = (long)get_group_id(0) * BLOCK_N;
    const long j = key0 + lid;
    const int key_valid = j < seqlen_k;
    const long offset = (long)seqlen_k - seqlen_q; /* key j visible to row i iff j <= i + offset */

    float4 kr[D4], vr[D4], dk[D4], dv[D4];
    {
        long jj = key_valid ? j : 0;
        __global const float *Kr = K + VIEW_BASE(k, b, hk) + jj * k_sr;
        __global const float *Vr = V + VIEW_BASE(v, b, hk) + jj * v_sr;
        for (int c4 = 0; c4 < D4; ++c4) {
            kr[c4] = key_valid ? flashcl_load_row4(Kr, c4) * scale_log2 : (float4)(0.0f);
            vr[c4] = key_valid ? flashcl_load_row4(Vr, c4) : (float4)(0.0f);
            dk[c4] = (float4)(0.0f);
            dv[c4] = (float4)(0.0f);
        }
    }

    __local float4 Qt[BLOCK_M * D4];
    __local float4 Gt[BLOCK_M * D4]; /* dO tile */
    __local float Lt[BLOCK_M];       /* lse2 of the tile's rows */
    __local float Dt[BLOCK_M];

    /* With a causal mask, rows before key0 - offset see none of this block's keys. */
    long first_row = causal ? max(0L, key0 - offset) : 0;
    first_row = first_row / BLOCK_M * BLOCK_M;

    for (int g = 0; g < group; ++g) {
        const int h = hk * group + g;
        __global const float *Qb = Q + VIEW_BASE(q, b, h);
        __global const float *Gb = dO + VIEW_BASE(dout, b, h);
        __global const float *Lb = LSE + lse_off + ((ulong)b * heads_q + h) * seqlen_q;
        __global const float *Db = Dsum + ((ulong)b * heads_q + h) * seqlen_q;
        for (long row0 = first_row; row0 < seqlen_q; row0 += BLOCK_M) {
            for (int e = lid; e < BLOCK_M * D4; e += BLOCK_N) {
                int r = e / D4, c4 = e - r * D4;
                long i = row0 + r;
                int ok = i < seqlen_q;
                Qt[e] = ok ? flashcl_load_row4(Qb + i * q_sr, c4) : (float4)(0.0f);
                Gt[e] = ok ? flashcl_load_row4(Gb + i * dout_sr, c4) : (float4)(0.0f);
            }
            for (int r = lid; r < BLOCK_M; r += BLOCK_N) {
                long i = row0 + r;
                Lt[r] = i < seqlen_q ? Lb[i] * LOG2E_F : FLASHCL_NEG_INF;
                Dt[r] = i < seqlen_q ? Db[i] : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int r = 0; r < BLOCK_M; ++r) {
                const long i = row0 + r;
                float4 s4 = (float4)(0.0f), dp4 = (float4)(0.0f);
                for (int c4 = 0; c4 < D4; ++c4) {
                    s4 = fma(Qt[r * D4 + c4], kr[c4], s4);
                    dp4 = fma(Gt[r * D4 + c4], vr[c4], dp4);
                }
                const int visible = key_valid && i < seqlen_q && (!causal || j <= i + offset);
                const float p = bwd_prob(flashcl_sum4(s4), Lt[r], visible);
                const float ds = p * (flashcl_sum4(dp4) - Dt[r]);
                for (int c4 = 0; c4 < D4; ++c4) {
                    dv[c4] = fma((float4)(p), Gt[r * D4 + c4], dv[c4]);
                    dk[c4] = fma((float4)(ds), Qt[r * D4 + c4], dk[c4]);
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }

    if (!key_valid) return;
    __global float *dKr = dK + VIEW_BASE(dk, b, hk) + j * dk_sr;
    __global float *dVr = dV + VIEW_BASE(dv, b, hk) + j * dv_sr;
    for (int c4 = 0; c4 < D4; ++c4) {
        flashcl_store_row4(dKr, c4, dk[c4] * scale);
        flashcl_store_row4(dVr, c4, dv[c4]);
    }
}

/* Grid: (ceil(seqlen_q / BLOCK_M) * BLOCK_M, heads_q, batch). */
__kernel __attribute__((reqd_work_group_size(BLOCK_M, 1, 1)))
void flash_bwd_dq(__global const float *Q, VIEW_ARGS(q),
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
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const int hk = h / group;
    const long row0 = (long)get_group_id(0) * BLOCK_M;
    const long i = row0 + lid;
    const int row_valid = i < seqlen_q;
    const long offset = (long)seqlen_k - seqlen_q;

    float4 qr[D4], gr[D4], dq[D4];
    {
        long ii = row_valid ? i : 0;
        __global const float *Qr = Q + VIEW_BASE(q, b, h) + ii * q_sr;
        __global const float *Gr = dO + VIEW_BASE(dout, b, h) + ii * dout_sr;
        for (int c4 = 0; c4 < D4; ++c4) {
            qr[c4] = row_valid ? flashcl_load_row4(Qr, c4) * scale_log2 : (float4)(0.0f);
            gr[c4] = row_valid ? flashcl_load_row4(Gr, c4) : (float4)(0.0f);
            dq[c4] = (float4)(0.0f);
        }
    }
    const ulong stat = ((ulong)b * heads_q + h) * seqlen_q + (row_valid ? i : 0);
    const float lse2 = row_valid ? LSE[lse_off + stat] * LOG2E_F : FLASHCL_NEG_INF;
    const float drow = row_valid ? Dsum[stat] : 0.0f;

    __local float4 Kt[BLOCK_N * D4];
    __local float4 Vt[BLOCK_N * D4];
    __global const float *Kb = K + VIEW_BASE(k, b, hk);
    __global const float *Vb = V + VIEW_BASE(v, b, hk);

    /* Keys past the block's last visible one (causal) are never loaded. */
    long kv_end = seqlen_k;
    if (causal) kv_end = clamp(min(row0 + BLOCK_M, (long)seqlen_q) - 1 + offset + 1, 0L, (long)seqlen_k);

    for (long key0 = 0; key0 < kv_end; key0 += BLOCK_N) {
        for (int e = lid; e < BLOCK_N * D4; e += BLOCK_M) {
            int r = e / D4, c4 = e - r * D4;
            long jj = key0 + r;
            int ok = jj < seqlen_k;
            Kt[e] = ok ? flashcl_load_row4(Kb + jj * k_sr, c4) : (float4)(0.0f);
            Vt[e] = ok ? flashcl_load_row4(Vb + jj * v_sr, c4) : (float4)(0.0f);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int r = 0; r < BLOCK_N; ++r) {
            const long jj = key0 + r;
            float4 s4 = (float4)(0.0f), dp4 = (float4)(0.0f);
            for (int c4 = 0; c4 < D4; ++c4) {
                s4 = fma(qr[c4], Kt[r * D4 + c4], s4);
                dp4 = fma(gr[c4], Vt[r * D4 + c4], dp4);
            }
            const int visible = jj < seqlen_k && (!causal || jj <= i + offset);
            const float p = bwd_prob(flashcl_sum4(s4), lse2, visible);
            const float ds = p * (flashcl_sum4(dp4) - drow);
            for (int c4 = 0; c4 < D4; ++c4) dq[c4] = fma((float4)(ds), Kt[r * D4 + c4], dq[c4]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    if (!row_valid) return;
    __global float *dQr = dQ + VIEW_BASE(dq, b, h) + i * dq_sr;
    for (int c4 = 0; c4 < D4; ++c4) flashcl_store_row4(dQr, c4, dq[c4] * scale);
}
