/*
 * `bench --backward`; see bench_backward.h.
 *
 * Each path runs on its own flashcl_context made around the tool's queue:
 * the buffers stay shared (same cl_context), but the scratch is the path's
 * alone, so flashcl_context_scratch_bytes after a pass is what that path
 * holds, and flash's scratch is freed before standard allocates its N x N.
 */
#include "bench_backward.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench_backward_report.h"
#include "bench_common.h"
#include "bench_passes.h"
#include "device_info.h"
#include "tool_errors.h"

/* Device buffers of a training step; random: Q, K, V (as the forward bench), then dO. */
enum { TB_Q, TB_K, TB_V, TB_DOUT, TB_O, TB_LSE, TB_DQ, TB_DK, TB_DV, TB_COUNT };
static const char *const buffer_names[TB_COUNT] = {"Q",   "K",  "V",  "dO", "O",
                                                   "LSE", "dQ", "dK", "dV"};

typedef struct train_sizes {
    size_t q_bytes, kv_bytes, lse_bytes;
} train_sizes;

static size_t buffer_bytes(const train_sizes *s, int which)
{
    if (which == TB_LSE)
        return s->lse_bytes;
    return which == TB_K || which == TB_V || which == TB_DK || which == TB_DV ? s->kv_bytes
                                                                              : s->q_bytes;
}

static void release_buffers(cl_mem mem[TB_COUNT])
{
    for (int i = 0; i < TB_COUNT; ++i) {
        if (mem[i] != NULL)
            clReleaseMemObject(mem[i]);
        mem[i] = NULL;
    }
}

static int create_buffers(flashcl_context *ctx, const train_sizes *s, cl_mem mem[TB_COUNT])
{
    size_t largest = s->q_bytes > s->kv_bytes ? s->q_bytes : s->kv_bytes;
    int rc = bench_check_fits(ctx, largest);
    if (rc != 0)
        return rc;
    float *staging = malloc(largest);
    if (staging == NULL)
        return tool_failure("bench: out of host memory for the inputs");
    uint64_t state = BENCH_RANDOM_SEED; /* fixed: every run sees the same inputs */
    cl_context cl = flashcl_context_cl_context(ctx);
    for (int i = 0; i < TB_COUNT && rc == 0; ++i) {
        bool random = i <= TB_DOUT;
        cl_int err = bench_create_buffer(cl, buffer_bytes(s, i), staging, random ? &state : NULL,
                                         &mem[i]);
        if (err != CL_SUCCESS)
            rc = tool_failure("bench: cannot allocate %s (%zu bytes) on the device: %s",
                              buffer_names[i], buffer_bytes(s, i), flashcl_status_name(err));
    }
    free(staging);
    return rc;
}

/* The plans of both calls; a standard path that cannot allocate is skipped. */
static int plan_path(flashcl_context *pctx, const flashcl_attention_desc *desc, flashcl_path path,
                     bench_backward_path *p)
{
    flashcl_attention_desc d = *desc;
    d.path = path;
    flashcl_status status = flashcl_plan_query(pctx, &d, &p->fwd_plan);
    if (status == FLASHCL_SUCCESS)
        status = flashcl_backward_plan_query(pctx, &d, &p->bwd_plan);
    if (status == FLASHCL_SUCCESS) {
        p->planned = true;
        return 0;
    }
    if (path == FLASHCL_PATH_STANDARD && bench_is_allocation_failure(status)) {
        for (int pass = 0; pass < BENCH_PASS_COUNT; ++pass) {
            p->passes[pass].skipped = true;
            bench_describe_failure(pctx, status, p->passes[pass].reason,
                                   sizeof p->passes[pass].reason);
        }
        return 0;
    }
    return tool_status_error(p->name, status, flashcl_last_error(pctx));
}

/*
 * Times the passes in order. When standard cannot allocate for one pass, it
 * and the passes after it are skipped: each needs at least as much scratch,
 * and the backward needs the O and LSE of this path's own forward.
 */
static int time_passes(bench_train_problem *problem, const bench_settings *settings,
                       bench_backward_path *p)
{
    int blocked = -1; /* the pass that could not allocate */
    for (int pass = 0; pass < BENCH_PASS_COUNT; ++pass) {
        bench_pass_report *s = &p->passes[pass];
        if (s->skipped)
            return 0; /* planning already failed */
        if (blocked >= 0) {
            s->skipped = true;
            snprintf(s->reason, sizeof s->reason, "not run, as %s could not allocate: %s",
                     bench_pass_name(blocked), p->passes[blocked].reason);
            continue;
        }
        char label[32];
        snprintf(label, sizeof label, "%s %s", p->name, bench_pass_name(pass));
        bench_work work = bench_pass_work(problem, pass, label);
        flashcl_status status = bench_run_work(&work, settings, &s->result);
        if (status != FLASHCL_SUCCESS) {
            bench_describe_failure(problem->ctx, status, s->reason, sizeof s->reason);
            if (problem->path == FLASHCL_PATH_STANDARD && bench_is_allocation_failure(status)) {
                s->skipped = true;
                blocked = pass;
                /* Let anything still queued drain before the next path runs. */
                clFinish(flashcl_context_queue(problem->ctx));
                continue;
            }
            return tool_status_error(label, status, flashcl_last_error(problem->ctx));
        }
        s->ran = true;
        s->bytes_extra = flashcl_context_scratch_bytes(problem->ctx);
    }
    return 0;
}

/* dQ, dK, dV of the last fwd+bwd to the host. */
static int read_gradients(cl_command_queue queue, const train_sizes *s, cl_mem mem[TB_COUNT],
                          float *grads[BENCH_GRAD_COUNT], const char *name)
{
    for (int g = 0; g < BENCH_GRAD_COUNT; ++g) {
        int which = TB_DQ + g;
        cl_int err = clEnqueueReadBuffer(queue, mem[which], CL_TRUE, 0, buffer_bytes(s, which),
                                         grads[g], 0, NULL, NULL);
        if (err != CL_SUCCESS)
            return tool_failure("bench: %s: reading %s failed: %s", name, buffer_names[which],
                                flashcl_status_name(err));
    }
    return 0;
}

/* Plans, times and reads back one path on a context of its own. */
static int run_path(flashcl_context *ctx, const bench_backward_options *o, const train_sizes *s,
                    cl_mem mem[TB_COUNT], bench_backward_path *p, flashcl_path path,
                    float *grads[BENCH_GRAD_COUNT], bool *have_grads)
{
    flashcl_context *pctx = NULL;
    flashcl_status status = flashcl_context_create_from_queue(&pctx, flashcl_context_queue(ctx));
    if (status != FLASHCL_SUCCESS)
        return tool_status_error(p->name, status, NULL);
    const flashcl_attention_desc *d = &o->desc;
    bench_train_problem problem;
    problem.ctx = pctx;
    problem.desc = d;
    problem.path = path;
    problem.q = flashcl_tensor_bshd(mem[TB_Q], d->seqlen_q, d->heads_q, d->head_dim);
    problem.k = flashcl_tensor_bshd(mem[TB_K], d->seqlen_k, d->heads_kv, d->head_dim);
    problem.v = flashcl_tensor_bshd(mem[TB_V], d->seqlen_k, d->heads_kv, d->head_dim);
    problem.o = flashcl_tensor_bshd(mem[TB_O], d->seqlen_q, d->heads_q, d->head_dim);
    problem.dout = flashcl_tensor_bshd(mem[TB_DOUT], d->seqlen_q, d->heads_q, d->head_dim);
    problem.dq = flashcl_tensor_bshd(mem[TB_DQ], d->seqlen_q, d->heads_q, d->head_dim);
    problem.dk = flashcl_tensor_bshd(mem[TB_DK], d->seqlen_k, d->heads_kv, d->head_dim);
    problem.dv = flashcl_tensor_bshd(mem[TB_DV], d->seqlen_k, d->heads_kv, d->head_dim);
    problem.lse = mem[TB_LSE];

    int rc = plan_path(pctx, d, path, p);
    if (rc == 0)
        rc = time_passes(&problem, &o->settings, p);
    if (rc == 0 && p->passes[BENCH_PASS_FWD_BWD].ran) {
        rc = read_gradients(flashcl_context_queue(pctx), s, mem, grads, p->name);
        *have_grads = rc == 0;
    }
    flashcl_context_destroy(pctx);
    return rc;
}

/* FLOPs and minimum traffic of each pass. */
static void fill_counts(bench_backward_report *r)
{
    const flashcl_attention_desc *d = &r->desc;
    double b = (double)d->batch, hq = (double)d->heads_q, hkv = (double)d->heads_kv;
    double sq = (double)d->seqlen_q, sk = (double)d->seqlen_k, dim = (double)d->head_dim;
    double fwd = 4.0 * b * hq * sq * sk * dim * (d->causal ? 0.5 : 1.0);
    r->flops[BENCH_PASS_FWD] = fwd;
    r->flops[BENCH_PASS_BWD] = BENCH_BWD_FLOP_RATIO * fwd;
    r->flops[BENCH_PASS_FWD_BWD] = (1.0 + BENCH_BWD_FLOP_RATIO) * fwd;
    double nq = b * sq * hq * dim, nk = b * sk * hkv * dim, rows = b * hq * sq;
    /* fwd reads Q, K, V and writes O, LSE; bwd reads Q, K, V, O, dO, LSE and writes dQ, dK, dV. */
    r->bytes[BENCH_PASS_FWD] = 4.0 * (2.0 * nq + 2.0 * nk + rows);
    r->bytes[BENCH_PASS_BWD] = 4.0 * (4.0 * nq + 4.0 * nk + rows);
    r->bytes[BENCH_PASS_FWD_BWD] = r->bytes[BENCH_PASS_FWD] + r->bytes[BENCH_PASS_BWD];
}

/* Runs the selected paths, compares their gradients and prints the report. */
static int run_all(flashcl_context *ctx, const bench_backward_options *o, const train_sizes *s,
                   cl_mem mem[TB_COUNT], bench_backward_report *r)
{
    float *grads[BENCH_PATH_COUNT][BENCH_GRAD_COUNT];
    memset(grads, 0, sizeof grads);
    bool have[BENCH_PATH_COUNT] = {false, false};
    int rc = 0;
    for (int i = 0; i < BENCH_PATH_COUNT && rc == 0; ++i) {
        if (!r->paths[i].selected)
            continue;
        for (int g = 0; g < BENCH_GRAD_COUNT && rc == 0; ++g) {
            grads[i][g] = malloc(buffer_bytes(s, TB_DQ + g));
            if (grads[i][g] == NULL)
                rc = tool_failure("bench: out of host memory for the gradients");
        }
        flashcl_path path = i == BENCH_STANDARD ? FLASHCL_PATH_STANDARD : FLASHCL_PATH_FLASH;
        if (rc == 0)
            rc = run_path(ctx, o, s, mem, &r->paths[i], path, grads[i], &have[i]);
    }
    if (rc == 0) {
        if (have[BENCH_FLASH] && have[BENCH_STANDARD]) {
            for (int g = 0; g < BENCH_GRAD_COUNT; ++g)
                compare_outputs(grads[BENCH_FLASH][g], grads[BENCH_STANDARD][g],
                                buffer_bytes(s, TB_DQ + g) / sizeof(float), BENCH_ATOL, BENCH_RTOL,
                                &r->grads[g]);
            r->compared = true;
        }
        if (o->json)
            bench_backward_print_json(stdout, r);
        else
            bench_backward_print_table(stdout, r);
        if (!bench_backward_agree(r))
            rc = tool_failure("bench: flash and standard gradients disagree (elements differing: "
                              "dq %zu, dk %zu, dv %zu)",
                              r->grads[BENCH_GRAD_DQ].mismatches,
                              r->grads[BENCH_GRAD_DK].mismatches,
                              r->grads[BENCH_GRAD_DV].mismatches);
    }
    for (int i = 0; i < BENCH_PATH_COUNT; ++i)
        for (int g = 0; g < BENCH_GRAD_COUNT; ++g)
            free(grads[i][g]);
    return rc;
}

int bench_backward(flashcl_context *ctx, const bench_backward_options *o)
{
    const flashcl_attention_desc *d = &o->desc;
    train_sizes s;
    s.q_bytes = bench_tensor_bytes(d->batch, d->seqlen_q, d->heads_q, d->head_dim);
    s.kv_bytes = bench_tensor_bytes(d->batch, d->seqlen_k, d->heads_kv, d->head_dim);
    s.lse_bytes = bench_tensor_bytes(d->batch, d->heads_q, d->seqlen_q, 1);
    if (s.q_bytes == 0 || s.kv_bytes == 0 || s.lse_bytes == 0)
        return tool_usage_error("bench: the tensors of this shape are too large to address");

    /* On the heap, zeroed: the report holds a few kilobytes of plans and text. */
    bench_backward_report *r = calloc(1, sizeof *r);
    if (r == NULL)
        return tool_failure("bench: out of host memory");
    r->desc = *d;
    r->warmup = o->settings.warmup;
    r->roof = o->roof;
    fill_counts(r);
    r->paths[BENCH_FLASH].name = "flash";
    r->paths[BENCH_STANDARD].name = "standard";
    r->paths[BENCH_FLASH].selected = o->run_flash;
    r->paths[BENCH_STANDARD].selected = o->run_standard;
    device_string_into(flashcl_context_device(ctx), CL_DEVICE_NAME, r->device, sizeof r->device);

    cl_mem mem[TB_COUNT];
    memset(mem, 0, sizeof mem);
    int rc = create_buffers(ctx, &s, mem);
    if (rc == 0)
        rc = run_all(ctx, o, &s, mem, r);
    release_buffers(mem);
    free(r);
    return rc;
}
