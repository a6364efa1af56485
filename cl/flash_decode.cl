/*
 * Split-KV decoding for GPUs (the decode family, src/backends/decode): few
 * query rows against many keys, so the kernel is bound by reading K and V,
 * and all it must do well is keep enough loads in flight.
 *
 * One work-group per (block of packed rows, split, KV head, sequence). The
 * packed rows are the query rows of every query head that reads this KV head
 * (GQA), head-major: row r is query head hk * group + r / seqlen_q, query row
 * r % seqlen_q. So K and V are read once per KV head, not once per query head.
 * The split is a contiguous range of keys; with more than one split each
 * work-group writes its partial O (normalised, float32) and LSE, and
 * cl/flash_merge.cl merges them by LSE.
 *
 * The work-group is GROUPS key groups of LANES work-items. A key group reads
 * one whole K row and one V row at a time straight into registers, each lane
 * VEC consecutive elements of every LANES * VEC (one 16-byte load for 16-bit
 * storage on aligned rows), UNROLL keys at once so that every work-item has
 * 2 * UNROLL loads in flight; nothing is staged in __local and no barrier
 * runs in the key loop. Per UNROLL keys: each lane's partial dots with the
 * block's rows (Q in registers), summed over the group's lanes (PTX shuffles
 * on NVIDIA, LANE_SHFL; a __local exchange elsewhere), the variant terms
 * (flashcl_score), and each group's own online softmax over the keys it saw:
 * new max, rescale, P, and O += P V for its lanes' elements. After the last
 * key the GROUPS states of each row are merged through __local.
 *
 * Keys are addressed through a page table (PAGED), so one kernel serves
 * contiguous and paged KV caches: key j of sequence b lies in page
 * table[b][(kv_start + j) / page_size], row (kv_start + j) % page_size; a
 * contiguous cache is the one-page-per-sequence case. Without PAGED the keys
 * are the K/V views of flashcl_forward (varlen through cu_seqlens).
 *
 * Knobs: HEAD_DIM, HEAD_DIM_V, ROWS (packed rows per work-group), LANES,
 * VEC, UNROLL, WG_SIZE, ALIGNED (every K/V row starts 16-byte aligned: whole
 * vectors are loaded as such), LANE_SHFL, FP8_DENORM_MUL (fp8 decoded by one
 * multiply: the device keeps float subnormals), PAGED, CACHE_DTYPE (0: store_t,
 * 1: fp8 e4m3, 2: fp8 e5m2) and cl/variants.cl's switches; write_parts (run
 * time) selects partials (several splits) or O and LSE (one).
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
#ifndef LANES
#define LANES 16
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef WG_SIZE
#define WG_SIZE 128
#endif
#ifndef ALIGNED
#define ALIGNED 0
#endif
#ifndef LANE_SHFL
/* cl/ptx.cl, prepended to this file, compiles its PTX unless LANE_SHFL says 0: never leave it out. */
#error "LANE_SHFL must be given: 1 where the PTX shuffles are used (NVIDIA), 0 elsewhere"
#endif
#ifndef FP8_DENORM_MUL
#define FP8_DENORM_MUL 0
#endif
#ifndef FP8_CVT
#define FP8_CVT 0 /* NVIDIA sm_89+: fp8 pairs through cvt.rn.f16x2.e4m3x2 / e5m2x2 (cl/ptx.cl) */
#endif
#ifndef KV_STAGES
#define KV_STAGES 0 /* NVIDIA sm_80+: K/V of the next steps in flight through a cp.async ring in __local */
#endif
#ifndef FUSED_MERGE
#define FUSED_MERGE 0 /* NVIDIA: the last split of a block merges them (no second launch) */
#endif
#define MERGE_MAX_SPLITS 128 /* the host's cap on splits (src/backends/decode/plan.c) */
#if (FP8_CVT || FUSED_MERGE || KV_STAGES) && !LANE_SHFL
#error "FP8_CVT, FUSED_MERGE and KV_STAGES use cl/ptx.cl: NVIDIA builds only (LANE_SHFL=1)"
#endif

#if WG_SIZE % LANES != 0 || (LANES & (LANES - 1)) != 0 || LANES > 32
#error "LANES must be a power of two of at most 32 that divides WG_SIZE"
#endif
#define GROUPS (WG_SIZE / LANES)
#define BLOCK_N (GROUPS * UNROLL)                             /* keys per step of the work-group */
#define NCH ((HEAD_DIM + LANES * VEC - 1) / (LANES * VEC))    /* K chunks per lane */
#define NCHV ((HEAD_DIM_V + LANES * VEC - 1) / (LANES * VEC)) /* V chunks per lane */
#define DVP (NCHV * LANES * VEC)                              /* output row pitch in __local */
#define PART_PITCH (((HEAD_DIM_V + 15) / 16) * 16)            /* floats per partial output row (as the host) */

/* IEEE half bits (low 16) to float, subnormals, infinities and NaN included. */
inline float half_bits(uint h) {
    const uint e = (h >> 10) & 0x1fu, m = h & 0x3ffu, sign = (h & 0x8000u) << 16;
    const float sub = (float)m * 0x1p-24f;
    const uint bits = e == 31u ? (0x7f800000u | (m << 13)) : (((e + 112u) << 23) | (m << 13));
    return as_float(sign | (e == 0u ? as_uint(sub) : bits));
}

#if CACHE_DTYPE != 0
/* An fp8 byte to float by moving its exponent and mantissa into a float's (the same values as
   flashcl_e4m3_to_float / flashcl_e5m2_to_float in fewer operations): normal codes scale exactly
   by 2^(127 - bias), subnormal codes are m * 2^(1 - bias - mantissa bits). */
inline float fp8_bits(uint x) {
    const uint sign = (x & 0x80u) << 24;
#if FP8_DENORM_MUL
    /* The 7 magnitude bits as the top of a float's exponent and mantissa, then one multiply by
       2^(127 - bias): exact for normal codes and, where float arithmetic keeps subnormals (the
       host checks CL_FP_DENORM), for subnormal ones. Only NaN (e4m3) or inf/NaN (e5m2) differ. */
#if CACHE_DTYPE == 1
    const float mag = (x & 0x7fu) == 0x7fu ? NAN : as_float((x & 0x7fu) << 20) * 0x1p120f;
#else
    const float mag =
        (x & 0x7cu) == 0x7cu ? as_float(0x7f800000u | ((x & 3u) << 21)) : as_float((x & 0x7fu) << 21) * 0x1p112f;
#endif
#elif CACHE_DTYPE == 1
    const uint e = (x >> 3) & 0xfu, m = x & 7u;
    const float normal = as_float(((e + 120u) << 23) | (m << 20));
    const float mag = e == 0u ? (float)m * 0x1p-9f : ((x & 0x7fu) == 0x7fu ? NAN : normal);
#else
    const uint e = (x >> 2) & 0x1fu, m = x & 3u;
    const float normal = as_float(((e + 112u) << 23) | (m << 21));
    const float mag = e == 0u ? (float)m * 0x1p-16f : (e == 31u ? as_float(0x7f800000u | (m << 21)) : normal);
#endif
    return as_float(as_uint(mag) | sign);
}
#endif

/* VEC elements e0.. of a K/V row of `dim` elements, as float, zero past dim: the general path
   (views not on 16 bytes, head dims not a multiple of VEC), one element at a time. */
inline void lane_load(__global const cache_t *row, int e0, int dim, float *x) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) x[k] = e0 + k < dim ? CACHE_LOAD(row, e0 + k) : 0.0f;
}

/*
 * The fast path: every K/V row starts on 16 bytes and both head dims are multiples of VEC, VEC
 * elements being 16 bytes (4 float, 8 half or bfloat16, 16 fp8). A lane's share of a row is then
 * one 16-byte load, taken as raw bits and decoded only when used, so a step's loads can all be
 * in flight while the previous step is computed. Lanes past the row load its last vector (any
 * valid address: branch-free) and decode to zeros.
 */
#define RAW_BYTES (VEC * (CACHE_DTYPE ? 1 : FLASHCL_DTYPE ? 2 : 4))
#define FAST (ALIGNED && HEAD_DIM % VEC == 0 && HEAD_DIM_V % VEC == 0 && (RAW_BYTES == 16 || RAW_BYTES == 8))
#if FAST
/* A lane's VEC elements as raw words: 16 bytes, or 8 for an fp8 cache (VEC = 8: a lane then holds
   as many Q and output elements as with 16-bit storage, and twice the keys fit the same registers). */
#if RAW_BYTES == 16
typedef uint4 raw_t;
#define RAW_WORDS(w)                                                                                                   \
    { (w).x, (w).y, (w).z, (w).w }
#else
typedef uint2 raw_t;
#define RAW_WORDS(w)                                                                                                   \
    { (w).x, (w).y }
#endif
#define RAW_N (RAW_BYTES / 4)
inline raw_t raw_load(__global const cache_t *row, int e0, int dim) {
    return *(__global const raw_t *)(row + min(e0, dim - VEC));
}

inline void raw_decode(raw_t w, int valid, float *x) {
    const uint u[RAW_N] = RAW_WORDS(w);
#pragma unroll
    for (int k = 0; k < RAW_N; ++k) {
#if CACHE_DTYPE != 0 && FP8_CVT
        const float2 a = ptx_fp8x2(u[k]), b = ptx_fp8x2(u[k] >> 16);
        x[4 * k] = a.x, x[4 * k + 1] = a.y, x[4 * k + 2] = b.x, x[4 * k + 3] = b.y;
#elif CACHE_DTYPE != 0
#pragma unroll
        for (int j = 0; j < 4; ++j) x[4 * k + j] = fp8_bits((u[k] >> (8 * j)) & 0xffu);
#elif FLASHCL_DTYPE == 0
        x[k] = as_float(u[k]);
#elif FLASHCL_DTYPE == 1 && LANE_SHFL
        const float2 h = ptx_half2(u[k]);
        x[2 * k] = h.x, x[2 * k + 1] = h.y;
#elif FLASHCL_DTYPE == 1
        x[2 * k] = half_bits(u[k] & 0xffffu), x[2 * k + 1] = half_bits(u[k] >> 16);
#else
        x[2 * k] = as_float(u[k] << 16), x[2 * k + 1] = as_float(u[k] & 0xffff0000u);
#endif
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) x[k] = valid ? x[k] : 0.0f;
}
#endif

#if LANE_SHFL
/*
 * v[0..N) summed over the LANES lanes of a key group, the sums back in every lane. Halving
 * exchanges first: at each step a lane keeps half of its values (the upper half when its bit of
 * the step is set) and adds its partner's copy of that half, so after log2(LANES) steps lane l
 * holds the sums of elements l*N/LANES .. (l+1)*N/LANES - 1 (when N < LANES the last steps are
 * plain butterflies of one value); then each sum is broadcast from its lane. N/2 + N/4 + ... + N
 * shuffles instead of N * log2(LANES).
 */
#define SUM_N (UNROLL * ROWS)
#define SUM_PER_LANE (SUM_N >= LANES ? SUM_N / LANES : 1)
#define LOG2_LANES (LANES >= 32 ? 5 : LANES >= 16 ? 4 : LANES >= 8 ? 3 : LANES >= 4 ? 2 : LANES >= 2 ? 1 : 0)
inline void lane_sums(float *v, int lane) {
#pragma unroll
    for (int t = 0; t < LOG2_LANES; ++t) {
        const int m = LANES >> (t + 1), n = SUM_N >> t; /* n values left before this step */
        if (n > 1) {
            const int hn = n / 2, upper = (lane & m) != 0;
#pragma unroll
            for (int i = 0; i < hn; ++i) {
                const float send = upper ? v[i] : v[i + hn], keep = upper ? v[i + hn] : v[i];
                v[i] = keep + ptx_shfl_xor(send, m);
            }
        } else {
            v[0] += ptx_shfl_xor(v[0], m);
        }
    }
    /* Lane l now holds elements l*SUM_N/LANES + (0 .. n-1) in v[0 .. n). */
    float out[SUM_N];
#pragma unroll
    for (int i = 0; i < SUM_N; ++i) {
        const int src = SUM_N >= LANES ? i / SUM_PER_LANE : i * (LANES / SUM_N);
        out[i] = ptx_shfl_segment(v[i % SUM_PER_LANE], src, LANES);
    }
#pragma unroll
    for (int i = 0; i < SUM_N; ++i) v[i] = out[i];
}
#endif

/* Grid: (row_blocks * splits * WG_SIZE, heads_kv, batch). `heads` (KV heads per work-group) is
   the CPU kernel's; here it is always 1. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void flash_decode(
    __global const store_t *Q, VIEW_ARGS(q), __global const cache_t *K, ulong k_off, ulong k_sp, ulong k_sh, ulong k_sr,
    __global const cache_t *V, ulong v_off, ulong v_sp, ulong v_sh, ulong v_sr, __global store_t *O, VIEW_ARGS(o),
    __global float *LSE, ulong lse_off, int write_lse, __global float *Opart,
    __global float *Lpart, /* write_parts: [split][b][hq][part_sq][PART_PITCH], [..][part_sq] */
    int write_parts, int part_sq, __global const int *table, int max_pages, long page_size,
    __global const int *seqinfo, /* PAGED: per sequence {kv_start, kv_len, append row, first position} */
    __global const float *k_scale, __global const float *v_scale, int scale_per_head, int seqlen_q, int seqlen_k,
    int heads_q, int group, int splits, int row_blocks, int heads, float scale_log2, VARIANT_ARGS,
    __global int *counters /* FUSED_MERGE: one zeroed count per (row block, KV head, sequence) */) {
    const int lid = (int)get_local_id(0), g = lid / LANES, lane = lid % LANES;
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
    const int split = (int)get_group_id(0) / row_blocks, rblock = (int)get_group_id(0) % row_blocks;

    /* The sequence: query rows and keys (every query head of the group shares them). */
    long kv_start;
    const flashcl_head hd =
        flashcl_decode_sequence(b, hk * group, heads_q, seqlen_q, seqlen_k, seqinfo, &kv_start, VARIANT_PASS);
    const int packed = group * (int)hd.sq;      /* rows of this (sequence, KV head) */
    const int sqn = hd.sq > 0 ? (int)hd.sq : 1; /* divides row numbers (an empty varlen sequence has none) */
    const int row0 = rblock * ROWS;
    /* A block past a shorter sequence's rows (varlen) has no rows: it runs no key and stores
       nothing. No early return: the barriers below must be reached by every work-item. */
    const int active = row0 < packed;

    /* fp8: the K scale multiplies every score (folded into Q), the V scale every output. */
    const float kscale = flashcl_cache_scale(k_scale, scale_per_head, hk);
    const float vscale = flashcl_cache_scale(v_scale, scale_per_head, hk);

    /* My lanes' elements of the block's Q rows, scaled by scale*log2(e) (and the K scale); rows
       past `packed` are zero. Their query positions and ALiBi slopes. */
    float q[ROWS][NCH * VEC], acc[ROWS][NCHV * VEC], m[ROWS], l[ROWS], slope2[ROWS];
    long qi[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const int pr = row0 + r, h = hk * group + min(pr, max(packed - 1, 0)) / sqn;
        qi[r] = pr % sqn;
#pragma unroll
        for (int c = 0; c < NCH; ++c) {
            float x[VEC];
            const int e0 = (c * LANES + lane) * VEC;
#pragma unroll
            for (int k = 0; k < VEC; ++k)
                x[k] = pr < packed && e0 + k < HEAD_DIM
                           ? FLASHCL_LOAD(Q + VIEW_BASE(q, b, h) + (hd.q0 + qi[r]) * q_sr, e0 + k)
                           : 0.0f;
#pragma unroll
            for (int k = 0; k < VEC; ++k) q[r][c * VEC + k] = x[k] * (scale_log2 * kscale);
        }
#pragma unroll
        for (int e = 0; e < NCHV * VEC; ++e) acc[r][e] = 0.0f;
        m[r] = FLASHCL_NEG_INF;
        l[r] = 0.0f;
#if HAS_ALIBI
        slope2[r] = alibi[alibi_off + (ulong)b * alibi_sb + (ulong)h] * FLASHCL_LOG2E_F;
#else
        slope2[r] = 0.0f;
#endif
    }

    /* This split's keys: [kv_lo, kv_hi), clipped to what any row of the block can see. */
    const int first_row = row0, last_row = min(row0 + ROWS, packed) - 1;
    /* Rows are head-major: the block's query rows span at most rows i_lo..i_hi of the sequence. */
    const long i_lo = (last_row / sqn > first_row / sqn) ? 0 : first_row % sqn;
    const long i_hi = (last_row / sqn > first_row / sqn) ? hd.sq - 1 : last_row % sqn;
    const long band_lo = flashcl_key_lo(hd, i_lo, win_left), band_hi = flashcl_key_hi(hd, i_hi, win_right) + 1;
    /* Splits cut this sequence's own steps of BLOCK_N keys (never the batch's longest): with a
       fixed split count a sequence's result does not depend on the others. */
    const long steps_per_split = ((hd.sk + BLOCK_N - 1) / BLOCK_N + splits - 1) / splits;
    const long split_lo = (long)split * steps_per_split * BLOCK_N;
    const long kv_lo = max(split_lo, band_lo);
    const long kv_hi = active ? min(min(split_lo + steps_per_split * BLOCK_N, band_hi), hd.sk) : kv_lo;

#if !PAGED
    /* Row 0 of this sequence's keys for my KV head (varlen: k0 packed rows in). */
    const ulong k_base = k_off + (ulong)b * k_sp + (ulong)hk * k_sh + (ulong)hd.k0 * k_sr;
    const ulong v_base = v_off + (ulong)b * v_sp + (ulong)hk * v_sh + (ulong)hd.k0 * v_sr;
#endif
#if !LANE_SHFL
    __local float partial[WG_SIZE * UNROLL * ROWS]; /* each work-item's partial dots, for its group to sum */
    __local float sums[UNROLL * ROWS * GROUPS];     /* and the sums */
#endif

    /* Each row's visible keys within [kv_lo, kv_hi) (none for rows past `packed`) and, for
       ALiBi, its position: the mask and terms of flashcl_score, resolved once per row. */
    int lo[ROWS], hi[ROWS], qpos[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const long klo = flashcl_key_lo(hd, qi[r], win_left), khi = flashcl_key_hi(hd, qi[r], win_right);
        const int on = row0 + r < packed;
        lo[r] = on ? (int)max(klo, kv_lo) : 1;
        hi[r] = on ? (int)min(khi, kv_hi - 1) : 0;
        qpos[r] = (int)(qi[r] + hd.off);
    }

#if PAGED
    /* 32-bit page arithmetic: the host keeps every cache position below 2^31. Page sizes are
       powers of two in practice (16, 256): a shift and a mask then, not a division per key. */
    const uint psz = (uint)page_size, pshift = 31u - clz(psz);
    const int pow2 = (psz & (psz - 1u)) == 0u;
#define PAGE_OF(at) (pow2 ? (at) >> pshift : (at) / psz)
#define TABLE_AT(key) table[(long)b * max_pages + (long)PAGE_OF((uint)(kv_start + (key)))]
#define ROW_OFFSETS_IN(key, page)                                                                                      \
    const uint at_ = (uint)(kv_start + (key)), in_ = pow2 ? at_ & (psz - 1u) : at_ - PAGE_OF(at_) * psz;               \
    const ulong kr = k_off + (ulong)(page)*k_sp + (ulong)hk * k_sh + (ulong)in_ * k_sr;                                \
    const ulong vr = v_off + (ulong)(page)*v_sp + (ulong)hk * v_sh + (ulong)in_ * v_sr;
#define ROW_OFFSETS(key) ROW_OFFSETS_IN(key, TABLE_AT(key))
#else
#define ROW_OFFSETS(key) const ulong kr = k_base + (ulong)(key)*k_sr, vr = v_base + (ulong)(key)*v_sr;
#endif

#if FAST
    /* Raw K/V of the next step, fetched a step ahead. Keys are clamped into [kv_lo, kv_hi):
       past the end a lane re-reads a row it is allowed to (masked out below). */
#if PAGED
    /* The page-table entries of the keys the next FETCH loads, read one step before it, so a
       step's K/V loads never wait on a table load issued in the same step. */
    int page_next[UNROLL] = {0};
#define STEP_KEY(first, u) (int)min((first) + (u)*GROUPS + g, kv_hi - 1)
#define FETCH_ROW_OFFSETS(first, u)                                                                                    \
    ROW_OFFSETS_IN(STEP_KEY(first, u), page_next[u])                                                                   \
    page_next[u] = TABLE_AT(STEP_KEY((first) + BLOCK_N, u));
#else
#define FETCH_ROW_OFFSETS(first, u) ROW_OFFSETS((int)min((first) + (u)*GROUPS + g, kv_hi - 1))
#endif
#if KV_STAGES
    /*
     * K/V of the next KV_STAGES - 1 steps in flight through a ring in __local (cp.async), not in
     * registers: registers bounded the loads in flight (each step's raw K/V held twice, the step
     * computed and the one loading), and with them the bandwidth. Every work-item copies exactly
     * the vectors it later decodes, at [stage][u][chunk][lid] (consecutive work-items, consecutive
     * 16 bytes), and waits for its own copies only: no barrier in the loop. Steps past the split's
     * keys are not fetched (their groups are committed empty, so the count of groups stays).
     */
    __local raw_t ring[KV_STAGES][UNROLL][NCH + NCHV][WG_SIZE] __attribute__((aligned(16)));
#if RAW_BYTES == 16
#define CP_ASYNC ptx_cp_async16
#else
#define CP_ASYNC ptx_cp_async8
#endif
#define FETCH_TO(first, st)                                                                                            \
    _Pragma("unroll") for (int u = 0; u < UNROLL; ++u) {                                                               \
        FETCH_ROW_OFFSETS(first, u)                                                                                    \
        _Pragma("unroll") for (int c = 0; c < NCH; ++c)                                                                \
            CP_ASYNC(&ring[st][u][c][lid], K + kr + min((c * LANES + lane) * VEC, HEAD_DIM - VEC));                    \
        _Pragma("unroll") for (int c = 0; c < NCHV; ++c)                                                               \
            CP_ASYNC(&ring[st][u][NCH + c][lid], V + vr + min((c * LANES + lane) * VEC, HEAD_DIM_V - VEC));            \
    }
    int stage = 0;
#if PAGED
    if (kv_lo < kv_hi) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) page_next[u] = TABLE_AT(STEP_KEY(kv_lo, u));
    }
#endif
#pragma unroll
    for (int st = 0; st < KV_STAGES - 1; ++st) {
        if (kv_lo + st * BLOCK_N < kv_hi) {
            FETCH_TO(kv_lo + st * BLOCK_N, st)
        }
        ptx_cp_async_commit();
    }
#else
    raw_t kraw[UNROLL][NCH], vraw[UNROLL][NCHV];
#define FETCH(first)                                                                                                   \
    _Pragma("unroll") for (int u = 0; u < UNROLL; ++u) {                                                               \
        FETCH_ROW_OFFSETS(first, u)                                                                                    \
        _Pragma("unroll") for (int c = 0; c < NCH; ++c) kraw[u][c] =                                                   \
            raw_load(K + kr, (c * LANES + lane) * VEC, HEAD_DIM);                                                      \
        _Pragma("unroll") for (int c = 0; c < NCHV; ++c) vraw[u][c] =                                                  \
            raw_load(V + vr, (c * LANES + lane) * VEC, HEAD_DIM_V);                                                    \
    }
    if (kv_lo < kv_hi) {
#if PAGED
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) page_next[u] = TABLE_AT(STEP_KEY(kv_lo, u));
#endif
        FETCH(kv_lo)
    }
#endif
#endif

    for (long key0 = kv_lo; key0 < kv_hi; key0 += BLOCK_N) {
        int key[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) key[u] = (int)key0 + u * GROUPS + g;
#if FAST
        raw_t kcur[UNROLL][NCH], vcur[UNROLL][NCHV];
#if KV_STAGES
        {
            const long ahead = key0 + (KV_STAGES - 1) * BLOCK_N;
            const int ahead_stage = stage == 0 ? KV_STAGES - 1 : stage - 1; /* the stage computed last step */
            if (ahead < kv_hi) {
                FETCH_TO(ahead, ahead_stage)
            }
            ptx_cp_async_commit();
            ptx_cp_async_wait_step();
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
            for (int c = 0; c < NCH; ++c) kcur[u][c] = ring[stage][u][c][lid];
#pragma unroll
            for (int c = 0; c < NCHV; ++c) vcur[u][c] = ring[stage][u][NCH + c][lid];
        }
        stage = stage == KV_STAGES - 1 ? 0 : stage + 1;
#else
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
            for (int c = 0; c < NCH; ++c) kcur[u][c] = kraw[u][c];
#pragma unroll
            for (int c = 0; c < NCHV; ++c) vcur[u][c] = vraw[u][c];
        }
        FETCH(key0 + BLOCK_N)
#endif
#else
        float kx[UNROLL][NCH * VEC], vx[UNROLL][NCHV * VEC];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int live = key[u] < kv_hi;
            ROW_OFFSETS(live ? key[u] : (int)kv_lo)
#pragma unroll
            for (int c = 0; c < NCH; ++c)
                lane_load(K + kr, (c * LANES + lane) * VEC, live ? HEAD_DIM : 0, &kx[u][c * VEC]);
#pragma unroll
            for (int c = 0; c < NCHV; ++c)
                lane_load(V + vr, (c * LANES + lane) * VEC, live ? HEAD_DIM_V : 0, &vx[u][c * VEC]);
        }
#endif

        /* Scores: my lanes' partial dots, summed over the group's lanes. */
        float s[UNROLL][ROWS];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#if FAST
            float kx_u[NCH * VEC];
#pragma unroll
            for (int c = 0; c < NCH; ++c) raw_decode(kcur[u][c], (c * LANES + lane) * VEC < HEAD_DIM, &kx_u[c * VEC]);
#else
            const float *kx_u = kx[u];
#endif
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                float t = 0.0f;
#pragma unroll
                for (int e = 0; e < NCH * VEC; ++e) t = fma(q[r][e], kx_u[e], t);
                s[u][r] = t;
            }
        }
#if LANE_SHFL
        lane_sums(&s[0][0], lane);
#else
        /* Lane k of each group sums the dots k, k + LANES, ... of its group; all read the sums back. */
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
#pragma unroll
            for (int r = 0; r < ROWS; ++r) partial[(u * ROWS + r) * WG_SIZE + lid] = s[u][r];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int idx = lane; idx < UNROLL * ROWS; idx += LANES) {
            float t = 0.0f;
#pragma unroll
            for (int k = 0; k < LANES; ++k) t += partial[idx * WG_SIZE + g * LANES + k];
            sums[idx * GROUPS + g] = t;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* the next step's first barrier orders these reads before its writes */
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
#pragma unroll
            for (int r = 0; r < ROWS; ++r) s[u][r] = sums[(u * ROWS + r) * GROUPS + g];
#endif

        /* The variant terms and masks (as flashcl_score: mask, softcap, ALiBi); then this
           group's online update of each row. */
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            float mx = m[r];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                float f = s[u][r];
#if HAS_SOFTCAP
                f = softcap2 * tanh(f / softcap2);
#endif
#if HAS_ALIBI
                f -= slope2[r] * fabs((float)(qpos[r] - key[u]));
#endif
                f = key[u] >= lo[r] && key[u] <= hi[r] ? f : FLASHCL_NEG_INF;
                s[u][r] = f;
                mx = fmax(mx, f);
            }
            const float base = flashcl_safe_base(mx);
            const float alpha = exp2(m[r] - base);
            float sum = 0.0f;
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                s[u][r] = exp2(s[u][r] - base);
                sum += s[u][r];
            }
            l[r] = l[r] * alpha + sum;
            m[r] = mx;
#pragma unroll
            for (int e = 0; e < NCHV * VEC; ++e) acc[r][e] *= alpha;
        }
        /* O += P V, one key's V row decoded at a time. */
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#if FAST
            float vx_u[NCHV * VEC];
#pragma unroll
            /* A clamped key's V decodes to zeros: P is 0 there, and 0 * inf would be NaN. */
            for (int c = 0; c < NCHV; ++c)
                raw_decode(vcur[u][c], (c * LANES + lane) * VEC < HEAD_DIM_V && key[u] < kv_hi, &vx_u[c * VEC]);
#else
            const float *vx_u = vx[u];
#endif
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int e = 0; e < NCHV * VEC; ++e) acc[r][e] = fma(s[u][r], vx_u[e], acc[r][e]);
        }
    }

    /* Epilogue, row by row: the GROUPS states merged by their maxima through __local, then
       normalised; one split writes O (sinks folded in) and LSE, several write partials. */
    __local float gm[GROUPS], gl[GROUPS];
    __local float go[GROUPS * DVP];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        if (lane == 0) gm[g] = m[r], gl[g] = l[r];
        barrier(CLK_LOCAL_MEM_FENCE);
        float mx = FLASHCL_NEG_INF;
        for (int k = 0; k < GROUPS; ++k) mx = fmax(mx, gm[k]);
        const float base = flashcl_safe_base(mx);
        const float mine = exp2(m[r] - base);
#pragma unroll
        for (int c = 0; c < NCHV; ++c)
#pragma unroll
            for (int k = 0; k < VEC; ++k) go[g * DVP + (c * LANES + lane) * VEC + k] = acc[r][c * VEC + k] * mine;
        float lr = 0.0f;
        for (int k = 0; k < GROUPS; ++k) lr += gl[k] * exp2(gm[k] - base);
        barrier(CLK_LOCAL_MEM_FENCE);

        const int pr = row0 + r;
        if (pr < packed) {
            const int h = hk * group + pr / sqn;
            const long i = qi[r];
            float mr = mx;
            if (write_parts) {
                const ulong prow =
                    (((ulong)split * get_num_groups(2) + (ulong)b) * (ulong)heads_q + (ulong)h) * (ulong)part_sq +
                    (ulong)i;
                const float inv = lr > 0.0f ? vscale / lr : 0.0f;
                FLASHCL_SHARED_FOR(int, e, HEAD_DIM_V, lid, WG_SIZE) {
                    float o = 0.0f;
                    for (int k = 0; k < GROUPS; ++k) o += go[k * DVP + e];
                    Opart[prow * (ulong)PART_PITCH + (ulong)e] = o * inv;
                }
                if (lid == 0) Lpart[prow] = lr > 0.0f ? (mr + log2(lr)) / FLASHCL_LOG2E_F : FLASHCL_NEG_INF;
            } else {
                /* One split: the sinks are folded here (with several, flash_merge folds them). */
#if HAS_SINKS
                const float fold = flashcl_fold_sink(&mr, &lr, sinks[sinks_off + (ulong)h] * FLASHCL_LOG2E_F);
#else
                const float fold = 1.0f;
#endif
                const float inv = lr > 0.0f ? fold * vscale / lr : 0.0f;
                __global store_t *orow = O + VIEW_BASE(o, b, h) + (hd.q0 + i) * o_sr;
                FLASHCL_SHARED_FOR(int, e, HEAD_DIM_V, lid, WG_SIZE) {
                    float o = 0.0f;
                    for (int k = 0; k < GROUPS; ++k) o += go[k * DVP + e];
                    FLASHCL_STORE(orow, e, o * inv);
                }
                if (lid == 0 && write_lse) {
                    const ulong at = flashcl_row_index(hd, b, h, heads_q, seqlen_q, i);
                    LSE[lse_off + at] = lr > 0.0f ? (mr + log2(lr)) / FLASHCL_LOG2E_F : FLASHCL_NEG_INF;
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* before the next row overwrites gm, gl and go */
    }
#if FUSED_MERGE
    /*
     * The merge in the same launch (a second launch costs about as much as a whole decode call
     * on NVIDIA's OpenCL: ~30 us back to back): each split's group counts itself done after its
     * partials are visible GPU-wide; the one that counts last merges every split of its rows, as
     * flash_merge does (same formula, splits in order, so the result does not depend on which
     * group came last), and puts the count back to 0 for the next call. The counts are context
     * scratch, zeroed when made, used by one call at a time (calls with scratch wait for its
     * previous user).
     */
    __local int merge_here;
    __local float mw[ROWS][MERGE_MAX_SPLITS]; /* each split's LSE, then its weight, per row */
    __local float mtotal[ROWS];
    if (write_parts) {
        ptx_fence_gpu();
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid == 0) {
            __global int *count = counters + ((ulong)b * get_num_groups(1) + (ulong)hk) * (ulong)row_blocks + rblock;
            const int done = atomic_inc(count) + 1;
            merge_here = done == splits;
            if (done == splits) atomic_xchg(count, 0);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (merge_here) { /* uniform: the barriers below are reached by the whole group */
            ptx_fence_gpu();
            const ulong state_rows = get_num_groups(2) * (ulong)heads_q * (ulong)part_sq;
            /* The partial row of split 0 for packed row r (0 past `packed`: never read then). */
#define MERGE_ROW0(r)                                                                                                  \
    (row0 + (r) < packed ? ((ulong)b * (ulong)heads_q + (ulong)(hk * group + (row0 + (r)) / sqn)) * (ulong)part_sq +   \
                               (ulong)((row0 + (r)) % sqn)                                                             \
                         : 0ul)
            /* Every split's LSE of my rows, loaded side by side. */
            FLASHCL_SHARED_FOR(int, t, ROWS *splits, lid, WG_SIZE) {
                const int r = t / splits, sp = t - r * splits;
                mw[r][sp] =
                    row0 + r < packed ? ptx_load_l2(Lpart + MERGE_ROW0(r) + (ulong)sp * state_rows) : FLASHCL_NEG_INF;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            /* Per row (flash_merge's formula): max, weights exp(lse_s - base), their sum, the sink. */
            if (lid < ROWS && row0 + lid < packed) {
                const int h = hk * group + (row0 + lid) / sqn;
                const long i = (row0 + lid) % sqn;
                float mx = FLASHCL_NEG_INF;
                for (int sp = 0; sp < splits; ++sp) mx = fmax(mx, mw[lid][sp]);
#if HAS_SINKS
                const float sink = sinks[sinks_off + (ulong)h];
                mx = fmax(mx, sink);
#endif
                const float base = flashcl_safe_base(mx);
                float sum = 0.0f;
                for (int sp = 0; sp < splits; ++sp) {
                    const float w = exp(mw[lid][sp] - base);
                    mw[lid][sp] = w;
                    sum += w;
                }
#if HAS_SINKS
                const float total = sum + exp(sink - base);
#else
                const float total = sum;
#endif
                mtotal[lid] = total;
                if (write_lse)
                    LSE[lse_off + flashcl_row_index(hd, b, h, heads_q, seqlen_q, i)] =
                        total > 0.0f ? base + log(total) : FLASHCL_NEG_INF;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            /* O = sum_s w_s O_s / total. The partials were all written by this kernel (an empty
               split's as zeros), so every weight multiplies a finite row; loads go out eight at a
               time before their products, not one L2 round trip per split. */
            FLASHCL_SHARED_FOR(int, t, ROWS *HEAD_DIM_V, lid, WG_SIZE) {
                const int r = t / HEAD_DIM_V, e = t - r * HEAD_DIM_V;
                if (row0 + r < packed) {
                    __global const float *src = Opart + MERGE_ROW0(r) * (ulong)PART_PITCH + (ulong)e;
                    const ulong step = state_rows * (ulong)PART_PITCH;
                    float o = 0.0f;
                    int sp = 0;
                    for (; sp + 8 <= splits; sp += 8) {
                        float x[8];
#pragma unroll
                        for (int k = 0; k < 8; ++k) x[k] = ptx_load_l2(src + (ulong)(sp + k) * step);
#pragma unroll
                        for (int k = 0; k < 8; ++k) o += mw[r][sp + k] * x[k];
                    }
                    for (; sp < splits; ++sp) o += mw[r][sp] * ptx_load_l2(src + (ulong)sp * step);
                    const int h = hk * group + (row0 + r) / sqn;
                    const long i = (row0 + r) % sqn;
                    const float inv = mtotal[r] > 0.0f ? 1.0f / mtotal[r] : 0.0f;
                    FLASHCL_STORE(O + VIEW_BASE(o, b, h) + (hd.q0 + i) * o_sr, e, o * inv);
                }
            }
#undef MERGE_ROW0
        }
    }
#else
    (void)counters;
#endif
}
