/*
 * FlashAttention forward, one work-item per query row: O = softmax(scale *
 * Q K^T) V without materialising the score matrix. A work-group owns BLOCK_M
 * query rows of one (batch, head) and streams the keys in tiles of BLOCK_N,
 * each work-item keeping its row's running max m, running sum l, q and
 * unnormalised output in private memory (online softmax). Scores live in the
 * log2 domain: the host folds log2(e) into the scale so every exponential is
 * an exp2. The output is normalised once, at the end (FlashAttention-2).
 *
 * The K/V tile is staged through __local (STAGE_LOCAL=1, GPUs) or read
 * straight from global memory (STAGE_LOCAL=0: on a CPU __local is plain RAM,
 * and a barrier inside the key loop turns private state into memory traffic).
 * The other forward kernels: cl/flash_fwd_split.cl (several work-items per
 * row) and cl/flash_fwd_tiles.cl (register-blocked, GPUs); the host's plan
 * picks one (src/backends/portable/plan_forward.c).
 *
 * Grid: (query blocks * BLOCK_M, heads_q, batch). Query blocks run in reverse
 * so the heavy (late) blocks of a causal problem start first.
 *
 * Variants (cl/variants.cl): q/k/v/o are store_t (float, half or bfloat16),
 * v/o have HEAD_DIM_V elements per row, only the key tiles inside the
 * causal/window band are visited, tiles the block mask drops are skipped,
 * and every score goes through flashcl_score (softcap, ALiBi, bias, masks)
 * unless the tile is known plain.
 */

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef BLOCK_M
#define BLOCK_M 16
#endif
#ifndef BLOCK_N
#define BLOCK_N 32
#endif
#ifndef STAGE_LOCAL
#define STAGE_LOCAL 1
#endif

#define WG_SIZE BLOCK_M /* one work-item per row */
/* Head dims rounded up to whole float4s; the pad lanes are zero in q, K and V. */
#define D4 ((HEAD_DIM + 3) / 4)
#define DV4 ((HEAD_DIM_V + 3) / 4)
/* Keys scored together: four independent dot products share each q load. */
#define KEY_STEP 4

#if BLOCK_N % KEY_STEP != 0
#error "BLOCK_N must be a multiple of 4"
#endif

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
flash_fwd_rows(__global const store_t *Q, VIEW_ARGS(q), __global const store_t *K, VIEW_ARGS(k),
               __global const store_t *V, VIEW_ARGS(v), __global store_t *O, VIEW_ARGS(o), FWD_ARGS) {
    const int lid = (int)get_local_id(0);
    const int nblocks = (int)get_num_groups(0);
    const int block = nblocks - 1 - (int)get_group_id(0);
    const int h = (int)get_group_id(1);
    const int b = (int)get_group_id(2);
    const int hk = h / group;
    const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    const long row0 = (long)block * BLOCK_M;
    /* varlen: a block past this sequence visits no key tile and stores nothing; no early
       return ahead of the barriers below (POCL 3.1's work-item-0 peeling, cl/common.cl). */
    const int active = row0 < hd.sq;
    const long row = row0 + lid;
    const long row_last = min(row0 + BLOCK_M, hd.sq) - 1;
    const int row_valid = row < hd.sq;

    __global const store_t *Kb = K + VIEW_BASE(k, b, hk) + hd.k0 * k_sr;
    __global const store_t *Vb = V + VIEW_BASE(v, b, hk) + hd.k0 * v_sr;

    /* q pre-multiplied by scale*log2(e): scores come out in the log2 domain. */
    float4 q[D4];
    {
        __global const store_t *Qr = Q + VIEW_BASE(q, b, h) + (hd.q0 + (row_valid ? row : 0)) * q_sr;
        for (int c4 = 0; c4 < D4; ++c4) q[c4] = row_valid ? flashcl_ld4(Qr, c4, HEAD_DIM) * scale_log2 : (float4)(0.0f);
    }
    float4 acc[DV4];
    for (int c4 = 0; c4 < DV4; ++c4) acc[c4] = (float4)(0.0f);
    float m = FLASHCL_NEG_INF;
    float l = 0.0f;

    const long kv_begin = flashcl_kv_begin(hd, row0, BLOCK_N, win_left);
    const long kv_end = active ? flashcl_kv_end(hd, row_last, win_right) : kv_begin;

#if STAGE_LOCAL
    __local float4 Kt[BLOCK_N * D4];
    __local float4 Vt[BLOCK_N * DV4];
#endif
#if HAS_MASK
    __local int tile_live;
#endif

    for (long key0 = kv_begin; key0 < kv_end; key0 += BLOCK_N) {
        const long key_last = key0 + BLOCK_N - 1;
        if (flashcl_tile_skipped(hd, row0, row_last, key0, key_last, VARIANT_PASS)) continue;
#if HAS_MASK
        /* A tile the boolean mask hides from every row is not loaded either. */
        if (lid == 0) tile_live = 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (row_valid) {
            int any = 0;
            for (int j = 0; j < BLOCK_N && key0 + j < hd.sk; ++j)
                any |= mask[hd.mask_at + (ulong)row * mask_sr + (ulong)(key0 + j)] != 0;
            if (any) atomic_or(&tile_live, 1);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const int live = tile_live;
        barrier(CLK_LOCAL_MEM_FENCE); /* everyone has read the flag before it is reset */
        if (!live) continue;
#endif
#if STAGE_LOCAL
        /* Cooperative, coalesced copy of the K and V tiles; rows past the sequence are zero. */
        FLASHCL_SHARED_FOR(int, e, BLOCK_N *D4, lid, WG_SIZE) {
            int j = e / D4, c4 = e - j * D4;
            long key = key0 + j;
            Kt[e] = key < hd.sk ? flashcl_ld4(Kb + key * k_sr, c4, HEAD_DIM) : (float4)(0.0f);
        }
        FLASHCL_SHARED_FOR(int, e, BLOCK_N *DV4, lid, WG_SIZE) {
            int j = e / DV4, c4 = e - j * DV4;
            long key = key0 + j;
            Vt[e] = key < hd.sk ? flashcl_ld4(Vb + key * v_sr, c4, HEAD_DIM_V) : (float4)(0.0f);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#define K_ROW4(j, c4) Kt[(j)*D4 + (c4)]
#define V_ROW4(j, c4) Vt[(j)*DV4 + (c4)]
#else
            /* Direct reads: clamp the row so the tail tile never reads past the view. */
#define KEY_ROW(j) min(key0 + (j), hd.sk - 1)
#define K_ROW4(j, c4) flashcl_ld4(Kb + KEY_ROW(j) * k_sr, (c4), HEAD_DIM)
#define V_ROW4(j, c4) flashcl_ld4(Vb + KEY_ROW(j) * v_sr, (c4), HEAD_DIM_V)
#endif
        const int plain =
            !HAS_SCORE_TERMS && flashcl_tile_plain(hd, row0, row_last, key0, key_last, win_left, win_right);
        float s[BLOCK_N];
        float tile_max = FLASHCL_NEG_INF;
        for (int j = 0; j < BLOCK_N; j += KEY_STEP) {
            float4 a0 = (float4)(0.0f), a1 = a0, a2 = a0, a3 = a0;
            for (int c4 = 0; c4 < D4; ++c4) {
                float4 qc = q[c4];
                a0 = fma(qc, K_ROW4(j + 0, c4), a0);
                a1 = fma(qc, K_ROW4(j + 1, c4), a1);
                a2 = fma(qc, K_ROW4(j + 2, c4), a2);
                a3 = fma(qc, K_ROW4(j + 3, c4), a3);
            }
            s[j + 0] = flashcl_sum4(a0);
            s[j + 1] = flashcl_sum4(a1);
            s[j + 2] = flashcl_sum4(a2);
            s[j + 3] = flashcl_sum4(a3);
        }
        if (!plain) {
            for (int j = 0; j < BLOCK_N; ++j)
                s[j] = row_valid ? flashcl_score(s[j], hd, row, key0 + j, VARIANT_PASS) : FLASHCL_NEG_INF;
        }
        for (int j = 0; j < BLOCK_N; ++j) tile_max = fmax(tile_max, s[j]);

        const flashcl_online upd = flashcl_online_update(m, tile_max);
        l *= upd.alpha;
        for (int c4 = 0; c4 < DV4; ++c4) acc[c4] *= upd.alpha;
        for (int j = 0; j < BLOCK_N; j += KEY_STEP) {
            float p0 = exp2(s[j + 0] - upd.base), p1 = exp2(s[j + 1] - upd.base);
            float p2 = exp2(s[j + 2] - upd.base), p3 = exp2(s[j + 3] - upd.base);
            l += (p0 + p1) + (p2 + p3);
#if HAS_DROPOUT
            /* The normaliser counts every probability; only P V sees the dropped ones. */
            if (row_valid) {
                p0 *= flashcl_dropout_factor(hd, row, key0 + j + 0, VARIANT_PASS);
                p1 *= flashcl_dropout_factor(hd, row, key0 + j + 1, VARIANT_PASS);
                p2 *= flashcl_dropout_factor(hd, row, key0 + j + 2, VARIANT_PASS);
                p3 *= flashcl_dropout_factor(hd, row, key0 + j + 3, VARIANT_PASS);
            }
#endif
            for (int c4 = 0; c4 < DV4; ++c4) {
                float4 o4 = acc[c4];
                o4 = fma((float4)(p0), V_ROW4(j + 0, c4), o4);
                o4 = fma((float4)(p1), V_ROW4(j + 1, c4), o4);
                o4 = fma((float4)(p2), V_ROW4(j + 2, c4), o4);
                o4 = fma((float4)(p3), V_ROW4(j + 3, c4), o4);
                acc[c4] = o4;
            }
        }
        m = upd.m;
#if STAGE_LOCAL
        /* The next iteration overwrites the tiles other work-items may still read. */
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
#undef K_ROW4
#undef V_ROW4
#ifdef KEY_ROW
#undef KEY_ROW
#endif
    }

    if (!row_valid) return;
    const float alpha = flashcl_fold_sink(&m, &l, hd.sink2);
    const float inv_l = flashcl_row_inv(alpha, l);
    __global store_t *Or = O + VIEW_BASE(o, b, h) + (hd.q0 + row) * o_sr;
    for (int c4 = 0; c4 < DV4; ++c4) flashcl_st4(Or, c4, acc[c4] * inv_l, HEAD_DIM_V);
    if (write_lse) LSE[lse_off + flashcl_row_index(hd, b, h, heads_q, seqlen_q, row)] = flashcl_lse(m, l);
}
