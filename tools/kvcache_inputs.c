/* The KV-cache call's inputs of `flashcl attention`; see kvcache_inputs.h. */
#include "kvcache_inputs.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_inputs.h"
#include "tool_errors.h"

static int load_typed(const char *option, const char *path, unsigned accepted, npy_array *out) {
    char err[512];
    if (npy_read_file_typed(path, accepted, out, err, sizeof err) != 0)
        return tool_usage_error("%s: %s: %s", option, path, err);
    return 0;
}

/* "expected rank N LAYOUT, got shape S" when a's rank is not `rank`. */
static int check_rank(const char *option, const npy_array *a, size_t rank, const char *layout) {
    if (a->ndim == rank) return 0;
    char shape[128];
    npy_format_shape(a->shape, a->ndim, shape, sizeof shape);
    return tool_usage_error("%s: expected %zu dimensions %s, got shape %s", option, rank, layout, shape);
}

/* Dimension `axis` of a (named by option) must be `want`, which `what` explains. */
static int check_dim(const char *option, const npy_array *a, size_t axis, size_t want, const char *what) {
    if (a->shape[axis] == want) return 0;
    char shape[128];
    npy_format_shape(a->shape, a->ndim, shape, sizeof shape);
    return tool_usage_error("%s: shape %s: dimension %zu is %zu, but %s is %zu", option, shape, axis, a->shape[axis],
                            what, want);
}

/* The pools: [slots, rows, hkv, d] for K, the same but d_v for V; d is Q's. */
static int check_pools(kvcache_inputs *in) {
    int rc;
    const char *layout = in->paged ? "[num_pages, page_size, hkv, d]" : "[b_cache, capacity, hkv, d]";
    if ((rc = check_rank("--k-cache", &in->k_cache, 4, layout)) != 0 ||
        (rc = check_rank("--v-cache", &in->v_cache, 4, layout)) != 0)
        return rc;
    for (size_t axis = 0; axis < 3; ++axis)
        if ((rc = check_dim("--v-cache", &in->v_cache, axis, in->k_cache.shape[axis], "--k-cache's")) != 0) return rc;
    if ((rc = check_dim("--k-cache", &in->k_cache, 3, in->q.shape[3], "--q's head dim")) != 0) return rc;
    for (size_t axis = 0; axis < 4; ++axis)
        if (in->k_cache.shape[axis] == 0 || in->v_cache.shape[axis] == 0)
            return tool_usage_error("--%s-cache: has a zero dimension", in->k_cache.shape[axis] == 0 ? "k" : "v");
    in->slots = in->k_cache.shape[0];
    in->rows = in->k_cache.shape[1];
    in->heads_kv = in->k_cache.shape[2];
    in->head_dim_v = in->v_cache.shape[3];
    if (in->head_dim_v > FLASHCL_MAX_HEAD_DIM)
        return tool_usage_error("--v-cache: head dim %zu is larger than the maximum %d", in->head_dim_v,
                                FLASHCL_MAX_HEAD_DIM);
    if (in->heads_q % in->heads_kv != 0)
        return tool_usage_error("--k-cache: the %zu query heads are not a multiple of the %zu kv heads", in->heads_q,
                                in->heads_kv);
    return 0;
}

/* An int32 [b] table, when given. */
static int load_per_sequence(const char *option, const char *path, size_t batch, npy_array *out) {
    if (path == NULL) return 0;
    int rc = load_typed(option, path, NPY_INT32, out);
    if (rc == 0) rc = check_rank(option, out, 1, "[b]");
    if (rc == 0) rc = check_dim(option, out, 0, batch, "--q's batch");
    return rc;
}

static int load_tables(const kv_options *kv, kvcache_inputs *in) {
    int rc = 0;
    if (kv->block_table && kv->cache_batch_idx)
        return tool_usage_error("--cache-batch-idx does not combine with --block-table (a paged cache picks its "
                                "pages through the block table)");
    if (kv->block_table) {
        if ((rc = load_typed("--block-table", kv->block_table, NPY_INT32, &in->block_table)) != 0 ||
            (rc = check_rank("--block-table", &in->block_table, 2, "[b, max_pages]")) != 0 ||
            (rc = check_dim("--block-table", &in->block_table, 0, in->batch, "--q's batch")) != 0)
            return rc;
        if (in->block_table.shape[1] == 0) return tool_usage_error("--block-table: max_pages is 0");
        in->max_pages = in->block_table.shape[1];
    }
    if ((rc = load_per_sequence("--cache-seqlens", kv->cache_seqlens, in->batch, &in->seqlens)) != 0 ||
        (rc = load_per_sequence("--cache-leftpad", kv->cache_leftpad, in->batch, &in->leftpad)) != 0 ||
        (rc = load_per_sequence("--cache-batch-idx", kv->cache_batch_idx, in->batch, &in->batch_idx)) != 0)
        return rc;
    /* Without --cache-batch-idx entry b reads cache sequence b: there must be one for each. */
    if (!in->paged && kv->cache_batch_idx == NULL && in->slots < in->batch)
        return tool_usage_error("--k-cache: %zu cache sequences for a batch of %zu (--cache-batch-idx picks them)",
                                in->slots, in->batch);
    return 0;
}

/* --k-new [b, s_new, hkv, d] and --v-new [b, s_new, hkv, d_v]. */
static int load_new_rows(const kv_options *kv, kvcache_inputs *in) {
    if (kv->k_new == NULL) return 0;
    int rc;
    if ((rc = attention_load("--k-new", kv->k_new, &in->k_new)) != 0 ||
        (rc = attention_load("--v-new", kv->v_new, &in->v_new)) != 0 ||
        (rc = check_rank("--k-new", &in->k_new, 4, "[b, s_new, hkv, d]")) != 0 ||
        (rc = check_rank("--v-new", &in->v_new, 4, "[b, s_new, hkv, d_v]")) != 0 ||
        (rc = check_dim("--k-new", &in->k_new, 0, in->batch, "--q's batch")) != 0 ||
        (rc = check_dim("--k-new", &in->k_new, 2, in->heads_kv, "--k-cache's kv heads")) != 0 ||
        (rc = check_dim("--k-new", &in->k_new, 3, in->head_dim, "--q's head dim")) != 0 ||
        (rc = check_dim("--v-new", &in->v_new, 0, in->batch, "--q's batch")) != 0 ||
        (rc = check_dim("--v-new", &in->v_new, 1, in->k_new.shape[1], "--k-new's s_new")) != 0 ||
        (rc = check_dim("--v-new", &in->v_new, 2, in->heads_kv, "--k-cache's kv heads")) != 0 ||
        (rc = check_dim("--v-new", &in->v_new, 3, in->head_dim_v, "--v-cache's head dim")) != 0)
        return rc;
    in->seqlen_new = in->k_new.shape[1];
    return 0;
}

/* --rotary-cos and --rotary-sin: float32 [seqlen_ro, rotary_dim / 2], the same shape. */
static int load_rotary(const kv_options *kv, kvcache_inputs *in) {
    if (kv->rotary_cos == NULL) return 0;
    int rc;
    if ((rc = attention_load("--rotary-cos", kv->rotary_cos, &in->cos)) != 0 ||
        (rc = attention_load("--rotary-sin", kv->rotary_sin, &in->sin)) != 0 ||
        (rc = check_rank("--rotary-cos", &in->cos, 2, "[seqlen_ro, rotary_dim / 2]")) != 0 ||
        (rc = check_rank("--rotary-sin", &in->sin, 2, "[seqlen_ro, rotary_dim / 2]")) != 0 ||
        (rc = check_dim("--rotary-sin", &in->sin, 0, in->cos.shape[0], "--rotary-cos's")) != 0 ||
        (rc = check_dim("--rotary-sin", &in->sin, 1, in->cos.shape[1], "--rotary-cos's")) != 0)
        return rc;
    if (in->cos.shape[0] == 0 || in->cos.shape[1] == 0) return tool_usage_error("--rotary-cos: has a zero dimension");
    in->seqlen_ro = in->cos.shape[0];
    in->rotary_dim = 2 * in->cos.shape[1];
    return 0;
}

/* A scale: a number, or float32 .npy [1] or [hkv]; count is 1 or hkv. Finite and > 0. */
static int load_scale(const char *option, const char *value, size_t heads_kv, float **out, size_t *count) {
    char *end = NULL;
    errno = 0;
    float number = strtof(value, &end);
    bool is_number = value[0] != '\0' && *end == '\0' && errno != ERANGE;
    npy_array file;
    memset(&file, 0, sizeof file);
    if (!is_number) {
        int rc = attention_load(option, value, &file);
        if (rc != 0) return rc;
        if (file.ndim != 1 || (file.shape[0] != 1 && file.shape[0] != heads_kv)) {
            char shape[128];
            npy_format_shape(file.shape, file.ndim, shape, sizeof shape);
            npy_array_free(&file);
            return tool_usage_error("%s: shape %s is neither [1] (per tensor) nor [%zu] (per kv head)", option, shape,
                                    heads_kv);
        }
    }
    *count = is_number ? 1 : file.shape[0];
    *out = malloc(*count * sizeof(float));
    if (*out == NULL) {
        npy_array_free(&file);
        return tool_failure("out of host memory for %s", option);
    }
    for (size_t i = 0; i < *count; ++i) (*out)[i] = is_number ? number : file.data[i];
    npy_array_free(&file);
    for (size_t i = 0; i < *count; ++i)
        if (!isfinite((*out)[i]) || (*out)[i] <= 0.0f)
            return tool_usage_error("%s: a scale must be a finite number > 0, got %g", option, (double)(*out)[i]);
    return 0;
}

/* k and v scales with one layout: a per-tensor one is repeated when the other is per head. */
static int load_scales(const kv_options *kv, kvcache_inputs *in) {
    if (kv->cache_dtype == FLASHCL_CACHE_DTYPE_SAME) return 0;
    size_t nk = 1, nv = 1;
    int rc = 0;
    if (kv->k_scale) rc = load_scale("--k-scale", kv->k_scale, in->heads_kv, &in->k_scale, &nk);
    if (rc == 0 && kv->v_scale) rc = load_scale("--v-scale", kv->v_scale, in->heads_kv, &in->v_scale, &nv);
    if (rc != 0) return rc;
    in->scale_count = nk > nv ? nk : nv;
    float **both[2] = {&in->k_scale, &in->v_scale};
    const size_t had[2] = {nk, nv};
    for (int i = 0; i < 2; ++i) {
        float first = *both[i] ? (*both[i])[0] : 1.0f;
        if (*both[i] != NULL && had[i] == in->scale_count) continue;
        float *scales = malloc(in->scale_count * sizeof(float));
        if (scales == NULL) return tool_failure("out of host memory for the cache scales");
        for (size_t h = 0; h < in->scale_count; ++h) scales[h] = first;
        free(*both[i]);
        *both[i] = scales;
    }
    return 0;
}

int kvcache_inputs_load(const char *q_path, const kv_options *kv, kvcache_inputs *in) {
    memset(in, 0, sizeof *in);
    int rc = attention_load("--q", q_path, &in->q);
    if (rc == 0) rc = check_rank("--q", &in->q, 4, "[b, sq, hq, d]");
    if (rc == 0) {
        in->batch = in->q.shape[0];
        in->seqlen_q = in->q.shape[1];
        in->heads_q = in->q.shape[2];
        in->head_dim = in->q.shape[3];
        if (in->batch == 0 || in->seqlen_q == 0 || in->heads_q == 0 || in->head_dim == 0)
            rc = tool_usage_error("--q: has a zero dimension");
        else if (in->head_dim > FLASHCL_MAX_HEAD_DIM)
            rc =
                tool_usage_error("--q: head dim %zu is larger than the maximum %d", in->head_dim, FLASHCL_MAX_HEAD_DIM);
    }
    in->paged = kv->block_table != NULL;
    if (rc == 0) rc = attention_load("--k-cache", kv->k_cache, &in->k_cache);
    if (rc == 0) rc = attention_load("--v-cache", kv->v_cache, &in->v_cache);
    if (rc == 0) rc = check_pools(in);
    if (rc == 0) rc = load_tables(kv, in);
    if (rc == 0) rc = load_new_rows(kv, in);
    if (rc == 0) rc = load_rotary(kv, in);
    if (rc == 0) rc = load_scales(kv, in);
    if (rc != 0) kvcache_inputs_free(in);
    return rc;
}

void kvcache_inputs_free(kvcache_inputs *in) {
    npy_array *all[] = {&in->q,         &in->k_cache, &in->v_cache, &in->block_table, &in->seqlens, &in->leftpad,
                        &in->batch_idx, &in->k_new,   &in->v_new,   &in->cos,         &in->sin};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) npy_array_free(all[i]);
    free(in->k_scale);
    free(in->v_scale);
    in->k_scale = in->v_scale = NULL;
}
