/*
 * FlashAttention backward on NVIDIA tensor cores (sm_80+), through the same
 * inline PTX as cl/flash_fwd_mma.cl (mma.sync.m16n8k16 bf16/f16 -> fp32,
 * ldmatrix, cp.async: the wrappers of cl/ptx.cl, which the host puts in front
 * of this file after common.cl and variants.cl; MMA_F16 picks f16 (1) or bf16
 * (0, the default)). Built only after the host's probe passed.
 *
 * Three kernels, the structure of cl/flash_bwd_tiles.cl:
 * - flash_bwd_mma_dot: D = rowsum(dO * O) in float32 (scratch), and the rows'
 *   LSE in the log2 domain is formed on the fly by the two kernels below.
 * - flash_bwd_mma_dkdv: one work-group per block of MMA_BWD_BC keys (16 per
 *   warp, K and V A-fragments in registers); loops over the GQA group's query
 *   heads and their query tiles of MMA_BWD_BR rows (Q, dO through __local):
 *     S^T = K Q^T, P^T = exp2(f(S^T) - lse2), dV += (P Z)^T dO,
 *     dP^T = V dO^T, dS^T = P^T (dP^T Z - D) g, dK += dS^T Q; dK *= scale at the end.
 * - flash_bwd_mma_dq: one work-group per block of 16 * MMA_WARPS query rows
 *   (Q, dO A-fragments in registers); loops over key tiles of MMA_BWD_BCQ
 *   (K, V through __local): S = Q K^T, P, dP = dO V^T, dS, dQ += dS K.
 * - flash_bwd_mma_dq_ds (16-bit calls but plain ones at d <= 64, MB_DS): dQ += dS K from
 *   the dS^T the dK/dV kernel stored, in place of flash_bwd_mma_dq's recompute.
 * Every output element is written once by one thread: deterministic, no atomics.
 * P and dS are rounded to the storage type before their mma (as in FlashAttention-2).
 * MMA_TF32 = 1 runs float32 storage on the TF32 mma (the caller's allow_tf32; below).
 *
 * Variants (cl/variants.cl, the portable backward's semantics, cl/flash_bwd.cl):
 * f is the forward's final logit (softcap, ALiBi, bias; -inf where the
 * window, mask or block mask hides the pair), g the softcap's 1 - tanh^2 (1
 * without), Z the dropout factor regenerated from the forward's Philox
 * counter. Only the query tiles (key tiles) inside the band of a block are
 * visited, tiles the block mask drops are skipped, varlen sequences start at
 * packed rows hd.q0/hd.k0. The sinks are in the LSE, so P needs nothing for
 * them; d(sinks) is the portable flash_bwd_dsinks kernel's.
 *
 * The host guarantees: HEAD_DIM (the user's d rounded up to 16; MB_D_REAL the
 * real one, a multiple of 8) <= 256 (TF32: 128) and d_v = d, views 16-byte aligned,
 * scale > 0, and that D was computed before the two main kernels run.
 */

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef MB_D_REAL
#define MB_D_REAL HEAD_DIM
#endif
#ifndef MMA_WARPS
#define MMA_WARPS 4
#endif
#ifndef MMA_BWD_BR
#define MMA_BWD_BR 32 /* query rows per step of the dK/dV kernel */
#endif
#ifndef MMA_BWD_BCQ
#define MMA_BWD_BCQ 32 /* keys per step of the dQ kernel */
#endif
#ifndef MMA_PLAIN
#define MMA_PLAIN 0 /* 1: plain or causal attention only (see the dK/dV kernel) */
#endif
/*
 * MB_DS = 1 (16-bit builds on sm_80+: the general ones, the plain ones above d = 64; the host's
 * choice): the dK/dV kernel also stores each tile's dS^T, exactly the operand its dK product used,
 * into a scratch of one key-major matrix per (sequence, query head): ds_keys rows (the key blocks'
 * keys) of ds_pitch query columns; and flash_bwd_mma_dq_ds computes dQ = scale dS K from it, a
 * product over the keys, in place of flash_bwd_mma_dq, which recomputes S and dP (two of its three
 * products) for dS. Entries in tiles no dK/dV work-group visited (outside the band, dropped by the
 * block mask) are never written; the dQ kernel zeroes them (see it) and never reads the tiles
 * beyond its band. Sliced builds: the dS part (MB_PART = 3), or where the host runs the dK slices one
 * of a key block's dK work-groups. Deterministic: each
 * entry is written once, dQ summed in a fixed order. A ds_pitch of 0 stores nothing: the host's way
 * back to flash_bwd_mma_dq (in the same program) where the scratch would be too large.
 */
#ifndef MB_DS
#define MB_DS 0
#endif
#if MB_DS && (MMA_TF32 || MMA_SM75)
#error "MB_DS: the 16-bit kernels on sm_80+"
#endif
/*
 * Head dims above 128 (MB_SLICES = 2, the general kernels only): a warp's 16 rows of K and V
 * fragments (S and dP reduce over the whole head dim) and of dK and dV accumulators at d = 256
 * would be 64 + 64 + 128 + 128 registers. So the dK/dV kernel is built twice: MB_PART = 1
 * accumulates dV only, over every output dim (K fragments + all of dV: 64 + 128), one work-group
 * per key block; MB_PART = 2 dK only, each work-group owning one slice of MB_OUT output dims (K
 * and V fragments + a dK slice), the grid's dimension 0 then counting blocks x slices. The dQ
 * kernel is built in the dV part's program and owns every output dim (Q and dO fragments + all
 * of dQ, the dV part's register profile), so its S and dP are computed once per pair: 1.10-1.25x
 * faster backwards than dQ in slices like dK (H100: bf16 d = 256, TF32 d = 96 and 128). S is
 * recomputed by the dV part and per dK slice, dP per dK slice.
 *
 * With MB_DS (the dS scratch; below) the dK slices give way to MB_PART = 3, the dS part: one
 * work-group per key block with the K and V fragments and no accumulators, which computes S, dP and
 * dS once and stores dS^T; flash_bwd_mma_dk_ds (in the dV part's program, every output dim) then
 * forms dK = scale dS^T Q from the scratch as flash_bwd_mma_dq_ds forms dQ. Where the scratch is
 * not there (too large) the host launches the dK slices, built beside it. Where a second scratch
 * of the same size fits too, the dS part also stores (P Z)^T (p_store, into Ps: the operand the dV
 * part's product would use), and the same kernel forms dV = (P Z)^T dO from it (its `which`): no
 * dV part is launched, so S is computed once per pair in the whole backward.
 */
#ifndef MB_SLICES
#define MB_SLICES 1
#endif
#ifndef MB_PART
#define MB_PART 0 /* 0: dK and dV (MB_SLICES = 1); 1: dV only; 2: dK only; 3: dS only */
#endif
#if MB_SLICES > 1 && (MMA_PLAIN || MB_PART == 0)
#error "sliced builds are the general kernels with MB_PART 1, 2 or 3"
#endif
#if MB_PART == 3 && !MB_DS
#error "MB_PART 3 stores dS: MB_DS builds only"
#endif
/* What a build of the dK/dV kernel accumulates, and whether it forms dP (and dS). */
#define MB_HAS_DV (MB_PART <= 1)
#define MB_HAS_DK (MB_PART == 0 || MB_PART == 2)
#define MB_HAS_DP (MB_PART != 1)

/*
 * Hopper (MB_WG = 1: sm_90a through cl/ptx.cl's wgmma section, so built with MMA_WG = 1 too; the
 * general dQ kernel at d = 64 or 128, the host's choice; the kernel zero-pads smaller dims to them). Each of the dQ kernel's three products is one
 * warpgroup-wide wgmma over the 64 rows of the four warps, whose accumulators per warp have the
 * layout of the mma.sync fragments, so the element-wise code is the same: Q and dO stay in
 * registers as A fragments (loaded from global memory), S = Q K^T and dP = dO V^T read K and V
 * K-major from __local, dQ += dS K reads the same K tile transposed, and the K/V tiles are
 * double-buffered, the next tile's copies landing behind this tile's products. The dK/dV kernel
 * stays on mma.sync: on wgmma (K and V in __local with 32-row Q/dO tiles, which fills 48 KiB at
 * d = 128; or K in registers with double-buffered Q/dO tiles) it measured 0.99x and 0.88x the
 * general mma.sync kernel at d = 128 and slower at d = 64 (README).
 */
#ifndef MB_WG
#define MB_WG 0
#endif
#if MB_WG
#if MMA_PLAIN || MB_SLICES != 1 || MMA_WARPS != 4 || (HEAD_DIM != 64 && HEAD_DIM != 128) ||                            \
    (MMA_BWD_BCQ != 32 && MMA_BWD_BCQ != 64)
#error "MB_WG: the general dQ kernel, 4 warps, d 64 or 128, key steps of 32 or 64"
#endif
#define WG_PV_N WG_STR(HEAD_DIM) /* N of the dV, dK and dQ products: the head dim */
/* Literal numbers for cl/ptx.cl's operand lists: accumulators of the (64 x key step) products S
   and dP, k steps of 16 over the key step, column blocks of 64 over d, k steps of 16 over d,
   accumulators of the (64 x d) dQ. */
#if MMA_BWD_BCQ == 32
#define MB_WG_SR 16
#define MB_WG_STEPS 2
#else
#define MB_WG_SR 32
#define MB_WG_STEPS 4
#endif
#if HEAD_DIM == 64
#define MB_WG_BLOCKS 1
#define MB_WG_DSTEPS 4
#define MB_WG_OR 32
#else
#define MB_WG_BLOCKS 2
#define MB_WG_DSTEPS 8
#define MB_WG_OR 64
#endif
#endif

/*
 * TF32 (MMA_TF32 = 1: float32 storage, the caller's allow_tf32; the general kernels on mma.sync,
 * not MMA_PLAIN, MB_WG or sm_75): the same kernels on mma.sync.m16n8k8.tf32, two k = 8 halves per
 * 16 of k, so an A fragment over 16 of k is 8 registers (MB_AF) where 16-bit storage packs it in
 * 4. The tiles hold floats, 4 per 16-byte copy (MB_CE), rows padded by one copy: with lane = 4 g
 * + c, every fragment read below (row g, column c; or rows 2c, 2c + 1, column g) then touches 32
 * distinct banks for any head dim that is a multiple of 16. ldmatrix moves 16-bit elements, so
 * the fragments are plain __local reads, each rounded to TF32 (cvt.rna) as it is read; P and dS
 * are rounded the same before their products, as the 16-bit kernels round them to the storage
 * type. The accumulator's columns 2c, 2c + 1 become an A fragment's k = c, c + 4, and the B
 * operands read rows-as-k take their rows in that order (a sum over k may take any order; the
 * forward's P V does the same). At d = 128 the fragments weigh what 16-bit ones weigh at 256, so
 * the host slices the same way above 64.
 */
#ifndef MMA_TF32
#define MMA_TF32 0
#endif
#if MMA_TF32 && (MMA_PLAIN || MB_WG || MMA_SM75)
#error "MMA_TF32: the general mma.sync kernels only"
#endif
#if MMA_TF32
typedef float mb_t; /* a storage element */
#define MB_CE 4     /* elements per 16-byte copy */
#define MB_AF 8     /* registers of an A fragment over 16 of k */
#else
typedef ushort mb_t;
#define MB_CE 8
#define MB_AF 4
#endif

#define MB_THREADS (32 * MMA_WARPS)
#define MMA_BWD_BC (16 * MMA_WARPS) /* keys per dK/dV work-group, rows per dQ work-group */
#define MB_LD (HEAD_DIM + MB_CE)
#define MB_CHUNKS (HEAD_DIM / MB_CE)
#define MB_DT (HEAD_DIM / 16)
/* Output dims per work-group (a multiple of 16): one slice in the dK part (MB_PART = 2), all of
   them elsewhere: the dV part's 16 keys' K fragments and dV accumulators fit at d = 256, and each
   key block's S is then computed once for dV instead of once per slice (the dS part has no
   accumulators). The dV part's program has the dQ kernels (the dK and dS parts' have none).
   MB_WG_PER_BLOCK: work-groups per key or query block. */
#define MB_OUT (MB_PART == 2 ? HEAD_DIM / MB_SLICES : HEAD_DIM)
#define MB_ODT (MB_OUT / 16)
#define MB_WG_PER_BLOCK (HEAD_DIM / MB_OUT)
/* Stages of a streamed tile (the plain kernels' Q/dO and K/V, the general dQ's K/V): two, each
   tile's copies issued by the tile before so they land behind its products; one in the sm_75
   form, whose copies are plain loads and stores (a second stage would only halve the work-groups
   per SM there). The wgmma dQ keeps two in its own buffer. */
#define MB_STAGES (MMA_SM75 && !MB_WG ? 1 : 2)
/* Per-element work beyond exp2: score terms, or a bias / mask that must be checked per pair. */
#define MB_TERMS HAS_SCORE_TERMS
#define MB_ALWAYS_CHECK (HAS_BIAS || HAS_MASK || HAS_BLOCK_MASK)

/* One 16-bit storage value -> float (exact in both formats). */
inline float mb_to_float(uint x) {
#if MMA_F16
    const uint sign = (x & 0x8000u) << 16, e = (x >> 10) & 0x1fu, m = x & 0x3ffu;
    if (e == 0) return as_float(sign | as_uint((float)m * 5.9604644775390625e-8f)); /* subnormal: m 2^-24 */
    if (e == 31) return as_float(sign | 0x7f800000u | (m << 13));
    return as_float(sign | ((e + 112u) << 23) | (m << 13));
#else
    return as_float(x << 16);
#endif
}

/* Rows [row0, row0 + rows) of a view -> padded __local tile; rows >= limit and the
   head dim's padding (chunks past MB_D_REAL) become zeros. */
inline void mb_load_tile(__local mb_t *tile, __global const mb_t *base, ulong stride_row, long row0, int rows,
                         long limit, int lid) {
    for (int c = lid; c < rows * MB_CHUNKS; c += MB_THREADS) {
        const int r = c / MB_CHUNKS, ch = c - r * MB_CHUNKS;
        const long gr = row0 + r;
#if MB_D_REAL == HEAD_DIM
        const int ok = gr < limit;
        __global const mb_t *src = base + (ulong)(ok ? gr : 0) * stride_row + ch * MB_CE;
#else
        const int ok = gr < limit && ch < MB_D_REAL / MB_CE;
        __global const mb_t *src = base + (ulong)(ok ? gr : 0) * stride_row + (ok ? ch : 0) * MB_CE;
#endif
        ptx_cp16(ptx_smem_addr((__local const ushort *)(tile + r * MB_LD + ch * MB_CE)), (__global const ushort *)src,
                 ok ? 16u : 0u);
    }
}

/* A fragments of 16 rows (starting at `row`) of a padded tile, one per 16 dims. */
inline void mb_frags_a(__local const mb_t *tile, int row, int lane, uint f[MB_DT][MB_AF]) {
#if MMA_TF32
    /* Rows g, g + 8 and columns c, c + 4 of each k = 8 half. */
    __local const float *p = tile + (row + (lane >> 2)) * MB_LD + (lane & 3);
#pragma unroll
    for (int kk = 0; kk < MB_DT; ++kk)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            __local const float *ph = p + kk * 16 + h * 8;
            f[kk][4 * h + 0] = ptx_tf32(ph[0]);
            f[kk][4 * h + 1] = ptx_tf32(ph[8 * MB_LD]);
            f[kk][4 * h + 2] = ptx_tf32(ph[4]);
            f[kk][4 * h + 3] = ptx_tf32(ph[8 * MB_LD + 4]);
        }
#else
    const uint a = ptx_smem_addr(tile + (row + (lane & 15)) * MB_LD + (lane >> 4) * 8);
#pragma unroll
    for (int kk = 0; kk < MB_DT; ++kk) ptx_ldsm_x4(a + kk * 32, &f[kk][0], &f[kk][1], &f[kk][2], &f[kk][3]);
#endif
}

/* Sliced builds: a block's A fragments of one view through the one staging buffer (load, wait,
   fragments). The caller puts a barrier before it when the buffer had other readers. */
inline void mb_stage_frags(__local mb_t *tile, __global const mb_t *base, ulong stride_row, long row0, long limit,
                           int lid, uint f[MB_DT][MB_AF]) {
    mb_load_tile(tile, base, stride_row, row0, MMA_BWD_BC, limit, lid);
    ptx_cp_commit();
    ptx_cp_wait_all();
    barrier(CLK_LOCAL_MEM_FENCE);
    mb_frags_a(tile, (lid >> 5) * 16, lid & 31, f);
}

/* An output slice's accumulators, zeroed. */
inline void mb_zero(float acc[MB_OUT / 8][4]) {
#pragma unroll
    for (int n = 0; n < MB_OUT / 8; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[n][c] = 0.0f;
}

#if MMA_TF32
/* A lane's position in a tile (mb_at, from MB_AT(tile, offset)) is a __local pointer, offsets in
   elements: B read rows-as-n (row g, column c) and rows-as-k (rows 2c, 2c + 1, column g). */
typedef __local const float *mb_at;
#define MB_AT(tile, off) ((__local const float *)(tile) + (off))
#define MB_BYTES(e) (e)
#define MB_LANE_N(lane) (((lane) >> 2) * MB_LD + ((lane)&3))
#define MB_LANE_K(lane) (2 * ((lane)&3) * MB_LD + ((lane) >> 2))
#else
/* A lane's position in a tile is a shared-window address, offsets in bytes: ldmatrix's B operand
   read from rows-as-n (non-transposed) and rows-as-k (transposed). */
typedef uint mb_at;
#define MB_AT(tile, off) (ptx_smem_addr((__local const ushort *)(tile)) + (off))
#define MB_BYTES(e) ((uint)(e)*2)
#define MB_LANE_N(lane) ((uint)((((lane)&7) + (((lane) >> 4) << 3)) * MB_LD + ((((lane) >> 3) & 1) << 3)) * 2)
#define MB_LANE_K(lane) ((uint)((((lane)&7) + ((((lane) >> 3) & 1) << 3)) * MB_LD + (((lane) >> 4) << 3)) * 2)
#endif

/*
 * The products of every kernel below, on mma.sync fragments (16 rows per warp, accumulator tile n
 * covering 8 columns). Macros rather than functions so that the loop bounds are literals where
 * `#pragma unroll` meets them and the accumulators stay registers. Each is a statement (a loop),
 * to be used as one, not as the body of an if without braces.
 *
 * MB_MMA_ABT: acc[2 np], acc[2 np + 1] += A B^T over the head dim for the NT rows of a K-major
 * __local tile (rows as n, ldmatrix without .trans): `a` the warp's MB_DT A fragments, `at` the
 * lane's shared address of the tile (MB_LANE_N). MB_MMA_ABT2 does two such products over tiles
 * with the same layout in one loop, their loads and mmas interleaved.
 */
#if MMA_TF32
#define MB_MMA_ABT_STEP(acc, a, at, kk_, np_)                                                                          \
    do {                                                                                                               \
        _Pragma("unroll") for (int j_ = 0; j_ < 2; ++j_) {                                                             \
            __local const float *p_ = (at) + ((np_)*16 + j_ * 8) * MB_LD + (kk_)*16;                                   \
            const uint b_[4] = {ptx_tf32(p_[0]), ptx_tf32(p_[4]), ptx_tf32(p_[8]), ptx_tf32(p_[12])};                  \
            PTX_MMA_TF32_K16(acc[2 * (np_) + j_], a[kk_], b_);                                                         \
        }                                                                                                              \
    } while (0)
#else
#define MB_MMA_ABT_STEP(acc, a, at, kk_, np_)                                                                          \
    do {                                                                                                               \
        uint b0_, b1_, b2_, b3_;                                                                                       \
        ptx_ldsm_x4((at) + (uint)((np_)*16 * MB_LD + (kk_)*16) * 2, &b0_, &b1_, &b2_, &b3_);                           \
        PTX_MMA(acc[2 * (np_)], a[kk_], b0_, b1_);                                                                     \
        PTX_MMA(acc[2 * (np_) + 1], a[kk_], b2_, b3_);                                                                 \
    } while (0)
#endif
#define MB_MMA_ABT(acc, a, at, NT)                                                                                     \
    _Pragma("unroll") for (int kk_ = 0; kk_ < MB_DT; ++kk_)                                                            \
        _Pragma("unroll") for (int np_ = 0; np_ < (NT) / 16; ++np_) MB_MMA_ABT_STEP(acc, a, at, kk_, np_)
#define MB_MMA_ABT2(acc, a, at, acc2, a2, at2, NT)                                                                     \
    _Pragma("unroll") for (int kk_ = 0; kk_ < MB_DT; ++kk_)                                                            \
        _Pragma("unroll") for (int np_ = 0; np_ < (NT) / 16; ++np_) {                                                  \
        MB_MMA_ABT_STEP(acc, a, at, kk_, np_);                                                                         \
        MB_MMA_ABT_STEP(acc2, a2, at2, kk_, np_);                                                                      \
    }
/* acc[2 dp], acc[2 dp + 1] += P B for the NK rows (the k dim) and the ND 16-column steps from
   column col0 of a __local tile read transposed (ldmatrix.trans, rows as k): `pf` the NK / 16 A
   fragments of P, `at` the lane's shared address of the tile (MB_LANE_K). */
#if MMA_TF32
#define MB_MMA_PB(acc, pf, at, NK, ND, col0)                                                                           \
    _Pragma("unroll") for (int kk_ = 0; kk_ < (NK) / 16; ++kk_)                                                        \
        _Pragma("unroll") for (int dn_ = 0; dn_ < 2 * (ND); ++dn_) {                                                   \
        __local const float *p_ = (at) + kk_ * 16 * MB_LD + (col0) + dn_ * 8;                                          \
        const uint b_[4] = {ptx_tf32(p_[0]), ptx_tf32(p_[MB_LD]), ptx_tf32(p_[8 * MB_LD]), ptx_tf32(p_[9 * MB_LD])};   \
        PTX_MMA_TF32_K16(acc[dn_], pf[kk_], b_);                                                                       \
    }
/* The accumulator tile n's four values (rows g, g + 8 x columns 2c, 2c + 1 of n's 8) as the k =
   8 half n & 1 of A fragment n >> 1, rounded to TF32: column 2c is k = c, 2c + 1 is k = c + 4. */
#define MB_PACK_A(pf, n, v0, v1, v2, v3)                                                                               \
    do {                                                                                                               \
        pf[(n) >> 1][((n)&1) * 4 + 0] = ptx_tf32(v0);                                                                  \
        pf[(n) >> 1][((n)&1) * 4 + 1] = ptx_tf32(v2);                                                                  \
        pf[(n) >> 1][((n)&1) * 4 + 2] = ptx_tf32(v1);                                                                  \
        pf[(n) >> 1][((n)&1) * 4 + 3] = ptx_tf32(v3);                                                                  \
    } while (0)
#else
#define MB_MMA_PB(acc, pf, at, NK, ND, col0)                                                                           \
    _Pragma("unroll") for (int kk_ = 0; kk_ < (NK) / 16; ++kk_)                                                        \
        _Pragma("unroll") for (int dn_ = 0; dn_ < (ND); ++dn_) {                                                       \
        uint b0_, b1_, b2_, b3_;                                                                                       \
        ptx_ldsm_x4_trans((at) + (uint)(kk_ * 16 * MB_LD + (col0) + dn_ * 16) * 2, &b0_, &b1_, &b2_, &b3_);            \
        PTX_MMA(acc[2 * dn_], pf[kk_], b0_, b1_);                                                                      \
        PTX_MMA(acc[2 * dn_ + 1], pf[kk_], b2_, b3_);                                                                  \
    }
/* The accumulator tile n's four values (rows g, g + 8 x columns 2c, 2c + 1 of n's 8) as half n & 1
   of the 16-bit A fragment n >> 1, rounded to the storage type. */
#define MB_PACK_A(pf, n, v0, v1, v2, v3)                                                                               \
    do {                                                                                                               \
        pf[(n) >> 1][((n)&1) * 2 + 0] = ptx_pack(v0, v1);                                                              \
        pf[(n) >> 1][((n)&1) * 2 + 1] = ptx_pack(v2, v3);                                                              \
    } while (0)
#endif
/* dS^T = P^T (dP^T - D) (P already carrying g and dP^T its dropout factor), packed as the A
   fragments pf of dK += dS^T Q: `dsum` the __local D of the tile's NT query rows. */
#define MB_DS_PACK(pf, s, dp, dsum, lane, NT)                                                                          \
    _Pragma("unroll") for (int n_ = 0; n_ < (NT) / 8; ++n_) {                                                          \
        const int qc_ = n_ * 8 + ((lane)&3) * 2;                                                                       \
        const float d0_ = (dsum)[qc_], d1_ = (dsum)[qc_ + 1];                                                          \
        MB_PACK_A(pf, n_, s[n_][0] * (dp[n_][0] - d0_), s[n_][1] * (dp[n_][1] - d1_), s[n_][2] * (dp[n_][2] - d0_),    \
                  s[n_][3] * (dp[n_][3] - d1_));                                                                       \
    }

/* MB_DS: a warp's dS^T fragments pf (from MB_DS_PACK: keys key_lo, key_lo + 8 of this thread x NT
   query columns from q0) into the scratch matrix of (sequence, query head) bh. pf[j] holds query
   columns 16 j + 2c, + 1 (c = lane & 3) and those + 8; lane pairs (c, c ^ 1) swap one register so
   that each lane holds 4 adjacent columns (even c: 2c .. 2c + 3, odd c: 2c + 6 .. 2c + 9), and a
   warp's 8-byte stores cover whole 32-byte rows of 16 columns. */
#define MB_DS_STORE(dS, ds_keys, ds_pitch, bh, key_lo, q0, pf, lane, NT)                                               \
    do {                                                                                                               \
        const int odd_ = (lane)&1;                                                                                     \
        const ulong at_ = ((ulong)(bh) * (ds_keys) + (ulong)(key_lo)) * (ds_pitch) + (ulong)(q0) +                     \
                          (((lane)&3) >> 1) * 4 + odd_ * 8;                                                            \
        __global uint2 *lo_ = (__global uint2 *)((dS) + at_), *hi_ = (__global uint2 *)((dS) + at_ + 8 * (ds_pitch));  \
        _Pragma("unroll") for (int j_ = 0; j_ < (NT) / 16; ++j_) {                                                     \
            const uint rl_ = as_uint(ptx_shfl_xor(as_float(odd_ ? pf[j_][0] : pf[j_][2]), 1));                         \
            const uint rh_ = as_uint(ptx_shfl_xor(as_float(odd_ ? pf[j_][1] : pf[j_][3]), 1));                         \
            lo_[4 * j_] = odd_ ? (uint2)(rl_, pf[j_][2]) : (uint2)(pf[j_][0], rl_);                                    \
            hi_[4 * j_] = odd_ ? (uint2)(rh_, pf[j_][3]) : (uint2)(pf[j_][1], rh_);                                    \
        }                                                                                                              \
    } while (0)

/* Stores 16 rows x MB_OUT columns (from col0) of accumulator fragments times `mul`, rows >= limit skipped. */
inline void mb_store(__global mb_t *base, ulong stride_row, long row0, long limit, int lane, float mul,
                     float acc[MB_OUT / 8][4], int col0) {
    const int col = col0 + (lane & 3) * 2;
#pragma unroll
    for (int half_ = 0; half_ < 2; ++half_) {
        const long row = row0 + (lane >> 2) + half_ * 8;
        if (row < limit) {
#if MMA_TF32
            /* float32 out: two floats per 8-byte store (rows start 16-byte aligned). */
            __global float2 *dst = (__global float2 *)(base + (ulong)row * stride_row + col);
#pragma unroll
            for (int n = 0; n < MB_OUT / 8; ++n)
                if (MB_D_REAL == HEAD_DIM || n * 8 + col < MB_D_REAL)
                    dst[n * 4] = (float2)(acc[n][half_ * 2] * mul, acc[n][half_ * 2 + 1] * mul);
#elif MB_D_REAL == HEAD_DIM
            __global uint *dst = (__global uint *)(base + (ulong)row * stride_row + col);
#pragma unroll
            for (int n = 0; n < MB_OUT / 8; ++n)
                dst[n * 4] = ptx_pack(acc[n][half_ * 2] * mul, acc[n][half_ * 2 + 1] * mul);
#else
            __global ushort *dst = base + (ulong)row * stride_row + col;
#pragma unroll
            for (int n = 0; n < MB_OUT / 8; ++n)
                if (n * 8 + col < MB_D_REAL) /* d a multiple of 8: both elements or neither */
                    *(__global uint *)(dst + n * 8) = ptx_pack(acc[n][half_ * 2] * mul, acc[n][half_ * 2 + 1] * mul);
#endif
        }
    }
}

/* D[row] = sum_c dO[row, c] O[row, c]; one work-item per row (rows of the longest sequence with varlen). */
__kernel void flash_bwd_mma_dot(__global const mb_t *dO, VIEW_ARGS(do), __global const mb_t *O, VIEW_ARGS(o),
                                __global float *Dsum, int seqlen_q, int seqlen_k, int heads_q, VARIANT_ARGS) {
    const int row = (int)get_global_id(0), h = (int)get_global_id(1), b = (int)get_global_id(2);
    const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    if (row >= hd.sq) return;
#if MMA_TF32
    __global const float4 *x = (__global const float4 *)(dO + VIEW_BASE(do, b, h) + (ulong)(hd.q0 + row) * do_sr);
    __global const float4 *y = (__global const float4 *)(O + VIEW_BASE(o, b, h) + (ulong)(hd.q0 + row) * o_sr);
    float acc = 0.0f; /* the exact float32 D, as the portable backward's */
    for (int c = 0; c < MB_D_REAL / 4; ++c) {
        const float4 u = x[c], w = y[c];
        acc = fma(u.s0, w.s0, acc);
        acc = fma(u.s1, w.s1, acc);
        acc = fma(u.s2, w.s2, acc);
        acc = fma(u.s3, w.s3, acc);
    }
#else
    __global const uint4 *x = (__global const uint4 *)(dO + VIEW_BASE(do, b, h) + (ulong)(hd.q0 + row) * do_sr);
    __global const uint4 *y = (__global const uint4 *)(O + VIEW_BASE(o, b, h) + (ulong)(hd.q0 + row) * o_sr);
    float acc = 0.0f;
    for (int c = 0; c < MB_D_REAL / 8; ++c) {
        const uint4 u = x[c], w = y[c];
        const uint uu[4] = {u.s0, u.s1, u.s2, u.s3}, ww[4] = {w.s0, w.s1, w.s2, w.s3};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            acc = fma(mb_to_float(uu[i] & 0xffffu), mb_to_float(ww[i] & 0xffffu), acc);
            acc = fma(mb_to_float(uu[i] >> 16), mb_to_float(ww[i] >> 16), acc);
        }
    }
#endif
    Dsum[flashcl_row_index(hd, b, h, heads_q, seqlen_q, row)] = acc;
}

/* LSE (natural log) -> log2 domain; a row with no visible key gets +inf so its P is 0. */
inline float mb_lse2(float lse) { return lse == FLASHCL_NEG_INF ? INFINITY : lse * FLASHCL_LOG2E_F; }

#if MMA_PLAIN
/*
 * Plain and causal calls (MMA_PLAIN: no compile-time variant, no window, d a
 * multiple of 16; the host's choice) run the dK/dV and dQ kernels as they were
 * measured before the variants existed, with `causal` as their last argument.
 * The general kernels below (#else) compute the same thing for these calls,
 * but measured 20-33% slower on the H200 (b4 h16 N4096 d128 bf16 backward:
 * 7.81 -> 9.83 ms, causal 4.18 -> 5.21 ms, b16 N1024 d64 1.23 -> 1.64 ms), most
 * likely from the band and sequence values they keep live in a kernel already
 * at 255 registers; until they are brought to parity this path stays.
 *
 * Their streamed tiles (Q/dO for dK/dV, K/V for dQ) go through MB_STAGES stages.
 */
__kernel __attribute__((reqd_work_group_size(MB_THREADS, 1, 1))) void
flash_bwd_mma_dkdv(__global const ushort *Q, VIEW_ARGS(q), __global const ushort *K, VIEW_ARGS(k),
                   __global const ushort *V, VIEW_ARGS(v), __global const ushort *dO, VIEW_ARGS(do),
                   __global const float *LSE, ulong lse_off, __global const float *Dsum, __global ushort *dK,
                   VIEW_ARGS(dk), __global ushort *dV, VIEW_ARGS(dv), int seqlen_q, int seqlen_k, int heads_q,
                   int group, float scale_log2, float scale, int causal
#if MB_DS
                   ,
                   __global ushort *dS, ulong ds_keys, ulong ds_pitch
#endif
) {
    /* K and V of the block first (for the fragments), then two stages of a Q tile and a dO tile:
       each tile's copies are issued by the tile before, so they land behind its products. */
#define MB_KV_E (MMA_BWD_BC * MB_LD)
#define MB_QT_E (MMA_BWD_BR * MB_LD)
#define MB_SM_E (2 * MB_KV_E > 2 * MB_STAGES * MB_QT_E ? 2 * MB_KV_E : 2 * MB_STAGES * MB_QT_E)
    __local ushort smem[MB_SM_E] __attribute__((aligned(16)));
    __local float lse_s[MB_STAGES][MMA_BWD_BR], d_s[MB_STAGES][MMA_BWD_BR];
    __local ushort *qs = smem, *dos = smem + MB_QT_E; /* stage 0; stage 1 is 2 MB_QT_E on */

    const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
    const long k0 = (long)get_group_id(0) * MMA_BWD_BC;
    const long shift = (long)seqlen_k - seqlen_q; /* row i sees keys <= i + shift */

    uint kf[MB_DT][4], vf[MB_DT][4];
    mb_load_tile(smem, K + VIEW_BASE(k, b, hk), k_sr, k0, MMA_BWD_BC, seqlen_k, lid);
    mb_load_tile(smem + MB_KV_E, V + VIEW_BASE(v, b, hk), v_sr, k0, MMA_BWD_BC, seqlen_k, lid);
    ptx_cp_commit();
    ptx_cp_wait_all();
    barrier(CLK_LOCAL_MEM_FENCE);
    mb_frags_a(smem, warp * 16, lane, kf);
    mb_frags_a(smem + MB_KV_E, warp * 16, lane, vf);
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp has its fragments: the stages take the buffer */

    float dk[HEAD_DIM / 8][4], dv[HEAD_DIM / 8][4];
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 8; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c) dk[n][c] = dv[n][c] = 0.0f;

    /* Query rows that see a key of this block: row >= k0 - shift. */
    long q_begin = 0;
    if (causal) q_begin = max(0L, k0 - shift) / MMA_BWD_BR * MMA_BWD_BR;
    const long key_lo = k0 + warp * 16 + (lane >> 2); /* this thread's keys: key_lo, key_lo + 8 */
    const uint n_lane = MB_LANE_N(lane), k_lane = MB_LANE_K(lane);
    const uint qs_n = ptx_smem_addr(qs) + n_lane, qs_k = ptx_smem_addr(qs) + k_lane;
    const uint dos_n = ptx_smem_addr(dos) + n_lane, dos_k = ptx_smem_addr(dos) + k_lane;

    /* Query head h's tile at row r0 -> stage st: Q and dO by cp.async (one group), LSE and D stored. */
#define MB_PLAIN_STAGE(st, h, r0)                                                                                      \
    do {                                                                                                               \
        mb_load_tile(qs + (st)*2 * MB_QT_E, Q + VIEW_BASE(q, b, (h)), q_sr, (r0), MMA_BWD_BR, seqlen_q, lid);          \
        mb_load_tile(dos + (st)*2 * MB_QT_E, dO + VIEW_BASE(do, b, (h)), do_sr, (r0), MMA_BWD_BR, seqlen_q, lid);      \
        ptx_cp_commit();                                                                                               \
        if (lid < MMA_BWD_BR) {                                                                                        \
            const long r = (r0) + lid;                                                                                 \
            const ulong at = ((ulong)b * heads_q + (h)) * seqlen_q + (r < seqlen_q ? r : 0);                           \
            lse_s[st][lid] = r < seqlen_q ? mb_lse2(LSE[lse_off + at]) : INFINITY;                                     \
            d_s[st][lid] = r < seqlen_q ? Dsum[at] : 0.0f;                                                             \
        }                                                                                                              \
    } while (0)
    if (MB_STAGES == 2 && q_begin < seqlen_q) MB_PLAIN_STAGE(0, hk * group, q_begin);
    int st = 0;
    for (int hh = 0; hh < group; ++hh) {
        for (long q0 = q_begin; q0 < seqlen_q; q0 += MMA_BWD_BR, st ^= 1) {
            const long nq = q0 + MMA_BWD_BR < seqlen_q ? q0 + MMA_BWD_BR : q_begin; /* the next tile: row, head */
            const int nh = q0 + MMA_BWD_BR < seqlen_q ? hh : hh + 1;
            const int cur = MB_STAGES == 2 ? st : 0; /* this tile's stage */
#if MB_STAGES == 1
            barrier(CLK_LOCAL_MEM_FENCE); /* everyone is done with the tile before: its stage is free */
            MB_PLAIN_STAGE(0, hk * group + hh, q0);
            ptx_cp_wait_all();
            barrier(CLK_LOCAL_MEM_FENCE);
#else
            /* This tile's copies are the only ones in flight. One barrier after them both makes them
               visible and tells that every warp is done with the tile before, whose stage the next
               tile's copies then take (one barrier a tile instead of two). */
            ptx_cp_wait_all();
            barrier(CLK_LOCAL_MEM_FENCE);
            if (nh < group) MB_PLAIN_STAGE(st ^ 1, hk * group + nh, nq);
#endif
            const uint so = (uint)(cur * 2 * MB_QT_E * 2); /* this stage's byte offset */

            /* S^T = K Q^T: 16 keys x MMA_BWD_BR queries per warp. */
            float s[MMA_BWD_BR / 8][4];
#pragma unroll
            for (int n = 0; n < MMA_BWD_BR / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            MB_MMA_ABT(s, kf, qs_n + so, MMA_BWD_BR);
            /* P^T; masked where the key is past the end or above the diagonal. */
            const int need_mask = k0 + MMA_BWD_BC > seqlen_k || (causal && k0 + MMA_BWD_BC - 1 > q0 + shift);
            uint pf[MMA_BWD_BR / 16][4];
#pragma unroll
            for (int n = 0; n < MMA_BWD_BR / 8; ++n) {
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const int qc = n * 8 + (lane & 3) * 2 + (c & 1);
                    const long key = key_lo + (c >> 1) * 8, row = q0 + qc;
                    float p = ptx_exp2(fma(s[n][c], scale_log2, -lse_s[cur][qc]));
                    if (need_mask && (key >= seqlen_k || (causal && key > row + shift))) p = 0.0f;
                    s[n][c] = p;
                }
                pf[n >> 1][(n & 1) * 2 + 0] = ptx_pack(s[n][0], s[n][1]);
                pf[n >> 1][(n & 1) * 2 + 1] = ptx_pack(s[n][2], s[n][3]);
            }
            /* dV += P^T dO (k = queries). */
            MB_MMA_PB(dv, pf, dos_k + so, MMA_BWD_BR, MB_DT, 0);
            /* dP^T = V dO^T. */
            float dp_[MMA_BWD_BR / 8][4];
#pragma unroll
            for (int n = 0; n < MMA_BWD_BR / 8; ++n) dp_[n][0] = dp_[n][1] = dp_[n][2] = dp_[n][3] = 0.0f;
            MB_MMA_ABT(dp_, vf, dos_n + so, MMA_BWD_BR);
            /* dS^T = P^T (dP^T - D), packed as the A operand of dK += dS^T Q. */
            MB_DS_PACK(pf, s, dp_, d_s[cur], lane, MMA_BWD_BR);
#if MB_DS
            if (ds_pitch != 0) /* 0: the host runs flash_bwd_mma_dq instead (no scratch) */
                MB_DS_STORE(dS, ds_keys, ds_pitch, (ulong)b * heads_q + hk * group + hh, key_lo, q0, pf, lane,
                            MMA_BWD_BR);
#endif
            MB_MMA_PB(dk, pf, qs_k + so, MMA_BWD_BR, MB_DT, 0);
        }
    }
    const long kr = k0 + warp * 16;
    mb_store(dK + VIEW_BASE(dk, b, hk), dk_sr, kr, seqlen_k, lane, scale, dk, 0);
    mb_store(dV + VIEW_BASE(dv, b, hk), dv_sr, kr, seqlen_k, lane, 1.0f, dv, 0);
#undef MB_PLAIN_STAGE
#undef MB_KV_E
#undef MB_QT_E
#undef MB_SM_E
}

__kernel __attribute__((reqd_work_group_size(MB_THREADS, 1, 1))) void
flash_bwd_mma_dq(__global const ushort *Q, VIEW_ARGS(q), __global const ushort *K, VIEW_ARGS(k),
                 __global const ushort *V, VIEW_ARGS(v), __global const ushort *dO, VIEW_ARGS(do),
                 __global const float *LSE, ulong lse_off, __global const float *Dsum, __global ushort *dQ,
                 VIEW_ARGS(dq), int seqlen_q, int seqlen_k, int heads_q, int group, float scale_log2, float scale,
                 int causal) {
#define MB_QB_E (MMA_BWD_BC * MB_LD)
#define MB_KT_E (MMA_BWD_BCQ * MB_LD)
#define MB_SM_E (2 * MB_QB_E > 2 * MB_STAGES * MB_KT_E ? 2 * MB_QB_E : 2 * MB_STAGES * MB_KT_E)
    __local ushort smem[MB_SM_E] __attribute__((aligned(16)));
    __local ushort *ks = smem, *vs = smem + MB_KT_E; /* stage 0; stage 1 is 2 MB_KT_E on (K/V double-buffered) */

    const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
    /* Heaviest (causal) blocks first. */
    const int block = (int)get_num_groups(0) - 1 - (int)get_group_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2), hk = h / group;
    const long q0 = (long)block * MMA_BWD_BC;
    const long shift = (long)seqlen_k - seqlen_q;

    uint qf[MB_DT][4], of[MB_DT][4];
    mb_load_tile(smem, Q + VIEW_BASE(q, b, h), q_sr, q0, MMA_BWD_BC, seqlen_q, lid);
    mb_load_tile(smem + MB_QB_E, dO + VIEW_BASE(do, b, h), do_sr, q0, MMA_BWD_BC, seqlen_q, lid);
    ptx_cp_commit();
    ptx_cp_wait_all();
    barrier(CLK_LOCAL_MEM_FENCE);
    mb_frags_a(smem, warp * 16, lane, qf);
    mb_frags_a(smem + MB_QB_E, warp * 16, lane, of);
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp has its fragments: the stages take the buffer */

    const long r0 = q0 + warp * 16 + (lane >> 2); /* this thread's rows: r0, r0 + 8 */
    const ulong rbase = ((ulong)b * heads_q + h) * seqlen_q;
    float l2[2], dd[2];
    for (int i = 0; i < 2; ++i) {
        const long r = r0 + i * 8;
        l2[i] = r < seqlen_q ? mb_lse2(LSE[lse_off + rbase + r]) : INFINITY;
        dd[i] = r < seqlen_q ? Dsum[rbase + r] : 0.0f;
    }
    float dq[HEAD_DIM / 8][4];
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

    const long last_row = min(q0 + MMA_BWD_BC, (long)seqlen_q) - 1;
    long kv_end = seqlen_k;
    if (causal) kv_end = clamp(last_row + shift + 1, 0L, (long)seqlen_k);
    const uint n_lane = MB_LANE_N(lane), k_lane = MB_LANE_K(lane);
    const uint ks_n = ptx_smem_addr(ks) + n_lane, ks_k = ptx_smem_addr(ks) + k_lane, vs_n = ptx_smem_addr(vs) + n_lane;
    __global const ushort *Kb = K + VIEW_BASE(k, b, hk), *Vb = V + VIEW_BASE(v, b, hk);

    /* Key tile kv0 -> stage st (one copy group); each tile's copies are issued by the tile before. */
#define MB_PLAIN_KV(st, kv0)                                                                                           \
    do {                                                                                                               \
        mb_load_tile(ks + (st)*2 * MB_KT_E, Kb, k_sr, (kv0), MMA_BWD_BCQ, seqlen_k, lid);                              \
        mb_load_tile(vs + (st)*2 * MB_KT_E, Vb, v_sr, (kv0), MMA_BWD_BCQ, seqlen_k, lid);                              \
        ptx_cp_commit();                                                                                               \
    } while (0)
    if (MB_STAGES == 2 && kv_end > 0) MB_PLAIN_KV(0, 0);
    for (long kv0 = 0, st = 0; kv0 < kv_end; kv0 += MMA_BWD_BCQ, st ^= 1) {
        barrier(CLK_LOCAL_MEM_FENCE); /* everyone is done with the tile before: its stage is free */
        if (MB_STAGES == 1) {
            MB_PLAIN_KV(0, kv0);
            ptx_cp_wait_all();
        } else if (kv0 + MMA_BWD_BCQ < kv_end) {
            MB_PLAIN_KV(st ^ 1, kv0 + MMA_BWD_BCQ);
            ptx_cp_wait_one(); /* this tile's group is in; the next one's may still be in flight */
        } else {
            ptx_cp_wait_all();
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const uint so = (uint)((MB_STAGES == 2 ? st : 0) * 2 * MB_KT_E * 2); /* this stage's byte offset */

        float s[MMA_BWD_BCQ / 8][4], dp_[MMA_BWD_BCQ / 8][4];
#pragma unroll
        for (int n = 0; n < MMA_BWD_BCQ / 8; ++n)
#pragma unroll
            for (int c = 0; c < 4; ++c) s[n][c] = dp_[n][c] = 0.0f;
        MB_MMA_ABT2(s, qf, ks_n + so, dp_, of, vs_n + so, MMA_BWD_BCQ);
        const int need_mask = kv0 + MMA_BWD_BCQ > seqlen_k || (causal && kv0 + MMA_BWD_BCQ - 1 > q0 + shift);
        uint pf[MMA_BWD_BCQ / 16][4];
#pragma unroll
        for (int n = 0; n < MMA_BWD_BCQ / 8; ++n) {
            float ds[4];
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const long key = kv0 + n * 8 + (lane & 3) * 2 + (c & 1), row = r0 + (c >> 1) * 8;
                float p = ptx_exp2(fma(s[n][c], scale_log2, -l2[c >> 1]));
                if (need_mask && (key >= seqlen_k || (causal && key > row + shift))) p = 0.0f;
                ds[c] = p * (dp_[n][c] - dd[c >> 1]);
            }
            pf[n >> 1][(n & 1) * 2 + 0] = ptx_pack(ds[0], ds[1]);
            pf[n >> 1][(n & 1) * 2 + 1] = ptx_pack(ds[2], ds[3]);
        }
        /* dQ += dS K (k = keys). */
        MB_MMA_PB(dq, pf, ks_k + so, MMA_BWD_BCQ, MB_DT, 0);
    }
    mb_store(dQ + VIEW_BASE(dq, b, h), dq_sr, q0 + warp * 16, seqlen_q, lane, scale, dq, 0);
#undef MB_PLAIN_KV
#undef MB_QB_E
#undef MB_KT_E
#undef MB_SM_E
}

#else /* the general kernels: every variant */

/*
 * P of the pair (row i, key j) of a sequence from its raw score s (q.k), and in
 * *g the softcap's derivative (1 without). `check`: test the pair against the
 * band, the masks and the sequence's rows (a uniform flag: tiles known plain
 * skip it); a pair that fails gets P = 0 without reading a mask or bias.
 */
inline float mb_prob(float s, float lse2, flashcl_head hd, long i, long j, int check, float scale_log2, float cap_inv,
                     float *g, VARIANT_ARGS) {
    *g = 1.0f;
    if (check && (i >= hd.sq || !flashcl_visible(hd, i, j, VARIANT_PASS))) return 0.0f;
#if MB_TERMS
    float x = s * scale_log2;
#if HAS_SOFTCAP
    const float t = MMA_TANH(x * cap_inv);
    x = softcap2 * t;
    *g = 1.0f - t * t;
#endif
#if HAS_ALIBI
    x -= hd.slope2 * fabs((float)(i + hd.off - j));
#endif
    return ptx_exp2(x + flashcl_bias2(hd, i, j, VARIANT_PASS) - lse2);
#else
    (void)cap_inv;
    return ptx_exp2(fma(s, scale_log2, -lse2));
#endif
}

#if MB_WG
/* A fragments of 16 rows of a view (this thread's rows `row`, row + 8) straight from global memory:
   dims 2c, 2c + 1 and those + 8 of each 16-dim step; zeros past `limit` and the real head dim. */
inline void mb_frags_global(__global const ushort *base, ulong stride_row, long row, long limit, int lane,
                            uint f[MB_DT][4]) {
#pragma unroll
    for (int kk = 0; kk < MB_DT; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const long r = row + (i & 1) * 8;
            const int col = kk * 16 + (lane & 3) * 2 + (i >> 1) * 8;
            const int ok = r < limit && (MB_D_REAL == HEAD_DIM || col < MB_D_REAL);
            f[kk][i] = ok ? *(__global const uint *)(base + (ulong)(ok ? r : 0) * stride_row + (ok ? col : 0)) : 0u;
        }
}
#endif

#if HAS_DROPOUT
/* The dropout factor of a pair in row i (0 or 1/(1-p)) from its 16 RNG bits, the forward's (from
   flashcl_dropout_call or frag_dropout_cols, cl/ptx.cl). */
inline float mb_keep_bits(flashcl_head hd, long i, uint bits, VARIANT_ARGS) {
    return i < hd.sq && bits >= drop_threshold ? drop_scale : 0.0f;
}
#endif

/* The dK/dV kernel's walk, in one place because flash_bwd_mma_dq_ds replays it (mb_ds_stored) to
   know which dS^T tiles were stored: key block [k0, mb_block_last] visits the query tiles of
   MMA_BWD_BR rows from mb_walk_begin up to mb_walk_end (the band's inverse) that mb_walk_keeps. */
inline long mb_block_last(flashcl_head hd, long k0) { return min(k0 + MMA_BWD_BC, hd.sk) - 1; }
inline long mb_walk_begin(flashcl_head hd, long k0, int win_right) {
    return flashcl_q_begin(hd, k0, MMA_BWD_BR, win_right);
}
inline long mb_walk_end(flashcl_head hd, long k1, int win_left) { return flashcl_q_end(hd, k1, win_left); }
inline int mb_walk_keeps(flashcl_head hd, long t0, long k0, long k1, VARIANT_ARGS) {
    return !flashcl_tile_skipped(hd, t0, t0 + MMA_BWD_BR - 1, k0, k1, VARIANT_PASS);
}

__kernel __attribute__((reqd_work_group_size(MB_THREADS, 1, 1))) void
flash_bwd_mma_dkdv(__global const mb_t *Q, VIEW_ARGS(q), __global const mb_t *K, VIEW_ARGS(k),
                   __global const mb_t *V, VIEW_ARGS(v), __global const mb_t *dO, VIEW_ARGS(do),
                   __global const float *LSE, ulong lse_off, __global const float *Dsum, __global mb_t *dK,
                   VIEW_ARGS(dk), __global mb_t *dV, VIEW_ARGS(dv), int seqlen_q, int seqlen_k, int heads_q,
                   int group, float scale_log2, float scale, VARIANT_ARGS
#if MB_DS
                   ,
                   __global ushort *dS, ulong ds_keys, ulong ds_pitch
#endif
#if MB_PART == 3
                   ,
                   __global ushort *Ps, int p_store
#endif
) {
    /* K and V of the block first (for the fragments; one after the other when sliced), then Q and dO tiles. */
#define MB_KV_E (MMA_BWD_BC * MB_LD)
#define MB_QT_E (MMA_BWD_BR * MB_LD)
#define MB_KV_STAGE (MB_SLICES > 1 ? MB_KV_E : 2 * MB_KV_E)
#define MB_SM_E (MB_KV_STAGE > 2 * MB_QT_E ? MB_KV_STAGE : 2 * MB_QT_E)
    __local mb_t smem[MB_SM_E] __attribute__((aligned(16)));
    __local float lse_s[MMA_BWD_BR], d_s[MMA_BWD_BR];
    __local mb_t *qs = smem, *dos = smem + MB_QT_E;

    const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
    const int slice = (int)get_group_id(0) % MB_WG_PER_BLOCK, out0 = slice * MB_OUT; /* my output dims */
    const long k0 = (long)(get_group_id(0) / MB_WG_PER_BLOCK) * MMA_BWD_BC;
    /* The sequence's geometry is the same for every query head of the group. */
    const flashcl_head hd0 = flashcl_head_setup(b, hk * group, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    if (k0 >= hd0.sk) return; /* varlen: past this sequence (the whole group returns) */
    const long k1 = mb_block_last(hd0, k0);
    const float cap_inv = HAS_SOFTCAP ? 1.0f / softcap2 : 0.0f;

    uint kf[MB_DT][MB_AF];
#if MB_HAS_DP
    uint vf[MB_DT][MB_AF];
#endif
#if MB_SLICES > 1
    mb_stage_frags(smem, K + VIEW_BASE(k, b, hk) + hd0.k0 * k_sr, k_sr, k0, hd0.sk, lid, kf);
#if MB_HAS_DP
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp has its K fragments: V takes the buffer */
    mb_stage_frags(smem, V + VIEW_BASE(v, b, hk) + hd0.k0 * v_sr, v_sr, k0, hd0.sk, lid, vf);
#endif
#else
    mb_load_tile(smem, K + VIEW_BASE(k, b, hk) + hd0.k0 * k_sr, k_sr, k0, MMA_BWD_BC, hd0.sk, lid);
    mb_load_tile(smem + MB_KV_E, V + VIEW_BASE(v, b, hk) + hd0.k0 * v_sr, v_sr, k0, MMA_BWD_BC, hd0.sk, lid);
    ptx_cp_commit();
    ptx_cp_wait_all();
    barrier(CLK_LOCAL_MEM_FENCE);
    mb_frags_a(smem, warp * 16, lane, kf);
    mb_frags_a(smem + MB_KV_E, warp * 16, lane, vf);
#endif

#if MB_HAS_DV
    float dv[MB_OUT / 8][4];
    mb_zero(dv);
#endif
#if MB_HAS_DK
    float dk[MB_OUT / 8][4];
    mb_zero(dk);
#endif

    /* Query rows that see a key of this block: the band's inverse. */
    const long q_begin = mb_walk_begin(hd0, k0, win_right), q_end = mb_walk_end(hd0, k1, win_left);
    const long key_lo = k0 + warp * 16 + (lane >> 2); /* this thread's keys: key_lo, key_lo + 8 */
    const uint n_lane = MB_LANE_N(lane), k_lane = MB_LANE_K(lane);
    const mb_at qs_n = MB_AT(qs, n_lane), qs_k = MB_AT(qs, k_lane);
    const mb_at dos_n = MB_AT(dos, n_lane), dos_k = MB_AT(dos, k_lane);
#if MB_PART == 3
    (void)qs_k, (void)dos_k, (void)out0; /* no products into accumulators */
#endif

    for (int hh = 0; hh < group; ++hh) {
        const int h = hk * group + hh;
        const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
        __global const mb_t *Qb = Q + VIEW_BASE(q, b, h) + hd.q0 * q_sr;
        __global const mb_t *dOb = dO + VIEW_BASE(do, b, h) + hd.q0 * do_sr;
        for (long q0 = q_begin; q0 < q_end; q0 += MMA_BWD_BR) {
            const long q1 = q0 + MMA_BWD_BR - 1;
            if (!mb_walk_keeps(hd, q0, k0, k1, VARIANT_PASS)) continue; /* uniform */
            barrier(CLK_LOCAL_MEM_FENCE); /* everyone is done with the previous tiles (or K/V) */
            mb_load_tile(qs, Qb, q_sr, q0, MMA_BWD_BR, hd.sq, lid);
            mb_load_tile(dos, dOb, do_sr, q0, MMA_BWD_BR, hd.sq, lid);
            if (lid < MMA_BWD_BR) {
                const long r = q0 + lid;
                const ulong at = flashcl_row_index(hd, b, h, heads_q, seqlen_q, r < hd.sq ? r : 0);
                lse_s[lid] = r < hd.sq ? mb_lse2(LSE[lse_off + at]) : INFINITY;
                d_s[lid] = r < hd.sq ? Dsum[at] : 0.0f;
            }
            ptx_cp_commit();
            ptx_cp_wait_all();
            barrier(CLK_LOCAL_MEM_FENCE);

            /* S^T = K Q^T: 16 keys x MMA_BWD_BR queries per warp. */
            float s[MMA_BWD_BR / 8][4];
#pragma unroll
            for (int n = 0; n < MMA_BWD_BR / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            MB_MMA_ABT(s, kf, qs_n, MMA_BWD_BR);
            /* P^T (masked where the pair is hidden), dropped for dV; s keeps P g, z the factor. */
            const int check =
                MB_ALWAYS_CHECK || !flashcl_tile_plain(hd, q0, q1, k0, k0 + MMA_BWD_BC - 1, win_left, win_right);
            uint pf[MMA_BWD_BR / 16][MB_AF];
#if HAS_DROPOUT
#if MMA_BWD_BR > 64
#error "zmask holds 4 bits per 8 query rows of a tile in 32 bits"
#endif
            uint zmask = 0u;  /* bit 4n + c: score (n, c) kept (one register, where 16 floats spilled) */
            uint dw[2][2][2]; /* the dropout bits of tiles n, n + 1 (n even): [tile][key key_lo + 8 r][row q + p] */
#endif
#pragma unroll
            for (int n = 0; n < MMA_BWD_BR / 8; ++n) {
                float pz[4];
#if HAS_DROPOUT
                if ((n & 1) == 0)
                    frag_dropout_cols(hd, q0 + n * 8 + (lane & 3) * 2, k0 + warp * 16, lane, seed_lo, seed_hi,
                                      drop_off_lo, drop_off_hi, dw);
#endif
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const int qc = n * 8 + (lane & 3) * 2 + (c & 1);
                    const long key = key_lo + (c >> 1) * 8, row = q0 + qc;
                    float g;
                    const float p =
                        mb_prob(s[n][c], lse_s[qc], hd, row, key, check, scale_log2, cap_inv, &g, VARIANT_PASS);
#if HAS_DROPOUT
                    const float zz = mb_keep_bits(hd, row, dw[n & 1][c >> 1][c & 1], VARIANT_PASS);
#else
                    const float zz = 1.0f;
#endif
#if HAS_DROPOUT
                    zmask |= (zz != 0.0f ? 1u : 0u) << (4 * n + c);
#endif
                    pz[c] = p * zz;
                    s[n][c] = p * g;
                }
                MB_PACK_A(pf, n, pz[0], pz[1], pz[2], pz[3]);
            }
#if MB_PART == 3
            /* (P Z)^T for dV from it, where the host has the second scratch (uniform). */
            if (p_store && q0 < (long)ds_pitch)
                MB_DS_STORE(Ps, ds_keys, ds_pitch, (ulong)b * heads_q + h, key_lo, q0, pf, lane, MMA_BWD_BR);
#endif
#if MB_HAS_DV
            /* dV += (P Z)^T dO (k = queries), my output dims. */
            MB_MMA_PB(dv, pf, dos_k, MMA_BWD_BR, MB_ODT, out0);
#endif
#if MB_HAS_DP
            /* dP^T = V dO^T. */
            float dp_[MMA_BWD_BR / 8][4];
#pragma unroll
            for (int n = 0; n < MMA_BWD_BR / 8; ++n) dp_[n][0] = dp_[n][1] = dp_[n][2] = dp_[n][3] = 0.0f;
            MB_MMA_ABT(dp_, vf, dos_n, MMA_BWD_BR);
#if HAS_DROPOUT
#pragma unroll
            for (int n = 0; n < MMA_BWD_BR / 8; ++n)
#pragma unroll
                for (int c = 0; c < 4; ++c) dp_[n][c] = (zmask >> (4 * n + c)) & 1u ? dp_[n][c] * drop_scale : 0.0f;
#endif
            /* dS^T = P^T g (dP^T Z - D), packed as the A operand of dK += dS^T Q. */
            MB_DS_PACK(pf, s, dp_, d_s, lane, MMA_BWD_BR);
#if MB_DS
            /* One dK slice's work-group stores (every slice computed the same dS); a pitch of 0: none.
               A varlen sequence longer than max_seqlen_q (whose rows the call does not compute)
               stops at the scratch's columns (a multiple of MMA_BWD_BR). */
            if (ds_pitch != 0 && slice == 0 && q0 < (long)ds_pitch)
                MB_DS_STORE(dS, ds_keys, ds_pitch, (ulong)b * heads_q + h, key_lo, q0, pf, lane, MMA_BWD_BR);
#endif
#if MB_HAS_DK
            MB_MMA_PB(dk, pf, qs_k, MMA_BWD_BR, MB_ODT, out0);
#endif
#endif
        }
    }
#if MB_PART != 3
    const long kr = k0 + warp * 16;
#endif
#if MB_HAS_DK
    mb_store(dK + VIEW_BASE(dk, b, hk) + hd0.k0 * dk_sr, dk_sr, kr, hd0.sk, lane, scale, dk, out0);
#endif
#if MB_HAS_DV
    mb_store(dV + VIEW_BASE(dv, b, hk) + hd0.k0 * dv_sr, dv_sr, kr, hd0.sk, lane, 1.0f, dv, out0);
#endif
#undef MB_KV_E
#undef MB_QT_E
#undef MB_KV_STAGE
#undef MB_SM_E
}

#if MB_PART < 2 /* the sliced dK and dS parts' programs have no dQ kernel: dQ owns every output dim (MB_OUT above) */
__kernel __attribute__((reqd_work_group_size(MB_THREADS, 1, 1))) void
flash_bwd_mma_dq(__global const mb_t *Q, VIEW_ARGS(q), __global const mb_t *K, VIEW_ARGS(k),
                 __global const mb_t *V, VIEW_ARGS(v), __global const mb_t *dO, VIEW_ARGS(do),
                 __global const float *LSE, ulong lse_off, __global const float *Dsum, __global mb_t *dQ,
                 VIEW_ARGS(dq), int seqlen_q, int seqlen_k, int heads_q, int group, float scale_log2, float scale,
                 VARIANT_ARGS) {
#define MB_QB_E (MMA_BWD_BC * MB_LD)
#define MB_KT_E (MMA_BWD_BCQ * MB_LD)
#define MB_QB_STAGE (MB_SLICES > 1 ? MB_QB_E : 2 * MB_QB_E) /* Q and dO one after the other when sliced */
#define MB_SM_E (MB_QB_STAGE > 2 * MB_STAGES * MB_KT_E ? MB_QB_STAGE : 2 * MB_STAGES * MB_KT_E)
#if MB_WG
    /* Two buffers of a K tile and a V tile, swizzled (1024-byte atoms: cl/ptx.cl). */
    __local ushort smem[4 * MMA_BWD_BCQ * HEAD_DIM] __attribute__((aligned(1024)));
#else
    __local mb_t smem[MB_SM_E] __attribute__((aligned(16)));
    __local mb_t *ks = smem, *vs = smem + MB_KT_E; /* stage 0; stage 1 is 2 MB_KT_E on */
#endif

    const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
    /* Heaviest (causal) blocks first. */
    const int block = (int)get_num_groups(0) - 1 - (int)get_group_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2), hk = h / group;
    const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    const long q0 = (long)block * MMA_BWD_BC;
    if (q0 >= hd.sq) return; /* varlen: past this sequence (the whole group returns) */
    const long last_row = min(q0 + MMA_BWD_BC, hd.sq) - 1;
    const float cap_inv = HAS_SOFTCAP ? 1.0f / softcap2 : 0.0f;

    uint qf[MB_DT][MB_AF], of[MB_DT][MB_AF];
#if MB_WG
    /* Q's and dO's A fragments straight from global memory. */
    mb_frags_global(Q + VIEW_BASE(q, b, h) + hd.q0 * q_sr, q_sr, q0 + warp * 16 + (lane >> 2), hd.sq, lane, qf);
    mb_frags_global(dO + VIEW_BASE(do, b, h) + hd.q0 * do_sr, do_sr, q0 + warp * 16 + (lane >> 2), hd.sq, lane, of);
#elif MB_SLICES > 1
    mb_stage_frags(smem, Q + VIEW_BASE(q, b, h) + hd.q0 * q_sr, q_sr, q0, hd.sq, lid, qf);
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp has its Q fragments: dO takes the buffer */
    mb_stage_frags(smem, dO + VIEW_BASE(do, b, h) + hd.q0 * do_sr, do_sr, q0, hd.sq, lid, of);
#else
    mb_load_tile(smem, Q + VIEW_BASE(q, b, h) + hd.q0 * q_sr, q_sr, q0, MMA_BWD_BC, hd.sq, lid);
    mb_load_tile(smem + MB_QB_E, dO + VIEW_BASE(do, b, h) + hd.q0 * do_sr, do_sr, q0, MMA_BWD_BC, hd.sq, lid);
    ptx_cp_commit();
    ptx_cp_wait_all();
    barrier(CLK_LOCAL_MEM_FENCE);
    mb_frags_a(smem, warp * 16, lane, qf);
    mb_frags_a(smem + MB_QB_E, warp * 16, lane, of);
#endif

    const long r0 = q0 + warp * 16 + (lane >> 2); /* this thread's rows: r0, r0 + 8 */
    float l2[2], dd[2];
    for (int i = 0; i < 2; ++i) {
        const long r = r0 + i * 8;
        const ulong at = flashcl_row_index(hd, b, h, heads_q, seqlen_q, r < hd.sq ? r : 0);
        l2[i] = r < hd.sq ? mb_lse2(LSE[lse_off + at]) : INFINITY;
        dd[i] = r < hd.sq ? Dsum[at] : 0.0f;
    }
    float dq[MB_OUT / 8][4];
    mb_zero(dq);

    const long kv_end = flashcl_kv_end(hd, last_row, win_right);
    __global const mb_t *Kb = K + VIEW_BASE(k, b, hk) + hd.k0 * k_sr, *Vb = V + VIEW_BASE(v, b, hk) + hd.k0 * v_sr;
    long kv0 = flashcl_kv_begin(hd, q0, MMA_BWD_BCQ, win_left);
    while (kv0 < kv_end && flashcl_tile_skipped(hd, q0, last_row, kv0, kv0 + MMA_BWD_BCQ - 1, VARIANT_PASS)) {
        kv0 += MMA_BWD_BCQ;
    }
#if MB_WG
#define MB_TILE_E (MMA_BWD_BCQ * HEAD_DIM)
    /* Key tile at row kv -> stage st (K, then V, each MMA_BWD_BCQ rows, swizzled): one copy group. */
#define MB_DQ_KV_LOAD(st, kv)                                                                                          \
    do {                                                                                                               \
        __local ushort *at = smem + (st)*2 * MB_TILE_E;                                                                \
        wg_load_tile(at, Kb, k_sr, (kv), MMA_BWD_BCQ, hd.sk, lid, MB_THREADS, MB_CHUNKS, MB_D_REAL / 8);               \
        wg_load_tile(at + MB_TILE_E, Vb, v_sr, (kv), MMA_BWD_BCQ, hd.sk, lid, MB_THREADS, MB_CHUNKS, MB_D_REAL / 8);   \
        ptx_cp_commit();                                                                                               \
    } while (0)
#else
    /* Key tile at row kv -> stage st (K and V padded, the stages 2 MB_KT_E apart): one copy group. */
#define MB_DQ_KV_LOAD(st, kv)                                                                                          \
    do {                                                                                                               \
        mb_load_tile(ks + (st)*2 * MB_KT_E, Kb, k_sr, (kv), MMA_BWD_BCQ, hd.sk, lid);                                  \
        mb_load_tile(vs + (st)*2 * MB_KT_E, Vb, v_sr, (kv), MMA_BWD_BCQ, hd.sk, lid);                                  \
        ptx_cp_commit();                                                                                               \
    } while (0)
    const uint n_lane = MB_LANE_N(lane), k_lane = MB_LANE_K(lane);
    const mb_at ks_n = MB_AT(ks, n_lane), ks_k = MB_AT(ks, k_lane), vs_n = MB_AT(vs, n_lane);
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp has its Q/dO fragments: the stages take the buffer */
#endif
    /* The j-th visited key tile (tiles the block mask skips do not count) in stage j & 1. The next
       tile's copies are issued before this one's products, so they land behind them. */
    if (MB_STAGES == 2 && kv0 < kv_end) MB_DQ_KV_LOAD(0, kv0);
    for (int st = 0; kv0 < kv_end; st ^= 1) {
        long next = kv0 + MMA_BWD_BCQ;
        while (next < kv_end && flashcl_tile_skipped(hd, q0, last_row, next, next + MMA_BWD_BCQ - 1, VARIANT_PASS))
            next += MMA_BWD_BCQ;
        const int cur = MB_STAGES == 2 ? st : 0; /* this tile's stage */
        barrier(CLK_LOCAL_MEM_FENCE);            /* every warp is done with the tile before: its stage is free */
        if (MB_STAGES == 1) {
            MB_DQ_KV_LOAD(0, kv0);
            ptx_cp_wait_all();
        } else if (next < kv_end) {
            MB_DQ_KV_LOAD(st ^ 1, next);
            ptx_cp_wait_one(); /* this tile's group is in; the next one's may still be in flight */
        } else {
            ptx_cp_wait_all();
        }
#if MB_WG
        WG_PROXY_FENCE();
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[MMA_BWD_BCQ / 8][4], dp_[MMA_BWD_BCQ / 8][4];
#if MB_WG
        __local ushort *ks = smem + cur * 2 * MB_TILE_E;
        const ulong k_desc = wg_desc(ptx_smem_addr(ks), 1, 64), v_desc = wg_desc(ptx_smem_addr(ks + MB_TILE_E), 1, 64);
        WG_QKR(MMA_BWD_BCQ, MB_WG_SR, MB_WG_BLOCKS, MB_WG_DSTEPS, s, qf, k_desc, (ulong)(MMA_BWD_BCQ * 8));
        WG_QKR(MMA_BWD_BCQ, MB_WG_SR, MB_WG_BLOCKS, MB_WG_DSTEPS, dp_, of, v_desc, (ulong)(MMA_BWD_BCQ * 8));
#else
        const uint so = MB_BYTES(cur * 2 * MB_KT_E); /* this stage's offset */
#pragma unroll
        for (int n = 0; n < MMA_BWD_BCQ / 8; ++n)
#pragma unroll
            for (int c = 0; c < 4; ++c) s[n][c] = dp_[n][c] = 0.0f;
        MB_MMA_ABT2(s, qf, ks_n + so, dp_, of, vs_n + so, MMA_BWD_BCQ);
#endif /* MB_WG */
        const int check = MB_ALWAYS_CHECK || !flashcl_tile_plain(hd, q0 + warp * 16, q0 + warp * 16 + 15, kv0,
                                                                 kv0 + MMA_BWD_BCQ - 1, win_left, win_right);
        uint pf[MMA_BWD_BCQ / 16][MB_AF];
#if HAS_DROPOUT
        uint4 dw; /* the dropout call of rows r0, r0 + 8 and this lane's keys of tiles n, n + 1 (n even) */
#endif
#pragma unroll
        for (int n = 0; n < MMA_BWD_BCQ / 8; ++n) {
            float ds[4];
#if HAS_DROPOUT
            if ((n & 1) == 0)
                dw = flashcl_dropout_call(hd, r0, kv0 + n * 8 + (lane & 3) * 2, seed_lo, seed_hi, drop_off_lo,
                                          drop_off_hi);
#endif
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const long key = kv0 + n * 8 + (lane & 3) * 2 + (c & 1), row = r0 + (c >> 1) * 8;
                float g;
                const float p =
                    mb_prob(s[n][c], l2[c >> 1], hd, row, key, check, scale_log2, cap_inv, &g, VARIANT_PASS);
#if HAS_DROPOUT
                const float zz = mb_keep_bits(hd, row, frag_dropout_bits(dw, n, c), VARIANT_PASS);
#else
                const float zz = 1.0f;
#endif
                ds[c] = p * g * (dp_[n][c] * zz - dd[c >> 1]);
            }
            MB_PACK_A(pf, n, ds[0], ds[1], ds[2], ds[3]);
        }
        /* dQ += dS K (k = keys), every output dim. */
#if MB_WG
        /* K read transposed (keys are k, d is n): column blocks MMA_BWD_BCQ * 128 B apart, 2048 B per k step. */
        WG_PV(MB_WG_OR, MB_WG_STEPS, dq, pf, wg_desc(ptx_smem_addr(ks), MMA_BWD_BCQ * 8, 64), (ulong)128);
#else
        MB_MMA_PB(dq, pf, ks_k + so, MMA_BWD_BCQ, MB_DT, 0);
#endif /* MB_WG */
        kv0 = next;
    }
    ptx_cp_wait_all();
#undef MB_DQ_KV_LOAD
#if MB_WG
#undef MB_TILE_E
#endif
    mb_store(dQ + VIEW_BASE(dq, b, h) + hd.q0 * dq_sr, dq_sr, q0 + warp * 16, hd.sq, lane, scale, dq, 0);
#undef MB_QB_E
#undef MB_KT_E
#undef MB_QB_STAGE
#undef MB_SM_E
}
#endif /* MB_PART < 2 */
#endif

#if MB_DS && MB_PART < 2 /* in the program with the dQ kernel (the dV part's when sliced) */
/*
 * dQ = scale dS K from the dK/dV kernel's dS^T (MB_DS above): one work-group per MB_DSQ_ROWS query
 * rows (MB_DSQ_MT 16-row m-tiles per warp), key tiles of MB_DSQ_BC through two stages of __local
 * (dS^T rows of the block's query columns, K rows), each tile's copies issued by the tile before.
 * A warp's A fragments (16 rows x 16 keys each) are read from the key-major dS^T tile by
 * ldmatrix.trans; K is the B operand, each fragment read once for the warp's m-tiles. A taller
 * block reads each K tile (from L2) for more rows. The arguments are flash_bwd_mma_dq's (Q, V,
 * dO, LSE and D unused) and the scratch's.
 *
 * Entries the dK/dV kernel never visited hold whatever the scratch held: they are zeroed before
 * the product. Plain builds: those above the causal diagonal, per pair on the diagonal tiles. The
 * general kernels: whole fragments, by mb_ds_stored's replay of the dK/dV kernel's walk (its
 * visited tiles hold every pair, hidden ones as 0), so no mask or bias is read again.
 */
#ifndef MB_DSQ_MT
#define MB_DSQ_MT 1
#endif
#define MB_DSQ_ROWS (16 * MB_DSQ_MT * MMA_WARPS)
#define MB_DSQ_BC 32 /* keys per tile: the two stages of K and dS^T within 48 KiB at d = 256 */
#if MB_DSQ_MT * HEAD_DIM > 256
#error "MB_DSQ_MT: its dQ accumulators are MB_DSQ_MT * HEAD_DIM / 2 registers (2 m-tiles up to d = 128)"
#endif
#if MMA_BWD_BR % 16 || MMA_BWD_BC % MB_DSQ_BC
#error "a dS fragment (16 rows x 16 keys) lies in one of the dK/dV kernel's tiles"
#endif

#if !MMA_PLAIN
/* Whether the dK/dV kernel stored the dS^T of rows [r, r + 15] x keys [j, j + 15] (multiples of 16):
   whether its walk (mb_walk_*) visited query tile t0 of key block k0, the block being inside the
   sequence (the kernel returns before walking otherwise). */
inline int mb_ds_stored(flashcl_head hd, long r, long j, VARIANT_ARGS) {
    const long k0 = j / MMA_BWD_BC * MMA_BWD_BC, k1 = mb_block_last(hd, k0);
    const long t0 = r / MMA_BWD_BR * MMA_BWD_BR;
    return k0 < hd.sk && t0 >= mb_walk_begin(hd, k0, win_right) && t0 < mb_walk_end(hd, k1, win_left) &&
           mb_walk_keeps(hd, t0, k0, k1, VARIANT_PASS);
}
#endif

__kernel __attribute__((reqd_work_group_size(MB_THREADS, 1, 1))) void
flash_bwd_mma_dq_ds(__global const ushort *Q, VIEW_ARGS(q), __global const ushort *K, VIEW_ARGS(k),
                    __global const ushort *V, VIEW_ARGS(v), __global const ushort *dO, VIEW_ARGS(do),
                    __global const float *LSE, ulong lse_off, __global const float *Dsum, __global ushort *dQ,
                    VIEW_ARGS(dq), int seqlen_q, int seqlen_k, int heads_q, int group, float scale_log2, float scale,
#if MMA_PLAIN
                    int causal,
#else
                    VARIANT_ARGS,
#endif
                    __global const ushort *dS, ulong ds_keys, ulong ds_pitch) {
#define MB_DSL (MB_DSQ_ROWS + 8) /* a dS^T row in __local: the block's query columns and 16 bytes */
#define MB_DST_E (MB_DSQ_BC * MB_DSL)
#define MB_KT_E (MB_DSQ_BC * MB_LD)
#define MB_STAGE_E (MB_DST_E + MB_KT_E)
    __local ushort smem[2 * MB_STAGE_E] __attribute__((aligned(16)));
    const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
    /* Heaviest (causal) blocks first. */
    const int block = (int)get_num_groups(0) - 1 - (int)get_group_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2), hk = h / group;
    const long q0 = (long)block * MB_DSQ_ROWS, w0 = q0 + warp * 16 * MB_DSQ_MT; /* the warp's first row */
#if MMA_PLAIN
    const long sq = seqlen_q, sk = seqlen_k, shift = sk - sq;
    const long last_row = min(q0 + MB_DSQ_ROWS, sq) - 1;
    long kv_end = sk;
    if (causal) kv_end = clamp(last_row + shift + 1, 0L, sk);
    long kv0 = 0;
    __global const ushort *Kb = K + VIEW_BASE(k, b, hk);
    __global ushort *dQb = dQ + VIEW_BASE(dq, b, h);
#else
    const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    if (q0 >= hd.sq) return; /* varlen: past this sequence (the whole group returns) */
    const long sq = hd.sq, sk = hd.sk, last_row = min(q0 + MB_DSQ_ROWS, sq) - 1;
    /* Keys past the scratch's rows: only a varlen sequence longer than max_seqlen_k, whose keys
       past it the call does not compute (no dK/dV block reaches them). */
    const long kv_end = min(flashcl_kv_end(hd, last_row, win_right), (long)ds_keys);
    long kv0 = flashcl_kv_begin(hd, q0, MB_DSQ_BC, win_left);
    while (kv0 < kv_end && flashcl_tile_skipped(hd, q0, last_row, kv0, kv0 + MB_DSQ_BC - 1, VARIANT_PASS))
        kv0 += MB_DSQ_BC;
    __global const ushort *Kb = K + VIEW_BASE(k, b, hk) + hd.k0 * k_sr;
    __global ushort *dQb = dQ + VIEW_BASE(dq, b, h) + hd.q0 * dq_sr;
#endif

    float dq[MB_DSQ_MT][HEAD_DIM / 8][4];
#pragma unroll
    for (int mt = 0; mt < MB_DSQ_MT; ++mt)
#pragma unroll
        for (int n = 0; n < HEAD_DIM / 8; ++n) dq[mt][n][0] = dq[mt][n][1] = dq[mt][n][2] = dq[mt][n][3] = 0.0f;

    __global const ushort *dsb = dS + ((ulong)b * heads_q + h) * ds_keys * ds_pitch + (ulong)q0;
    /* ldmatrix.trans of dS^T rows (keys) as A (rows = queries): lanes 8 m .. 8 m + 7 address matrix m
       = (queries + 8 (m & 1)) x (keys + 8 (m >> 1)), the A fragment's four 8 x 8 parts in order. */
    const uint ds_a =
        (uint)((((lane & 7) + ((lane >> 4) << 3)) * MB_DSL + (int)(w0 - q0) + (((lane >> 3) & 1) << 3)) * 2);
    const uint ks_k = MB_LANE_K(lane);
    const uint base = ptx_smem_addr(smem);

    /* Key tile kv -> stage st: its dS^T rows (the block's query columns, 16 bytes a copy) and K
       rows (zero past the sequence's keys), one copy group. */
#define MB_DS_TILE(st, kv)                                                                                             \
    do {                                                                                                               \
        __local ushort *t_ = smem + (st)*MB_STAGE_E;                                                                   \
        for (int c_ = lid; c_ < MB_DSQ_BC * (MB_DSQ_ROWS / 8); c_ += MB_THREADS) {                                     \
            const int r_ = c_ / (MB_DSQ_ROWS / 8), ch_ = c_ - r_ * (MB_DSQ_ROWS / 8);                                  \
            __global const ushort *src_ = dsb + (ulong)((kv) + r_) * ds_pitch + ch_ * 8;                               \
            ptx_cp16(ptx_smem_addr(t_ + r_ * MB_DSL + ch_ * 8), src_, 16u);                                            \
        }                                                                                                              \
        mb_load_tile(t_ + MB_DST_E, Kb, k_sr, (kv), MB_DSQ_BC, sk, lid);                                               \
        ptx_cp_commit();                                                                                               \
    } while (0)
    if (kv0 < kv_end) MB_DS_TILE(0, kv0);
    for (int st = 0; kv0 < kv_end; st ^= 1) {
        long next = kv0 + MB_DSQ_BC;
#if !MMA_PLAIN
        while (next < kv_end && flashcl_tile_skipped(hd, q0, last_row, next, next + MB_DSQ_BC - 1, VARIANT_PASS))
            next += MB_DSQ_BC;
#endif
        barrier(CLK_LOCAL_MEM_FENCE); /* everyone is done with the tile before: its stage is free */
        if (next < kv_end) {
            MB_DS_TILE(st ^ 1, next);
            ptx_cp_wait_one(); /* this tile's group is in; the next one's may still be in flight */
        } else {
            ptx_cp_wait_all();
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const uint so = base + (uint)(st * MB_STAGE_E * 2);
        uint pf[MB_DSQ_MT][MB_DSQ_BC / 16][4];
#pragma unroll
        for (int mt = 0; mt < MB_DSQ_MT; ++mt)
#pragma unroll
            for (int kk = 0; kk < MB_DSQ_BC / 16; ++kk)
                ptx_ldsm_x4_trans(so + ds_a + (uint)((kk * 16 * MB_DSL + mt * 16) * 2), &pf[mt][kk][0], &pf[mt][kk][1],
                                  &pf[mt][kk][2], &pf[mt][kk][3]);
#if MMA_PLAIN
        /* On the diagonal: zero the pairs above it. */
        if (causal && kv0 + MB_DSQ_BC - 1 > w0 + shift) {
#pragma unroll
            for (int mt = 0; mt < MB_DSQ_MT; ++mt)
#pragma unroll
                for (int kk = 0; kk < MB_DSQ_BC / 16; ++kk)
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const long row = w0 + mt * 16 + (lane >> 2) + (i & 1) * 8;
                        const long key = kv0 + kk * 16 + (lane & 3) * 2 + (i >> 1) * 8;
                        const uint keep =
                            (key > row + shift ? 0u : 0xffffu) | (key + 1 > row + shift ? 0u : 0xffff0000u);
                        pf[mt][kk][i] &= keep;
                    }
        }
#else
        /* Where the warp's tile is not all visible, the fragments the dK/dV kernel never visited. */
        if (!flashcl_tile_plain(hd, w0, w0 + 16 * MB_DSQ_MT - 1, kv0, kv0 + MB_DSQ_BC - 1, win_left, win_right)) {
#pragma unroll
            for (int mt = 0; mt < MB_DSQ_MT; ++mt)
#pragma unroll
                for (int kk = 0; kk < MB_DSQ_BC / 16; ++kk)
                    if (!mb_ds_stored(hd, w0 + mt * 16, kv0 + kk * 16, VARIANT_PASS))
                        pf[mt][kk][0] = pf[mt][kk][1] = pf[mt][kk][2] = pf[mt][kk][3] = 0u;
        }
#endif
        /* dQ += dS K (k = keys), each K fragment (ldmatrix.trans, rows as k) read once for the m-tiles. */
        const uint kt = so + (uint)(MB_DST_E * 2) + ks_k;
#pragma unroll
        for (int kk = 0; kk < MB_DSQ_BC / 16; ++kk)
#pragma unroll
            for (int dn = 0; dn < MB_DT; ++dn) {
                uint b0, b1, b2, b3;
                ptx_ldsm_x4_trans(kt + (uint)(kk * 16 * MB_LD + dn * 16) * 2, &b0, &b1, &b2, &b3);
#pragma unroll
                for (int mt = 0; mt < MB_DSQ_MT; ++mt) {
                    PTX_MMA(dq[mt][2 * dn], pf[mt][kk], b0, b1);
                    PTX_MMA(dq[mt][2 * dn + 1], pf[mt][kk], b2, b3);
                }
            }
        kv0 = next;
    }
#pragma unroll
    for (int mt = 0; mt < MB_DSQ_MT; ++mt) mb_store(dQb, dq_sr, w0 + mt * 16, sq, lane, scale, dq[mt], 0);
#undef MB_DS_TILE
#undef MB_DSL
#undef MB_DST_E
#undef MB_KT_E
#undef MB_STAGE_E
}

#if MB_PART == 1
/*
 * flash_bwd_mma_dk_ds (sliced builds, d > 128, with the dS scratch): dK = scale dS^T Q, summed over
 * the GQA group's query heads, from the dS^T the dS part (MB_PART = 3) stored; in place of the dK
 * slices, each of which recomputes S and dP. One work-group per key block of MMA_BWD_BC keys, 16 a
 * warp, every output dim (the dV part's register profile: its dK accumulators are the dV part's dV
 * ones). Query steps of MB_DKQ rows follow the dS part's walk (mb_walk_*, tiles of MMA_BWD_BR
 * rows): a step's 16-row k-steps that the walk did not visit (outside the band, dropped by the block
 * mask, past the scratch's columns) are neither read nor multiplied, so only stored entries count;
 * inside a visited tile the hidden pairs were stored as 0. Double-buffered like dq_ds. Takes the
 * dK/dV kernel's arguments (it reads Q and the scratch, writes dK), then the (P Z)^T scratch and
 * `which`: 1 forms dV = (P Z)^T dO from Ps instead (the same product with other operands).
 */
#define MB_DKQ 32
#if MMA_BWD_BR % 16 || (MB_DKQ % MMA_BWD_BR && MMA_BWD_BR % MB_DKQ)
#error "a 16-row k-step of dk_ds lies in one of the dS part's query tiles"
#endif

/* Which 16-row k-steps of the step from query row q0 the dS part stored (bit kk: rows q0 + 16 kk on). */
inline uint mb_dk_mask(flashcl_head hd, long q0, long q_end, long k0, long k1, VARIANT_ARGS) {
    uint m = 0u;
#pragma unroll
    for (int kk = 0; kk < MB_DKQ / 16; ++kk) {
        const long t = q0 + kk * 16;
        if (t < q_end && mb_walk_keeps(hd, t / MMA_BWD_BR * MMA_BWD_BR, k0, k1, VARIANT_PASS)) m |= 1u << kk;
    }
    return m;
}

/* From step (*hh, *q0) on (query head hk * group + *hh), the first step with a stored k-step: its
   mask, or 0 when the walk is over (*hh == group). Uniform over the work-group. */
inline uint mb_dk_find(int b, int hk, int group, int heads_q, int seqlen_q, int seqlen_k, long q_begin, long q_end,
                       long k0, long k1, int *hh, long *q0, VARIANT_ARGS) {
    for (; *hh < group; ++*hh, *q0 = q_begin) {
        const flashcl_head hd = flashcl_head_setup(b, hk * group + *hh, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
        for (; *q0 < q_end; *q0 += MB_DKQ) {
            const uint m = mb_dk_mask(hd, *q0, q_end, k0, k1, VARIANT_PASS);
            if (m) return m;
        }
    }
    return 0u;
}

__kernel __attribute__((reqd_work_group_size(MB_THREADS, 1, 1))) void
flash_bwd_mma_dk_ds(__global const ushort *Q, VIEW_ARGS(q), __global const ushort *K, VIEW_ARGS(k),
                    __global const ushort *V, VIEW_ARGS(v), __global const ushort *dO, VIEW_ARGS(do),
                    __global const float *LSE, ulong lse_off, __global const float *Dsum, __global ushort *dK,
                    VIEW_ARGS(dk), __global ushort *dV, VIEW_ARGS(dv), int seqlen_q, int seqlen_k, int heads_q,
                    int group, float scale_log2, float scale, VARIANT_ARGS, __global const ushort *dS, ulong ds_keys,
                    ulong ds_pitch, __global const ushort *Ps, int which) {
#define MB_DKL (MB_DKQ + 8) /* a dS^T row (key) in __local: the step's query columns and 16 bytes */
#define MB_DKD_E (MMA_BWD_BC * MB_DKL)
#define MB_DKS_E (MB_DKD_E + MB_DKQ * MB_LD) /* a stage: the dS^T rows, then the Q rows */
    __local ushort smem[2 * MB_DKS_E] __attribute__((aligned(16)));
    const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
    const long k0 = (long)get_group_id(0) * MMA_BWD_BC;
    /* The sequence's geometry is the same for every query head of the group. */
    const flashcl_head hd0 = flashcl_head_setup(b, hk * group, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    if (k0 >= hd0.sk) return; /* varlen: past this sequence (the whole group returns) */
    const long k1 = mb_block_last(hd0, k0);
    /* The dS part's walk; it stored no column past the scratch's pitch (a varlen sequence longer
       than max_seqlen_q). */
    const long q_begin = mb_walk_begin(hd0, k0, win_right);
    const long q_end = min(mb_walk_end(hd0, k1, win_left), (long)ds_pitch);
    /* The product's operands (uniform): dK = scale dS^T Q, or dV = (P Z)^T dO. */
    __global const ushort *A = which ? Ps : dS, *Bm = which ? dO : Q;
    const ulong bm_off = which ? do_off : q_off, bm_sb = which ? do_sb : q_sb, bm_sh = which ? do_sh : q_sh;
    const ulong bm_sr = which ? do_sr : q_sr;
    __global ushort *out = which ? dV : dK;
    const ulong o_off = which ? dv_off : dk_off, o_sb = which ? dv_sb : dk_sb, o_sh = which ? dv_sh : dk_sh;
    const ulong o_sr = which ? dv_sr : dk_sr;

    float dk[HEAD_DIM / 8][4];
    mb_zero(dk);
    /* ldmatrix (not transposed) of the warp's 16 dS^T rows (keys) as A, k = the step's queries. */
    const uint ds_a = (uint)(((warp * 16 + (lane & 15)) * MB_DKL + (lane >> 4) * 8) * 2);
    const uint q_k = MB_LANE_K(lane);
    const uint base = ptx_smem_addr(smem);

    /* Step (hh, q0) with k-step mask m -> stage st: the block's dS^T rows over the step's columns
       (k-steps not stored: zeros, nothing read) and the step's Q rows (zero past the sequence). */
#define MB_DK_TILE(st_, hh_, q0_, m_)                                                                                      \
    do {                                                                                                               \
        __local ushort *t_ = smem + (st_)*MB_DKS_E;                                                                     \
        const int h_ = hk * group + (hh_);                                                                              \
        __global const ushort *dsb_ = A + ((ulong)b * heads_q + h_) * ds_keys * ds_pitch;                              \
        for (int c_ = lid; c_ < MMA_BWD_BC * (MB_DKQ / 8); c_ += MB_THREADS) {                                         \
            const int r_ = c_ / (MB_DKQ / 8), ch_ = c_ - r_ * (MB_DKQ / 8);                                            \
            const int ok_ = ((m_) >> (ch_ >> 1)) & 1u;                                                                  \
            __global const ushort *src_ = dsb_ + (ok_ ? (ulong)(k0 + r_) * ds_pitch + (ulong)(q0_) + ch_ * 8 : 0);      \
            ptx_cp16(ptx_smem_addr(t_ + r_ * MB_DKL + ch_ * 8), src_, ok_ ? 16u : 0u);                                 \
        }                                                                                                              \
        mb_load_tile(t_ + MB_DKD_E, Bm + VIEW_BASE(bm, b, h_) + hd0.q0 * bm_sr, bm_sr, (q0_), MB_DKQ, hd0.sq, lid);     \
        ptx_cp_commit();                                                                                               \
    } while (0)
    int hh = 0;
    long q0 = q_begin;
    uint steps = mb_dk_find(b, hk, group, heads_q, seqlen_q, seqlen_k, q_begin, q_end, k0, k1, &hh, &q0, VARIANT_PASS);
    if (steps) MB_DK_TILE(0, hh, q0, steps);
    for (int st = 0; steps; st ^= 1) {
        int nh = hh;
        long nq = q0 + MB_DKQ;
        if (nq >= q_end) { /* the next query head's walk */
            nq = q_begin;
            ++nh;
        }
        const uint nsteps =
            mb_dk_find(b, hk, group, heads_q, seqlen_q, seqlen_k, q_begin, q_end, k0, k1, &nh, &nq, VARIANT_PASS);
        barrier(CLK_LOCAL_MEM_FENCE); /* everyone is done with the step before: its stage is free */
        if (nsteps) {
            MB_DK_TILE(st ^ 1, nh, nq, nsteps);
            ptx_cp_wait_one(); /* this step's group is in; the next one's may still be in flight */
        } else {
            ptx_cp_wait_all();
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const uint so = base + (uint)(st * MB_DKS_E * 2), qt = so + (uint)(MB_DKD_E * 2) + q_k;
        /* dK += dS^T Q (k = queries), each k-step's A fragment once for every output dim. */
#pragma unroll
        for (int kk = 0; kk < MB_DKQ / 16; ++kk) {
            if (!((steps >> kk) & 1u)) continue; /* uniform: not stored, zeros */
            uint af[4];
            ptx_ldsm_x4(so + ds_a + (uint)(kk * 16 * 2), &af[0], &af[1], &af[2], &af[3]);
#pragma unroll
            for (int dn = 0; dn < MB_DT; ++dn) {
                uint b0, b1, b2, b3;
                ptx_ldsm_x4_trans(qt + (uint)(kk * 16 * MB_LD + dn * 16) * 2, &b0, &b1, &b2, &b3);
                PTX_MMA(dk[2 * dn], af, b0, b1);
                PTX_MMA(dk[2 * dn + 1], af, b2, b3);
            }
        }
        hh = nh, q0 = nq, steps = nsteps;
    }
    mb_store(out + VIEW_BASE(o, b, hk) + hd0.k0 * o_sr, o_sr, k0 + warp * 16, hd0.sk, lane, which ? 1.0f : scale, dk,
             0);
#undef MB_DK_TILE
#undef MB_DKL
#undef MB_DKD_E
#undef MB_DKS_E
}
#endif /* MB_PART == 1 */
#endif
