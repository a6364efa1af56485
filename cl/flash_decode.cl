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
 * time) selects partials (several splits) or O and LSE (one). DECODE_MMA=1
 * (with MMA_F16) replaces the key loop by its tensor-core form, below.
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
#ifndef DECODE_MMA
#define DECODE_MMA 0 /* the packed rows as a tensor-core tile (below); off NVIDIA emulated, a test aid */
#endif
#ifndef FUSED_MERGE
#define FUSED_MERGE 0 /* NVIDIA: the last split of a block merges them (no second launch) */
#endif
#define MERGE_MAX_SPLITS 128 /* the host's cap on splits (src/backends/decode/plan.c) */
#if (FP8_CVT || FUSED_MERGE || KV_STAGES) && !LANE_SHFL
#error "FP8_CVT, FUSED_MERGE and KV_STAGES use cl/ptx.cl: NVIDIA builds only (LANE_SHFL=1)"
#endif

#if DECODE_MMA && (LANES != 32 || ROWS != 8 || KV_STAGES)
#error "DECODE_MMA: a warp per key group (LANES=32), the 8 rows of a tile's N (ROWS=8), no cp.async ring"
#endif
#if WG_SIZE % LANES != 0 || (LANES & (LANES - 1)) != 0 || LANES > 32
#error "LANES must be a power of two of at most 32 that divides WG_SIZE"
#endif
#define GROUPS (WG_SIZE / LANES)
#define NCH ((HEAD_DIM + LANES * VEC - 1) / (LANES * VEC))    /* K chunks per lane */
#define NCHV ((HEAD_DIM_V + LANES * VEC - 1) / (LANES * VEC)) /* V chunks per lane */
#if DECODE_MMA
#define BLOCK_N (GROUPS * UNROLL * 16) /* each warp UNROLL chunks of 16 keys a step */
#define DVP HEAD_DIM_V
#else
#define BLOCK_N (GROUPS * UNROLL) /* keys per step of the work-group */
#define DVP (NCHV * LANES * VEC)  /* output row pitch in __local */
#endif
#define PART_PITCH (((HEAD_DIM_V + 15) / 16) * 16) /* floats per partial output row (as the host) */

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

#if DECODE_MMA
/*
 * The tensor-core form (DECODE_MMA): a warp is a key group, and the block's 8 packed rows are the
 * N = 8 columns of the output product, the M rows of the score product (fp32 accumulate):
 *   scores  S (16 x 8 keys) = Q (16 x 16 dims: rows 8-15 zero) . K^T, per 8 keys and 16 dims;
 *   output  O^T (16 dims x 8 rows) += V^T (16 dims x 16 keys) . P^T (16 keys x 8 rows).
 * The accumulator of the first holds, in lane (fg, ft) = (lane / 4, lane % 4), row fg's scores for
 * keys 2ft, 2ft + 1 of the 8, which is exactly the B operand the second needs for row fg: P never
 * leaves registers. A dot product does not care in which order it takes its terms, so the
 * "virtual" dims of each fragment are mapped to physical ones that a lane loads in runs: for K,
 * lane (fg, ft) holds key fg's dims [ft * QD, (ft + 1) * QD) (QD = d / 4), its pairs 2s and 2s + 1
 * being k-step s's two B registers, and Q's A registers follow the same map; for V, lane (fg, ft)
 * holds keys 2ft, 2ft + 1, 2ft + 8, 2ft + 9 of the 16, dims [fg * VD, (fg + 1) * VD) (VD = d_v / 8),
 * word i of each being output tile i's two rows (virtual fg and fg + 8), paired across keys by
 * byte moves. K/V thus load in 8- or 16-byte vectors straight from memory, with no __local staging
 * and no ldmatrix, and each element is used where it lands. Per element of K or V a lane spends a
 * quarter of an mma (and half a conversion for fp8: cvt.rn.f16x2.e4m3x2 gives an operand as it
 * is) where the lane kernel above spends ROWS fmas and a decode.
 *
 * Operands are bfloat16 (MMA_F16=0: bf16 storage) or float16 (MMA_F16=1: f16 storage, fp8 caches).
 * Scores and the online softmax stay in float32; P is rounded to the operand type for P V, as in
 * FlashAttention. With an fp8 cache Q is float16: f16 storage as it is; bf16 storage with each
 * row scaled by a power of two (exact) so that its largest element is near 2^14, then rounded to
 * float16 (exact for a row within float16's range, which the scaling provides), its scores scaled
 * back. Half of each score mma multiplies the zero rows: the price of its accumulator being the
 * output product's operand.
 *
 * Off NVIDIA (LANE_SHFL=0) the mma, shuffles and conversions are emulated through __local (each
 * call a barrier): slow, but the fragment bookkeeping above runs, and is tested, on every device.
 */
#define QD (HEAD_DIM / 4)
#define VD (HEAD_DIM_V / 8)
#define MMA_ES (CACHE_DTYPE ? 1 : 2) /* bytes per cache element */
#define KWORDS (QD * MMA_ES / 4)     /* 32-bit words of a lane's share of a K row */
#define VWORDS (VD * MMA_ES / 4)     /* and of a V row */
#define KSTEPS (HEAD_DIM / 16)
#define VTILES (HEAD_DIM_V / 16)
#if HEAD_DIM % 16 || HEAD_DIM_V % 16 || (QD * MMA_ES) % 8 || (VD * MMA_ES) % 8 || !ALIGNED
#error "DECODE_MMA: 16-byte aligned rows; d a multiple of 16 (32 for fp8), d_v of 32 (64 for fp8)"
#endif

/* n words of a row share at p (8-byte aligned; 16 when n is a multiple of 4), zeros unless ok. */
#define MMA_LOAD_WORDS(src, count, dst, ok)                                                                            \
    if ((count) % 4 == 0) {                                                                                            \
        _Pragma("unroll") for (int x_ = 0; x_ < (count) / 4; ++x_) {                                                   \
            const uint4 v_ = ((__global const uint4 *)(src))[x_];                                                      \
            (dst)[4 * x_] = (ok) ? v_.x : 0u, (dst)[4 * x_ + 1] = (ok) ? v_.y : 0u;                                    \
            (dst)[4 * x_ + 2] = (ok) ? v_.z : 0u, (dst)[4 * x_ + 3] = (ok) ? v_.w : 0u;                                \
        }                                                                                                              \
    } else {                                                                                                           \
        _Pragma("unroll") for (int x_ = 0; x_ < (count) / 2; ++x_) {                                                   \
            const uint2 v_ = ((__global const uint2 *)(src))[x_];                                                      \
            (dst)[2 * x_] = (ok) ? v_.x : 0u, (dst)[2 * x_ + 1] = (ok) ? v_.y : 0u;                                    \
        }                                                                                                              \
    }

#if LANE_SHFL /* NVIDIA: cl/ptx.cl */
#define TC_MMA(c, a, b0, b1) PTX_MMA(c, a, b0, b1)
#define TC_XOR(x, m) ptx_shfl_xor((x), (m))
#define TC_SHFL(x, src) ptx_shfl_segment((x), (src), 32)
#define tc_pack ptx_pack
#else
/* The emulation: tc_frag holds every work-item's A and B registers of the current mma, tc_val the
   values of a shuffle; both declared by the kernel (OpenCL 1.2 has no function-scope __local). */
#define TC_MMA(c, a, b0, b1) tc_emul_mma((c), (a), (b0), (b1), tc_frag, lid)
#define TC_XOR(x, m) tc_emul_shfl((x), lane ^ (m), tc_val, lid)
#define TC_SHFL(x, src) tc_emul_shfl((x), (src), tc_val, lid)

inline float tc_emul_shfl(float x, int src, __local float *val, int lid) {
    barrier(CLK_LOCAL_MEM_FENCE);
    val[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    return val[(lid & ~31) + src];
}
/* Element `upper` (0 low, 1 high) of a register of two operands, as float. */
inline float tc_elem(uint w, int upper) {
    const uint h = (w >> (16 * upper)) & 0xffffu;
#if MMA_F16
    return half_bits(h);
#else
    return as_float(h << 16);
#endif
}
/* c += A B as mma.sync m16n8k16 .row.col defines it, from each lane's registers: A (16 x 16) lane
   g*4+t holds rows g, g+8 x columns 2t, 2t+1 (a[0] row g, a[1] row g+8) and 2t+8, 2t+9 (a[2],
   a[3]); B (16 x 8) rows 2t, 2t+1 (b0) and 2t+8, 2t+9 (b1) of column g; C rows g, g+8 x columns
   2t, 2t+1. */
inline void tc_emul_mma(float *c, const uint *a, uint b0, uint b1, __local uint *frag, int lid) {
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int k = 0; k < 4; ++k) frag[lid * 6 + k] = a[k];
    frag[lid * 6 + 4] = b0;
    frag[lid * 6 + 5] = b1;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int w0 = lid & ~31, gq = (lid & 31) >> 2, tq = lid & 3;
    for (int i = 0; i < 4; ++i) {
        const int row = gq + (i >= 2 ? 8 : 0), col = 2 * tq + (i & 1);
        float sum = 0.0f;
        for (int k = 0; k < 16; ++k) {
            const uint aw = frag[(w0 + (row & 7) * 4 + (k & 7) / 2) * 6 + (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)];
            const uint bw = frag[(w0 + col * 4 + (k & 7) / 2) * 6 + 4 + (k >= 8 ? 1 : 0)];
            sum = fma(tc_elem(aw, k & 1), tc_elem(bw, k & 1), sum);
        }
        c[i] += sum;
    }
}
/* x rounded to nearest even in the operand type, as bits. */
inline uint tc_round(float x) {
#if MMA_F16
    ushort h;
    vstore_half_rte(x, 0, (__private half *)&h);
    return h;
#else
    return flashcl_float_to_bf16(x);
#endif
}
inline uint tc_pack(float lo, float hi) { return tc_round(lo) | (tc_round(hi) << 16); }
#endif

#if CACHE_DTYPE
/*
 * fp8 codes as float16 operands, two to a register: y holds code 0 in bits 0-7 and code 1 in bits
 * 16-23. With FP8_CVT, NVIDIA's conversion (cvt.rn.f16x2.e4m3x2, exact). Else by moving bits, which
 * are also exact: an e5m2 code is the top byte of the half of the same value; an e4m3 code's 7
 * magnitude bits, placed as a half's exponent and mantissa, make the half of its value times 2^-8
 * for every code, subnormals included (FP8_UNIT puts the 2^8 back through the K and V scales), and
 * its NaN (S.1111.111, which would land just above the largest value) is made a half NaN. Five or
 * six integer operations a pair.
 */
#if FP8_CVT
#define FP8_UNIT 1.0f
inline uint tc_fp8x2(uint y) { return ptx_fp8_f16x2((y & 0xffu) | ((y >> 8) & 0xff00u)); }
#elif CACHE_DTYPE == 1
#define FP8_UNIT 256.0f
inline uint tc_fp8x2(uint y) {
    uint r = ((y << 7) & 0x3f803f80u) | ((y << 8) & 0x80008000u);
    return r | (((r & 0x7fff7fffu) + 0x00800080u) & 0x40004000u);
}
#else
#define FP8_UNIT 1.0f
inline uint tc_fp8x2(uint y) { return (y & 0x00ff00ffu) << 8; }
#endif
#endif

/* Pair p (dims 2p, 2p + 1) of a lane's share of a K row as an operand register. */
#if CACHE_DTYPE
#define MMA_KPAIR(w, p) tc_fp8x2(tc_spread(((w)[(p) / 2] >> (16 * ((p)&1))) & 0xffffu))
/* Bytes 0 and 1 of x to bits 0-7 and 16-23. */
inline uint tc_spread(uint x) { return (x & 0xffu) | ((x & 0xff00u) << 8); }
#else
#define MMA_KPAIR(w, p) ((w)[p])
#endif
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
#if DECODE_MMA && CACHE_DTYPE
    const float kscale = flashcl_cache_scale(k_scale, scale_per_head, hk) * FP8_UNIT;
    const float vscale = flashcl_cache_scale(v_scale, scale_per_head, hk) * FP8_UNIT;
#else
    const float kscale = flashcl_cache_scale(k_scale, scale_per_head, hk);
    const float vscale = flashcl_cache_scale(v_scale, scale_per_head, hk);
#endif

#if !DECODE_MMA
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
#endif

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
#if !LANE_SHFL && !DECODE_MMA
    __local float partial[WG_SIZE * UNROLL * ROWS]; /* each work-item's partial dots, for its group to sum */
    __local float sums[UNROLL * ROWS * GROUPS];     /* and the sums */
#endif

#if !DECODE_MMA
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
#endif

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

#if DECODE_MMA
#if !LANE_SHFL
    __local uint tc_frag[WG_SIZE * 6];
    __local float tc_val[WG_SIZE];
#endif
    const int fg = lane >> 2, ft = lane & 3; /* my place in the fragments */
    /* Row fg of the block (the rows this lane's scores belong to): its query head and row, the
       keys it sees within [kv_lo, kv_hi) (none past `packed`), its position and ALiBi slope. */
    const int prf = row0 + fg, onf = prf < packed;
    const int hf = hk * group + min(prf, max(packed - 1, 0)) / sqn;
    const long qif = prf % sqn;
    const int lof = onf ? (int)max(flashcl_key_lo(hd, qif, win_left), kv_lo) : 1;
    const int hif = onf ? (int)min(flashcl_key_hi(hd, qif, win_right), kv_hi - 1) : 0;
    const int qposf = (int)(qif + hd.off);
#if HAS_ALIBI
    const float slopef = alibi[alibi_off + (ulong)b * alibi_sb + (ulong)hf] * FLASHCL_LOG2E_F;
#endif
    /* Q: row fg's dims [ft * QD, (ft + 1) * QD) as A registers (rows 8-15 are zero registers). */
    float qf[QD];
#pragma unroll
    for (int k = 0; k < QD; ++k)
        qf[k] = onf ? FLASHCL_LOAD(Q + VIEW_BASE(q, b, hf) + (hd.q0 + qif) * q_sr, ft * QD + k) : 0.0f;
#if CACHE_DTYPE && FLASHCL_DTYPE != 1
    /* float16 operands from bfloat16 Q: each row scaled by a power of two that puts its largest |q|
       near 2^14 (its four lanes agree; a row's scores carry their own scale, sscale), exact unless
       the row spans more than float16's range. Clamped so that the scaled row stays finite (a row
       whose largest |q| is below ~2^-112 then has a subnormal or zero sscale: its scores are ~0). */
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < QD; ++k) amax = fmax(amax, fabs(qf[k]));
    amax = fmax(amax, TC_XOR(amax, 1));
    amax = fmax(amax, TC_XOR(amax, 2));
    const float qscale = amax > 0.0f && isfinite(amax) ? ldexp(1.0f, clamp(14 - ilogb(amax), -126, 127)) : 1.0f;
#else
    const float qscale = 1.0f; /* Q's storage is the operand type (float16 with an fp8 cache): exact */
#endif
    const float sscale = scale_log2 * kscale / qscale;
    uint qa[KSTEPS][2];
#pragma unroll
    for (int t = 0; t < KSTEPS; ++t) {
        qa[t][0] = tc_pack(qf[4 * t] * qscale, qf[4 * t + 1] * qscale);
        qa[t][1] = tc_pack(qf[4 * t + 2] * qscale, qf[4 * t + 3] * qscale);
    }

    /* O^T tiles: acc[i] = rows (virtual dims) fg, fg + 8 of tile i x packed rows 2ft, 2ft + 1. Row
       fg's running max (the same in its four lanes) and this lane's share of its sum. */
    float acc[VTILES][4];
#pragma unroll
    for (int i = 0; i < VTILES; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    float m_run = FLASHCL_NEG_INF, l_part = 0.0f;

    for (long key0 = kv_lo; key0 < kv_hi; key0 += BLOCK_N) {
        /* K of keys kb + fg and kb + 8 + fg; V of keys kb + 2ft, +1, +8, +9, for each of my warp's
           UNROLL chunks of 16 keys kb, all loads issued before any is used. Keys past the split
           load a row they may (kv_lo) and keep zeros. */
        uint kw[UNROLL][2][KWORDS], vw[UNROLL][4][VWORDS];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int kb = (int)key0 + (g * UNROLL + u) * 16;
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int key = kb + 8 * j + fg, ok = key < kv_hi;
                ROW_OFFSETS(ok ? key : (int)kv_lo)
                MMA_LOAD_WORDS(K + kr + ft * QD, KWORDS, kw[u][j], ok)
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int key = kb + (j >> 1) * 8 + 2 * ft + (j & 1), ok = key < kv_hi;
                ROW_OFFSETS(ok ? key : (int)kv_lo)
                MMA_LOAD_WORDS(V + vr + fg * VD, VWORDS, vw[u][j], ok)
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int kb = (int)key0 + (g * UNROLL + u) * 16; /* my warp's 16 keys */
            /* Scores of row fg with keys kb + 8j + 2ft + h: c[j][h]. */
            float c[2][4];
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
#pragma unroll
                for (int t = 0; t < KSTEPS; ++t) {
                    const uint a[4] = {qa[t][0], 0u, qa[t][1], 0u};
                    TC_MMA(c[j], a, MMA_KPAIR(kw[u][j], 2 * t), MMA_KPAIR(kw[u][j], 2 * t + 1));
                }
            }
            /* flashcl_score's terms and masks, then row fg's online update over the warp's 16 keys
               (its four lanes hold 4 each). */
            float p[4], mx = m_run;
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                const int key = kb + 8 * (x >> 1) + 2 * ft + (x & 1);
                float f = c[x >> 1][x & 1] * sscale;
#if HAS_SOFTCAP
                f = softcap2 * tanh(f / softcap2);
#endif
#if HAS_ALIBI
                f -= slopef * fabs((float)(qposf - key));
#endif
                p[x] = key >= lof && key <= hif ? f : FLASHCL_NEG_INF;
                mx = fmax(mx, p[x]);
            }
            mx = fmax(mx, TC_XOR(mx, 1));
            mx = fmax(mx, TC_XOR(mx, 2));
            const float base = flashcl_safe_base(mx), alpha = exp2(m_run - base);
            float sum = 0.0f;
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                p[x] = exp2(p[x] - base);
                sum += p[x];
            }
            l_part = l_part * alpha + sum;
            m_run = mx;
            /* My output columns are rows 2ft and 2ft + 1: their factors from lanes 8ft and 8ft + 4. */
            const float a_lo = TC_SHFL(alpha, 8 * ft), a_hi = TC_SHFL(alpha, 8 * ft + 4);
            const uint pb0 = tc_pack(p[0], p[1]), pb1 = tc_pack(p[2], p[3]);
#pragma unroll
            for (int i = 0; i < VTILES; ++i) {
                acc[i][0] *= a_lo, acc[i][1] *= a_hi, acc[i][2] *= a_lo, acc[i][3] *= a_hi;
                /* A = V^T: rows fg (dim 2i of my share), fg + 8 (dim 2i + 1) x keys 2ft, 2ft + 1
                   (a[0], a[1]) and 2ft + 8, 2ft + 9 (a[2], a[3]): the keys' words paired. */
                uint a[4];
#if CACHE_DTYPE
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const uint x0 = vw[u][2 * h][i / 2] >> (16 * (i & 1)),
                               x1 = vw[u][2 * h + 1][i / 2] >> (16 * (i & 1));
                    a[2 * h] = tc_fp8x2((x0 & 0xffu) | ((x1 & 0xffu) << 16));
                    a[2 * h + 1] = tc_fp8x2(((x0 >> 8) & 0xffu) | ((x1 & 0xff00u) << 8));
                }
#else
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const uint w0 = vw[u][2 * h][i], w1 = vw[u][2 * h + 1][i];
                    a[2 * h] = (w0 & 0xffffu) | (w1 << 16);
                    a[2 * h + 1] = (w0 >> 16) | (w1 & 0xffff0000u);
                }
#endif
                TC_MMA(acc[i], a, pb0, pb1);
            }
        }
    }
    /* Row fg's sum over its four lanes, for the epilogue. */
    float l_full = l_part + TC_XOR(l_part, 1);
    l_full += TC_XOR(l_full, 2);
#else
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
#endif

    /* Epilogue, row by row: the GROUPS states merged by their maxima through __local, then
       normalised; one split writes O (sinks folded in) and LSE, several write partials. */
    __local float gm[GROUPS], gl[GROUPS];
    __local float go[GROUPS * DVP];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
#if DECODE_MMA
        /* Row r's state is in lanes 4r .. 4r + 3, its outputs in lanes with ft = r / 2. */
        const float m_r = TC_SHFL(m_run, 4 * r), l_r = TC_SHFL(l_full, 4 * r);
#else
        const float m_r = m[r], l_r = l[r];
#endif
        if (lane == 0) gm[g] = m_r, gl[g] = l_r;
        barrier(CLK_LOCAL_MEM_FENCE);
        float mx = FLASHCL_NEG_INF;
        for (int k = 0; k < GROUPS; ++k) mx = fmax(mx, gm[k]);
        const float base = flashcl_safe_base(mx);
        const float mine = exp2(m_r - base);
#if DECODE_MMA
        if (ft == r / 2) {
#pragma unroll
            for (int i = 0; i < VTILES; ++i) {
                go[g * DVP + fg * VD + 2 * i] = acc[i][r & 1] * mine;
                go[g * DVP + fg * VD + 2 * i + 1] = acc[i][2 + (r & 1)] * mine;
            }
        }
#else
#pragma unroll
        for (int c = 0; c < NCHV; ++c)
#pragma unroll
            for (int k = 0; k < VEC; ++k) go[g * DVP + (c * LANES + lane) * VEC + k] = acc[r][c * VEC + k] * mine;
#endif
        float lr = 0.0f;
        for (int k = 0; k < GROUPS; ++k) lr += gl[k] * exp2(gm[k] - base);
        barrier(CLK_LOCAL_MEM_FENCE);

        const int pr = row0 + r;
        if (pr < packed) {
            const int h = hk * group + pr / sqn;
            const long i = pr % sqn;
            float mr = mx;
            if (write_parts) {
                const ulong prow =
                    (((ulong)split * get_num_groups(2) + (ulong)b) * (ulong)heads_q + (ulong)h) * (ulong)part_sq +
                    (ulong)i;
                const float inv = flashcl_row_inv(vscale, lr);
                FLASHCL_SHARED_FOR(int, e, HEAD_DIM_V, lid, WG_SIZE) {
                    float o = 0.0f;
                    for (int k = 0; k < GROUPS; ++k) o += go[k * DVP + e];
                    Opart[prow * (ulong)PART_PITCH + (ulong)e] = o * inv;
                }
                if (lid == 0) Lpart[prow] = lr > 0.0f ? (mr + log2(lr)) / FLASHCL_LOG2E_F : flashcl_lse_empty(lr);
            } else {
                /* One split: the sinks are folded here (with several, flash_merge folds them). */
#if HAS_SINKS
                const float fold = flashcl_fold_sink(&mr, &lr, sinks[sinks_off + (ulong)h] * FLASHCL_LOG2E_F);
#else
                const float fold = 1.0f;
#endif
                const float inv = flashcl_row_inv(fold * vscale, lr);
                __global store_t *orow = O + VIEW_BASE(o, b, h) + (hd.q0 + i) * o_sr;
                FLASHCL_SHARED_FOR(int, e, HEAD_DIM_V, lid, WG_SIZE) {
                    float o = 0.0f;
                    for (int k = 0; k < GROUPS; ++k) o += go[k * DVP + e];
                    FLASHCL_STORE(orow, e, o * inv);
                }
                if (lid == 0 && write_lse) {
                    const ulong at = flashcl_row_index(hd, b, h, heads_q, seqlen_q, i);
                    LSE[lse_off + at] = lr > 0.0f ? (mr + log2(lr)) / FLASHCL_LOG2E_F : flashcl_lse_empty(lr);
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
                        total > 0.0f ? base + log(total) : flashcl_lse_empty(total);
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
                    const float inv = flashcl_row_inv(1.0f, mtotal[r]);
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
