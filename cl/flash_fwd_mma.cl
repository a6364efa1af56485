/*
 * FlashAttention forward on NVIDIA tensor cores (sm_80+), through inline PTX:
 * mma.sync.m16n8k16 (bf16 or f16 in, fp32 accumulate) for both S = Q K^T and
 * O += P V, ldmatrix for the fragments, cp.async for the K/V tiles.
 *
 * The PTX wrappers (PTX_MMA, ptx_ldsm_x4, ptx_cp16, ...) are cl/ptx.cl's,
 * which the host puts in front of this file (after common.cl and
 * variants.cl). Only built after the host's probe (cl/probe_mma.cl) has
 * compiled and run the same instructions on this device and checked their
 * answer; no other device ever sees this file.
 *
 * Shape of the work:
 * - A work-group is MMA_WARPS warps; warp w owns MMA_MT consecutive 16-row
 *   tiles of the block (Br = 16 * MMA_MT * MMA_WARPS). Its Q fragments live in
 *   registers for the whole key loop (Q goes through __local once, for
 *   ldmatrix), or with MMA_QLOCAL Q stays in __local and each 16-dim slice is
 *   read again per key tile: 32 fewer registers per row tile, which is what
 *   keeps d = 128 at 32 rows per warp free of spills.
 * - K and V tiles (Bc keys x d) are single-buffered in __local, rows padded by
 *   16 bytes so the 8 row addresses of an ldmatrix fall in distinct banks.
 * - The loads overlap the math as in FlashAttention-2: V(j) is fetched while
 *   S = Q K(j)^T and the softmax run; K(j+1) while O += P V(j) runs.
 * - The softmax runs on the accumulator fragments: a thread holds 2 rows
 *   (lane/4 and lane/4 + 8) x 2 columns per 8-key tile, the row max is reduced
 *   over the 4 lanes of a quad with shfl.sync, the row sum stays per thread
 *   until the end. The S accumulator layout is the A-operand layout of the
 *   next mma once packed to 16 bits, so P never leaves registers.
 *
 * Head dims: HEAD_DIM (Q/K) and MMA_DV (V/O) are the user's d and d_v rounded
 * up to 16 (the mma's k step); MMA_DK_REAL and HEAD_DIM_V are the real ones.
 * The padding exists only in __local (chunks past the real dim are cp.async'd
 * as zeros) and in registers; nothing past d is read or written in the user's
 * memory.
 *
 * Variants (cl/variants.cl, the portable kernels' switches and arguments):
 * varlen, the causal/window band (only key tiles inside it are visited; tiles
 * the block mask drops are skipped and not loaded), softcap (the SFU's tanh,
 * ptx_tanh), ALiBi, bias and boolean masks (flashcl_score's terms), sinks
 * folded into the row at the end, dropout with the portable kernels' Philox
 * mask (flashcl_dropout_call, so the same bits). Without score terms the
 * scale is folded into the exponent's FMA (raw scores, masks set -inf); with
 * them every score is scaled first.
 *
 * Storage is 16-bit (ushort in the kernel); MMA_F16 picks f16 (1) or bf16 (0,
 * the default; cl/ptx.cl reads it). MMA_TF32=1 is float32 storage on the TF32
 * mma (m16n8k8, sm_80; the caller's allow_tf32): the same tiles and softmax,
 * the tiles float in __local (rows padded by 16 bytes, 4 floats, which puts
 * the 32 lanes' scalar fragment loads in 32 distinct banks), each fragment
 * element rounded to TF32 (cvt.rna) where it is loaded, P rounded the same,
 * O stored as float32. ldmatrix moves 16-bit rows only, so the fragments are
 * plain __local loads (mma_tf32_frag_*).
 * The host guarantees: d and d_v multiples of 8 (<= 256; <= 128 with
 * MMA_TF32), every view's offset and row stride 16-byte multiples (8 elements
 * of 16 bits, 4 floats) and the buffers 16-byte aligned (cp.async moves 16
 * bytes), scale > 0.
 */

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef MMA_DK_REAL
#define MMA_DK_REAL HEAD_DIM
#endif
#ifndef MMA_DV
#define MMA_DV HEAD_DIM
#endif
#ifndef MMA_WARPS
#define MMA_WARPS 4 /* warps per work-group; Br = 16 * MMA_WARPS */
#endif
#ifndef MMA_BC
#define MMA_BC 64 /* keys per K/V tile */
#endif
#ifndef MMA_MT
#define MMA_MT 2 /* 16-row tiles per warp: 2 halves the __local reads per mma, costs registers */
#endif
#ifndef MMA_QLOCAL
#define MMA_QLOCAL 0 /* 1: Q stays in __local and its fragments are reloaded per key tile (no Q registers) */
#endif
#ifndef MMA_TF32
#define MMA_TF32 0 /* 1: float32 storage on the TF32 mma */
#endif
#ifndef MMA_WG
#define MMA_WG 0 /* 1: Hopper's wgmma for both products (sm_90a; the host patches the PTX, cl/ptx.cl) */
#endif
#ifndef MMA_RESCALE_SLACK
#define MMA_RESCALE_SLACK 8.0f /* log2 growth of a row's max the online softmax absorbs before rescaling O */
#endif
#if MMA_WG
/* Two forms: Q in __local (MMA_QLOCAL, both products read their B from __local and S's A too: d
   and d_v 64 or 128), or Q in registers (S = Q K^T takes Q's fragments as A, the form for head
   dims whose Q would not fit __local beside K and V: d any multiple of 64 up to 256, d_v 64, 128
   or 256, where 256 runs P V as two products of 128 columns, wgmma's accumulator limit being
   what one asm statement should bind). */
#if MMA_MT != 1 || MMA_TF32 || MMA_SM75 || (MMA_WARPS != 4 && MMA_WARPS != 8) ||                                      \
    (MMA_BC != 32 && MMA_BC != 48 && MMA_BC != 64 && MMA_BC != 128)
#error "MMA_WG: 16-bit, 16 rows per warp, 1 or 2 warpgroups, Bc 32, 48, 64 or 128"
#endif
#if MMA_QLOCAL && ((HEAD_DIM != 64 && HEAD_DIM != 128) || (MMA_DV != 64 && MMA_DV != 128))
#error "MMA_WG with Q in __local: d and d_v 64 or 128"
#endif
#if !MMA_QLOCAL && (HEAD_DIM % 64 != 0 || HEAD_DIM > 256 || (MMA_DV != 64 && MMA_DV != 128 && MMA_DV != 256))
#error "MMA_WG with Q in registers: d a multiple of 64 up to 256, d_v 64, 128 or 256"
#endif
/* The literal numbers cl/ptx.cl's WG_QK and WG_PV take: accumulator registers per thread
   (N / 2) and k steps of 16. */
#if MMA_BC == 32
#define WG_S_R 16
#define WG_V_STEPS 2
#elif MMA_BC == 48
#define WG_S_R 24
#define WG_V_STEPS 3
#elif MMA_BC == 64
#define WG_S_R 32
#define WG_V_STEPS 4
#else
#define WG_S_R 64
#define WG_V_STEPS 8
#endif
/* 64-element column blocks of Q and K, and k steps of 16 over d (literal numbers) */
#if HEAD_DIM == 64
#define WG_D_BLOCKS 1
#define WG_Q_STEPS 4
#elif HEAD_DIM == 128
#define WG_D_BLOCKS 2
#define WG_Q_STEPS 8
#elif HEAD_DIM == 192
#define WG_D_BLOCKS 3
#define WG_Q_STEPS 12
#else
#define WG_D_BLOCKS 4
#define WG_Q_STEPS 16
#endif
/* P V's accumulators per product (WG_O_R registers, N = 2 WG_O_R columns) and products per tile */
#if MMA_DV == 64
#define WG_O_R 32
#define WG_PV_N "64"
#define WG_PV_HALVES 1
#else
#define WG_O_R 64
#define WG_PV_N "128"
#define WG_PV_HALVES (MMA_DV / 128)
#endif
#endif
#if MMA_TF32
typedef float mma_t; /* the storage type */
#define MMA_CE 4     /* elements per 16-byte chunk (one cp.async) */
#if MMA_QLOCAL
#error "MMA_TF32 keeps Q in registers"
#endif
#else
typedef ushort mma_t;
#define MMA_CE 8
#endif

#define MMA_THREADS (32 * MMA_WARPS)
#define MMA_BR (16 * MMA_MT * MMA_WARPS)
/* __local rows: padded by 16 bytes, or (with Q resident, where Q + K + V must
   fit 48 KiB unpadded) unpadded with chunk c of row r stored at c ^ (r & 7).
   Either way the 8 row addresses of an ldmatrix hit 8 distinct 16-byte bank
   groups. The XOR form needs rows of a multiple of 8 chunks (d = 64, 128, ...). */
#define MMA_SWZ (MMA_QLOCAL && !MMA_WG)
#if MMA_SWZ && (HEAD_DIM % 64 != 0 || MMA_DV % 64 != 0)
#error "MMA_QLOCAL needs padded head dims that are multiples of 64"
#endif
/* __local row of Q and K, in elements (unpadded in the swizzled layouts) */
#define MMA_LDK ((MMA_QLOCAL || MMA_WG) ? HEAD_DIM : HEAD_DIM + MMA_CE)
#define MMA_LDV ((MMA_QLOCAL || MMA_WG) ? MMA_DV : MMA_DV + MMA_CE) /* of V */
#define MMA_K_ELEMS (MMA_BC * MMA_LDK)
#define MMA_V_ELEMS (MMA_BC * MMA_LDV)
#define MMA_Q_ELEMS (MMA_BR * MMA_LDK)
#if MMA_QLOCAL
#define MMA_SMEM_ELEMS (MMA_Q_ELEMS + MMA_K_ELEMS + MMA_V_ELEMS)
#elif MMA_WG
#define MMA_SMEM_ELEMS (MMA_K_ELEMS + MMA_V_ELEMS) /* Q goes from global memory to registers */
#else
#define MMA_SMEM_ELEMS (MMA_Q_ELEMS > MMA_K_ELEMS + MMA_V_ELEMS ? MMA_Q_ELEMS : MMA_K_ELEMS + MMA_V_ELEMS)
#endif
/* Byte offset of 16-byte chunk pair 2*c2 (+ the lane's own bit in y) within an
   ldmatrix row: y is the lane's chunk bit, XORed with its row's low 3 bits when
   swizzled. 2*c2 has bit 0 clear, so 2*c2 + bit == 2*c2 ^ bit either way. */
#define MMA_COLB(c2, y) ((uint)((2 * (c2)) ^ (y)) << 4)
/* Scores the softmax sees: raw (the scale folded into the exponent) unless a
   score term needs them scaled first: softcap and ALiBi in the kernel's own
   32-bit code (MMA_FAST_TERMS), then a bias with the checks (MMA_BIAS_PATH). */
#define MMA_PRESCALED HAS_SCORE_TERMS
#define MMA_BIAS_PATH HAS_BIAS
#define MMA_FAST_TERMS (HAS_SOFTCAP || HAS_ALIBI)

/* Copies rows [row0, row0 + rows) of a view into a tile whose rows are `ld`
   elements and `chunks` 16-byte chunks; rows at or past `limit` and chunks at
   or past `real` (the head dim's padding) become zeros. */
inline void mma_load_tile(__local mma_t *tile, __global const mma_t *base, ulong stride_row, long row0, int rows,
                          long limit, int lid, int ld, int chunks, int real) {
#if MMA_WG
    (void)ld; /* wgmma's swizzled layout (cl/ptx.cl) */
    wg_load_tile(tile, base, stride_row, row0, rows, limit, lid, MMA_THREADS, chunks, real);
#else
    for (int c = lid; c < rows * chunks; c += MMA_THREADS) {
        const int r = c / chunks, ch = c - r * chunks;
        const long gr = row0 + r;
        const int ok = gr < limit && (real == chunks || ch < real); /* constants: folds unless padded */
        __global const mma_t *src = base + (ulong)(ok ? gr : 0) * stride_row + (ok ? ch : 0) * MMA_CE;
        const int pch = MMA_SWZ ? (ch ^ (r & 7)) : ch;
        ptx_cp16(ptx_smem_addr((__local const ushort *)(tile + r * ld + pch * MMA_CE)), (__global const ushort *)src,
                 ok ? 16u : 0u);
    }
#endif
    ptx_cp_commit();
}
#define MMA_LOAD_QK(tile, base, sr, row0, rows, limit)                                                                 \
    mma_load_tile(tile, base, sr, row0, rows, limit, lid, MMA_LDK, HEAD_DIM / MMA_CE, MMA_DK_REAL / MMA_CE)
#define MMA_LOAD_V(tile, base, sr, row0, limit)                                                                        \
    mma_load_tile(tile, base, sr, row0, MMA_BC, limit, lid, MMA_LDV, MMA_DV / MMA_CE, HEAD_DIM_V / MMA_CE)

#if MMA_TF32
/* TF32 fragments from row-major float tiles in __local (lane = 4 g + c), each element rounded
   to TF32. A of a 16 x 16 slice at t (two k = 8 halves): rows g, g + 8, columns c, c + 4. */
inline void mma_tf32_frag_a(__local const float *t, int ld, int lane, uint a[8]) {
    const int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        __local const float *p = t + g * ld + h * 8 + c;
        a[4 * h + 0] = ptx_tf32(p[0]);
        a[4 * h + 1] = ptx_tf32(p[8 * ld]);
        a[4 * h + 2] = ptx_tf32(p[4]);
        a[4 * h + 3] = ptx_tf32(p[8 * ld + 4]);
    }
}
/* B = K^T for 8 keys x 16 dims at t (the K tile's rows are keys): key g, dims c, c + 4 (+ 8). */
inline void mma_tf32_frag_k(__local const float *t, int ld, int lane, uint b[4]) {
    __local const float *p = t + (lane >> 2) * ld + (lane & 3);
    b[0] = ptx_tf32(p[0]);
    b[1] = ptx_tf32(p[4]);
    b[2] = ptx_tf32(p[8]);
    b[3] = ptx_tf32(p[12]);
}
/* B = V for 16 keys x 8 dims at t, in P's key order: k = c stands for key 2c, k = c + 4 for
   key 2c + 1 (the softmax's C fragment holds keys 2c, 2c + 1; a sum over k may take any order). */
inline void mma_tf32_frag_v(__local const float *t, int ld, int lane, uint b[4]) {
    __local const float *p = t + 2 * (lane & 3) * ld + (lane >> 2);
    b[0] = ptx_tf32(p[0]);
    b[1] = ptx_tf32(p[ld]);
    b[2] = ptx_tf32(p[8 * ld]);
    b[3] = ptx_tf32(p[9 * ld]);
}
#endif

/* The first key tile at or after kv0 that the block mask keeps for rows [r0, r1] (kv_end if none). */
inline long mma_next_tile(flashcl_head hd, long kv0, long kv_end, long r0, long r1, VARIANT_ARGS) {
    while (kv0 < kv_end && flashcl_tile_skipped(hd, r0, r1, kv0, kv0 + MMA_BC - 1, VARIANT_PASS)) kv0 += MMA_BC;
    return kv0;
}

__kernel __attribute__((reqd_work_group_size(MMA_THREADS, 1, 1))) void
flash_fwd_mma(__global const mma_t *Q, VIEW_ARGS(q), __global const mma_t *K, VIEW_ARGS(k), __global const mma_t *V,
              VIEW_ARGS(v), __global mma_t *O, VIEW_ARGS(o), FWD_ARGS) {
#if MMA_WG
    __local mma_t smem[MMA_SMEM_ELEMS] __attribute__((aligned(1024))); /* the swizzle's atoms: cl/ptx.cl */
#else
    __local mma_t smem[MMA_SMEM_ELEMS] __attribute__((aligned(16)));
#endif
#if MMA_QLOCAL
    __local mma_t *ks = smem + MMA_Q_ELEMS;
#else
    __local mma_t *ks = smem; /* reuses Q's space once Q is in registers */
#endif
    __local mma_t *vs = ks + MMA_K_ELEMS;

    const int lid = (int)get_local_id(0);
    const int warp = lid >> 5, lane = lid & 31;
    /* Heaviest (causal) blocks first, so the tail of the grid is short. */
    const int block = (int)get_num_groups(0) - 1 - (int)get_group_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const int hk = h / group;
    const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    const long q0 = (long)block * MMA_BR;
    if (q0 >= hd.sq) return; /* varlen: past this sequence (the whole group returns) */
    const long last_row = min(q0 + MMA_BR, hd.sq) - 1;
    const long sk = hd.sk, sq = hd.sq;

    __global const mma_t *Qb = Q + VIEW_BASE(q, b, h) + hd.q0 * q_sr;
    __global const mma_t *Kb = K + VIEW_BASE(k, b, hk) + hd.k0 * k_sr;
    __global const mma_t *Vb = V + VIEW_BASE(v, b, hk) + hd.k0 * v_sr;

    /* Key tiles this block visits: those inside the causal/window band of its rows. */
    const long kv_end = flashcl_kv_end(hd, last_row, win_right);
    long kv0 = mma_next_tile(hd, flashcl_kv_begin(hd, q0, MMA_BC, win_left), kv_end, q0, last_row, VARIANT_PASS);

#if !MMA_TF32
    /* Per-lane ldmatrix addresses: the lane's row start (bytes) and its chunk bit y (MMA_COLB). */
    const uint sw = MMA_SWZ ? (uint)(lane & 7) : 0u;
    const uint q_row = ptx_smem_addr(smem) + (uint)((warp * MMA_MT * 16 + (lane & 15)) * MMA_LDK * 2);
    const uint q_y = (uint)(lane >> 4) ^ sw;
#endif
#if MMA_WG && !MMA_QLOCAL
    /* Q's A fragments straight from global memory into registers, once per block (a thread's four
       registers of a 16-dim slice: rows g, g + 8 of its warp's 16 x dims 2c, 2c + 1 and those + 8),
       zeros past the sequence and past the real head dim; then K(kv0) and V(kv0), two copy groups. */
    uint qf[1][HEAD_DIM / 16][4];
    {
        const long qr = q0 + warp * 16 + (lane >> 2);
#pragma unroll
        for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const long row = qr + (i & 1) * 8;
                const int col = kk * 16 + (lane & 3) * 2 + (i >> 1) * 8;
                qf[0][kk][i] = row < sq && (MMA_DK_REAL == HEAD_DIM || col < MMA_DK_REAL)
                                   ? *(__global const uint *)(Qb + (ulong)row * q_sr + col)
                                   : 0u;
            }
    }
    if (kv0 < kv_end) MMA_LOAD_QK(ks, Kb, k_sr, kv0, MMA_BC, sk);
    if (kv0 < kv_end) MMA_LOAD_V(vs, Vb, v_sr, kv0, sk);
#else
    /* Q: global -> __local (A fragments, one per 16 dims). */
    MMA_LOAD_QK(smem, Qb, q_sr, q0, MMA_BR, sq);
#endif
#if MMA_QLOCAL
    /* Q stays in __local: its fragments are read again for every key tile, which
       frees 32 registers per 16-row tile for the accumulators (no spills at d = 128). */
    if (kv0 < kv_end) MMA_LOAD_QK(ks, Kb, k_sr, kv0, MMA_BC, sk);
#if MMA_WG
    /* The wgmma form's loads: K(j+1) is fetched as soon as every warp's S(j) is done, V(j+1) as soon
       as P V(j) is, so each has a softmax and a product to land behind (measured: 197 -> 326 TF/s
       at d = 128, README). Here V(kv0), the third copy group after Q and K(kv0). */
    if (kv0 < kv_end) MMA_LOAD_V(vs, Vb, v_sr, kv0, sk);
#endif
#elif !MMA_WG /* Q in registers through __local and ldmatrix (the wgmma form loaded it above) */
    uint qf[MMA_MT][HEAD_DIM / 16][MMA_TF32 ? 8 : 4];
    ptx_cp_wait_all();
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int mt = 0; mt < MMA_MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
#if MMA_TF32
            mma_tf32_frag_a(smem + (warp * MMA_MT * 16 + mt * 16) * MMA_LDK + kk * 16, MMA_LDK, lane, qf[mt][kk]);
#else
            ptx_ldsm_x4(q_row + (uint)(mt * 16 * MMA_LDK * 2) + MMA_COLB(kk, q_y), &qf[mt][kk][0], &qf[mt][kk][1],
                        &qf[mt][kk][2], &qf[mt][kk][3]);
#endif
    barrier(CLK_LOCAL_MEM_FENCE); /* the K tile reuses Q's __local */
    if (kv0 < kv_end) MMA_LOAD_QK(ks, Kb, k_sr, kv0, MMA_BC, sk);
#endif

    float acc[MMA_MT][MMA_DV / 8][4];
    float m[MMA_MT][2], l[MMA_MT][2]; /* running max (log2 domain) of rows r, r+8; this thread's part of the sums */
#pragma unroll
    for (int mt = 0; mt < MMA_MT; ++mt) {
#pragma unroll
        for (int n = 0; n < MMA_DV / 8; ++n) acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.0f;
        m[mt][0] = m[mt][1] = FLASHCL_NEG_INF;
        l[mt][0] = l[mt][1] = 0.0f;
    }
    const long w0 = q0 + warp * MMA_MT * 16; /* this warp's first row */
    const long r0 = w0 + (lane >> 2);        /* row of c0/c1 in m-tile 0 */
    const float sl2 = MMA_PRESCALED ? 1.0f : scale_log2;
#if MMA_FAST_TERMS
    const float cap_inv = HAS_SOFTCAP ? 1.0f / softcap2 : 0.0f;
    /* ALiBi's distance i + off - j, in ints relative to the first key tile (positions < 2^31). */
    const long kv_tile0 = kv0;
    const int row_off = (int)(r0 + hd.off - kv_tile0) - (lane & 3) * 2;
#endif

#if !MMA_TF32
    /* Per-lane ldmatrix row starts (bytes) inside a K or V tile, and chunk bits. */
    const uint ks_addr = ptx_smem_addr(ks) + (uint)(((lane & 7) + ((lane >> 4) << 3)) * MMA_LDK * 2);
    const uint vs_addr = ptx_smem_addr(vs) + (uint)(((lane & 7) + (((lane >> 3) & 1) << 3)) * MMA_LDV * 2);
    const uint k_y = (uint)((lane >> 3) & 1) ^ sw, v_y = (uint)(lane >> 4) ^ sw;
#endif
#if MMA_WG
    /* Swizzled tiles (cl/ptx.cl): Q (this warpgroup's 64 rows of the block's MMA_BR) and K K-major,
       8-row atoms 1024 B apart, column blocks MMA_BR * 128 and MMA_BC * 128 B apart; V MN-major,
       column blocks MMA_BC * 128 B apart along d_v, 8 keys 1024 B apart. */
    const ulong q_desc = wg_desc(ptx_smem_addr(smem) + (uint)((warp >> 2) * 64 * 128), 1, 64);
    const ulong k_desc = wg_desc(ptx_smem_addr(ks), 1, 64);
    const ulong v_desc = wg_desc(ptx_smem_addr(vs), MMA_BC * 8, 64);
#endif

    while (kv0 < kv_end) {
#if MMA_WG
        ptx_cp_wait_one(); /* Q and K(kv0) are in; V(kv0), the newest group, may still be in flight */
        WG_PROXY_FENCE();
        barrier(CLK_LOCAL_MEM_FENCE);
#else
        ptx_cp_wait_all();
        barrier(CLK_LOCAL_MEM_FENCE); /* K(kv0) is in; every warp is done with the previous V */
        MMA_LOAD_V(vs, Vb, v_sr, kv0, sk);
#endif

        /* S = Q K^T: one ldmatrix of K feeds 2 key tiles x MMA_MT row tiles. */
        float s[MMA_MT][MMA_BC / 8][4];
#if MMA_WG
#if MMA_QLOCAL
        WG_QK(MMA_BC, WG_S_R, WG_D_BLOCKS, s[0], q_desc, k_desc, (ulong)(MMA_BR * 8), (ulong)(MMA_BC * 8));
#else
        WG_QKR(MMA_BC, WG_S_R, WG_D_BLOCKS, WG_Q_STEPS, s[0], qf[0], k_desc, (ulong)(MMA_BC * 8));
#endif
        const long next = mma_next_tile(hd, kv0 + MMA_BC, kv_end, q0, last_row, VARIANT_PASS);
        barrier(CLK_LOCAL_MEM_FENCE); /* every warp's S is done: K(kv0)'s buffer is free */
        if (next < kv_end) MMA_LOAD_QK(ks, Kb, k_sr, next, MMA_BC, sk);
#else
#pragma unroll
        for (int mt = 0; mt < MMA_MT; ++mt)
#pragma unroll
            for (int n = 0; n < MMA_BC / 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
#if MMA_TF32
            /* One K fragment feeds MMA_MT row tiles. */
#pragma unroll
            for (int n = 0; n < MMA_BC / 8; ++n) {
                uint bk[4];
                mma_tf32_frag_k(ks + n * 8 * MMA_LDK + kk * 16, MMA_LDK, lane, bk);
#pragma unroll
                for (int mt = 0; mt < MMA_MT; ++mt) PTX_MMA_TF32_K16(s[mt][n], qf[mt][kk], bk);
            }
#else
#if MMA_QLOCAL
            uint qf[MMA_MT][1][4]; /* this 16-dim slice of Q only */
#pragma unroll
            for (int mt = 0; mt < MMA_MT; ++mt)
                ptx_ldsm_x4(q_row + (uint)(mt * 16 * MMA_LDK * 2) + MMA_COLB(kk, q_y), &qf[mt][0][0], &qf[mt][0][1],
                            &qf[mt][0][2], &qf[mt][0][3]);
#define MMA_QF(mt, kk) qf[mt][0]
#else
#define MMA_QF(mt, kk) qf[mt][kk]
#endif
#pragma unroll
            for (int np = 0; np < MMA_BC / 16; ++np) {
                uint b0, b1, b2, b3;
                ptx_ldsm_x4(ks_addr + (uint)(np * 16 * MMA_LDK * 2) + MMA_COLB(kk, k_y), &b0, &b1, &b2, &b3);
#pragma unroll
                for (int mt = 0; mt < MMA_MT; ++mt) {
                    PTX_MMA(s[mt][2 * np], MMA_QF(mt, kk), b0, b1);
                    PTX_MMA(s[mt][2 * np + 1], MMA_QF(mt, kk), b2, b3);
                }
            }
#undef MMA_QF
#endif
        }
#endif /* MMA_WG */

        /* Scores: a tile inside the band of all this warp's rows (and no mask) needs
           no per-element check. Softcap and ALiBi are applied to every score in
           32-bit arithmetic (one multiply for the softcap's division); a bias is
           added after the checks, since it must not be read outside the sequence. */
        const int need_mask = MMA_BIAS_PATH || !flashcl_tile_plain(hd, w0, w0 + MMA_MT * 16 - 1, kv0, kv0 + MMA_BC - 1,
                                                                   win_left, win_right);
        uint pf[MMA_MT][MMA_BC / 16][MMA_TF32 ? 8 : 4];
#pragma unroll
        for (int mt = 0; mt < MMA_MT; ++mt) {
#if MMA_FAST_TERMS
#pragma unroll
            for (int n = 0; n < MMA_BC / 8; ++n) {
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    float x = s[mt][n][c] * scale_log2;
#if HAS_SOFTCAP
                    x = softcap2 * MMA_TANH(x * cap_inv);
#endif
#if HAS_ALIBI
                    const int rel = row_off + mt * 16 + (c >> 1) * 8 - (int)(kv0 - kv_tile0) - n * 8 - (c & 1);
                    x -= hd.slope2 * fabs((float)rel);
#endif
                    s[mt][n][c] = x;
                }
            }
#endif
            if (need_mask) {
#pragma unroll
                for (int n = 0; n < MMA_BC / 8; ++n) {
#pragma unroll
                    for (int c = 0; c < 4; ++c) {
                        const long key = kv0 + n * 8 + (lane & 3) * 2 + (c & 1);
                        const long row = r0 + mt * 16 + (c >> 1) * 8;
                        /* Rows past the sequence are never stored; masks and bias must not be read there. */
#if MMA_BIAS_PATH
                        const float x = MMA_FAST_TERMS ? s[mt][n][c] : s[mt][n][c] * scale_log2;
                        s[mt][n][c] = row < sq && flashcl_visible(hd, row, key, VARIANT_PASS)
                                          ? x + flashcl_bias2(hd, row, key, VARIANT_PASS)
                                          : FLASHCL_NEG_INF;
#else
                        if (row >= sq || !flashcl_visible(hd, row, key, VARIANT_PASS)) s[mt][n][c] = FLASHCL_NEG_INF;
#endif
                    }
                }
            }

            /* Online softmax: new row max over the quad, rescale, exponentiate. The
               update of flashcl_online_update (cl/common.cl), written out: the
               exponent is the SFU's ex2.approx (ptx_exp2) with the scale folded
               into its FMA, where the helper calls OpenCL's exp2 (a longer
               sequence on NVIDIA), and this code must stay as measured on the
               H200. */
            float mx0 = FLASHCL_NEG_INF, mx1 = FLASHCL_NEG_INF;
#pragma unroll
            for (int n = 0; n < MMA_BC / 8; ++n) {
                mx0 = fmax(mx0, fmax(s[mt][n][0], s[mt][n][1]));
                mx1 = fmax(mx1, fmax(s[mt][n][2], s[mt][n][3]));
            }
            mx0 = fmax(mx0, ptx_shfl_xor(mx0, 1));
            mx0 = fmax(mx0, ptx_shfl_xor(mx0, 2));
            mx1 = fmax(mx1, ptx_shfl_xor(mx1, 1));
            mx1 = fmax(mx1, ptx_shfl_xor(mx1, 2));
            mx0 = fmax(m[mt][0], mx0 * sl2);
            mx1 = fmax(m[mt][1], mx1 * sl2);
            /* Lazy rescaling: the running max moves (and O and the sums are rescaled) only when
               some row of the warp grew by more than MMA_RESCALE_SLACK (log2 domain). Otherwise
               every probability is at most 2^MMA_RESCALE_SLACK against the stale max, which the
               sums and the 16-bit P hold with the same relative precision, and the result is the
               same quotient. After the first tiles the max rarely moves that much, so the
               MMA_DV/2 multiplies a row pair costs per tile mostly vanish. */
            /* Softcap keeps the eager rescale: lazy measured 2.5% slower there (H100, 2.44 -> 2.51 ms). */
            if (!MMA_RESCALE_SLACK || HAS_SOFTCAP ||
                ptx_any(mx0 > m[mt][0] + MMA_RESCALE_SLACK || mx1 > m[mt][1] + MMA_RESCALE_SLACK)) {
                /* A row with no visible key yet keeps max -inf: exponent base 0, so alpha is 0, not NaN. */
                const float alpha0 = ptx_exp2(m[mt][0] - (mx0 == FLASHCL_NEG_INF ? 0.0f : mx0));
                const float alpha1 = ptx_exp2(m[mt][1] - (mx1 == FLASHCL_NEG_INF ? 0.0f : mx1));
                m[mt][0] = mx0;
                m[mt][1] = mx1;
                l[mt][0] *= alpha0;
                l[mt][1] *= alpha1;
#pragma unroll
                for (int n = 0; n < MMA_DV / 8; ++n) {
                    acc[mt][n][0] *= alpha0;
                    acc[mt][n][1] *= alpha0;
                    acc[mt][n][2] *= alpha1;
                    acc[mt][n][3] *= alpha1;
                }
            }
            /* A row with no visible key yet keeps max -inf: subtract 0 so exp2 gives 0, not NaN. */
            const float base0 = m[mt][0] == FLASHCL_NEG_INF ? 0.0f : m[mt][0];
            const float base1 = m[mt][1] == FLASHCL_NEG_INF ? 0.0f : m[mt][1];
            float l0 = l[mt][0], l1 = l[mt][1];
#if HAS_DROPOUT
            uint4 dw; /* the dropout call of tiles n, n + 1 (n even) */
#endif
#pragma unroll
            for (int n = 0; n < MMA_BC / 8; ++n) {
                float p0 = ptx_exp2(fma(s[mt][n][0], sl2, -base0));
                float p1 = ptx_exp2(fma(s[mt][n][1], sl2, -base0));
                float p2 = ptx_exp2(fma(s[mt][n][2], sl2, -base1));
                float p3 = ptx_exp2(fma(s[mt][n][3], sl2, -base1));
                l0 += p0 + p1;
                l1 += p2 + p3;
#if HAS_DROPOUT
                /* The normaliser counts every probability; only P V sees the dropped ones. One
                   call covers the lane's keys of tiles n and n + 1 in both rows (cl/ptx.cl). Dropped
                   or kept as is: the keep factor scales the output once, at the end. */
                {
                    if ((n & 1) == 0)
                        dw = flashcl_dropout_call(hd, r0 + mt * 16, kv0 + n * 8 + (lane & 3) * 2, seed_lo, seed_hi,
                                                  drop_off_lo, drop_off_hi);
                    p0 = frag_dropout_bits(dw, n, 0) >= drop_threshold ? p0 : 0.0f;
                    p1 = frag_dropout_bits(dw, n, 1) >= drop_threshold ? p1 : 0.0f;
                    p2 = frag_dropout_bits(dw, n, 2) >= drop_threshold ? p2 : 0.0f;
                    p3 = frag_dropout_bits(dw, n, 3) >= drop_threshold ? p3 : 0.0f;
                }
#endif
#if MMA_TF32
                /* C fragment of key tile n (rows g, g + 8 x keys 2c, 2c + 1) -> the A fragment of
                   half n & 1 of key chunk n/2, k = c for key 2c and k = c + 4 for key 2c + 1. */
                pf[mt][n >> 1][(n & 1) * 4 + 0] = ptx_tf32(p0);
                pf[mt][n >> 1][(n & 1) * 4 + 1] = ptx_tf32(p2);
                pf[mt][n >> 1][(n & 1) * 4 + 2] = ptx_tf32(p1);
                pf[mt][n >> 1][(n & 1) * 4 + 3] = ptx_tf32(p3);
#else
                /* C fragment of key tile n -> half of the A fragment of key chunk n/2. */
                pf[mt][n >> 1][(n & 1) * 2 + 0] = ptx_pack(p0, p1);
                pf[mt][n >> 1][(n & 1) * 2 + 1] = ptx_pack(p2, p3);
#endif
            }
            l[mt][0] = l0;
            l[mt][1] = l1;
        }

#if MMA_WG
        /* The softmax's results are needed only by the next asm statement: without these empty
           statements the compiler sinks the whole softmax past the wait and barrier below, and the
           load's latency is no longer hidden behind it. */
#pragma unroll
        for (int hv = 0; hv < WG_PV_HALVES; ++hv) WG_KEEP(WG_O_R, (acc[0] + hv * (WG_O_R / 4)));
        WG_KEEP_P(WG_V_STEPS, pf[0]);
        if (next < kv_end) /* V(kv0) is in; K(next), the newest group, may still be in flight */
            ptx_cp_wait_one();
        else
            ptx_cp_wait_all();
        WG_PROXY_FENCE();
        barrier(CLK_LOCAL_MEM_FENCE);
#else
        const long next = mma_next_tile(hd, kv0 + MMA_BC, kv_end, q0, last_row, VARIANT_PASS);
        ptx_cp_wait_all();
        barrier(CLK_LOCAL_MEM_FENCE); /* V(kv0) is in; every warp is done with K(kv0) */
        if (next < kv_end) MMA_LOAD_QK(ks, Kb, k_sr, next, MMA_BC, sk);
#endif

#if MMA_WG
        /* d_v = 256: two products of 128 columns, the second from V's third column block on */
#pragma unroll
        for (int hv = 0; hv < WG_PV_HALVES; ++hv)
            WG_PV(WG_O_R, WG_V_STEPS, (acc[0] + hv * (WG_O_R / 4)), pf[0], v_desc + (ulong)(hv * 2 * MMA_BC * 8),
                  (ulong)128);
        barrier(CLK_LOCAL_MEM_FENCE); /* every warp's P V is done: V(kv0)'s buffer is free */
        if (next < kv_end) MMA_LOAD_V(vs, Vb, v_sr, next, sk);
#else
            /* O += P V: one transposing ldmatrix of V feeds 2 dim tiles x MMA_MT row tiles. */
#pragma unroll
        for (int kk = 0; kk < MMA_BC / 16; ++kk) {
#if MMA_TF32
#pragma unroll
            for (int dn = 0; dn < MMA_DV / 8; ++dn) {
                uint bv[4];
                mma_tf32_frag_v(vs + kk * 16 * MMA_LDV + dn * 8, MMA_LDV, lane, bv);
#pragma unroll
                for (int mt = 0; mt < MMA_MT; ++mt) PTX_MMA_TF32_K16(acc[mt][dn], pf[mt][kk], bv);
            }
#else
#pragma unroll
            for (int dp = 0; dp < MMA_DV / 16; ++dp) {
                uint b0, b1, b2, b3;
                ptx_ldsm_x4_trans(vs_addr + (uint)(kk * 16 * MMA_LDV * 2) + MMA_COLB(dp, v_y), &b0, &b1, &b2, &b3);
#pragma unroll
                for (int mt = 0; mt < MMA_MT; ++mt) {
                    PTX_MMA(acc[mt][2 * dp], pf[mt][kk], b0, b1);
                    PTX_MMA(acc[mt][2 * dp + 1], pf[mt][kk], b2, b3);
                }
            }
#endif
        }
#endif /* MMA_WG */
        kv0 = next;
    }

    /* Nothing is in flight after the last tile, except Q's copy when no tile was visible (Q in
       __local): wait for it anyway, so no work-item exits with a cp.async outstanding. */
    ptx_cp_wait_all();

    /* Row sums over the quad, the sink folded in, normalise once, store 2 elements per register. */
    __global mma_t *Ob = O + VIEW_BASE(o, b, h) + hd.q0 * o_sr;
    const int col = (lane & 3) * 2;
#pragma unroll
    for (int mt = 0; mt < MMA_MT; ++mt) {
#pragma unroll
        for (int half_ = 0; half_ < 2; ++half_) {
            float lsum = l[mt][half_];
            lsum += ptx_shfl_xor(lsum, 1);
            lsum += ptx_shfl_xor(lsum, 2);
            float mrow = m[mt][half_];
            const float alpha = flashcl_fold_sink(&mrow, &lsum, hd.sink2);
            /* A NaN sum (a NaN or infinite input) makes the row NaN even where dropout zeroed its
               NaN probabilities before P V. */
            const float inv = lsum > 0.0f ? (HAS_DROPOUT ? drop_scale : 1.0f) * alpha / lsum : lsum == 0.0f ? 0.0f : NAN;
            const long row = r0 + mt * 16 + half_ * 8;
            if (row < sq) {
                __global mma_t *dst = Ob + (ulong)row * o_sr + col;
#pragma unroll
                for (int n = 0; n < MMA_DV / 8; ++n)
                    if (HEAD_DIM_V == MMA_DV || n * 8 + col < HEAD_DIM_V) /* d_v a multiple of 8: both or neither */
#if MMA_TF32
                        *(__global float2 *)(dst + n * 8) =
                            (float2)(acc[mt][n][half_ * 2] * inv, acc[mt][n][half_ * 2 + 1] * inv);
#else
                        *(__global uint *)(dst + n * 8) =
                            ptx_pack(acc[mt][n][half_ * 2] * inv, acc[mt][n][half_ * 2 + 1] * inv);
#endif
                if (write_lse && (lane & 3) == 0)
                    LSE[lse_off + flashcl_row_index(hd, b, h, heads_q, seqlen_q, row)] = flashcl_lse(mrow, lsum);
            }
        }
    }
}
