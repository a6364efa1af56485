/*
 * FlashAttention forward for GPUs, flash_fwd_tiles: the online softmax of
 * cl/flash_fwd_rows.cl (see there) with both products register-blocked like a
 * GEMM: a 16x16 grid of work-items, work-item (ty, tx) owning rows
 * ty*TILE_M.. and keys tx*TILE_N.. of the BLOCK_M x BLOCK_N score tile, and
 * the same rows x dims {64g + 4tx .. 64g + 4tx + 3} of the output (and, for a
 * d_v that ends in a partial group, 1-3 dims per work-item of it). Owned rows,
 * keys and dims are contiguous so one 16-byte __local read feeds four FMAs
 * (a GEMM-style micro-tile is otherwise bound by __local read issue). Q and K
 * stream through __local in slices of 16 dims, P goes through __local once
 * per tile, V streams in slices of 16 keys; the output stays in registers.
 *
 * The slices are software-pipelined: each work-item loads its share of the
 * next slice from global memory into registers before the FMAs of the
 * current one and stores it to __local after them (a barrier on each side of
 * the store), so the loads' latency hides behind the FMAs instead of stalling
 * the work-group at every slice. A tile's first Q/K slice is loaded without
 * overlap; its first V slice overlaps the last Q/K slice. Measured on an H100
 * against the unpipelined form (`flashcl bench --path flash`, b4 h16 N4096
 * d128): float32 18.3 -> 22.2 TFLOP/s, bf16 storage (forced onto this kernel)
 * 17.0 -> 17.7. Two alternating __local stages (one barrier per slice) ran
 * float32 slower (21.1) and bf16 within 2% (18.0): one stage is kept.
 *
 * P^T shares its __local with the Q/K slices and the row maxima share the V slice's (neither pair
 * is live at once), which makes room for 128-row tiles up to d = 128 under 48 KiB (41 KiB there):
 * on an H100 (float32, b4 h16 N4096) 1.23x at d = 32, 1.14x at 64 and 1.15x at 128 against
 * 64x64; 128-key tiles ran slower. Keeping the first V slice in registers until the maxima are
 * read also drops a barrier per tile: 96x64 at d = 128 went 23.3 -> 24.6 TF/s with it.
 *
 * __local reads per FMA, three changes measured together on an H100 (float32, b4 h16 N4096, the
 * table's tiles, TF/s): each warp a 4 x 8 block of the grid (see tx/ty below), the row maxima
 * padded off each other's banks (RED_AT), and a narrow tail group of output dims where d_v is not
 * near a multiple of 64 (before, d_v = 96 paid P V FMAs for 128). d = 128 25.72 -> 26.30, causal
 * 23.95 -> 24.40, d = 64 (128x64) 24.18 -> 24.92, 96 22.10 -> 24.26, 80 20.03 -> 24.02, 160
 * 18.64 -> 21.99 (22.45 without the padding, which gained 1-2.5% at every other d and is kept).
 *
 * Grid: (query blocks * 256, heads_q, batch), query blocks in reverse so the
 * heavy (late) blocks of a causal problem start first.
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
#ifndef TILE_M
#define TILE_M 4
#endif
#ifndef TILE_N
#define TILE_N 4
#endif
#ifndef BLOCK_M
#define BLOCK_M (16 * TILE_M)
#endif
#ifndef BLOCK_N
#define BLOCK_N (16 * TILE_N)
#endif

#define GRID 16
#define SLICE 16
/* Output dims: full groups of 64 (a float4 per work-item), then a narrow tail of TAIL_W dims per
   work-item (1-3) where d_v mod 64 is at most 48, so d_v = 80 or 96 does not pay P V FMAs for 128. */
#define TAIL_W_ROUNDED ((HEAD_DIM_V % 64 + 15) / 16)
#define DIM_GROUPS (HEAD_DIM_V / 64 + (TAIL_W_ROUNDED == 4)) /* float4 output groups per work-item */
#define TAIL_W (TAIL_W_ROUNDED == 4 ? 0 : TAIL_W_ROUNDED)
#define TAIL0 (DIM_GROUPS * 64)          /* the tail's first dim */
#define V_STRIDE (TAIL0 + TAIL_W * GRID) /* V slice rows, zero-padded past HEAD_DIM_V */
#define QS_STRIDE (BLOCK_M + 4)             /* +4 floats: spreads stores over banks, keeps 16-byte alignment */
#define KS_STRIDE (BLOCK_N + 4)
#define PT_STRIDE (BLOCK_M + 4)
#define QK_FLOATS (SLICE * (QS_STRIDE + KS_STRIDE))
#define PT_FLOATS (BLOCK_N * PT_STRIDE)
/* The Q/K slices (scoring) and P^T (P V) are never live at once: they share one region. */
#define QKP_FLOATS (QK_FLOATS > PT_FLOATS ? QK_FLOATS : PT_FLOATS)
/* Likewise the V slice (P V) and the row maxima (between the products): the first V slice waits in
   registers until the maxima have been read. Row r's 16 partial maxima start at RED_AT(r): 4 floats
   of padding per TILE_M rows put the rows of the 4 ty values sharing a warp on different banks. */
#define RED_AT(r) ((r) * GRID + ((r) / TILE_M) * 4)
#define RED_FLOATS (BLOCK_M * GRID + GRID * 4)
#define VR_FLOATS (SLICE * V_STRIDE > RED_FLOATS ? SLICE * V_STRIDE : RED_FLOATS)

#if BLOCK_M != TILE_M * GRID || BLOCK_N != TILE_N * GRID
#error "BLOCK_M and BLOCK_N must be 16 * TILE_M and 16 * TILE_N"
#endif

/* 16-byte global loads of the Q/K and V slices where every row starts 16-byte aligned (checked at run
   time, uniform per work-group, so misaligned views keep the scalar loads) and the slices hold whole
   float4 shares. One bounds check per 4 floats instead of per float, and a quarter of the load
   instructions: H200, float32, b4 h16 N4096, the same build, 26.24 -> 29.04 TF/s at d = 128 (45.3% ->
   50.2% of the FMA rate), causal 24.35 -> 27.13, d = 64 24.86 -> 26.15, d = 192 21.92 -> 27.10;
   d = 32 and 72 unchanged (docs/nvidia.md). */
#define VEC_QK (HEAD_DIM % SLICE == 0 && TILE_M % 4 == 0 && TILE_N % 4 == 0)
#define VEC_V (HEAD_DIM_V % 4 == 0 && V_STRIDE % 64 == 0)

__kernel __attribute__((reqd_work_group_size(GRID * GRID, 1, 1))) void
flash_fwd_tiles(__global const store_t *Q, VIEW_ARGS(q), __global const store_t *K, VIEW_ARGS(k),
                __global const store_t *V, VIEW_ARGS(v), __global store_t *O, VIEW_ARGS(o), FWD_ARGS) {
    const int lid = (int)get_local_id(0);
    /* Each 32 work-items (an NVIDIA warp) form a 4 x 8 block of the grid, not 2 x 16: with 4 keys
       or dims a work-item (the table's 64-key tiles), a 16-byte __local read of K or V then has 8
       distinct addresses (128 bytes, one wavefront) instead of 16 (two), while a Q or P read has 4
       instead of 2 (one wavefront either way). Any bijection is correct; this one reads less
       __local per FMA wherever 32 work-items run in lockstep (a 64-wide wave is 4 x 16 as before). */
    const int tx = (lid & 7) | ((lid >> 5) & 1) << 3, ty = ((lid >> 3) & 3) | (lid >> 6) << 2;
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
    const long row_last = min(row0 + BLOCK_M, hd.sq) - 1;

    __global const store_t *Qb = Q + VIEW_BASE(q, b, h) + hd.q0 * q_sr;
    __global const store_t *Kb = K + VIEW_BASE(k, b, hk) + hd.k0 * k_sr;
    __global const store_t *Vb = V + VIEW_BASE(v, b, hk) + hd.k0 * v_sr;

    /* stage holds [Q slice | K slice] while scoring and P transposed ([key][row], Pt) during P V, when
       vstage holds the V slice. Sharing one region lets 128-key (or 128-row) tiles fit 48 KiB. */
    __local float stage[QKP_FLOATS] __attribute__((aligned(16)));
    __local float vstage[VR_FLOATS] __attribute__((aligned(16)));
    __local float *const Pt = stage;
    __local float *const red = vstage; /* 16 partial maxima (and sums at the end) per row, at RED_AT */
#if HAS_MASK
    __local int tile_live;
#endif

    float4 acc[TILE_M][DIM_GROUPS > 0 ? DIM_GROUPS : 1];
#if TAIL_W
    float acc_tail[TILE_M][TAIL_W]; /* dims TAIL0 + tx * TAIL_W .. */
#endif
    float m[TILE_M], l_part[TILE_M];
    for (int i = 0; i < TILE_M; ++i) {
        for (int g = 0; g < DIM_GROUPS; ++g) acc[i][g] = (float4)(0.0f);
#if TAIL_W
        for (int w = 0; w < TAIL_W; ++w) acc_tail[i][w] = 0.0f;
#endif
        m[i] = FLASHCL_NEG_INF;
        l_part[i] = 0.0f;
    }

    /* A work-item's share of a slice (element lid + 256 t of it): TILE_M Q and TILE_N K values
       (row lid / 16 + 16 t, dim lid % 16) or V_SHARE V values (key, dim from e / V_STRIDE). */
#define V_SHARE (SLICE * V_STRIDE / (GRID * GRID))
    float q_next[TILE_M], k_next[TILE_N], v_next[V_SHARE];
    const int share_r = lid / SLICE, share_c = lid % SLICE;
    /* The vector forms: float4 e of a slice is row e / 4, dims 4 (e % 4).. (Q, K), or the 4 floats
       from 4 e of the row-major V slice; a work-item takes e = lid + 256 u. */
#if VEC_QK
    const int vec_qk = FLASHCL_ROWS_ALIGNED(Qb, q_sr) && FLASHCL_ROWS_ALIGNED(Kb, k_sr);
#define LOAD_QK_VEC(c0)                                                                                                \
    do {                                                                                                               \
        for (int u_ = 0; u_ < TILE_M / 4; ++u_) {                                                                      \
            const int e_ = lid + u_ * GRID * GRID;                                                                     \
            const long qi_ = row0 + e_ / 4;                                                                            \
            const float4 x_ = qi_ < hd.sq ? FLASHCL_LOAD4_ALIGNED(Qb, qi_ * q_sr + (c0) + (e_ % 4) * 4) * scale_log2   \
                                          : (float4)(0.0f);                                                            \
            FLASHCL_UNPACK4(q_next + 4 * u_, x_);                                                                      \
        }                                                                                                              \
        for (int u_ = 0; u_ < TILE_N / 4; ++u_) {                                                                      \
            const int e_ = lid + u_ * GRID * GRID;                                                                     \
            const long kj_ = key0 + e_ / 4;                                                                            \
            const float4 x_ =                                                                                          \
                kj_ < hd.sk ? FLASHCL_LOAD4_ALIGNED(Kb, kj_ * k_sr + (c0) + (e_ % 4) * 4) : (float4)(0.0f);            \
            FLASHCL_UNPACK4(k_next + 4 * u_, x_);                                                                      \
        }                                                                                                              \
    } while (0)
#define STORE_QK_VEC()                                                                                                 \
    do {                                                                                                               \
        for (int u_ = 0; u_ < TILE_M / 4; ++u_) {                                                                      \
            const int e_ = lid + u_ * GRID * GRID, r_ = e_ / 4, c_ = (e_ % 4) * 4;                                     \
            for (int w_ = 0; w_ < 4; ++w_) stage[(c_ + w_) * QS_STRIDE + r_] = q_next[4 * u_ + w_];                    \
        }                                                                                                              \
        for (int u_ = 0; u_ < TILE_N / 4; ++u_) {                                                                      \
            const int e_ = lid + u_ * GRID * GRID, r_ = e_ / 4, c_ = (e_ % 4) * 4;                                     \
            for (int w_ = 0; w_ < 4; ++w_) stage[SLICE * QS_STRIDE + (c_ + w_) * KS_STRIDE + r_] = k_next[4 * u_ + w_]; \
        }                                                                                                              \
    } while (0)
#else
    const int vec_qk = 0;
#define LOAD_QK_VEC(c0)                                                                                                \
    do {                                                                                                               \
    } while (0)
#define STORE_QK_VEC()                                                                                                 \
    do {                                                                                                               \
    } while (0)
#endif
#if VEC_V
    const int vec_v = FLASHCL_ROWS_ALIGNED(Vb, v_sr);
#define LOAD_V_VEC(j0)                                                                                                 \
    do {                                                                                                               \
        for (int u_ = 0; u_ < V_SHARE / 4; ++u_) {                                                                     \
            const int f_ = 4 * (lid + u_ * GRID * GRID), r_ = f_ / V_STRIDE, c_ = f_ - r_ * V_STRIDE;                  \
            const long kj_ = key0 + (j0) + r_;                                                                         \
            const float4 x_ =                                                                                          \
                (kj_ < hd.sk && c_ < HEAD_DIM_V) ? FLASHCL_LOAD4_ALIGNED(Vb, kj_ * v_sr + c_) : (float4)(0.0f);        \
            FLASHCL_UNPACK4(v_next + 4 * u_, x_);                                                                      \
        }                                                                                                              \
    } while (0)
#define STORE_V_VEC()                                                                                                  \
    do {                                                                                                               \
        for (int u_ = 0; u_ < V_SHARE / 4; ++u_)                                                                       \
            vstore4(FLASHCL_PACK4(v_next + 4 * u_), 0, vstage + 4 * (lid + u_ * GRID * GRID));                         \
    } while (0)
#else
    const int vec_v = 0;
#define LOAD_V_VEC(j0)                                                                                                 \
    do {                                                                                                               \
    } while (0)
#define STORE_V_VEC()                                                                                                  \
    do {                                                                                                               \
    } while (0)
#endif
    /* Q (times scale_log2) and K dims c0.. of rows row0.. and keys key0.. -> q_next, k_next. */
#define LOAD_QK(c0)                                                                                                    \
    do {                                                                                                               \
        if (vec_qk) {                                                                                                  \
            LOAD_QK_VEC(c0);                                                                                           \
            break;                                                                                                     \
        }                                                                                                              \
        const int c_ = (c0) + share_c;                                                                                 \
        for (int t_ = 0; t_ < TILE_M; ++t_) {                                                                          \
            const long qi_ = row0 + share_r + t_ * SLICE;                                                              \
            q_next[t_] = (qi_ < hd.sq && c_ < HEAD_DIM) ? FLASHCL_LOAD(Qb, qi_ * q_sr + c_) * scale_log2 : 0.0f;       \
        }                                                                                                              \
        for (int t_ = 0; t_ < TILE_N; ++t_) {                                                                          \
            const long kj_ = key0 + share_r + t_ * SLICE;                                                              \
            k_next[t_] = (kj_ < hd.sk && c_ < HEAD_DIM) ? FLASHCL_LOAD(Kb, kj_ * k_sr + c_) : 0.0f;                    \
        }                                                                                                              \
    } while (0)
#define STORE_QK()                                                                                                     \
    do {                                                                                                               \
        if (vec_qk) {                                                                                                  \
            STORE_QK_VEC();                                                                                            \
            break;                                                                                                     \
        }                                                                                                              \
        for (int t_ = 0; t_ < TILE_M; ++t_) stage[share_c * QS_STRIDE + share_r + t_ * SLICE] = q_next[t_];            \
        for (int t_ = 0; t_ < TILE_N; ++t_)                                                                            \
            stage[SLICE * QS_STRIDE + share_c * KS_STRIDE + share_r + t_ * SLICE] = k_next[t_];                        \
    } while (0)
    /* V keys key0 + j0 .. (+ SLICE), every dim (zeros past HEAD_DIM_V) -> v_next. */
#define LOAD_V(j0)                                                                                                     \
    do {                                                                                                               \
        if (vec_v) {                                                                                                   \
            LOAD_V_VEC(j0);                                                                                            \
            break;                                                                                                     \
        }                                                                                                              \
        for (int t_ = 0; t_ < V_SHARE; ++t_) {                                                                         \
            const int e_ = lid + t_ * GRID * GRID, r_ = e_ / V_STRIDE, c_ = e_ - r_ * V_STRIDE;                        \
            const long kj_ = key0 + (j0) + r_;                                                                         \
            v_next[t_] = (kj_ < hd.sk && c_ < HEAD_DIM_V) ? FLASHCL_LOAD(Vb, kj_ * v_sr + c_) : 0.0f;                  \
        }                                                                                                              \
    } while (0)
#define STORE_V()                                                                                                      \
    do {                                                                                                               \
        if (vec_v) {                                                                                                   \
            STORE_V_VEC();                                                                                             \
            break;                                                                                                     \
        }                                                                                                              \
        for (int t_ = 0; t_ < V_SHARE; ++t_) vstage[lid + t_ * GRID * GRID] = v_next[t_];                              \
    } while (0)
    /* Stores the loaded slice once every work-item is done reading the one before. */
#define STORE_NEXT(store)                                                                                              \
    do {                                                                                                               \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                                  \
        store;                                                                                                         \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                                  \
    } while (0)

    const long kv_begin = flashcl_kv_begin(hd, row0, BLOCK_N, win_left);
    const long kv_end = active ? flashcl_kv_end(hd, row_last, win_right) : kv_begin;
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

        /* S = (scale*log2e*Q) K^T, 16 dims at a time; the last slice's loads are V's first slice.
           The last slice is peeled so that the loop's body has no branch (a body choosing between
           the two loads measured 7% slower in float32 on an H100). */
#define SCORE_SLICE()                                                                                                  \
    do {                                                                                                               \
        __local const float *Qs_ = stage, *Ks_ = stage + SLICE * QS_STRIDE;                                            \
        for (int c = 0; c < SLICE; ++c) {                                                                              \
            float a[TILE_M], bk[TILE_N];                                                                               \
            FLASHCL_LDS_READ(a, Qs_ + c * QS_STRIDE + ty * TILE_M, TILE_M);                                            \
            FLASHCL_LDS_READ(bk, Ks_ + c * KS_STRIDE + tx * TILE_N, TILE_N);                                           \
            for (int i = 0; i < TILE_M; ++i)                                                                           \
                for (int j = 0; j < TILE_N; ++j) s[i][j] = fma(a[i], bk[j], s[i][j]);                                  \
        }                                                                                                              \
    } while (0)
        LOAD_QK(0);
        STORE_QK();
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int c0 = 0; c0 + SLICE < HEAD_DIM; c0 += SLICE) {
            LOAD_QK(c0 + SLICE);
            SCORE_SLICE();
            STORE_NEXT(STORE_QK());
        }
        LOAD_V(0);
        SCORE_SLICE(); /* the first V slice stays in registers until the maxima are read (red) */
#undef SCORE_SLICE

        /* Score terms and masks, then the row max across the 16 work-items sharing each row. */
        /* Every loop over s[i][j] is unrolled explicitly: with the (large, inlined)
           score code inside, NVIDIA's compiler stopped unrolling on its own, s
           became a dynamically indexed array in local memory, and the plain
           forward lost a third of its speed. */
        const int plain =
            !HAS_SCORE_TERMS && flashcl_tile_plain(hd, row0, row_last, key0, key_last, win_left, win_right);
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
            red[RED_AT(ty * TILE_M + i) + tx] = mx;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
        for (int i = 0; i < TILE_M; ++i) {
            /* The row's 16 partial maxima as four 16-byte reads. */
            __local const float *row_red = red + RED_AT(ty * TILE_M + i);
            float4 m4 = vload4(0, row_red);
#pragma unroll
            for (int u = 1; u < GRID / 4; ++u) m4 = fmax(m4, vload4(u, row_red));
            const float tile_max = fmax(fmax(m4.x, m4.y), fmax(m4.z, m4.w));
            const flashcl_online upd = flashcl_online_update(m[i], tile_max);
            m[i] = upd.m;
            l_part[i] *= upd.alpha;
            for (int g = 0; g < DIM_GROUPS; ++g) acc[i][g] *= upd.alpha;
#if TAIL_W
            for (int w = 0; w < TAIL_W; ++w) acc_tail[i][w] *= upd.alpha;
#endif
#pragma unroll
            for (int j = 0; j < TILE_N; ++j) {
                float p = exp2(s[i][j] - upd.base);
                l_part[i] += p;
#if HAS_DROPOUT
                /* The normaliser counts every probability; only P V sees the dropped ones. */
                const long row = row0 + ty * TILE_M + i;
                if (row < hd.sq) p *= flashcl_dropout_factor(hd, row, key0 + tx * TILE_N + j, VARIANT_PASS);
#endif
                s[i][j] = p;
            }
        }
        /* P transposed into Pt: a key's TILE_M rows are contiguous, 16-byte stores when TILE_M is a
           multiple of 4. */
#pragma unroll
        for (int j = 0; j < TILE_N; ++j) {
            __local float *pt = Pt + (tx * TILE_N + j) * PT_STRIDE + ty * TILE_M;
            if (TILE_M % 4 == 0) {
#pragma unroll
                for (int w = 0; w < TILE_M; w += 4)
                    vstore4((float4)(s[w % TILE_M][j], s[(w + 1) % TILE_M][j], s[(w + 2) % TILE_M][j],
                                     s[(w + 3) % TILE_M][j]),
                            0, pt + w);
            } else {
                for (int i = 0; i < TILE_M; ++i) pt[i] = s[i][j];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* Pt complete, every maximum read */
        STORE_V();
        barrier(CLK_LOCAL_MEM_FENCE);

        /* O += P V, 16 keys at a time (the first slice is in vstage already); the last slice
           peeled as above. After it, everyone is done with Pt and vstage before the next
           tile rewrites them (and red). */
#if TAIL_W
#define PV_TAIL(jj)                                                                                                    \
    do {                                                                                                               \
        float vt[TAIL_W];                                                                                              \
        for (int w = 0; w < TAIL_W; ++w) vt[w] = vstage[(jj) * V_STRIDE + TAIL0 + tx * TAIL_W + w];                    \
        for (int i = 0; i < TILE_M; ++i)                                                                               \
            for (int w = 0; w < TAIL_W; ++w) acc_tail[i][w] = fma(p[i], vt[w], acc_tail[i][w]);                        \
    } while (0)
#else
#define PV_TAIL(jj)                                                                                                    \
    do {                                                                                                               \
    } while (0)
#endif
#define PV_SLICE(j0)                                                                                                   \
    do {                                                                                                               \
        for (int jj = 0; jj < SLICE; ++jj) {                                                                           \
            float p[TILE_M];                                                                                           \
            FLASHCL_LDS_READ(p, Pt + ((j0) + jj) * PT_STRIDE + ty * TILE_M, TILE_M);                                   \
            for (int g = 0; g < DIM_GROUPS; ++g) {                                                                     \
                float4 vv = vload4(0, vstage + jj * V_STRIDE + g * 64 + tx * 4);                                       \
                for (int i = 0; i < TILE_M; ++i) acc[i][g] = fma((float4)(p[i]), vv, acc[i][g]);                       \
            }                                                                                                          \
            PV_TAIL(jj);                                                                                               \
        }                                                                                                              \
    } while (0)
        for (int j0 = 0; j0 + SLICE < BLOCK_N; j0 += SLICE) {
            LOAD_V(j0 + SLICE);
            PV_SLICE(j0);
            STORE_NEXT(STORE_V());
        }
        PV_SLICE(BLOCK_N - SLICE);
        barrier(CLK_LOCAL_MEM_FENCE);
#undef PV_SLICE
#undef PV_TAIL
    }
#undef LOAD_QK
#undef STORE_QK
#undef LOAD_V
#undef STORE_V
#undef STORE_NEXT
#undef STORE_V_VEC
#undef LOAD_V_VEC
#undef STORE_QK_VEC
#undef LOAD_QK_VEC
#undef V_SHARE

    for (int i = 0; i < TILE_M; ++i) red[RED_AT(ty * TILE_M + i) + tx] = l_part[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = 0; i < TILE_M; ++i) {
        long row = row0 + ty * TILE_M + i;
        float l = 0.0f;
        for (int u = 0; u < GRID; ++u) l += red[RED_AT(ty * TILE_M + i) + u];
        if (row >= hd.sq) continue;
        float mi = m[i];
        const float alpha = flashcl_fold_sink(&mi, &l, hd.sink2);
        const float inv_l = flashcl_row_inv(alpha, l);
        __global store_t *Or = O + VIEW_BASE(o, b, h) + (hd.q0 + row) * o_sr;
        for (int g = 0; g < DIM_GROUPS; ++g) flashcl_st4(Or, g * 16 + tx, acc[i][g] * inv_l, HEAD_DIM_V);
#if TAIL_W
        for (int w = 0; w < TAIL_W; ++w) {
            const int c = TAIL0 + tx * TAIL_W + w;
            if (c < HEAD_DIM_V) FLASHCL_STORE(Or, c, acc_tail[i][w] * inv_l);
        }
#endif
        if (write_lse && tx == 0)
            LSE[lse_off + flashcl_row_index(hd, b, h, heads_q, seqlen_q, row)] = flashcl_lse(mi, l);
    }
}
