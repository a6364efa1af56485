#define _POSIX_C_SOURCE 200809L
#include "tune_measure.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage_codec.h"
#include "timing.h"

#define MAX_TIMED_ITERS 500   /* a decode call on a GPU takes tens of microseconds */
#define CHECK_SEQLEN 67       /* not a multiple of any tile: the partial tiles run */
#define CHECK_HEADS 2         /* KV heads of the check */
#define CHECK_DECODE_KEYS 517 /* a decode check's keys: odd, several chunks, split on any device */

/* The problem a shape times (check 0) or is checked on (check 1), one sequence per batch entry. */
typedef struct problem {
    size_t batch, heads_q, heads_kv, seqlen_q, seqlen_k;
} problem;

static problem problem_of(const tune_shape *s, bool check) {
    const size_t hkv = s->decode ? s->heads_kv : s->heads;
    if (!check) return (problem){s->batch, s->heads, hkv, s->seqlen, s->decode ? s->seqlen_k : s->seqlen};
    if (!s->decode) return (problem){1, CHECK_HEADS, CHECK_HEADS, CHECK_SEQLEN, CHECK_SEQLEN};
    /* The shape's GQA group and query rows: the decode plan depends on the packed rows they make. */
    return (problem){1, CHECK_HEADS * (s->heads / hkv), CHECK_HEADS, s->seqlen, CHECK_DECODE_KEYS};
}

static flashcl_attention_desc desc_of(const tune_shape *s, const problem *p) {
    flashcl_attention_desc d = flashcl_attention_desc_init();
    d.dtype = s->dtype;
    d.batch = p->batch;
    d.heads_q = p->heads_q;
    d.heads_kv = p->heads_kv;
    d.seqlen_q = p->seqlen_q;
    d.seqlen_k = p->seqlen_k;
    d.head_dim = s->head_dim;
    d.causal = s->causal;
    return d;
}

/* Values k/64, |k| <= 64: exact in float32, float16 and bfloat16, so the reference sees what the kernel reads. */
static void fill(float *x, size_t n, unsigned *state) {
    for (size_t i = 0; i < n; ++i) {
        *state = *state * 1664525u + 1013904223u;
        x[i] = (float)((int)((*state >> 16) % 129u) - 64) / 64.0f;
    }
}

int tune_untuned_plan(const char *device, const tune_shape *s, flashcl_plan *plan, char *err, size_t cap) {
    unsetenv("FLASHCL_TILE");
    const char *saved = getenv("FLASHCL_TUNING");
    char *keep = saved ? strdup(saved) : NULL;
    setenv("FLASHCL_TUNING", "off", 1); /* the table's or the formula's plan, not a tuned one */
    flashcl_context *ctx = NULL;
    int st = flashcl_context_create(&ctx, device, err, cap);
    if (keep) {
        setenv("FLASHCL_TUNING", keep, 1);
        free(keep);
    } else {
        unsetenv("FLASHCL_TUNING");
    }
    if (st != FLASHCL_SUCCESS) return st;
    const problem p = problem_of(s, false);
    flashcl_attention_desc d = desc_of(s, &p);
    st = flashcl_plan_query(ctx, &d, plan);
    if (st != FLASHCL_SUCCESS) snprintf(err, cap, "%s", flashcl_last_error(ctx));
    flashcl_context_destroy(ctx);
    return st;
}

/* |o - ref| <= atol + rtol |ref| everywhere, in the storage's precision. One sequence: q, o [sq, hq, d],
   k, v [sk, hkv, d]; query head h reads KV head h / group; causal is bottom-right (row i sees keys up to
   i + sk - sq), as the library's. */
static bool check_small(flashcl_context *ctx, const tune_shape *s, char *err, size_t cap) {
    const problem pr = problem_of(s, true);
    const size_t sq = pr.seqlen_q, sk = pr.seqlen_k, hq = pr.heads_q, hkv = pr.heads_kv, d = s->head_dim;
    const size_t group = hq / hkv, qcount = sq * hq * d, kcount = sk * hkv * d;
    float *q = malloc(qcount * sizeof *q), *k = malloc(kcount * sizeof *k), *v = malloc(kcount * sizeof *v);
    float *o = malloc(qcount * sizeof *o);
    bool ok = false;
    if (!q || !k || !v || !o) {
        snprintf(err, cap, "out of host memory for the check");
        goto done;
    }
    unsigned state = 12345u;
    fill(q, qcount, &state);
    fill(k, kcount, &state);
    fill(v, kcount, &state);
    flashcl_attention_desc desc = desc_of(s, &pr);
    int st = flashcl_forward_host(ctx, &desc, q, k, v, o, NULL);
    if (st != FLASHCL_SUCCESS) {
        snprintf(err, cap, "check run failed: %s: %s", flashcl_status_name(st), flashcl_last_error(ctx));
        goto done;
    }
    const double tol = s->dtype == FLASHCL_DTYPE_BF16 ? 1.6e-2 : s->dtype == FLASHCL_DTYPE_F16 ? 2e-3 : 2e-5;
    const double scale = 1.0 / sqrt((double)d);
    ok = true;
    for (size_t head = 0; head < hq && ok; ++head)
        for (size_t i = 0; i < sq && ok; ++i) {
            const size_t kh = head / group, last = s->causal ? i + sk - sq : sk - 1;
            double m = -INFINITY, sum = 0.0, acc[1024] = {0};
            for (size_t j = 0; j <= last; ++j) {
                double dot = 0.0;
                for (size_t e = 0; e < d; ++e) dot += (double)q[(i * hq + head) * d + e] * k[(j * hkv + kh) * d + e];
                dot *= scale;
                double m2 = dot > m ? dot : m, c = exp(m - m2), p = exp(dot - m2);
                sum = sum * c + p;
                for (size_t e = 0; e < d; ++e) acc[e] = acc[e] * c + p * v[(j * hkv + kh) * d + e];
                m = m2;
            }
            for (size_t e = 0; e < d; ++e) {
                double ref = acc[e] / sum, got = o[(i * hq + head) * d + e], diff = fabs(got - ref);
                if (!(diff <= tol + tol * fabs(ref))) {
                    snprintf(err, cap, "disagrees with the reference at head %zu row %zu dim %zu: %g vs %g", head, i, e,
                             got, ref);
                    ok = false;
                    break;
                }
            }
        }
done:
    free(q);
    free(k);
    free(v);
    free(o);
    return ok;
}

static double event_ns(cl_event e, cl_profiling_info what) {
    cl_ulong t = 0;
    return clGetEventProfilingInfo(e, what, sizeof t, &t, NULL) == CL_SUCCESS ? (double)t : NAN;
}

/* Enqueues `iters` forwards after a marker; ms per call from the marker's end to the last call's end. */
static int time_calls(flashcl_context *ctx, const flashcl_attention_desc *d, const flashcl_tensor t[4], size_t iters,
                      double *ms) {
    cl_command_queue queue = flashcl_context_queue(ctx);
    cl_event start = NULL, end = NULL;
    cl_int err = clEnqueueMarkerWithWaitList(queue, 0, NULL, &start);
    if (err != CL_SUCCESS) return err;
    int st = FLASHCL_SUCCESS;
    double t0 = wall_seconds();
    for (size_t i = 0; i < iters && st == FLASHCL_SUCCESS; ++i)
        st = flashcl_forward(ctx, d, &t[0], &t[1], &t[2], &t[3], NULL, 0, 0, NULL, i + 1 == iters ? &end : NULL);
    if (st == FLASHCL_SUCCESS) st = clFinish(queue);
    double wall = wall_seconds() - t0;
    if (st == FLASHCL_SUCCESS) {
        double ns = end ? event_ns(end, CL_PROFILING_COMMAND_END) - event_ns(start, CL_PROFILING_COMMAND_END) : NAN;
        /* Drivers that cannot profile a marker: the wall clock of the same calls. */
        *ms = (isfinite(ns) && ns > 0 ? ns * 1e-6 : wall * 1e3) / (double)iters;
    }
    clReleaseEvent(start);
    if (end) clReleaseEvent(end);
    return st;
}

void tune_measure(const char *device, const char *tile, const tune_shape *s, double target_seconds,
                  tune_measurement *m) {
    memset(m, 0, sizeof *m);
    setenv("FLASHCL_TILE", tile, 1);
    setenv("FLASHCL_PROFILING", "1", 1); /* time_calls reads event times, whatever the user's setting */
    flashcl_context *ctx = NULL;
    cl_mem mem[4] = {NULL, NULL, NULL, NULL};
    void *host = NULL;
    int st = flashcl_context_create(&ctx, device, m->error, sizeof m->error);
    if (st != FLASHCL_SUCCESS) goto done;
    const problem p = problem_of(s, false);
    flashcl_attention_desc d = desc_of(s, &p);
    st = flashcl_plan_query(ctx, &d, &m->plan);
    if (st != FLASHCL_SUCCESS) {
        snprintf(m->error, sizeof m->error, "%s", flashcl_last_error(ctx));
        goto done;
    }
    m->planned = true;
    /* Q and O [b, sq, hq, d]; K and V [b, sk, hkv, d]: one buffer size fits all four. */
    const size_t rows =
        p.seqlen_q * p.heads_q > p.seqlen_k * p.heads_kv ? p.seqlen_q * p.heads_q : p.seqlen_k * p.heads_kv;
    const size_t count = p.batch * rows * s->head_dim, elem = flashcl_dtype_size(s->dtype);
    float *values = malloc(count * sizeof *values);
    host = malloc(count * elem);
    if (!values || !host) {
        free(values);
        snprintf(m->error, sizeof m->error, "out of host memory for %zu elements", count);
        goto done;
    }
    unsigned state = 777u;
    fill(values, count, &state);
    flashcl__to_storage(s->dtype, values, host, count);
    free(values);
    cl_context cl = flashcl_context_cl_context(ctx);
    for (int i = 0; i < 4 && st == FLASHCL_SUCCESS; ++i) {
        cl_int err = CL_SUCCESS;
        mem[i] = clCreateBuffer(cl, CL_MEM_READ_WRITE | (i < 3 ? CL_MEM_COPY_HOST_PTR : 0), count * elem,
                                i < 3 ? host : NULL, &err);
        st = err;
    }
    if (st != FLASHCL_SUCCESS) {
        snprintf(m->error, sizeof m->error, "clCreateBuffer: %d", st);
        goto done;
    }
    flashcl_tensor t[4];
    for (int i = 0; i < 4; ++i)
        t[i] = i == 1 || i == 2 ? flashcl_tensor_bshd(mem[i], p.seqlen_k, p.heads_kv, s->head_dim)
                                : flashcl_tensor_bshd(mem[i], p.seqlen_q, p.heads_q, s->head_dim);
    double one = 0.0;
    st = time_calls(ctx, &d, t, 1, &one); /* warm-up: builds anything not built yet, first-touch */
    if (st == FLASHCL_SUCCESS) st = time_calls(ctx, &d, t, 1, &one);
    size_t iters = one > 0 ? (size_t)(target_seconds * 1e3 / one) : 1;
    iters = iters < 1 ? 1 : iters > MAX_TIMED_ITERS ? MAX_TIMED_ITERS : iters;
    if (st == FLASHCL_SUCCESS && iters > 1) st = time_calls(ctx, &d, t, iters, &one);
    if (st != FLASHCL_SUCCESS) {
        snprintf(m->error, sizeof m->error, "forward failed: %s: %s", flashcl_status_name(st), flashcl_last_error(ctx));
        goto done;
    }
    m->ran = true;
    m->ms = one;
    m->iters = iters;
    m->verified = check_small(ctx, s, m->error, sizeof m->error);
done:
    for (int i = 0; i < 4; ++i)
        if (mem[i]) clReleaseMemObject(mem[i]);
    free(host);
    flashcl_context_destroy(ctx);
    unsetenv("FLASHCL_TILE");
}
