/*
 * Split-KV decoding for GPUs (the decode family, src/backends/decode): few
 * query rows against many keys, so the kernel is bound by reading K and V.
 *
 * One work-group per (block of packed rows, split, KV head, sequence). The
 * packed rows are the query rows of every query head that reads this KV head
 * (GQA), head-major: row r is query head hk * group + r / seqlen_q, query row
 * r % seqlen_q. So K and V are read once per KV head, not once per query head.
 * The split is a contiguous range of key tiles; with more than one split each
 * work-group writes its partial O (normalised, float32) and LSE, and
 * cl/flash_merge.cl merges them by LSE.
 *
 * Per tile of BLOCK_N keys: K and V go through __local as float (dequantised
 * there when the cache is fp8), then
 *   scores   each work-item owns one key and ROWS / (WG_SIZE / BLOCK_N) rows
 *            of it (Q staged in __local, read as a broadcast);
 *   softmax  one work-item per row: the online update (new max, rescale,
 *            sum) over the tile, P written over the scores;
 *   P V      each work-item owns float4 slices of the output rows.
 *
 * Keys are addressed through a page table (PAGED), so one kernel serves
 * contiguous and paged KV caches: key j of sequence b lies in page
 * table[b][(kv_start + j) / page_size], row (kv_start + j) % page_size; a
 * contiguous cache is the one-page-per-sequence case. Without PAGED the keys
 * are the K/V views of flashcl_forward (varlen through cu_seqlens).
 *
 * Knobs: HEAD_DIM, HEAD_DIM_V, ROWS (packed rows per work-group), BLOCK_N
 * (keys per tile), WG_SIZE, PAGED, CACHE_DTYPE (0: store_t, 1: fp8 e4m3,
 * 2: fp8 e5m2) and cl/variants.cl's switches; write_parts (run time) selects partials
 * (several splits) or O and LSE (one).
 */
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM
#endif
#ifndef ROWS
#define ROWS 4
#endif
#ifndef BLOCK_N
#define BLOCK_N 32
#endif
#ifndef WG_SIZE
#define WG_SIZE 128
#endif

#if WG_SIZE % BLOCK_N != 0
#error "WG_SIZE must be a multiple of BLOCK_N"
#endif
#define ROW_GROUPS (WG_SIZE / BLOCK_N)                     /* work-items per key in the score phase */
#define ROWS_PER_ITEM ((ROWS + ROW_GROUPS - 1) / ROW_GROUPS) /* rows each of them scores */
#define D4 ((HEAD_DIM + 3) / 4)
#define DV4 ((HEAD_DIM_V + 3) / 4)
#define LDK (D4 * 4 + 4)  /* __local row pitch of K and Q: float4-aligned, shifted by 4 banks per row */
#define LDV (DV4 * 4)     /* V rows are read along the row by consecutive work-items: no pad needed */
#define LDS (BLOCK_N + 1) /* scores: one row per packed row */
#define PV_PER_ITEM ((ROWS * DV4 + WG_SIZE - 1) / WG_SIZE) /* float4 output slices per work-item */
#define PART_PITCH (((HEAD_DIM_V + 15) / 16) * 16)          /* floats per partial output row (as the host) */

/* Grid: (row_blocks * splits * WG_SIZE, heads_kv, batch). */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void flash_decode(__global const store_t *Q, VIEW_ARGS(q),
                  __global const cache_t *K, ulong k_off, ulong k_sp, ulong k_sh, ulong k_sr,
                  __global const cache_t *V, ulong v_off, ulong v_sp, ulong v_sh, ulong v_sr,
                  __global store_t *O, VIEW_ARGS(o),
                  __global float *LSE, ulong lse_off, int write_lse,
                  __global float *Opart, __global float *Lpart, /* write_parts: [split][b][hq][part_sq][PART_PITCH], [..][part_sq] */
                  int write_parts, int part_sq,
                  __global const int *table, int max_pages, long page_size,
                  __global const int *seqinfo, /* PAGED: per sequence {kv_start, kv_len, append row, first position} */
                  __global const float *k_scale, __global const float *v_scale, int scale_per_head,
                  int seqlen_q, int seqlen_k, int heads_q, int group, int splits, int row_blocks,
                  float scale_log2, VARIANT_ARGS)
{
    const int lid = (int)get_local_id(0);
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
    const int split = (int)get_group_id(0) / row_blocks, rblock = (int)get_group_id(0) % row_blocks;

    /* The sequence: query rows and keys (every query head of the group shares them). */
    flashcl_head hd = flashcl_head_setup(b, hk * group, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
#if PAGED
    const long kv_start = seqinfo[4 * b];
    hd.sk = seqinfo[4 * b + 1];
    hd.off = hd.sk - hd.sq;
#else
    const long kv_start = 0;
#endif
    const int packed = group * (int)hd.sq; /* rows of this (sequence, KV head) */
    const int sqn = hd.sq > 0 ? (int)hd.sq : 1; /* divides row numbers (an empty varlen sequence has none) */
    const int row0 = rblock * ROWS;
    /* A block past a shorter sequence's rows (varlen) has no rows: it runs no key tile and stores
       nothing. No early return: POCL 3.1 mis-handles a return ahead of barriers (uniform or not). */
    const int active = row0 < packed;

    __local float Qs[ROWS * LDK];
    __local float Ks[BLOCK_N * LDK];
    __local float Vs[BLOCK_N * LDV];
    __local float S[ROWS * LDS];          /* scores, then P */
    __local float row_alpha[ROWS];        /* the rescale of each row's output this tile */
    __local float row_m[ROWS], row_l[ROWS];

    /* fp8: the K scale multiplies every score (folded into Q), the V scale every output. */
    const float kscale = CACHE_DTYPE ? k_scale[scale_per_head ? hk : 0] : 1.0f;
    const float vscale = CACHE_DTYPE ? v_scale[scale_per_head ? hk : 0] : 1.0f;

    /* Stage the block's Q rows, scaled by scale*log2(e) (and the K scale); rows past `packed` are zero. */
    FLASHCL_SHARED_FOR(int, e, ROWS * D4, lid, WG_SIZE) {
        const int r = e / D4, c4 = e - r * D4, pr = row0 + r;
        float4 x = (float4)(0.0f);
        if (pr < packed) {
            const int h = hk * group + pr / sqn;
            const long i = pr % sqn;
            x = flashcl_ld4(Q + VIEW_BASE(q, b, h) + (hd.q0 + i) * q_sr, c4, HEAD_DIM) * (scale_log2 * kscale);
        }
        vstore4(x, 0, Qs + r * LDK + c4 * 4);
    }
    FLASHCL_SHARED_FOR(int, r, ROWS, lid, WG_SIZE) {
        row_m[r] = FLASHCL_NEG_INF;
        row_l[r] = 0.0f;
    }
    /* Publishes Qs and the row state: a split with no keys goes straight to the epilogue. */
    barrier(CLK_LOCAL_MEM_FENCE);

    /* This split's keys: [kv_lo, kv_hi), whole tiles, clipped to what any row of the block can see. */
    const int first_row = row0, last_row = min(row0 + ROWS, packed) - 1;
    /* Rows are head-major: the block's query rows span at most rows i_lo..i_hi of the sequence. */
    const long i_lo = (last_row / sqn > first_row / sqn) ? 0 : first_row % sqn;
    const long i_hi = (last_row / sqn > first_row / sqn) ? hd.sq - 1 : last_row % sqn;
    const long band_lo = flashcl_key_lo(hd, i_lo, win_left), band_hi = flashcl_key_hi(hd, i_hi, win_right) + 1;
    /* Splits cut this sequence's own tiles (never the batch's longest): with a fixed split count a
       sequence's result does not depend on the others. */
    const long tiles_per_split = ((hd.sk + BLOCK_N - 1) / BLOCK_N + splits - 1) / splits;
    const long tile_lo = (long)split * tiles_per_split * BLOCK_N;
    const long kv_lo = max(tile_lo, band_lo / BLOCK_N * BLOCK_N);
    const long kv_hi = active ? min(tile_lo + (long)tiles_per_split * BLOCK_N, band_hi) : kv_lo;

    /* My rows in the score phase (fixed key), my output slices in the P V phase. */
    const int my_key = lid % BLOCK_N, my_group = lid / BLOCK_N;
    float4 acc[PV_PER_ITEM];
    for (int k = 0; k < PV_PER_ITEM; ++k) acc[k] = (float4)(0.0f);

    for (long key0 = kv_lo; key0 < kv_hi; key0 += BLOCK_N) {
        /* K and V tiles (keys past the sequence read as zero and are masked below). */
        FLASHCL_SHARED_FOR(int, e, BLOCK_N * D4, lid, WG_SIZE) {
            const int j = e / D4, c4 = e - j * D4;
            const long key = key0 + j;
            float4 x = (float4)(0.0f);
            if (key < hd.sk)
                x = flashcl_cache_ld4(K + flashcl_kv_row(b, key, hk, table, max_pages, page_size, kv_start, k_off, k_sp, k_sh, k_sr,
                                                 hd.k0), c4, HEAD_DIM);
            vstore4(x, 0, Ks + j * LDK + c4 * 4);
        }
        FLASHCL_SHARED_FOR(int, e, BLOCK_N * DV4, lid, WG_SIZE) {
            const int j = e / DV4, c4 = e - j * DV4;
            const long key = key0 + j;
            float4 x = (float4)(0.0f);
            if (key < hd.sk)
                x = flashcl_cache_ld4(V + flashcl_kv_row(b, key, hk, table, max_pages, page_size, kv_start, v_off, v_sp, v_sh, v_sr,
                                                 hd.k0), c4, HEAD_DIM_V);
            vstore4(x, 0, Vs + j * LDV + c4 * 4);
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* Scores: my key against my rows, then the variant terms and masks (flashcl_score). */
        {
            float s[ROWS_PER_ITEM];
            for (int k = 0; k < ROWS_PER_ITEM; ++k) s[k] = 0.0f;
            for (int c4 = 0; c4 < D4; ++c4) {
                const float4 kv = vload4(0, Ks + my_key * LDK + c4 * 4);
                for (int k = 0; k < ROWS_PER_ITEM; ++k) {
                    const int r = my_group + ROW_GROUPS * k;
                    if (r < ROWS) s[k] += dot(vload4(0, Qs + r * LDK + c4 * 4), kv);
                }
            }
            const long key = key0 + my_key;
            for (int k = 0; k < ROWS_PER_ITEM; ++k) {
                const int r = my_group + ROW_GROUPS * k;
                if (r >= ROWS) continue;
                const int pr = row0 + r;
                float f = FLASHCL_NEG_INF;
                if (pr < packed && key < hd.sk) {
                    flashcl_head hr = hd;
                    const int h = hk * group + pr / sqn;
#if HAS_ALIBI
                    hr.slope2 = alibi[alibi_off + (ulong)b * alibi_sb + (ulong)h] * FLASHCL_LOG2E_F;
#endif
                    hr.bh = (uint)b * (uint)heads_q + (uint)h;
                    f = flashcl_score(s[k], hr, pr % sqn, key, VARIANT_PASS);
                }
                S[r * LDS + my_key] = f;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* The online update of each row over this tile: new max, rescale factor, P, sum. */
        FLASHCL_SHARED_FOR(int, r, ROWS, lid, WG_SIZE) {
            float mx = row_m[r];
            for (int j = 0; j < BLOCK_N; ++j) mx = fmax(mx, S[r * LDS + j]);
            const float base = flashcl_safe_base(mx);
            const float alpha = exp2(row_m[r] - base);
            float sum = 0.0f;
            for (int j = 0; j < BLOCK_N; ++j) {
                const float p = exp2(S[r * LDS + j] - base);
                S[r * LDS + j] = p;
                sum += p;
            }
            row_l[r] = row_l[r] * alpha + sum;
            row_m[r] = mx;
            row_alpha[r] = alpha;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* O = alpha O + P V for my output slices. */
        for (int k = 0; k < PV_PER_ITEM; ++k) {
            const int idx = lid + WG_SIZE * k;
            if (idx < ROWS * DV4) { /* an `if`, not a `break`: see FLASHCL_SHARED_FOR */
                const int r = idx / DV4, c4 = idx - r * DV4;
                float4 a = acc[k] * row_alpha[r];
                for (int j = 0; j < BLOCK_N; ++j) a = fma((float4)(S[r * LDS + j]), vload4(0, Vs + j * LDV + c4 * 4), a);
                acc[k] = a;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    /* Epilogue: normalise; one split writes O (sinks folded in) and LSE, several write partials. */
    for (int k = 0; k < PV_PER_ITEM; ++k) {
        const int idx = lid + WG_SIZE * k;
        const int r = idx / DV4, c4 = idx - r * DV4, pr = row0 + r;
        if (idx >= ROWS * DV4 || pr >= packed) continue;
        const int h = hk * group + pr / sqn;
        const long i = pr % sqn;
        float m = row_m[r], l = row_l[r];
        if (write_parts) {
            const ulong prow =
                (((ulong)split * get_num_groups(2) + (ulong)b) * (ulong)heads_q + (ulong)h) * (ulong)part_sq + (ulong)i;
            const float inv = l > 0.0f ? vscale / l : 0.0f;
            vstore4(acc[k] * inv, 0, Opart + prow * (ulong)PART_PITCH + (ulong)c4 * 4);
            if (c4 == 0) Lpart[prow] = l > 0.0f ? (m + log2(l)) / FLASHCL_LOG2E_F : FLASHCL_NEG_INF;
            continue;
        }
        /* One split: the sinks are folded here (with several, flash_merge folds them). */
#if HAS_SINKS
        const float alpha = flashcl_fold_sink(&m, &l, sinks[sinks_off + (ulong)h] * FLASHCL_LOG2E_F);
#else
        const float alpha = 1.0f;
#endif
        const float inv = l > 0.0f ? alpha * vscale / l : 0.0f;
        flashcl_st4(O + VIEW_BASE(o, b, h) + (hd.q0 + i) * o_sr, c4, acc[k] * inv, HEAD_DIM_V);
        if (c4 == 0 && write_lse) {
            const ulong at = flashcl_row_index(hd, b, h, heads_q, seqlen_q, i);
            LSE[lse_off + at] = l > 0.0f ? (m + log2(l)) / FLASHCL_LOG2E_F : FLASHCL_NEG_INF;
        }
    }
}
