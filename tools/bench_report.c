/* Formatting of `bench` results; see bench_report.h. */
#include "bench_report.h"

#include <math.h>
#include <string.h>

#include "device_info.h"
#include "json_print.h"
#include "kv_options.h"
#include "plan_print.h"
#include "tool_errors.h"

static double per_second(double amount, double ms) { return ms > 0.0 ? amount / (ms * 1e-3) : NAN; }

/* Several passes: rows, plans and ratios name their pass. */
static bool several_passes(const bench_job *job) { return job->pass_count > 1; }

/* How bytes_extra is obtained, printed with the results so nobody has to guess. */
static void bytes_extra_source(const bench_job *job, char *buf, size_t size) {
    char order[64] = "";
    for (size_t pass = 0; pass < job->pass_count; ++pass)
        snprintf(order + strlen(order), sizeof order - strlen(order), "%s%s", pass ? ", " : "",
                 job->passes[pass]->name);
    snprintf(buf, size,
             "measured: flashcl_context_scratch_bytes of a fresh context per path, read after each pass%s%s%s",
             several_passes(job) ? " (passes run in the order " : "", several_passes(job) ? order : "",
             several_passes(job) ? ")" : "");
}

/* The plan that describes a pass: the backward's for any pass with a backward call. */
static const flashcl_plan *pass_plan(const bench_path_result *p, const bench_pass *pass) {
    return pass->calls == BENCH_CALLS_FORWARD ? &p->fwd_plan : &p->bwd_plan;
}

/* The scratch the plan query predicts for a pass of one call. A cache call has no plan query (its
   tables and append need scratch of their own), so the plain call's plan predicts nothing for it. */
static bool planned_bytes(const bench_path_result *p, const bench_pass *pass, size_t *out) {
    if (!p->planned || pass->calls == BENCH_CALLS_BOTH || p->cache[0]) return false;
    *out = pass_plan(p, pass)->scratch_bytes;
    return true;
}

/* The name column: wide enough for every path name and a space. */
static int name_width(const bench_job *job) {
    size_t width = strlen("standard");
    for (size_t i = 0; i < job->path_count; ++i)
        width = strlen(job->paths[i].name) > width ? strlen(job->paths[i].name) : width;
    return (int)width + 1;
}

const char *bench_dtype_name(flashcl_dtype dtype) {
    return dtype == FLASHCL_DTYPE_F16 ? "float16" : dtype == FLASHCL_DTYPE_BF16 ? "bfloat16" : "float32";
}

/* ------------------------------------------------------------- table */

static void print_header(FILE *out, const bench_job *job, const bench_results *r) {
    const flashcl_attention_desc *d = &job->base;
    char device[256];
    device_string_into(flashcl_context_device(job->ctx), CL_DEVICE_NAME, device, sizeof device);
    fprintf(out, "device   %s\n", device);
    /* The storage type is the base's float32 unless a path's features (printed below) say otherwise. */
    bool all_f32 = true;
    for (size_t i = 0; i < job->path_count; ++i)
        all_f32 = all_f32 && (r->paths[i].dtype == FLASHCL_DTYPE_DEFAULT || r->paths[i].dtype == FLASHCL_DTYPE_F32);
    fprintf(out, "problem  batch %zu, heads %zu (kv %zu), seqlen %zu (k %zu), head dim %zu, %s%s\n", d->batch,
            d->heads_q, d->heads_kv, d->seqlen_q, d->seqlen_k, d->head_dim, all_f32 ? "float32, " : "",
            d->causal ? "causal" : "non-causal");
    /* Paths with the same features (a cache path and its plain twin) share one line. */
    for (size_t i = 0; i < job->path_count; ++i) {
        bool repeat = false;
        for (size_t j = 0; j < i; ++j) repeat = repeat || strcmp(r->paths[i].features, r->paths[j].features) == 0;
        if (r->paths[i].features[0] && !repeat) fprintf(out, "features %s\n", r->paths[i].features);
    }
    for (size_t i = 0; i < job->path_count; ++i)
        if (r->paths[i].cache[0]) fprintf(out, "cache    %s: %s\n", job->paths[i].name, r->paths[i].cache);
    if (d->num_splits) fprintf(out, "splits   %zu (--num-splits)\n", d->num_splits);
    if (several_passes(job)) {
        fputs("passes  ", out);
        for (size_t pass = 0; pass < job->pass_count; ++pass)
            fprintf(out, "%s %s: %s", pass ? ";" : "", job->passes[pass]->name, job->passes[pass]->summary);
        fputc('\n', out);
    }
    ceiling_print_line(out, &roof_names, job->roof.gflops, job->roof.source);
    if (job->show_bw) ceiling_print_line(out, &read_bw_names, job->read_bw.gbps, job->read_bw.source);
}

static void print_row(FILE *out, const bench_job *job, size_t path, size_t pass, const bench_pass_result *s) {
    int width = name_width(job);
    fprintf(out, "%-*s ", width, job->paths[path].name);
    if (several_passes(job)) fprintf(out, "%-8s ", job->passes[pass]->name);
    if (!s->ran) {
        fputs("skipped: ", out);
        tool_print_one_line(out, s->reason);
        fputc('\n', out);
        return;
    }
    double ms = s->timing.ms, gbps = per_second(s->bytes, ms) * 1e-9;
    char pct[16];
    ceiling_format_percent(pct, sizeof pct, job->roof.gflops, per_second(s->flops, ms) * 1e-9);
    fprintf(out, "%*zu %11.4f %9.4f %10.2f %7s %9.2f", several_passes(job) ? 6 : 7, s->timing.iters, ms,
            per_second(s->flops, ms) * 1e-12, per_second(s->flops, ms) * 1e-9, pct, gbps);
    if (job->show_bw) {
        char bw[16];
        ceiling_format_percent(bw, sizeof bw, job->read_bw.gbps, gbps);
        fprintf(out, " %7s", bw);
    }
    fprintf(out, " %14zu\n", s->bytes_extra);
}

static void print_plans(FILE *out, const bench_job *job, const bench_results *r) {
    int width = name_width(job);
    for (size_t i = 0; i < job->path_count; ++i) {
        const bench_path_result *p = &r->paths[i];
        if (!p->planned) continue;
        fprintf(out, "plan %-*s %s", width, job->paths[i].name, r->training ? "fwd  " : "");
        plan_print_summary(out, &p->fwd_plan);
        if (p->cache[0]) fputs(" (the same call without the cache: a cache call has no plan query)", out);
        fputc('\n', out);
        if (r->training) {
            fprintf(out, "plan %-*s bwd  ", width, job->paths[i].name);
            plan_print_summary(out, &p->bwd_plan);
            fputc('\n', out);
        }
    }
}

/* --kernels: a line per path and pass, each kernel's device time per call. */
static void print_kernels(FILE *out, const bench_job *job, const bench_results *r) {
    int width = name_width(job);
    for (size_t i = 0; i < job->path_count; ++i)
        for (size_t pass = 0; pass < job->pass_count; ++pass) {
            const bench_pass_result *s = &r->paths[i].passes[pass];
            if (!s->kernels.measured) continue;
            fprintf(out, "kernels %-*s %-8s ", width, job->paths[i].name, job->passes[pass]->name);
            bench_kernels_print(out, &s->kernels);
            fputc('\n', out);
        }
}

static void print_ratios(FILE *out, const bench_job *job, const bench_results *r) {
    for (size_t pass = 0; pass < job->pass_count; ++pass) {
        double ratio = bench_ratio_value(job, r, pass);
        if (isnan(ratio)) continue;
        fprintf(out, "%-8s ", job->ratio.name);
        if (several_passes(job)) fprintf(out, "%-8s ", job->passes[pass]->name);
        const char *n = job->paths[job->ratio.numerator].name, *d = job->paths[job->ratio.denominator].name;
        fprintf(out, "%.2fx (%s ms / %s ms)", ratio, n, d);
        /* Same keys in both: the inverse is how much faster one attends to them (decode's token rate). */
        if (job->ratio.key_rate) fprintf(out, "; %s's key rate is %.2fx %s's", n, 1.0 / ratio, d);
        fputc('\n', out);
    }
}

static void print_check(FILE *out, const bench_job *job, const bench_results *r) {
    const bench_check *c = &r->check;
    if (!c->done) {
        fprintf(out, "check    not done: %s\n", c->reason);
        return;
    }
    const char *a = job->paths[0].name, *b = job->paths[1].name;
    for (size_t t = 0; t < c->count; ++t) {
        const compare_result *x = &c->results[t];
        fputs("check    ", out);
        if (c->count > 1) fprintf(out, "%s  ", c->names[t]);
        fprintf(out, "max |%s - %s| = %.3g: %s", a, b, x->max_abs_diff, x->agree ? "agree" : "DISAGREE");
        if (c->count == 1)
            fprintf(out, " (tolerance %g + %g*|%s|%s", BENCH_ATOL, BENCH_RTOL, b, x->agree ? ")" : "; ");
        else if (!x->agree)
            fputs(" (", out);
        if (!x->agree) fprintf(out, "%zu elements differ, the first at index %zu)", x->mismatches, x->first_mismatch);
        fputc('\n', out);
    }
    if (c->count > 1)
        fprintf(out, "         after the last pass, from the same random inputs; tolerance %g + %g*|%s|\n", BENCH_ATOL,
                BENCH_RTOL, b);
}

static void print_footnotes(FILE *out, const bench_job *job, const bench_results *r) {
    char source[256];
    bytes_extra_source(job, source, sizeof source);
    fprintf(out, "bytes_extra is %s", source);
    const char *sep = ". The plan queries predict";
    for (size_t i = 0; i < job->path_count; ++i) {
        for (size_t pass = 0; pass < job->pass_count; ++pass) {
            size_t planned;
            if (planned_bytes(&r->paths[i], job->passes[pass], &planned)) {
                fprintf(out, "%s %zu for %s %s", sep, planned, job->paths[i].name, job->passes[pass]->name);
                sep = ",";
            }
        }
    }
    fputs(".\nms is the mean per call", out);
    for (size_t pass = 0; pass < job->pass_count; ++pass)
        if (job->passes[pass]->calls == BENCH_CALLS_BOTH)
            fprintf(out, " (per forward+backward pair for %s)", job->passes[pass]->name);
    fprintf(out, " over the timed iterations, enqueued back to back after %zu warm-up call%s. ", job->settings.warmup,
            job->settings.warmup == 1 ? "" : "s");
    fputs("TFLOP/s counts the forward as 4*b*hq*sq*sk*d (2*(d + d_v) per query-key pair of each sequence, halved "
          "when causal; masked and skipped pairs count too)",
          out);
    if (r->training) fprintf(out, ", the backward as %g times that", BENCH_BWD_FLOP_RATIO);
    fputs("; GB/s counts each tensor a pass reads or writes once (Q, K, V, O and, for the backward, LSE, dO and the "
          "gradients; not the variants' inputs",
          out);
    for (size_t i = 0; i < job->path_count; ++i)
        if (job->paths[i].cache != NULL) {
            fputs("; a cache's K and V at its element size, the rows in use only, its tables not counted", out);
            break;
        }
    fputs(").\n", out);
}

void bench_print_table(FILE *out, const bench_job *job, const bench_results *r) {
    print_header(out, job, r);
    int width = name_width(job);
    fprintf(out, "\n%-*s ", width, "path");
    if (several_passes(job))
        fprintf(out, "%-8s %6s", "pass", "iters");
    else
        fprintf(out, "%7s", "iters");
    fprintf(out, " %11s %9s %10s %7s %9s", "ms", "TFLOP/s", "GFLOP/s", "%roof", "GB/s");
    if (job->show_bw) fprintf(out, " %7s", "%bw");
    fprintf(out, " %14s\n", "bytes_extra");
    for (size_t i = 0; i < job->path_count; ++i)
        for (size_t pass = 0; pass < job->pass_count; ++pass) print_row(out, job, i, pass, &r->paths[i].passes[pass]);
    fputc('\n', out);
    print_plans(out, job, r);
    print_kernels(out, job, r);
    print_ratios(out, job, r);
    print_check(out, job, r);
    print_footnotes(out, job, r);
}

/* ------------------------------------------------------------- JSON */

/* device, batch, heads, kv_heads, seqlen, seqlen_k, head_dim, causal, dtype, head_dim_v, num_splits,
   cache, page_size, cache_dtype */
static void json_problem_fields(FILE *out, const char *device, const flashcl_attention_desc *d, const bench_path *path,
                                const bench_path_result *p) {
    json_member_string(out, "device", device);
    const struct {
        const char *key;
        size_t value;
    } sizes[] = {{"batch", d->batch},     {"heads", d->heads_q},     {"kv_heads", d->heads_kv},
                 {"seqlen", d->seqlen_q}, {"seqlen_k", d->seqlen_k}, {"head_dim", d->head_dim}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) json_member_size(out, sizes[i].key, sizes[i].value);
    json_member_literal(out, "causal", d->causal ? "true" : "false");
    json_member_string(out, "dtype", bench_dtype_name(p->dtype));
    json_member_size(out, "head_dim_v", p->head_dim_v ? p->head_dim_v : d->head_dim);
    json_member_size(out, "num_splits", d->num_splits);
    const bench_cache_spec *cache = path->cache;
    json_member_string(out, "cache", cache == NULL ? "none" : cache->page_size ? "paged" : "contiguous");
    json_member_size(out, "page_size", cache != NULL ? cache->page_size : 0);
    json_member_string(out, "cache_dtype", cache != NULL ? kv_cache_dtype_name(cache->dtype) : "none");
}

/* The library fills the plan's strings; the copy only guards against a missing NUL. */
static void json_plan_string(FILE *out, const char *key, const char *field, size_t size) {
    char text[256];
    snprintf(text, sizeof text, "%.*s", (int)(size < sizeof text ? size : sizeof text - 1), field);
    json_member_string(out, key, text);
}

/* kernel, block_rows, block_cols, work_group_size, staging, local_mem_bytes */
static void json_plan_fields(FILE *out, const flashcl_plan *plan) {
    json_plan_string(out, "kernel", plan->kernel, sizeof plan->kernel);
    json_member_number(out, "block_rows", plan->block_rows);
    json_member_number(out, "block_cols", plan->block_cols);
    json_member_size(out, "work_group_size", plan->work_group_size);
    json_member_string(out, "staging", plan_staging_name(plan->staging));
    json_member_size(out, "local_mem_bytes", plan->local_mem_bytes);
}

static void print_pass_json(FILE *out, const bench_job *job, const char *device, size_t path, size_t pass,
                            const bench_path_result *p) {
    const bench_pass *kind = job->passes[pass];
    const bench_pass_result *s = &p->passes[pass];
    fputc('{', out);
    json_key(out, "path", true);
    json_string(out, job->paths[path].name);
    json_member_string(out, "pass", kind->name);
    json_problem_fields(out, device, &job->base, &job->paths[path], p);
    json_member_string(out, "features", p->features);
    if (!s->ran) {
        json_member_literal(out, "skipped", "true");
        json_member_string(out, "reason", s->reason);
        fputs("}\n", out);
        return;
    }
    double ms = s->timing.ms;
    json_member_size(out, "warmup", job->settings.warmup);
    json_member_size(out, "iters", s->timing.iters);
    json_member_string(out, "timing", "mean");
    json_member_number(out, "ms", ms);
    json_member_number(out, "tflops", per_second(s->flops, ms) * 1e-12);
    json_member_number(out, "gflops", per_second(s->flops, ms) * 1e-9);
    ceiling_json_fields(out, &roof_names, job->roof.gflops, per_second(s->flops, ms) * 1e-9);
    json_member_number(out, "gbps", per_second(s->bytes, ms) * 1e-9);
    ceiling_json_fields(out, &read_bw_names, job->read_bw.gbps, per_second(s->bytes, ms) * 1e-9);
    json_member_number(out, "flops", s->flops);
    json_member_number(out, "bytes", s->bytes);
    json_member_size(out, "bytes_extra", s->bytes_extra);
    json_member_string(out, "bytes_extra_source", "measured");
    size_t planned;
    if (planned_bytes(p, kind, &planned))
        json_member_size(out, "planned_bytes_extra", planned);
    else
        json_member_literal(out, "planned_bytes_extra", "null");
    const flashcl_plan *plan = pass_plan(p, kind);
    json_plan_fields(out, plan);
    /* A pass with a backward names the backward's kernel; "fwd_kernel" keeps the forward's. */
    if (plan != &p->fwd_plan) json_plan_string(out, "fwd_kernel", p->fwd_plan.kernel, sizeof p->fwd_plan.kernel);
    json_plan_string(out, "origin", plan->origin, sizeof plan->origin);
    if (s->kernels.measured) bench_kernels_json(out, &s->kernels);
    fputs("}\n", out);
}

/* One value per pass: a number with one pass, else {"fwd": ..., "bwd": ...}. */
static void json_ratio(FILE *out, const bench_job *job, const bench_results *r) {
    json_key(out, job->ratio.name, false);
    if (!several_passes(job)) {
        json_number(out, bench_ratio_value(job, r, 0));
        return;
    }
    fputc('{', out);
    for (size_t pass = 0; pass < job->pass_count; ++pass) {
        json_key(out, job->passes[pass]->name, pass == 0);
        json_number(out, bench_ratio_value(job, r, pass));
    }
    fputc('}', out);
}

/* One value per compared tensor: a number for one, else {"dq": ..., ...}; mismatches with count. */
static void json_check_member(FILE *out, const bench_check *c, const char *key, bool mismatches) {
    json_key(out, key, false);
    if (c->count > 1) fputc('{', out);
    for (size_t t = 0; t < c->count; ++t) {
        if (c->count > 1) json_key(out, c->names[t], t == 0);
        if (mismatches)
            fprintf(out, "%zu", c->results[t].mismatches);
        else
            json_number(out, c->results[t].max_abs_diff);
    }
    if (c->count > 1) fputc('}', out);
}

void bench_print_json(FILE *out, const bench_job *job, const bench_results *r) {
    char device[256];
    device_string_into(flashcl_context_device(job->ctx), CL_DEVICE_NAME, device, sizeof device);
    for (size_t i = 0; i < job->path_count; ++i)
        for (size_t pass = 0; pass < job->pass_count; ++pass) print_pass_json(out, job, device, i, pass, &r->paths[i]);

    const bench_check *c = &r->check;
    fputc('{', out);
    json_key(out, "path", true);
    json_string(out, "summary");
    ceiling_json_summary(out, &roof_names, job->roof.gflops, job->roof.source);
    ceiling_json_summary(out, &read_bw_names, job->read_bw.gbps, job->read_bw.source);
    for (size_t i = 0; i < job->path_count; ++i) {
        if (r->paths[i].features[0]) {
            json_member_string(out, "features", r->paths[i].features);
            break;
        }
    }
    if (job->ratio.name != NULL) json_ratio(out, job, r);
    if (job->ratio.key_rate && !several_passes(job)) {
        double ratio = bench_ratio_value(job, r, 0);
        json_member_number(out, "key_rate_ratio", ratio > 0.0 ? 1.0 / ratio : NAN);
    }
    for (size_t i = 0; i < job->path_count; ++i) {
        if (r->paths[i].cache[0]) {
            json_member_string(out, "cache_description", r->paths[i].cache);
            break;
        }
    }
    json_member_literal(out, "agree", !c->done ? "null" : bench_check_agrees(c) ? "true" : "false");
    if (c->done) {
        json_check_member(out, c, "max_abs_diff", false);
        json_check_member(out, c, "mismatches", true);
    } else {
        json_member_literal(out, "max_abs_diff", "null");
        json_member_string(out, "reason", c->reason);
    }
    char source[256];
    bytes_extra_source(job, source, sizeof source);
    json_member_string(out, "bytes_extra_source", source);
    fputs("}\n", out);
}
