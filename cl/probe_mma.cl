/*
 * Build-and-verify probe for the NVIDIA tensor-core path (cl/flash_fwd_mma.cl).
 * One warp runs each PTX feature the fast kernels rely on, on small integers
 * whose products are exact in fp32:
 *   out[0..127]   bf16 A(16x16) * B(16x8): cp.async -> ldmatrix -> mma.sync
 *   out[128..255] same, B read with ldmatrix.trans from a [k][n] copy
 *   out[256..383] f16 A * B (same values in f16 encoding), ldmatrix
 *   out[384..415] shfl.sync.bfly sum over the warp of lane ids (each = 496)
 *   out[416..479] cvt.rn.bf16x2 / f16x2 packing, unpacked back: lo + 10 hi
 * The host compares with its own arithmetic; any difference (or a build or
 * launch failure) keeps the portable kernels. The instructions are cl/ptx.cl's
 * wrappers, the kernels' own where the probe runs the same form (ldmatrix x4,
 * commit/wait, shfl); the forms only the probe uses (ldmatrix x2, a full
 * cp.async, mma and cvt for both types, volatile) are there too.
 * Inputs (ushort): a_bf[256], bt_bf[128] ([n][k]), bkn_bf[128] ([k][n]),
 * a_h[256], bt_h[128].
 * Built with MMA_SM75=1 (cl/ptx.cl's Turing form) it checks that form: the
 * bf16 parts are left out (sm_75 has no bf16 mma; their outputs are zero and
 * the host ignores them), the f16 product runs as two m16n8k8 steps and the
 * copies as plain loads and stores.
 */

/* Writes one C fragment (16x8 fp32) into out[16][8]. */
inline void probe_store_c(__global float *out, const float *c, int lane) {
    const int r = lane >> 2, col = (lane & 3) * 2;
    out[r * 8 + col] = c[0];
    out[r * 8 + col + 1] = c[1];
    out[(r + 8) * 8 + col] = c[2];
    out[(r + 8) * 8 + col + 1] = c[3];
}

__kernel __attribute__((reqd_work_group_size(32, 1, 1))) void probe_mma(__global const ushort *in,
                                                                        __global float *out) {
    /* a_bf 256 | bt_bf 128 | bkn_bf 128 | a_h 256 | bt_h 128 = 896 elements */
    __local ushort s[896] __attribute__((aligned(16)));
    const int lane = (int)get_local_id(0);
    for (int c = lane; c < 896 / 8; c += 32) ptx_cp16_all(ptx_smem_addr(s + c * 8), in + c * 8);
    ptx_cp_commit();
    ptx_cp_wait_all();
    barrier(CLK_LOCAL_MEM_FENCE);

    uint a[4], b[2];
    /* A fragment: lanes 0-15 address rows 0-15 at column 0, lanes 16-31 at column 8. */
    ptx_ldsm_x4(ptx_smem_addr(s + (lane & 15) * 16 + (lane >> 4) * 8), &a[0], &a[1], &a[2], &a[3]);
    /* B from [n][k]: matrix 0 = k 0-7, matrix 1 = k 8-15 (lanes 0-7, 8-15 give the rows n). */
    ptx_ldsm_x2(ptx_smem_addr(s + 256 + (lane & 7) * 16 + ((lane >> 3) & 1) * 8), b, 0);
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#if !MMA_SM75
    PTX_MMA_VOLATILE(PTX_MMA_BF16, c, a, b[0], b[1]);
#endif
    probe_store_c(out, c, lane);

    /* B from [k][n] through the transposing load: rows are k. */
    ptx_ldsm_x2(ptx_smem_addr(s + 384 + ((lane & 7) + ((lane >> 3) & 1) * 8) * 8), b, 1);
    c[0] = c[1] = c[2] = c[3] = 0.0f;
#if !MMA_SM75
    PTX_MMA_VOLATILE(PTX_MMA_BF16, c, a, b[0], b[1]);
#endif
    probe_store_c(out + 128, c, lane);

    ptx_ldsm_x4(ptx_smem_addr(s + 512 + (lane & 15) * 16 + (lane >> 4) * 8), &a[0], &a[1], &a[2], &a[3]);
    ptx_ldsm_x2(ptx_smem_addr(s + 768 + (lane & 7) * 16 + ((lane >> 3) & 1) * 8), b, 0);
    c[0] = c[1] = c[2] = c[3] = 0.0f;
    PTX_MMA_VOLATILE(PTX_MMA_F16, c, a, b[0], b[1]);
    probe_store_c(out + 256, c, lane);

    uint x = (uint)lane;
    /* as_float/as_uint only rename the register: the shuffle moves x's bits unchanged. */
    for (int m = 1; m < 32; m <<= 1) x += as_uint(ptx_shfl_xor(as_float(x), m));
    out[384 + lane] = (float)x;

    /* 1.5 * lane is exact in both formats; the packing order puts lo in bits 0-15. */
    uint pb = 0, ph;
    const float lo = 1.5f * (float)lane, hi = -2.0f * (float)lane;
#if !MMA_SM75
    PTX_CVT_VOLATILE(PTX_CVT_BF16, pb, lo, hi);
#endif
    PTX_CVT_VOLATILE(PTX_CVT_F16, ph, lo, hi);
    const float bl = as_float((pb & 0xffffu) << 16), bh = as_float(pb & 0xffff0000u);
    const float hl = vload_half(0, (__private const half *)&ph), hh = vload_half(1, (__private const half *)&ph);
    out[416 + lane] = bl + 10.0f * bh; /* -18.5 * lane when lo/hi landed in the right halves */
    out[448 + lane] = hl + 10.0f * hh;
}
