/*
 * Split-KV decoding for CPUs (the decode family on POCL): one work-item per
 * work-group, as in cl/flash_cpu.cl, each owning a block of packed GQA rows
 * (see cl/flash_decode.cl for the packing) and one split of the keys, which it
 * reads in place from the K/V views or the KV cache's pages: no packed copy.
 * The head dim runs along explicit float16 vectors; per chunk of CHUNK keys
 * (16 unless a tuned plan says otherwise) and KV head: the scores of every row
 * (each K row loaded once, two keys at a time, their partial dot products
 * folded into one float16 of scores per row and 16 keys: cpu_fold_keys), the online update (new max, rescale, sum) on those
 * vectors, then P V (each V row loaded once per block of CB output vectors,
 * the block's accumulators in registers over the chunk's keys). Splits spread
 * one long sequence over the cores; partials are merged by cl/flash_merge.cl.
 *
 * heads > 1 (run time, at most HEADS, the size of the state arrays, so the
 * build does not depend on h_kv): one work-item takes `heads` consecutive KV
 * heads (their rows' state side by side) and walks the keys once for all of them, so a key's rows of
 * those heads, neighbours in a [.., h_kv, d] cache, are read as one run: with
 * one head per work-item each row is a head stride (4 KiB for 8 heads of 128
 * floats) from the next, in its own page, where the hardware prefetchers stop.
 *
 * Knobs: HEAD_DIM, HEAD_DIM_V, ROWS, HEADS, CHUNK, PAGED, CACHE_DTYPE, FP8_DENORM_MUL and cl/variants.cl's
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

#if CACHE_DTYPE != 0
#ifndef FP8_DENORM_MUL
#define FP8_DENORM_MUL 0
#endif
/*
 * Sixteen fp8 codes to float at once: flashcl_e4m3_to_float / flashcl_e5m2_to_float (the same
 * values, NaN payloads aside) as lane operations; per element the scalar decode took a dozen
 * operations and a lane insert, and an fp8 cache ran slower than bf16.
 * FP8_DENORM_MUL (the host sets it where the device reports CL_FP_DENORM, as for
 * cl/flash_decode.cl's fp8_bits): the code's 7 magnitude bits as the top of a float's exponent
 * and mantissa, times 2^(127 - bias): exact for normal codes and, float arithmetic keeping
 * subnormals, for subnormal ones (a host thread running with x86's DAZ would flush those to
 * 0). Otherwise normal codes get the bias difference added to the exponent field and subnormal
 * ones m * 2^(1 - bias - mantissa bits) converted and selected: no float subnormals, four
 * operations more a vector (fp8 kvcache call 1.35x slower on POCL).
 */
inline float16 cpu_fp8_16(uchar16 bytes) {
    const uint16 x = convert_uint16(bytes);
#if FP8_DENORM_MUL && CACHE_DTYPE == 1
    const float16 mag =
        select(as_float16((x & 0x7fu) << 20) * 0x1p120f, (float16)(NAN), (x & 0x7fu) == (uint16)(0x7fu));
#elif FP8_DENORM_MUL
    const float16 mag = select(as_float16((x & 0x7fu) << 21) * 0x1p112f,
                               as_float16(((x & 3u) << 21) | (uint16)(0x7f800000u)), (x & 0x7cu) == (uint16)(0x7cu));
#elif CACHE_DTYPE == 1
    const float16 normal = as_float16(((x & 0x7fu) << 20) + (uint16)(120u << 23));
    float16 mag = select(normal, convert_float16(x & 7u) * 0x1p-9f, (x & 0x78u) == (uint16)(0u));
    mag = select(mag, (float16)(NAN), (x & 0x7fu) == (uint16)(0x7fu));
#else
    const float16 normal = as_float16(((x & 0x7fu) << 21) + (uint16)(112u << 23));
    float16 mag = select(normal, convert_float16(x & 3u) * 0x1p-16f, (x & 0x7cu) == (uint16)(0u));
    mag = select(mag, as_float16(((x & 3u) << 21) | (uint16)(0x7f800000u)), (x & 0x7cu) == (uint16)(0x7cu));
#endif
    return as_float16(as_uint16(mag) | ((x & 0x80u) << 24));
}
#endif

/* Sixteen elements 16*c16.. of a cache row of `dim`, zero past it. */
inline float16 cpu_ld16(__global const cache_t *row, int c16, int dim) {
    const int c = c16 * 16;
#if CACHE_DTYPE == 0 && FLASHCL_DTYPE == 0
    if (c + 16 <= dim) return vload16(0, row + c);
#elif CACHE_DTYPE == 0 && FLASHCL_DTYPE == 1
    /* POCL's vload_half16 moves its 32 bytes as 16-byte aligned vectors (a row of an odd multiple
       of 4 halves, d = 36, crashed it): unaligned runs take the element loop below. */
    if (c + 16 <= dim && ((size_t)(row + c) & 15) == 0) return vload_half16(0, row + c);
#elif CACHE_DTYPE == 0
    if (c + 16 <= dim) return as_float16(convert_uint16(vload16(0, row + c)) << 16);
#else
    if (c + 16 <= dim) return cpu_fp8_16(vload16(0, row + c));
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
 * the portable builtin. Locality 2 (x86: prefetcht1, towards L2): the kernel
 * asks for a chunk ahead (64 KiB of K and of V with 8 heads of 128 floats),
 * twice an L1 data cache, so into L1 (locality 3) the lines would evict the
 * rows in use and the state first (2-core Zen 4, POCL, prefetches spread over
 * the chunk: locality 3 ran 1.6x slower than 2 or 1, and 0 as slow as 3).
 */
inline void cpu_prefetch_row(__global const cache_t *row, int dim) {
#if defined(__clang__) && (defined(__x86_64__) || defined(__aarch64__))
    __global const char *p = (__global const char *)row;
    for (int c = 0; c < dim * (int)sizeof(cache_t); c += 64) __builtin_prefetch(p + c, 0, 2);
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

/* The largest lane (fmax: a NaN lane is passed over, as the scalar max of the scores did). */
inline float cpu_max16(float16 v) {
    float t[16];
    vstore16(v, 0, t);
    vstore8(fmax(vload8(0, t), vload8(1, t)), 0, t);
    vstore4(fmax(vload4(0, t), vload4(1, t)), 0, t);
    return fmax(fmax(t[0], t[1]), fmax(t[2], t[3]));
}

/*
 * The transposed reduction of the chunk's dot products. A key's dot product
 * with a row is first 16 partial sums in the lanes of a float16; rather than
 * summing each across its lanes (four shuffle and add steps per key and row),
 * pairs of such vectors are folded together: each step halves the lanes per
 * key and doubles the keys per vector, so the 16 keys' scores of a row end in
 * one float16, key j in lane j, after 15 folds (two shuffles and an add each)
 * instead of 16 horizontal sums, and the softmax that follows works on that
 * vector. cpu_fold8: a and b one key each -> 8 lanes each (a's first);
 * cpu_fold4/2/1: x and y 2/4/8 keys each in blocks of 8/4/2 lanes -> twice
 * the keys in blocks of half the lanes, x's keys first.
 */
inline float16 cpu_fold8(float16 a, float16 b) {
    return shuffle2(a, b, (uint16)(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)) +
           shuffle2(a, b, (uint16)(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31));
}
inline float16 cpu_fold4(float16 x, float16 y) {
    return shuffle2(x, y, (uint16)(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27)) +
           shuffle2(x, y, (uint16)(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31));
}
inline float16 cpu_fold2(float16 x, float16 y) {
    return shuffle2(x, y, (uint16)(0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29)) +
           shuffle2(x, y, (uint16)(2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31));
}
inline float16 cpu_fold1(float16 x, float16 y) {
    return shuffle2(x, y, (uint16)(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)) +
           shuffle2(x, y, (uint16)(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31));
}

/* w[i]: keys 2i and 2i+1 folded by cpu_fold8 -> the 16 keys' sums, key j in lane j. */
inline float16 cpu_fold_keys(const float16 *w) {
    const float16 x0 = cpu_fold4(w[0], w[1]), x1 = cpu_fold4(w[2], w[3]);
    const float16 x2 = cpu_fold4(w[4], w[5]), x3 = cpu_fold4(w[6], w[7]);
    return cpu_fold1(cpu_fold2(x0, x1), cpu_fold2(x2, x3));
}

/* Output columns (float16 vectors) per register block of the P V product: with ROWS rows a block
   holds ROWS * CB accumulators, at most 16 of AVX-512's 32 registers, and CB divides DV16 so
   every block is whole. */
#define CB_MAX (16 / ROWS)
#if DV16 % 16 == 0 && CB_MAX >= 16
#define CB 16
#elif DV16 % 8 == 0 && CB_MAX >= 8
#define CB 8
#elif DV16 % 4 == 0 && CB_MAX >= 4
#define CB 4
#elif DV16 % 3 == 0 && CB_MAX >= 3
#define CB 3
#elif DV16 % 2 == 0 && CB_MAX >= 2
#define CB 2
#else
#define CB 1
#endif

/* A chunk's keys as score vectors of 16 (key j in lane j % 16 of vector j / 16, lanes past the
   chunk masked), the key pairs the score loop takes, and the rows those pairs read. */
#define NV ((CHUNK + 15) / 16)
#define PAIRS ((CHUNK + 1) / 2)
#define PAIR_KEYS (2 * PAIRS)

/*
 * Element offsets, without the head's, of the K and V rows of keys j0 .. j0 + PAIR_KEYS - 1 of the
 * sequence (those past `last` repeat row `last`, so every entry is one of its rows): what
 * flashcl_kv_row gives, with one division and one page-table read per chunk and page instead
 * of per row and head. A contiguous KV cache is a paged one of one page per sequence, so
 * without this every row of every head cost a 64-bit division (at % page_size).
 */
inline void cpu_chunk_rows(long j0, long last, int b, __global const int *table, int max_pages, long page_size,
                           long kv_start, long k0, ulong k_off, ulong k_sp, ulong k_sr, ulong v_off, ulong v_sp,
                           ulong v_sr, ulong *krow, ulong *vrow) {
#if PAGED
    long slot = (kv_start + j0) / page_size, within = kv_start + j0 - slot * page_size;
    ulong page = (ulong)(long)table[(long)b * max_pages + slot];
    for (int j = 0; j < PAIR_KEYS; ++j) {
        krow[j] = k_off + page * k_sp + (ulong)within * k_sr;
        vrow[j] = v_off + page * v_sp + (ulong)within * v_sr;
        if (j0 + j < last && ++within == page_size) {
            within = 0;
            page = (ulong)(long)table[(long)b * max_pages + ++slot];
        }
    }
#else
    for (int j = 0; j < PAIR_KEYS; ++j) {
        const ulong row = (ulong)(k0 + min(j0 + j, last));
        krow[j] = k_off + (ulong)b * k_sp + row * k_sr;
        vrow[j] = v_off + (ulong)b * v_sp + row * v_sr;
    }
#endif
}

#define CPU_LANE_IDS ((int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))

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
       query positions (the same for every head). Rows past `rows` repeat the block's first row
       (computed, never stored). */
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
        /* Every key of the chunk visible to every row and no score terms: the scores need no
           per-element work beyond cutting the keys past n. */
        const int plain =
            !HAS_SCORE_TERMS && flashcl_tile_plain(hd, i_lo, i_hi, key0, key0 + n - 1, win_left, win_right);
        /* The rows of this chunk's keys and of the next one's (prefetched below). */
        ulong krow[PAIR_KEYS], vrow[PAIR_KEYS], knext[PAIR_KEYS], vnext[PAIR_KEYS];
        cpu_chunk_rows(key0, key0 + n - 1, b, table, max_pages, page_size, kv_start, hd.k0, k_off, k_sp, k_sr, v_off,
                       v_sp, v_sr, krow, vrow);
        const int n_next = (int)clamp(kv_hi - key0 - CHUNK, 0L, (long)CHUNK);
        if (n_next > 0)
            cpu_chunk_rows(key0 + CHUNK, key0 + CHUNK + n_next - 1, b, table, max_pages, page_size, kv_start, hd.k0,
                           k_off, k_sp, k_sr, v_off, v_sp, v_sr, knext, vnext);
        int pf_key = 0, pf_head = 0; /* the next row to prefetch: key, head (from hk0) */
        for (int t = 0; t < heads; ++t) {
            const int hk = hk0 + t;
            const ulong k_head = (ulong)hk * k_sh, v_head = (ulong)hk * v_sh;
            /* Scores, two keys at a time (keys past n repeat key n-1 and are cut below): every row's
               16-lane partial dots of both keys, folded at once to one vector (cpu_fold8). Pairs
               past the chunk (CHUNK not a multiple of 16) are zeros, cut with the keys past n. */
            float16 w[ROWS][NV * 8];
            for (int jp = PAIRS; jp < NV * 8; ++jp)
                for (int r = 0; r < ROWS; ++r) w[r][jp] = (float16)(0.0f);
            for (int jp = 0; jp < PAIRS; ++jp) {
                __global const cache_t *ka = K + krow[2 * jp] + k_head, *kb = K + krow[2 * jp + 1] + k_head;
                /* Two of the next chunk's K rows and V rows, spread over the chunk's work rather
                   than all at its start (2048 lines with 8 heads, on which the core stalled: the
                   prefetch loop held a third of the kernel's samples, and the spread form ran 1.3x
                   faster with locality 2). They go in address order, key by key and each key's
                   heads (one contiguous run per key in a [.., h_kv, d] cache), not in the order the
                   heads are computed (16 rows 4 KiB apart, then the next head's): 1.06x (median). */
                for (int u = 0; u < 2; ++u) {
                    if (pf_key < n_next) {
                        cpu_prefetch_row(K + knext[pf_key] + (ulong)(hk0 + pf_head) * k_sh, HEAD_DIM);
                        cpu_prefetch_row(V + vnext[pf_key] + (ulong)(hk0 + pf_head) * v_sh, HEAD_DIM_V);
                    }
                    if (++pf_head == heads) pf_head = 0, ++pf_key;
                }
                float16 ua[ROWS], ub[ROWS];
                {
                    const float16 xa = cpu_ld16(ka, 0, HEAD_DIM), xb = cpu_ld16(kb, 0, HEAD_DIM);
#pragma unroll
                    for (int r = 0; r < ROWS; ++r) ua[r] = q[t][r][0] * xa, ub[r] = q[t][r][0] * xb;
                }
#pragma unroll
                for (int c = 1; c < D16; ++c) {
                    const float16 xa = cpu_ld16(ka, c, HEAD_DIM), xb = cpu_ld16(kb, c, HEAD_DIM);
#pragma unroll
                    for (int r = 0; r < ROWS; ++r)
                        ua[r] = fma(q[t][r][c], xa, ua[r]), ub[r] = fma(q[t][r][c], xb, ub[r]);
                }
#pragma unroll
                for (int r = 0; r < ROWS; ++r) w[r][jp] = cpu_fold8(ua[r], ub[r]);
            }
            /* The online update per row: new max over the chunk, rescale, P, sum. */
            float p[ROWS][NV * 16], alpha[ROWS];
            for (int r = 0; r < ROWS; ++r) {
                float16 s[NV];
                for (int v = 0; v < NV; ++v) s[v] = cpu_fold_keys(&w[r][8 * v]);
                if (plain) {
                    for (int v = 0; v < NV; ++v)
                        if (n < 16 * (v + 1))
                            s[v] = select(s[v], (float16)(FLASHCL_NEG_INF), CPU_LANE_IDS >= (int16)(n - 16 * v));
                } else {
                    float f[NV * 16];
                    for (int v = 0; v < NV; ++v) vstore16(s[v], v, f);
                    flashcl_head hr = hd;
                    hr.slope2 = slope2[t][r];
                    for (int j = 0; j < NV * 16; ++j)
                        f[j] = r < rows && j < n ? flashcl_score(f[j], hr, qi[r], key0 + j, VARIANT_PASS)
                                                 : FLASHCL_NEG_INF;
                    for (int v = 0; v < NV; ++v) s[v] = vload16(v, f);
                }
                float mx = m[t][r];
                for (int v = 0; v < NV; ++v) mx = fmax(mx, cpu_max16(s[v]));
                const float base = flashcl_safe_base(mx);
                alpha[r] = exp2(m[t][r] - base);
                /* The chunk's probabilities 16 at once (-inf scores: 0). */
                float sum = 0.0f;
                for (int v = 0; v < NV; ++v) {
                    const float16 pr = flashcl_exp2_16(s[v] - (float16)(base));
                    vstore16(pr, v, p[r]);
                    sum += cpu_sum16(pr);
                }
                l[t][r] = l[t][r] * alpha[r] + sum;
                m[t][r] = mx;
            }
            /* P V, CB output vectors of every row at a time, held in registers over the chunk's keys. */
            for (int c0 = 0; c0 < DV16; c0 += CB) {
                float16 a[ROWS][CB];
#pragma unroll
                for (int r = 0; r < ROWS; ++r)
#pragma unroll
                    for (int c = 0; c < CB; ++c) a[r][c] = acc[t][r][c0 + c] * alpha[r];
                for (int j = 0; j < n; ++j) {
                    __global const cache_t *vr = V + vrow[j] + v_head;
#pragma unroll
                    for (int c = 0; c < CB; ++c) {
                        const float16 vv = cpu_ld16(vr, c0 + c, HEAD_DIM_V);
#pragma unroll
                        for (int r = 0; r < ROWS; ++r) a[r][c] = fma((float16)(p[r][j]), vv, a[r][c]);
                    }
                }
#pragma unroll
                for (int r = 0; r < ROWS; ++r)
#pragma unroll
                    for (int c = 0; c < CB; ++c) acc[t][r][c0 + c] = a[r][c];
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
                const float inv = flashcl_row_inv(vscale, lr);
                __global float *dst = Opart + prow * (ulong)PART_PITCH;
                for (int c = 0; c < DV16; ++c) vstore16(acc[t][r][c] * inv, 0, dst + c * 16);
                Lpart[prow] = lr > 0.0f ? (mr + log2(lr)) / FLASHCL_LOG2E_F : flashcl_lse_empty(lr);
                continue;
            }
            /* One split: the sinks are folded here (with several, flash_merge folds them). */
#if HAS_SINKS
            const float fold = flashcl_fold_sink(&mr, &lr, sinks[sinks_off + (ulong)h] * FLASHCL_LOG2E_F);
#else
            const float fold = 1.0f;
#endif
            const float inv = flashcl_row_inv(fold * vscale, lr);
            __global store_t *orow = O + VIEW_BASE(o, b, h) + (hd.q0 + i) * o_sr;
            for (int c = 0; c < DV16; ++c) {
                float u[16];
                vstore16(acc[t][r][c] * inv, 0, u);
                for (int k = 0; k < 16 && c * 16 + k < HEAD_DIM_V; ++k) FLASHCL_STORE(orow, c * 16 + k, u[k]);
            }
            if (write_lse)
                LSE[lse_off + flashcl_row_index(hd, b, h, heads_q, seqlen_q, i)] =
                    lr > 0.0f ? (mr + log2(lr)) / FLASHCL_LOG2E_F : flashcl_lse_empty(lr);
        }
    }
}
