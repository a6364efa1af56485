/* The variant options of `attention` and `bench`; see variant_options.h. */
#include "variant_options.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "tool_errors.h"

void variant_defaults(variant_options *v) {
    memset(v, 0, sizeof *v);
    v->block_sparsity = -1.0f;
}

/* ------------------------------------------------------------- values */

/* A decimal integer >= -1 ("-1" = unbounded) that fits an int, ending at *end. */
static bool parse_bound(const char *text, const char **end, int *out) {
    bool negative = text[0] == '-';
    const char *p = negative ? text + 1 : text;
    if (*p < '0' || *p > '9') return false;
    long value = 0;
    for (; *p >= '0' && *p <= '9'; ++p) {
        value = value * 10 + (*p - '0');
        if (value > 1000000000L) return false;
    }
    if (negative && value != 1) return false;
    *out = negative ? -1 : (int)value;
    *end = p;
    return true;
}

/* "L,R", each an integer from -1 to 1e9 (a window past every key is no bound). */
static int parse_window(option_cursor *c, variant_options *v) {
    const char *text, *p;
    if (!options_value(c, &text)) return -1;
    if (!parse_bound(text, &p, &v->window_left) || *p != ',' || !parse_bound(p + 1, &p, &v->window_right) ||
        *p != '\0') {
        tool_usage_error("--window: expected LEFT,RIGHT, integers from -1 (unbounded) to 1000000000, got '%s'", text);
        return -1;
    }
    v->window = true;
    return 1;
}

/* "B" or "BQ,BK", each from 1 to 2^31 - 1. */
static int parse_block_size(option_cursor *c, variant_options *v) {
    const char *text;
    if (!options_value(c, &text)) return -1;
    char first[32];
    const char *comma = strchr(text, ',');
    size_t len = comma ? (size_t)(comma - text) : strlen(text);
    bool ok = len > 0 && len < sizeof first;
    if (ok) {
        memcpy(first, text, len);
        first[len] = '\0';
        ok = parse_size_text(first, &v->block_q);
    }
    if (ok) ok = comma ? parse_size_text(comma + 1, &v->block_k) : (v->block_k = v->block_q, true);
    if (!ok || v->block_q < 1 || v->block_k < 1 || v->block_q > 0x7fffffff || v->block_k > 0x7fffffff) {
        tool_usage_error("--block-size: expected BQ,BK (or B for both), positive integers, got '%s'", text);
        return -1;
    }
    v->block_size = true;
    return 1;
}

static bool parse_u64(const char *text, uint64_t *out) {
    if (text[0] < '0' || text[0] > '9') return false;
    char *end = NULL;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno == ERANGE || *end != '\0') return false;
    *out = (uint64_t)value;
    return true;
}

/* "P", "P,SEED" or "P,SEED,OFFSET": 0 <= P < 1, SEED and OFFSET unsigned 64-bit (default 0). */
static int parse_dropout(option_cursor *c, variant_options *v) {
    const char *text;
    if (!options_value(c, &text)) return -1;
    char buf[96];
    bool ok = strlen(text) < sizeof buf;
    char *fields[3] = {NULL, NULL, NULL};
    size_t n = 0;
    if (ok) {
        strcpy(buf, text);
        /* Up to three comma-separated fields; a fourth is an error. */
        for (char *p = buf; p != NULL && ok; ++n) {
            ok = n < 3;
            if (!ok) break;
            fields[n] = p;
            char *comma = strchr(p, ',');
            if (comma) *comma = '\0';
            p = comma ? comma + 1 : NULL;
        }
    }
    v->dropout_seed = 0;
    v->dropout_offset = 0;
    if (ok) {
        char *end = NULL;
        errno = 0;
        float p = strtof(fields[0], &end);
        ok = fields[0][0] >= '0' && fields[0][0] <= '9' && *end == '\0' && errno != ERANGE && p >= 0.0f && p < 1.0f;
        v->dropout_p = p;
    }
    if (ok && n > 1) ok = parse_u64(fields[1], &v->dropout_seed);
    if (ok && n > 2) ok = parse_u64(fields[2], &v->dropout_offset);
    if (!ok) {
        tool_usage_error("--dropout: expected P[,SEED[,OFFSET]] with 0 <= P < 1 and unsigned integers, got '%s'", text);
        return -1;
    }
    v->dropout = true;
    return 1;
}

static int parse_block_sparse(option_cursor *c, variant_options *v) {
    if (!options_float(c, 0.0f, &v->block_sparsity)) return -1;
    if (v->block_sparsity >= 1.0f) {
        tool_usage_error("--block-sparse: expected the fraction of blocks skipped, in [0, 1), got %g",
                         (double)v->block_sparsity);
        return -1;
    }
    return 1;
}

int variant_parse_option(option_cursor *c, variant_options *v) {
    /* The options whose value is a file, or a word that makes the data instead. */
    const struct {
        const char *name;
        const char **value;
        const char *expected;
    } sources[] = {{"--alibi", &v->alibi, "SLOPES.npy or '" VARIANT_STANDARD_SLOPES "'"},
                   {"--sinks", &v->sinks, "SINKS.npy or '" VARIANT_RANDOM "'"},
                   {"--bias", &v->bias, "BIAS.npy or '" VARIANT_RANDOM "'"},
                   {"--mask", &v->mask, "MASK.npy or '" VARIANT_RANDOM "'"},
                   {"--block-mask", &v->block_mask, "BM.npy"},
                   {"--cu-seqlens-q", &v->cu_q, "CU.npy"},
                   {"--cu-seqlens-k", &v->cu_k, "CU.npy"}};
    for (size_t i = 0; i < sizeof sources / sizeof sources[0]; ++i)
        if (options_is(c, sources[i].name))
            return options_value_expecting(c, sources[i].expected, sources[i].value) ? 1 : -1;
    if (options_is(c, "--dtype")) return options_dtype(c, &v->dtype) ? 1 : -1;
    if (options_is(c, "--allow-tf32")) {
        v->allow_tf32 = true;
        return 1;
    }
    if (options_is(c, "--window")) return parse_window(c, v);
    if (options_is(c, "--softcap")) {
        if (!options_float(c, 0.0f, &v->softcap)) return -1;
        /* The library's range (src/variants.c): past it the call would fail (exit 1) on an option. */
        if (v->softcap > 1e37f) {
            tool_usage_error("--softcap: expected a number from 0 to 1e37 (0 = off), got %g", (double)v->softcap);
            return -1;
        }
        return 1;
    }
    if (options_is(c, "--dropout")) return parse_dropout(c, v);
    if (options_is(c, "--block-size")) return parse_block_size(c, v);
    if (options_is(c, "--block-sparse")) return parse_block_sparse(c, v);
    if (options_is(c, "--varlen")) return options_size(c, 1, (size_t)1 << 20, &v->varlen_seqs) ? 1 : -1;
    return 0;
}

/* ------------------------------------------------------------- rules */

int variant_check_standard_path(const variant_options *v) {
    if (!variant_any(v)) return 0;
    char used[256];
    variant_describe(v, used, sizeof used);
    return tool_usage_error("--path standard: the standard path supports no variant (this call uses: %s)", used);
}

int variant_check(const variant_options *v) {
    if (v->dsinks && !v->sinks) return tool_usage_error("--dsinks: needs --sinks (the gradient of which sinks?)");
    if (v->allow_tf32 && v->dtype != FLASHCL_DTYPE_DEFAULT && v->dtype != FLASHCL_DTYPE_F32)
        return tool_usage_error("--allow-tf32: applies to float32 storage only (--dtype f32)");
    if (v->block_mask && v->block_sparsity >= 0.0f)
        return tool_usage_error("--block-sparse: makes a block mask, so it cannot come with --block-mask");
    if (v->block_mask && !v->block_size) return tool_usage_error("--block-mask: needs --block-size BQ,BK");
    if (v->block_sparsity >= 0.0f && !v->block_size)
        return tool_usage_error("--block-sparse: needs --block-size B (or BQ,BK)");
    if (v->block_size && !v->block_mask && v->block_sparsity < 0.0f)
        return tool_usage_error("--block-size: only applies with --block-mask or --block-sparse");
    if ((v->cu_q != NULL) != (v->cu_k != NULL))
        return tool_usage_error("%s: --cu-seqlens-q and --cu-seqlens-k go together",
                                v->cu_q ? "--cu-seqlens-q" : "--cu-seqlens-k");
    if (v->varlen_seqs && v->cu_q)
        return tool_usage_error("--varlen: makes the sequences, so it cannot come with --cu-seqlens-q/k");
    return 0;
}

int variant_check_cache_call(const variant_options *v) {
    const struct {
        const char *name;
        bool given;
        const char *why;
    } refused[] = {{"--dropout", v->dropout && v->dropout_p > 0.0f, "the KV-cache call has no dropout (inference)"},
                   {"--bias", v->bias != NULL, "the KV-cache call takes no bias"},
                   {"--mask", v->mask != NULL, "the KV-cache call takes no boolean mask"},
                   {"--block-mask/--block-sparse", v->block_mask != NULL || v->block_sparsity >= 0.0f,
                    "the KV-cache call takes no block mask"},
                   {"--cu-seqlens-q/--cu-seqlens-k/--varlen", v->cu_q != NULL || v->cu_k != NULL || v->varlen_seqs > 0,
                    "the KV-cache call takes per-sequence lengths from --cache-seqlens"},
                   {"--dsinks", v->dsinks != NULL, "the KV-cache call has no backward"}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; ++i)
        if (refused[i].given) return tool_usage_error("%s: %s", refused[i].name, refused[i].why);
    return 0;
}

bool variant_any(const variant_options *v) {
    return (v->dtype != FLASHCL_DTYPE_DEFAULT && v->dtype != FLASHCL_DTYPE_F32) || v->window || v->softcap > 0.0f ||
           v->dropout_p > 0.0f || v->alibi || v->sinks || v->bias || v->mask || v->block_mask ||
           v->block_sparsity >= 0.0f || variant_is_varlen(v) || v->head_dim_v != 0 || v->allow_tf32;
}

bool variant_is_varlen(const variant_options *v) { return v->cu_q != NULL || v->varlen_seqs != 0; }

/* ------------------------------------------------------------- text */

/* Appends one comma-separated item to buf (truncating at size). */
static void append_item(char *buf, size_t size, const char *fmt, ...) TOOL_PRINTF(3, 4);
static void append_item(char *buf, size_t size, const char *fmt, ...) {
    size_t used = strlen(buf);
    if (used > 0 && used + 1 < size) {
        buf[used++] = ',';
        buf[used] = '\0';
    }
    if (used + 1 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
}

/* Made data reads as the feature alone ("alibi"), data from a file as "alibi(file)". */
static const char *source_suffix(const char *value) {
    return strcmp(value, VARIANT_STANDARD_SLOPES) == 0 || strcmp(value, VARIANT_RANDOM) == 0 ? "" : "(file)";
}

void variant_describe(const variant_options *v, char *buf, size_t size) {
    if (size == 0) return;
    buf[0] = '\0';
    if (v->dtype == FLASHCL_DTYPE_F16 || v->dtype == FLASHCL_DTYPE_BF16)
        append_item(buf, size, "%s", v->dtype == FLASHCL_DTYPE_F16 ? "f16" : "bf16");
    if (v->allow_tf32) append_item(buf, size, "tf32");
    if (v->head_dim_v) append_item(buf, size, "head_dim_v=%zu", v->head_dim_v);
    if (v->window) append_item(buf, size, "window(%d,%d)", v->window_left, v->window_right);
    if (v->softcap > 0.0f) append_item(buf, size, "softcap=%g", (double)v->softcap);
    if (v->alibi) append_item(buf, size, "alibi%s", source_suffix(v->alibi));
    if (v->sinks) append_item(buf, size, "sinks%s", source_suffix(v->sinks));
    if (v->dropout_p > 0.0f) append_item(buf, size, "dropout=%g", (double)v->dropout_p);
    if (v->bias) append_item(buf, size, "bias%s", source_suffix(v->bias));
    if (v->mask) append_item(buf, size, "mask%s", source_suffix(v->mask));
    if (v->block_mask) append_item(buf, size, "block-mask(file)");
    if (v->block_sparsity >= 0.0f && v->block_q == v->block_k)
        append_item(buf, size, "block-sparse=%g/%zu", (double)v->block_sparsity, v->block_q);
    else if (v->block_sparsity >= 0.0f)
        append_item(buf, size, "block-sparse=%g/%zux%zu", (double)v->block_sparsity, v->block_q, v->block_k);
    if (v->varlen_seqs) append_item(buf, size, "varlen=%zu", v->varlen_seqs);
    if (v->cu_q) append_item(buf, size, "varlen(file)");
}

void variant_help(FILE *out) {
    fputs("Variants (all combine, forward and backward; the standard path supports none).\n"
          "A data option takes a .npy file or a word that makes the data: 'random' is\n"
          "uniform from a fixed seed, so every run sees the same.\n"
          "  --dtype f32|f16|bf16   storage type on the device; accumulation is float32\n"
          "  --allow-tf32           float32: forward and backward may run on TF32 tensor cores\n"
          "                         (NVIDIA sm_80+; 10-bit mantissa products)\n"
          "  --window L,R           sliding window: key j is visible to query i iff\n"
          "                         i+sk-sq-L <= j <= i+sk-sq+R; -1 = unbounded side\n"
          "  --softcap C            scores become C*tanh(s/C), C up to 1e37; 0 = off\n"
          "  --dropout P[,SEED[,OFFSET]]  dropout on the probabilities (Philox4x32-10\n"
          "                         keyed on seed, offset (both default 0) and the\n"
          "                         absolute position)\n"
          "  --alibi SLOPES         float32 [hq] or [b, hq] .npy, or 'standard' (the ALiBi\n"
          "                         paper's: 2^(-8k/n), k = 1..n, n the largest power of\n"
          "                         two <= hq; then 2^(-4(2e+1)/n) for the heads past n):\n"
          "                         adds -slope*|i+sk-sq-j|\n"
          "  --sinks SINKS          float32 [hq] .npy, or 'random': one logit per head in\n"
          "                         each row's softmax denominator (O and LSE include it)\n"
          "  --bias BIAS            float32 [b|1, hq|1, sq, sk] or [sq, sk] .npy, or\n"
          "                         'random' ([b, hq, sq, sk] in [-1, 1)): added to the\n"
          "                         scores\n"
          "  --mask MASK            bool, uint8 or float32 [b|1, hq|1, sq, sk] or [sq, sk]\n"
          "                         .npy (nonzero = attend), or 'random' (9 keys in 10\n"
          "                         attend)\n"
          "  --block-mask BM.npy    bool, uint8 or float32 [b|1, hq|1, ceil(sq/BQ),\n"
          "                         ceil(sk/BK)] (or the last two alone): 0 = the whole\n"
          "                         block is skipped\n"
          "  --block-sparse F       instead of --block-mask: a random block mask with a\n"
          "                         fraction F of its blocks skipped\n"
          "  --block-size BQ,BK     the block mask's blocks (B alone: B x B)\n"
          "  --cu-seqlens-q CU.npy  int32 [b+1] cumulative sequence starts (varlen),\n"
          "  --cu-seqlens-k CU.npy  starting at 0 and ending at the total rows\n"
          "  --varlen N             instead of --cu-seqlens-q/k: the rows cut into N\n"
          "                         sequences, alternately 25% longer and shorter\n"
          "With varlen the rows are packed [total, h, d], LSE is [hq, total_q], and\n"
          "bias and masks use the longest sequences' lengths for sq and sk.\n",
          out);
}
