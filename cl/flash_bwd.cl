/*
 * FlashAttention backward by recomputation (FlashAttention-2's loop order,
 * no atomics, so results are bitwise reproducible):
 *   flash_bwd_dot    D = rowsum(dO * O), one work-item per query row.
 *   flash_bwd_dsinks d(loss)/d(sinks), one work-group per query head (HAS_SINKS builds).
 *   flash_bwd_dkdv   one work-item per key row; the work-group owns BLOCK_N
 *                    keys of one (batch, kv head) and loops over every query
 *                    head of its GQA group and every query block that can see
 *                    its keys, recomputing P = exp2(s - lse) from Q, K and the
 *                    forward's LSE. dK and dV accumulate in private memory,
 *                    already summed over the group.
 *   flash_bwd_dq     one work-item per query row; loops over the key tiles its
 *                    block can see and accumulates dQ in private memory.
 * Query (or key) tiles of BLOCK_M (BLOCK_N) rows go through __local; P, dP
 * and dS only ever exist one element at a time in registers.
 *
 * With s2 = (scale*log2 e) q.k (the raw score), f = flashcl_score(s2) (the
 * forward's final logit: softcap, ALiBi, bias, masks) and lse2 = lse*log2 e:
 *   P = exp2(f - lse2), Z = the dropout factor (0 or 1/(1-p), regenerated
 *   from the same counter as the forward), dV += (P Z) dO, dP = (dO.v) Z,
 *   dS = P (dP - D) times the softcap's 1 - tanh^2 (ALiBi and bias add to
 *   the score, so their derivative is 1), dK += scale dS q, dQ += scale dS k.
 * The sinks are in the LSE already, so P and dS need nothing else for them.
 *
 * Variants (cl/variants.cl): q/k/v/o/dO/dQ/dK/dV are store_t, q/k/dq/dk have
 * HEAD_DIM elements per row and v/o/dO/dv HEAD_DIM_V; varlen sequences start
 * at packed rows hd.q0/hd.k0 and blocks past a sequence return at once.
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
#define DV4 ((HEAD_DIM_V + 3) / 4)

/* P for one (query, key) pair from its final logit f; 0 where masked (f = -inf)
   or where the row saw no key (lse = -inf, which would otherwise give NaN). */
inline float bwd_prob(float f, float lse2) { return lse2 != FLASHCL_NEG_INF ? exp2(f - lse2) : 0.0f; }

/* Grid: (ceil(max_seqlen_q / BLOCK_M) * BLOCK_M, heads_q, batch). */
__kernel __attribute__((reqd_work_group_size(BLOCK_M, 1, 1))) void
flash_bwd_dot(__global const store_t *dO, VIEW_ARGS(dout), __global const store_t *O, VIEW_ARGS(o),
              __global float *Dsum, int seqlen_q, int seqlen_k, int heads_q, VARIANT_ARGS) {
    const long i = get_global_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    if (i >= hd.sq) return; /* no barrier in this kernel */
    __global const store_t *g = dO + VIEW_BASE(dout, b, h) + (hd.q0 + i) * dout_sr;
    __global const store_t *y = O + VIEW_BASE(o, b, h) + (hd.q0 + i) * o_sr;
    float4 acc = (float4)(0.0f);
    for (int c4 = 0; c4 < DV4; ++c4) acc = fma(flashcl_ld4(g, c4, HEAD_DIM_V), flashcl_ld4(y, c4, HEAD_DIM_V), acc);
    Dsum[flashcl_row_index(hd, b, h, heads_q, seqlen_q, i)] = flashcl_sum4(acc);
}

#if HAS_SINKS
/*
 * dsinks[h] = -sum over (b, i) of exp(sink_h - lse) * D: the sink is one more
 * logit of every row's softmax with no value row, so its dP is 0 and its dS
 * is -P_sink D. One work-group per query head; each work-item sums a strided
 * subset of the rows in a fixed order, then work-item 0 adds the partial sums
 * in order: deterministic, no atomics.
 * Grid: (BLOCK_M, heads_q, 1).
 */
__kernel __attribute__((reqd_work_group_size(BLOCK_M, 1, 1))) void
flash_bwd_dsinks(__global const float *LSE, ulong lse_off, __global const float *Dsum, __global float *dsinks,
                 ulong dsinks_off, int batch, int seqlen_q, int seqlen_k, int heads_q, VARIANT_ARGS) {
    const int lid = (int)get_local_id(0);
    const int h = (int)get_group_id(1);
    __local float part[BLOCK_M];
    const float sink = sinks[sinks_off + (ulong)h];
    float acc = 0.0f;
    for (int b = 0; b < batch; ++b) {
        const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
        FLASHCL_SHARED_FOR(long, i, hd.sq, lid, BLOCK_M) {
            const ulong at = flashcl_row_index(hd, b, h, heads_q, seqlen_q, i);
            const float lse = LSE[lse_off + at];
            if (lse != FLASHCL_NEG_INF) acc += exp(sink - lse) * Dsum[at];
        }
    }
    part[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        float total = 0.0f;
        for (int u = 0; u < BLOCK_M; ++u) total += part[u];
        dsinks[dsinks_off + (ulong)h] = -total;
    }
}
#endif

/* Grid: (ceil(max_seqlen_k / BLOCK_N) * BLOCK_N, heads_kv, batch). */
__kernel __attribute__((reqd_work_group_size(BLOCK_N, 1, 1))) void
flash_bwd_dkdv(__global const store_t *Q, VIEW_ARGS(q), __global const store_t *K, VIEW_ARGS(k),
               __global const store_t *V, VIEW_ARGS(v), __global const store_t *dO, VIEW_ARGS(dout),
               __global const float *LSE, ulong lse_off, __global const float *Dsum, __global store_t *dK,
               VIEW_ARGS(dk), __global store_t *dV, VIEW_ARGS(dv), int seqlen_q, int seqlen_k, int heads_q, int group,
               float scale_log2, float scale, VARIANT_ARGS) {
    const int lid = (int)get_local_id(0);
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
    /* The sequence geometry (lengths, packed offsets) is the same for every head of the group. */
    const flashcl_head hd0 = flashcl_head_setup(b, hk * group, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    const long key0 = (long)get_group_id(0) * BLOCK_N;
    /* varlen: a block past this sequence visits nothing and stores nothing; no early return
       ahead of the barriers below (POCL 3.1's work-item-0 peeling, cl/common.cl). */
    const int active = key0 < hd0.sk;
    const long j = key0 + lid;
    const int key_valid = j < hd0.sk;
    const long key_last = min(key0 + BLOCK_N, hd0.sk) - 1;

    float4 kr[D4], vr[DV4], dk[D4], dv[DV4];
    {
        long jj = hd0.k0 + (key_valid ? j : 0);
        __global const store_t *Kr = K + VIEW_BASE(k, b, hk) + jj * k_sr;
        __global const store_t *Vr = V + VIEW_BASE(v, b, hk) + jj * v_sr;
        for (int c4 = 0; c4 < D4; ++c4) {
            kr[c4] = key_valid ? flashcl_ld4(Kr, c4, HEAD_DIM) * scale_log2 : (float4)(0.0f);
            dk[c4] = (float4)(0.0f);
        }
        for (int c4 = 0; c4 < DV4; ++c4) {
            vr[c4] = key_valid ? flashcl_ld4(Vr, c4, HEAD_DIM_V) : (float4)(0.0f);
            dv[c4] = (float4)(0.0f);
        }
    }

    __local float4 Qt[BLOCK_M * D4];
    __local float4 Gt[BLOCK_M * DV4]; /* dO tile */
    __local float Lt[BLOCK_M];        /* lse2 of the tile's rows */
    __local float Dt[BLOCK_M];

    /* Only the query rows whose causal/window band reaches this block's keys. */
    const long q_begin = flashcl_q_begin(hd0, key0, BLOCK_M, win_right);
    const long q_end = active ? flashcl_q_end(hd0, key_last, win_left) : q_begin;

    for (int g = 0; g < group; ++g) {
        const int h = hk * group + g;
        const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
        __global const store_t *Qb = Q + VIEW_BASE(q, b, h) + hd.q0 * q_sr;
        __global const store_t *Gb = dO + VIEW_BASE(dout, b, h) + hd.q0 * dout_sr;
        for (long row0 = q_begin; row0 < q_end; row0 += BLOCK_M) {
            if (flashcl_tile_skipped(hd, row0, row0 + BLOCK_M - 1, key0, key0 + BLOCK_N - 1, VARIANT_PASS)) continue;
            FLASHCL_SHARED_FOR(int, e, BLOCK_M *D4, lid, BLOCK_N) {
                int r = e / D4, c4 = e - r * D4;
                long i = row0 + r;
                Qt[e] = i < hd.sq ? flashcl_ld4(Qb + i * q_sr, c4, HEAD_DIM) : (float4)(0.0f);
            }
            FLASHCL_SHARED_FOR(int, e, BLOCK_M *DV4, lid, BLOCK_N) {
                int r = e / DV4, c4 = e - r * DV4;
                long i = row0 + r;
                Gt[e] = i < hd.sq ? flashcl_ld4(Gb + i * dout_sr, c4, HEAD_DIM_V) : (float4)(0.0f);
            }
            FLASHCL_SHARED_FOR(int, r, BLOCK_M, lid, BLOCK_N) {
                long i = row0 + r;
                ulong at = flashcl_row_index(hd, b, h, heads_q, seqlen_q, i < hd.sq ? i : 0);
                Lt[r] = i < hd.sq ? LSE[lse_off + at] * FLASHCL_LOG2E_F : FLASHCL_NEG_INF;
                Dt[r] = i < hd.sq ? Dsum[at] : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int r = 0; r < BLOCK_M; ++r) {
                const long i = row0 + r;
                float4 s4 = (float4)(0.0f), dp4 = (float4)(0.0f);
                for (int c4 = 0; c4 < D4; ++c4) s4 = fma(Qt[r * D4 + c4], kr[c4], s4);
                for (int c4 = 0; c4 < DV4; ++c4) dp4 = fma(Gt[r * DV4 + c4], vr[c4], dp4);
                const float s2 = flashcl_sum4(s4);
                const int inside = key_valid && i < hd.sq;
                const float f = inside ? flashcl_score(s2, hd, i, j, VARIANT_PASS) : FLASHCL_NEG_INF;
                const float p = bwd_prob(f, Lt[r]);
                const float z = inside ? flashcl_dropout_factor(hd, i, j, VARIANT_PASS) : 0.0f;
                const float ds = p * (flashcl_sum4(dp4) * z - Dt[r]) * flashcl_score_grad(s2, softcap2);
                const float pz = p * z;
                for (int c4 = 0; c4 < DV4; ++c4) dv[c4] = fma((float4)(pz), Gt[r * DV4 + c4], dv[c4]);
                for (int c4 = 0; c4 < D4; ++c4) dk[c4] = fma((float4)(ds), Qt[r * D4 + c4], dk[c4]);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }

    if (!key_valid) return;
    __global store_t *dKr = dK + VIEW_BASE(dk, b, hk) + (hd0.k0 + j) * dk_sr;
    __global store_t *dVr = dV + VIEW_BASE(dv, b, hk) + (hd0.k0 + j) * dv_sr;
    for (int c4 = 0; c4 < D4; ++c4) flashcl_st4(dKr, c4, dk[c4] * scale, HEAD_DIM);
    for (int c4 = 0; c4 < DV4; ++c4) flashcl_st4(dVr, c4, dv[c4], HEAD_DIM_V);
}

/* Grid: (ceil(max_seqlen_q / BLOCK_M) * BLOCK_M, heads_q, batch). */
__kernel __attribute__((reqd_work_group_size(BLOCK_M, 1, 1))) void
flash_bwd_dq(__global const store_t *Q, VIEW_ARGS(q), __global const store_t *K, VIEW_ARGS(k),
             __global const store_t *V, VIEW_ARGS(v), __global const store_t *dO, VIEW_ARGS(dout),
             __global const float *LSE, ulong lse_off, __global const float *Dsum, __global store_t *dQ, VIEW_ARGS(dq),
             int seqlen_q, int seqlen_k, int heads_q, int group, float scale_log2, float scale, VARIANT_ARGS) {
    const int lid = (int)get_local_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const int hk = h / group;
    const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    const long row0 = (long)get_group_id(0) * BLOCK_M;
    /* varlen: a block past this sequence visits nothing and stores nothing; no early return
       ahead of the barriers below (POCL 3.1's work-item-0 peeling, cl/common.cl). */
    const int active = row0 < hd.sq;
    const long i = row0 + lid;
    const int row_valid = i < hd.sq;
    const long row_last = min(row0 + BLOCK_M, hd.sq) - 1;

    float4 qr[D4], gr[DV4], dq[D4];
    {
        long ii = hd.q0 + (row_valid ? i : 0);
        __global const store_t *Qr = Q + VIEW_BASE(q, b, h) + ii * q_sr;
        __global const store_t *Gr = dO + VIEW_BASE(dout, b, h) + ii * dout_sr;
        for (int c4 = 0; c4 < D4; ++c4) {
            qr[c4] = row_valid ? flashcl_ld4(Qr, c4, HEAD_DIM) * scale_log2 : (float4)(0.0f);
            dq[c4] = (float4)(0.0f);
        }
        for (int c4 = 0; c4 < DV4; ++c4) gr[c4] = row_valid ? flashcl_ld4(Gr, c4, HEAD_DIM_V) : (float4)(0.0f);
    }
    const ulong stat = flashcl_row_index(hd, b, h, heads_q, seqlen_q, row_valid ? i : 0);
    const float lse2 = row_valid ? LSE[lse_off + stat] * FLASHCL_LOG2E_F : FLASHCL_NEG_INF;
    const float drow = row_valid ? Dsum[stat] : 0.0f;

    __local float4 Kt[BLOCK_N * D4];
    __local float4 Vt[BLOCK_N * DV4];
    __global const store_t *Kb = K + VIEW_BASE(k, b, hk) + hd.k0 * k_sr;
    __global const store_t *Vb = V + VIEW_BASE(v, b, hk) + hd.k0 * v_sr;

    /* Key tiles outside the block's causal/window band are never loaded. */
    const long kv_begin = flashcl_kv_begin(hd, row0, BLOCK_N, win_left);
    const long kv_end = active ? flashcl_kv_end(hd, row_last, win_right) : kv_begin;

    for (long key0 = kv_begin; key0 < kv_end; key0 += BLOCK_N) {
        if (flashcl_tile_skipped(hd, row0, row_last, key0, key0 + BLOCK_N - 1, VARIANT_PASS)) continue;
        FLASHCL_SHARED_FOR(int, e, BLOCK_N *D4, lid, BLOCK_M) {
            int r = e / D4, c4 = e - r * D4;
            long jj = key0 + r;
            Kt[e] = jj < hd.sk ? flashcl_ld4(Kb + jj * k_sr, c4, HEAD_DIM) : (float4)(0.0f);
        }
        FLASHCL_SHARED_FOR(int, e, BLOCK_N *DV4, lid, BLOCK_M) {
            int r = e / DV4, c4 = e - r * DV4;
            long jj = key0 + r;
            Vt[e] = jj < hd.sk ? flashcl_ld4(Vb + jj * v_sr, c4, HEAD_DIM_V) : (float4)(0.0f);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int r = 0; r < BLOCK_N; ++r) {
            const long jj = key0 + r;
            float4 s4 = (float4)(0.0f), dp4 = (float4)(0.0f);
            for (int c4 = 0; c4 < D4; ++c4) s4 = fma(qr[c4], Kt[r * D4 + c4], s4);
            for (int c4 = 0; c4 < DV4; ++c4) dp4 = fma(gr[c4], Vt[r * DV4 + c4], dp4);
            const float s2 = flashcl_sum4(s4);
            const int inside = row_valid && jj < hd.sk;
            const float f = inside ? flashcl_score(s2, hd, i, jj, VARIANT_PASS) : FLASHCL_NEG_INF;
            const float p = bwd_prob(f, lse2);
            const float z = inside ? flashcl_dropout_factor(hd, i, jj, VARIANT_PASS) : 0.0f;
            const float ds = p * (flashcl_sum4(dp4) * z - drow) * flashcl_score_grad(s2, softcap2);
            for (int c4 = 0; c4 < D4; ++c4) dq[c4] = fma((float4)(ds), Kt[r * D4 + c4], dq[c4]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    if (!row_valid) return;
    __global store_t *dQr = dQ + VIEW_BASE(dq, b, h) + (hd.q0 + i) * dq_sr;
    for (int c4 = 0; c4 < D4; ++c4) flashcl_st4(dQr, c4, dq[c4] * scale, HEAD_DIM);
}
