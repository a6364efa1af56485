/*
 * FlashAttention forward: O = softmax(scale * Q K^T) V without materialising
 * the score matrix. One work-group owns BLOCK_M query rows of one (batch,
 * head) and streams the keys in tiles of BLOCK_N, keeping the running row max
 * m, the running sum l and the unnormalised output in private memory
 * (online softmax). Scores live in the log2 domain: the host folds log2(e)
 * into the scale so every exponential is an exp2. The output is normalised
 * once, at the end (FlashAttention-2).
 *
 * Three kernels, chosen by the host's plan (FLASH_KERNEL picks the one a build contains):
 *   flash_fwd_rows   one work-item per query row (THREADS_PER_ROW == 1). The
 *                    K/V tile is staged through __local (STAGE_LOCAL=1, GPUs)
 *                    or read straight from global memory (STAGE_LOCAL=0: on a
 *                    CPU __local is plain RAM, and a barrier inside the key
 *                    loop turns private state into memory traffic).
 *   flash_fwd_split  THREADS_PER_ROW work-items per row: each scores a strided
 *                    subset of the tile's keys and owns a strided subset of
 *                    the output dims, so large head dims fit in registers.
 *   flash_fwd_tiles  GPUs: both products register-blocked like a GEMM (see below).
 *
 * Grid: (query blocks * WG_SIZE, heads_q, batch). Query blocks run in reverse
 * so the heavy (late) blocks of a causal problem start first.
 *
 * Variants (cl/variants.cl): q/k/v/o are store_t (float, half or bfloat16),
 * v/o have HEAD_DIM_V elements per row, only the key tiles inside the
 * causal/window band are visited, tiles the block mask drops are skipped,
 * and every score goes through flashcl_score (softcap, ALiBi, bias, masks)
 * unless the tile is known plain. The split kernel runs plain attention only.
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
#define THREADS_PER_ROW 1
#endif
#ifndef STAGE_LOCAL
#define STAGE_LOCAL 1
#endif
/* Which kernel this build contains: only one, so an unused kernel's local
   arrays can never push the program over the device's local memory. */
#define FLASH_KERNEL_ROWS 0
#define FLASH_KERNEL_SPLIT 1
#define FLASH_KERNEL_TILES 2
#ifndef FLASH_KERNEL
#define FLASH_KERNEL FLASH_KERNEL_ROWS
#endif
#ifndef TILE_M
#define TILE_M 4
#endif
#ifndef TILE_N
#define TILE_N 4
#endif

#define WG_SIZE (BLOCK_M * THREADS_PER_ROW)
/* Head dims rounded up to whole float4s; the pad lanes are zero in q, K and V. */
#define D4 ((HEAD_DIM + 3) / 4)
#define DV4 ((HEAD_DIM_V + 3) / 4)
#define HEAD_DIM_PAD (D4 * 4)
/* Keys scored together: four independent dot products share each q load. */
#define KEY_STEP 4

#if BLOCK_N % KEY_STEP != 0
#error "BLOCK_N must be a multiple of 4"
#endif
#if BLOCK_N % THREADS_PER_ROW != 0
#error "BLOCK_N must be a multiple of THREADS_PER_ROW"
#endif

/* The arguments every forward kernel takes, after the four views. */
#define FWD_ARGS                                                           \
    __global float *LSE, ulong lse_off, int write_lse,                     \
    int seqlen_q, int seqlen_k, int heads_q, int group, float scale_log2,  \
    VARIANT_ARGS

/* Natural-log LSE of a finished row: ln(2) * (m + log2(l)); -inf when nothing is visible. */
inline float flash_lse(float m, float l) { return l > 0.0f ? M_LN2_F * (m + log2(l)) : FLASHCL_NEG_INF; }

#if FLASH_KERNEL == FLASH_KERNEL_ROWS
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void flash_fwd_rows(__global const store_t *Q, VIEW_ARGS(q),
                    __global const store_t *K, VIEW_ARGS(k),
                    __global const store_t *V, VIEW_ARGS(v),
                    __global store_t *O, VIEW_ARGS(o),
                    FWD_ARGS)
{
    const int lid = (int)get_local_id(0);
    const int nblocks = (int)get_num_groups(0);
    const int block = nblocks - 1 - (int)get_group_id(0);
    const int h = (int)get_group_id(1);
    const int b = (int)get_group_id(2);
    const int hk = h / group;
    const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    const long row0 = (long)block * BLOCK_M;
    if (row0 >= hd.sq) return; /* varlen: past this sequence (the whole group returns) */
    const long row = row0 + lid;
    const long row_last = min(row0 + BLOCK_M, hd.sq) - 1;
    const int row_valid = row < hd.sq;

    __global const store_t *Kb = K + VIEW_BASE(k, b, hk) + hd.k0 * k_sr;
    __global const store_t *Vb = V + VIEW_BASE(v, b, hk) + hd.k0 * v_sr;

    /* q pre-multiplied by scale*log2(e): scores come out in the log2 domain. */
    float4 q[D4];
    {
        __global const store_t *Qr = Q + VIEW_BASE(q, b, h) + (hd.q0 + (row_valid ? row : 0)) * q_sr;
        for (int c4 = 0; c4 < D4; ++c4)
            q[c4] = row_valid ? flashcl_ld4(Qr, c4, HEAD_DIM) * scale_log2 : (float4)(0.0f);
    }
    float4 acc[DV4];
    for (int c4 = 0; c4 < DV4; ++c4) acc[c4] = (float4)(0.0f);
    float m = FLASHCL_NEG_INF;
    float l = 0.0f;

    const long kv_begin = flashcl_kv_begin(hd, row0, BLOCK_N, win_left);
    const long kv_end = flashcl_kv_end(hd, row_last, win_right);

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
        FLASHCL_SHARED_FOR(int, e, BLOCK_N * D4, lid, WG_SIZE) {
            int j = e / D4, c4 = e - j * D4;
            long key = key0 + j;
            Kt[e] = key < hd.sk ? flashcl_ld4(Kb + key * k_sr, c4, HEAD_DIM) : (float4)(0.0f);
        }
        FLASHCL_SHARED_FOR(int, e, BLOCK_N * DV4, lid, WG_SIZE) {
            int j = e / DV4, c4 = e - j * DV4;
            long key = key0 + j;
            Vt[e] = key < hd.sk ? flashcl_ld4(Vb + key * v_sr, c4, HEAD_DIM_V) : (float4)(0.0f);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#define K_ROW4(j, c4) Kt[(j) * D4 + (c4)]
#define V_ROW4(j, c4) Vt[(j) * DV4 + (c4)]
#else
        /* Direct reads: clamp the row so the tail tile never reads past the view. */
#define KEY_ROW(j) min(key0 + (j), hd.sk - 1)
#define K_ROW4(j, c4) flashcl_ld4(Kb + KEY_ROW(j) * k_sr, (c4), HEAD_DIM)
#define V_ROW4(j, c4) flashcl_ld4(Vb + KEY_ROW(j) * v_sr, (c4), HEAD_DIM_V)
#endif
        const int plain = !HAS_SCORE_TERMS && flashcl_tile_plain(hd, row0, row_last, key0, key_last, win_left, win_right);
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

        const float m_new = fmax(m, tile_max);
        const float base = flashcl_safe_base(m_new);
        const float alpha = exp2(m - base);
        l *= alpha;
        for (int c4 = 0; c4 < DV4; ++c4) acc[c4] *= alpha;
        for (int j = 0; j < BLOCK_N; j += KEY_STEP) {
            float p0 = exp2(s[j + 0] - base), p1 = exp2(s[j + 1] - base);
            float p2 = exp2(s[j + 2] - base), p3 = exp2(s[j + 3] - base);
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
        m = m_new;
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
    const float inv_l = l > 0.0f ? alpha / l : 0.0f;
    __global store_t *Or = O + VIEW_BASE(o, b, h) + (hd.q0 + row) * o_sr;
    for (int c4 = 0; c4 < DV4; ++c4) flashcl_st4(Or, c4, acc[c4] * inv_l, HEAD_DIM_V);
    if (write_lse) LSE[lse_off + flashcl_row_index(hd, b, h, heads_q, seqlen_q, row)] = flash_lse(m, l);
}
#endif

#if FLASH_KERNEL == FLASH_KERNEL_SPLIT
/* Padding by one float puts rows of the local tiles in different banks. */
#define LDS (HEAD_DIM + 1)
#define KEYS_PER_THREAD (BLOCK_N / THREADS_PER_ROW)
#define DIMS_PER_THREAD ((HEAD_DIM + THREADS_PER_ROW - 1) / THREADS_PER_ROW)

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void flash_fwd_split(__global const float *Q, VIEW_ARGS(q),
                     __global const float *K, VIEW_ARGS(k),
                     __global const float *V, VIEW_ARGS(v),
                     __global float *O, VIEW_ARGS(o),
                     FWD_ARGS)
{
    /* Plain attention only (the planner never picks this kernel for variants):
       float storage, one sequence per batch entry, causal at most. */
    const int lid = (int)get_local_id(0);
    const int r = lid / THREADS_PER_ROW;  /* row within the block */
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

    FLASHCL_SHARED_FOR(int, e, BLOCK_M * HEAD_DIM, lid, WG_SIZE) {
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
        FLASHCL_SHARED_FOR(int, e, BLOCK_N * HEAD_DIM, lid, WG_SIZE) {
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

        const float m_new = fmax(m, tile_max);
        const float base = flashcl_safe_base(m_new);
        const float alpha = exp2(m - base);
        l_part *= alpha;
        for (int kk = 0; kk < KEYS_PER_THREAD; ++kk) {
            float p = exp2(s[kk] - base);
            l_part += p;
            Pt[r * BLOCK_N + t + kk * THREADS_PER_ROW] = p;
        }
        m = m_new;
        barrier(CLK_LOCAL_MEM_FENCE);

        for (int k = 0; k < DIMS_PER_THREAD; ++k) {
            int c = t + k * THREADS_PER_ROW;
            if (c >= HEAD_DIM) c = HEAD_DIM - 1; /* pad lane: computed, never stored */
            float o = acc[k] * alpha;
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
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
    __global float *Or = O + VIEW_BASE(o, b, h) + row * o_sr;
    for (int k = 0; k < DIMS_PER_THREAD; ++k) {
        int c = t + k * THREADS_PER_ROW;
        if (c < HEAD_DIM) Or[c] = acc[k] * inv_l;
    }
    if (write_lse && t == 0) LSE[lse_off + flashcl_row_index(hd, b, h, heads_q, seqlen_q, row)] = flash_lse(m, l);
}
#endif

#if FLASH_KERNEL == FLASH_KERNEL_TILES
/*
 * flash_fwd_tiles: the GPU kernel. Both products are register-blocked like a
 * GEMM: a 16x16 grid of work-items, work-item (ty, tx) owning rows
 * ty*TILE_M.. and keys tx*TILE_N.. of the BLOCK_M x BLOCK_N score tile, and
 * the same rows x dims {64g + 4tx .. 64g + 4tx + 3} of the output. Owned rows,
 * keys and dims are contiguous so one 16-byte __local read feeds four FMAs
 * (a GEMM-style micro-tile is otherwise bound by __local read issue). Q and K
 * stream through __local in slices of 16 dims, P goes through __local once
 * per tile, V streams in slices of 16 keys; the output stays in registers.
 */
#define GRID 16
#define SLICE 16
#define DIM_GROUPS ((HEAD_DIM_V + 63) / 64) /* float4 output groups per work-item */
#define V_STRIDE (DIM_GROUPS * 64)          /* V slice rows, zero-padded past HEAD_DIM_V */
#define QS_STRIDE (BLOCK_M + 4)             /* +4 floats: spreads stores over banks, keeps 16-byte alignment */
#define KS_STRIDE (BLOCK_N + 4)
#define PT_STRIDE (BLOCK_M + 4)
#define QK_FLOATS (SLICE * (QS_STRIDE + KS_STRIDE))
#define STAGE_FLOATS (QK_FLOATS > SLICE * V_STRIDE ? QK_FLOATS : SLICE * V_STRIDE)

#if BLOCK_M != TILE_M * GRID || BLOCK_N != TILE_N * GRID
#error "BLOCK_M and BLOCK_N must be 16 * TILE_M and 16 * TILE_N"
#endif

/* n consecutive floats from 16-byte aligned __local memory (n <= 4). The "% (n)"
   keeps indices in range when n < 4, where that branch is dead code. */
#define LDS_READ(dst, src, n)                                    \
    do {                                                         \
        if ((n) == 4) {                                          \
            float4 t_ = vload4(0, (src));                        \
            (dst)[0] = t_.x, (dst)[1 % (n)] = t_.y;              \
            (dst)[2 % (n)] = t_.z, (dst)[3 % (n)] = t_.w;        \
        } else {                                                 \
            for (int u_ = 0; u_ < (n); ++u_) (dst)[u_] = (src)[u_]; \
        }                                                        \
    } while (0)

__kernel __attribute__((reqd_work_group_size(GRID * GRID, 1, 1)))
void flash_fwd_tiles(__global const store_t *Q, VIEW_ARGS(q),
                     __global const store_t *K, VIEW_ARGS(k),
                     __global const store_t *V, VIEW_ARGS(v),
                     __global store_t *O, VIEW_ARGS(o),
                     FWD_ARGS)
{
    const int lid = (int)get_local_id(0);
    const int tx = lid % GRID, ty = lid / GRID;
    const int nblocks = (int)get_num_groups(0);
    const int block = nblocks - 1 - (int)get_group_id(0);
    const int h = (int)get_group_id(1);
    const int b = (int)get_group_id(2);
    const int hk = h / group;
    const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    const long row0 = (long)block * BLOCK_M;
    if (row0 >= hd.sq) return; /* varlen: past this sequence (the whole group returns) */
    const long row_last = min(row0 + BLOCK_M, hd.sq) - 1;

    __global const store_t *Qb = Q + VIEW_BASE(q, b, h) + hd.q0 * q_sr;
    __global const store_t *Kb = K + VIEW_BASE(k, b, hk) + hd.k0 * k_sr;
    __global const store_t *Vb = V + VIEW_BASE(v, b, hk) + hd.k0 * v_sr;

    /* stage holds [Q slice | K slice] while scoring and the V slice during PV. */
    __local float stage[STAGE_FLOATS] __attribute__((aligned(16)));
    __local float Pt[BLOCK_N * PT_STRIDE] __attribute__((aligned(16))); /* P transposed: [key][row] */
    __local float red[BLOCK_M * GRID];
    __local float *Qs = stage;                      /* [SLICE][QS_STRIDE] */
    __local float *Ks = stage + SLICE * QS_STRIDE;  /* [SLICE][KS_STRIDE] */
    __local float *Vs = stage;                      /* [SLICE][V_STRIDE] */
#if HAS_MASK
    __local int tile_live;
#endif

    float4 acc[TILE_M][DIM_GROUPS];
    float m[TILE_M], l_part[TILE_M];
    for (int i = 0; i < TILE_M; ++i) {
        for (int g = 0; g < DIM_GROUPS; ++g) acc[i][g] = (float4)(0.0f);
        m[i] = FLASHCL_NEG_INF;
        l_part[i] = 0.0f;
    }

    const long kv_begin = flashcl_kv_begin(hd, row0, BLOCK_N, win_left);
    const long kv_end = flashcl_kv_end(hd, row_last, win_right);
    for (long key0 = kv_begin; key0 < kv_end; key0 += BLOCK_N) {
        const long key_last = key0 + BLOCK_N - 1;
        if (flashcl_tile_skipped(hd, row0, row_last, key0, key_last, VARIANT_PASS)) continue;
#if HAS_MASK
        /* A tile the boolean mask hides from every row is not loaded either. */
        if (lid == 0) tile_live = 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        {
            int any = 0;
            for (int i = 0; i < TILE_M; ++i) {
                long row = row0 + ty * TILE_M + i;
                for (int j = 0; j < TILE_N; ++j) {
                    long key = key0 + tx * TILE_N + j;
                    if (row < hd.sq && key < hd.sk) any |= mask[hd.mask_at + (ulong)row * mask_sr + (ulong)key] != 0;
                }
            }
            if (any) atomic_or(&tile_live, 1);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const int live = tile_live;
        barrier(CLK_LOCAL_MEM_FENCE); /* everyone has read the flag before it is reset */
        if (!live) continue;
#endif
        float s[TILE_M][TILE_N];
        for (int i = 0; i < TILE_M; ++i)
            for (int j = 0; j < TILE_N; ++j) s[i][j] = 0.0f;

        /* S = (scale*log2e*Q) K^T, 16 dims at a time. */
        for (int c0 = 0; c0 < HEAD_DIM; c0 += SLICE) {
            FLASHCL_SHARED_FOR(int, e, SLICE * BLOCK_M, lid, GRID * GRID) {
                int r = e / SLICE, c = e - r * SLICE;
                long qi = row0 + r;
                Qs[c * QS_STRIDE + r] =
                    (qi < hd.sq && c0 + c < HEAD_DIM) ? FLASHCL_LOAD(Qb, qi * q_sr + c0 + c) * scale_log2 : 0.0f;
            }
            FLASHCL_SHARED_FOR(int, e, SLICE * BLOCK_N, lid, GRID * GRID) {
                int r = e / SLICE, c = e - r * SLICE;
                long kj = key0 + r;
                Ks[c * KS_STRIDE + r] = (kj < hd.sk && c0 + c < HEAD_DIM) ? FLASHCL_LOAD(Kb, kj * k_sr + c0 + c) : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int c = 0; c < SLICE; ++c) {
                float a[TILE_M], bk[TILE_N];
                LDS_READ(a, Qs + c * QS_STRIDE + ty * TILE_M, TILE_M);
                LDS_READ(bk, Ks + c * KS_STRIDE + tx * TILE_N, TILE_N);
                for (int i = 0; i < TILE_M; ++i)
                    for (int j = 0; j < TILE_N; ++j) s[i][j] = fma(a[i], bk[j], s[i][j]);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }

        /* Score terms and masks, then the row max across the 16 work-items sharing each row. */
        /* Every loop over s[i][j] is unrolled explicitly: with the (large, inlined)
           score code inside, NVIDIA's compiler stopped unrolling on its own, s
           became a dynamically indexed array in local memory, and the plain
           forward lost a third of its speed. */
        const int plain = !HAS_SCORE_TERMS && flashcl_tile_plain(hd, row0, row_last, key0, key_last, win_left, win_right);
        if (!plain) {
#pragma unroll
            for (int i = 0; i < TILE_M; ++i) {
                const long row = row0 + ty * TILE_M + i;
#pragma unroll
                for (int j = 0; j < TILE_N; ++j)
                    s[i][j] = row < hd.sq ? flashcl_score(s[i][j], hd, row, key0 + tx * TILE_N + j, VARIANT_PASS)
                                          : FLASHCL_NEG_INF;
            }
        }
#pragma unroll
        for (int i = 0; i < TILE_M; ++i) {
            float mx = FLASHCL_NEG_INF;
#pragma unroll
            for (int j = 0; j < TILE_N; ++j) mx = fmax(mx, s[i][j]);
            red[(ty * TILE_M + i) * GRID + tx] = mx;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
        for (int i = 0; i < TILE_M; ++i) {
            float mx = m[i];
            for (int u = 0; u < GRID; ++u) mx = fmax(mx, red[(ty * TILE_M + i) * GRID + u]);
            const float base = flashcl_safe_base(mx);
            const float alpha = exp2(m[i] - base);
            m[i] = mx;
            l_part[i] *= alpha;
            for (int g = 0; g < DIM_GROUPS; ++g) acc[i][g] *= alpha;
#pragma unroll
            for (int j = 0; j < TILE_N; ++j) {
                float p = exp2(s[i][j] - base);
                l_part[i] += p;
#if HAS_DROPOUT
                /* The normaliser counts every probability; only P V sees the dropped ones. */
                const long row = row0 + ty * TILE_M + i;
                if (row < hd.sq) p *= flashcl_dropout_factor(hd, row, key0 + tx * TILE_N + j, VARIANT_PASS);
#endif
                Pt[(tx * TILE_N + j) * PT_STRIDE + ty * TILE_M + i] = p;
            }
        }

        /* O += P V, 16 keys at a time. */
        for (int j0 = 0; j0 < BLOCK_N; j0 += SLICE) {
            barrier(CLK_LOCAL_MEM_FENCE); /* Pt complete; the previous slice's readers are done */
            FLASHCL_SHARED_FOR(int, e, SLICE * V_STRIDE, lid, GRID * GRID) {
                int r = e / V_STRIDE, c = e - r * V_STRIDE;
                long kj = key0 + j0 + r;
                Vs[e] = (kj < hd.sk && c < HEAD_DIM_V) ? FLASHCL_LOAD(Vb, kj * v_sr + c) : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int jj = 0; jj < SLICE; ++jj) {
                float p[TILE_M];
                LDS_READ(p, Pt + (j0 + jj) * PT_STRIDE + ty * TILE_M, TILE_M);
                for (int g = 0; g < DIM_GROUPS; ++g) {
                    float4 vv = vload4(0, Vs + jj * V_STRIDE + g * 64 + tx * 4);
                    for (int i = 0; i < TILE_M; ++i) acc[i][g] = fma((float4)(p[i]), vv, acc[i][g]);
                }
            }
        }
        /* The next tile's Q/K slices overwrite stage and red is rewritten. */
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    for (int i = 0; i < TILE_M; ++i) red[(ty * TILE_M + i) * GRID + tx] = l_part[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = 0; i < TILE_M; ++i) {
        long row = row0 + ty * TILE_M + i;
        float l = 0.0f;
        for (int u = 0; u < GRID; ++u) l += red[(ty * TILE_M + i) * GRID + u];
        if (row >= hd.sq) continue;
        float mi = m[i];
        const float alpha = flashcl_fold_sink(&mi, &l, hd.sink2);
        const float inv_l = l > 0.0f ? alpha / l : 0.0f;
        __global store_t *Or = O + VIEW_BASE(o, b, h) + (hd.q0 + row) * o_sr;
        for (int g = 0; g < DIM_GROUPS; ++g) flashcl_st4(Or, g * 16 + tx, acc[i][g] * inv_l, HEAD_DIM_V);
        if (write_lse && tx == 0) LSE[lse_off + flashcl_row_index(hd, b, h, heads_q, seqlen_q, row)] = flash_lse(mi, l);
    }
}
#endif
