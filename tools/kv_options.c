/* The KV-cache options of `attention` and `bench`; see kv_options.h. */
#include "kv_options.h"

#include <string.h>

#include "tool_errors.h"

/* Generous: the library caps the splits it uses (at most one per key tile). */
#define KV_MAX_SPLITS 4096
#define KV_MAX_PAGE_SIZE ((size_t)1 << 24)

void kv_defaults(kv_options *kv) { memset(kv, 0, sizeof *kv); }

static const char *const cache_dtype_names[] = {"same", "fp8_e4m3", "fp8_e5m2"};
static const flashcl_cache_dtype cache_dtype_values[] = {FLASHCL_CACHE_DTYPE_SAME, FLASHCL_CACHE_DTYPE_FP8_E4M3,
                                                         FLASHCL_CACHE_DTYPE_FP8_E5M2};

const char *kv_cache_dtype_name(flashcl_cache_dtype dtype) {
    for (size_t i = 0; i < sizeof cache_dtype_values / sizeof cache_dtype_values[0]; ++i)
        if (cache_dtype_values[i] == dtype) return cache_dtype_names[i];
    return "unknown";
}

/* attention's cache files, and where each goes. */
typedef struct kv_file_option {
    const char *name, *expected;
    const char **value;
} kv_file_option;

static int parse_attention_file(option_cursor *c, kv_options *kv) {
    const kv_file_option files[] = {
        {"--k-cache", "KC.npy", &kv->k_cache},
        {"--v-cache", "VC.npy", &kv->v_cache},
        {"--block-table", "BT.npy", &kv->block_table},
        {"--cache-seqlens", "LENS.npy", &kv->cache_seqlens},
        {"--cache-leftpad", "PAD.npy", &kv->cache_leftpad},
        {"--cache-batch-idx", "IDX.npy", &kv->cache_batch_idx},
        {"--k-new", "KN.npy", &kv->k_new},
        {"--v-new", "VN.npy", &kv->v_new},
        {"--rotary-cos", "COS.npy", &kv->rotary_cos},
        {"--rotary-sin", "SIN.npy", &kv->rotary_sin},
        {"--k-scale", "a number or SCALE.npy", &kv->k_scale},
        {"--v-scale", "a number or SCALE.npy", &kv->v_scale},
        {"--k-cache-out", "OUT.npy", &kv->k_cache_out},
        {"--v-cache-out", "OUT.npy", &kv->v_cache_out},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; ++i)
        if (options_is(c, files[i].name)) return options_value_expecting(c, files[i].expected, files[i].value) ? 1 : -1;
    if (options_is(c, "--rotary-interleaved")) {
        kv->rotary_interleaved = true;
        return options_flag(c) ? 1 : -1;
    }
    return 0;
}

int kv_parse_option(option_cursor *c, kv_command command, kv_options *kv) {
    if (options_is(c, "--cache-dtype")) {
        size_t index;
        if (!options_choice(c, cache_dtype_names, sizeof cache_dtype_names / sizeof cache_dtype_names[0], &index))
            return -1;
        kv->cache_dtype = cache_dtype_values[index];
        kv->cache_dtype_given = true;
        return 1;
    }
    /* 0 is the library's automatic count (desc.num_splits = 0, FlashAttention's num_splits=0), the default here
       too: the JSON rows report it as 0, and a command taking that value back gets the same call. */
    if (options_is(c, "--num-splits")) return options_size(c, 0, KV_MAX_SPLITS, &kv->num_splits) ? 1 : -1;
    if (command == KV_FOR_ATTENTION) return parse_attention_file(c, kv);
    if (options_is(c, "--page-size")) return options_size(c, 1, KV_MAX_PAGE_SIZE, &kv->page_size) ? 1 : -1;
    if (options_is(c, "--kv-cache")) {
        kv->kv_cache = true;
        return options_flag(c) ? 1 : -1;
    }
    return 0;
}

bool kv_bench_wants_cache(const kv_options *kv) {
    return kv->page_size != 0 || kv->kv_cache || kv->cache_dtype != FLASHCL_CACHE_DTYPE_SAME;
}

bool kv_attention_wants_cache(const kv_options *kv) { return kv->k_cache != NULL; }

/* Options that only mean something with a cache call: the first one given, or NULL. */
static const char *first_cache_only_option(const kv_options *kv) {
    const struct {
        const char *name;
        bool given;
    } only[] = {{"--v-cache", kv->v_cache != NULL},
                {"--block-table", kv->block_table != NULL},
                {"--cache-seqlens", kv->cache_seqlens != NULL},
                {"--cache-leftpad", kv->cache_leftpad != NULL},
                {"--cache-batch-idx", kv->cache_batch_idx != NULL},
                {"--k-new", kv->k_new != NULL},
                {"--v-new", kv->v_new != NULL},
                {"--rotary-cos", kv->rotary_cos != NULL},
                {"--rotary-sin", kv->rotary_sin != NULL},
                {"--rotary-interleaved", kv->rotary_interleaved},
                {"--k-scale", kv->k_scale != NULL},
                {"--v-scale", kv->v_scale != NULL},
                {"--k-cache-out", kv->k_cache_out != NULL},
                {"--v-cache-out", kv->v_cache_out != NULL},
                {"--cache-dtype", kv->cache_dtype_given}};
    for (size_t i = 0; i < sizeof only / sizeof only[0]; ++i)
        if (only[i].given) return only[i].name;
    return NULL;
}

/* Pairs that go together: "A: needs B" for the first one given alone. */
static int check_pairs(const kv_options *kv) {
    const struct {
        const char *a, *b;
        bool has_a, has_b;
    } pairs[] = {
        {"--k-new", "--v-new", kv->k_new != NULL, kv->v_new != NULL},
        {"--v-new", "--k-new", kv->v_new != NULL, kv->k_new != NULL},
        /* (a full cache has no row to append into: the library refused it as cache->cache_seqlens NULL, exit 1) */
        {"--k-new", "--cache-seqlens (where the new rows go)", kv->k_new != NULL, kv->cache_seqlens != NULL},
        {"--rotary-cos", "--rotary-sin", kv->rotary_cos != NULL, kv->rotary_sin != NULL},
        {"--rotary-sin", "--rotary-cos", kv->rotary_sin != NULL, kv->rotary_cos != NULL},
        {"--rotary-interleaved", "--rotary-cos and --rotary-sin", kv->rotary_interleaved, kv->rotary_cos != NULL},
        {"--k-cache", "--v-cache", kv->k_cache != NULL, kv->v_cache != NULL}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; ++i)
        if (pairs[i].has_a && !pairs[i].has_b) return tool_usage_error("%s: needs %s", pairs[i].a, pairs[i].b);
    return 0;
}

int kv_check(const kv_options *kv, kv_command command) {
    const bool fp8 = kv->cache_dtype != FLASHCL_CACHE_DTYPE_SAME;
    if (command == KV_FOR_BENCH) {
        if (kv->kv_cache && kv->page_size)
            return tool_usage_error("--kv-cache: a contiguous cache; --page-size already asks for a paged one");
        return 0;
    }
    if (!kv_attention_wants_cache(kv)) {
        const char *stray = first_cache_only_option(kv);
        if (stray != NULL) return tool_usage_error("%s: only applies with --k-cache and --v-cache", stray);
        return 0;
    }
    int rc = check_pairs(kv);
    if (rc != 0) return rc;
    if ((kv->k_scale || kv->v_scale) && !fp8)
        return tool_usage_error("%s: only applies to an fp8 cache (--cache-dtype fp8_e4m3 or fp8_e5m2)",
                                kv->k_scale ? "--k-scale" : "--v-scale");
    if (kv->k_cache_out && kv->v_cache_out && strcmp(kv->k_cache_out, kv->v_cache_out) == 0)
        return tool_usage_error("--v-cache-out: same file as --k-cache-out ('%s')", kv->v_cache_out);
    return 0;
}

void kv_help(FILE *out, kv_command command) {
    fputs("KV cache (flashcl_forward_kvcache, the decode call of an inference loop):\n"
          "  --cache-dtype T        the cache's storage: same (the --dtype, default),\n"
          "                         fp8_e4m3 or fp8_e5m2 (dequantised where loaded)\n"
          "  --num-splits N         split-KV: N work-groups share each sequence's keys\n"
          "                         (desc.num_splits; 0, the default: enough to fill the\n"
          "                         device);\n"
          "                         also for the plain forward of a short query\n",
          out);
    if (command == KV_FOR_BENCH) {
        fputs("  --page-size P          a paged cache: pools of P-row pages, dealt out to the\n"
              "                         sequences in a shuffled order (as an allocator would)\n"
              "  --kv-cache             a contiguous cache [b, seqlen_k, hkv, d] through the\n"
              "                         cache call (implied by an fp8 --cache-dtype)\n",
              out);
        return;
    }
    fputs("  --k-cache KC.npy       the cache: contiguous [b_cache, capacity, hkv, d], or\n"
          "  --v-cache VC.npy       page pools [num_pages, page_size, hkv, d] with\n"
          "                         --block-table (V: d_v); float32 values, stored as\n"
          "                         --dtype or --cache-dtype\n"
          "  --block-table BT.npy   int32 [b, max_pages]: the pages of each sequence\n"
          "  --cache-seqlens L.npy  int32 [b]: rows in the cache before the call\n"
          "                         (default: full; --k-new needs it)\n"
          "  --cache-leftpad P.npy  int32 [b]: each sequence's keys start at this row\n"
          "  --cache-batch-idx I.npy  int32 [b]: the cache sequence of each batch entry\n"
          "                         (contiguous caches)\n"
          "  --k-new KN.npy         [b, s_new, hkv, d] and [b, s_new, hkv, d_v]: rows\n"
          "  --v-new VN.npy         appended at cache_seqlens (in place, as FlashAttention)\n"
          "  --rotary-cos C.npy     float32 [seqlen_ro, rotary_dim / 2]: rotary embedding\n"
          "  --rotary-sin S.npy     of k_new and q (GPT-NeoX halves by default)\n"
          "  --rotary-interleaved   GPT-J pairs instead\n"
          "  --k-scale S            fp8: the cache holds x / scale; a number, or float32\n"
          "  --v-scale S            .npy [1] or [hkv] (one per kv head); default 1\n"
          "  --k-cache-out OUT.npy  the caches after the call (with the appended rows),\n"
          "  --v-cache-out OUT.npy  shaped like --k-cache / --v-cache, float32 values\n",
          out);
}
