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
 *
 * MMA_SM75=1 is the Turing form (compute capability 7.5: T4, RTX 20xx), which
 * has mma.sync only as m16n8k8 for f16, ldmatrix, but neither cp.async, the
 * f16x2/bf16x2 conversions nor any bf16 mma: PTX_MMA runs the 16x8x16 product
 * as two k = 8 steps, the packing converts each half on its own, and the
 * "async" copies are a 16-byte load and a 16-byte __local store that complete
 * before the next barrier like the real ones. The kernels are unchanged; only
 * f16 storage is built this way (the host keeps bf16 on the portable path).
 */
#ifndef FLASHCL_PTX_CL
#define FLASHCL_PTX_CL
/* cl/flash_decode.cl sees this file too and uses its shuffles only on NVIDIA (LANE_SHFL=1); built
   for any other device (LANE_SHFL=0) it gets none of it, and on NVIDIA nothing but the shuffles
   (which every form has: its build says nothing of MMA_SM75). */
#if !defined(LANE_SHFL) || LANE_SHFL
/* x from lane ^ m of the warp. */
inline float ptx_shfl_xor(float x, int m) {
    uint r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(as_uint(x)), "r"(m));
    return as_float(r);
}
/* x from lane `src` of my `width`-lane segment of the warp (width a power of two up to 32). */
inline float ptx_shfl_segment(float x, int src, int width) {
    uint r;
    asm volatile("shfl.sync.idx.b32 %0, %1, %2, %3, 0xffffffff;"
                 : "=r"(r)
                 : "r"(as_uint(x)), "r"(src), "r"(((32 - width) << 8) | 0x1f));
    return as_float(r);
}

/* 1 in every lane if any lane of the warp passes a nonzero x (vote.sync: every sm the kernels run on). */
inline int ptx_any(int x) {
    uint r;
    asm volatile("{ .reg .pred p; setp.ne.s32 p, %1, 0; vote.sync.any.pred p, p, 0xffffffff; selp.u32 %0, 1, 0, p; }"
                 : "=r"(r)
                 : "r"(x));
    return (int)r;
}

/* Two IEEE halves (bits 0-15 element 0, 16-31 element 1) -> two floats by the hardware conversion
   (every sm: exact, subnormals, infinities and NaN included): two instructions where the bit path
   (flash_decode.cl's half_bits) takes about ten per element. */
inline float2 ptx_half2(uint x) {
    float lo, hi;
    asm("{ .reg .b16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }" : "=f"(lo), "=f"(hi) : "r"(x));
    return (float2)(lo, hi);
}

/* The decode kernel's split merge (FUSED_MERGE): every prior global store of this work-item is
   visible GPU-wide before what follows (the count that hands the partials to the merging group),
   and loads that read L2, not a possibly stale L1 line, for partials other groups wrote. */
inline void ptx_fence_gpu(void) { asm volatile("membar.gl;" ::: "memory"); }
inline float ptx_load_l2(__global const float *p) {
    float r;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(r) : "l"((ulong)(size_t)p) : "memory");
    return r;
}

#if defined(KV_STAGES) && KV_STAGES
/* The decode kernel's K/V ring (sm_80+): 16 or 8 bytes global -> __local without passing
   through registers, in groups a thread commits and later waits for; a thread reads only what it
   copied itself, so no barrier is needed, only the wait. */
inline void ptx_cp_async16(__local const void *dst, __global const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((uint)(size_t)dst), "l"((ulong)(size_t)src)
                 : "memory");
}
inline void ptx_cp_async8(__local const void *dst, __global const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"((uint)(size_t)dst), "l"((ulong)(size_t)src)
                 : "memory");
}
inline void ptx_cp_async_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
/* Until at most KV_STAGES - 1 groups are pending: the oldest step's copies have landed. */
inline void ptx_cp_async_wait_step(void) {
#if KV_STAGES == 2
    asm volatile("cp.async.wait_group 1;" ::: "memory");
#elif KV_STAGES == 3
    asm volatile("cp.async.wait_group 2;" ::: "memory");
#elif KV_STAGES == 4
    asm volatile("cp.async.wait_group 3;" ::: "memory");
#elif KV_STAGES == 6
    asm volatile("cp.async.wait_group 5;" ::: "memory");
#elif KV_STAGES == 8
    asm volatile("cp.async.wait_group 7;" ::: "memory");
#else
#error "KV_STAGES: 2, 3, 4, 6 or 8"
#endif
}
#endif

#if defined(FP8_CVT) && FP8_CVT
/* Two fp8 codes (bits 0-7 element 0, bits 8-15 element 1 of x) -> two IEEE halves, element 0 in
   the low half, by the hardware conversion (sm_89+: cvt.rn.f16x2.e4m3x2 / .e5m2x2, exact for every
   code, NaN and subnormals included: every fp8 value is a half). The tensor-core decode takes the
   pair as an mma operand as it is. */
inline uint ptx_fp8_f16x2(uint x) {
    uint r;
#if CACHE_DTYPE == 1
    asm("{ .reg .b16 p; cvt.u16.u32 p, %1; cvt.rn.f16x2.e4m3x2 %0, p; }" : "=r"(r) : "r"(x));
#else
    asm("{ .reg .b16 p; cvt.u16.u32 p, %1; cvt.rn.f16x2.e5m2x2 %0, p; }" : "=r"(r) : "r"(x));
#endif
    return r;
}
/* The same two codes as floats: three instructions for two elements where the bit path takes
   about eight per element. */
inline float2 ptx_fp8x2(uint x) { return ptx_half2(ptx_fp8_f16x2(x)); }
#endif
#endif

/* The tensor-core kernels and their probe (which never define LANE_SHFL), and the decode kernel's
   tensor-core form (cl/flash_decode.cl with DECODE_MMA=1, which names MMA_F16). */
#if !defined(LANE_SHFL) || (LANE_SHFL && defined(DECODE_MMA) && DECODE_MMA)

#ifndef MMA_SM75
#define MMA_SM75 0
#endif
#ifndef MMA_F16
#define MMA_F16 MMA_SM75 /* the sm_75 form is f16 only */
#endif
#if MMA_SM75 && !MMA_F16
#error "MMA_SM75 has no bf16 mma: build it with MMA_F16=1"
#endif

/* One 16x8x16 mma: accumulator d[4] (read and written, %0-%3), A fragment a[4] (%4-%7), B fragment b0, b1 (%8, %9). */
#define PTX_MMA_REGS " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
#if MMA_SM75 /* no bf16 mma or bf16x2 conversion: PTX_MMA_BF16 and PTX_CVT_BF16 stay undefined */
/* k = 0-7 are A's registers 0, 1 with b0; k = 8-15 registers 2, 3 with b1 (the m16n8k16
   fragments are the two m16n8k8 ones side by side). */
#define PTX_MMA_K8_F16 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32"
#define PTX_MMA_F16                                                                                                    \
    PTX_MMA_K8_F16 " {%0,%1,%2,%3}, {%4,%5}, {%8}, {%0,%1,%2,%3};\n\t" PTX_MMA_K8_F16                                  \
                   " {%0,%1,%2,%3}, {%6,%7}, {%9}, {%0,%1,%2,%3};"
/* %1 = hi, %2 = lo; mov.b32 puts its first half in the low bits. */
#define PTX_CVT_F16 "{ .reg .b16 l, h; cvt.rn.f16.f32 l, %2; cvt.rn.f16.f32 h, %1; mov.b32 %0, {l, h}; }"
#else
#define PTX_MMA_BF16 "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" PTX_MMA_REGS
#define PTX_CVT_BF16 "cvt.rn.bf16x2.f32 %0, %1, %2;"
#define PTX_MMA_F16 "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" PTX_MMA_REGS
#define PTX_CVT_F16 "cvt.rn.f16x2.f32 %0, %1, %2;"
#endif
#if MMA_F16
#define PTX_MMA_OP PTX_MMA_F16
#define PTX_CVT_OP PTX_CVT_F16
#else
#define PTX_MMA_OP PTX_MMA_BF16
#define PTX_CVT_OP PTX_CVT_BF16
#endif

#define PTX_MMA_OPERANDS(d, a, b0, b1)                                                                                 \
    : "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3])                                            \
    : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"(b0), "r"(b1)

/* d += a * b on one 16x8x16 tile of the storage type. Not volatile, so the compiler may schedule it. */
#define PTX_MMA(d, a, b0, b1) asm(PTX_MMA_OP PTX_MMA_OPERANDS(d, a, b0, b1))

/* The probe's mma and packing: the type named (PTX_MMA_BF16 or _F16, PTX_CVT_BF16 or
   _F16) and volatile, so that each runs exactly where the probe puts it. */
#define PTX_MMA_VOLATILE(op, d, a, b0, b1) asm volatile(op PTX_MMA_OPERANDS(d, a, b0, b1))
#define PTX_CVT_VOLATILE(op, r, lo, hi) asm volatile(op : "=r"(r) : "f"(hi), "f"(lo))

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
#if MMA_SM75
    /* Views are 16-byte aligned (the host checks): one vector load, one __local store. */
    const uint4 v = src_bytes ? *(__global const uint4 *)src : (uint4)(0u);
    asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};" ::"r"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"((ulong)(size_t)src), "r"(src_bytes)
                 : "memory");
#endif
}
/* 16 bytes global -> __local, all of them (the probe's form). */
inline void ptx_cp16_all(uint dst, __global const ushort *src) {
#if MMA_SM75
    ptx_cp16(dst, src, 16);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"((ulong)(size_t)src) : "memory");
#endif
}
/* Without cp.async (sm_75) the copies are complete when issued: nothing to commit or wait for. */
#if MMA_SM75
inline void ptx_cp_commit(void) {}
inline void ptx_cp_wait_all(void) {}
inline void ptx_cp_wait_one(void) {}
#else
inline void ptx_cp_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
inline void ptx_cp_wait_all(void) { asm volatile("cp.async.wait_group 0;" ::: "memory"); }
/* Until at most one group (the newest) is still in flight. */
inline void ptx_cp_wait_one(void) { asm volatile("cp.async.wait_group 1;" ::: "memory"); }
#endif

/* Two floats -> one register of two 16-bit values, lo in the low half (round to nearest even). */
inline uint ptx_pack(float lo, float hi) {
    uint r;
    asm(PTX_CVT_OP : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

#if !MMA_SM75 /* sm_80: no TF32 in the sm_75 form */
/* float32 -> TF32 (10-bit mantissa, round to nearest, ties away: cvt.rna), as the tf32 mma's operand. */
inline uint ptx_tf32(float x) {
    uint r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
/* d += a * b on one 16x8x8 TF32 tile (sm_80): A a[0..3] (rows g, g+8 x columns t, t+4 of lane
   g*4+t), B b[0..1] (rows t, t+4 x column g), accumulator d[4] as PTX_MMA's. */
#define PTX_MMA_TF32(d, a, b)                                                                                          \
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"     \
        : "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3])                                                       \
        : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"((b)[0]), "r"((b)[1]))
/* d += a * b over 16 of k as two k = 8 halves: A a[0..7] (a[4..7] the second half), B b[0..3]. */
#define PTX_MMA_TF32_K16(d, a, b)                                                                                      \
    do {                                                                                                               \
        PTX_MMA_TF32(d, a, b);                                                                                         \
        PTX_MMA_TF32(d, (a) + 4, (b) + 2);                                                                             \
    } while (0)
#endif

/* The SFU's exp2 (flush-to-zero; exp2(-inf) = 0). */
inline float ptx_exp2(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

/* The SFU's tanh (sm_75+; PTX documents a maximum relative error of about 2^-11), as
   FlashAttention-2's softcap: one SFU instruction per score where exp2 and a reciprocal take two
   (H200, d = 128 softcap 30: forward 1.25x, forward+backward 1.31x; README). */
inline float ptx_tanh(float x) {
    float r;
    asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

/* tanh from the SFU's exp2 and reciprocal, and below |x| = 1/4 (where 1 - 2/(e + 1) cancels) its
   series: a few ulp relative, close enough to the portable kernels' tanh that either backward
   matches this forward's LSE, and exact for a large softcap, which multiplies x back by C. */
inline float ptx_tanh_exact(float x) {
    const float e = native_exp2(fabs(x) * (2.0f * FLASHCL_LOG2E_F));
    const float x2 = x * x;
    return fabs(x) < 0.25f ? x + x * x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315 + x2 * (62.0f / 2835))))
                           : copysign(1.0f - 2.0f * native_recip(e + 1.0f), x);
}

/* The tensor-core kernels' softcap tanh. The backward recomputes P from the forward's LSE, so both
   must take the same tanh: the host sets MMA_TANH_SFU=1 (ptx_tanh) in a backward and in a forward
   whose backward runs on the tensor cores too (16-bit or TF32, d = d_v); a forward whose backward
   goes to the portable kernels (d != d_v) keeps ptx_tanh_exact, as they keep OpenCL's tanh. A
   tensor-core forward paired with a portable backward (gradient views not 16-byte aligned, or
   FLASHCL_BWD_KERNEL forcing one) differs by the SFU's error in each softcapped logit. */
#if defined(MMA_TANH_SFU) && MMA_TANH_SFU
#define MMA_TANH ptx_tanh
#else
#define MMA_TANH ptx_tanh_exact
#endif

#if defined(MMA_WG) && MMA_WG
/*
 * Hopper's warpgroup MMA (wgmma.mma_async, sm_90a), for cl/flash_fwd_mma.cl's MMA_WG form and its
 * probe (cl/probe_wgmma_mma.cl). NVIDIA's OpenCL C compiler emits PTX for `.target sm_90`, where
 * wgmma does not exist, so every instruction of this section is written behind the marker WG, a
 * PTX comment: the driver builds the program with these lines as comments (a kernel that computes
 * nothing), and the host (src/backends/nvidia/wgmma_patch.c) takes the PTX the driver generated,
 * removes the marker, sets `.target sm_90a` and builds that with clCreateProgramWithBinary. The
 * operands are still the compiler's: the registers named in a marked line are the ones the asm
 * statement binds, so the kernel around it is ordinary OpenCL C.
 *
 * Each asm statement is whole: fence, every k step, commit, wait. Nothing the compiler emits can
 * touch an accumulator while a wgmma is in flight, at the price of no overlap inside a warpgroup
 * (other work-groups on the SM fill that gap).
 *
 * Operands in __local are described by 64-bit matrix descriptors (wg_desc: start address, leading
 * byte offset LBO, stride byte offset SBO, in units of 16 bytes, and the swizzle mode) over PTX's
 * 128-byte swizzled layout, the one the tensor cores read without bank conflicts (the layout
 * without swizzle measured 1.7x slower: a single work-group per SM already saturated the SM). A
 * tile of rows of d elements is stored as d/64 column blocks of [rows][64] elements; each row of a
 * block is 128 bytes and its 16-byte chunk c sits at c ^ (row & 7) (wg_offset). Q and K are K-major
 * operands (rows x d): 8 rows make a 1024-byte atom (SBO), a k step of 16 moves the start by 32
 * bytes inside a block, and the next block starts rows * 128 bytes on. V is stored the same way
 * and read MN-major (transposed: keys are k, d_v is n): LBO is the step between its column blocks
 * along d_v, SBO the 1024 bytes of 8 keys, and a k step of 16 keys moves the start 2048 bytes. The
 * XOR works on address bits, so every tile starts 1024-byte aligned. Above d = 128 Q does not fit
 * __local beside K and V, and S = Q K^T takes A from registers (WG_QKR: Q's mma.sync A fragments,
 * four registers per k step), as P V takes P.
 */
#define WG "//WG "
#if MMA_F16
#define WG_T "f16"
#else
#define WG_T "bf16"
#endif
#define WG_STR(x) WG_STR_(x)
#define WG_STR_(x) #x

/* The descriptor of a 128-byte-swizzled operand at __local address addr (bytes); lbo and sbo in
   16-byte units. */
inline ulong wg_desc(uint addr, uint lbo, uint sbo) {
    return (ulong)((addr & 0x3ffffu) >> 4) | ((ulong)lbo << 16) | ((ulong)sbo << 32) | (1ul << 62);
}
/* Element offset of 16-byte chunk ch of row r in a swizzled tile of `rows` rows. */
inline int wg_offset(int r, int ch, int rows) { return (((ch >> 3) * rows + r) << 6) + (((ch & 7) ^ (r & 7)) << 3); }
/* Rows [row0, row0 + rows) of a row-major 16-bit view -> a swizzled tile of `chunks` 16-byte
   chunks per row, by cp.async (the caller commits): 8 consecutive work-items copy the 128 bytes of
   one row of a 64-element column block, a warp 4 such rows. Rows at or past `limit` and chunks at
   or past `real` (the head dim's padding) become zeros. */
inline void wg_load_tile(__local ushort *tile, __global const ushort *base, ulong stride_row, long row0, int rows,
                         long limit, int lid, int threads, int chunks, int real) {
    for (int c = lid; c < rows * chunks; c += threads) {
        const int rest = c >> 3, r = rest % rows, ch = (rest / rows) * 8 + (c & 7);
        const long gr = row0 + r;
        const int ok = gr < limit && (real == chunks || ch < real); /* constants: folds unless padded */
        __global const ushort *src = base + (ulong)(ok ? gr : 0) * stride_row + (ok ? ch : 0) * 8;
        ptx_cp16(ptx_smem_addr(tile + wg_offset(r, ch, rows)), src, ok ? 16u : 0u);
    }
}

/* Written by dev/gen_wgmma_lists.py (run it again rather than edit these by hand): register lists
   of R accumulators (%0 .. %R-1), the descriptors that follow them, P's registers per k step, and
   the operand lists that bind them. */
#define WG_ACC_16 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
#define WG_ACC_24 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}"
#define WG_ACC_32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define WG_ACC_64 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define WG_OPS_16 "mov.b64 wa, %16;\n" WG "mov.b64 wb, %17;\n"
#define WG_NEXT_16 "add.s64 wa, %16, %18;\n" WG "add.s64 wb, %17, %19;\n"
#define WG_OPS_24 "mov.b64 wa, %24;\n" WG "mov.b64 wb, %25;\n"
#define WG_NEXT_24 "add.s64 wa, %24, %26;\n" WG "add.s64 wb, %25, %27;\n"
#define WG_OPS_32 "mov.b64 wa, %32;\n" WG "mov.b64 wb, %33;\n"
#define WG_NEXT_32 "add.s64 wa, %32, %34;\n" WG "add.s64 wb, %33, %35;\n"
#define WG_OPS_64 "mov.b64 wa, %64;\n" WG "mov.b64 wb, %65;\n"
#define WG_NEXT_64 "add.s64 wa, %64, %66;\n" WG "add.s64 wb, %65, %67;\n"
#define WG_OPSV_32 "mov.b64 wb, %32;\n" WG "mov.b64 ws, %33;\n"
#define WG_OPSV_64 "mov.b64 wb, %64;\n" WG "mov.b64 ws, %65;\n"
#define WG_PV_STEPS_32_1 WG_PV_LINE(WG_ACC_32, "{%34,%35,%36,%37}")
#define WG_PV_STEPS_32_2 WG_PV_LINE(WG_ACC_32, "{%34,%35,%36,%37}") WG_PV_LINE(WG_ACC_32, "{%38,%39,%40,%41}")
#define WG_PV_STEPS_32_3 WG_PV_LINE(WG_ACC_32, "{%34,%35,%36,%37}") WG_PV_LINE(WG_ACC_32, "{%38,%39,%40,%41}") WG_PV_LINE(WG_ACC_32, "{%42,%43,%44,%45}")
#define WG_PV_STEPS_32_4 WG_PV_LINE(WG_ACC_32, "{%34,%35,%36,%37}") WG_PV_LINE(WG_ACC_32, "{%38,%39,%40,%41}") WG_PV_LINE(WG_ACC_32, "{%42,%43,%44,%45}") WG_PV_LINE(WG_ACC_32, "{%46,%47,%48,%49}")
#define WG_PV_STEPS_32_8 WG_PV_LINE(WG_ACC_32, "{%34,%35,%36,%37}") WG_PV_LINE(WG_ACC_32, "{%38,%39,%40,%41}") WG_PV_LINE(WG_ACC_32, "{%42,%43,%44,%45}") WG_PV_LINE(WG_ACC_32, "{%46,%47,%48,%49}") WG_PV_LINE(WG_ACC_32, "{%50,%51,%52,%53}") WG_PV_LINE(WG_ACC_32, "{%54,%55,%56,%57}") WG_PV_LINE(WG_ACC_32, "{%58,%59,%60,%61}") WG_PV_LINE(WG_ACC_32, "{%62,%63,%64,%65}")
#define WG_PV_STEPS_64_1 WG_PV_LINE(WG_ACC_64, "{%66,%67,%68,%69}")
#define WG_PV_STEPS_64_2 WG_PV_LINE(WG_ACC_64, "{%66,%67,%68,%69}") WG_PV_LINE(WG_ACC_64, "{%70,%71,%72,%73}")
#define WG_PV_STEPS_64_3 WG_PV_LINE(WG_ACC_64, "{%66,%67,%68,%69}") WG_PV_LINE(WG_ACC_64, "{%70,%71,%72,%73}") WG_PV_LINE(WG_ACC_64, "{%74,%75,%76,%77}")
#define WG_PV_STEPS_64_4 WG_PV_LINE(WG_ACC_64, "{%66,%67,%68,%69}") WG_PV_LINE(WG_ACC_64, "{%70,%71,%72,%73}") WG_PV_LINE(WG_ACC_64, "{%74,%75,%76,%77}") WG_PV_LINE(WG_ACC_64, "{%78,%79,%80,%81}")
#define WG_PV_STEPS_64_8 WG_PV_LINE(WG_ACC_64, "{%66,%67,%68,%69}") WG_PV_LINE(WG_ACC_64, "{%70,%71,%72,%73}") WG_PV_LINE(WG_ACC_64, "{%74,%75,%76,%77}") WG_PV_LINE(WG_ACC_64, "{%78,%79,%80,%81}") WG_PV_LINE(WG_ACC_64, "{%82,%83,%84,%85}") WG_PV_LINE(WG_ACC_64, "{%86,%87,%88,%89}") WG_PV_LINE(WG_ACC_64, "{%90,%91,%92,%93}") WG_PV_LINE(WG_ACC_64, "{%94,%95,%96,%97}")
#define WG_REGS_16(c, a) c(a[0][0]), c(a[0][1]), c(a[0][2]), c(a[0][3]), c(a[1][0]), c(a[1][1]), c(a[1][2]), c(a[1][3]), c(a[2][0]), c(a[2][1]), c(a[2][2]), c(a[2][3]), c(a[3][0]), c(a[3][1]), c(a[3][2]), c(a[3][3])
#define WG_REGS_24(c, a) c(a[0][0]), c(a[0][1]), c(a[0][2]), c(a[0][3]), c(a[1][0]), c(a[1][1]), c(a[1][2]), c(a[1][3]), c(a[2][0]), c(a[2][1]), c(a[2][2]), c(a[2][3]), c(a[3][0]), c(a[3][1]), c(a[3][2]), c(a[3][3]), c(a[4][0]), c(a[4][1]), c(a[4][2]), c(a[4][3]), c(a[5][0]), c(a[5][1]), c(a[5][2]), c(a[5][3])
#define WG_REGS_32(c, a) c(a[0][0]), c(a[0][1]), c(a[0][2]), c(a[0][3]), c(a[1][0]), c(a[1][1]), c(a[1][2]), c(a[1][3]), c(a[2][0]), c(a[2][1]), c(a[2][2]), c(a[2][3]), c(a[3][0]), c(a[3][1]), c(a[3][2]), c(a[3][3]), c(a[4][0]), c(a[4][1]), c(a[4][2]), c(a[4][3]), c(a[5][0]), c(a[5][1]), c(a[5][2]), c(a[5][3]), c(a[6][0]), c(a[6][1]), c(a[6][2]), c(a[6][3]), c(a[7][0]), c(a[7][1]), c(a[7][2]), c(a[7][3])
#define WG_REGS_64(c, a) c(a[0][0]), c(a[0][1]), c(a[0][2]), c(a[0][3]), c(a[1][0]), c(a[1][1]), c(a[1][2]), c(a[1][3]), c(a[2][0]), c(a[2][1]), c(a[2][2]), c(a[2][3]), c(a[3][0]), c(a[3][1]), c(a[3][2]), c(a[3][3]), c(a[4][0]), c(a[4][1]), c(a[4][2]), c(a[4][3]), c(a[5][0]), c(a[5][1]), c(a[5][2]), c(a[5][3]), c(a[6][0]), c(a[6][1]), c(a[6][2]), c(a[6][3]), c(a[7][0]), c(a[7][1]), c(a[7][2]), c(a[7][3]), c(a[8][0]), c(a[8][1]), c(a[8][2]), c(a[8][3]), c(a[9][0]), c(a[9][1]), c(a[9][2]), c(a[9][3]), c(a[10][0]), c(a[10][1]), c(a[10][2]), c(a[10][3]), c(a[11][0]), c(a[11][1]), c(a[11][2]), c(a[11][3]), c(a[12][0]), c(a[12][1]), c(a[12][2]), c(a[12][3]), c(a[13][0]), c(a[13][1]), c(a[13][2]), c(a[13][3]), c(a[14][0]), c(a[14][1]), c(a[14][2]), c(a[14][3]), c(a[15][0]), c(a[15][1]), c(a[15][2]), c(a[15][3])
#define WG_PIN_1(p) "r"(p[0][0]), "r"(p[0][1]), "r"(p[0][2]), "r"(p[0][3])
#define WG_PIN_2(p) "r"(p[0][0]), "r"(p[0][1]), "r"(p[0][2]), "r"(p[0][3]), "r"(p[1][0]), "r"(p[1][1]), "r"(p[1][2]), "r"(p[1][3])
#define WG_PIN_3(p) "r"(p[0][0]), "r"(p[0][1]), "r"(p[0][2]), "r"(p[0][3]), "r"(p[1][0]), "r"(p[1][1]), "r"(p[1][2]), "r"(p[1][3]), "r"(p[2][0]), "r"(p[2][1]), "r"(p[2][2]), "r"(p[2][3])
#define WG_PIN_4(p) "r"(p[0][0]), "r"(p[0][1]), "r"(p[0][2]), "r"(p[0][3]), "r"(p[1][0]), "r"(p[1][1]), "r"(p[1][2]), "r"(p[1][3]), "r"(p[2][0]), "r"(p[2][1]), "r"(p[2][2]), "r"(p[2][3]), "r"(p[3][0]), "r"(p[3][1]), "r"(p[3][2]), "r"(p[3][3])
#define WG_PIN_8(p) "r"(p[0][0]), "r"(p[0][1]), "r"(p[0][2]), "r"(p[0][3]), "r"(p[1][0]), "r"(p[1][1]), "r"(p[1][2]), "r"(p[1][3]), "r"(p[2][0]), "r"(p[2][1]), "r"(p[2][2]), "r"(p[2][3]), "r"(p[3][0]), "r"(p[3][1]), "r"(p[3][2]), "r"(p[3][3]), "r"(p[4][0]), "r"(p[4][1]), "r"(p[4][2]), "r"(p[4][3]), "r"(p[5][0]), "r"(p[5][1]), "r"(p[5][2]), "r"(p[5][3]), "r"(p[6][0]), "r"(p[6][1]), "r"(p[6][2]), "r"(p[6][3]), "r"(p[7][0]), "r"(p[7][1]), "r"(p[7][2]), "r"(p[7][3])
#define WG_PIN_12(p) "r"(p[0][0]), "r"(p[0][1]), "r"(p[0][2]), "r"(p[0][3]), "r"(p[1][0]), "r"(p[1][1]), "r"(p[1][2]), "r"(p[1][3]), "r"(p[2][0]), "r"(p[2][1]), "r"(p[2][2]), "r"(p[2][3]), "r"(p[3][0]), "r"(p[3][1]), "r"(p[3][2]), "r"(p[3][3]), "r"(p[4][0]), "r"(p[4][1]), "r"(p[4][2]), "r"(p[4][3]), "r"(p[5][0]), "r"(p[5][1]), "r"(p[5][2]), "r"(p[5][3]), "r"(p[6][0]), "r"(p[6][1]), "r"(p[6][2]), "r"(p[6][3]), "r"(p[7][0]), "r"(p[7][1]), "r"(p[7][2]), "r"(p[7][3]), "r"(p[8][0]), "r"(p[8][1]), "r"(p[8][2]), "r"(p[8][3]), "r"(p[9][0]), "r"(p[9][1]), "r"(p[9][2]), "r"(p[9][3]), "r"(p[10][0]), "r"(p[10][1]), "r"(p[10][2]), "r"(p[10][3]), "r"(p[11][0]), "r"(p[11][1]), "r"(p[11][2]), "r"(p[11][3])
#define WG_PIN_16(p) "r"(p[0][0]), "r"(p[0][1]), "r"(p[0][2]), "r"(p[0][3]), "r"(p[1][0]), "r"(p[1][1]), "r"(p[1][2]), "r"(p[1][3]), "r"(p[2][0]), "r"(p[2][1]), "r"(p[2][2]), "r"(p[2][3]), "r"(p[3][0]), "r"(p[3][1]), "r"(p[3][2]), "r"(p[3][3]), "r"(p[4][0]), "r"(p[4][1]), "r"(p[4][2]), "r"(p[4][3]), "r"(p[5][0]), "r"(p[5][1]), "r"(p[5][2]), "r"(p[5][3]), "r"(p[6][0]), "r"(p[6][1]), "r"(p[6][2]), "r"(p[6][3]), "r"(p[7][0]), "r"(p[7][1]), "r"(p[7][2]), "r"(p[7][3]), "r"(p[8][0]), "r"(p[8][1]), "r"(p[8][2]), "r"(p[8][3]), "r"(p[9][0]), "r"(p[9][1]), "r"(p[9][2]), "r"(p[9][3]), "r"(p[10][0]), "r"(p[10][1]), "r"(p[10][2]), "r"(p[10][3]), "r"(p[11][0]), "r"(p[11][1]), "r"(p[11][2]), "r"(p[11][3]), "r"(p[12][0]), "r"(p[12][1]), "r"(p[12][2]), "r"(p[12][3]), "r"(p[13][0]), "r"(p[13][1]), "r"(p[13][2]), "r"(p[13][3]), "r"(p[14][0]), "r"(p[14][1]), "r"(p[14][2]), "r"(p[14][3]), "r"(p[15][0]), "r"(p[15][1]), "r"(p[15][2]), "r"(p[15][3])
#define WG_QKR_STEPS_16_1(N) WG "mov.b64 wb, %16;\n" WG "mov.b64 ws, %16;\n" WG_QKR_LINE(N, WG_ACC_16, "{%18,%19,%20,%21}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%22,%23,%24,%25}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%26,%27,%28,%29}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%30,%31,%32,%33}")
#define WG_QKR_STEPS_16_2(N) WG "mov.b64 wb, %16;\n" WG "mov.b64 ws, %16;\n" WG_QKR_LINE(N, WG_ACC_16, "{%18,%19,%20,%21}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%22,%23,%24,%25}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%26,%27,%28,%29}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%30,%31,%32,%33}") WG "add.s64 ws, ws, %17;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_16, "{%34,%35,%36,%37}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%38,%39,%40,%41}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%42,%43,%44,%45}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%46,%47,%48,%49}")
#define WG_QKR_STEPS_16_3(N) WG "mov.b64 wb, %16;\n" WG "mov.b64 ws, %16;\n" WG_QKR_LINE(N, WG_ACC_16, "{%18,%19,%20,%21}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%22,%23,%24,%25}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%26,%27,%28,%29}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%30,%31,%32,%33}") WG "add.s64 ws, ws, %17;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_16, "{%34,%35,%36,%37}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%38,%39,%40,%41}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%42,%43,%44,%45}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%46,%47,%48,%49}") WG "add.s64 ws, ws, %17;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_16, "{%50,%51,%52,%53}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%54,%55,%56,%57}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%58,%59,%60,%61}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%62,%63,%64,%65}")
#define WG_QKR_STEPS_16_4(N) WG "mov.b64 wb, %16;\n" WG "mov.b64 ws, %16;\n" WG_QKR_LINE(N, WG_ACC_16, "{%18,%19,%20,%21}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%22,%23,%24,%25}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%26,%27,%28,%29}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%30,%31,%32,%33}") WG "add.s64 ws, ws, %17;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_16, "{%34,%35,%36,%37}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%38,%39,%40,%41}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%42,%43,%44,%45}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%46,%47,%48,%49}") WG "add.s64 ws, ws, %17;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_16, "{%50,%51,%52,%53}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%54,%55,%56,%57}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%58,%59,%60,%61}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%62,%63,%64,%65}") WG "add.s64 ws, ws, %17;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_16, "{%66,%67,%68,%69}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%70,%71,%72,%73}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%74,%75,%76,%77}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_16, "{%78,%79,%80,%81}")
#define WG_QKR_STEPS_24_1(N) WG "mov.b64 wb, %24;\n" WG "mov.b64 ws, %24;\n" WG_QKR_LINE(N, WG_ACC_24, "{%26,%27,%28,%29}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%30,%31,%32,%33}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%34,%35,%36,%37}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%38,%39,%40,%41}")
#define WG_QKR_STEPS_24_2(N) WG "mov.b64 wb, %24;\n" WG "mov.b64 ws, %24;\n" WG_QKR_LINE(N, WG_ACC_24, "{%26,%27,%28,%29}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%30,%31,%32,%33}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%34,%35,%36,%37}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%38,%39,%40,%41}") WG "add.s64 ws, ws, %25;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_24, "{%42,%43,%44,%45}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%46,%47,%48,%49}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%50,%51,%52,%53}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%54,%55,%56,%57}")
#define WG_QKR_STEPS_24_3(N) WG "mov.b64 wb, %24;\n" WG "mov.b64 ws, %24;\n" WG_QKR_LINE(N, WG_ACC_24, "{%26,%27,%28,%29}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%30,%31,%32,%33}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%34,%35,%36,%37}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%38,%39,%40,%41}") WG "add.s64 ws, ws, %25;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_24, "{%42,%43,%44,%45}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%46,%47,%48,%49}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%50,%51,%52,%53}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%54,%55,%56,%57}") WG "add.s64 ws, ws, %25;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_24, "{%58,%59,%60,%61}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%62,%63,%64,%65}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%66,%67,%68,%69}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%70,%71,%72,%73}")
#define WG_QKR_STEPS_24_4(N) WG "mov.b64 wb, %24;\n" WG "mov.b64 ws, %24;\n" WG_QKR_LINE(N, WG_ACC_24, "{%26,%27,%28,%29}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%30,%31,%32,%33}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%34,%35,%36,%37}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%38,%39,%40,%41}") WG "add.s64 ws, ws, %25;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_24, "{%42,%43,%44,%45}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%46,%47,%48,%49}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%50,%51,%52,%53}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%54,%55,%56,%57}") WG "add.s64 ws, ws, %25;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_24, "{%58,%59,%60,%61}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%62,%63,%64,%65}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%66,%67,%68,%69}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%70,%71,%72,%73}") WG "add.s64 ws, ws, %25;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_24, "{%74,%75,%76,%77}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%78,%79,%80,%81}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%82,%83,%84,%85}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_24, "{%86,%87,%88,%89}")
#define WG_QKR_STEPS_32_1(N) WG "mov.b64 wb, %32;\n" WG "mov.b64 ws, %32;\n" WG_QKR_LINE(N, WG_ACC_32, "{%34,%35,%36,%37}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%38,%39,%40,%41}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%42,%43,%44,%45}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%46,%47,%48,%49}")
#define WG_QKR_STEPS_32_2(N) WG "mov.b64 wb, %32;\n" WG "mov.b64 ws, %32;\n" WG_QKR_LINE(N, WG_ACC_32, "{%34,%35,%36,%37}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%38,%39,%40,%41}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%42,%43,%44,%45}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%46,%47,%48,%49}") WG "add.s64 ws, ws, %33;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_32, "{%50,%51,%52,%53}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%54,%55,%56,%57}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%58,%59,%60,%61}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%62,%63,%64,%65}")
#define WG_QKR_STEPS_32_3(N) WG "mov.b64 wb, %32;\n" WG "mov.b64 ws, %32;\n" WG_QKR_LINE(N, WG_ACC_32, "{%34,%35,%36,%37}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%38,%39,%40,%41}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%42,%43,%44,%45}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%46,%47,%48,%49}") WG "add.s64 ws, ws, %33;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_32, "{%50,%51,%52,%53}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%54,%55,%56,%57}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%58,%59,%60,%61}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%62,%63,%64,%65}") WG "add.s64 ws, ws, %33;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_32, "{%66,%67,%68,%69}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%70,%71,%72,%73}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%74,%75,%76,%77}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%78,%79,%80,%81}")
#define WG_QKR_STEPS_32_4(N) WG "mov.b64 wb, %32;\n" WG "mov.b64 ws, %32;\n" WG_QKR_LINE(N, WG_ACC_32, "{%34,%35,%36,%37}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%38,%39,%40,%41}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%42,%43,%44,%45}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%46,%47,%48,%49}") WG "add.s64 ws, ws, %33;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_32, "{%50,%51,%52,%53}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%54,%55,%56,%57}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%58,%59,%60,%61}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%62,%63,%64,%65}") WG "add.s64 ws, ws, %33;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_32, "{%66,%67,%68,%69}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%70,%71,%72,%73}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%74,%75,%76,%77}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%78,%79,%80,%81}") WG "add.s64 ws, ws, %33;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_32, "{%82,%83,%84,%85}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%86,%87,%88,%89}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%90,%91,%92,%93}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_32, "{%94,%95,%96,%97}")
#define WG_QKR_STEPS_64_1(N) WG "mov.b64 wb, %64;\n" WG "mov.b64 ws, %64;\n" WG_QKR_LINE(N, WG_ACC_64, "{%66,%67,%68,%69}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%70,%71,%72,%73}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%74,%75,%76,%77}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%78,%79,%80,%81}")
#define WG_QKR_STEPS_64_2(N) WG "mov.b64 wb, %64;\n" WG "mov.b64 ws, %64;\n" WG_QKR_LINE(N, WG_ACC_64, "{%66,%67,%68,%69}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%70,%71,%72,%73}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%74,%75,%76,%77}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%78,%79,%80,%81}") WG "add.s64 ws, ws, %65;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_64, "{%82,%83,%84,%85}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%86,%87,%88,%89}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%90,%91,%92,%93}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%94,%95,%96,%97}")
#define WG_QKR_STEPS_64_3(N) WG "mov.b64 wb, %64;\n" WG "mov.b64 ws, %64;\n" WG_QKR_LINE(N, WG_ACC_64, "{%66,%67,%68,%69}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%70,%71,%72,%73}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%74,%75,%76,%77}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%78,%79,%80,%81}") WG "add.s64 ws, ws, %65;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_64, "{%82,%83,%84,%85}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%86,%87,%88,%89}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%90,%91,%92,%93}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%94,%95,%96,%97}") WG "add.s64 ws, ws, %65;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_64, "{%98,%99,%100,%101}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%102,%103,%104,%105}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%106,%107,%108,%109}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%110,%111,%112,%113}")
#define WG_QKR_STEPS_64_4(N) WG "mov.b64 wb, %64;\n" WG "mov.b64 ws, %64;\n" WG_QKR_LINE(N, WG_ACC_64, "{%66,%67,%68,%69}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%70,%71,%72,%73}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%74,%75,%76,%77}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%78,%79,%80,%81}") WG "add.s64 ws, ws, %65;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_64, "{%82,%83,%84,%85}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%86,%87,%88,%89}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%90,%91,%92,%93}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%94,%95,%96,%97}") WG "add.s64 ws, ws, %65;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_64, "{%98,%99,%100,%101}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%102,%103,%104,%105}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%106,%107,%108,%109}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%110,%111,%112,%113}") WG "add.s64 ws, ws, %65;\n" WG "mov.b64 wb, ws;\n" WG_QKR_LINE(N, WG_ACC_64, "{%114,%115,%116,%117}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%118,%119,%120,%121}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%122,%123,%124,%125}") WG "add.s64 wb, wb, 2;\n" WG_QKR_LINE(N, WG_ACC_64, "{%126,%127,%128,%129}")

/* Scratch registers of one statement: descriptors wa (A) and wb (B), the B step ws, the predicate
   wp (scale-d: false = D = A B, true = D += A B). */
#define WG_BEGIN                                                                                                       \
    WG "{\n" WG ".reg .b64 wa, wb, ws;\n" WG ".reg .u32 wz;\n" WG ".reg .pred wp;\n" WG "mov.u32 wz, 0;\n" WG           \
       "wgmma.fence.sync.aligned;\n"
#define WG_END WG "wgmma.commit_group.sync.aligned;\n" WG "wgmma.wait_group.sync.aligned 0;\n" WG "}\n"

/* S = A B^T over k = 64 * BLOCKS: A (64 rows) and B (N rows) K-major in __local; the first step
   writes S, the others add to it. Four k steps per column block, each 32 bytes on; the second
   block starts at desc + block stride (operands 3 and 4 after the accumulators). */
#define WG_QK_LINE(N, ACC)                                                                                             \
    WG "wgmma.mma_async.sync.aligned.m64n" N "k16.f32." WG_T "." WG_T " " ACC ", wa, wb, wp, 1, 1, 0, 0;\n" WG          \
       "setp.eq.u32 wp, wz, 0;\n"
#define WG_K32 WG "add.s64 wa, wa, 2;\n" WG "add.s64 wb, wb, 2;\n"
#define WG_QK_BLOCK(N, ACC)                                                                                            \
    WG_QK_LINE(N, ACC) WG_K32 WG_QK_LINE(N, ACC) WG_K32 WG_QK_LINE(N, ACC) WG_K32 WG_QK_LINE(N, ACC)
#define WG_QK_BLOCKS_1(N, R) WG WG_CAT(WG_OPS_, R) WG_QK_BLOCK(N, WG_CAT(WG_ACC_, R))
#define WG_QK_BLOCKS_2(N, R) WG_QK_BLOCKS_1(N, R) WG WG_CAT(WG_NEXT_, R) WG_QK_BLOCK(N, WG_CAT(WG_ACC_, R))
#define WG_CAT(a, b) WG_CAT_(a, b)
#define WG_CAT_(a, b) a##b
/* s: float[R/4][4] written (R = N / 2 registers), BLOCKS = d / 64; literal numbers. */
#define WG_QK(N, R, BLOCKS, s, desc_a, desc_b, block_a, block_b)                                                       \
    asm volatile(WG_BEGIN WG "setp.ne.u32 wp, wz, 0;\n" WG_CAT(WG_QK_BLOCKS_, BLOCKS)(WG_STR(N), R) WG_END           \
                 : WG_CAT(WG_REGS_, R)("=f", s)                                                                        \
                 : "l"(desc_a), "l"(desc_b), "l"(block_a), "l"(block_b)                                                \
                 : "memory")

/* S = Q K^T with Q in registers (the RS form, for head dims whose Q does not fit __local): Q's A
   fragments, one per k step of 16 (the mma.sync m16n8k16 A layout of each warp's 16 rows), K
   K-major in __local as above (imm-trans-b = 0); `block_b` moves K's descriptor to the next column
   block. s: float[R/4][4] written; QSTEPS = 4 * BLOCKS; literal numbers. */
#define WG_QKR_LINE(N, ACC, Q)                                                                                         \
    WG "wgmma.mma_async.sync.aligned.m64n" N "k16.f32." WG_T "." WG_T " " ACC ", " Q ", wb, wp, 1, 1, 0;\n" WG         \
       "setp.eq.u32 wp, wz, 0;\n"
#define WG_QKR(N, R, BLOCKS, QSTEPS, s, q, desc_b, block_b)                                                            \
    asm volatile(WG_BEGIN WG "setp.ne.u32 wp, wz, 0;\n" WG_CAT(WG_CAT(WG_QKR_STEPS_, R), WG_CAT(_, BLOCKS))(WG_STR(N)) \
                     WG_END                                                                                            \
                 : WG_CAT(WG_REGS_, R)("=f", s)                                                                        \
                 : "l"(desc_b), "l"(block_b), WG_CAT(WG_PIN_, QSTEPS)(q)                                               \
                 : "memory")

/* O += P V over STEPS k steps of 16 keys: P in registers (the A fragments of the S accumulator,
   packed), V MN-major in __local (transposed read, imm-trans-b = 1), the descriptor moved by
   `step` (16-byte units) per step. WG_PV_N is the user's N as a string. */
#define WG_PV_LINE(ACC, P)                                                                                             \
    WG "wgmma.mma_async.sync.aligned.m64n" WG_PV_N "k16.f32." WG_T "." WG_T " " ACC ", " P ", wb, wp, 1, 1, 1;\n" WG    \
       "add.s64 wb, wb, ws;\n"
#define WG_PV(R, STEPS, acc, p, desc_b, step)                                                                          \
    asm volatile(WG_BEGIN WG "setp.eq.u32 wp, wz, 0;\n" WG WG_CAT(WG_OPSV_, R)                                         \
                     WG_CAT(WG_CAT(WG_PV_STEPS_, R), WG_CAT(_, STEPS)) WG_END                                          \
                 : WG_CAT(WG_REGS_, R)("+f", acc)                                                                      \
                 : "l"(desc_b), "l"(step), WG_CAT(WG_PIN_, STEPS)(p)                                                   \
                 : "memory")

/* Empty statements that need the accumulators (R of them) or P's registers (STEPS k steps) where
   they stand: what computes them stays before the statements that follow. */
#define WG_KEEP(R, acc) asm volatile("" : WG_CAT(WG_REGS_, R)("+f", acc)::"memory")
#define WG_KEEP_P(STEPS, p) asm volatile("" ::WG_CAT(WG_PIN_, STEPS)(p) : "memory")

/* cp.async's writes (the generic proxy) made visible to wgmma's reads (the async proxy): each
   thread after its own copies have landed, before the barrier that publishes them. */
#define WG_PROXY_FENCE() asm volatile(WG "fence.proxy.async.shared::cta;\n" ::: "memory")
#endif

#endif

#if !defined(LANE_SHFL) && HAS_DROPOUT
/*
 * Dropout in the mma.sync fragment layouts. One call of the mask's RNG (flashcl_dropout_call,
 * cl/variants.cl) covers rows i, i + 8 and keys 2u, 2u + 1, 2u + 8, 2u + 9 of a 16 x 16 block,
 * which is what a lane holds of S in two 8-key tiles (rows as M: the forward, the dQ kernel), so
 * those draw it directly. With keys as M (the dK/dV kernel's S^T) a lane holds one key of each
 * pair, and the lane holding the other draws the call for the other row: one shuffle each way.
 * Every lane of the warp must reach it (shfl.sync over the full warp).
 */
inline uint ptx_shfl_xor_u(uint x, int m) {
    uint r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(x), "r"(m));
    return r;
}

/* Rows as M: the 16 bits of accumulator element c (row + 8 (c >> 1), key 2t + (c & 1)) of 8-key
   tile n, from the lane's call w of tiles n & ~1 and (n & ~1) + 1: word 2 (c >> 1) + (n & 1), the
   low half for the even key. */
inline uint frag_dropout_bits(uint4 w, int n, int c) {
    return flashcl_dropout_half((c >> 1) ? ((n & 1) ? w.w : w.z) : ((n & 1) ? w.y : w.x), c);
}

/* The high (hi) or low 16 bits of a and b, a's in the low half. */
inline uint frag_halves(uint a, uint b, int hi) {
    return hi ? (a >> 16) | (b & 0xffff0000u) : (a & 0xffffu) | (b << 16);
}

/* Keys as M: lane 4m + t holds keys k16 + m, k16 + m + 8 (k16 a multiple of 16) and rows q, q + 1
   of the 8-row tiles at q and q + 8 (q - 2t a multiple of 16). Lane m draws the call of row
   q + (m & 1) and keys k16 + 2 (m >> 1) + {0, 1, 8, 9}, keeps its key's halves (m & 1) and hands
   the other four to lane m ^ 1 (lane ^ 4), which drew row q + 1 - (m & 1). w[tile][octet][row]:
   the 16 bits of key k16 + m + 8 octet, row q + 8 tile + row. */
inline void frag_dropout_cols(flashcl_head hd, long q, long k16, int lane, uint seed_lo, uint seed_hi,
                              uint drop_off_lo, uint drop_off_hi, uint w[2][2][2]) {
    const int m = lane >> 2, odd = m & 1;
    const uint4 c = flashcl_dropout_call(hd, q + odd, k16 + m, seed_lo, seed_hi, drop_off_lo, drop_off_hi);
    const uint got0 = ptx_shfl_xor_u(frag_halves(c.x, c.y, !odd), 4); /* the other row, octets 0 and 1 */
    const uint got1 = ptx_shfl_xor_u(frag_halves(c.z, c.w, !odd), 4); /* the same, 8 rows on */
    const uint mine0 = frag_halves(c.x, c.y, odd), mine1 = frag_halves(c.z, c.w, odd);
#pragma unroll
    for (int o = 0; o < 2; ++o) {
        const uint m0 = (mine0 >> (16 * o)) & 0xffffu, m1 = (mine1 >> (16 * o)) & 0xffffu;
        const uint g0 = (got0 >> (16 * o)) & 0xffffu, g1 = (got1 >> (16 * o)) & 0xffffu;
        w[0][o][0] = odd ? g0 : m0;
        w[0][o][1] = odd ? m0 : g0;
        w[1][o][0] = odd ? g1 : m1;
        w[1][o][1] = odd ? m1 : g1;
    }
}
#endif

#endif
