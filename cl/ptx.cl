/*
 * The inline PTX of the NVIDIA tensor-core kernels (cl/flash_fwd_mma.cl,
 * cl/flash_bwd_mma.cl), of their probe (cl/probe_mma.cl) and the decode
 * kernel's warp shuffles (cl/flash_decode.cl with LANE_SHFL=1): every PTX
 * instruction FlashCL issues is written here, once. The host prepends this
 * file, after common.cl and variants.cl, to the sources whose names end in
 * _mma.cl and to flash_decode.cl (src/kernel_sources.c); the decode kernel,
 * built for every device, says LANE_SHFL=0 off NVIDIA and then sees nothing
 * of it. tests/check_kernel_idioms.cmake keeps inline asm out of every other
 * file.
 *
 * MMA_F16 picks the 16-bit storage type of PTX_MMA and ptx_pack: 0 bfloat16
 * (the default), 1 float16. The probe names its types instead: it checks
 * both in one program.
 */
#ifndef FLASHCL_PTX_CL
#define FLASHCL_PTX_CL
/* cl/flash_decode.cl sees this file too and uses its shuffles only on NVIDIA (LANE_SHFL=1); built
   for any other device (LANE_SHFL=0) it gets none of it. */
#if !defined(LANE_SHFL) || LANE_SHFL

#ifndef MMA_F16
#define MMA_F16 0
#endif

#define PTX_MMA_BF16 "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
#define PTX_MMA_F16 "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
#define PTX_CVT_BF16 "cvt.rn.bf16x2.f32"
#define PTX_CVT_F16 "cvt.rn.f16x2.f32"
#if MMA_F16
#define PTX_MMA_OP PTX_MMA_F16
#define PTX_CVT_OP PTX_CVT_F16
#else
#define PTX_MMA_OP PTX_MMA_BF16
#define PTX_CVT_OP PTX_CVT_BF16
#endif

/* One 16x8x16 mma: accumulator d[4] (read and written), A fragment a[4], B fragment b0, b1. */
#define PTX_MMA_REGS " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
#define PTX_MMA_OPERANDS(d, a, b0, b1)                                                                                 \
    : "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3])                                            \
    : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"(b0), "r"(b1)

/* d += a * b on one 16x8x16 tile of the storage type. Not volatile, so the compiler may schedule it. */
#define PTX_MMA(d, a, b0, b1) asm(PTX_MMA_OP PTX_MMA_REGS PTX_MMA_OPERANDS(d, a, b0, b1))

/* The probe's mma and packing: the type named (PTX_MMA_BF16 or _F16, PTX_CVT_BF16 or
   _F16) and volatile, so that each runs exactly where the probe puts it. */
#define PTX_MMA_VOLATILE(op, d, a, b0, b1) asm volatile(op PTX_MMA_REGS PTX_MMA_OPERANDS(d, a, b0, b1))
#define PTX_CVT_VOLATILE(op, r, lo, hi) asm volatile(op " %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo))

/* The shared-window address of a __local pointer, as ldmatrix and cp.async take it. */
inline uint ptx_smem_addr(__local const ushort *p) { return (uint)(size_t)p; }

/* __local reads and async copies are volatile with a memory clobber: they must
   stay on their side of the barriers. */
inline void ptx_ldsm_x4(uint addr, uint *r0, uint *r1, uint *r2, uint *r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(*r0), "=r"(*r1), "=r"(*r2), "=r"(*r3)
                 : "r"(addr)
                 : "memory");
}
inline void ptx_ldsm_x4_trans(uint addr, uint *r0, uint *r1, uint *r2, uint *r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(*r0), "=r"(*r1), "=r"(*r2), "=r"(*r3)
                 : "r"(addr)
                 : "memory");
}
/* Two 8x8 matrices (the probe's B operand), transposed or not. */
inline void ptx_ldsm_x2(uint addr, uint *r, int trans) {
    if (trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                     : "=r"(r[0]), "=r"(r[1])
                     : "r"(addr)
                     : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
                     : "=r"(r[0]), "=r"(r[1])
                     : "r"(addr)
                     : "memory");
}
/* 16 bytes global -> __local; src_bytes = 0 writes zeros (rows past the end). */
inline void ptx_cp16(uint dst, __global const ushort *src, uint src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"((ulong)(size_t)src), "r"(src_bytes)
                 : "memory");
}
/* 16 bytes global -> __local, all of them (the probe's form). */
inline void ptx_cp16_all(uint dst, __global const ushort *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"((ulong)(size_t)src) : "memory");
}
inline void ptx_cp_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
inline void ptx_cp_wait_all(void) { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

/* x from lane ^ m of the warp. */
inline float ptx_shfl_xor(float x, int m) {
    uint r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(as_uint(x)), "r"(m));
    return as_float(r);
}
/* Two floats -> one register of two 16-bit values, lo in the low half (round to nearest even). */
/* x from lane `src` of my `width`-lane segment of the warp (width a power of two up to 32). */
inline float ptx_shfl_segment(float x, int src, int width) {
    uint r;
    asm volatile("shfl.sync.idx.b32 %0, %1, %2, %3, 0xffffffff;"
                 : "=r"(r)
                 : "r"(as_uint(x)), "r"(src), "r"(((32 - width) << 8) | 0x1f));
    return as_float(r);
}
inline uint ptx_pack(float lo, float hi) {
    uint r;
    asm(PTX_CVT_OP " %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* The SFU's exp2 (flush-to-zero; exp2(-inf) = 0). */
inline float ptx_exp2(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

#endif
#endif
