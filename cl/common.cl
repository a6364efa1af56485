/*
 * Helpers shared by every FlashCL kernel. The host prepends this file to each
 * kernel source, so the kernel files need no #include.
 */
#ifndef FLASHCL_COMMON_CL
#define FLASHCL_COMMON_CL

#define FLASHCL_NEG_INF (-INFINITY)

/* A tensor view: element offset plus strides for (batch, head, row). */
#define VIEW_ARGS(name) ulong name##_off, ulong name##_sb, ulong name##_sh, ulong name##_sr
#define VIEW_BASE(name, b, h) (name##_off + (ulong)(b) * name##_sb + (ulong)(h) * name##_sh)

/*
 * The exp2 base for a row whose running max is m: a fully masked row has
 * m = -inf, and exp2(-inf - -inf) would be NaN. Subtracting 0 instead gives
 * exp2(-inf) = 0 for every masked score, so the row stays all-zero.
 */
inline float flashcl_safe_base(float m) { return m == FLASHCL_NEG_INF ? 0.0f : m; }

/* Last key (inclusive) query row i may see under a bottom-right causal mask. */
inline long flashcl_causal_limit(long i, long seqlen_q, long seqlen_k) {
    return i + seqlen_k - seqlen_q;
}

#endif
