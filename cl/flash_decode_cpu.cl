/*
 * Split-KV decoding for CPUs (the decode family on POCL): one work-item per
 * work-group, as in cl/flash_cpu.cl, each owning a block of packed GQA rows
 * (see cl/flash_decode.cl for the packing) and one split of the keys, which it
 * reads in place from the K/V views or the KV cache's pages: no packed copy.
 * The head dim runs along explicit float16 vectors; per chunk of CHUNK keys:
 * the scores of every row (each K row loaded once), the online update (new
 * max, rescale, sum) per row, then P V (each V row loaded once). Splits spread
 * one long sequence over the cores; partials are merged by cl/flash_merge.cl.
 *
 * heads > 1 (run time, at most HEADS, the size of the state arrays, so the
 * build does not depend on h_kv): one work-item takes `heads` consecutive KV
 * heads (their rows' state side by side) and walks the keys once for all of them, so a key's rows of
 * those heads, neighbours in a [.., h_kv, d] cache, are read as one run: with
 * one head per work-item each row is a head stride (4 KiB for 8 heads of 128
 * floats) from the next, in its own page, where the hardware prefetchers stop.
 *
 * Knobs: HEAD_DIM, HEAD_DIM_V, ROWS, HEADS, CHUNK, PAGED, CACHE_DTYPE and cl/variants.cl's
 * switches; write_parts (run time) selects partials or O and LSE.
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
#ifndef CHUNK
#define CHUNK 16
#endif
#ifndef HEADS
#define HEADS 1 /* the most KV heads per work-item (state arrays) */
#endif

#define D16 ((HEAD_DIM + 15) / 16)
#define DV16 ((HEAD_DIM_V + 15) / 16)
#define PART_PITCH (DV16 * 16) /* floats per partial output row (the host uses the same pitch) */

/* Sixteen elements 16*c16.. of a cache row of `dim`, zero past it. */
inline float16 cpu_ld16(__global const cache_t *row, int c16, int dim) {
    const int c = c16 * 16;
#if CACHE_DTYPE == 0 && FLASHCL_DTYPE == 0
    if (c + 16 <= dim) return vload16(0, row + c);
#elif CACHE_DTYPE == 0 && FLASHCL_DTYPE == 1
    if (c + 16 <= dim) return vload_half16(0, row + c);
#elif CACHE_DTYPE == 0
    if (c + 16 <= dim) return as_float16(convert_uint16(vload16(0, row + c)) << 16);
#endif
    float t[16];
    for (int k = 0; k < 16; ++k) t[k] = c + k < dim ? CACHE_LOAD(row, c + k) : 0.0f;
    return vload16(0, t);
}

/*
 * A software prefetch of one cache row. One KV head's rows lie a row of all
 * heads apart (4 KiB for 8 heads of 128 floats): each is in its own 4 KiB
 * page, where the hardware prefetchers stop, so without this every row costs
 * a full memory latency. Host CPU targets get clang's __builtin_prefetch per
 * 64-byte line (POCL compiles OpenCL's prefetch() to nothing); others keep
 * the portable builtin.
 */
inline void cpu_prefetch_row(__global const cache_t *row, int dim) {
#if defined(__clang__) && (defined(__x86_64__) || defined(__aarch64__))
    __global const char *p = (__global const char *)row;
    for (int c = 0; c < dim * (int)sizeof(cache_t); c += 64) __builtin_prefetch(p + c, 0, 3);
#else
    prefetch(row, (size_t)dim);
#endif
}

/* The halves go through a private array rather than .lo/.hi: the optimiser
   makes the same shuffles of it, and Oclgrind 21.10's uninitialised-value
   tracking loses the shadow of a float16 swizzle (false reports otherwise). */
inline float cpu_sum16(float16 v) {
    float t[16];
    vstore16(v, 0, t);
    vstore8(vload8(0, t) + vload8(1, t), 0, t);
    vstore4(vload4(0, t) + vload4(1, t), 0, t);
    return (t[0] + t[1]) + (t[2] + t[3]);
}

/* Grid: (row_blocks * splits, heads_kv / heads, batch), work-groups of one; heads <= HEADS. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
flash_decode_cpu(__global const store_t *Q, VIEW_ARGS(q), __global const cache_t *K, ulong k_off, ulong k_sp,
                 ulong k_sh, ulong k_sr, __global const cache_t *V, ulong v_off, ulong v_sp, ulong v_sh, ulong v_sr,
                 __global store_t *O, VIEW_ARGS(o), __global float *LSE, ulong lse_off, int write_lse,
                 __global float *Opart, __global float *Lpart, int write_parts, int part_sq, __global const int *table,
                 int max_pages, long page_size, __global const int *seqinfo, __global const float *k_scale,
                 __global const float *v_scale, int scale_per_head, int seqlen_q, int seqlen_k, int heads_q, int group,
                 int splits, int row_blocks, int heads, float scale_log2, VARIANT_ARGS) {
    const int hk0 = (int)get_group_id(1) * heads, b = (int)get_group_id(2);
    const int split = (int)get_group_id(0) / row_blocks, rblock = (int)get_group_id(0) % row_blocks;
    long kv_start;
    const flashcl_head hd =
        flashcl_decode_sequence(b, hk0 * group, heads_q, seqlen_q, seqlen_k, seqinfo, &kv_start, VARIANT_PASS);
    const int packed = group * (int)hd.sq;
    const int row0 = rblock * ROWS;
    if (row0 >= packed) return;
    const int rows = min(ROWS, packed - row0);

    /* Each KV head's rows' Q (scaled by scale*log2(e) and the K scale), ALiBi slopes; the rows'
       query positions (the same for every head). */
    float16 q[HEADS][ROWS][D16], acc[HEADS][ROWS][DV16];
    float m[HEADS][ROWS], l[HEADS][ROWS], slope2[HEADS][ROWS];
    long qi[ROWS];
    for (int r = 0; r < ROWS; ++r) qi[r] = (row0 + (r < rows ? r : 0)) % (int)hd.sq;
    for (int t = 0; t < heads; ++t) {
        const float kscale = flashcl_cache_scale(k_scale, scale_per_head, hk0 + t);
        for (int r = 0; r < ROWS; ++r) {
            const int pr = row0 + (r < rows ? r : 0);
            const int h = (hk0 + t) * group + pr / (int)hd.sq;
            __global const store_t *qrow = Q + VIEW_BASE(q, b, h) + (hd.q0 + qi[r]) * q_sr;
            for (int c = 0; c < D16; ++c) {
                float u[16];
                for (int k = 0; k < 16; ++k) u[k] = c * 16 + k < HEAD_DIM ? FLASHCL_LOAD(qrow, c * 16 + k) : 0.0f;
                q[t][r][c] = vload16(0, u) * (scale_log2 * kscale);
            }
            for (int c = 0; c < DV16; ++c) acc[t][r][c] = (float16)(0.0f);
            m[t][r] = FLASHCL_NEG_INF;
            l[t][r] = 0.0f;
#if HAS_ALIBI
            slope2[t][r] = alibi[alibi_off + (ulong)b * alibi_sb + (ulong)h] * FLASHCL_LOG2E_F;
#else
            slope2[t][r] = 0.0f;
#endif
        }
    }

    /* This split's keys, clipped to the band of the block's rows. */
    long i_lo = qi[0], i_hi = qi[0];
    for (int r = 1; r < rows; ++r) i_lo = min(i_lo, qi[r]), i_hi = max(i_hi, qi[r]);
    const long band_lo = flashcl_key_lo(hd, i_lo, win_left), band_hi = flashcl_key_hi(hd, i_hi, win_right) + 1;
    /* Splits cut this sequence's own chunks (see cl/flash_decode.cl). */
    const long tiles_per_split = ((hd.sk + CHUNK - 1) / CHUNK + splits - 1) / splits;
    const long tile_lo = (long)split * tiles_per_split * CHUNK;
    const long kv_lo = max(tile_lo, band_lo), kv_hi = min(tile_lo + (long)tiles_per_split * CHUNK, band_hi);

    for (long key0 = kv_lo; key0 < kv_hi; key0 += CHUNK) {
        const int n = (int)min((long)CHUNK, kv_hi - key0);
        /* The next chunk's rows of every head, while this one is computed. With heads > 1 a key's
           heads are neighbours in a [.., h_kv, d] cache, so these are whole contiguous runs. */
        for (long j = key0 + CHUNK; j < min(key0 + 2 * CHUNK, kv_hi); ++j)
            for (int t = 0; t < heads; ++t) {
                cpu_prefetch_row(K + flashcl_kv_row(b, j, hk0 + t, table, max_pages, page_size, kv_start, k_off, k_sp,
                                                    k_sh, k_sr, hd.k0),
                                 HEAD_DIM);
                cpu_prefetch_row(V + flashcl_kv_row(b, j, hk0 + t, table, max_pages, page_size, kv_start, v_off, v_sp,
                                                    v_sh, v_sr, hd.k0),
                                 HEAD_DIM_V);
            }
        for (int t = 0; t < heads; ++t) {
            const int hk = hk0 + t;
            float s[ROWS][CHUNK];
            for (int j = 0; j < n; ++j) {
                __global const cache_t *krow = K + flashcl_kv_row(b, key0 + j, hk, table, max_pages, page_size,
                                                                  kv_start, k_off, k_sp, k_sh, k_sr, hd.k0);
                float16 kv[D16];
                for (int c = 0; c < D16; ++c) kv[c] = cpu_ld16(krow, c, HEAD_DIM);
                for (int r = 0; r < ROWS; ++r) {
                    float16 u = q[t][r][0] * kv[0];
                    for (int c = 1; c < D16; ++c) u = fma(q[t][r][c], kv[c], u);
                    s[r][j] = cpu_sum16(u);
                }
            }
            /* The online update per row: new max over the chunk, rescale, P in place of the scores, sum. */
            for (int r = 0; r < ROWS; ++r) {
                float mx = m[t][r];
                for (int j = 0; j < n; ++j) {
                    flashcl_head hr = hd;
                    hr.slope2 = slope2[t][r];
                    const float f =
                        r < rows ? flashcl_score(s[r][j], hr, qi[r], key0 + j, VARIANT_PASS) : FLASHCL_NEG_INF;
                    s[r][j] = f;
                    mx = fmax(mx, f);
                }
                const float base = flashcl_safe_base(mx);
                const float alpha = exp2(m[t][r] - base);
#if CHUNK == 16
                /* The chunk's 16 probabilities at once (keys past n are -inf: 0). */
                for (int j = n; j < CHUNK; ++j) s[r][j] = FLASHCL_NEG_INF;
                const float16 p = flashcl_exp2_16(vload16(0, s[r]) - (float16)(base));
                vstore16(p, 0, s[r]);
                const float sum = cpu_sum16(p);
#else
                float sum = 0.0f;
                for (int j = 0; j < n; ++j) {
                    const float p = exp2(s[r][j] - base);
                    s[r][j] = p;
                    sum += p;
                }
#endif
                l[t][r] = l[t][r] * alpha + sum;
                m[t][r] = mx;
                for (int c = 0; c < DV16; ++c) acc[t][r][c] *= alpha;
            }
            for (int j = 0; j < n; ++j) {
                __global const cache_t *vrow = V + flashcl_kv_row(b, key0 + j, hk, table, max_pages, page_size,
                                                                  kv_start, v_off, v_sp, v_sh, v_sr, hd.k0);
                for (int c = 0; c < DV16; ++c) {
                    const float16 vv = cpu_ld16(vrow, c, HEAD_DIM_V);
                    for (int r = 0; r < ROWS; ++r) acc[t][r][c] = fma((float16)(s[r][j]), vv, acc[t][r][c]);
                }
            }
        }
    }

    for (int t = 0; t < heads; ++t) {
        const float vscale = flashcl_cache_scale(v_scale, scale_per_head, hk0 + t);
        for (int r = 0; r < rows; ++r) {
            const int pr = row0 + r;
            const int h = (hk0 + t) * group + pr / (int)hd.sq;
            const long i = qi[r];
            float mr = m[t][r], lr = l[t][r];
            if (write_parts) {
                const ulong prow =
                    (((ulong)split * get_num_groups(2) + (ulong)b) * (ulong)heads_q + (ulong)h) * (ulong)part_sq +
                    (ulong)i;
                const float inv = lr > 0.0f ? vscale / lr : 0.0f;
                __global float *dst = Opart + prow * (ulong)PART_PITCH;
                for (int c = 0; c < DV16; ++c) vstore16(acc[t][r][c] * inv, 0, dst + c * 16);
                Lpart[prow] = lr > 0.0f ? (mr + log2(lr)) / FLASHCL_LOG2E_F : FLASHCL_NEG_INF;
                continue;
            }
            /* One split: the sinks are folded here (with several, flash_merge folds them). */
#if HAS_SINKS
            const float fold = flashcl_fold_sink(&mr, &lr, sinks[sinks_off + (ulong)h] * FLASHCL_LOG2E_F);
#else
            const float fold = 1.0f;
#endif
            const float inv = lr > 0.0f ? fold * vscale / lr : 0.0f;
            __global store_t *orow = O + VIEW_BASE(o, b, h) + (hd.q0 + i) * o_sr;
            for (int c = 0; c < DV16; ++c) {
                float u[16];
                vstore16(acc[t][r][c] * inv, 0, u);
                for (int k = 0; k < 16 && c * 16 + k < HEAD_DIM_V; ++k) FLASHCL_STORE(orow, c * 16 + k, u[k]);
            }
            if (write_lse)
                LSE[lse_off + flashcl_row_index(hd, b, h, heads_q, seqlen_q, i)] =
                    lr > 0.0f ? (mr + log2(lr)) / FLASHCL_LOG2E_F : FLASHCL_NEG_INF;
        }
    }
}
