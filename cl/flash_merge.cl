/*
 * Merges partial attention states by their log-sum-exp: the split-KV
 * decode's partials (src/backends/decode) and flashcl_merge_states.
 *   lse = max + log sum_s exp(lse_s - max),  O = sum_s exp(lse_s - lse) O_s,
 * with the sink logit (HAS_SINKS) as one more term of the sum that carries no
 * value row. A row whose every lse_s is -inf (and no sink) gets O = 0 and
 * lse = -inf: the max is replaced by 0 before it is subtracted.
 *
 * The states are float32 views: state s of row (b, h, i) starts at
 * os_off + s * os_state + b * os_sb + h * os_sh + i * os_sr; its LSE at
 * ls_off + s * ls_state + b * ls_sb + h * ls_sh + i. The merged O goes to a
 * store_t view and the LSE to [b, h, sq] (or [h, total_q] with VARLEN) like
 * the forward's. One work-item per (row, 4 output dims).
 * Grid: (ceil(max_seqlen_q * DV4 / 64) * 64, heads, batch).
 */
#ifndef HEAD_DIM_V
#define HEAD_DIM_V 128
#endif
#define DV4 ((HEAD_DIM_V + 3) / 4)

__kernel void flash_merge(__global const float *Os, ulong os_off, ulong os_sb, ulong os_sh, ulong os_sr, ulong os_state,
                          __global const float *Ls, ulong ls_off, ulong ls_sb, ulong ls_sh, ulong ls_state,
                          __global store_t *O, VIEW_ARGS(o), __global float *LSE, ulong lse_off, int write_lse,
                          int num_states, int seqlen_q, int seqlen_k, int heads_q, VARIANT_ARGS) {
    const int h = (int)get_global_id(1), b = (int)get_global_id(2);
    const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    const long e = (long)get_global_id(0);
    const long i = e / DV4;
    const int c4 = (int)(e - i * DV4);
    if (i >= hd.sq) return; /* no barrier in this kernel */
    const ulong lrow = ls_off + (ulong)b * ls_sb + (ulong)h * ls_sh + (ulong)i;
    float mx = FLASHCL_NEG_INF;
    for (int s = 0; s < num_states; ++s) mx = fmax(mx, Ls[lrow + (ulong)s * ls_state]);
#if HAS_SINKS
    const float sink = sinks[sinks_off + (ulong)h];
    mx = fmax(mx, sink);
#endif
    const float base = flashcl_safe_base(mx);
    float sum = 0.0f;
    float4 acc = (float4)(0.0f);
    const ulong orow = os_off + (ulong)b * os_sb + (ulong)h * os_sh + (ulong)i * os_sr + (ulong)c4 * 4;
    for (int s = 0; s < num_states; ++s) {
        const float w = exp(Ls[lrow + (ulong)s * ls_state] - base);
        sum += w;
        const __global float *src = Os + orow + (ulong)s * os_state;
        const int c = c4 * 4;
        /* O_s of a state with lse -inf is never read: its weight is 0 and it may hold anything. */
        if (w > 0.0f)
            acc += w * (float4)(src[0], c + 1 < HEAD_DIM_V ? src[1] : 0.0f, c + 2 < HEAD_DIM_V ? src[2] : 0.0f,
                                c + 3 < HEAD_DIM_V ? src[3] : 0.0f);
    }
#if HAS_SINKS
    const float total = sum + exp(sink - base);
#else
    const float total = sum;
#endif
    /* A NaN (or +inf) LSE makes total NaN: pass it on rather than report an empty row. */
    const float inv = total > 0.0f ? 1.0f / total : isnan(total) ? NAN : 0.0f;
    flashcl_st4(O + VIEW_BASE(o, b, h) + (hd.q0 + i) * o_sr, c4, acc * inv, HEAD_DIM_V);
    if (c4 == 0 && write_lse)
        LSE[lse_off + flashcl_row_index(hd, b, h, heads_q, seqlen_q, i)] =
            total > 0.0f ? base + log(total) : flashcl_lse_empty(total);
}
