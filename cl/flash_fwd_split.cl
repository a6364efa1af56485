/*
 * FlashAttention forward with THREADS_PER_ROW work-items per query row (the
 * same online softmax as cl/flash_fwd_rows.cl, see there): each work-item
 * scores a strided subset of the tile's keys and owns a strided subset of the
 * output dims, so large head dims fit in registers. Q, K, V and P go through
 * __local; the row max and sum are reduced over the row's work-items there.
 *
 * Plain attention only (the planner never picks this kernel for variants):
 * float storage, one sequence per batch entry, causal at most.
 *
 * Grid: (query blocks * BLOCK_M * THREADS_PER_ROW, heads_q, batch), query
 * blocks in reverse so the heavy (late) blocks of a causal problem start first.
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
#ifndef THREADS_PER_ROW
#define THREADS_PER_ROW 4
#endif

#define WG_SIZE (BLOCK_M * THREADS_PER_ROW)

#if BLOCK_N % THREADS_PER_ROW != 0
#error "BLOCK_N must be a multiple of THREADS_PER_ROW"
#endif

/* Padding by one float puts rows of the local tiles in different banks. */
#define LDS (HEAD_DIM + 1)
#define KEYS_PER_THREAD (BLOCK_N / THREADS_PER_ROW)
#define DIMS_PER_THREAD ((HEAD_DIM + THREADS_PER_ROW - 1) / THREADS_PER_ROW)

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
flash_fwd_split(__global const float *Q, VIEW_ARGS(q), __global const float *K, VIEW_ARGS(k), __global const float *V,
                VIEW_ARGS(v), __global float *O, VIEW_ARGS(o), FWD_ARGS) {
    const int lid = (int)get_local_id(0);
    const int r = lid / THREADS_PER_ROW;     /* row within the block */
    const int t = lid - r * THREADS_PER_ROW; /* lane within the row */
    const int nblocks = (int)get_num_groups(0);
    const int block = nblocks - 1 - (int)get_group_id(0);
    const int h = (int)get_group_id(1);
    const int b = (int)get_group_id(2);
    const int hk = h / group;
    const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    const long row0 = (long)block * BLOCK_M;
    const long row = row0 + r;
    const int row_valid = row < seqlen_q;

    __global const float *Qb = Q + VIEW_BASE(q, b, h);
    __global const float *Kb = K + VIEW_BASE(k, b, hk);
    __global const float *Vb = V + VIEW_BASE(v, b, hk);

    __local float Qt[BLOCK_M * LDS];
    __local float Kt[BLOCK_N * LDS];
    __local float Vt[BLOCK_N * LDS];
    __local float Pt[BLOCK_M * BLOCK_N];
    __local float red[BLOCK_M * THREADS_PER_ROW];

    FLASHCL_SHARED_FOR(int, e, BLOCK_M *HEAD_DIM, lid, WG_SIZE) {
        int i = e / HEAD_DIM, c = e - i * HEAD_DIM;
        long qi = row0 + i;
        Qt[i * LDS + c] = qi < seqlen_q ? Qb[qi * q_sr + c] * scale_log2 : 0.0f;
    }

    float acc[DIMS_PER_THREAD];
    for (int k = 0; k < DIMS_PER_THREAD; ++k) acc[k] = 0.0f;
    float m = FLASHCL_NEG_INF;
    float l_part = 0.0f; /* this lane's share of the row sum, all lanes share m */

    const long kv_end = flashcl_kv_end(hd, min(row0 + BLOCK_M, (long)seqlen_q) - 1, win_right);
    const long limit = flashcl_key_hi(hd, row, win_right);

    for (long key0 = 0; key0 < kv_end; key0 += BLOCK_N) {
        FLASHCL_SHARED_FOR(int, e, BLOCK_N *HEAD_DIM, lid, WG_SIZE) {
            int j = e / HEAD_DIM, c = e - j * HEAD_DIM;
            long key = key0 + j;
            int ok = key < seqlen_k;
            Kt[j * LDS + c] = ok ? Kb[key * k_sr + c] : 0.0f;
            Vt[j * LDS + c] = ok ? Vb[key * v_sr + c] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        float s[KEYS_PER_THREAD];
        float my_max = FLASHCL_NEG_INF;
        for (int kk = 0; kk < KEYS_PER_THREAD; ++kk) {
            int j = t + kk * THREADS_PER_ROW;
            float a = 0.0f;
            for (int c = 0; c < HEAD_DIM; ++c) a = fma(Qt[r * LDS + c], Kt[j * LDS + c], a);
            s[kk] = key0 + j > limit ? FLASHCL_NEG_INF : a;
            my_max = fmax(my_max, s[kk]);
        }
        red[lid] = my_max;
        barrier(CLK_LOCAL_MEM_FENCE);
        float tile_max = FLASHCL_NEG_INF;
        for (int u = 0; u < THREADS_PER_ROW; ++u) tile_max = fmax(tile_max, red[r * THREADS_PER_ROW + u]);

        const flashcl_online upd = flashcl_online_update(m, tile_max);
        l_part *= upd.alpha;
        for (int kk = 0; kk < KEYS_PER_THREAD; ++kk) {
            float p = exp2(s[kk] - upd.base);
            l_part += p;
            Pt[r * BLOCK_N + t + kk * THREADS_PER_ROW] = p;
        }
        m = upd.m;
        barrier(CLK_LOCAL_MEM_FENCE);

        for (int k = 0; k < DIMS_PER_THREAD; ++k) {
            int c = t + k * THREADS_PER_ROW;
            if (c >= HEAD_DIM) c = HEAD_DIM - 1; /* pad lane: computed, never stored */
            float o = acc[k] * upd.alpha;
            for (int j = 0; j < BLOCK_N; ++j) o = fma(Pt[r * BLOCK_N + j], Vt[j * LDS + c], o);
            acc[k] = o;
        }
        /* red, Pt, Kt and Vt are all rewritten by the next iteration. */
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    red[lid] = l_part;
    barrier(CLK_LOCAL_MEM_FENCE);
    float l = 0.0f;
    for (int u = 0; u < THREADS_PER_ROW; ++u) l += red[r * THREADS_PER_ROW + u];

    if (!row_valid) return;
    const float inv_l = flashcl_row_inv(1.0f, l);
    __global float *Or = O + VIEW_BASE(o, b, h) + row * o_sr;
    for (int k = 0; k < DIMS_PER_THREAD; ++k) {
        int c = t + k * THREADS_PER_ROW;
        if (c < HEAD_DIM) Or[c] = acc[k] * inv_l;
    }
    if (write_lse && t == 0) LSE[lse_off + flashcl_row_index(hd, b, h, heads_q, seqlen_q, row)] = flashcl_lse(m, l);
}
