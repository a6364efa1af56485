/* `bench` with attention variants; see bench_variants.h. */
#include "bench_variants.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "bench_report.h"
#include "bench_variant_inputs.h"
#include "device_info.h"
#include "json_print.h"
#include "plan_print.h"
#include "tool_errors.h"

void bench_variant_defaults(bench_variant_args *v)
{
    memset(v, 0, sizeof *v);
    v->block_sparsity = -1.0f;
}

/* "L,R" with integers >= -1. */
static bool parse_window_text(const char *text, int *left, int *right)
{
    char *end = NULL;
    long l = strtol(text, &end, 10);
    if (end == text || *end != ',')
        return false;
    const char *second = end + 1;
    long r = strtol(second, &end, 10);
    if (end == second || *end != '\0' || l < -1 || r < -1 || l > 1000000000L || r > 1000000000L)
        return false;
    *left = (int)l;
    *right = (int)r;
    return true;
}

int bench_variant_parse_option(option_cursor *c, bench_variant_args *v)
{
    const char *text;
    if (options_is(c, "--dtype"))
        return options_dtype(c, &v->dtype) ? 1 : -1;
    if (options_is(c, "--window")) {
        if (!options_value(c, &text))
            return -1;
        if (!parse_window_text(text, &v->window_left, &v->window_right)) {
            tool_usage_error("--window: expected LEFT,RIGHT, integers >= -1, got '%s'", text);
            return -1;
        }
        v->window = true;
        return 1;
    }
    if (options_is(c, "--softcap"))
        return options_float(c, 0.0f, &v->softcap) ? 1 : -1;
    if (options_is(c, "--dropout")) {
        if (!options_float(c, 0.0f, &v->dropout_p))
            return -1;
        if (v->dropout_p >= 1.0f) {
            tool_usage_error("--dropout: expected a probability in [0, 1), got %g",
                             (double)v->dropout_p);
            return -1;
        }
        return 1;
    }
    if (options_is(c, "--block-sparse")) {
        if (!options_float(c, 0.0f, &v->block_sparsity))
            return -1;
        if (v->block_sparsity >= 1.0f) {
            tool_usage_error("--block-sparse: expected the fraction of blocks skipped, in [0, 1), "
                             "got %g",
                             (double)v->block_sparsity);
            return -1;
        }
        return 1;
    }
    if (options_is(c, "--block-size"))
        return options_size(c, 1, 1u << 20, &v->block_size) ? 1 : -1;
    if (options_is(c, "--varlen"))
        return options_size(c, 1, 1u << 20, &v->varlen_seqs) ? 1 : -1;
    if (options_is(c, "--head-dim-v"))
        return options_size(c, 1, FLASHCL_MAX_HEAD_DIM, &v->head_dim_v) ? 1 : -1;
    bool *flag = options_is(c, "--alibi") ? &v->alibi
                 : options_is(c, "--no-plain") ? &v->no_plain
                 : options_is(c, "--sinks") ? &v->sinks
                 : options_is(c, "--bias")  ? &v->bias
                 : options_is(c, "--mask")  ? &v->mask
                                            : NULL;
    if (flag == NULL)
        return 0;
    *flag = true;
    return options_flag(c) ? 1 : -1;
}

bool bench_variant_any(const bench_variant_args *v)
{
    return (v->dtype != FLASHCL_DTYPE_DEFAULT && v->dtype != FLASHCL_DTYPE_F32) || v->window ||
           v->softcap > 0.0f || v->alibi || v->sinks || v->bias || v->mask ||
           v->dropout_p > 0.0f || v->block_sparsity >= 0.0f || v->varlen_seqs ||
           v->head_dim_v != 0;
}

int bench_variant_check(const bench_variant_args *v, size_t head_dim)
{
    (void)head_dim;
    if (v->block_sparsity >= 0.0f && v->block_size == 0)
        return tool_usage_error("--block-sparse: needs --block-size B");
    if (v->block_size && v->block_sparsity < 0.0f)
        return tool_usage_error("--block-size: only applies with --block-sparse");
    if (v->no_plain && !bench_variant_any(v))
        return tool_usage_error("--no-plain: only applies with variant options");
    return 0;
}

void bench_variant_describe(const bench_variant_args *v, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
#define ADD(...)                                                                 \
    do {                                                                         \
        if (used < size) {                                                       \
            int w = snprintf(buf + used, size - used, "%s", used ? "," : "");   \
            used += w > 0 ? (size_t)w : 0;                                       \
        }                                                                        \
        if (used < size) {                                                       \
            int w = snprintf(buf + used, size - used, __VA_ARGS__);              \
            used += w > 0 ? (size_t)w : 0;                                       \
        }                                                                        \
    } while (0)
    if (v->dtype == FLASHCL_DTYPE_F16 || v->dtype == FLASHCL_DTYPE_BF16)
        ADD("%s", v->dtype == FLASHCL_DTYPE_F16 ? "f16" : "bf16");
    if (v->head_dim_v)
        ADD("head_dim_v=%zu", v->head_dim_v);
    if (v->window)
        ADD("window(%d,%d)", v->window_left, v->window_right);
    if (v->softcap > 0.0f)
        ADD("softcap=%g", (double)v->softcap);
    if (v->alibi)
        ADD("alibi");
    if (v->sinks)
        ADD("sinks");
    if (v->dropout_p > 0.0f)
        ADD("dropout=%g", (double)v->dropout_p);
    if (v->bias)
        ADD("bias");
    if (v->mask)
        ADD("mask");
    if (v->block_sparsity >= 0.0f)
        ADD("block-sparse=%g/%zu", (double)v->block_sparsity, v->block_size);
    if (v->varlen_seqs)
        ADD("varlen=%zu", v->varlen_seqs);
#undef ADD
}

/* ------------------------------------------------------------- timing */

enum { BV_WITH = 0, BV_PLAIN = 1, BV_PATHS = 2 };
enum { BV_FWD = 0, BV_BWD = 1, BV_FWD_BWD = 2, BV_PASSES = 3 };

static const char *const pass_names[BV_PASSES] = {"fwd", "bwd", "fwd+bwd"};

typedef struct bv_path {
    const char *name;
    bool run;            /* false: skipped (--no-plain) */
    flashcl_plan plan;   /* the forward's */
    flashcl_plan bwd_plan;
    bench_result result[BV_PASSES];
    double flops;
    bool ran[BV_PASSES];
} bv_path;

typedef struct bv_call {
    flashcl_context *ctx;
    bv_problem *p;
} bv_call;

static flashcl_status enqueue_forward(void *user)
{
    bv_call *c = user;
    bv_problem *p = c->p;
    return flashcl_forward(c->ctx, &p->desc, &p->q, &p->k, &p->v, &p->o, p->lse, 0, 0, NULL, NULL);
}

static flashcl_status enqueue_backward(void *user)
{
    bv_call *c = user;
    bv_problem *p = c->p;
    return flashcl_backward(c->ctx, &p->desc, &p->q, &p->k, &p->v, &p->o, &p->dout, p->lse, 0,
                            &p->dq, &p->dk, &p->dv, 0, NULL, NULL);
}

/* Forward then backward, as a training step runs them (torch times fwd+bwd so). */
static flashcl_status enqueue_pair(void *user)
{
    flashcl_status st = enqueue_forward(user);
    return st == FLASHCL_SUCCESS ? enqueue_backward(user) : st;
}

static int pass_count(const bench_variant_run *run)
{
    return run->backward ? BV_PASSES : 1;
}

/* Creates one path's problem, plans it, times it, releases it. */
static int run_path(flashcl_context *ctx, const bench_variant_run *run,
                    const bench_variant_args *v, bv_path *out)
{
    bv_problem p;
    int rc = bv_problem_create(ctx, &run->base, v, run->backward, &p);
    if (rc != 0)
        return rc;
    out->flops = p.flops;
    flashcl_status st = flashcl_plan_query(ctx, &p.desc, &out->plan);
    if (st == FLASHCL_SUCCESS && run->backward)
        st = flashcl_backward_plan_query(ctx, &p.desc, &out->bwd_plan);
    bv_call call = {ctx, &p};
    static flashcl_status (*const enqueue[BV_PASSES])(void *) = {enqueue_forward, enqueue_backward,
                                                                 enqueue_pair};
    for (int pass = 0; st == FLASHCL_SUCCESS && pass < pass_count(run); ++pass) {
        char label[48];
        snprintf(label, sizeof label, "%s %s", out->name, pass_names[pass]);
        bench_work work = {ctx, label, enqueue[pass], &call};
        st = bench_run_work(&work, &run->settings, &out->result[pass]);
        out->ran[pass] = st == FLASHCL_SUCCESS;
    }
    if (st != FLASHCL_SUCCESS)
        rc = tool_status_error(out->name, st, flashcl_last_error(ctx));
    clFinish(flashcl_context_queue(ctx));
    bv_problem_release(&p);
    return rc;
}

/* ------------------------------------------------------------- report */

static double rate(double flops, double ms)
{
    return ms > 0.0 ? flops / (ms * 1e-3) : NAN;
}

/* The backward counts 2.5 times the forward's flops, as FlashAttention does; fwd+bwd 3.5. */
static double pass_flops(const bv_path *p, int pass)
{
    return pass == BV_FWD ? p->flops : pass == BV_BWD ? 2.5 * p->flops : 3.5 * p->flops;
}

static void print_table(FILE *out, const char *device, const bench_variant_run *run,
                        const char *features, const bv_path paths[BV_PATHS])
{
    const flashcl_attention_desc *d = &run->base;
    fprintf(out, "device   %s\n", device);
    fprintf(out, "problem  batch %zu, heads %zu (kv %zu), seqlen %zu (k %zu), head dim %zu, %s\n",
            d->batch, d->heads_q, d->heads_kv, d->seqlen_q, d->seqlen_k, d->head_dim,
            d->causal ? "causal" : "non-causal");
    fprintf(out, "features %s\n", features);
    fprintf(out, "\n%-15s %-7s %7s %11s %9s %10s\n", "path", "pass", "iters", "ms", "TFLOP/s",
            "GFLOP/s");
    for (int pass = 0; pass < pass_count(run); ++pass)
        for (int i = 0; i < BV_PATHS; ++i) {
            const bv_path *p = &paths[i];
            if (!p->run)
                continue;
            double ms = p->result[pass].ms, f = pass_flops(p, pass);
            fprintf(out, "%-15s %-7s %7zu %11.4f %9.4f %10.2f\n", p->name, pass_names[pass],
                    p->result[pass].iters, ms, rate(f, ms) * 1e-12, rate(f, ms) * 1e-9);
        }
    fputc('\n', out);
    for (int i = 0; i < BV_PATHS; ++i) {
        if (!paths[i].run)
            continue;
        fprintf(out, "plan %-15s ", paths[i].name);
        plan_print_summary(out, &paths[i].plan);
        fputc('\n', out);
        if (run->backward) {
            fprintf(out, "bwd  %-15s ", paths[i].name);
            plan_print_summary(out, &paths[i].bwd_plan);
            fputc('\n', out);
        }
    }
    for (int pass = 0; paths[BV_PLAIN].run && pass < pass_count(run); ++pass)
        fprintf(out, "cost     %s %.2fx (flash+variants ms / flash ms)\n", pass_names[pass],
                paths[BV_WITH].result[pass].ms / paths[BV_PLAIN].result[pass].ms);
    fputs("TFLOP/s counts the dense-equivalent flops of each path's own shape (2*(d + d_v) per\n"
          "query-key pair, causal halved): masked or skipped pairs still count. The standard\n"
          "path supports no variant and is not run.\n",
          out);
}

static void print_json(FILE *out, const char *device, const bench_variant_run *run,
                       const char *features, const bv_path paths[BV_PATHS])
{
    for (int pass = 0; pass < pass_count(run); ++pass)
        for (int i = 0; i < BV_PATHS; ++i) {
            const bv_path *p = &paths[i];
            if (!p->run)
                continue;
            double ms = p->result[pass].ms, f = pass_flops(p, pass);
            fputc('{', out);
            json_key(out, "path", true);
            json_string(out, p->name);
            json_key(out, "pass", false);
            json_string(out, pass_names[pass]);
            flashcl_attention_desc shown = run->base;
            if (i == BV_WITH) {
                shown.dtype = run->var.dtype;
                shown.head_dim_v = run->var.head_dim_v;
            }
            bench_json_problem_fields(out, device, &shown);
            json_key(out, "features", false);
            json_string(out, i == BV_WITH ? features : "");
            json_key(out, "iters", false);
            fprintf(out, "%zu", p->result[pass].iters);
            json_key(out, "ms", false);
            json_number(out, ms);
            json_key(out, "tflops", false);
            json_number(out, rate(f, ms) * 1e-12);
            json_key(out, "flops", false);
            json_number(out, f);
            /* fwd+bwd names the backward's kernel; "fwd_kernel" keeps the forward's. */
            bench_json_plan_fields(out, pass == BV_FWD ? &p->plan : &p->bwd_plan);
            if (pass != BV_FWD) {
                char kernel[sizeof p->plan.kernel + 1];
                snprintf(kernel, sizeof kernel, "%.*s", (int)sizeof p->plan.kernel, p->plan.kernel);
                json_key(out, "fwd_kernel", false);
                json_string(out, kernel);
            }
            const flashcl_plan *shown_plan = pass == BV_FWD ? &p->plan : &p->bwd_plan;
            json_key(out, "origin", false);
            json_string(out, shown_plan->origin);
            fputs("}\n", out);
        }
    fputc('{', out);
    json_key(out, "path", true);
    json_string(out, "summary");
    json_key(out, "features", false);
    json_string(out, features);
    json_key(out, "cost_fwd", false);
    json_number(out, paths[BV_PLAIN].run ? paths[BV_WITH].result[BV_FWD].ms / paths[BV_PLAIN].result[BV_FWD].ms
                                         : NAN);
    if (run->backward && paths[BV_PLAIN].run) {
        json_key(out, "cost_bwd", false);
        json_number(out, paths[BV_WITH].result[BV_BWD].ms / paths[BV_PLAIN].result[BV_BWD].ms);
    }
    fputs("}\n", out);
}

int bench_variants(const bench_variant_run *run)
{
    flashcl_context *ctx = NULL;
    char err[1024] = "";
    flashcl_status status = flashcl_context_create(&ctx, run->device, err, sizeof err);
    if (status != FLASHCL_SUCCESS)
        return tool_status_error(NULL, status, err);
    char device[256], features[256];
    device_string_into(flashcl_context_device(ctx), CL_DEVICE_NAME, device, sizeof device);
    bench_variant_describe(&run->var, features, sizeof features);

    bv_path paths[BV_PATHS];
    memset(paths, 0, sizeof paths);
    paths[BV_WITH].name = "flash+variants";
    paths[BV_PLAIN].name = "flash";
    paths[BV_WITH].run = true;
    paths[BV_PLAIN].run = !run->var.no_plain;
    bench_variant_args plain;
    bench_variant_defaults(&plain);
    int rc = run_path(ctx, run, &run->var, &paths[BV_WITH]);
    if (rc == 0 && paths[BV_PLAIN].run)
        rc = run_path(ctx, run, &plain, &paths[BV_PLAIN]);
    if (rc == 0) {
        if (run->json)
            print_json(stdout, device, run, features, paths);
        else
            print_table(stdout, device, run, features, paths);
    }
    flashcl_context_destroy(ctx);
    return rc;
}

void bench_variant_help(FILE *out)
{
    fputs("Variants: with any of these, bench times flash with the features next to plain\n"
          "float32 flash of the same sizes (--backward: the backward pass too) and prints\n"
          "the cost ratio; the standard path supports no variant and is not run.\n"
          "  --dtype f32|f16|bf16    storage type of Q, K, V, O (and the gradients)\n"
          "  --head-dim-v DV         V's head dim (default: --head-dim)\n"
          "  --window L,R            sliding window (-1 = unbounded side)\n"
          "  --softcap C             C*tanh(s/C) on the scores\n"
          "  --alibi                 ALiBi with the standard slopes for --heads\n"
          "  --sinks                 one random sink logit per head\n"
          "  --dropout P             dropout with probability P (seed 1)\n"
          "  --bias                  a random float32 bias [b, h, sq, sk]\n"
          "  --mask                  a random boolean mask [b, h, sq, sk], 90% attend\n"
          "  --block-sparse F        a random block mask with fraction F of blocks skipped,\n"
          "  --block-size B          at B x B blocks\n"
          "  --varlen N              the batch's rows cut into N sequences of unequal length\n"
          "  --no-plain              skip the plain float32 run (no cost ratio)\n"
          "With --backward the passes are fwd, bwd and fwd+bwd (one forward and one backward\n"
          "back to back per call, as a training step; TFLOP/s counts 3.5x the forward).\n",
          out);
}
