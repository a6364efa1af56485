/* Formatting of `bench --backward` results; see bench_backward_report.h. */
#include "bench_backward_report.h"

#include <math.h>

#include "json_print.h"
#include "plan_print.h"
#include "tool_errors.h"

/* How bytes_extra was obtained, printed with the results so nobody has to guess. */
static const char bytes_extra_source[] =
    "measured: flashcl_context_scratch_bytes of a fresh context per path, read after each "
    "pass (passes run in the order fwd, bwd, fwd+bwd)";

const char *bench_pass_name(int pass)
{
    static const char *const names[BENCH_PASS_COUNT] = {"fwd", "bwd", "fwd+bwd"};
    return pass >= 0 && pass < BENCH_PASS_COUNT ? names[pass] : "?";
}

const char *bench_grad_name(int grad)
{
    static const char *const names[BENCH_GRAD_COUNT] = {"dq", "dk", "dv"};
    return grad >= 0 && grad < BENCH_GRAD_COUNT ? names[grad] : "?";
}

bool bench_backward_agree(const bench_backward_report *r)
{
    for (int g = 0; r->compared && g < BENCH_GRAD_COUNT; ++g)
        if (!r->grads[g].agree)
            return false;
    return true;
}

static double per_second(double amount, double ms)
{
    return ms > 0.0 ? amount / (ms * 1e-3) : NAN;
}

/* standard ms / flash ms for one pass, or NaN when either did not run. */
static double speedup(const bench_backward_report *r, int pass)
{
    const bench_pass_report *f = &r->paths[BENCH_FLASH].passes[pass];
    const bench_pass_report *s = &r->paths[BENCH_STANDARD].passes[pass];
    if (!f->ran || !s->ran || f->result.ms <= 0.0)
        return NAN;
    return s->result.ms / f->result.ms;
}

/* Why the gradients were not compared, or NULL when they were. */
static const char *no_comparison_reason(const bench_backward_report *r)
{
    if (r->compared)
        return NULL;
    if (r->paths[BENCH_STANDARD].selected && r->paths[BENCH_FLASH].selected)
        return "standard was skipped, so there are no gradients to compare flash's with";
    return "only one path was run";
}

/* The planned scratch of a pass: only the single calls have a plan query. */
static bool planned_bytes(const bench_backward_path *p, int pass, size_t *out)
{
    if (!p->planned || pass == BENCH_PASS_FWD_BWD)
        return false;
    *out = pass == BENCH_PASS_FWD ? p->fwd_plan.scratch_bytes : p->bwd_plan.scratch_bytes;
    return true;
}

static void print_pass_row(FILE *out, const bench_backward_report *r, const bench_backward_path *p,
                           int pass)
{
    const bench_pass_report *s = &p->passes[pass];
    if (!s->ran) {
        fprintf(out, "%-9s %-8s skipped: ", p->name, bench_pass_name(pass));
        tool_print_one_line(out, s->reason);
        fputc('\n', out);
        return;
    }
    double ms = s->result.ms;
    char pct[16];
    roof_format_percent(pct, sizeof pct, &r->roof, per_second(r->flops[pass], ms) * 1e-9);
    fprintf(out, "%-9s %-8s %6zu %11.4f %9.4f %10.2f %7s %9.2f %14zu\n", p->name,
            bench_pass_name(pass), s->result.iters, ms, per_second(r->flops[pass], ms) * 1e-12,
            per_second(r->flops[pass], ms) * 1e-9, pct, per_second(r->bytes[pass], ms) * 1e-9,
            s->bytes_extra);
}

static void print_checks(FILE *out, const bench_backward_report *r)
{
    if (!r->compared) {
        fprintf(out, "check    not done: %s\n", no_comparison_reason(r));
        return;
    }
    for (int g = 0; g < BENCH_GRAD_COUNT; ++g) {
        const compare_result *c = &r->grads[g];
        fprintf(out, "check    %s  max |flash - standard| = %.3g: %s", bench_grad_name(g),
                c->max_abs_diff, c->agree ? "agree" : "DISAGREE");
        if (!c->agree)
            fprintf(out, " (%zu elements differ, the first at index %zu)", c->mismatches,
                    c->first_mismatch);
        fputc('\n', out);
    }
    fprintf(out, "         gradients after fwd+bwd, from the same random dO; tolerance %g + "
                 "%g*|standard|\n",
            BENCH_ATOL, BENCH_RTOL);
}

void bench_backward_print_table(FILE *out, const bench_backward_report *r)
{
    const flashcl_attention_desc *d = &r->desc;
    fprintf(out, "device   %s\n", r->device);
    fprintf(out,
            "problem  batch %zu, heads %zu (kv %zu), seqlen %zu (k %zu), head dim %zu, float32, "
            "%s\n",
            d->batch, d->heads_q, d->heads_kv, d->seqlen_q, d->seqlen_k, d->head_dim,
            d->causal ? "causal" : "non-causal");
    fprintf(out, "passes   fwd: forward writing O and LSE; bwd: backward from a random dO to dQ, "
                 "dK, dV; fwd+bwd: both, back to back\n");
    roof_print_line(out, &r->roof);
    fprintf(out, "\n%-9s %-8s %6s %11s %9s %10s %7s %9s %14s\n", "path", "pass", "iters", "ms",
            "TFLOP/s", "GFLOP/s", "%roof", "GB/s", "bytes_extra");
    for (int i = 0; i < BENCH_PATH_COUNT; ++i) {
        const bench_backward_path *p = &r->paths[i];
        for (int pass = 0; p->selected && pass < BENCH_PASS_COUNT; ++pass)
            print_pass_row(out, r, p, pass);
    }
    fputc('\n', out);
    for (int i = 0; i < BENCH_PATH_COUNT; ++i) {
        const bench_backward_path *p = &r->paths[i];
        if (!p->selected || !p->planned)
            continue;
        fprintf(out, "plan %-9s fwd  ", p->name);
        plan_print_summary(out, &p->fwd_plan);
        fprintf(out, "\nplan %-9s bwd  ", p->name);
        plan_print_summary(out, &p->bwd_plan);
        fputc('\n', out);
    }
    for (int pass = 0; pass < BENCH_PASS_COUNT; ++pass) {
        double ratio = speedup(r, pass);
        if (!isnan(ratio))
            fprintf(out, "speedup  %-8s %.2fx (standard ms / flash ms)\n", bench_pass_name(pass),
                    ratio);
    }
    print_checks(out, r);
    fprintf(out, "bytes_extra is %s.", bytes_extra_source);
    const char *sep = " flashcl_backward_plan_query plans";
    for (int i = 0; i < BENCH_PATH_COUNT; ++i) {
        const bench_backward_path *p = &r->paths[i];
        size_t planned;
        if (p->selected && planned_bytes(p, BENCH_PASS_BWD, &planned)) {
            fprintf(out, "%s %zu for %s bwd", sep, planned, p->name);
            sep = ",";
        }
    }
    if (sep[0] == ',')
        fputc('.', out);
    fprintf(out, "\nms is the mean per call (per forward+backward pair for fwd+bwd) over the timed "
                 "iterations, enqueued back to back after %zu warm-up call%s. TFLOP/s counts the "
                 "forward as 4*b*hq*sq*sk*d (halved when causal), the backward as %g times that; "
                 "GB/s counts each tensor a pass reads or writes once.\n",
            r->warmup, r->warmup == 1 ? "" : "s", BENCH_BWD_FLOP_RATIO);
}

static void print_pass_json(FILE *out, const bench_backward_report *r, const bench_backward_path *p,
                            int pass)
{
    const bench_pass_report *s = &p->passes[pass];
    fputc('{', out);
    json_key(out, "path", true);
    json_string(out, p->name);
    json_key(out, "pass", false);
    json_string(out, bench_pass_name(pass));
    bench_json_problem_fields(out, r->device, &r->desc);
    if (!s->ran) {
        json_key(out, "skipped", false);
        fputs("true", out);
        json_key(out, "reason", false);
        json_string(out, s->reason);
        fputs("}\n", out);
        return;
    }
    double ms = s->result.ms;
    json_key(out, "warmup", false);
    fprintf(out, "%zu", r->warmup);
    json_key(out, "iters", false);
    fprintf(out, "%zu", s->result.iters);
    json_key(out, "timing", false);
    json_string(out, "mean");
    json_key(out, "ms", false);
    json_number(out, ms);
    json_key(out, "tflops", false);
    json_number(out, per_second(r->flops[pass], ms) * 1e-12);
    json_key(out, "gflops", false);
    json_number(out, per_second(r->flops[pass], ms) * 1e-9);
    roof_json_fields(out, &r->roof, per_second(r->flops[pass], ms) * 1e-9);
    json_key(out, "gbps", false);
    json_number(out, per_second(r->bytes[pass], ms) * 1e-9);
    json_key(out, "flops", false);
    json_number(out, r->flops[pass]);
    json_key(out, "bytes", false);
    json_number(out, r->bytes[pass]);
    json_key(out, "bytes_extra", false);
    fprintf(out, "%zu", s->bytes_extra);
    json_key(out, "bytes_extra_source", false);
    json_string(out, "measured");
    json_key(out, "planned_bytes_extra", false);
    size_t planned;
    if (planned_bytes(p, pass, &planned))
        fprintf(out, "%zu", planned);
    else
        fputs("null", out);
    if (pass != BENCH_PASS_FWD_BWD && p->planned)
        bench_json_plan_fields(out, pass == BENCH_PASS_FWD ? &p->fwd_plan : &p->bwd_plan);
    fputs("}\n", out);
}

void bench_backward_print_json(FILE *out, const bench_backward_report *r)
{
    for (int i = 0; i < BENCH_PATH_COUNT; ++i) {
        const bench_backward_path *p = &r->paths[i];
        for (int pass = 0; p->selected && pass < BENCH_PASS_COUNT; ++pass)
            print_pass_json(out, r, p, pass);
    }

    fputc('{', out);
    json_key(out, "path", true);
    json_string(out, "summary");
    roof_json_summary(out, &r->roof);
    json_key(out, "speedup", false);
    fputc('{', out);
    for (int pass = 0; pass < BENCH_PASS_COUNT; ++pass) {
        json_key(out, bench_pass_name(pass), pass == 0);
        json_number(out, speedup(r, pass));
    }
    fputc('}', out);
    json_key(out, "agree", false);
    fputs(!r->compared ? "null" : bench_backward_agree(r) ? "true" : "false", out);
    if (r->compared) {
        static const char *const members[2] = {"max_abs_diff", "mismatches"};
        for (int m = 0; m < 2; ++m) {
            json_key(out, members[m], false);
            fputc('{', out);
            for (int g = 0; g < BENCH_GRAD_COUNT; ++g) {
                json_key(out, bench_grad_name(g), g == 0);
                if (m == 0)
                    json_number(out, r->grads[g].max_abs_diff);
                else
                    fprintf(out, "%zu", r->grads[g].mismatches);
            }
            fputc('}', out);
        }
    } else {
        json_key(out, "reason", false);
        json_string(out, no_comparison_reason(r));
    }
    json_key(out, "bytes_extra_source", false);
    json_string(out, bytes_extra_source);
    fputs("}\n", out);
}
