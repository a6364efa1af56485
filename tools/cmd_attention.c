/*
 * `flashcl attention`: O = attention(Q, K, V) on .npy files.
 *
 * Everything is checked before any computing, and outputs are written only
 * after the computation succeeded, each through a temporary file renamed
 * into place: a bad input or a failure leaves no output file behind.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <flashcl.h>

#include "atomic_file.h"
#include "commands.h"
#include "device_info.h"
#include "npy.h"
#include "options.h"
#include "tool_errors.h"
#include "wall_clock.h"

void cmd_attention_help(FILE *out)
{
    fputs("usage: flashcl attention --q Q.npy --k K.npy --v V.npy --out O.npy\n"
          "                         [--lse LSE.npy] [--causal] [--scale S] [--standard]\n"
          "                         [--device SPEC] [--verbose]\n"
          "\n"
          "Computes O = softmax(scale * Q K^T [+ causal mask]) V on float32 .npy files\n"
          "in FlashAttention's layout:\n"
          "  Q   [batch, seqlen_q, heads_q, head_dim]\n"
          "  K,V [batch, seqlen_k, heads_kv, head_dim]  (heads_q a multiple of heads_kv)\n"
          "  O   [batch, seqlen_q, heads_q, head_dim]\n"
          "  LSE [batch, heads_q, seqlen_q]  natural-log log-sum-exp of each row\n"
          "\n"
          "  --causal       bottom-right aligned causal mask (FlashAttention 2.1+)\n"
          "  --scale S      softmax scale, a finite number >= 0; 0 (the default)\n"
          "                 means 1/sqrt(head_dim)\n"
          "  --standard     use the standard attention (S and P through global memory)\n"
          "                 instead of the flash kernel\n"
          "  --device SPEC  \"P:D\" from `flashcl info`, or text matching the device,\n"
          "                 vendor or platform name (default: $FLASHCL_DEVICE, else the\n"
          "                 first GPU, else the first device)\n"
          "  --verbose      print one line about what was computed\n"
          "\n"
          "Exit status: 0 success (nothing printed); 2 bad option, file or shape\n"
          "(nothing written); 1 the library, OpenCL or writing the outputs failed.\n",
          out);
}

typedef struct attention_args {
    const char *q_path, *k_path, *v_path, *out_path, *lse_path, *device;
    float scale;
    bool causal, standard, verbose;
} attention_args;

/* Returns 0 to go on, or the exit status (also for --help). */
static int parse_args(int argc, char **argv, attention_args *a, bool *help)
{
    option_cursor c;
    options_begin(&c, "attention", argc, argv);
    int more;
    while ((more = options_next(&c)) > 0) {
        bool ok;
        if (options_is(&c, "--help") || options_is(&c, "-h")) {
            *help = true;
            return 0;
        } else if (options_is(&c, "--q")) {
            ok = options_value(&c, &a->q_path);
        } else if (options_is(&c, "--k")) {
            ok = options_value(&c, &a->k_path);
        } else if (options_is(&c, "--v")) {
            ok = options_value(&c, &a->v_path);
        } else if (options_is(&c, "--out")) {
            ok = options_value(&c, &a->out_path);
        } else if (options_is(&c, "--lse")) {
            ok = options_value(&c, &a->lse_path);
        } else if (options_is(&c, "--device")) {
            ok = options_value(&c, &a->device);
        } else if (options_is(&c, "--scale")) {
            ok = options_float(&c, 0.0f, &a->scale);
        } else if (options_is(&c, "--causal")) {
            ok = options_flag(&c);
            a->causal = true;
        } else if (options_is(&c, "--standard")) {
            ok = options_flag(&c);
            a->standard = true;
        } else if (options_is(&c, "--verbose")) {
            ok = options_flag(&c);
            a->verbose = true;
        } else {
            return options_unknown(&c);
        }
        if (!ok)
            return TOOL_EXIT_USAGE;
    }
    if (more < 0)
        return TOOL_EXIT_USAGE;

    const struct {
        const char *value, *name;
    } required[] = {{a->q_path, "--q"}, {a->k_path, "--k"}, {a->v_path, "--v"},
                    {a->out_path, "--out"}};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; ++i) {
        if (required[i].value == NULL)
            return tool_usage_error("attention: %s is required (try 'flashcl help attention')",
                                    required[i].name);
    }
    if (a->lse_path != NULL && strcmp(a->lse_path, a->out_path) == 0)
        return tool_usage_error("--lse: same file as --out ('%s')", a->out_path);

    /* Catch an unwritable destination now, not after the computation. */
    char err[512];
    if (atomic_file_check(a->out_path, err, sizeof err) != 0)
        return tool_usage_error("--out: %s", err);
    if (a->lse_path != NULL && atomic_file_check(a->lse_path, err, sizeof err) != 0)
        return tool_usage_error("--lse: %s", err);
    return 0;
}

static int load(const char *option, const char *path, npy_array *out)
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

/* Q [b, sq, hq, d], K and V [b, sk, hkv, d]: fills desc or reports the first mismatch. */
static int check_shapes(const npy_array *q, const npy_array *k, const npy_array *v,
                        flashcl_attention_desc *desc)
{
    int rc;
    if ((rc = check_rank("--q", q, "[b, sq, hq, d]")) != 0 ||
        (rc = check_rank("--k", k, "[b, sk, hkv, d]")) != 0 ||
        (rc = check_rank("--v", v, "[b, sk, hkv, d]")) != 0)
        return rc;
    if (memcmp(k->shape, v->shape, 4 * sizeof k->shape[0]) != 0) {
        char ks[128], vs[128];
        npy_format_shape(k->shape, 4, ks, sizeof ks);
        npy_format_shape(v->shape, 4, vs, sizeof vs);
        return tool_usage_error("--v: shape %s does not match --k's shape %s", vs, ks);
    }
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

/* Writes every output to its temporary file, then renames them all. */
static int write_outputs(const attention_args *a, const npy_array *q, const float *o,
                         const size_t *lse_shape, const float *lse)
{
    enum { OUT_O, OUT_LSE, OUT_COUNT };
    const char *paths[OUT_COUNT] = {a->out_path, a->lse_path};
    const char *options[OUT_COUNT] = {"--out", "--lse"};
    const size_t *shapes[OUT_COUNT] = {q->shape, lse_shape};
    const size_t ranks[OUT_COUNT] = {4, 3};
    const float *data[OUT_COUNT] = {o, lse};
    atomic_file files[OUT_COUNT];
    memset(files, 0, sizeof files);
    char err[600];

    size_t opened = 0;
    int rc = 0;
    for (size_t i = 0; i < OUT_COUNT && rc == 0; ++i) {
        if (paths[i] == NULL)
            continue;
        if (atomic_file_open(&files[i], paths[i], err, sizeof err) != 0) {
            rc = tool_failure("%s: %s", options[i], err);
            break;
        }
        opened = i + 1;
        if (npy_write(files[i].stream, shapes[i], ranks[i], data[i], err, sizeof err) != 0 ||
            atomic_file_finish(&files[i], err, sizeof err) != 0)
            rc = tool_failure("%s: %s: %s", options[i], paths[i], err);
    }
    /* Publish only when every file is complete, so they appear together. */
    for (size_t i = 0; i < opened && rc == 0; ++i) {
        if (paths[i] != NULL && atomic_file_publish(&files[i], err, sizeof err) != 0)
            rc = tool_failure("%s: %s", options[i], err);
    }
    for (size_t i = 0; i < opened; ++i)
        atomic_file_abort(&files[i]); /* no-op for a published file */
    return rc;
}

/* Runs the computation and writes the outputs; inputs are already valid. */
static int compute_and_write(const attention_args *a, const flashcl_attention_desc *desc,
                             const npy_array *q, const npy_array *k, const npy_array *v)
{
    const size_t lse_shape[3] = {desc->batch, desc->heads_q, desc->seqlen_q};
    float *o = malloc(q->count * sizeof(float));
    float *lse = a->lse_path ? malloc(desc->batch * desc->heads_q * desc->seqlen_q * sizeof(float))
                             : NULL;
    if (o == NULL || (a->lse_path != NULL && lse == NULL)) {
        free(o);
        free(lse);
        return tool_failure("attention: out of host memory for the outputs");
    }

    flashcl_context *ctx = NULL;
    char err[1024] = "";
    flashcl_status status = flashcl_context_create(&ctx, a->device, err, sizeof err);
    int rc = 0;
    if (status != FLASHCL_SUCCESS) {
        rc = tool_status_error(NULL, status, err);
    } else {
        flashcl_path path = a->standard ? FLASHCL_PATH_STANDARD : FLASHCL_PATH_FLASH;
        double start = wall_seconds();
        status = flashcl_forward_host(ctx, desc, path, q->data, k->data, v->data, o, lse);
        double seconds = wall_seconds() - start;
        if (status != FLASHCL_SUCCESS)
            rc = tool_status_error(NULL, status, flashcl_last_error(ctx));
        else
            rc = write_outputs(a, q, o, lse_shape, lse);
        if (rc == 0 && a->verbose) {
            char device[256];
            device_string_into(flashcl_context_device(ctx), CL_DEVICE_NAME, device, sizeof device);
            printf("flashcl: attention: b=%zu sq=%zu sk=%zu hq=%zu hkv=%zu d=%zu%s, %s path on %s, "
                   "%.3f ms; wrote %s%s%s\n",
                   desc->batch, desc->seqlen_q, desc->seqlen_k, desc->heads_q, desc->heads_kv,
                   desc->head_dim, desc->causal ? " causal" : "", a->standard ? "standard" : "flash",
                   device, seconds * 1e3, a->out_path, a->lse_path ? " and " : "",
                   a->lse_path ? a->lse_path : "");
        }
    }
    flashcl_context_destroy(ctx);
    free(o);
    free(lse);
    return rc;
}

int cmd_attention(int argc, char **argv)
{
    attention_args a;
    memset(&a, 0, sizeof a);
    bool help = false;
    int rc = parse_args(argc, argv, &a, &help);
    if (help) {
        cmd_attention_help(stdout);
        return TOOL_EXIT_OK;
    }
    if (rc != 0)
        return rc;

    npy_array q, k, v;
    memset(&q, 0, sizeof q);
    memset(&k, 0, sizeof k);
    memset(&v, 0, sizeof v);
    flashcl_attention_desc desc;
    memset(&desc, 0, sizeof desc);
    if ((rc = load("--q", a.q_path, &q)) == 0 && (rc = load("--k", a.k_path, &k)) == 0 &&
        (rc = load("--v", a.v_path, &v)) == 0 && (rc = check_shapes(&q, &k, &v, &desc)) == 0) {
        desc.scale = a.scale;
        desc.causal = a.causal;
        rc = compute_and_write(&a, &desc, &q, &k, &v);
    }
    npy_array_free(&q);
    npy_array_free(&k);
    npy_array_free(&v);
    return rc;
}
