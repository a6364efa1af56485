/*
 * Build-and-verify probe for the wgmma form of the tensor-core forward
 * (cl/flash_fwd_mma.cl with MMA_WG=1; cl/ptx.cl's wgmma section says how the
 * marked PTX becomes sm_90a code). One warpgroup runs both products the
 * kernel runs, in bfloat16, on small integers whose products are exact in fp32,
 * with the kernel's own __local layout and descriptors:
 *   out[0..4095]     S = A B^T (64 x 64): A (64 x 64) and B (64 x 64) K-major
 *                    in __local (one 128-byte-swizzled column block, four k
 *                    steps), as Q and a K tile are
 *   out[4096..8191]  O = A[:, 0:16] V (64 x 64): A from registers in the
 *                    A-fragment layout the softmax's P has, V (16 x 64, rows
 *                    of keys) swizzled in __local and read MN-major
 *                    (transposed), as a V tile is
 *   out[8192..12287] S = A A^T with A from registers (four k steps of
 *                    fragments) and B = A's tile in __local, as Q K^T runs
 *                    above d = 128 (another product than the first, so that
 *                    registers left over from it cannot pass for this one)
 * Inputs (ushort): A [64][64] | B [64][64] | V [16][64], row-major.
 * The host compares with its own arithmetic; a build, launch or value failure
 * keeps the mma.sync form.
 */
#define WG_PV_N "64"

/* The 64 x 64 accumulator of a warpgroup (C-fragment layout per warp) into out[64][64]. */
inline void probe_wg_store(__global float *out, float c[8][4], int warp, int lane) {
    const int r = warp * 16 + (lane >> 2), col = (lane & 3) * 2;
    for (int j = 0; j < 8; ++j)
        for (int e = 0; e < 4; ++e) out[(r + (e >> 1) * 8) * 64 + j * 8 + col + (e & 1)] = c[j][e];
}

__kernel __attribute__((reqd_work_group_size(128, 1, 1))) void probe_wgmma(__global const ushort *in,
                                                                           __global float *out) {
    /* 1024-byte aligned: the swizzle works on address bits (cl/ptx.cl). */
    __local ushort a[64 * 64] __attribute__((aligned(1024)));
    __local ushort b[64 * 64] __attribute__((aligned(1024)));
    __local ushort v[16 * 64] __attribute__((aligned(1024)));
    const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
    for (int c = lid; c < 64 * 8; c += 128) {
        const int r = c >> 3, ch = c & 7;
        ptx_cp16_all(ptx_smem_addr(a + wg_offset(r, ch, 64)), in + r * 64 + ch * 8);
        ptx_cp16_all(ptx_smem_addr(b + wg_offset(r, ch, 64)), in + 4096 + r * 64 + ch * 8);
        if (r < 16) ptx_cp16_all(ptx_smem_addr(v + wg_offset(r, ch, 16)), in + 8192 + r * 64 + ch * 8);
    }
    ptx_cp_commit();
    ptx_cp_wait_all();
    WG_PROXY_FENCE();
    barrier(CLK_LOCAL_MEM_FENCE);

    /* K-major: 8-row atoms 1024 B apart (SBO 64), one column block (its stride unused). */
    float s[8][4];
    const ulong da = wg_desc(ptx_smem_addr(a), 1, 64), db = wg_desc(ptx_smem_addr(b), 1, 64);
    WG_QK(64, 32, 1, s, da, db, (ulong)0, (ulong)0);
    probe_wg_store(out, s, warp, lane);

    /* A's fragments: rows g, g + 8 of the warp's 16 x columns 2c, 2c + 1 (+ 8). */
    uint p[1][4];
    const int g = warp * 16 + (lane >> 2), k = (lane & 3) * 2;
    p[0][0] = *(__global const uint *)(in + g * 64 + k);
    p[0][1] = *(__global const uint *)(in + (g + 8) * 64 + k);
    p[0][2] = *(__global const uint *)(in + g * 64 + k + 8);
    p[0][3] = *(__global const uint *)(in + (g + 8) * 64 + k + 8);
    float o[8][4];
    for (int j = 0; j < 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    /* MN-major: 8 keys 1024 B apart (SBO 64), one column block along the dims (LBO unused). */
    const ulong dv = wg_desc(ptx_smem_addr(v), 1, 64);
    WG_PV(32, 1, o, p, dv, (ulong)128);
    probe_wg_store(out + 4096, o, warp, lane);

    /* Q K^T with Q in registers: A's fragments of all four k steps, B A's tile in __local. */
    uint q[4][4];
    for (int kk = 0; kk < 4; ++kk) {
        q[kk][0] = *(__global const uint *)(in + g * 64 + kk * 16 + k);
        q[kk][1] = *(__global const uint *)(in + (g + 8) * 64 + kk * 16 + k);
        q[kk][2] = *(__global const uint *)(in + g * 64 + kk * 16 + k + 8);
        q[kk][3] = *(__global const uint *)(in + (g + 8) * 64 + kk * 16 + k + 8);
    }
    float r[8][4];
    WG_QKR(64, 32, 1, 4, r, q, da, (ulong)0);
    probe_wg_store(out + 8192, r, warp, lane);
}
