/*
 * `flashcl bench`: times the flash and the standard path on the same random
 * inputs in one process, and checks that they agree. With --backward the
 * work is handed to bench_backward.c; the forward-only mode lives here.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <flashcl.h>

#include "bench_backward.h"
#include "bench_common.h"
#include "bench_report.h"
#include "bench_run.h"
#include "bench_variants.h"
#include "commands.h"
#include "compare.h"
#include "device_info.h"
#include "options.h"
#include "roof.h"
#include "tool_errors.h"

void cmd_bench_help(FILE *out)
{
    fputs("usage: flashcl bench [--batch B] [--heads H] [--kv-heads HKV] [--seqlen N]\n"
          "                     [--seqlen-k NK] [--head-dim D] [--causal] [--iters I]\n"
          "                     [--warmup W] [--path flash|standard|both] [--device SPEC]\n"
          "                     [--backward] [--roof GFLOPS] [--json] [variant options, below]\n"
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
          "  --iters I        timed calls per path; 0 (default) picks enough for about\n"
          "                   one second, from 1 to 1000\n"
          "  --warmup W       untimed calls first, default 1 (the first builds kernels)\n"
          "  --path P         flash, standard or both (default)\n"
          "  --device SPEC    \"P:D\" from `flashcl info`, or part of a device name\n"
          "  --backward       time the backward pass as well; see below\n"
          "  --roof GFLOPS    the rate %roof divides by; default on a CPU device: OpenBLAS\n"
          "                   SGEMM 2048^3 measured at the start (when built with it)\n"
          "  --json           one JSON object per line: one per path, then a summary\n"
          "\n"
          "ms is the mean wall-clock time per call, calls enqueued back to back.\n"
          "TFLOP/s counts 4*b*hq*sq*sk*d flops (halved when causal); GB/s counts the\n"
          "minimum traffic, Q, K, V read and O written once, for both paths alike;\n"
          "bytes_extra is the device memory a path needs beyond inputs and outputs.\n"
          "When the standard path cannot allocate its seqlen x seqlen buffers it is\n"
          "skipped and flash still runs.\n"
          "\n"
          "With --backward, each path is timed in three passes: fwd (the forward,\n"
          "writing O and LSE), bwd (the backward from a random dO, uniform in [-1, 1],\n"
          "to dQ, dK, dV) and fwd+bwd (both back to back; ms per pair). TFLOP/s counts\n"
          "the backward as 2.5 times the forward's flops and fwd+bwd as 3.5 times, as\n"
          "FlashAttention does; GB/s counts each tensor a pass reads or writes once.\n"
          "bytes_extra is measured: flashcl_context_scratch_bytes of a context of the\n"
          "path's own, read after each pass (flash's grows with N, standard's with N^2).\n"
          "The gradients of the last fwd+bwd are checked like the outputs above, and\n"
          "the speedup (standard ms / flash ms) is given for each pass. --json prints\n"
          "one object per (path, pass) with \"path\" and \"pass\", then a summary.\n"
          "\n"
          "\n",
          out);
    bench_variant_help(out);
    fputs("\nExit status: 0 success; 1 a failure or the paths disagree; 2 bad option.\n", out);
}

typedef struct bench_args {
    size_t batch, heads, kv_heads, seqlen, seqlen_k, head_dim, iters, warmup;
    size_t path; /* index in path_choices */
    bool causal, json, backward;
    float roof_gflops; /* --roof; 0: measure on a CPU device */
    const char *device;
    bench_variant_args var;
} bench_args;

static const char *const path_choices[] = {"flash", "standard", "both"};
enum { CHOICE_FLASH, CHOICE_STANDARD, CHOICE_BOTH };

/* Generous bounds: the library checks what actually fits. */
#define BENCH_MAX_BATCH ((size_t)1 << 20)
#define BENCH_MAX_HEADS ((size_t)1 << 16)
#define BENCH_MAX_SEQLEN ((size_t)1 << 26)
#define BENCH_MAX_ITERS ((size_t)1 << 24)

/* Returns 0 to go on, or the exit status; *help is set by --help. */
static int parse_args(int argc, char **argv, bench_args *a, bool *help)
{
    a->batch = 1;
    a->heads = 8;
    a->seqlen = 2048;
    a->head_dim = 64;
    a->warmup = 1;
    a->path = CHOICE_BOTH;
    bench_variant_defaults(&a->var);

    option_cursor c;
    options_begin(&c, "bench", argc, argv);
    int more;
    while ((more = options_next(&c)) > 0) {
        bool ok;
        if (options_is(&c, "--help") || options_is(&c, "-h")) {
            *help = true;
            return 0;
        } else if (options_is(&c, "--batch")) {
            ok = options_size(&c, 1, BENCH_MAX_BATCH, &a->batch);
        } else if (options_is(&c, "--heads")) {
            ok = options_size(&c, 1, BENCH_MAX_HEADS, &a->heads);
        } else if (options_is(&c, "--kv-heads")) {
            ok = options_size(&c, 1, BENCH_MAX_HEADS, &a->kv_heads);
        } else if (options_is(&c, "--seqlen")) {
            ok = options_size(&c, 1, BENCH_MAX_SEQLEN, &a->seqlen);
        } else if (options_is(&c, "--seqlen-k")) {
            ok = options_size(&c, 1, BENCH_MAX_SEQLEN, &a->seqlen_k);
        } else if (options_is(&c, "--head-dim")) {
            ok = options_size(&c, 1, FLASHCL_MAX_HEAD_DIM, &a->head_dim);
        } else if (options_is(&c, "--roof")) {
            ok = options_float(&c, 0.0f, &a->roof_gflops);
        } else if (options_is(&c, "--iters")) {
            ok = options_size(&c, 0, BENCH_MAX_ITERS, &a->iters);
        } else if (options_is(&c, "--warmup")) {
            ok = options_size(&c, 0, BENCH_MAX_ITERS, &a->warmup);
        } else if (options_is(&c, "--path")) {
            ok = options_choice(&c, path_choices, sizeof path_choices / sizeof path_choices[0],
                                &a->path);
        } else if (options_is(&c, "--device")) {
            ok = options_value(&c, &a->device);
        } else if (options_is(&c, "--causal")) {
            ok = options_flag(&c);
            a->causal = true;
        } else if (options_is(&c, "--json")) {
            ok = options_flag(&c);
            a->json = true;
        } else if (options_is(&c, "--backward")) {
            ok = options_flag(&c);
            a->backward = true;
        } else {
            int taken = bench_variant_parse_option(&c, &a->var);
            if (taken == 0)
                return options_unknown(&c);
            ok = taken > 0;
        }
        if (!ok)
            return TOOL_EXIT_USAGE;
    }
    if (more < 0)
        return TOOL_EXIT_USAGE;
    if (a->kv_heads == 0)
        a->kv_heads = a->heads;
    if (a->seqlen_k == 0)
        a->seqlen_k = a->seqlen;
    if (a->heads % a->kv_heads != 0)
        return tool_usage_error("--kv-heads: %zu query heads are not a multiple of %zu kv heads",
                                a->heads, a->kv_heads);
    int rc = bench_variant_check(&a->var, a->head_dim);
    if (rc != 0)
        return rc;
    if (bench_variant_any(&a->var) && a->path == CHOICE_STANDARD)
        return tool_usage_error("--path standard: the standard path supports no variant");
    if (a->var.varlen_seqs > a->batch * (a->seqlen < a->seqlen_k ? a->seqlen : a->seqlen_k))
        return tool_usage_error("--varlen: %zu sequences do not fit %zu rows", a->var.varlen_seqs,
                                a->batch * a->seqlen);
    return 0;
}

/* `bench` with variants: flash with the features next to plain flash (bench_variants.c). */
static int run_variants(const bench_args *a)
{
    bench_variant_run run;
    memset(&run, 0, sizeof run);
    run.base = (flashcl_attention_desc)FLASHCL_ATTENTION_DESC_INIT;
    run.base.batch = a->batch;
    run.base.heads_q = a->heads;
    run.base.heads_kv = a->kv_heads;
    run.base.seqlen_q = a->seqlen;
    run.base.seqlen_k = a->seqlen_k;
    run.base.head_dim = a->head_dim;
    run.base.causal = a->causal;
    run.var = a->var;
    run.settings.iters = a->iters;
    run.settings.warmup = a->warmup;
    run.backward = a->backward;
    run.json = a->json;
    run.device = a->device;
    return bench_variants(&run);
}

/* Device buffers for Q, K, V (random) and O; the context owns none of them. */
typedef struct bench_buffers {
    cl_mem q, k, v, o;
} bench_buffers;

static void release_buffers(bench_buffers *b)
{
    cl_mem *all[] = {&b->q, &b->k, &b->v, &b->o};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) {
        if (*all[i] != NULL)
            clReleaseMemObject(*all[i]);
        *all[i] = NULL;
    }
}

static int create_buffers(flashcl_context *ctx, size_t q_bytes, size_t kv_bytes, bench_buffers *b)
{
    /* Refuse before spending time on random numbers the device cannot hold. */
    int rc = bench_check_fits(ctx, q_bytes > kv_bytes ? q_bytes : kv_bytes);
    if (rc != 0)
        return rc;
    cl_context cl = flashcl_context_cl_context(ctx);
    float *staging = malloc(q_bytes > kv_bytes ? q_bytes : kv_bytes);
    if (staging == NULL)
        return tool_failure("bench: out of host memory for the inputs");
    uint64_t state = BENCH_RANDOM_SEED; /* fixed: every run sees the same inputs */
    const char *failed = NULL;
    cl_int err;
    if ((err = bench_create_buffer(cl, q_bytes, staging, &state, &b->q)) != CL_SUCCESS)
        failed = "Q";
    else if ((err = bench_create_buffer(cl, kv_bytes, staging, &state, &b->k)) != CL_SUCCESS)
        failed = "K";
    else if ((err = bench_create_buffer(cl, kv_bytes, staging, &state, &b->v)) != CL_SUCCESS)
        failed = "V";
    else if ((err = bench_create_buffer(cl, q_bytes, NULL, NULL, &b->o)) != CL_SUCCESS)
        failed = "O";
    free(staging);
    if (failed != NULL)
        return tool_failure("bench: cannot allocate %s (%zu bytes) on the device: %s", failed,
                            failed[0] == 'K' || failed[0] == 'V' ? kv_bytes : q_bytes,
                            flashcl_status_name(err));
    return 0;
}

/*
 * Plans, times and reads back one path. Returns 0, or the exit status after
 * printing why; a standard path that cannot allocate is marked skipped.
 */
static int run_one(flashcl_context *ctx, const bench_problem *problem, flashcl_path path,
                   const bench_settings *settings, bench_path_report *p, float *host_out,
                   size_t out_bytes)
{
    flashcl_attention_desc d = *problem->desc;
    d.path = path;
    flashcl_status status = flashcl_plan_query(ctx, &d, &p->plan);
    if (status == FLASHCL_SUCCESS)
        status = bench_run_path(problem, path, settings, &p->result);
    if (status != FLASHCL_SUCCESS) {
        bench_describe_failure(ctx, status, p->reason, sizeof p->reason);
        if (path == FLASHCL_PATH_STANDARD && bench_is_allocation_failure(status)) {
            p->skipped = true;
            /* Let anything still queued drain before flash's results are used. */
            clFinish(flashcl_context_queue(ctx));
            return 0;
        }
        return tool_status_error(p->name, status, flashcl_last_error(ctx));
    }
    cl_int err = clEnqueueReadBuffer(flashcl_context_queue(ctx), problem->o.buffer, CL_TRUE, 0,
                                     out_bytes, host_out, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return tool_failure("bench: %s: reading the output failed: %s", p->name,
                            flashcl_status_name(err));
    p->ran = true;
    p->bytes_extra = path == FLASHCL_PATH_STANDARD ? flashcl_context_scratch_bytes(ctx)
                                                   : p->plan.scratch_bytes;
    return 0;
}

/* Runs the selected paths and reports; the buffers and context are ready. */
static int run_and_report(flashcl_context *ctx, const bench_args *a, bench_report *report,
                          const bench_buffers *buffers, size_t q_bytes)
{
    bench_problem problem;
    problem.ctx = ctx;
    problem.desc = &report->desc;
    problem.q = flashcl_tensor_bshd(buffers->q, a->seqlen, a->heads, a->head_dim);
    problem.k = flashcl_tensor_bshd(buffers->k, a->seqlen_k, a->kv_heads, a->head_dim);
    problem.v = flashcl_tensor_bshd(buffers->v, a->seqlen_k, a->kv_heads, a->head_dim);
    problem.o = flashcl_tensor_bshd(buffers->o, a->seqlen, a->heads, a->head_dim);
    bench_settings settings = {a->iters, a->warmup};

    float *outputs[BENCH_PATH_COUNT] = {NULL, NULL};
    int rc = 0;
    for (int i = 0; i < BENCH_PATH_COUNT && rc == 0; ++i) {
        bench_path_report *p = &report->paths[i];
        if (!p->selected)
            continue;
        outputs[i] = malloc(q_bytes);
        if (outputs[i] == NULL) {
            rc = tool_failure("bench: out of host memory for the outputs");
            break;
        }
        flashcl_path path = i == BENCH_STANDARD ? FLASHCL_PATH_STANDARD : FLASHCL_PATH_FLASH;
        rc = run_one(ctx, &problem, path, &settings, p, outputs[i], q_bytes);
    }
    if (rc == 0) {
        if (report->paths[BENCH_FLASH].ran && report->paths[BENCH_STANDARD].ran) {
            compare_outputs(outputs[BENCH_FLASH], outputs[BENCH_STANDARD], q_bytes / sizeof(float),
                            BENCH_ATOL, BENCH_RTOL, &report->comparison);
            report->compared = true;
        }
        if (a->json)
            bench_print_json(stdout, report);
        else
            bench_print_table(stdout, report);
        if (report->compared && !report->comparison.agree)
            rc = tool_failure("bench: flash and standard disagree (%zu elements differ)",
                              report->comparison.mismatches);
    }
    free(outputs[BENCH_FLASH]);
    free(outputs[BENCH_STANDARD]);
    return rc;
}

static bool device_is_cpu(cl_device_id device)
{
    cl_device_type type = 0;
    return clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL) == CL_SUCCESS &&
           (type & CL_DEVICE_TYPE_CPU);
}

/* `bench --backward`: the same problem and settings, handed to bench_backward.c. */
static int run_backward(const bench_args *a)
{
    bench_backward_options o;
    memset(&o, 0, sizeof o);
    o.desc = (flashcl_attention_desc)FLASHCL_ATTENTION_DESC_INIT;
    o.desc.batch = a->batch;
    o.desc.heads_q = a->heads;
    o.desc.heads_kv = a->kv_heads;
    o.desc.seqlen_q = a->seqlen;
    o.desc.seqlen_k = a->seqlen_k;
    o.desc.head_dim = a->head_dim;
    o.desc.causal = a->causal;
    o.settings.iters = a->iters;
    o.settings.warmup = a->warmup;
    o.run_flash = a->path != CHOICE_STANDARD;
    o.run_standard = a->path != CHOICE_FLASH;
    o.json = a->json;

    flashcl_context *ctx = NULL;
    char err[1024] = "";
    flashcl_status status = flashcl_context_create(&ctx, a->device, err, sizeof err);
    if (status != FLASHCL_SUCCESS)
        return tool_status_error(NULL, status, err);
    roof_init(&o.roof, device_is_cpu(flashcl_context_device(ctx)), a->roof_gflops);
    int rc = bench_backward(ctx, &o);
    flashcl_context_destroy(ctx);
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    bench_args a;
    memset(&a, 0, sizeof a);
    bool help = false;
    int rc = parse_args(argc, argv, &a, &help);
    if (help) {
        cmd_bench_help(stdout);
        return TOOL_EXIT_OK;
    }
    if (rc != 0)
        return rc;

    size_t q_bytes = bench_tensor_bytes(a.batch, a.seqlen, a.heads, a.head_dim);
    size_t kv_bytes = bench_tensor_bytes(a.batch, a.seqlen_k, a.kv_heads, a.head_dim);
    if (q_bytes == 0 || kv_bytes == 0)
        return tool_usage_error("bench: the tensors of this shape are too large to address");
    if (bench_variant_any(&a.var))
        return run_variants(&a);
    if (a.backward)
        return run_backward(&a);

    /* On the heap, zeroed: the report holds a few kilobytes of plans and text. */
    bench_report *report = calloc(1, sizeof *report);
    if (report == NULL)
        return tool_failure("bench: out of host memory");
    report->desc = (flashcl_attention_desc)FLASHCL_ATTENTION_DESC_INIT;
    report->desc.batch = a.batch;
    report->desc.heads_q = a.heads;
    report->desc.heads_kv = a.kv_heads;
    report->desc.seqlen_q = a.seqlen;
    report->desc.seqlen_k = a.seqlen_k;
    report->desc.head_dim = a.head_dim;
    report->desc.causal = a.causal;
    report->warmup = a.warmup;
    double d = (double)a.batch * (double)a.heads * (double)a.seqlen * (double)a.seqlen_k *
               (double)a.head_dim;
    report->flops = 4.0 * d * (a.causal ? 0.5 : 1.0);
    report->bytes = 4.0 * (2.0 * (double)a.batch * (double)a.heads * (double)a.seqlen *
                               (double)a.head_dim +
                           2.0 * (double)a.batch * (double)a.kv_heads * (double)a.seqlen_k *
                               (double)a.head_dim);
    report->paths[BENCH_FLASH].name = "flash";
    report->paths[BENCH_STANDARD].name = "standard";
    report->paths[BENCH_FLASH].selected = a.path != CHOICE_STANDARD;
    report->paths[BENCH_STANDARD].selected = a.path != CHOICE_FLASH;

    flashcl_context *ctx = NULL;
    char err[1024] = "";
    flashcl_status status = flashcl_context_create(&ctx, a.device, err, sizeof err);
    if (status != FLASHCL_SUCCESS) {
        free(report);
        return tool_status_error(NULL, status, err);
    }
    device_string_into(flashcl_context_device(ctx), CL_DEVICE_NAME, report->device,
                       sizeof report->device);
    roof_init(&report->roof, device_is_cpu(flashcl_context_device(ctx)), a.roof_gflops);

    bench_buffers buffers = {NULL, NULL, NULL, NULL};
    rc = create_buffers(ctx, q_bytes, kv_bytes, &buffers);
    if (rc == 0)
        rc = run_and_report(ctx, &a, report, &buffers, q_bytes);
    release_buffers(&buffers);
    flashcl_context_destroy(ctx);
    free(report);
    return rc;
}
