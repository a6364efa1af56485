/*
 * `flashcl attention`: O = attention(Q, K, V) on .npy files, and with --dout
 * the gradients dQ, dK, dV of the backward pass; with --k-cache, the
 * KV-cache call (attention_kvcache.c) instead.
 *
 * Everything is checked before any computing, and outputs are written only
 * after the whole computation succeeded, each through a temporary file renamed
 * into place: a bad input or a failure leaves no output file behind.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <flashcl.h>

#include "atomic_file.h"
#include "attention_inputs.h"
#include "attention_kvcache.h"
#include "commands.h"
#include "device_info.h"
#include "kv_options.h"
#include "npy.h"
#include "npy_outputs.h"
#include "options.h"
#include "timing.h"
#include "tool_errors.h"
#include "variant_inputs.h"
#include "variant_options.h"

void cmd_attention_help(FILE *out) {
    fputs("usage: flashcl attention --q Q.npy --k K.npy --v V.npy --out O.npy\n"
          "                         [--lse LSE.npy] [--causal] [--scale S] [--path flash|standard]\n"
          "                         [--dout dO.npy --dq dQ.npy --dk dK.npy --dv dV.npy]\n"
          "                         [--dtype f32|f16|bf16] [--allow-tf32] [--window L,R] [--softcap C]\n"
          "                         [--alibi SLOPES] [--sinks SINKS [--dsinks OUT.npy]]\n"
          "                         [--dropout P[,SEED[,OFFSET]]] [--bias BIAS] [--mask MASK]\n"
          "                         [--block-mask BM.npy | --block-sparse F] [--block-size BQ,BK]\n"
          "                         [--cu-seqlens-q CU.npy --cu-seqlens-k CU.npy | --varlen N]\n"
          "                         [--num-splits N] [--device SPEC] [--verbose]\n"
          "       flashcl attention --q Q.npy --k-cache KC.npy --v-cache VC.npy --out O.npy\n"
          "                         [--block-table BT.npy] [--cache-seqlens L.npy]\n"
          "                         [--cache-leftpad P.npy] [--cache-batch-idx I.npy]\n"
          "                         [--k-new KN.npy --v-new VN.npy]\n"
          "                         [--rotary-cos C.npy --rotary-sin S.npy [--rotary-interleaved]]\n"
          "                         [--cache-dtype fp8_e4m3|fp8_e5m2 [--k-scale S] [--v-scale S]]\n"
          "                         [--k-cache-out KC2.npy --v-cache-out VC2.npy] [--lse LSE.npy]\n"
          "                         [--causal] [--scale S] [--dtype T] [--window L,R] [--softcap C]\n"
          "                         [--alibi SLOPES] [--sinks SINKS] [--num-splits N] [--device SPEC]\n"
          "\n"
          "Computes O = softmax(scale * Q K^T [+ causal mask]) V on .npy files in\n"
          "FlashAttention's layout (float16, float32 or float64 in either byte order,\n"
          "C or Fortran order, read as float32; outputs are float32):\n"
          "  Q   [batch, seqlen_q, heads_q, head_dim]\n"
          "  K,V [batch, seqlen_k, heads_kv, head_dim]  (heads_q a multiple of heads_kv)\n"
          "  O   [batch, seqlen_q, heads_q, head_dim]\n"
          "  LSE [batch, heads_q, seqlen_q]  natural-log log-sum-exp of each row\n"
          "\n"
          "With --dout, also runs the backward pass: given dO, the gradient of the loss\n"
          "with respect to O, writes the gradients with respect to Q, K and V:\n"
          "  dO, dQ  [batch, seqlen_q, heads_q, head_dim]  (shaped like Q)\n"
          "  dK, dV  [batch, seqlen_k, heads_kv, head_dim] (shaped like K; with fewer kv\n"
          "          heads than query heads, already summed over each group)\n"
          "--dout, --dq, --dk and --dv go together: give all four or none.\n"
          "\n"
          "  --causal       bottom-right aligned causal mask (FlashAttention 2.1+)\n",
          out);
    /* The library's bound (include/flashcl.h), spelled as the header spells it. */
#define SCALE_BOUND FLASHCL_STRINGIFY(FLASHCL_MAX_SCALE)
    fputs("  --scale S      softmax scale, of magnitude up to " SCALE_BOUND " (negative too); 0\n", out);
#undef SCALE_BOUND
    fputs("                 (the default) means 1/sqrt(head_dim)\n"
          "  --path P       flash (the default: FlashCL's kernels) or standard (S and P\n"
          "                 through global memory), forward and backward\n"
          "  --device SPEC  \"P:D\" from `flashcl info`, or text matching the device's or\n"
          "                 platform's name or vendor (default: $FLASHCL_DEVICE, else the\n"
          "                 first GPU, else the first device)\n"
          "  --verbose      print one line about what was computed\n"
          "  --dsinks OUT.npy  with --sinks and --dout: the gradient of the sinks, [hq]\n"
          "\n"
          "With --k-cache it runs flashcl_forward_kvcache instead (the decode call of an\n"
          "inference loop, FlashAttention-2's flash_attn_with_kvcache): --k-new/--v-new\n"
          "are appended to the cache in place at --cache-seqlens (rotated with the\n"
          "rotary tables; Q is rotated too), then Q attends to each sequence's keys\n"
          "from --cache-leftpad to its new end; O and LSE as above. The library checks\n"
          "the tables' values (page indices, lengths, pads) and names the field it\n"
          "refuses (cache->block_table[b][j], cache->cache_seqlens[b], ...): exit 1.\n"
          "\n"
          "The .npy files stay float32 whatever --dtype says (FlashCL converts); V may\n"
          "have its own head dim d_v (V's last dimension): O, dO and dV then have d_v\n"
          "columns. With varlen, Q, K, V (and dO) are [total, h, d] files.\n"
          "\n",
          out);
    variant_help(out);
    fputc('\n', out);
    kv_help(out, KV_FOR_ATTENTION);
    fputs("\n"
          "Exit status: 0 success (nothing printed); 2 bad option, file or shape\n"
          "(nothing written); 1 the library, OpenCL or writing the outputs failed\n"
          "(nothing written either, unless renaming the finished files into place fails).\n",
          out);
}

typedef struct attention_args {
    const char *q_path, *k_path, *v_path, *out_path, *lse_path, *device;
    const char *dout_path, *dq_path, *dk_path, *dv_path;
    float scale;
    size_t path; /* index in path_choices */
    bool causal, verbose;
    variant_options var;
    kv_options kv;
} attention_args;

static const char *const path_choices[] = {"flash", "standard"};
static const flashcl_path path_values[] = {FLASHCL_PATH_FLASH, FLASHCL_PATH_STANDARD};

static bool wants_backward(const attention_args *a) { return a->dout_path != NULL; }

/* An option that takes a file name (or other text), and where parse_args stores it. */
typedef struct path_option {
    const char *name;
    const char **value;
} path_option;

static const path_option *find_path_option(const option_cursor *c, const path_option *options, size_t count) {
    for (size_t i = 0; i < count; ++i)
        if (options_is(c, options[i].name)) return &options[i];
    return NULL;
}

/*
 * --dout and the three gradient outputs come as a set: a gradient without
 * dO has nothing to be computed from, and dO without a destination for
 * every gradient would compute results only to drop some of them.
 */
static int check_backward_set(const attention_args *a) {
    const char *const given[] = {a->dq_path, a->dk_path, a->dv_path};
    const char *const names[] = {"--dq", "--dk", "--dv"};
    for (size_t i = 0; i < 3; ++i) {
        if (a->dout_path == NULL && given[i] != NULL)
            return tool_usage_error("%s: needs --dout, the gradient of O, to compute from "
                                    "(try 'flashcl help attention')",
                                    names[i]);
        if (a->dout_path != NULL && given[i] == NULL)
            return tool_usage_error("--dout: %s is required as well (--dout, --dq, --dk and --dv "
                                    "go together)",
                                    names[i]);
    }
    return 0;
}

/* Whether output `out` (an option name) would replace input file `in`. The caches' outputs may
   replace the caches they were read from: the in-place update flash_attn_with_kvcache makes. */
static bool replaces_input(const char *out, const char *out_path, const char *in, const char *in_path) {
    if (in_path == NULL || !atomic_file_same(out_path, in_path)) return false;
    return !((strcmp(out, "--k-cache-out") == 0 && strcmp(in, "--k-cache") == 0) ||
             (strcmp(out, "--v-cache-out") == 0 && strcmp(in, "--v-cache") == 0));
}

/* Every output goes to its own file, not over an input, and each destination is writable now. */
static int check_outputs(const attention_args *a) {
    const struct {
        const char *name, *path;
    } outputs[] = {{"--out", a->out_path},
                   {"--lse", a->lse_path},
                   {"--dq", a->dq_path},
                   {"--dk", a->dk_path},
                   {"--dv", a->dv_path},
                   {"--dsinks", a->var.dsinks},
                   {"--k-cache-out", a->kv.k_cache_out},
                   {"--v-cache-out", a->kv.v_cache_out}};
    enum { OUTPUTS = sizeof outputs / sizeof outputs[0] };
    const struct {
        const char *name, *path;
    } inputs[] = {{"--q", a->q_path},
                  {"--k", a->k_path},
                  {"--v", a->v_path},
                  {"--dout", a->dout_path},
                  {"--alibi", a->var.alibi},
                  {"--sinks", a->var.sinks},
                  {"--bias", a->var.bias},
                  {"--mask", a->var.mask},
                  {"--block-mask", a->var.block_mask},
                  {"--cu-seqlens-q", a->var.cu_q},
                  {"--cu-seqlens-k", a->var.cu_k},
                  {"--k-cache", a->kv.k_cache},
                  {"--v-cache", a->kv.v_cache},
                  {"--block-table", a->kv.block_table},
                  {"--cache-seqlens", a->kv.cache_seqlens},
                  {"--cache-leftpad", a->kv.cache_leftpad},
                  {"--cache-batch-idx", a->kv.cache_batch_idx},
                  {"--k-new", a->kv.k_new},
                  {"--v-new", a->kv.v_new},
                  {"--rotary-cos", a->kv.rotary_cos},
                  {"--rotary-sin", a->kv.rotary_sin},
                  {"--k-scale", a->kv.k_scale},
                  {"--v-scale", a->kv.v_scale}};
    for (size_t i = 0; i < OUTPUTS; ++i) {
        const char *path = outputs[i].path;
        if (path == NULL) continue;
        for (size_t j = 0; j < i; ++j) {
            if (outputs[j].path != NULL && atomic_file_same_destination(outputs[j].path, path))
                return tool_usage_error("%s: same file as %s ('%s')", outputs[i].name, outputs[j].name, path);
        }
        for (size_t j = 0; j < sizeof inputs / sizeof inputs[0]; ++j)
            if (replaces_input(outputs[i].name, path, inputs[j].name, inputs[j].path))
                return tool_usage_error("%s: '%s' is the input file of %s; write the results elsewhere",
                                        outputs[i].name, path, inputs[j].name);
        /* Catch an unwritable destination now, not after the computation. */
        char err[512];
        if (atomic_file_check(path, err, sizeof err) != 0) return tool_usage_error("%s: %s", outputs[i].name, err);
    }
    return 0;
}

/* The cache call reads its keys from the cache and has no backward or standard path. */
static int check_cache_call(const attention_args *a) {
    const struct {
        const char *name;
        bool given;
        const char *why;
    } refused[] = {
        {"--k", a->k_path != NULL, "the KV-cache call reads its keys from --k-cache"},
        {"--v", a->v_path != NULL, "the KV-cache call reads its values from --v-cache"},
        {"--dout", a->dout_path != NULL, "the KV-cache call has no backward"},
        {"--path", a->path != 0, "the KV-cache call runs the flash kernels (the decode family)"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; ++i)
        if (refused[i].given) return tool_usage_error("%s: %s", refused[i].name, refused[i].why);
    /* What flashcl_forward_kvcache does not take, refused here rather than by the library. */
    return variant_check_cache_call(&a->var);
}

/* Returns 0 to go on, the exit status, or TOOL_SHOW_HELP. */
static int parse_args(int argc, char **argv, attention_args *a) {
    const path_option paths[] = {{"--q", &a->q_path},      {"--k", &a->k_path},         {"--v", &a->v_path},
                                 {"--out", &a->out_path},  {"--lse", &a->lse_path},     {"--dout", &a->dout_path},
                                 {"--dq", &a->dq_path},    {"--dk", &a->dk_path},       {"--dv", &a->dv_path},
                                 {"--device", &a->device}, {"--dsinks", &a->var.dsinks}};
    enum { PATHS = sizeof paths / sizeof paths[0] };

    variant_defaults(&a->var);
    kv_defaults(&a->kv);
    option_cursor c;
    options_begin(&c, "attention", argc, argv);
    int more;
    while ((more = options_next(&c)) > 0) {
        bool ok;
        /* An option given twice (two --out, two --softcap) is a mistake, not "the last one wins". */
        if (options_repeated(&c)) return tool_usage_error("%s: given twice", c.name);
        const path_option *path = find_path_option(&c, paths, PATHS);
        if (path != NULL) {
            ok = options_value(&c, path->value);
        } else if (options_is_help(&c)) {
            return TOOL_SHOW_HELP;
        } else if (options_is(&c, "--scale")) {
            ok = options_float(&c, -INFINITY, &a->scale); /* negative too, as the library takes it */
            /* The library's bound, refused here as a usage error (exit 2) like every other bad option. */
            if (ok && fabsf(a->scale) > (float)FLASHCL_MAX_SCALE)
                return tool_usage_error("--scale: %g is beyond the largest magnitude the kernels take (%g)",
                                        (double)a->scale, FLASHCL_MAX_SCALE);
        } else if (options_is(&c, "--causal")) {
            ok = options_flag(&c);
            a->causal = true;
        } else if (options_is(&c, "--path")) {
            ok = options_choice(&c, path_choices, sizeof path_choices / sizeof path_choices[0], &a->path);
        } else if (options_is(&c, "--standard")) {
            return tool_usage_error("--standard: now --path standard");
        } else if (options_is(&c, "--verbose")) {
            ok = options_flag(&c);
            a->verbose = true;
        } else {
            int taken = kv_parse_option(&c, KV_FOR_ATTENTION, &a->kv);
            if (taken == 0) taken = variant_parse_option(&c, &a->var);
            if (taken == 0) return options_unknown(&c);
            ok = taken > 0;
        }
        if (!ok) return TOOL_EXIT_USAGE;
    }
    if (more < 0) return TOOL_EXIT_USAGE;

    int rc = kv_check(&a->kv, KV_FOR_ATTENTION);
    if (rc == 0) rc = kv_attention_wants_cache(&a->kv) ? check_cache_call(a) : 0;
    if (rc != 0) return rc;
    const bool cache = kv_attention_wants_cache(&a->kv);
    const path_option required[] = {{"--q", &a->q_path},
                                    {cache ? "--k-cache" : "--k", cache ? &a->kv.k_cache : &a->k_path},
                                    {cache ? "--v-cache" : "--v", cache ? &a->kv.v_cache : &a->v_path},
                                    {"--out", &a->out_path}};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; ++i) {
        if (*required[i].value == NULL)
            return tool_usage_error("attention: %s is required (try 'flashcl help attention')", required[i].name);
    }
    rc = check_backward_set(a);
    if (rc == 0) rc = variant_check(&a->var);
    if (rc == 0 && a->var.dsinks && !wants_backward(a))
        rc = tool_usage_error("--dsinks: needs --dout (the gradient is computed by the backward pass)");
    if (rc == 0 && path_values[a->path] == FLASHCL_PATH_STANDARD) rc = variant_check_standard_path(&a->var);
    return rc != 0 ? rc : check_outputs(a);
}

/* The loaded inputs; dout.data is NULL without --dout. */
typedef struct attention_inputs {
    npy_array q, k, v, dout;
    variant_arrays var;
    size_t o_shape[4];   /* Q's shape with d_v as the last dimension (also dO's) */
    size_t lse_shape[3]; /* [b, hq, sq], or [hq, total_q] with varlen */
    size_t lse_rank;
} attention_inputs;

/* Host arrays for every result; the gradients only with --dout. */
typedef struct attention_results {
    float *o, *lse, *dq, *dk, *dv, *dsinks;
} attention_results;

static void free_results(attention_results *r) {
    float **all[] = {&r->o, &r->lse, &r->dq, &r->dk, &r->dv, &r->dsinks};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) {
        free(*all[i]);
        *all[i] = NULL;
    }
}

static size_t product(const size_t *shape, size_t rank) {
    size_t n = 1;
    for (size_t i = 0; i < rank; ++i) n *= shape[i];
    return n;
}

static int alloc_results(const attention_args *a, const flashcl_attention_desc *desc, const attention_inputs *in,
                         attention_results *r) {
    memset(r, 0, sizeof *r);
    bool backward = wants_backward(a);
    r->o = malloc(product(in->o_shape, in->q.ndim) * sizeof(float));
    bool ok = r->o != NULL;
    /* The backward reads the forward's LSE, so it is kept even when not written out. */
    if (a->lse_path != NULL || backward) {
        r->lse = malloc(product(in->lse_shape, in->lse_rank) * sizeof(float));
        ok = ok && r->lse != NULL;
    }
    if (backward) {
        r->dq = malloc(in->q.count * sizeof(float));
        r->dk = malloc(in->k.count * sizeof(float));
        r->dv = malloc(in->v.count * sizeof(float));
        ok = ok && r->dq != NULL && r->dk != NULL && r->dv != NULL;
    }
    if (a->var.dsinks != NULL) {
        r->dsinks = malloc(desc->heads_q * sizeof(float));
        ok = ok && r->dsinks != NULL;
    }
    if (!ok) {
        free_results(r);
        return tool_failure("attention: out of host memory for the outputs");
    }
    return 0;
}

static int write_results(const attention_args *a, const flashcl_attention_desc *desc, const attention_inputs *in,
                         const attention_results *r) {
    const size_t dsinks_shape[1] = {desc->heads_q};
    const npy_output outputs[] = {
        {"--out", a->out_path, in->o_shape, in->q.ndim, r->o},
        {"--lse", a->lse_path, in->lse_shape, in->lse_rank, r->lse},
        {"--dq", a->dq_path, in->q.shape, in->q.ndim, r->dq},
        {"--dk", a->dk_path, in->k.shape, in->k.ndim, r->dk},
        {"--dv", a->dv_path, in->v.shape, in->v.ndim, r->dv},
        {"--dsinks", a->var.dsinks, dsinks_shape, 1, r->dsinks},
    };
    return npy_outputs_write(outputs, sizeof outputs / sizeof outputs[0]);
}

static void print_verbose(const attention_args *a, const flashcl_attention_desc *desc, flashcl_context *ctx,
                          double forward_s, double backward_s) {
    char device[256];
    device_string_into(flashcl_context_device(ctx), CL_DEVICE_NAME, device, sizeof device);
    static const char *const dtypes[] = {"f32", "f32", "f16", "bf16"};
    printf("flashcl: attention: b=%zu sq=%zu sk=%zu hq=%zu hkv=%zu d=%zu d_v=%zu %s%s%s%s%s%s%s"
           "%s%s%s%s, %s path on %s, %.3f ms",
           desc->batch, desc->seqlen_q, desc->seqlen_k, desc->heads_q, desc->heads_kv, desc->head_dim, desc->head_dim_v,
           dtypes[desc->dtype], desc->causal ? " causal" : "", desc->window ? " window" : "",
           desc->softcap > 0.0f ? " softcap" : "", desc->alibi_slopes ? " alibi" : "", desc->sinks ? " sinks" : "",
           desc->dropout_p > 0.0f ? " dropout" : "", desc->bias.buffer ? " bias" : "", desc->mask.buffer ? " mask" : "",
           desc->block_mask.buffer ? " block-mask" : "", desc->cu_seqlens_q ? " varlen" : "", path_choices[a->path],
           device, forward_s * 1e3);
    if (wants_backward(a)) printf(" + backward %.3f ms", backward_s * 1e3);
    printf("; wrote %s", a->out_path);
    if (a->lse_path != NULL) printf(", %s", a->lse_path);
    if (wants_backward(a)) printf(", %s, %s, %s", a->dq_path, a->dk_path, a->dv_path);
    if (a->var.dsinks != NULL) printf(", %s", a->var.dsinks);
    putchar('\n');
}

/* Forward (and backward), then the outputs; the inputs are already valid. */
static int compute_and_write(const attention_args *a, const flashcl_attention_desc *desc, const attention_inputs *in) {
    attention_results r;
    int rc = alloc_results(a, desc, in, &r);
    if (rc != 0) return rc;

    flashcl_context *ctx = NULL;
    char err[1024] = "";
    flashcl_status status = flashcl_context_create(&ctx, a->device, err, sizeof err);
    if (status != FLASHCL_SUCCESS) {
        free_results(&r);
        return tool_status_error(NULL, status, err);
    }
    /* The descriptor points at device buffers for the variant inputs (a copy:
     * the buffers belong to this context). */
    flashcl_attention_desc run_desc = *desc;
    variant_buffers vbufs;
    rc = variant_buffers_attach(ctx, &in->var, a->var.dsinks != NULL, &run_desc, &vbufs);
    if (rc != 0) {
        variant_buffers_release(&vbufs);
        flashcl_context_destroy(ctx);
        free_results(&r);
        return rc;
    }
    run_desc.path = path_values[a->path];
    desc = &run_desc;
    double start = wall_seconds();
    status = flashcl_forward_host(ctx, desc, in->q.data, in->k.data, in->v.data, r.o, r.lse);
    double forward_s = wall_seconds() - start, backward_s = 0.0;
    if (status != FLASHCL_SUCCESS) {
        rc = tool_status_error(NULL, status, flashcl_last_error(ctx));
    } else if (wants_backward(a)) {
        start = wall_seconds();
        status = flashcl_backward_host(ctx, desc, in->q.data, in->k.data, in->v.data, r.o, in->dout.data, r.lse, r.dq,
                                       r.dk, r.dv);
        backward_s = wall_seconds() - start;
        if (status != FLASHCL_SUCCESS)
            rc = tool_status_error("backward", status, flashcl_last_error(ctx));
        else if (r.dsinks != NULL)
            rc = variant_read_dsinks(ctx, &vbufs, desc->heads_q, r.dsinks);
    }
    if (rc == 0) rc = write_results(a, desc, in, &r);
    if (rc == 0 && a->verbose) print_verbose(a, desc, ctx, forward_s, backward_s);
    variant_buffers_release(&vbufs);
    flashcl_context_destroy(ctx);
    free_results(&r);
    return rc;
}

/* Loads every input and checks every shape rule; fills desc's sizes. */
static int load_inputs(const attention_args *a, attention_inputs *in, flashcl_attention_desc *desc) {
    int rc;
    bool varlen = variant_is_varlen(&a->var);
    if ((rc = attention_load("--q", a->q_path, &in->q)) != 0 || (rc = attention_load("--k", a->k_path, &in->k)) != 0 ||
        (rc = attention_load("--v", a->v_path, &in->v)) != 0 ||
        (rc = attention_check_shapes(&in->q, &in->k, &in->v, varlen, desc)) != 0)
        return rc;
    /* V's head dim is known only now; the standard path takes d_v = d only (as bench's --head-dim-v). */
    if (path_values[a->path] == FLASHCL_PATH_STANDARD && desc->head_dim_v != desc->head_dim)
        return tool_usage_error("--path standard: the standard path takes no separate V head dim (V has d_v=%zu, Q "
                                "and K d=%zu)",
                                desc->head_dim_v, desc->head_dim);
    /* 'random' variant data starts from the same seed as bench's inputs. */
    uint64_t state = VARIANT_RANDOM_SEED;
    if ((rc = variant_arrays_prepare(&a->var, desc, &state, &in->var)) != 0) return rc;
    /* O (and dO) are Q's shape with V's head dim. */
    memcpy(in->o_shape, in->q.shape, in->q.ndim * sizeof in->o_shape[0]);
    in->o_shape[in->q.ndim - 1] = desc->head_dim_v;
    in->lse_rank = varlen ? 2 : 3;
    if (varlen) {
        in->lse_shape[0] = desc->heads_q;
        in->lse_shape[1] = desc->seqlen_q;
    } else {
        in->lse_shape[0] = desc->batch;
        in->lse_shape[1] = desc->heads_q;
        in->lse_shape[2] = desc->seqlen_q;
    }
    if (wants_backward(a)) {
        if ((rc = attention_load("--dout", a->dout_path, &in->dout)) != 0) return rc;
        npy_array like_o = in->q;
        memcpy(like_o.shape, in->o_shape, in->q.ndim * sizeof like_o.shape[0]);
        const char *like = desc->head_dim_v == desc->head_dim ? "--q" : "O (Q with V's head dim)";
        if ((rc = attention_check_same_shape("--dout", &in->dout, like, &like_o)) != 0) return rc;
    }
    return 0;
}

int cmd_attention(int argc, char **argv) {
    attention_args a;
    memset(&a, 0, sizeof a);
    int rc = parse_args(argc, argv, &a);
    if (rc != 0) return rc;

    if (kv_attention_wants_cache(&a.kv)) {
        const kvcache_request req = {.q_path = a.q_path,
                                     .out_path = a.out_path,
                                     .lse_path = a.lse_path,
                                     .device = a.device,
                                     .scale = a.scale,
                                     .causal = a.causal,
                                     .verbose = a.verbose,
                                     .var = &a.var,
                                     .kv = &a.kv};
        return attention_kvcache(&req);
    }

    attention_inputs in;
    memset(&in, 0, sizeof in);
    flashcl_attention_desc desc;
    desc = (flashcl_attention_desc)FLASHCL_ATTENTION_DESC_INIT;
    if ((rc = load_inputs(&a, &in, &desc)) == 0) {
        desc.scale = a.scale;
        desc.causal = a.causal;
        desc.num_splits = a.kv.num_splits;
        rc = compute_and_write(&a, &desc, &in);
    }
    npy_array_free(&in.q);
    npy_array_free(&in.k);
    npy_array_free(&in.v);
    npy_array_free(&in.dout);
    variant_arrays_free(&in.var);
    return rc;
}
