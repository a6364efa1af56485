/*
 * `flashcl tune`: measures the plans each kernel family can run for the
 * shapes asked, and keeps the fastest verified one per shape in the
 * device's tuning file, which the library's plan chain then reads (origin
 * "tuned"). Candidates (tune_candidates.h) are timed round-robin over the
 * shapes, so a short budget still gives each shape its untuned plan and
 * its nearest neighbours; the file is rewritten after every measurement
 * (tune_file.h), so Ctrl-C keeps what was measured and a rerun resumes.
 * Forward shapes are (head dim, storage, causal); with --decode the decode
 * family's instead, (head dim, storage, KV cache storage, packed rows:
 * the GQA group times the query rows), as src/tuning.h keys them.
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <flashcl.h>

#include "atomic_file.h"
#include "commands.h"
#include "options.h"
#include "timing.h"
#include "tool_errors.h"
#include "tune_candidates.h"
#include "tune_file.h"
#include "tune_measure.h"

enum { MAX_DIMS = 8, MAX_KEYS = 48, CONFIRM_ROUNDS = 3 };

void cmd_tune_help(FILE *out) {
    fputs("usage: flashcl tune [--head-dims 64,128] [--dtypes f32,bf16] [--causal] [--decode]\n"
          "                    [--budget SECONDS] [--device SPEC] [--batch B] [--heads H]\n"
          "                    [--kv-heads H] [--seqlen N] [--seqlen-k N] [--output FILE] [--list]\n"
          "\n"
          "Times every plan the kernel families can run for each shape (head dim x\n"
          "storage x causal) on this device, checks each against a double-precision\n"
          "reference on a small problem, and writes the fastest verified plan per\n"
          "shape to the device's tuning file (next to the program cache; `flashcl\n"
          "info` plans then say origin \"tuned\"). The first candidate of each shape is\n"
          "the plan the library picks untuned, so a tuned plan is never slower.\n"
          "On NVIDIA GPUs with tensor cores the f16/bf16 forward's candidates are\n"
          "the tensor-core shapes (kernel=mma: warps, keys per tile, row tiles, Q\n"
          "in __local; on Hopper the shapes the wgmma form runs are skipped: the\n"
          "library picks that form before any tuned plan).\n"
          "The file is rewritten after each measurement: Ctrl-C keeps what was\n"
          "measured, and running again resumes.\n"
          "\n"
          "  --head-dims LIST  default 64,128\n"
          "  --dtypes LIST     f32, f16, bf16; default f32 (a value given twice in a\n"
          "                    list is tuned once)\n"
          "  --causal          tune the causal forward as well\n"
          "  --decode          tune the decode family (short queries, split-KV) instead of the\n"
          "                    forward: its kernel's rows, keys per step, lanes and work-group\n"
          "                    (GPU kernel) or rows, keys per chunk and KV heads per work-item\n"
          "                    (CPU kernel), per head dim, storage and packed rows (--causal\n"
          "                    does not apply: giving both is a usage error)\n"
          "  --budget S        stop starting measurements that would end after S seconds, as\n"
          "                    predicted from the slowest so far (default 600); one that has\n"
          "                    started runs to its end, so a run can end up to one\n"
          "                    measurement late (the summary prints the slowest)\n"
          "  --batch B, --heads H, --seqlen N  the timed problem; default 1 x 8 x 1024\n"
          "                    on a CPU, 4 x 16 x 4096 on a GPU\n"
          "  with --decode: --batch B, --heads H, --kv-heads H, --seqlen N (query rows, at\n"
          "                    most 16), --seqlen-k N (keys); default b1 hq32 hkv8 sq1 and\n"
          "                    sk 8192 on a CPU, 32768 on a GPU\n"
          "  --output FILE     the tuning file to write and resume (as FLASHCL_TUNING=FILE)\n"
          "  --list            print each shape's candidates and exit\n",
          out);
}

/* Set by SIGINT; the loop stops at the next measurement boundary. sig_atomic_t is the only type a handler
   may write, which is why this one piece of state lives at file scope (in the tool, not the library). */
static volatile sig_atomic_t g_interrupted = 0;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
    signal(SIGINT, SIG_DFL); /* a second Ctrl-C ends the process at once */
}

typedef struct tune_args {
    size_t dims[MAX_DIMS], dim_count;
    flashcl_dtype dtypes[3];
    size_t dtype_count;
    bool causal, decode, list;
    double budget;
    size_t batch, heads, seqlen, heads_kv, seqlen_k;
    const char *device, *output;
} tune_args;

/* A value the list already has is taken once (every list option alike), with a note: tuning a shape twice
   would measure every candidate twice and count it twice in the progress. */
static bool already_listed(const char *option, const char *value, bool listed) {
    if (listed) fprintf(stderr, "flashcl: note: %s: %s given more than once; tuned once\n", option, value);
    return listed;
}

static int parse_dims(const char *text, tune_args *a) {
    a->dim_count = 0;
    for (const char *p = text; *p;) {
        char *end = NULL;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || *p < '0' || *p > '9' || v < 1 || v > 256 || (*end && *end != ','))
            return tool_usage_error("--head-dims: expected a list of 1..256 (at most %d), got '%s'", MAX_DIMS, text);
        bool listed = false;
        for (size_t i = 0; i < a->dim_count; ++i) listed = listed || a->dims[i] == v;
        char value[24];
        snprintf(value, sizeof value, "%lu", v);
        if (!already_listed("--head-dims", value, listed)) {
            if (a->dim_count == MAX_DIMS)
                return tool_usage_error("--head-dims: expected a list of 1..256 (at most %d), got '%s'", MAX_DIMS,
                                        text);
            a->dims[a->dim_count++] = v;
        }
        if (*end == ',' && end[1] == '\0')
            return tool_usage_error("--head-dims: expected a list of 1..256 (at most %d), got '%s' (a trailing comma)",
                                    MAX_DIMS, text);
        p = *end ? end + 1 : end;
    }
    return a->dim_count ? 0 : tool_usage_error("--head-dims: empty list");
}

static int parse_dtypes(const char *text, tune_args *a) {
    a->dtype_count = 0;
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, ",");
        flashcl_dtype dt = n == 3 && !strncmp(p, "f32", 3)    ? FLASHCL_DTYPE_F32
                           : n == 3 && !strncmp(p, "f16", 3)  ? FLASHCL_DTYPE_F16
                           : n == 4 && !strncmp(p, "bf16", 4) ? FLASHCL_DTYPE_BF16
                                                              : FLASHCL_DTYPE_DEFAULT;
        if (dt == FLASHCL_DTYPE_DEFAULT)
            return tool_usage_error("--dtypes: expected f32, f16 and/or bf16, got '%s'", text);
        bool listed = false;
        for (size_t i = 0; i < a->dtype_count; ++i) listed = listed || a->dtypes[i] == dt;
        if (!already_listed("--dtypes",
                            dt == FLASHCL_DTYPE_BF16  ? "bf16"
                            : dt == FLASHCL_DTYPE_F16 ? "f16"
                                                      : "f32",
                            listed))
            a->dtypes[a->dtype_count++] = dt; /* three distinct at most: the array's size */
        p += n;
        if (*p) ++p;
    }
    return a->dtype_count ? 0 : tool_usage_error("--dtypes: empty list");
}

static int parse_args(int argc, char **argv, tune_args *a) {
    memset(a, 0, sizeof *a);
    a->dims[0] = 64, a->dims[1] = 128, a->dim_count = 2;
    a->dtypes[0] = FLASHCL_DTYPE_F32, a->dtype_count = 1;
    a->budget = 600.0;
    option_cursor c;
    options_begin(&c, "tune", argc, argv);
    int more;
    while ((more = options_next(&c)) > 0) {
        if (options_is_help(&c)) return TOOL_SHOW_HELP;
        const char *v = NULL;
        int rc = 0;
        if (options_is(&c, "--head-dims")) {
            if (!options_value(&c, &v)) return TOOL_EXIT_USAGE;
            rc = parse_dims(v, a);
        } else if (options_is(&c, "--dtypes")) {
            if (!options_value(&c, &v)) return TOOL_EXIT_USAGE;
            rc = parse_dtypes(v, a);
        } else if (options_is(&c, "--causal")) {
            a->causal = true;
        } else if (options_is(&c, "--decode")) {
            a->decode = true;
        } else if (options_is(&c, "--list")) {
            a->list = true;
        } else if (options_is(&c, "--budget")) {
            float b = 0;
            if (!options_float(&c, 1.0f, &b)) return TOOL_EXIT_USAGE;
            a->budget = b;
        } else if (options_is(&c, "--batch")) {
            if (!options_size(&c, 1, 1024, &a->batch)) return TOOL_EXIT_USAGE;
        } else if (options_is(&c, "--heads")) {
            if (!options_size(&c, 1, 1024, &a->heads)) return TOOL_EXIT_USAGE;
        } else if (options_is(&c, "--kv-heads")) {
            if (!options_size(&c, 1, 1024, &a->heads_kv)) return TOOL_EXIT_USAGE;
        } else if (options_is(&c, "--seqlen")) {
            if (!options_size(&c, 1, 1u << 20, &a->seqlen)) return TOOL_EXIT_USAGE;
        } else if (options_is(&c, "--seqlen-k")) {
            if (!options_size(&c, 1, 1u << 24, &a->seqlen_k)) return TOOL_EXIT_USAGE;
        } else if (options_is(&c, "--device")) {
            if (!options_value(&c, &a->device)) return TOOL_EXIT_USAGE;
        } else if (options_is(&c, "--output")) {
            if (!options_value(&c, &a->output)) return TOOL_EXIT_USAGE;
        } else {
            return options_unknown(&c);
        }
        if (rc) return rc;
    }
    if (more < 0) return TOOL_EXIT_USAGE;
    if (!a->decode && a->seqlen && a->seqlen < 16)
        return tool_usage_error("--seqlen: at least 16 for the forward (got %zu)", a->seqlen);
    if (a->decode && a->seqlen > 16)
        return tool_usage_error("--seqlen: at most 16 query rows with --decode (got %zu)", a->seqlen);
    if (!a->decode && (a->heads_kv || a->seqlen_k))
        return tool_usage_error("--kv-heads and --seqlen-k apply with --decode only");
    /* An empty name would read as FLASHCL_TUNING unset (the device's own file); a destination that
       cannot be written (a directory, a missing directory) is caught now, not after the first
       measurement. --list writes nothing. */
    if (a->output && a->output[0] == '\0') return tool_usage_error("--output: empty file name");
    if (a->output && !a->list) {
        char err[512];
        if (atomic_file_check(a->output, err, sizeof err) != 0) return tool_usage_error("--output: %s", err);
    }
    if (a->decode && a->heads && a->heads_kv && a->heads % a->heads_kv != 0)
        return tool_usage_error("--heads %zu: not a multiple of --kv-heads %zu", a->heads, a->heads_kv);
    return 0;
}

typedef struct tune_key {
    tune_shape shape;
    char key[64];
    /* Room for TUNE_CONFIRM_SUFFIX after it within a tune_record's size (the confirmation rounds' key). */
    char size[sizeof((tune_record *)0)->size - (sizeof TUNE_CONFIRM_SUFFIX - 1)];
    char untuned[TUNE_TILE_CAP];
    tune_candidates cands;
} tune_key;

/* Progress on stderr: a bar redrawn in place (\r) on a terminal; elsewhere (a log, a pipe, a test) one plain
   line per step, since a file would collect every redraw on one line. */
typedef struct progress_line {
    bool tty;  /* stderr is a terminal */
    bool open; /* a bar is drawn and the cursor is still on its line */
} progress_line;

static void progress(progress_line *pl, size_t done, size_t total, const char *what, double elapsed, double eta) {
    char eta_text[32] = "?";
    if (isfinite(eta)) snprintf(eta_text, sizeof eta_text, "%.0fs", eta < 0 ? 0.0 : eta);
    if (!pl->tty) {
        fprintf(stderr, "flashcl: tune: %zu/%zu %.0fs, ETA %s  %s\n", done, total, elapsed, eta_text, what);
        return;
    }
    char bar[31];
    size_t fill = total ? done * 30 / total : 30;
    for (size_t i = 0; i < 30; ++i) bar[i] = i < fill ? '#' : '-';
    bar[30] = '\0';
    fprintf(stderr, "\r[%s] %zu/%zu %.0fs, ETA %s  %-60.60s", bar, done, total, elapsed, eta_text, what);
    fflush(stderr);
    pl->open = true;
}

/* Ends a drawn bar's line, so that what follows starts on its own. */
static void progress_break(progress_line *pl) {
    if (pl->open) fputc('\n', stderr);
    pl->open = false;
}

/* The packed rows of a decode key: a power of two, at most 16 (src/tuning.h). */
static int packed_rows_bucket(size_t packed) {
    int r = 1;
    while ((size_t)r < packed && r < 16) r *= 2;
    return r;
}

/* Whether the device is a CPU: the default problem size and the candidate families depend on it. */
static bool device_is_cpu(flashcl_context *ctx, size_t *max_wg) {
    cl_device_type type = 0;
    *max_wg = 1;
    clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_TYPE, sizeof type, &type, NULL);
    clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof *max_wg, max_wg, NULL);
    return (type & CL_DEVICE_TYPE_CPU) != 0;
}

/* The best verified time of tile at size, NAN if none. */
static double best_ms(const tune_log *log, const char *key, const char *tile, const char *size) {
    double best = NAN;
    for (size_t i = 0; i < log->count; ++i) {
        const tune_record *r = &log->records[i];
        if (!strcmp(r->key, key) && !strcmp(r->tile, tile) && !strcmp(r->size, size) && r->verified && !(r->ms >= best))
            best = r->ms;
    }
    return best;
}

/* Per shape: the untuned and the tuned plan's times, from the confirmation rounds (timed in turns) where
   they ran, else from the search. */
static void print_summary(const tune_key *keys, size_t n, const tune_log *log) {
    printf("%-42s %-44s %10s %-44s %10s %8s %s\n", "shape", "untuned plan", "ms", "tuned plan", "ms", "speedup",
           "timed");
    for (size_t i = 0; i < n; ++i) {
        const tune_key *k = &keys[i];
        char confirm[sizeof((tune_record *)0)->size];
        snprintf(confirm, sizeof confirm, "%s%s", k->size, TUNE_CONFIRM_SUFFIX);
        const tune_record *best = tune_log_winner(log, k->key, k->size);
        const bool confirmed = best && strstr(best->size, TUNE_CONFIRM_SUFFIX);
        const char *size = confirmed ? confirm : k->size;
        double bms = best_ms(log, k->key, k->untuned, size), tms = best ? best->ms : NAN;
        printf("%-42s %-44s %10.4f %-44s %10.4f %7.2fx %s\n", k->key, k->untuned, bms, best ? best->tile : "-", tms,
               bms / tms, confirmed ? "in turns, best of rounds" : "search");
    }
}

/* The library's spellings of FLASHCL_CACHE_DIR off: "0", or "off" in any case. */
static bool cache_dir_off(const char *v) {
    if (!v) return false;
    if (!strcmp(v, "0")) return true;
    char low[4] = "";
    for (size_t i = 0; i < sizeof low - 1 && v[i]; ++i) low[i] = (char)tolower((unsigned char)v[i]);
    return strlen(v) == 3 && !strcmp(low, "off");
}

int cmd_tune(int argc, char **argv) {
    tune_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    const double start = wall_seconds();
    if (a.output) setenv("FLASHCL_TUNING", a.output, 1);
    if (a.decode && a.causal)
        return tool_usage_error("--causal: does not apply with --decode (decode shapes have no causal form: a decode "
                                "row sees every key either way)");

    flashcl_context *ctx = NULL;
    char err[1024] = "";
    int st = flashcl_context_create(&ctx, a.device, err, sizeof err);
    if (st != FLASHCL_SUCCESS) return tool_status_error("tune: context", st, err);
    flashcl_tuning_info info = {.struct_size = sizeof info};
    st = flashcl_tuning_query(ctx, &info);
    size_t max_wg = 1;
    const bool is_cpu = device_is_cpu(ctx, &max_wg);
    flashcl_context_destroy(ctx);
    if (st != FLASHCL_SUCCESS) return tool_status_error("tune: tuning file", st, "");
    /* The library says whether FLASHCL_TUNING turned the files off (its spellings, not a copy of them here). */
    if (info.off && a.output)
        return tool_usage_error("--output %s: the library reads that name as tuning files off; give ./%s", a.output,
                                a.output);
    if (info.off)
        return tool_failure("tune: FLASHCL_TUNING=%s turns tuning files off: unset it, or give --output FILE",
                            getenv("FLASHCL_TUNING") ? getenv("FLASHCL_TUNING") : "off");
    if (!info.path[0] && cache_dir_off(getenv("FLASHCL_CACHE_DIR")))
        return tool_usage_error("tune: no tuning file location: FLASHCL_CACHE_DIR=%s turns the cache directory (where "
                                "the tuning file lives) off; give --output FILE, or FLASHCL_TUNING=FILE",
                                getenv("FLASHCL_CACHE_DIR"));
    if (!info.path[0]) return tool_failure("tune: no tuning file location (no cache directory): give --output FILE");

    tune_log log = {0};
    if (info.note[0])
        fprintf(stderr, "flashcl: note: %s; starting afresh\n", info.note);
    else if (tune_log_load(&log, info.path) != 0)
        return tool_failure("tune: cannot read %s", info.path);

    if (a.decode) {
        if (!a.batch) a.batch = 1;
        if (!a.heads) a.heads = 32;
        if (!a.heads_kv) a.heads_kv = a.heads % 8 == 0 ? 8 : a.heads;
        if (!a.seqlen) a.seqlen = 1;
        if (!a.seqlen_k) a.seqlen_k = is_cpu ? 8192 : 32768;
        if (a.heads % a.heads_kv != 0)
            return tool_usage_error("--heads %zu: not a multiple of --kv-heads %zu", a.heads, a.heads_kv);
    }
    if (!a.batch) a.batch = is_cpu ? 1 : 4;
    if (!a.heads) a.heads = is_cpu ? 8 : 16;
    if (!a.seqlen) a.seqlen = is_cpu ? 1024 : 4096;
    tune_key *keys = calloc(MAX_KEYS, sizeof *keys);
    if (!keys) return tool_failure("tune: out of host memory");
    size_t nkeys = 0, total = 0, done = 0;
    double first_estimate = 0.0;
    for (size_t t = 0; t < a.dtype_count; ++t)
        for (size_t i = 0; i < a.dim_count; ++i)
            for (int causal = 0; causal <= (a.causal && !a.decode ? 1 : 0) && nkeys < MAX_KEYS; ++causal) {
                tune_key *k = &keys[nkeys];
                k->shape = (tune_shape){a.batch,
                                        a.heads,
                                        a.seqlen,
                                        a.dims[i],
                                        a.dtypes[t],
                                        causal != 0,
                                        a.decode,
                                        a.decode ? a.heads_kv : a.heads,
                                        a.decode ? a.seqlen_k : a.seqlen};
                const char *dt = a.dtypes[t] == FLASHCL_DTYPE_BF16  ? "bf16"
                                 : a.dtypes[t] == FLASHCL_DTYPE_F16 ? "f16"
                                                                    : "f32";
                const size_t packed = a.decode ? a.heads / a.heads_kv * a.seqlen : 0;
                if (a.decode) {
                    snprintf(k->key, sizeof k->key, "decode d=%zu dtype=%s cache=same rows=%d", a.dims[i], dt,
                             packed_rows_bucket(packed));
                    snprintf(k->size, sizeof k->size, "b%zu_hq%zu_hkv%zu_sq%zu_sk%zu", a.batch, a.heads, a.heads_kv,
                             a.seqlen, a.seqlen_k);
                } else {
                    snprintf(k->key, sizeof k->key, "d=%zu dtype=%s causal=%d", a.dims[i], dt, causal);
                    snprintf(k->size, sizeof k->size, "b%zu_h%zu_n%zu", a.batch, a.heads, a.seqlen);
                }
                if (wall_seconds() - start + 1.25 * first_estimate > a.budget) {
                    fprintf(stderr, "flashcl: note: %s: the budget went on planning the shapes before it; skipped\n",
                            k->key);
                    continue;
                }
                flashcl_plan plan;
                const double p0 = wall_seconds();
                st = tune_untuned_plan(a.device, &k->shape, &plan, err, sizeof err);
                /* A plan query builds the kernel, as a measurement does: the first estimate of one's cost. */
                if (wall_seconds() - p0 > first_estimate) first_estimate = wall_seconds() - p0;
                if (st != FLASHCL_SUCCESS) {
                    fprintf(stderr, "flashcl: note: %s: no plan (%s); skipped\n", k->key, err);
                    continue;
                }
                const bool decode_plan = strncmp(plan.kernel, "flash_decode", 12) == 0;
                if (decode_plan != a.decode || !tune_encode_plan(&plan, k->untuned, sizeof k->untuned)) {
                    if (tune_plan_is_wgmma(&plan))
                        fprintf(stderr,
                                "flashcl: note: %s: runs Hopper's wgmma form, which the library picks before any "
                                "tuned plan; skipped\n",
                                k->key);
                    else
                        fprintf(stderr,
                                "flashcl: note: %s: runs %s (origin %s), which has no tunable sizes yet; skipped\n",
                                k->key, plan.kernel, plan.origin);
                    continue;
                }
                if (a.decode)
                    tune_decode_candidates(k->untuned, packed, max_wg, &k->cands);
                else
                    tune_candidates_for(k->untuned, a.dims[i], a.dtypes[t], max_wg, &k->cands);
                total += k->cands.count;
                for (size_t c = 0; c < k->cands.count; ++c)
                    if (tune_log_find(&log, k->key, k->cands.tile[c], k->size)) ++done;
                ++nkeys;
            }
    if (a.list) {
        for (size_t i = 0; i < nkeys; ++i) {
            printf("%s untuned %s\n", keys[i].key, keys[i].untuned);
            for (size_t c = 0; c < keys[i].cands.count; ++c)
                printf("%s candidate %s\n", keys[i].key, keys[i].cands.tile[c]);
        }
        free(keys);
        tune_log_free(&log);
        return TOOL_EXIT_OK;
    }
    if (done) fprintf(stderr, "flashcl: resuming: %zu of %zu measurements already in %s\n", done, total, info.path);

    progress_line pl = {isatty(fileno(stderr)) != 0, false};
    signal(SIGINT, on_sigint);
    const double target = is_cpu ? 0.2 : 0.1;
    double slowest = first_estimate, spent = 0.0;
    size_t measured = 0;
    const char *stop = NULL;
    rc = TOOL_EXIT_OK;
    for (size_t rank = 0; rank < TUNE_MAX_CANDIDATES && !stop; ++rank)
        for (size_t i = 0; i < nkeys && !stop; ++i) {
            tune_key *k = &keys[i];
            if (rank >= k->cands.count || tune_log_find(&log, k->key, k->cands.tile[rank], k->size)) continue;
            const double elapsed = wall_seconds() - start;
            /* The slowest measurement so far, with a margin, must still fit: the budget is a promise. */
            /* ... and leave room for the confirmation rounds (at most a third of the budget). */
            double reserve = measured ? 2.0 * CONFIRM_ROUNDS * spent / (double)measured * (double)nkeys : 0.0;
            if (reserve > a.budget / 3.0) reserve = a.budget / 3.0;
            if (elapsed + 1.25 * slowest + reserve > a.budget) {
                stop = "budget";
                break;
            }
            if (g_interrupted) {
                stop = "interrupted";
                break;
            }
            char what[160];
            snprintf(what, sizeof what, "%s %s", k->key, k->cands.tile[rank]);
            double eta = measured ? spent / (double)measured * (double)(total - done) : NAN;
            if (eta > a.budget - elapsed) eta = a.budget - elapsed;
            progress(&pl, done, total, what, elapsed, eta);
            const double t0 = wall_seconds();
            tune_measurement m;
            tune_measure(a.device, k->cands.tile[rank], &k->shape, target, &m);
            const double took = wall_seconds() - t0;
            spent += took;
            slowest = took > slowest ? took : slowest;
            ++measured;
            ++done;
            tune_record r;
            memset(&r, 0, sizeof r);
            snprintf(r.key, sizeof r.key, "%s", k->key);
            snprintf(r.tile, sizeof r.tile, "%s", k->cands.tile[rank]);
            snprintf(r.size, sizeof r.size, "%s", k->size);
            r.ms = m.ran ? m.ms : NAN;
            r.verified = m.ran && m.verified;
            if (!r.verified) {
                progress_break(&pl);
                fprintf(stderr, "flashcl: note: %s: %s\n", what, m.error[0] ? m.error : "not verified");
            }
            if (tune_log_add(&log, &r) != 0 || tune_log_write(&log, info.path, info.identity, err, sizeof err) != 0) {
                progress_break(&pl);
                rc = tool_failure("tune: %s", err[0] ? err : "out of host memory");
                stop = "error";
            }
        }
    /* Confirmation: where the search's winner is not the untuned plan, both again in turns (best of
       CONFIRM_ROUNDS each), so a win owed to a noisy first measurement does not stand. */
    for (size_t i = 0; i < nkeys && rc == TOOL_EXIT_OK && !g_interrupted; ++i) {
        tune_key *k = &keys[i];
        char confirm[sizeof((tune_record *)0)->size];
        snprintf(confirm, sizeof confirm, "%s%s", k->size, TUNE_CONFIRM_SUFFIX);
        const tune_record *best = tune_log_best(&log, k->key, k->size);
        if (!best || !strcmp(best->tile, k->untuned) || tune_log_best(&log, k->key, confirm)) continue;
        char tiles[2][TUNE_TILE_CAP];
        snprintf(tiles[0], sizeof tiles[0], "%s", k->untuned);
        snprintf(tiles[1], sizeof tiles[1], "%s", best->tile);
        const double per = measured ? spent / (double)measured : 1.0;
        if (wall_seconds() - start + 2.0 * CONFIRM_ROUNDS * per * 1.25 > a.budget) {
            progress_break(&pl);
            fprintf(stderr, "flashcl: note: %s: no time left to confirm %s against %s in turns\n", k->key, tiles[1],
                    tiles[0]);
            continue;
        }
        for (int round = 0; round < CONFIRM_ROUNDS && rc == TOOL_EXIT_OK; ++round)
            for (int t = 0; t < 2 && rc == TOOL_EXIT_OK; ++t) {
                char what[256];
                snprintf(what, sizeof what, "confirm %s %s", k->key, tiles[t]);
                progress(&pl, done, total, what, wall_seconds() - start, NAN);
                tune_measurement m;
                tune_measure(a.device, tiles[t], &k->shape, target, &m);
                tune_record r;
                memset(&r, 0, sizeof r);
                snprintf(r.key, sizeof r.key, "%s", k->key);
                memcpy(r.tile, tiles[t], sizeof r.tile);
                snprintf(r.size, sizeof r.size, "%s", confirm);
                r.ms = m.ran ? m.ms : NAN;
                r.verified = m.ran && m.verified;
                if (tune_log_add(&log, &r) != 0 ||
                    tune_log_write(&log, info.path, info.identity, err, sizeof err) != 0) {
                    progress_break(&pl);
                    rc = tool_failure("tune: %s", err[0] ? err : "out of host memory");
                }
            }
    }
    progress(&pl, done, total, stop ? stop : "done", wall_seconds() - start, 0.0);
    progress_break(&pl);
    print_summary(keys, nkeys, &log);
    printf("measured %zu this run, %zu of %zu in all, %.1f s (budget %.0f s, slowest measurement %.1f s)%s%s; "
           "tuning file %s\n",
           measured, done, total, wall_seconds() - start, a.budget, slowest, stop ? "; stopped: " : "",
           stop ? stop : "", info.path);
    if (stop && strcmp(stop, "interrupted") == 0 && rc == TOOL_EXIT_OK) rc = TOOL_EXIT_FAILED;
    free(keys);
    tune_log_free(&log);
    return rc;
}
