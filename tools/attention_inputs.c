/* Input loading and shape rules of `flashcl attention`; see attention_inputs.h. */
#include "attention_inputs.h"

#include <string.h>

#include "tool_errors.h"

int attention_load(const char *option, const char *path, npy_array *out) {
    char err[512];
    if (npy_read_file(path, out, err, sizeof err) != 0) return tool_usage_error("%s: %s: %s", option, path, err);
    return 0;
}

/* Checks rank and non-zero sizes of one input. */
static int check_rank(const char *option, const npy_array *a, size_t rank, const char *layout) {
    if (a->ndim != rank)
        return tool_usage_error("%s: expected %zu dimensions %s, got %zu", option, rank, layout, a->ndim);
    for (size_t i = 0; i < rank; ++i) {
        if (a->shape[i] == 0) {
            char shape[128];
            npy_format_shape(a->shape, a->ndim, shape, sizeof shape);
            return tool_usage_error("%s: shape %s %s has a zero dimension", option, shape, layout);
        }
    }
    return 0;
}

int attention_check_same_shape(const char *option, const npy_array *a, const char *like_option, const npy_array *like) {
    if (a->ndim != like->ndim || memcmp(a->shape, like->shape, a->ndim * sizeof a->shape[0]) != 0) {
        char as[128], ls[128];
        npy_format_shape(a->shape, a->ndim, as, sizeof as);
        npy_format_shape(like->shape, like->ndim, ls, sizeof ls);
        return tool_usage_error("%s: shape %s does not match %s's shape %s", option, as, like_option, ls);
    }
    return 0;
}

int attention_check_shapes(const npy_array *q, const npy_array *k, const npy_array *v, int varlen,
                           flashcl_attention_desc *desc) {
    /* With varlen there is no batch dimension: index i of [b, s, h, d] is i - 1 of [total, h, d]. */
    const size_t rank = varlen ? 3 : 4, s = rank - 3, h = rank - 2, d = rank - 1;
    int rc;
    if ((rc = check_rank("--q", q, rank, varlen ? "[total_q, hq, d]" : "[b, sq, hq, d]")) != 0 ||
        (rc = check_rank("--k", k, rank, varlen ? "[total_k, hkv, d]" : "[b, sk, hkv, d]")) != 0 ||
        (rc = check_rank("--v", v, rank, varlen ? "[total_k, hkv, d_v]" : "[b, sk, hkv, d_v]")) != 0)
        return rc;
    /* V is K's shape except for its own head dim d_v. */
    if (memcmp(v->shape, k->shape, d * sizeof k->shape[0]) != 0) {
        char vs[128], ks[128];
        npy_format_shape(v->shape, v->ndim, vs, sizeof vs);
        npy_format_shape(k->shape, k->ndim, ks, sizeof ks);
        return tool_usage_error("--v: shape %s does not match --k's shape %s (only the last "
                                "dimension, d_v, may differ)",
                                vs, ks);
    }
    if (!varlen && k->shape[0] != q->shape[0])
        return tool_usage_error("--k: batch %zu does not match --q's batch %zu", k->shape[0], q->shape[0]);
    if (k->shape[d] != q->shape[d])
        return tool_usage_error("--k: head dim %zu does not match --q's head dim %zu", k->shape[d], q->shape[d]);
    if (q->shape[d] > FLASHCL_MAX_HEAD_DIM)
        return tool_usage_error("--q: head dim %zu is larger than the maximum %d", q->shape[d], FLASHCL_MAX_HEAD_DIM);
    if (v->shape[d] > FLASHCL_MAX_HEAD_DIM)
        return tool_usage_error("--v: head dim %zu is larger than the maximum %d", v->shape[d], FLASHCL_MAX_HEAD_DIM);
    if (q->shape[h] % k->shape[h] != 0)
        return tool_usage_error("--k: the %zu query heads are not a multiple of the %zu kv heads", q->shape[h],
                                k->shape[h]);
    desc->batch = varlen ? 1 : q->shape[0];
    desc->seqlen_q = q->shape[s];
    desc->heads_q = q->shape[h];
    desc->head_dim = q->shape[d];
    desc->seqlen_k = k->shape[s];
    desc->heads_kv = k->shape[h];
    desc->head_dim_v = v->shape[d];
    return 0;
}
