#include "bench_sweep.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atomic_file.h"
#include "bench_report.h"
#include "json_print.h"
#include "timing.h"
#include "tool_errors.h"

/* One row per path and pass that ran or was skipped: to the CSV, and with --json as an object of the same
   fields (numbers as numbers, NaN as null) into stdout's array; *rows counts the objects so far. */
static void sweep_rows(FILE *csv, FILE *json, size_t *rows, const bench_job *job, const bench_results *r) {
    for (size_t p = 0; p < job->path_count; ++p) {
        const bench_path_result *pr = &r->paths[p];
        for (size_t i = 0; i < job->pass_count; ++i) {
            const bench_pass_result *x = &pr->passes[i];
            if (!x->ran && !x->skipped) continue;
            const double s = x->ran ? x->timing.ms * 1e-3 : NAN;
            /* The pass's kernels: the backward's for "bwd", both for "fwd+bwd". */
            const char *name = job->passes[i]->name;
            char kernel[2 * sizeof pr->fwd_plan.kernel + 2] = "", origin[2 * sizeof pr->fwd_plan.origin + 2] = "";
            if (pr->planned) {
                const int fwd = strcmp(name, "bwd") != 0, bwd = strstr(name, "bwd") != NULL;
                snprintf(kernel, sizeof kernel, "%s%s%s", fwd ? pr->fwd_plan.kernel : "", fwd && bwd ? "+" : "",
                         bwd ? pr->bwd_plan.kernel : "");
                snprintf(origin, sizeof origin, "%s%s%s", fwd ? pr->fwd_plan.origin : "", fwd && bwd ? "+" : "",
                         bwd ? pr->bwd_plan.origin : "");
            }
            const flashcl_attention_desc *d = &job->base;
            const char *status = x->ran ? "ran" : "skipped", *dtype = bench_dtype_name(pr->dtype);
            const double ms = x->ran ? x->timing.ms : NAN, tflops = x->flops / s * 1e-12, gbps = x->bytes / s * 1e-9;
            const size_t dv = pr->head_dim_v ? pr->head_dim_v : d->head_dim;
            /* The storage, KV heads and V's head dim last (columns added after the first sweeps: a reader by
               position of the old ones still reads them). The path's own storage and d_v, as the JSON gives. */
            fprintf(csv, "%zu,%zu,%zu,%zu,%zu,%d,%s,%s,%s,%.6g,%.6g,%.6g,%zu,%s,%s,%s,%zu,%zu\n", d->batch, d->heads_q,
                    d->seqlen_q, d->seqlen_k, d->head_dim, d->causal, job->paths[p].name, name, status, ms, tflops,
                    gbps, x->bytes_extra, kernel, origin, dtype, d->heads_kv, dv);
            if (!json) continue;
            fputs(*rows ? ",\n{" : "[\n{", json);
            ++*rows;
            const struct {
                const char *key;
                size_t value;
            } sizes[] = {{"batch", d->batch},     {"heads", d->heads_q},     {"kv_heads", d->heads_kv},
                         {"seqlen", d->seqlen_q}, {"seqlen_k", d->seqlen_k}, {"head_dim", d->head_dim},
                         {"head_dim_v", dv}};
            json_key(json, sizes[0].key, true);
            fprintf(json, "%zu", sizes[0].value);
            for (size_t k = 1; k < sizeof sizes / sizeof sizes[0]; ++k)
                json_member_size(json, sizes[k].key, sizes[k].value);
            json_member_literal(json, "causal", d->causal ? "true" : "false");
            json_member_string(json, "dtype", dtype);
            json_member_string(json, "path", job->paths[p].name);
            json_member_string(json, "pass", name);
            json_member_string(json, "status", status);
            json_member_number(json, "ms", ms);
            json_member_number(json, "tflops", tflops);
            json_member_number(json, "gbps", gbps);
            json_member_size(json, "bytes_extra", x->bytes_extra);
            json_member_string(json, "kernel", kernel);
            json_member_string(json, "origin", origin);
            fputc('}', json);
        }
    }
}

int bench_sweep(bench_job *job, const bench_sweep_spec *spec) {
    atomic_file json, csv;
    memset(&json, 0, sizeof json);
    memset(&csv, 0, sizeof csv);
    char err[512] = "";
    if (atomic_file_open(&json, spec->json_path, err, sizeof err) != 0 ||
        atomic_file_open(&csv, spec->csv_path, err, sizeof err) != 0) {
        atomic_file_abort(&json);
        return tool_failure("bench --sweep: %s", err);
    }
    fputs("batch,heads,seqlen,seqlen_k,head_dim,causal,path,pass,status,ms,tflops,gbps,bytes_extra,kernel,origin,"
          "dtype,kv_heads,head_dim_v\n",
          csv.stream);
    bench_results *results = calloc(1, sizeof *results);
    int rc = results ? TOOL_EXIT_OK : tool_failure("bench: out of host memory");
    const double growth = spec->keys_only ? 2.0 : 4.0;
    size_t rows = 0; /* objects in stdout's array (--json) */
    for (size_t n = spec->min; n <= spec->max && rc == TOOL_EXIT_OK; n *= 2) {
        job->base.seqlen_k = n;
        if (!spec->keys_only) job->base.seqlen_q = n;
        memset(results, 0, sizeof *results);
        const double t0 = wall_seconds();
        rc = bench_run(job, results);
        if (rc != TOOL_EXIT_OK) break;
        const double took = wall_seconds() - t0;
        if (!spec->json_stdout) bench_print_table(stdout, job, results); /* stdout is the JSON array alone */
        bench_print_json(json.stream, job, results);
        sweep_rows(csv.stream, spec->json_stdout ? stdout : NULL, &rows, job, results);
        fflush(stdout);
        if (n < spec->max && took * growth > spec->max_seconds) {
            fprintf(stderr,
                    "flashcl: bench --sweep: stopping after n=%zu: it took %.1f s, the next would take about "
                    "%.0f s (> --sweep-seconds %.0f)\n",
                    n, took, took * growth, spec->max_seconds);
            break;
        }
    }
    free(results);
    if (spec->json_stdout) fputs(rows ? "\n]\n" : "[]\n", stdout); /* closed even after a failed point */
    if (rc == TOOL_EXIT_OK &&
        (atomic_file_finish(&json, err, sizeof err) != 0 || atomic_file_finish(&csv, err, sizeof err) != 0 ||
         atomic_file_publish(&json, err, sizeof err) != 0 || atomic_file_publish(&csv, err, sizeof err) != 0))
        rc = tool_failure("bench --sweep: %s", err);
    atomic_file_abort(&json);
    atomic_file_abort(&csv);
    if (rc == TOOL_EXIT_OK) fprintf(stderr, "flashcl: wrote %s and %s\n", spec->json_path, spec->csv_path);
    return rc;
}
