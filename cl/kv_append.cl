/*
 * flashcl_forward_kvcache's preparation: the new K/V rows written into the
 * cache (rotated first when rotary is on; quantised when the cache is fp8),
 * and the query rows rotated into scratch. One work-item per element; a rotary
 * position is a cache row (FlashAttention's rule: cache_leftpad does not shift it).
 *
 * Rotary on the first ROTARY_DIM dims with cos/sin [seqlen_ro, ROTARY_DIM / 2]:
 *   INTERLEAVED (GPT-J): pairs (x[2i], x[2i+1]) turn by angle i;
 *   else (GPT-NeoX): x[i] and x[i + ROTARY_DIM / 2] turn by angle i.
 * Per sequence b the host passes seqinfo[b] = {kv_start, kv_len, append_row,
 * first_position}: new row t goes to cache row append_row + t at position
 * first_position + t.
 */
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef ROTARY_DIM
#define ROTARY_DIM 0
#endif
#ifndef INTERLEAVED
#define INTERLEAVED 0
#endif

/* Element c of row x (stride 1) turned to position pos; cos/sin rows are ROTARY_DIM / 2 long. */
inline float rotated(__global const store_t *x, int c, long pos, __global const float *cosv,
                     __global const float *sinv) {
    const float xc = FLASHCL_LOAD(x, c);
#if ROTARY_DIM > 0
    if (c < ROTARY_DIM) {
        const int halfw = ROTARY_DIM / 2;
#if INTERLEAVED
        const int i = c / 2;
        const float cs = cosv[pos * halfw + i], sn = sinv[pos * halfw + i];
        return (c & 1) ? xc * cs + FLASHCL_LOAD(x, c - 1) * sn : xc * cs - FLASHCL_LOAD(x, c + 1) * sn;
#else
        const int i = c < halfw ? c : c - halfw;
        const float cs = cosv[pos * halfw + i], sn = sinv[pos * halfw + i];
        return c < halfw ? xc * cs - FLASHCL_LOAD(x, c + halfw) * sn : xc * cs + FLASHCL_LOAD(x, c - halfw) * sn;
#endif
    }
#endif
    return xc;
}

inline void store_cache(__global cache_t *dst, float x, float inv_scale) {
#if CACHE_DTYPE == 0
    (void)inv_scale;
    FLASHCL_STORE(dst, 0, x);
#else
    dst[0] = flashcl_float_to_fp8(x * inv_scale, CACHE_DTYPE == 1);
#endif
}

/* Grid: (seqlen_new * HEAD_DIM_MAX, heads_kv, batch); k rows rotated, v rows as they are. */
__kernel void kv_append(__global const store_t *Kn, VIEW_ARGS(kn), __global const store_t *Vn, VIEW_ARGS(vn),
                        __global cache_t *K, ulong k_off, ulong k_sp, ulong k_sh, ulong k_sr, __global cache_t *V,
                        ulong v_off, ulong v_sp, ulong v_sh, ulong v_sr, __global const int *table, int max_pages,
                        long page_size, __global const int *seqinfo, __global const float *rcos,
                        __global const float *rsin, ulong rot_off, __global const float *k_scale,
                        __global const float *v_scale, int scale_per_head, int seqlen_new) {
    /* Global ids: these kernels run with the work-group size the driver picks. */
    const long e = (long)get_global_id(0);
    const int hk = (int)get_global_id(1), b = (int)get_global_id(2);
    const int dmax = HEAD_DIM > HEAD_DIM_V ? HEAD_DIM : HEAD_DIM_V;
    const long t = e / dmax;
    const int c = (int)(e - t * dmax);
    if (t >= seqlen_new) return;
    const long row = seqinfo[4 * b + 2] + t, pos = seqinfo[4 * b + 3] + t;
    const float ks = CACHE_DTYPE ? 1.0f / k_scale[scale_per_head ? hk : 0] : 1.0f;
    const float vs = CACHE_DTYPE ? 1.0f / v_scale[scale_per_head ? hk : 0] : 1.0f;
    /* flashcl_kv_row counts from kv_start; the append row is absolute in the sequence's pages. */
    if (c < HEAD_DIM) {
        __global const store_t *src = Kn + VIEW_BASE(kn, b, hk) + t * kn_sr;
        store_cache(K + flashcl_kv_row(b, row, hk, table, max_pages, page_size, 0, k_off, k_sp, k_sh, k_sr, 0) + c,
                    rotated(src, c, pos, rcos + rot_off, rsin + rot_off), ks);
    }
    if (c < HEAD_DIM_V) {
        __global const store_t *src = Vn + VIEW_BASE(vn, b, hk) + t * vn_sr;
        store_cache(V + flashcl_kv_row(b, row, hk, table, max_pages, page_size, 0, v_off, v_sp, v_sh, v_sr, 0) + c,
                    FLASHCL_LOAD(src, c), vs);
    }
}

/* Grid: (seqlen_q * HEAD_DIM, heads_q, batch): q row i to position first_position + (per_row ? i : 0). */
__kernel void rotate_q(__global const store_t *Q, VIEW_ARGS(q), __global store_t *Qr, VIEW_ARGS(qr),
                       __global const int *seqinfo, __global const float *rcos, __global const float *rsin,
                       ulong rot_off, int seqlen_q, int per_row) {
    const long e = (long)get_global_id(0);
    const int h = (int)get_global_id(1), b = (int)get_global_id(2);
    const long i = e / HEAD_DIM;
    const int c = (int)(e - i * HEAD_DIM);
    if (i >= seqlen_q) return;
    const long pos = seqinfo[4 * b + 3] + (per_row ? i : 0);
    __global const store_t *src = Q + VIEW_BASE(q, b, h) + i * q_sr;
    FLASHCL_STORE(Qr + VIEW_BASE(qr, b, h) + i * qr_sr, c, rotated(src, c, pos, rcos + rot_off, rsin + rot_off));
}
