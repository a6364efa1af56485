/* Input loading and shape rules of `flashcl attention`; see attention_inputs.h. */
#include "attention_inputs.h"

#include <string.h>

#include "tool_errors.h"

int attention_load(const char *option, const char *path, npy_array *out)
{
    char err[512];
    if (npy_read_file(path, out, err, sizeof err) != 0)
        return tool_usage_error("%s: %s: %s", option, path, err);
    return 0;
}

/* Checks rank and non-zero sizes of one 4-D input. */
static int check_rank(const char *option, const npy_array *a, const char *layout)
{
    if (a->ndim != 4)
        return tool_usage_error("%s: expected 4 dimensions %s, got %zu", option, layout, a->ndim);
    for (size_t i = 0; i < 4; ++i) {
        if (a->shape[i] == 0) {
            char shape[128];
            npy_format_shape(a->shape, a->ndim, shape, sizeof shape);
            return tool_usage_error("%s: shape %s %s has a zero dimension", option, shape, layout);
        }
    }
    return 0;
}

int attention_check_same_shape(const char *option, const npy_array *a, const char *like_option,
                               const npy_array *like)
{
    if (a->ndim != like->ndim || memcmp(a->shape, like->shape, a->ndim * sizeof a->shape[0]) != 0) {
        char as[128], ls[128];
        npy_format_shape(a->shape, a->ndim, as, sizeof as);
        npy_format_shape(like->shape, like->ndim, ls, sizeof ls);
        return tool_usage_error("%s: shape %s does not match %s's shape %s", option, as,
                                like_option, ls);
    }
    return 0;
}

int attention_check_shapes(const npy_array *q, const npy_array *k, const npy_array *v,
                           flashcl_attention_desc *desc)
{
    int rc;
    if ((rc = check_rank("--q", q, "[b, sq, hq, d]")) != 0 ||
        (rc = check_rank("--k", k, "[b, sk, hkv, d]")) != 0 ||
        (rc = check_rank("--v", v, "[b, sk, hkv, d]")) != 0 ||
        (rc = attention_check_same_shape("--v", v, "--k", k)) != 0)
        return rc;
    if (k->shape[0] != q->shape[0])
        return tool_usage_error("--k: batch %zu does not match --q's batch %zu", k->shape[0],
                                q->shape[0]);
    if (k->shape[3] != q->shape[3])
        return tool_usage_error("--k: head dim %zu does not match --q's head dim %zu", k->shape[3],
                                q->shape[3]);
    if (q->shape[3] > FLASHCL_MAX_HEAD_DIM)
        return tool_usage_error("--q: head dim %zu is larger than the maximum %d", q->shape[3],
                                FLASHCL_MAX_HEAD_DIM);
    if (q->shape[2] % k->shape[2] != 0)
        return tool_usage_error("--k: the %zu query heads are not a multiple of the %zu kv heads",
                                q->shape[2], k->shape[2]);
    desc->batch = q->shape[0];
    desc->seqlen_q = q->shape[1];
    desc->heads_q = q->shape[2];
    desc->head_dim = q->shape[3];
    desc->seqlen_k = k->shape[1];
    desc->heads_kv = k->shape[2];
    return 0;
}
