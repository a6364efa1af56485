/* The `bench` runner: paths x passes, then the check; see bench_runner.h. */
#include "bench_runner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage_codec.h"
#include "tool_errors.h"

/* ------------------------------------------------------------- passes */

/* The plain call, or the KV-cache call (the decode step of an inference loop) for a path with a cache. */
static flashcl_status enqueue_forward(const bench_problem *p) {
    if (p->has_cache)
        return flashcl_forward_kvcache(p->ctx, &p->desc, &p->q, &p->cache.kv, &p->o, p->mem[BENCH_LSE], 0, 0, NULL,
                                       NULL);
    return flashcl_forward(p->ctx, &p->desc, &p->q, &p->k, &p->v, &p->o, p->mem[BENCH_LSE], 0, 0, NULL, NULL);
}

static flashcl_status enqueue_backward(const bench_problem *p) {
    return flashcl_backward(p->ctx, &p->desc, &p->q, &p->k, &p->v, &p->o, &p->dout, p->mem[BENCH_LSE], 0, &p->dq,
                            &p->dk, &p->dv, 0, NULL, NULL);
}

/*
 * No events between the two: the queue is in order (the tool created it), so
 * the backward starts after the forward has written O and LSE, and the next
 * pair's forward after this backward has read them.
 */
static flashcl_status enqueue_forward_backward(const bench_problem *p) {
    flashcl_status status = enqueue_forward(p);
    return status != FLASHCL_SUCCESS ? status : enqueue_backward(p);
}

/* The forward reads Q, K, V (a cache's at its element size, only the rows in use) and writes O (and LSE, which is
   0 bytes without gradients). A cache's tables are not counted: a few bytes a page. */
static double forward_bytes(const bench_problem *p) {
    const size_t *b = p->bytes;
    return (double)b[BENCH_Q] + (double)b[BENCH_K] + (double)b[BENCH_V] + (double)b[BENCH_O] + (double)b[BENCH_LSE];
}

/* The backward reads Q, K, V, O, dO, LSE and writes dQ, dK, dV. */
static double backward_bytes(const bench_problem *p) {
    const size_t *b = p->bytes;
    return forward_bytes(p) + (double)b[BENCH_DOUT] + (double)b[BENCH_DQ] + (double)b[BENCH_DK] + (double)b[BENCH_DV];
}

static double forward_backward_bytes(const bench_problem *p) { return forward_bytes(p) + backward_bytes(p); }

const bench_pass bench_pass_forward = {
    .name = "fwd",
    .summary = "forward writing O and LSE",
    .flop_factor = 1.0,
    .calls = BENCH_CALLS_FORWARD,
    .enqueue = enqueue_forward,
    .bytes = forward_bytes,
};
const bench_pass bench_pass_backward = {
    .name = "bwd",
    .summary = "backward from a random dO to dQ, dK, dV",
    .flop_factor = BENCH_BWD_FLOP_RATIO,
    .calls = BENCH_CALLS_BACKWARD,
    .enqueue = enqueue_backward,
    .bytes = backward_bytes,
};
const bench_pass bench_pass_forward_backward = {
    .name = "fwd+bwd",
    .summary = "both, back to back",
    .flop_factor = 1.0 + BENCH_BWD_FLOP_RATIO,
    .calls = BENCH_CALLS_BOTH,
    .enqueue = enqueue_forward_backward,
    .bytes = forward_backward_bytes,
};

/* One pass on one problem, as bench_work's untyped user pointer. */
typedef struct pass_call {
    const bench_pass *pass;
    const bench_problem *problem;
} pass_call;

static flashcl_status enqueue_pass_of(const void *user) {
    const pass_call *call = user;
    return call->pass->enqueue(call->problem);
}

/* ------------------------------------------------------------- failures */

/* Statuses that mean "the buffers do not fit", which skip a path marked skip_when_full. */
static bool is_allocation_failure(int status) {
    return status == FLASHCL_ERR_OUT_OF_DEVICE_MEMORY || status == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
           status == CL_OUT_OF_RESOURCES || status == CL_OUT_OF_HOST_MEMORY || status == CL_INVALID_BUFFER_SIZE;
}

/* "STATUS_NAME: detail" for a failed call on ctx. */
static void describe_failure(flashcl_context *ctx, int status, char *buf, size_t size) {
    const char *detail = flashcl_last_error(ctx);
    snprintf(buf, size, "%s: %s", flashcl_status_name(status),
             detail != NULL && detail[0] ? detail : flashcl_status_string(status));
}

/* ------------------------------------------------------------- one path */

/* The plans of the calls the passes make; a path that cannot allocate may be skipped. */
static int plan_path(const bench_job *job, const bench_path *path, const bench_problem *problem, bool training,
                     bench_path_result *out) {
    flashcl_status status = flashcl_plan_query(problem->ctx, &problem->desc, &out->fwd_plan);
    if (status == FLASHCL_SUCCESS && training)
        status = flashcl_backward_plan_query(problem->ctx, &problem->desc, &out->bwd_plan);
    if (status == FLASHCL_SUCCESS) {
        out->planned = true;
        return 0;
    }
    if (!path->skip_when_full || !is_allocation_failure(status))
        return tool_status_error(path->name, status, flashcl_last_error(problem->ctx));
    for (size_t pass = 0; pass < job->pass_count; ++pass) {
        out->passes[pass].skipped = true;
        describe_failure(problem->ctx, status, out->passes[pass].reason, sizeof out->passes[pass].reason);
    }
    return 0;
}

/*
 * Times the passes in order. When a path that may be skipped cannot
 * allocate for one pass, it and the passes after it are skipped: each
 * needs at least as much scratch, and a backward needs the O and LSE of
 * this path's own forward.
 */
static int time_passes(const bench_job *job, const bench_path *path, const bench_problem *problem,
                       bench_path_result *out) {
    cl_command_queue queue = flashcl_context_queue(problem->ctx);
    size_t blocked = job->pass_count; /* the pass that could not allocate */
    for (size_t pass = 0; pass < job->pass_count; ++pass) {
        const bench_pass *kind = job->passes[pass];
        bench_pass_result *s = &out->passes[pass];
        s->flops = kind->flop_factor * problem->forward_flops;
        s->bytes = kind->bytes(problem);
        if (blocked < job->pass_count) {
            s->skipped = true;
            /* The blocked pass's reason, cut to what is left of this one's (it is another element of
               out->passes: blocked < pass). */
            const char *cause = out->passes[blocked].reason;
            int n = snprintf(s->reason, sizeof s->reason,
                             "not run, as %s could not allocate: ", job->passes[blocked]->name);
            if (n >= 0 && (size_t)n < sizeof s->reason) {
                size_t len = 0;
                while (cause[len] && (size_t)n + len + 1 < sizeof s->reason) ++len;
                memcpy(s->reason + n, cause, len);
                s->reason[(size_t)n + len] = '\0';
            }
            continue;
        }
        char label[64];
        snprintf(label, sizeof label, "%s %s", path->name, kind->name);
        pass_call call = {kind, problem};
        bench_work work = {queue, label, enqueue_pass_of, &call};
        flashcl_status status = bench_time_work(&work, &job->settings, &s->timing);
        if (status != FLASHCL_SUCCESS) {
            describe_failure(problem->ctx, status, s->reason, sizeof s->reason);
            if (!path->skip_when_full || !is_allocation_failure(status))
                return tool_status_error(label, status, flashcl_last_error(problem->ctx));
            s->skipped = true;
            blocked = pass;
            /* Let anything still queued drain before the next path runs. */
            clFinish(queue);
            continue;
        }
        s->ran = true;
        s->bytes_extra = flashcl_context_scratch_bytes(problem->ctx);
        if (job->kernels) {
            int rc = bench_kernels_measure(problem->ctx, label, enqueue_pass_of, &call, &s->kernels);
            if (rc != 0) return rc;
        }
    }
    return 0;
}

/* The checked tensors of one path, read back after its last pass. */
typedef struct path_outputs {
    size_t count;
    bench_output info[BENCH_MAX_OUTPUTS]; /* names and sizes (the buffers are gone once the path is done) */
    float *host[BENCH_MAX_OUTPUTS];
} path_outputs;

/* Read back as floats (16-bit storage widened), so paths of any dtype compare element by element. */
static int read_outputs(const bench_path *path, const bench_problem *problem, path_outputs *out) {
    out->count = bench_problem_outputs(problem, out->info);
    for (size_t i = 0; i < out->count; ++i) {
        const bench_output *info = &out->info[i];
        void *raw = malloc(info->bytes);
        out->host[i] = malloc(info->count * sizeof(float));
        if (raw == NULL || out->host[i] == NULL) {
            free(raw);
            return tool_failure("bench: out of host memory for the outputs");
        }
        cl_int err = clEnqueueReadBuffer(flashcl_context_queue(problem->ctx), info->buffer, CL_TRUE, 0, info->bytes,
                                         raw, 0, NULL, NULL);
        if (err == CL_SUCCESS) flashcl__from_storage(info->dtype, raw, out->host[i], info->count);
        free(raw);
        if (err != CL_SUCCESS)
            return tool_failure("bench: %s: reading %s failed: %s", path->name, info->name, flashcl_status_name(err));
    }
    return 0;
}

static bool all_ran(const bench_job *job, const bench_path_result *r) {
    for (size_t pass = 0; pass < job->pass_count; ++pass)
        if (!r->passes[pass].ran) return false;
    return true;
}

/* Creates, plans, times and (for the check) reads back one path, on a context of its own. */
static int run_path(const bench_job *job, size_t index, bool training, bench_path_result *out, path_outputs *outputs) {
    const bench_path *path = &job->paths[index];
    flashcl_context *pctx = NULL;
    flashcl_status status = flashcl_context_create_from_queue(&pctx, flashcl_context_queue(job->ctx));
    if (status != FLASHCL_SUCCESS) return tool_status_error(path->name, status, NULL);
    bench_problem problem;
    bench_problem_spec spec = {&job->base, path->variants, path->cache, path->path, training};
    int rc = bench_problem_create(pctx, &spec, &problem);
    if (rc == 0) {
        out->dtype = problem.desc.dtype;
        out->head_dim_v = problem.desc.head_dim_v;
        if (path->variants != NULL) variant_describe(path->variants, out->features, sizeof out->features);
        if (problem.has_cache) bench_cache_describe(path->cache, &problem.cache, out->cache, sizeof out->cache);
        rc = plan_path(job, path, &problem, training, out);
        if (rc == 0 && out->planned) rc = time_passes(job, path, &problem, out);
        if (rc == 0 && job->check && all_ran(job, out)) rc = read_outputs(path, &problem, outputs);
        clFinish(flashcl_context_queue(pctx));
        bench_problem_release(&problem);
    }
    flashcl_context_destroy(pctx);
    return rc;
}

/* ------------------------------------------------------------- check */

static void compare_outputs(const float *actual, const float *reference, size_t count, compare_result *out) {
    out->max_abs_diff = 0.0;
    out->mismatches = 0;
    out->first_mismatch = 0;
    bool saw_nan = false;
    for (size_t i = 0; i < count; ++i) {
        double a = actual[i], r = reference[i];
        double diff = fabs(a - r);
        /* Written so that a NaN anywhere counts as a mismatch. */
        bool close = diff <= BENCH_ATOL + BENCH_RTOL * fabs(r);
        if (isnan(diff))
            saw_nan = true;
        else if (diff > out->max_abs_diff)
            out->max_abs_diff = diff;
        if (!close) {
            if (out->mismatches == 0) out->first_mismatch = i;
            out->mismatches++;
        }
    }
    if (saw_nan) out->max_abs_diff = NAN;
    out->agree = out->mismatches == 0;
}

/* Paths 0 and 1 ran the same float32 problem: their tensors come in the same order and size. */
static void check_paths(const bench_job *job, bench_results *r, const path_outputs outputs[BENCH_MAX_PATHS]) {
    bench_check *c = &r->check;
    if (!job->check) {
        snprintf(c->reason, sizeof c->reason, "%s", job->no_check_reason);
        return;
    }
    if (job->path_count < 2) {
        snprintf(c->reason, sizeof c->reason, "only one path was run");
        return;
    }
    for (size_t i = 0; i < 2; ++i) {
        if (outputs[i].count == 0) {
            snprintf(c->reason, sizeof c->reason, "%s was skipped, so there is nothing to compare %s with",
                     job->paths[i].name, job->paths[1 - i].name);
            return;
        }
    }
    c->count = outputs[0].count;
    for (size_t t = 0; t < c->count; ++t) {
        c->names[t] = outputs[0].info[t].name;
        compare_outputs(outputs[0].host[t], outputs[1].host[t], outputs[0].info[t].count, &c->results[t]);
    }
    c->done = true;
}

bool bench_check_agrees(const bench_check *c) {
    for (size_t i = 0; c->done && i < c->count; ++i)
        if (!c->results[i].agree) return false;
    return true;
}

/* ------------------------------------------------------------- the job */

int bench_run(const bench_job *job, bench_results *r) {
    memset(r, 0, sizeof *r);
    for (size_t pass = 0; pass < job->pass_count; ++pass)
        r->training = r->training || job->passes[pass]->calls != BENCH_CALLS_FORWARD;
    path_outputs outputs[BENCH_MAX_PATHS];
    memset(outputs, 0, sizeof outputs);
    int rc = 0;
    for (size_t i = 0; i < job->path_count && rc == 0; ++i)
        rc = run_path(job, i, r->training, &r->paths[i], &outputs[i]);
    if (rc == 0) check_paths(job, r, outputs);
    for (size_t i = 0; i < BENCH_MAX_PATHS; ++i)
        for (size_t t = 0; t < BENCH_MAX_OUTPUTS; ++t) free(outputs[i].host[t]);
    return rc;
}

double bench_ratio_value(const bench_job *job, const bench_results *r, size_t pass) {
    const bench_ratio *ratio = &job->ratio;
    if (ratio->name == NULL || ratio->numerator >= job->path_count || ratio->denominator >= job->path_count) return NAN;
    const bench_pass_result *n = &r->paths[ratio->numerator].passes[pass];
    const bench_pass_result *d = &r->paths[ratio->denominator].passes[pass];
    if (!n->ran || !d->ran || d->timing.ms <= 0.0) return NAN;
    return n->timing.ms / d->timing.ms;
}
