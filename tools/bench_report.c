/* Formatting of `bench` results. */
#include "bench_report.h"

#include <math.h>

#include "json_print.h"
#include "plan_print.h"
#include "tool_errors.h"

static double per_second(double amount, double ms)
{
    return ms > 0.0 ? amount / (ms * 1e-3) : NAN;
}

/* standard_ms / flash_ms, or NaN when either did not run. */
static double speedup(const bench_report *r)
{
    const bench_path_report *f = &r->paths[BENCH_FLASH], *s = &r->paths[BENCH_STANDARD];
    if (!f->ran || !s->ran || f->result.ms <= 0.0)
        return NAN;
    return s->result.ms / f->result.ms;
}

/* Why flash and standard were not compared, or NULL when they were. */
static const char *no_comparison_reason(const bench_report *r)
{
    const bench_path_report *s = &r->paths[BENCH_STANDARD];
    if (r->compared)
        return NULL;
    if (s->skipped)
        return "standard was skipped, so there is nothing to compare flash with";
    return "only one path was run";
}

void bench_print_table(FILE *out, const bench_report *r)
{
    const flashcl_attention_desc *d = &r->desc;
    fprintf(out, "device   %s\n", r->device);
    fprintf(out, "problem  batch %zu, heads %zu (kv %zu), seqlen %zu (k %zu), head dim %zu, float32, %s\n",
            d->batch, d->heads_q, d->heads_kv, d->seqlen_q, d->seqlen_k, d->head_dim,
            d->causal ? "causal" : "non-causal");
    roof_print_line(out, &r->roof);
    fprintf(out, "\n%-9s %7s %11s %9s %10s %7s %9s %14s\n", "path", "iters", "ms", "TFLOP/s", "GFLOP/s",
            "%roof", "GB/s", "bytes_extra");
    for (int i = 0; i < BENCH_PATH_COUNT; ++i) {
        const bench_path_report *p = &r->paths[i];
        if (!p->selected)
            continue;
        if (!p->ran) {
            fprintf(out, "%-9s skipped: ", p->name);
            tool_print_one_line(out, p->reason);
            fputc('\n', out);
            continue;
        }
        double ms = p->result.ms;
        char pct[16];
        roof_format_percent(pct, sizeof pct, &r->roof, per_second(r->flops, ms) * 1e-9);
        fprintf(out, "%-9s %7zu %11.4f %9.4f %10.2f %7s %9.2f %14zu\n", p->name, p->result.iters, ms,
                per_second(r->flops, ms) * 1e-12, per_second(r->flops, ms) * 1e-9, pct,
                per_second(r->bytes, ms) * 1e-9, p->bytes_extra);
    }
    fputc('\n', out);
    for (int i = 0; i < BENCH_PATH_COUNT; ++i) {
        const bench_path_report *p = &r->paths[i];
        if (!p->ran)
            continue;
        fprintf(out, "plan %-9s ", p->name);
        plan_print_summary(out, &p->plan);
        fputc('\n', out);
    }
    double ratio = speedup(r);
    if (!isnan(ratio))
        fprintf(out, "speedup  %.2fx (standard ms / flash ms)\n", ratio);
    if (r->compared) {
        const compare_result *c = &r->comparison;
        fprintf(out, "check    max |flash - standard| = %.3g: %s (tolerance %g + %g*|standard|",
                c->max_abs_diff, c->agree ? "agree" : "DISAGREE", BENCH_ATOL, BENCH_RTOL);
        if (!c->agree)
            fprintf(out, "; %zu elements differ, the first at index %zu", c->mismatches,
                    c->first_mismatch);
        fputs(")\n", out);
    } else {
        fprintf(out, "check    not done: %s\n", no_comparison_reason(r));
    }
    fprintf(out, "ms is the mean per call over the timed iterations, enqueued back to back after "
                 "%zu warm-up call%s; GB/s counts only Q, K, V read and O written once.\n",
            r->warmup, r->warmup == 1 ? "" : "s");
}

void bench_json_problem_fields(FILE *out, const char *device, const flashcl_attention_desc *d)
{
    json_key(out, "device", false);
    json_string(out, device);
    json_key(out, "batch", false);
    fprintf(out, "%zu", d->batch);
    json_key(out, "heads", false);
    fprintf(out, "%zu", d->heads_q);
    json_key(out, "kv_heads", false);
    fprintf(out, "%zu", d->heads_kv);
    json_key(out, "seqlen", false);
    fprintf(out, "%zu", d->seqlen_q);
    json_key(out, "seqlen_k", false);
    fprintf(out, "%zu", d->seqlen_k);
    json_key(out, "head_dim", false);
    fprintf(out, "%zu", d->head_dim);
    json_key(out, "causal", false);
    fputs(d->causal ? "true" : "false", out);
    json_key(out, "dtype", false);
    json_string(out, d->dtype == FLASHCL_DTYPE_F16    ? "float16"
                     : d->dtype == FLASHCL_DTYPE_BF16 ? "bfloat16"
                                                      : "float32");
    json_key(out, "head_dim_v", false);
    fprintf(out, "%zu", d->head_dim_v ? d->head_dim_v : d->head_dim);
}

void bench_json_plan_fields(FILE *out, const flashcl_plan *plan)
{
    json_key(out, "kernel", false);
    /* The library fills kernel[] as a string; the copy only guards against a missing NUL. */
    char kernel[sizeof plan->kernel + 1];
    snprintf(kernel, sizeof kernel, "%.*s", (int)sizeof plan->kernel, plan->kernel);
    json_string(out, kernel);
    json_key(out, "block_rows", false);
    fprintf(out, "%d", plan->block_rows);
    json_key(out, "block_cols", false);
    fprintf(out, "%d", plan->block_cols);
    json_key(out, "work_group_size", false);
    fprintf(out, "%zu", plan->work_group_size);
    json_key(out, "staging", false);
    json_string(out, plan_staging_name(plan->staging));
    json_key(out, "local_mem_bytes", false);
    fprintf(out, "%zu", plan->local_mem_bytes);
}

void bench_print_json(FILE *out, const bench_report *r)
{
    for (int i = 0; i < BENCH_PATH_COUNT; ++i) {
        const bench_path_report *p = &r->paths[i];
        if (!p->selected)
            continue;
        fputc('{', out);
        json_key(out, "path", true);
        json_string(out, p->name);
        bench_json_problem_fields(out, r->device, &r->desc);
        if (!p->ran) {
            json_key(out, "skipped", false);
            fputs("true", out);
            json_key(out, "reason", false);
            json_string(out, p->reason);
            fputs("}\n", out);
            continue;
        }
        double ms = p->result.ms;
        json_key(out, "warmup", false);
        fprintf(out, "%zu", r->warmup);
        json_key(out, "iters", false);
        fprintf(out, "%zu", p->result.iters);
        json_key(out, "timing", false);
        json_string(out, "mean");
        json_key(out, "ms", false);
        json_number(out, ms);
        json_key(out, "tflops", false);
        json_number(out, per_second(r->flops, ms) * 1e-12);
        json_key(out, "gflops", false);
        json_number(out, per_second(r->flops, ms) * 1e-9);
        roof_json_fields(out, &r->roof, per_second(r->flops, ms) * 1e-9);
        json_key(out, "gbps", false);
        json_number(out, per_second(r->bytes, ms) * 1e-9);
        json_key(out, "flops", false);
        json_number(out, r->flops);
        json_key(out, "bytes", false);
        json_number(out, r->bytes);
        json_key(out, "bytes_extra", false);
        fprintf(out, "%zu", p->bytes_extra);
        bench_json_plan_fields(out, &p->plan);
        fputs("}\n", out);
    }

    fputc('{', out);
    json_key(out, "path", true);
    json_string(out, "summary");
    roof_json_summary(out, &r->roof);
    json_key(out, "speedup", false);
    json_number(out, speedup(r));
    json_key(out, "max_abs_diff", false);
    if (r->compared)
        json_number(out, r->comparison.max_abs_diff);
    else
        fputs("null", out);
    json_key(out, "agree", false);
    fputs(!r->compared ? "null" : r->comparison.agree ? "true" : "false", out);
    if (r->compared) {
        json_key(out, "mismatches", false);
        fprintf(out, "%zu", r->comparison.mismatches);
    } else {
        json_key(out, "reason", false);
        json_string(out, no_comparison_reason(r));
    }
    fputs("}\n", out);
}
