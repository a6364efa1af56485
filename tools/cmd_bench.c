/*
 * `flashcl bench`: the options, and the modes they select. A mode turns the
 * options into a job for the one runner (bench_runner.h): which paths, which
 * passes, which ratio, whether outputs are checked. Adding a mode is adding
 * an entry to `modes` and the function that fills its job.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flashcl.h>

#include "atomic_file.h"
#include "bench_report.h"
#include "bench_runner.h"
#include "bench_sweep.h"
#include "commands.h"
#include "kv_options.h"
#include "options.h"
#include "read_bandwidth.h"
#include "roof.h"
#include "tool_errors.h"
#include "variant_options.h"

void cmd_bench_help(FILE *out) {
    fputs("usage: flashcl bench [--batch B] [--heads H] [--kv-heads HKV] [--seqlen N]\n"
          "                     [--seqlen-k NK] [--head-dim D] [--causal] [--iters I]\n"
          "                     [--warmup W] [--path flash|standard|both] [--device SPEC]\n"
          "                     [--backward] [--roof GFLOPS] [--read-bw GBPS|measure|off]\n"
          "                     [--page-size P | --kv-cache] [--cache-dtype T] [--num-splits N]\n"
          "                     [--kernels] [--json] [--sweep [--sweep-min N] [--sweep-max N]\n"
          "                     [--sweep-seconds S] [--sweep-out PREFIX]] [variant options, below]\n"
          "\n"
          "Times FlashCL's flash kernel and the standard attention (S and P through\n"
          "global memory) on the same random float32 inputs (uniform in [-1, 1],\n"
          "packed [b, s, h, d]), then checks that their outputs agree\n"
          "(|flash - standard| <= 1e-3 + 1e-2*|standard|).\n"
          "\n"
          "  --batch B        default 1\n"
          "  --heads H        query heads, default 8\n"
          "  --kv-heads HKV   key/value heads, default H; H must be a multiple\n"
          "  --seqlen N       query length, default 2048\n"
          "  --seqlen-k NK    key length, default N\n"
          "  --head-dim D     default 64, at most 576 (FLASHCL_MAX_HEAD_DIM)\n"
          "  --causal         bottom-right aligned causal mask\n"
          "  --iters I        timed calls per path and pass; 0 (default) picks enough for\n"
          "                   about one second, from 1 to 1000\n"
          "  --warmup W       untimed calls first, default 1 (the first builds kernels)\n"
          "  --path P         flash, standard or both (default)\n"
          "  --device SPEC    \"P:D\" from `flashcl info`, or part of the device's or its\n"
          "                   platform's name or vendor\n"
          "  --backward       time the backward pass as well; see below\n"
          "  --roof GFLOPS    the rate %roof divides by; default on a CPU device: OpenBLAS\n"
          "                   SGEMM 2048^3 measured at the start (when built with it)\n"
          "  --read-bw R      the read bandwidth %bw divides by: GBPS, 'measure' or 'off';\n"
          "                   default: measured for decode shapes (seqlen <= 16) and caches\n"
          "  --kernels        after timing each pass, trace 5 more calls on a queue with\n"
          "                   profiling and print each kernel's device time per call\n"
          "                   (where the time goes: the backward's D, dK/dV and dQ\n"
          "                   kernels, decode's split and merge); the timed calls run\n"
          "                   on the usual queue, untraced\n"
          "  --json           one JSON object per line: one per path and pass, then a\n"
          "                   summary\n"
          "  --sweep          the run at each power of two of seqlen from --sweep-min\n"
          "                   (256) to --sweep-max (65536); for a decode shape (seqlen\n"
          "                   <= 16) of seqlen-k alone. Writes PREFIX.json (the --json\n"
          "                   lines of every point) and PREFIX.csv (--sweep-out PREFIX,\n"
          "                   default bench-sweep); stops before a point that would take\n"
          "                   more than --sweep-seconds (120), judged from the last one;\n"
          "                   with --json, stdout is a JSON array of the CSV's rows (one\n"
          "                   object each) instead of the tables\n"
          "\n"
          "ms is the mean wall-clock time per call, calls enqueued back to back.\n"
          "TFLOP/s counts 4*b*hq*sq*sk*d flops (halved when causal); GB/s counts the\n"
          "minimum traffic, each tensor a pass reads or writes once, for every path alike;\n"
          "bytes_extra is the device memory a path holds beyond inputs and outputs,\n"
          "measured: flashcl_context_scratch_bytes of a context of the path's own, read\n"
          "after each pass (flash's grows with N, standard's with N^2). When the standard\n"
          "path cannot allocate its seqlen x seqlen buffers it is skipped and flash still\n"
          "runs.\n"
          "\n"
          "With --backward, each path is timed in three passes: fwd (the forward,\n"
          "writing O and LSE), bwd (the backward from a random dO, uniform in [-1, 1],\n"
          "to dQ, dK, dV) and fwd+bwd (both back to back; ms per pair). TFLOP/s counts\n"
          "the backward as 2.5 times the forward's flops and fwd+bwd as 3.5 times, as\n"
          "FlashAttention does. The gradients of the last fwd+bwd are checked like the\n"
          "outputs above, and the speedup (standard ms / flash ms) is given for each pass.\n"
          "\n"
          "Decode (seqlen <= 16 runs the library's split-KV decode family): bench first\n"
          "measures the device's read bandwidth with a read kernel of its own (a buffer\n"
          "of max(1 GiB GPU / 256 MiB CPU, 4x the last-level cache) summed once per call,\n"
          "calls back to back, best of 5 runs) and adds %bw = GB/s / that rate. Decode\n"
          "reads each key and value once, so %bw is how close it runs to the memory.\n"
          "\n"
          "With a KV-cache option (--page-size, --kv-cache, an fp8 --cache-dtype), bench\n"
          "times flashcl_forward_kvcache on a cache holding the same keys and values\n"
          "(\"kvcache\": every sequence full, no append) next to plain flashcl_forward\n"
          "on contiguous K and V (\"flash\", skipped by --no-plain), checks that they\n"
          "agree (not for fp8, which quantises), and prints the cost (kvcache ms / flash\n"
          "ms) with its inverse, the cache call's key (token) rate against flash's. GB/s\n"
          "counts Q, K and V at the cache's element size (1 byte for fp8) and O, once:\n"
          "the same bytes for a paged cache as for a contiguous one. Variant options\n"
          "apply to both (--dtype bf16 for a bf16 cache); --backward does not apply.\n"
          "\n"
          "With any variant option, bench times flash with the features (\"flash+variants\")\n"
          "next to plain float32 flash of the same sizes and prints the cost ratio\n"
          "(flash+variants ms / flash ms); the standard path supports no variant and is\n"
          "not run. Its data options take a file as in `flashcl attention`, or the word\n"
          "that makes the data.\n"
          "  --head-dim-v DV        V's head dim (default: --head-dim)\n"
          "  --no-plain             skip the plain float32 run (no cost ratio); with a\n"
          "                         cache, skip the plain flashcl_forward\n",
          out);
    variant_help(out);
    fputc('\n', out);
    kv_help(out, KV_FOR_BENCH);
    fputs("\nExit status: 0 success; 1 a failure or the paths disagree; 2 bad option.\n", out);
}

typedef struct bench_args {
    size_t batch, heads, kv_heads, seqlen, seqlen_k, head_dim, iters, warmup;
    size_t path; /* index in path_choices */
    bool causal, json, backward, no_plain, kernels;
    float roof_gflops; /* --roof; 0: measure on a CPU device */
    const char *device;
    variant_options var;
    kv_options kv;
    bench_cache_spec cache_spec; /* from kv, for the cache path */
    size_t read_bw;              /* index in read_bw_choices, or READ_BW_GIVEN */
    bool sweep;                  /* --sweep: seqlen over powers of two (bench_sweep.h) */
    size_t sweep_min, sweep_max;
    size_t sweep_seconds;
    const char *sweep_out;    /* PREFIX of PREFIX.json and PREFIX.csv */
    const char *sweep_option; /* the last --sweep-* option given (refused without --sweep) */
    double read_bw_gbps;      /* --read-bw GBPS */
} bench_args;

static const char *const read_bw_choices[] = {"auto", "measure", "off"};
enum { READ_BW_AUTO, READ_BW_MEASURE, READ_BW_OFF, READ_BW_GIVEN };

/* The seqlen_q up to which flashcl_forward runs the decode family (include/flashcl.h, num_splits). */
#define BENCH_DECODE_MAX_SEQLEN_Q 16

static const char *const path_choices[] = {"flash", "standard", "both"};
enum { CHOICE_FLASH, CHOICE_STANDARD, CHOICE_BOTH };

/* Generous bounds: the library checks what actually fits. */
#define BENCH_MAX_BATCH ((size_t)1 << 20)
#define BENCH_MAX_HEADS ((size_t)1 << 16)
#define BENCH_MAX_SEQLEN ((size_t)1 << 26)
#define BENCH_MAX_ITERS ((size_t)1 << 24)

/* "measure", "off" or a rate in GB/s > 0. */
static int parse_read_bw(option_cursor *c, bench_args *a) {
    const char *text;
    if (!options_value_expecting(c, "GBPS, 'measure' or 'off'", &text)) return -1;
    for (size_t i = 1; i < sizeof read_bw_choices / sizeof read_bw_choices[0]; ++i) {
        if (strcmp(text, read_bw_choices[i]) == 0) {
            a->read_bw = i;
            return 1;
        }
    }
    char *end = NULL;
    errno = 0;
    double gbps = strtod(text, &end);
    if (text[0] < '0' || text[0] > '9' || *end != '\0' || errno == ERANGE || !isfinite(gbps) || gbps <= 0.0) {
        tool_usage_error("--read-bw: expected a rate in GB/s > 0, 'measure' or 'off', got '%s'", text);
        return -1;
    }
    a->read_bw = READ_BW_GIVEN;
    a->read_bw_gbps = gbps;
    return 1;
}

/* The options of bench's own, not the shared variant and KV-cache options: 1 taken, 0 not one, -1 bad value. */
static int parse_bench_option(option_cursor *c, bench_args *a) {
    const struct {
        const char *name;
        size_t min, max, *value;
    } sizes[] = {{"--batch", 1, BENCH_MAX_BATCH, &a->batch},
                 {"--heads", 1, BENCH_MAX_HEADS, &a->heads},
                 {"--kv-heads", 1, BENCH_MAX_HEADS, &a->kv_heads},
                 {"--seqlen", 1, BENCH_MAX_SEQLEN, &a->seqlen},
                 {"--seqlen-k", 1, BENCH_MAX_SEQLEN, &a->seqlen_k},
                 {"--head-dim", 1, FLASHCL_MAX_HEAD_DIM, &a->head_dim},
                 {"--head-dim-v", 1, FLASHCL_MAX_HEAD_DIM, &a->var.head_dim_v},
                 {"--iters", 0, BENCH_MAX_ITERS, &a->iters},
                 {"--sweep-min", 1, BENCH_MAX_SEQLEN, &a->sweep_min},
                 {"--sweep-max", 1, BENCH_MAX_SEQLEN, &a->sweep_max},
                 {"--sweep-seconds", 1, 86400, &a->sweep_seconds},
                 {"--warmup", 0, BENCH_MAX_ITERS, &a->warmup}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
        if (options_is(c, sizes[i].name)) {
            if (strncmp(sizes[i].name, "--sweep-", 8) == 0) a->sweep_option = sizes[i].name;
            return options_size(c, sizes[i].min, sizes[i].max, sizes[i].value) ? 1 : -1;
        }
    bool *flag = options_is(c, "--causal")     ? &a->causal
                 : options_is(c, "--json")     ? &a->json
                 : options_is(c, "--backward") ? &a->backward
                 : options_is(c, "--no-plain") ? &a->no_plain
                 : options_is(c, "--kernels")  ? &a->kernels
                 : options_is(c, "--sweep")    ? &a->sweep
                                               : NULL;
    if (flag != NULL) {
        *flag = true;
        return options_flag(c) ? 1 : -1;
    }
    if (options_is(c, "--roof")) return options_float(c, 0.0f, &a->roof_gflops) ? 1 : -1;
    if (options_is(c, "--path"))
        return options_choice(c, path_choices, sizeof path_choices / sizeof path_choices[0], &a->path) ? 1 : -1;
    if (options_is(c, "--device")) return options_value(c, &a->device) ? 1 : -1;
    if (options_is(c, "--sweep-out")) {
        a->sweep_option = "--sweep-out";
        return options_value(c, &a->sweep_out) ? 1 : -1;
    }
    if (options_is(c, "--read-bw")) return parse_read_bw(c, a);
    int taken = kv_parse_option(c, KV_FOR_BENCH, &a->kv);
    return taken != 0 ? taken : variant_parse_option(c, &a->var);
}

/* Returns 0 to go on, the exit status, or TOOL_SHOW_HELP. */
static int parse_args(int argc, char **argv, bench_args *a) {
    a->batch = 1;
    a->heads = 8;
    a->seqlen = 2048;
    a->head_dim = 64;
    a->warmup = 1;
    a->path = CHOICE_BOTH;
    a->read_bw = READ_BW_AUTO;
    a->sweep_min = 256;
    a->sweep_max = 65536;
    a->sweep_seconds = 120;
    a->sweep_out = "bench-sweep";
    variant_defaults(&a->var);
    kv_defaults(&a->kv);

    option_cursor c;
    options_begin(&c, "bench", argc, argv);
    int more;
    while ((more = options_next(&c)) > 0) {
        if (options_is_help(&c)) return TOOL_SHOW_HELP;
        int taken = parse_bench_option(&c, a);
        if (taken == 0) return options_unknown(&c);
        if (taken < 0) return TOOL_EXIT_USAGE;
    }
    if (more < 0) return TOOL_EXIT_USAGE;
    if (a->kv_heads == 0) a->kv_heads = a->heads;
    if (a->seqlen_k == 0) a->seqlen_k = a->seqlen;
    if (a->sweep &&
        (a->sweep_min & (a->sweep_min - 1) || a->sweep_max & (a->sweep_max - 1) || a->sweep_min > a->sweep_max))
        return tool_usage_error("--sweep-min/--sweep-max: powers of two, min <= max (got %zu, %zu)", a->sweep_min,
                                a->sweep_max);
    /* Without --sweep they would be ignored: a plain run at --seqlen instead of the sweep asked for. */
    if (!a->sweep && a->sweep_option) return tool_usage_error("%s: only applies with --sweep", a->sweep_option);
    if (a->sweep) {
        /* PREFIX.json and PREFIX.csv: an empty prefix would write the hidden files ".json" and
           ".csv"; an unwritable place is caught now, not after every point has run. */
        if (a->sweep_out[0] == '\0') return tool_usage_error("--sweep-out: empty prefix");
        char path[1200], err[512];
        for (int i = 0; i < 2; ++i) {
            snprintf(path, sizeof path, "%s.%s", a->sweep_out, i ? "csv" : "json");
            if (atomic_file_check(path, err, sizeof err) != 0) return tool_usage_error("--sweep-out: %s", err);
        }
    }
    if (a->heads % a->kv_heads != 0)
        return tool_usage_error("--kv-heads: %zu query heads are not a multiple of %zu kv heads", a->heads,
                                a->kv_heads);
    int rc = variant_check(&a->var);
    if (rc == 0) rc = kv_check(&a->kv, KV_FOR_BENCH);
    if (rc != 0) return rc;
    const bool cache = kv_bench_wants_cache(&a->kv);
    if (a->path == CHOICE_STANDARD && (rc = variant_check_standard_path(&a->var)) != 0) return rc;
    if (cache && a->path == CHOICE_STANDARD)
        return tool_usage_error("--path standard: the standard path takes no KV cache");
    if (cache && a->backward)
        return tool_usage_error("--backward: the KV-cache call has no backward (it is the inference decode step)");
    /* Refused before anything runs, as `attention` does (the library's refusal came after the setup, exit 1). */
    if (cache && (rc = variant_check_cache_call(&a->var)) != 0) return rc;
    if (a->no_plain && !variant_any(&a->var) && !cache)
        return tool_usage_error("--no-plain: only applies with variant or KV-cache options");
    a->cache_spec = (bench_cache_spec){a->kv.page_size, a->kv.cache_dtype};
    return 0;
}

/* ------------------------------------------------------------- modes */

/* fwd alone, or with --backward the three training passes. */
static void add_passes(const bench_args *a, bench_job *job) {
    job->passes[job->pass_count++] = &bench_pass_forward;
    if (a->backward) {
        job->passes[job->pass_count++] = &bench_pass_backward;
        job->passes[job->pass_count++] = &bench_pass_forward_backward;
    }
}

static bool has_variants(const bench_args *a) { return variant_any(&a->var); }

/* What the features cost: flash with them next to plain float32 flash (different problems: no check). */
static void fill_variant_cost(const bench_args *a, bench_job *job) {
    job->paths[job->path_count++] = (bench_path){"flash+variants", FLASHCL_PATH_FLASH, &a->var, false, NULL};
    if (!a->no_plain) job->paths[job->path_count++] = (bench_path){"flash", FLASHCL_PATH_FLASH, NULL, false, NULL};
    job->ratio = (bench_ratio){"cost", 0, 1, false};
    job->no_check_reason = "flash+variants and flash run different problems";
    add_passes(a, job);
}

static bool wants_cache(const bench_args *a) { return kv_bench_wants_cache(&a->kv); }

/*
 * The cache call next to the plain contiguous forward of the same shape and
 * data: the cost of paging or the gain of fp8 from one run. The same keys,
 * so their outputs agree unless fp8 quantised them.
 */
static void fill_kv_cache(const bench_args *a, bench_job *job) {
    job->paths[job->path_count++] = (bench_path){"kvcache", FLASHCL_PATH_FLASH, &a->var, false, &a->cache_spec};
    if (!a->no_plain) job->paths[job->path_count++] = (bench_path){"flash", FLASHCL_PATH_FLASH, &a->var, false, NULL};
    job->ratio = (bench_ratio){"cost", 0, 1, true};
    job->check = a->cache_spec.dtype == FLASHCL_CACHE_DTYPE_SAME;
    job->no_check_reason = "the fp8 cache holds the keys and values quantised, not flash's";
    add_passes(a, job);
}

static bool always(const bench_args *a) {
    (void)a;
    return true;
}

/* Flash against the standard path on the same problem: the speedup, and whether they agree. */
static void fill_flash_vs_standard(const bench_args *a, bench_job *job) {
    if (a->path != CHOICE_STANDARD)
        job->paths[job->path_count++] = (bench_path){"flash", FLASHCL_PATH_FLASH, NULL, false, NULL};
    if (a->path != CHOICE_FLASH)
        job->paths[job->path_count++] = (bench_path){"standard", FLASHCL_PATH_STANDARD, NULL, true, NULL};
    /* standard ms / flash ms; with one path asked for, the missing index gives NaN. */
    job->ratio = a->path == CHOICE_BOTH ? (bench_ratio){"speedup", 1, 0, false} : (bench_ratio){"speedup", 2, 2, false};
    job->check = true;
    add_passes(a, job);
}

/* The first mode that selects the options fills the job. */
static const struct bench_mode {
    bool (*selects)(const bench_args *a);
    void (*fill)(const bench_args *a, bench_job *job);
} modes[] = {{wants_cache, fill_kv_cache}, {has_variants, fill_variant_cost}, {always, fill_flash_vs_standard}};

static bool device_is_cpu(cl_device_id device) {
    cl_device_type type = 0;
    return clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL) == CL_SUCCESS &&
           (type & CL_DEVICE_TYPE_CPU);
}

/* Decode shapes and caches are bound by reading K and V: their rate is compared with the device's read rate. */
static void init_read_bw(const bench_args *a, bench_job *job) {
    const bool decode = a->seqlen <= BENCH_DECODE_MAX_SEQLEN_Q || kv_bench_wants_cache(&a->kv);
    job->show_bw =
        a->read_bw == READ_BW_GIVEN || a->read_bw == READ_BW_MEASURE || (a->read_bw == READ_BW_AUTO && decode);
    if (a->read_bw == READ_BW_GIVEN)
        read_bw_given(&job->read_bw, a->read_bw_gbps);
    else if (job->show_bw)
        read_bw_measure(job->ctx, &job->read_bw);
    else
        read_bw_none(&job->read_bw, a->read_bw == READ_BW_OFF ? "--read-bw off" : "not a decode shape (seqlen > 16)");
}

/* The job, its results and the exit status of a disagreement. */
static int run_job(bench_job *job, bool json) {
    /* On the heap, zeroed: the results hold a few kilobytes of plans and text. */
    bench_results *results = calloc(1, sizeof *results);
    if (results == NULL) return tool_failure("bench: out of host memory");
    int rc = bench_run(job, results);
    if (rc == 0) {
        if (json)
            bench_print_json(stdout, job, results);
        else
            bench_print_table(stdout, job, results);
        const bench_check *c = &results->check;
        if (!bench_check_agrees(c)) {
            char counts[128] = "";
            for (size_t t = 0; t < c->count; ++t)
                snprintf(counts + strlen(counts), sizeof counts - strlen(counts), "%s%s %zu", t ? ", " : "",
                         c->names[t], c->results[t].mismatches);
            rc = tool_failure("bench: %s and %s disagree (elements differing: %s)", job->paths[0].name,
                              job->paths[1].name, counts);
        }
    }
    free(results);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    bench_args a;
    memset(&a, 0, sizeof a);
    int rc = parse_args(argc, argv, &a);
    if (rc != 0) return rc;

    bench_job job;
    memset(&job, 0, sizeof job);
    job.base = (flashcl_attention_desc)FLASHCL_ATTENTION_DESC_INIT;
    job.base.batch = a.batch;
    job.base.heads_q = a.heads;
    job.base.heads_kv = a.kv_heads;
    job.base.seqlen_q = a.seqlen;
    job.base.seqlen_k = a.seqlen_k;
    job.base.head_dim = a.head_dim;
    job.base.causal = a.causal;
    job.base.num_splits = a.kv.num_splits;
    job.settings = (bench_settings){a.iters, a.warmup};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; ++m) {
        if (modes[m].selects(&a)) {
            modes[m].fill(&a, &job);
            break;
        }
    }

    job.kernels = a.kernels;
    char err[1024] = "";
    flashcl_status status = flashcl_context_create(&job.ctx, a.device, err, sizeof err);
    if (status != FLASHCL_SUCCESS) return tool_status_error(NULL, status, err);
    roof_init(&job.roof, job.ctx, device_is_cpu(flashcl_context_device(job.ctx)), a.roof_gflops);
    init_read_bw(&a, &job);
    if (a.sweep) {
        char json[1024], csv[1024];
        snprintf(json, sizeof json, "%s.json", a.sweep_out);
        snprintf(csv, sizeof csv, "%s.csv", a.sweep_out);
        const bench_sweep_spec spec = {
            a.sweep_min, a.sweep_max, a.seqlen <= BENCH_DECODE_MAX_SEQLEN_Q, (double)a.sweep_seconds, json,
            csv,         a.json};
        rc = bench_sweep(&job, &spec);
    } else {
        rc = run_job(&job, a.json);
    }
    flashcl_context_destroy(job.ctx);
    return rc;
}
