/* The variant options of `flashcl attention`; see attention_variants.h. */
#include "attention_variants.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tool_errors.h"

/* ------------------------------------------------------------- parsing */

/* A decimal integer >= -1 ("-1" = unbounded) that fits an int, ending at *end. */
static bool parse_bound(const char *text, const char **end, int *out)
{
    bool negative = text[0] == '-';
    const char *p = negative ? text + 1 : text;
    if (*p < '0' || *p > '9')
        return false;
    long value = 0;
    for (; *p >= '0' && *p <= '9'; ++p) {
        value = value * 10 + (*p - '0');
        if (value > 1000000000L)
            return false;
    }
    if (negative && value != 1)
        return false;
    *out = negative ? -1 : (int)value;
    *end = p;
    return true;
}

static int parse_window(option_cursor *c, variant_args *a)
{
    const char *text, *p;
    if (!options_value(c, &text))
        return -1;
    if (!parse_bound(text, &p, &a->window_left) || *p != ',' ||
        !parse_bound(p + 1, &p, &a->window_right) || *p != '\0') {
        tool_usage_error("--window: expected LEFT,RIGHT, integers >= -1 (-1 = unbounded), got "
                         "'%s'",
                         text);
        return -1;
    }
    a->window = true;
    return 1;
}

/* "B" or "BQ,BK", each from 1 to 2^31 - 1. */
static int parse_block_size(option_cursor *c, variant_args *a)
{
    const char *text;
    if (!options_value(c, &text))
        return -1;
    char first[32];
    const char *comma = strchr(text, ',');
    size_t len = comma ? (size_t)(comma - text) : strlen(text);
    bool ok = len > 0 && len < sizeof first;
    if (ok) {
        memcpy(first, text, len);
        first[len] = '\0';
        ok = parse_size_text(first, &a->block_q);
    }
    if (ok)
        ok = comma ? parse_size_text(comma + 1, &a->block_k) : (a->block_k = a->block_q, true);
    if (!ok || a->block_q < 1 || a->block_k < 1 || a->block_q > 0x7fffffff ||
        a->block_k > 0x7fffffff) {
        tool_usage_error("--block-size: expected BQ,BK (or B for both), positive integers, got "
                         "'%s'",
                         text);
        return -1;
    }
    a->block_size = true;
    return 1;
}

static bool parse_u64(const char *text, uint64_t *out)
{
    if (text[0] < '0' || text[0] > '9')
        return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno == ERANGE || *end != '\0')
        return false;
    *out = (uint64_t)v;
    return true;
}

/* "P", "P,SEED" or "P,SEED,OFFSET": 0 <= P < 1, SEED and OFFSET unsigned 64-bit. */
static int parse_dropout(option_cursor *c, variant_args *a)
{
    const char *text;
    if (!options_value(c, &text))
        return -1;
    char buf[96];
    bool ok = strlen(text) < sizeof buf;
    char *fields[3] = {NULL, NULL, NULL};
    size_t n = 0;
    if (ok) {
        strcpy(buf, text);
        /* Up to three comma-separated fields; a fourth is an error. */
        for (char *p = buf; p != NULL && ok; ++n) {
            ok = n < 3;
            if (!ok)
                break;
            fields[n] = p;
            char *comma = strchr(p, ',');
            if (comma)
                *comma = '\0';
            p = comma ? comma + 1 : NULL;
        }
    }
    a->dropout_seed = 0;
    a->dropout_offset = 0;
    if (ok) {
        char *end = NULL;
        errno = 0;
        float p = strtof(fields[0], &end);
        ok = fields[0][0] >= '0' && fields[0][0] <= '9' && *end == '\0' && errno != ERANGE &&
             p >= 0.0f && p < 1.0f;
        a->dropout_p = p;
    }
    if (ok && n > 1)
        ok = parse_u64(fields[1], &a->dropout_seed);
    if (ok && n > 2)
        ok = parse_u64(fields[2], &a->dropout_offset);
    if (!ok) {
        tool_usage_error("--dropout: expected P[,SEED[,OFFSET]] with 0 <= P < 1 and unsigned "
                         "integers, got '%s'",
                         text);
        return -1;
    }
    a->dropout = true;
    return 1;
}

int variant_parse_option(option_cursor *c, variant_args *a)
{
    const struct {
        const char *name;
        const char **value;
    } paths[] = {{"--alibi", &a->alibi_path},
                 {"--sinks", &a->sinks_path},
                 {"--dsinks", &a->dsinks_path},
                 {"--bias", &a->bias_path},
                 {"--mask", &a->mask_path},
                 {"--block-mask", &a->block_mask_path},
                 {"--cu-seqlens-q", &a->cu_q_path},
                 {"--cu-seqlens-k", &a->cu_k_path}};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; ++i)
        if (options_is(c, paths[i].name))
            return options_value(c, paths[i].value) ? 1 : -1;
    if (options_is(c, "--dtype"))
        return options_dtype(c, &a->dtype) ? 1 : -1;
    if (options_is(c, "--window"))
        return parse_window(c, a);
    if (options_is(c, "--softcap"))
        return options_float(c, 0.0f, &a->softcap) ? 1 : -1;
    if (options_is(c, "--dropout"))
        return parse_dropout(c, a);
    if (options_is(c, "--block-size"))
        return parse_block_size(c, a);
    return 0;
}

int variant_check_args(const variant_args *a, bool backward)
{
    if (a->dsinks_path && !a->sinks_path)
        return tool_usage_error("--dsinks: needs --sinks (the gradient of which sinks?)");
    if (a->dsinks_path && !backward)
        return tool_usage_error("--dsinks: needs --dout (the gradient is computed by the "
                                "backward pass)");
    if (a->block_mask_path && !a->block_size)
        return tool_usage_error("--block-mask: needs --block-size BQ,BK");
    if (a->block_size && !a->block_mask_path)
        return tool_usage_error("--block-size: only applies with --block-mask");
    if ((a->cu_q_path != NULL) != (a->cu_k_path != NULL))
        return tool_usage_error("%s: --cu-seqlens-q and --cu-seqlens-k go together",
                                a->cu_q_path ? "--cu-seqlens-q" : "--cu-seqlens-k");
    return 0;
}

bool variant_is_varlen(const variant_args *a)
{
    return a->cu_q_path != NULL;
}

/* ------------------------------------------------------------- loading */

static int load(const char *option, const char *path, unsigned accepted, npy_array *out)
{
    if (path == NULL)
        return 0;
    char err[512];
    if (npy_read_file_typed(path, accepted, out, err, sizeof err) != 0)
        return tool_usage_error("%s: %s: %s", option, path, err);
    return 0;
}

/* A mask of any accepted dtype as 0/1 bytes (nonzero = attend). */
static unsigned char *mask_to_bytes(const npy_array *a)
{
    unsigned char *out = malloc(a->count ? a->count : 1);
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < a->count; ++i) {
        if (a->dtype == NPY_FLOAT32)
            out[i] = a->data[i] != 0.0f;
        else
            out[i] = ((const unsigned char *)a->bytes)[i] != 0;
    }
    return out;
}

int variant_load(const variant_args *a, variant_inputs *in)
{
    const unsigned masks = NPY_BOOL | NPY_UINT8 | NPY_FLOAT32;
    int rc;
    memset(in, 0, sizeof *in);
    if ((rc = load("--alibi", a->alibi_path, NPY_FLOAT32, &in->alibi)) != 0 ||
        (rc = load("--sinks", a->sinks_path, NPY_FLOAT32, &in->sinks)) != 0 ||
        (rc = load("--bias", a->bias_path, NPY_FLOAT32, &in->bias)) != 0 ||
        (rc = load("--mask", a->mask_path, masks, &in->mask)) != 0 ||
        (rc = load("--block-mask", a->block_mask_path, masks, &in->block_mask)) != 0 ||
        (rc = load("--cu-seqlens-q", a->cu_q_path, NPY_INT32, &in->cu_q)) != 0 ||
        (rc = load("--cu-seqlens-k", a->cu_k_path, NPY_INT32, &in->cu_k)) != 0)
        return rc;
    return 0;
}

void variant_inputs_free(variant_inputs *in)
{
    npy_array *all[] = {&in->alibi, &in->sinks,   &in->bias, &in->mask,
                        &in->block_mask, &in->cu_q, &in->cu_k};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        npy_array_free(all[i]);
    free(in->mask_bytes);
    in->mask_bytes = NULL;
}

/* ------------------------------------------------------------- shapes */

/* cu_seqlens: int32 [b + 1], starting at 0, non-decreasing, ending at the total. */
static int check_cu(const char *option, const npy_array *cu, size_t total, size_t *longest)
{
    if (cu->ndim != 1 || cu->count < 2)
        return tool_usage_error("%s: expected a 1-D int32 array [batch + 1] with batch >= 1, got "
                                "%zu dimension(s) and %zu element(s)",
                                option, cu->ndim, cu->count);
    const int32_t *v = cu->bytes;
    if (v[0] != 0)
        return tool_usage_error("%s: must start at 0, got %d", option, (int)v[0]);
    *longest = 0;
    for (size_t i = 1; i < cu->count; ++i) {
        if (v[i] < v[i - 1])
            return tool_usage_error("%s: element %zu (%d) is smaller than element %zu (%d)",
                                    option, i, (int)v[i], i - 1, (int)v[i - 1]);
        if ((size_t)(v[i] - v[i - 1]) > *longest)
            *longest = (size_t)(v[i] - v[i - 1]);
    }
    if ((size_t)v[cu->count - 1] != total)
        return tool_usage_error("%s: ends at %d but the packed tensors have %zu rows", option,
                                (int)v[cu->count - 1], total);
    return 0;
}

/*
 * [b|1, h|1, rows, cols] against the problem; sets an explicit view (a
 * dimension of 1 gets stride 0, so it broadcasts).
 */
static int check_matrix(const char *option, const npy_array *a, const flashcl_attention_desc *d,
                        size_t rows, size_t cols, const char *what, flashcl_matrix *m)
{
    char shape[128];
    npy_format_shape(a->shape, a->ndim, shape, sizeof shape);
    if (a->ndim != 4 || (a->shape[0] != 1 && a->shape[0] != d->batch) ||
        (a->shape[1] != 1 && a->shape[1] != d->heads_q) || a->shape[2] != rows ||
        a->shape[3] != cols)
        return tool_usage_error("%s: shape %s does not fit [%zu or 1, %zu or 1, %zu, %zu] (%s)",
                                option, shape, d->batch, d->heads_q, rows, cols, what);
    memset(m, 0, sizeof *m);
    m->stride_row = cols;
    m->stride_head = a->shape[1] == 1 ? 0 : rows * cols;
    m->stride_batch = a->shape[0] == 1 ? 0 : a->shape[1] * rows * cols;
    return 0;
}

int variant_apply(const variant_args *a, variant_inputs *in, flashcl_attention_desc *d)
{
    int rc;
    d->dtype = a->dtype;
    if (a->window) {
        d->window = 1;
        d->window_left = a->window_left;
        d->window_right = a->window_right;
    }
    d->softcap = a->softcap;
    if (a->dropout) {
        d->dropout_p = a->dropout_p;
        d->dropout_seed = a->dropout_seed;
        d->dropout_offset = a->dropout_offset;
    }
    size_t rows = d->seqlen_q, cols = d->seqlen_k;
    if (in->cu_q.bytes) {
        if ((rc = check_cu("--cu-seqlens-q", &in->cu_q, d->seqlen_q, &d->max_seqlen_q)) != 0 ||
            (rc = check_cu("--cu-seqlens-k", &in->cu_k, d->seqlen_k, &d->max_seqlen_k)) != 0)
            return rc;
        if (in->cu_q.count != in->cu_k.count)
            return tool_usage_error("--cu-seqlens-k: %zu sequences, but --cu-seqlens-q has %zu",
                                    in->cu_k.count - 1, in->cu_q.count - 1);
        d->batch = in->cu_q.count - 1;
        rows = d->max_seqlen_q;
        cols = d->max_seqlen_k;
    }
    if (in->alibi.data) {
        const npy_array *s = &in->alibi;
        bool per_head = s->ndim == 1 && s->shape[0] == d->heads_q;
        bool per_batch = s->ndim == 2 && s->shape[0] == d->batch && s->shape[1] == d->heads_q;
        if (!per_head && !per_batch) {
            char shape[128];
            npy_format_shape(s->shape, s->ndim, shape, sizeof shape);
            return tool_usage_error("--alibi: shape %s is neither [%zu] (heads_q) nor [%zu, %zu] "
                                    "(batch, heads_q)",
                                    shape, d->heads_q, d->batch, d->heads_q);
        }
        d->alibi_stride_batch = per_batch ? d->heads_q : 0;
    }
    if (in->sinks.data && (in->sinks.ndim != 1 || in->sinks.shape[0] != d->heads_q)) {
        char shape[128];
        npy_format_shape(in->sinks.shape, in->sinks.ndim, shape, sizeof shape);
        return tool_usage_error("--sinks: shape %s is not [%zu] (one logit per query head)", shape,
                                d->heads_q);
    }
    const char *what = in->cu_q.bytes ? "max_seqlen_q x max_seqlen_k of the sequences"
                                      : "seqlen_q x seqlen_k";
    if (in->bias.data && (rc = check_matrix("--bias", &in->bias, d, rows, cols, what, &d->bias)))
        return rc;
    if (in->mask.bytes) {
        if ((rc = check_matrix("--mask", &in->mask, d, rows, cols, what, &d->mask)) != 0)
            return rc;
        if ((in->mask_bytes = mask_to_bytes(&in->mask)) == NULL)
            return tool_failure("attention: out of host memory for the mask");
    }
    if (in->block_mask.bytes) {
        d->block_q = a->block_q;
        d->block_k = a->block_k;
        size_t br = (rows + a->block_q - 1) / a->block_q, bc = (cols + a->block_k - 1) / a->block_k;
        if ((rc = check_matrix("--block-mask", &in->block_mask, d, br, bc,
                               "blocks of --block-size", &d->block_mask)) != 0)
            return rc;
        /* The block mask is read as bytes too: convert it in place of the mask's copy. */
        unsigned char *bytes = mask_to_bytes(&in->block_mask);
        if (bytes == NULL)
            return tool_failure("attention: out of host memory for the block mask");
        free(in->block_mask.bytes);
        in->block_mask.bytes = bytes;
        in->block_mask.data = NULL;
        in->block_mask.dtype = NPY_UINT8;
    }
    return 0;
}

/* -------------------------------------------------------------- device */

static int make(flashcl_context *ctx, const char *what, const void *data, size_t bytes,
                cl_mem *out)
{
    cl_int err = CL_SUCCESS;
    cl_mem_flags flags = data ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_READ_WRITE;
    *out = clCreateBuffer(flashcl_context_cl_context(ctx), flags, bytes ? bytes : 1,
                          (void *)(uintptr_t)data, &err);
    if (err != CL_SUCCESS) {
        *out = NULL;
        return tool_failure("attention: cannot create the %s buffer (%zu bytes): %s", what, bytes,
                            flashcl_status_name(err));
    }
    return 0;
}

int variant_attach(flashcl_context *ctx, const variant_inputs *in, bool want_dsinks,
                   flashcl_attention_desc *d, variant_buffers *b)
{
    memset(b, 0, sizeof *b);
    int rc = 0;
    if (rc == 0 && in->alibi.data &&
        (rc = make(ctx, "--alibi", in->alibi.data, in->alibi.count * 4, &b->alibi)) == 0)
        d->alibi_slopes = b->alibi;
    if (rc == 0 && in->sinks.data &&
        (rc = make(ctx, "--sinks", in->sinks.data, in->sinks.count * 4, &b->sinks)) == 0)
        d->sinks = b->sinks;
    if (rc == 0 && want_dsinks &&
        (rc = make(ctx, "--dsinks", NULL, d->heads_q * sizeof(float), &b->dsinks)) == 0)
        d->dsinks = b->dsinks;
    if (rc == 0 && in->bias.data &&
        (rc = make(ctx, "--bias", in->bias.data, in->bias.count * 4, &b->bias)) == 0)
        d->bias.buffer = b->bias;
    if (rc == 0 && in->mask_bytes &&
        (rc = make(ctx, "--mask", in->mask_bytes, in->mask.count, &b->mask)) == 0)
        d->mask.buffer = b->mask;
    if (rc == 0 && in->block_mask.bytes &&
        (rc = make(ctx, "--block-mask", in->block_mask.bytes, in->block_mask.count,
                   &b->block_mask)) == 0)
        d->block_mask.buffer = b->block_mask;
    if (rc == 0 && in->cu_q.bytes &&
        (rc = make(ctx, "--cu-seqlens-q", in->cu_q.bytes, in->cu_q.count * 4, &b->cu_q)) == 0)
        d->cu_seqlens_q = b->cu_q;
    if (rc == 0 && in->cu_k.bytes &&
        (rc = make(ctx, "--cu-seqlens-k", in->cu_k.bytes, in->cu_k.count * 4, &b->cu_k)) == 0)
        d->cu_seqlens_k = b->cu_k;
    return rc;
}

int variant_read_dsinks(flashcl_context *ctx, const variant_buffers *b, size_t heads_q,
                        float *out)
{
    cl_int err = clEnqueueReadBuffer(flashcl_context_queue(ctx), b->dsinks, CL_TRUE, 0,
                                     heads_q * sizeof(float), out, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return tool_failure("attention: reading dsinks failed: %s", flashcl_status_name(err));
    return 0;
}

void variant_buffers_release(variant_buffers *b)
{
    cl_mem *all[] = {&b->alibi, &b->sinks, &b->dsinks, &b->bias,
                     &b->mask,  &b->block_mask, &b->cu_q, &b->cu_k};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) {
        if (*all[i])
            clReleaseMemObject(*all[i]);
        *all[i] = NULL;
    }
}

void variant_help(FILE *out)
{
    fputs("Variants (all combine; the standard path supports none of them):\n"
          "  --dtype f32|f16|bf16   storage type on the device (the .npy files stay\n"
          "                         float32; FlashCL converts); accumulation is float32\n"
          "  --window L,R           sliding window: key j is visible to query i iff\n"
          "                         i+sk-sq-L <= j <= i+sk-sq+R; -1 = unbounded side\n"
          "  --softcap C            scores become C*tanh(s/C); 0 = off\n"
          "  --alibi SLOPES.npy     float32 [hq] or [b, hq]: adds -slope*|i+sk-sq-j|\n"
          "  --sinks SINKS.npy      float32 [hq]: one logit per head in each row's\n"
          "                         softmax denominator (O and LSE include it)\n"
          "  --dsinks OUT.npy       with --dout: the gradient of the sinks, [hq]\n"
          "  --dropout P[,SEED[,OFFSET]]  dropout on the probabilities (Philox4x32-10\n"
          "                         keyed on seed, offset and the absolute position)\n"
          "  --bias BIAS.npy        float32 [b|1, hq|1, sq, sk] added to the scores\n"
          "  --mask MASK.npy        bool, uint8 or float32 [b|1, hq|1, sq, sk]:\n"
          "                         nonzero = attend\n"
          "  --block-mask BM.npy    bool, uint8 or float32 [b|1, hq|1, ceil(sq/BQ),\n"
          "  --block-size BQ,BK     ceil(sk/BK)]: 0 = the whole block is skipped\n"
          "  --cu-seqlens-q CU.npy  int32 [b+1] cumulative sequence starts (varlen);\n"
          "  --cu-seqlens-k CU.npy  Q, K, V are then packed [total, h, d], O likewise,\n"
          "                         LSE [hq, total_q]; --bias/--mask use the longest\n"
          "                         sequences' lengths for sq and sk\n"
          "V may have its own head dim (d_v, from V's last dimension): O and dO, dV\n"
          "then have d_v columns.\n",
          out);
}
