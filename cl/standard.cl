/*
 * Standard attention (Algorithm 0 of the FlashAttention paper), the honest
 * baseline: kernels that go through global memory.
 * Forward:
 *   std_scores   S = scale * Q K^T          (tiled GEMM, B transposed)
 *   std_softmax  P = softmax(S) in place, and LSE
 *   std_pv       O = P V                    (tiled GEMM)
 * Backward (P and dS materialised):
 *   std_rowdot   D = rowsum(dO * O)
 *   std_probs    P = exp(S - LSE) in place, from the forward's LSE
 *   std_scores   dP = dO V^T; std_ds: dS = P * (dP - D) in place
 *   std_pv       dQ = scale * dS K
 *   std_tn       per query head: dV_h = P^T dO, dK_h = scale * dS^T Q
 *   std_group_sum  dK, dV = sum of dK_h, dV_h over each GQA group
 * Each GEMM work-group computes a TILE x TILE block of C with every work-item
 * owning a WPT x WPT register block; A and B stream through __local in steps
 * of TILE_K. Batch and head are the third grid dimension.
 */

#ifndef TILE
#define TILE 64
#endif
#ifndef WPT
#define WPT 4
#endif
#ifndef TILE_K
#define TILE_K 16
#endif
#ifndef SOFTMAX_WG
#define SOFTMAX_WG 128
#endif

#define RTS (TILE / WPT) /* work-items per tile side */
#define GEMM_WG (RTS * RTS)

/* One step of the register-blocked product from the local tiles As[k][m], Bs[k][n]. */
#define GEMM_ACCUMULATE(acc, As, Bs, tm, tn)                                                                           \
    for (int kk = 0; kk < TILE_K; ++kk) {                                                                              \
        float a_reg[WPT], b_reg[WPT];                                                                                  \
        for (int w = 0; w < WPT; ++w) a_reg[w] = As[kk][(tm) + w * RTS];                                               \
        for (int w = 0; w < WPT; ++w) b_reg[w] = Bs[kk][(tn) + w * RTS];                                               \
        for (int wm = 0; wm < WPT; ++wm)                                                                               \
            for (int wn = 0; wn < WPT; ++wn) acc[wm][wn] = fma(a_reg[wm], b_reg[wn], acc[wm][wn]);                     \
    }

/* S[z, i, j] = scale * sum_c Q[i, c] K[j, c]; causal entries above the diagonal are -inf. */
__kernel __attribute__((reqd_work_group_size(RTS, RTS, 1))) void
std_scores(__global const float *Q, VIEW_ARGS(q), __global const float *K, VIEW_ARGS(k), __global float *S,
           int seqlen_q, int seqlen_k, int head_dim, int heads_q, int group, float scale, int causal) {
    const int tn = (int)get_local_id(0), tm = (int)get_local_id(1);
    const int n0 = (int)get_group_id(0) * TILE, m0 = (int)get_group_id(1) * TILE;
    const int z = (int)get_global_id(2);
    const int b = z / heads_q, h = z - b * heads_q;
    __global const float *A = Q + VIEW_BASE(q, b, h);
    __global const float *B = K + VIEW_BASE(k, b, h / group);

    __local float As[TILE_K][TILE + 1];
    __local float Bs[TILE_K][TILE + 1];
    float acc[WPT][WPT];
    for (int wm = 0; wm < WPT; ++wm)
        for (int wn = 0; wn < WPT; ++wn) acc[wm][wn] = 0.0f;

    const int lid = tm * RTS + tn;
    for (int c0 = 0; c0 < head_dim; c0 += TILE_K) {
        /* Both operands are row-major over head_dim: read along c for coalescing. */
        FLASHCL_SHARED_FOR(int, e, TILE *TILE_K, lid, GEMM_WG) {
            int row = e / TILE_K, kk = e - row * TILE_K;
            int c = c0 + kk;
            int qi = m0 + row, kj = n0 + row;
            As[kk][row] = (qi < seqlen_q && c < head_dim) ? A[(ulong)qi * q_sr + c] : 0.0f;
            Bs[kk][row] = (kj < seqlen_k && c < head_dim) ? B[(ulong)kj * k_sr + c] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        GEMM_ACCUMULATE(acc, As, Bs, tm, tn)
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    __global float *Sz = S + (ulong)z * seqlen_q * seqlen_k;
    for (int wm = 0; wm < WPT; ++wm) {
        int i = m0 + tm + wm * RTS;
        if (i >= seqlen_q) continue;
        long limit = causal ? flashcl_causal_limit(i, seqlen_q, seqlen_k) : (long)seqlen_k - 1;
        for (int wn = 0; wn < WPT; ++wn) {
            int j = n0 + tn + wn * RTS;
            if (j < seqlen_k) Sz[(ulong)i * seqlen_k + j] = j > limit ? FLASHCL_NEG_INF : acc[wm][wn] * scale;
        }
    }
}

/* One work-group per row: P = exp(S - max) / sum in place; LSE = max + log(sum). */
__kernel __attribute__((reqd_work_group_size(SOFTMAX_WG, 1, 1))) void
std_softmax(__global float *S, int seqlen_k, __global float *LSE, ulong lse_off, int write_lse) {
    const int lid = (int)get_local_id(0);
    const ulong row = get_group_id(0); /* z * seqlen_q + i */
    __global float *Sr = S + row * (ulong)seqlen_k;
    __local float red[SOFTMAX_WG];

    float mx = FLASHCL_NEG_INF;
    FLASHCL_SHARED_FOR(int, j, seqlen_k, lid, SOFTMAX_WG) mx = fmax(mx, Sr[j]);
    red[lid] = mx;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int width = SOFTMAX_WG / 2; width > 0; width >>= 1) {
        if (lid < width) red[lid] = fmax(red[lid], red[lid + width]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    mx = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    const float base = flashcl_safe_base(mx);

    float sum = 0.0f;
    FLASHCL_SHARED_FOR(int, j, seqlen_k, lid, SOFTMAX_WG) {
        float p = exp(Sr[j] - base);
        Sr[j] = p;
        sum += p;
    }
    red[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int width = SOFTMAX_WG / 2; width > 0; width >>= 1) {
        if (lid < width) red[lid] += red[lid + width];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    sum = red[0];
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    FLASHCL_SHARED_FOR(int, j, seqlen_k, lid, SOFTMAX_WG) Sr[j] *= inv;
    if (write_lse && lid == 0) {
        /* Rows are numbered z * seqlen_q + i, exactly the [b, h, sq] LSE order. */
        LSE[lse_off + row] = sum > 0.0f ? mx + log(sum) : flashcl_lse_empty(sum);
    }
}

/* O[z, i, :] = sum_j P[z, i, j] V[j, :]. */
__kernel __attribute__((reqd_work_group_size(RTS, RTS, 1))) void
std_pv(__global const float *P, __global const float *V, VIEW_ARGS(v), __global float *O, VIEW_ARGS(o), int seqlen_q,
       int seqlen_k, int head_dim, int heads_q, int group, float alpha) {
    const int tn = (int)get_local_id(0), tm = (int)get_local_id(1);
    const int n0 = (int)get_group_id(0) * TILE, m0 = (int)get_group_id(1) * TILE;
    const int z = (int)get_global_id(2);
    const int b = z / heads_q, h = z - b * heads_q;
    __global const float *A = P + (ulong)z * seqlen_q * seqlen_k;
    __global const float *B = V + VIEW_BASE(v, b, h / group);

    __local float As[TILE_K][TILE + 1];
    __local float Bs[TILE_K][TILE + 1];
    float acc[WPT][WPT];
    for (int wm = 0; wm < WPT; ++wm)
        for (int wn = 0; wn < WPT; ++wn) acc[wm][wn] = 0.0f;

    const int lid = tm * RTS + tn;
    for (int j0 = 0; j0 < seqlen_k; j0 += TILE_K) {
        FLASHCL_SHARED_FOR(int, e, TILE *TILE_K, lid, GEMM_WG) {
            /* P rows are contiguous over keys; V rows are contiguous over dims. */
            int prow = e / TILE_K, pk = e - prow * TILE_K;
            int i = m0 + prow, jp = j0 + pk;
            As[pk][prow] = (i < seqlen_q && jp < seqlen_k) ? A[(ulong)i * seqlen_k + jp] : 0.0f;
            int vk = e / TILE, vc = e - vk * TILE;
            int jv = j0 + vk, c = n0 + vc;
            Bs[vk][vc] = (jv < seqlen_k && c < head_dim) ? B[(ulong)jv * v_sr + c] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        GEMM_ACCUMULATE(acc, As, Bs, tm, tn)
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    __global float *Oz = O + VIEW_BASE(o, b, h);
    for (int wm = 0; wm < WPT; ++wm) {
        int i = m0 + tm + wm * RTS;
        if (i >= seqlen_q) continue;
        for (int wn = 0; wn < WPT; ++wn) {
            int c = n0 + tn + wn * RTS;
            if (c < head_dim) Oz[(ulong)i * o_sr + c] = acc[wm][wn] * alpha;
        }
    }
}

/* D[z, i] = sum_c dO[i, c] O[i, c]; one work-item per row. Grid (rows rounded up, heads_q, batch). */
__kernel void std_rowdot(__global const float *G, VIEW_ARGS(g), __global const float *Y, VIEW_ARGS(y),
                         __global float *Dsum, int seqlen_q, int head_dim, int heads_q) {
    const int i = (int)get_global_id(0);
    const int h = (int)get_global_id(1), b = (int)get_global_id(2);
    if (i >= seqlen_q) return;
    __global const float *gr = G + VIEW_BASE(g, b, h) + (ulong)i * g_sr;
    __global const float *yr = Y + VIEW_BASE(y, b, h) + (ulong)i * y_sr;
    float acc = 0.0f;
    for (int c = 0; c < head_dim; ++c) acc = fma(gr[c], yr[c], acc);
    Dsum[((ulong)b * heads_q + h) * seqlen_q + i] = acc;
}

/* P = exp(S - lse[row]) in place; 0 for rows that saw no key (lse = -inf). */
__kernel void std_probs(__global float *S, int seqlen_k, __global const float *LSE, ulong lse_off, ulong count) {
    const ulong e = get_global_id(0);
    if (e >= count) return;
    const float lse = LSE[lse_off + e / (ulong)seqlen_k];
    S[e] = lse == FLASHCL_NEG_INF ? 0.0f : exp(S[e] - lse);
}

/* dS = P * (dP - D[row]) in place over dP; one work-item per element. */
__kernel void std_ds(__global const float *P, __global float *dP, __global const float *Dsum, int seqlen_k,
                     ulong count) {
    const ulong e = get_global_id(0);
    if (e >= count) return;
    dP[e] = P[e] * (dP[e] - Dsum[e / (ulong)seqlen_k]);
}

/* C[z] (seqlen_k x head_dim) = alpha * A[z]^T B, A[z] = seqlen_q x seqlen_k scratch, B a [b, heads_q] view. */
__kernel __attribute__((reqd_work_group_size(RTS, RTS, 1))) void std_tn(__global const float *A,
                                                                        __global const float *B, VIEW_ARGS(bv),
                                                                        __global float *C, int seqlen_q, int seqlen_k,
                                                                        int head_dim, int heads_q, float alpha) {
    const int tn = (int)get_local_id(0), tm = (int)get_local_id(1);
    const int n0 = (int)get_group_id(0) * TILE, m0 = (int)get_group_id(1) * TILE;
    const int z = (int)get_global_id(2);
    const int b = z / heads_q, h = z - b * heads_q;
    __global const float *Az = A + (ulong)z * seqlen_q * seqlen_k;
    __global const float *Bz = B + VIEW_BASE(bv, b, h);

    __local float As[TILE_K][TILE + 1];
    __local float Bs[TILE_K][TILE + 1];
    float acc[WPT][WPT];
    for (int wm = 0; wm < WPT; ++wm)
        for (int wn = 0; wn < WPT; ++wn) acc[wm][wn] = 0.0f;

    const int lid = tm * RTS + tn;
    for (int i0 = 0; i0 < seqlen_q; i0 += TILE_K) {
        FLASHCL_SHARED_FOR(int, e, TILE *TILE_K, lid, GEMM_WG) {
            /* Both operands are read along their rows (over keys, over dims). */
            int kk = e / TILE, mm = e - kk * TILE;
            int i = i0 + kk;
            As[kk][mm] = (i < seqlen_q && m0 + mm < seqlen_k) ? Az[(ulong)i * seqlen_k + m0 + mm] : 0.0f;
            Bs[kk][mm] = (i < seqlen_q && n0 + mm < head_dim) ? Bz[(ulong)i * bv_sr + n0 + mm] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        GEMM_ACCUMULATE(acc, As, Bs, tm, tn)
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    __global float *Cz = C + (ulong)z * seqlen_k * head_dim;
    for (int wm = 0; wm < WPT; ++wm) {
        int j = m0 + tm + wm * RTS;
        if (j >= seqlen_k) continue;
        for (int wn = 0; wn < WPT; ++wn) {
            int c = n0 + tn + wn * RTS;
            if (c < head_dim) Cz[(ulong)j * head_dim + c] = acc[wm][wn] * alpha;
        }
    }
}

/* out[b, hk] = sum over the group's query heads h of G[b, h] (seqlen_k x head_dim each). */
__kernel void std_group_sum(__global const float *G, __global float *Out, VIEW_ARGS(out), int seqlen_k, int head_dim,
                            int heads_q, int group) {
    const int e = (int)get_global_id(0); /* j * head_dim + c */
    const int hk = (int)get_global_id(1), b = (int)get_global_id(2);
    if (e >= seqlen_k * head_dim) return;
    const int j = e / head_dim, c = e - j * head_dim;
    float acc = 0.0f;
    for (int g = 0; g < group; ++g) {
        ulong z = (ulong)b * heads_q + (ulong)hk * group + g;
        acc += G[z * seqlen_k * head_dim + e];
    }
    Out[VIEW_BASE(out, b, hk) + (ulong)j * out_sr + c] = acc;
}
