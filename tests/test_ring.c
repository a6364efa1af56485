/*
 * Ring attention (flashcl_mpi.h) under mpirun: every rank builds the same
 * global problem, runs the single-process flashcl_forward_host /
 * flashcl_backward_host on the whole sequence as the reference, then the
 * ring calls on its own rows, and compares its rows: causal, full and
 * sliding-window (global positions) attention. Then the error
 * agreement: a bad argument on one rank makes every rank return an error,
 * the same one, without a hang.
 *
 * Tolerance. Both sides accumulate in float32 (unit roundoff u = 2^-24) and
 * differ only in the order of their sums: the ring splits each row's softmax
 * over chunks and merges them by LSE, and sums dK/dV over ranks. Every output
 * element is a sum of at most n terms (n = N keys for O and dQ, N * group
 * query rows for dK and dV with GQA), whose float32 error is at most
 * gamma_n = n u times the sum of the terms' magnitudes; we take that sum as
 * max |ref| over the tensor and allow both sides their bound, twice over for
 * the merges: 4 n u max|ref|. A wrong mask or a lost chunk is O(max|ref|).
 *
 * f16/bf16 storage (run_case_lowp). The inputs are rounded to the storage type
 * first, so every computation sees the same values. References on the whole
 * sequence: flashcl_*_host in float32 (ref32) and in the storage type
 * (single16, one process). single16's own error e16 = max |single16 - ref32|
 * over the tensor is the error a 16-bit result is allowed by the library's
 * tests; the ring rounds its output once like single16, and in addition
 * rounds each of its partial results (the step's partial O; each call's dQ,
 * dK, dV) to storage before merging or summing them in float32, each by at
 * most u |partial| (u = 2^-8 bf16, 2^-11 f16). O: the merge is a convex
 * combination of the partial O's, each itself a convex combination of V
 * rows, so their roundings add at most u max|V| (k = 1, M = max|V|). dQ sums
 * one partial per step (k = P; 2P with a zigzag window, one call per key
 * chunk), dK and dV one per step and query segment (k = 2P with the causal
 * or windowed zigzag split, else P); there M = max|ref32|, an
 * estimate of a partial's size rather than a bound. The allowance is
 *   |ring - ref32| <= 2 e16 + k u M,
 * and the ring against single16 is held to the same bound plus e16.
 */
#include "flashcl_mpi.h"
#include "storage_types.h"
#include "testutil.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    size_t b, hq, hkv, n_global, d, dv;
    int causal;
    flashcl_ring_layout layout;
    int bhsd;            /* local views in [b, h, s, d] (strided rows) instead of packed [b, s, h, d] */
    flashcl_dtype dtype; /* 0: float32 */
    int window, wl, wr;  /* desc.window, window_left, window_right (global positions) */
} shape;

typedef struct mpi_env {
    int rank, size;
} mpi_env;

/* Local rows (the rank's segments, in order) of a global packed [b, N, h, d] array, as
   packed [b, n, h, d] or, with bhsd, [b, h, n, d]. */
static void gather(const float *global, const shape *s, size_t heads, size_t dim, const mpi_env *e, int bhsd,
                   float *local) {
    size_t first[2], rows[2];
    int nseg = 0;
    REQUIRE(flashcl_ring_rows(s->layout, s->n_global, e->size, e->rank, first, rows, &nseg) == FLASHCL_SUCCESS);
    const size_t n = s->n_global / (size_t)e->size;
    for (size_t b = 0; b < s->b; ++b) {
        size_t li = 0;
        for (int g = 0; g < nseg; ++g)
            for (size_t i = 0; i < rows[g]; ++i, ++li)
                for (size_t h = 0; h < heads; ++h) {
                    const float *src = global + ((b * s->n_global + first[g] + i) * heads + h) * dim;
                    float *dst =
                        bhsd ? local + ((b * heads + h) * n + li) * dim : local + ((b * n + li) * heads + h) * dim;
                    memcpy(dst, src, dim * sizeof(float));
                }
    }
}

static void gather_lse(const float *global, const shape *s, const mpi_env *e, float *local) {
    size_t first[2], rows[2];
    int nseg = 0;
    REQUIRE(flashcl_ring_rows(s->layout, s->n_global, e->size, e->rank, first, rows, &nseg) == FLASHCL_SUCCESS);
    const size_t n = s->n_global / (size_t)e->size;
    for (size_t bh = 0; bh < s->b * s->hq; ++bh) {
        size_t li = 0;
        for (int g = 0; g < nseg; ++g)
            for (size_t i = 0; i < rows[g]; ++i, ++li) local[bh * n + li] = global[bh * s->n_global + first[g] + i];
    }
}

static double max_abs(const float *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; ++i) m = fmax(m, fabs(x[i]));
    return m;
}

/* Compares got with ref (count elements) against 4 n u max|ref|; prints the worst ratio. */
static int compare(const char *case_name, const char *what, const mpi_env *e, const float *got, const float *ref,
                   size_t count, size_t terms, double scale) {
    const double u = ldexp(1.0, -24), tol = 4.0 * (double)terms * u * fmax(scale, 1e-30);
    double worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < count; ++i) {
        const double err = fabs((double)got[i] - (double)ref[i]);
        if (!(err <= worst)) worst = err, at = i; /* NaN becomes the worst */
    }
    const int ok = worst <= tol;
    if (!ok || e->rank == 0)
        printf("[rank %d] %-34s %-4s max err %.3g (element %zu) tol %.3g (%.2f of it) %s\n", e->rank, case_name, what,
               worst, at, tol, worst / tol, ok ? "ok" : "FAIL");
    CHECK(ok);
    return ok;
}

static cl_mem buffer_of(flashcl_context *ctx, size_t count, const float *init) {
    return tu_buffer_create(flashcl_context_cl_context(ctx), count, init);
}

static flashcl_tensor view_of(cl_mem m, const shape *s, size_t n, size_t heads, size_t dim) {
    return s->bhsd ? flashcl_tensor_bhsd(m, n, heads, dim) : flashcl_tensor_bshd(m, n, heads, dim);
}

static flashcl_attention_desc local_desc(const shape *s, size_t n) {
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = s->b, d.heads_q = s->hq, d.heads_kv = s->hkv, d.seqlen_q = d.seqlen_k = n;
    d.head_dim = s->d, d.head_dim_v = s->dv, d.causal = s->causal;
    d.window = s->window, d.window_left = s->wl, d.window_right = s->wr;
    return d;
}

static void fill(float *x, size_t n, tu_rng *rng) {
    for (size_t i = 0; i < n; ++i) x[i] = tu_rng_float(rng, -1.0f, 1.0f);
}

/* One case: forward and backward of the ring against the single-process calls. */
static void run_case(flashcl_context *ctx, const mpi_env *e, const char *name, const shape *s) {
    const size_t N = s->n_global, n = N / (size_t)e->size, group = s->hq / s->hkv;
    const size_t nq = s->b * N * s->hq * s->d, nk = s->b * N * s->hkv * s->d, nv = s->b * N * s->hkv * s->dv;
    const size_t no = s->b * N * s->hq * s->dv, nl = s->b * s->hq * N;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4), *dout = malloc(no * 4);
    float *o = malloc(no * 4), *lse = malloc(nl * 4), *dq = malloc(nq * 4), *dk = malloc(nk * 4), *dv = malloc(nv * 4);
    REQUIRE(q && k && v && dout && o && lse && dq && dk && dv);
    tu_rng rng = tu_rng_seed(0x5eed + N);
    fill(q, nq, &rng), fill(k, nk, &rng), fill(v, nv, &rng), fill(dout, no, &rng);

    /* The reference: the whole sequence in this process. */
    flashcl_attention_desc whole = local_desc(s, N);
    REQUIRE(flashcl_forward_host(ctx, &whole, q, k, v, o, lse) == FLASHCL_SUCCESS);
    REQUIRE(flashcl_backward_host(ctx, &whole, q, k, v, o, dout, lse, dq, dk, dv) == FLASHCL_SUCCESS);

    /* This rank's rows. */
    const size_t lq = nq / (size_t)e->size, lk = nk / (size_t)e->size, lv = nv / (size_t)e->size;
    const size_t lo = no / (size_t)e->size, ll = nl / (size_t)e->size;
    float *hq_ = malloc(lq * 4), *hk = malloc(lk * 4), *hv = malloc(lv * 4), *hdo = malloc(lo * 4);
    size_t most = lq;
    const size_t sizes[] = {lk, lv, lo, ll};
    for (size_t i = 0; i < 4; ++i) most = sizes[i] > most ? sizes[i] : most;
    enum { LSE_OFFSET = 5 }; /* the LSE a few floats into its buffer: lse_offset is honoured */
    float *ref = malloc(most * 4), *got = malloc((most + LSE_OFFSET) * 4);
    REQUIRE(hq_ && hk && hv && hdo && ref && got);
    gather(q, s, s->hq, s->d, e, s->bhsd, hq_);
    gather(k, s, s->hkv, s->d, e, s->bhsd, hk);
    gather(v, s, s->hkv, s->dv, e, s->bhsd, hv);
    gather(dout, s, s->hq, s->dv, e, s->bhsd, hdo);
    cl_mem bq = buffer_of(ctx, lq, hq_), bk = buffer_of(ctx, lk, hk), bv = buffer_of(ctx, lv, hv);
    cl_mem bdo = buffer_of(ctx, lo, hdo), bo = buffer_of(ctx, lo, NULL), bl = buffer_of(ctx, ll + LSE_OFFSET, NULL);
    cl_mem bdq = buffer_of(ctx, lq, NULL), bdk = buffer_of(ctx, lk, NULL), bdv = buffer_of(ctx, lv, NULL);
    const flashcl_tensor tq = view_of(bq, s, n, s->hq, s->d), tk = view_of(bk, s, n, s->hkv, s->d);
    const flashcl_tensor tv = view_of(bv, s, n, s->hkv, s->dv), to = view_of(bo, s, n, s->hq, s->dv);
    const flashcl_tensor tdo = view_of(bdo, s, n, s->hq, s->dv), tdq = view_of(bdq, s, n, s->hq, s->d);
    const flashcl_tensor tdk = view_of(bdk, s, n, s->hkv, s->d), tdv = view_of(bdv, s, n, s->hkv, s->dv);

    flashcl_ring_desc ring = FLASHCL_RING_DESC_INIT;
    ring.layout = s->layout;
    double *times = malloc(3 * (size_t)e->size * sizeof *times);
    REQUIRE(times);
    for (int i = 0; i < 3 * e->size; ++i) times[i] = -1.0;
    ring.step_compute_s = times, ring.step_wait_s = times + e->size, ring.step_stage_s = times + 2 * e->size;
    flashcl_attention_desc d = local_desc(s, n);
    flashcl_status st = flashcl_ring_forward(ctx, &d, &ring, &tq, &tk, &tv, &to, bl, LSE_OFFSET, MPI_COMM_WORLD);
    for (int i = 0; i < 3 * e->size; ++i) CHECK(isfinite(times[i]) && times[i] >= 0.0); /* every step timed */
    free(times);
    ring.step_compute_s = ring.step_wait_s = ring.step_stage_s = NULL;
    if (st != FLASHCL_SUCCESS)
        printf("[rank %d] %s forward: %s %s\n", e->rank, name, flashcl_status_name(st), flashcl_last_error(ctx));
    CHECK_STATUS(st, FLASHCL_SUCCESS);
    cl_command_queue queue = flashcl_context_queue(ctx);
    tu_buffer_read(queue, bo, lo, got, NULL);
    gather(o, s, s->hq, s->dv, e, s->bhsd, ref);
    compare(name, "O", e, got, ref, lo, N, max_abs(o, no));
    tu_buffer_read(queue, bl, ll + LSE_OFFSET, got, NULL);
    gather_lse(lse, s, e, ref);
    compare(name, "LSE", e, got + LSE_OFFSET, ref, ll, N, max_abs(lse, nl));

    st = flashcl_ring_backward(ctx, &d, &ring, &tq, &tk, &tv, &to, &tdo, bl, LSE_OFFSET, &tdq, &tdk, &tdv,
                               MPI_COMM_WORLD);
    if (st != FLASHCL_SUCCESS)
        printf("[rank %d] %s backward: %s %s\n", e->rank, name, flashcl_status_name(st), flashcl_last_error(ctx));
    CHECK_STATUS(st, FLASHCL_SUCCESS);
    tu_buffer_read(queue, bdq, lq, got, NULL);
    gather(dq, s, s->hq, s->d, e, s->bhsd, ref);
    compare(name, "dQ", e, got, ref, lq, N, max_abs(dq, nq));
    tu_buffer_read(queue, bdk, lk, got, NULL);
    gather(dk, s, s->hkv, s->d, e, s->bhsd, ref);
    compare(name, "dK", e, got, ref, lk, N * group, max_abs(dk, nk));
    tu_buffer_read(queue, bdv, lv, got, NULL);
    gather(dv, s, s->hkv, s->dv, e, s->bhsd, ref);
    compare(name, "dV", e, got, ref, lv, N * group, max_abs(dv, nv));

    cl_mem all[] = {bq, bk, bv, bdo, bo, bl, bdq, bdk, bdv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) clReleaseMemObject(all[i]);
    free(q), free(k), free(v), free(dout), free(o), free(lse), free(dq), free(dk), free(dv);
    free(hq_), free(hk), free(hv), free(hdo), free(ref), free(got);
}

/* A device buffer of count storage-type elements (init NULL: zeros). */
static cl_mem buffer_lowp(flashcl_context *ctx, flashcl_dtype dt, size_t count, const float *init) {
    uint16_t *h = calloc(count, sizeof *h);
    REQUIRE(h);
    if (init) flashcl__to_storage(dt, init, h, count);
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                              count * sizeof *h, h, &err);
    REQUIRE(err == CL_SUCCESS);
    free(h);
    return m;
}

static void read_lowp(flashcl_context *ctx, flashcl_dtype dt, cl_mem m, size_t count, float *dst) {
    uint16_t *h = malloc(count * sizeof *h);
    REQUIRE(h);
    REQUIRE(clEnqueueReadBuffer(flashcl_context_queue(ctx), m, CL_TRUE, 0, count * sizeof *h, h, 0, NULL, NULL) ==
            CL_SUCCESS);
    flashcl__from_storage(dt, h, dst, count);
    free(h);
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; ++i) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN wins */
    }
    return m;
}

/* The 16-bit bound of the header comment: got (this rank's rows) against ref32 and single16
   (their rows, gathered), e16 = max|single16 - ref32| over the whole tensor. */
static void compare_lowp(const char *case_name, const char *what, const mpi_env *e, const shape *s, const float *got,
                         const float *ref, const float *single, size_t count, double e16, size_t parts,
                         double partial_scale) {
    const double u = st_epsilon(s->dtype), tol = 2.0 * e16 + (double)parts * u * partial_scale;
    const double err = max_diff(got, ref, count), err_single = max_diff(got, single, count);
    const int ok = err <= tol && err_single <= tol + e16;
    if (!ok || e->rank == 0)
        printf("[rank %d] %-34s %-3s vs fp32 %.3g, vs single-process %s %.3g (its own error %.3g), tol %.3g (%.2f of "
               "it) %s\n",
               e->rank, case_name, what, err, st_name(s->dtype), err_single, e16, tol, err / tol, ok ? "ok" : "FAIL");
    CHECK(ok);
}

static void expect_all_fail(const mpi_env *e, const char *what, flashcl_status st);

/* One f16/bf16 case: the ring against single-process calls in float32 and in the storage type. */
static void run_case_lowp(flashcl_context *ctx, const mpi_env *e, const char *name, const shape *s) {
    const flashcl_dtype dt = s->dtype;
    const size_t N = s->n_global, n = N / (size_t)e->size, P = (size_t)e->size;
    const size_t nq = s->b * N * s->hq * s->d, nk = s->b * N * s->hkv * s->d, nv = s->b * N * s->hkv * s->dv;
    const size_t no = s->b * N * s->hq * s->dv, nl = s->b * s->hq * N;
    /* [0] inputs q k v dout; [1] ref32 o lse dq dk dv; [2] single16 o lse dq dk dv */
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4), *dout = malloc(no * 4);
    float *o32 = malloc(no * 4), *l32 = malloc(nl * 4), *dq32 = malloc(nq * 4), *dk32 = malloc(nk * 4),
          *dv32 = malloc(nv * 4);
    float *o16 = malloc(no * 4), *l16 = malloc(nl * 4), *dq16 = malloc(nq * 4), *dk16 = malloc(nk * 4),
          *dv16 = malloc(nv * 4);
    REQUIRE(q && k && v && dout && o32 && l32 && dq32 && dk32 && dv32 && o16 && l16 && dq16 && dk16 && dv16);
    tu_rng rng = tu_rng_seed(0x5eed + N + (size_t)dt);
    fill(q, nq, &rng), fill(k, nk, &rng), fill(v, nv, &rng), fill(dout, no, &rng);
    st_round_array(dt, q, nq), st_round_array(dt, k, nk), st_round_array(dt, v, nv), st_round_array(dt, dout, no);

    flashcl_attention_desc whole = local_desc(s, N);
    REQUIRE(flashcl_forward_host(ctx, &whole, q, k, v, o32, l32) == FLASHCL_SUCCESS);
    REQUIRE(flashcl_backward_host(ctx, &whole, q, k, v, o32, dout, l32, dq32, dk32, dv32) == FLASHCL_SUCCESS);
    whole.dtype = dt;
    REQUIRE(flashcl_forward_host(ctx, &whole, q, k, v, o16, l16) == FLASHCL_SUCCESS);
    REQUIRE(flashcl_backward_host(ctx, &whole, q, k, v, o16, dout, l16, dq16, dk16, dv16) == FLASHCL_SUCCESS);

    const size_t lq = nq / P, lk = nk / P, lv = nv / P, lo = no / P, ll = nl / P;
    size_t most = lq;
    const size_t sizes[] = {lk, lv, lo, ll};
    for (size_t i = 0; i < 4; ++i) most = sizes[i] > most ? sizes[i] : most;
    float *loc = malloc(most * 4), *ref = malloc(most * 4), *single = malloc(most * 4), *got = malloc(most * 4);
    REQUIRE(loc && ref && single && got);
    cl_mem bq, bk, bv, bdo;
    gather(q, s, s->hq, s->d, e, s->bhsd, loc), bq = buffer_lowp(ctx, dt, lq, loc);
    gather(k, s, s->hkv, s->d, e, s->bhsd, loc), bk = buffer_lowp(ctx, dt, lk, loc);
    gather(v, s, s->hkv, s->dv, e, s->bhsd, loc), bv = buffer_lowp(ctx, dt, lv, loc);
    gather(dout, s, s->hq, s->dv, e, s->bhsd, loc), bdo = buffer_lowp(ctx, dt, lo, loc);
    cl_mem bo = buffer_lowp(ctx, dt, lo, NULL), bl = buffer_of(ctx, ll, NULL);
    cl_mem bdq = buffer_lowp(ctx, dt, lq, NULL), bdk = buffer_lowp(ctx, dt, lk, NULL),
           bdv = buffer_lowp(ctx, dt, lv, NULL);
    const flashcl_tensor tq = view_of(bq, s, n, s->hq, s->d), tk = view_of(bk, s, n, s->hkv, s->d);
    const flashcl_tensor tv = view_of(bv, s, n, s->hkv, s->dv), to = view_of(bo, s, n, s->hq, s->dv);
    const flashcl_tensor tdo = view_of(bdo, s, n, s->hq, s->dv), tdq = view_of(bdq, s, n, s->hq, s->d);
    const flashcl_tensor tdk = view_of(bdk, s, n, s->hkv, s->d), tdv = view_of(bdv, s, n, s->hkv, s->dv);
    flashcl_ring_desc ring = FLASHCL_RING_DESC_INIT;
    ring.layout = s->layout;
    flashcl_attention_desc d = local_desc(s, n);
    d.dtype = dt;

    flashcl_status st = flashcl_ring_forward(ctx, &d, &ring, &tq, &tk, &tv, &to, bl, 0, MPI_COMM_WORLD);
    if (st != FLASHCL_SUCCESS)
        printf("[rank %d] %s forward: %s %s\n", e->rank, name, flashcl_status_name(st), flashcl_last_error(ctx));
    CHECK_STATUS(st, FLASHCL_SUCCESS);
    read_lowp(ctx, dt, bo, lo, got);
    gather(o32, s, s->hq, s->dv, e, s->bhsd, ref), gather(o16, s, s->hq, s->dv, e, s->bhsd, single);
    compare_lowp(name, "O", e, s, got, ref, single, lo, max_diff(o16, o32, no), 1, max_abs(v, nv));
    /* The LSE is float32 on both sides, from the same 16-bit inputs: the float32 bound. */
    tu_buffer_read(flashcl_context_queue(ctx), bl, ll, got, NULL);
    gather_lse(l16, s, e, ref);
    compare(name, "LSE", e, got, ref, ll, N, max_abs(l16, nl));

    st = flashcl_ring_backward(ctx, &d, &ring, &tq, &tk, &tv, &to, &tdo, bl, 0, &tdq, &tdk, &tdv, MPI_COMM_WORLD);
    if (st != FLASHCL_SUCCESS)
        printf("[rank %d] %s backward: %s %s\n", e->rank, name, flashcl_status_name(st), flashcl_last_error(ctx));
    CHECK_STATUS(st, FLASHCL_SUCCESS);
    /* Partials per element: dK/dV one per step and query segment; dQ one per step, or one per
       step and key chunk with a window (the zigzag chunks of a rank are then separate calls). */
    const int split = (s->causal || s->window) && s->layout == FLASHCL_RING_ZIGZAG;
    const size_t kv_parts = (split ? 2 : 1) * P, q_parts = (split && s->window ? 2 : 1) * P;
    read_lowp(ctx, dt, bdq, lq, got);
    gather(dq32, s, s->hq, s->d, e, s->bhsd, ref), gather(dq16, s, s->hq, s->d, e, s->bhsd, single);
    compare_lowp(name, "dQ", e, s, got, ref, single, lq, max_diff(dq16, dq32, nq), q_parts, max_abs(dq32, nq));
    read_lowp(ctx, dt, bdk, lk, got);
    gather(dk32, s, s->hkv, s->d, e, s->bhsd, ref), gather(dk16, s, s->hkv, s->d, e, s->bhsd, single);
    compare_lowp(name, "dK", e, s, got, ref, single, lk, max_diff(dk16, dk32, nk), kv_parts, max_abs(dk32, nk));
    read_lowp(ctx, dt, bdv, lv, got);
    gather(dv32, s, s->hkv, s->dv, e, s->bhsd, ref), gather(dv16, s, s->hkv, s->dv, e, s->bhsd, single);
    compare_lowp(name, "dV", e, s, got, ref, single, lv, max_diff(dv16, dv32, nv), kv_parts, max_abs(dv32, nv));

    /* 16-bit K/V views are packed on the host by the component, which checks them itself. */
    char what[96];
    flashcl_tensor badk = tk;
    if (e->rank == 0) badk.offset = lk; /* past the end of its buffer */
    snprintf(what, sizeof what, "k.offset out of bounds on rank 0 (%s)", st_name(dt));
    expect_all_fail(e, what, flashcl_ring_forward(ctx, &d, &ring, &tq, &badk, &tv, &to, bl, 0, MPI_COMM_WORLD));
    flashcl_tensor badv = tv;
    if (e->rank == e->size - 1) badv.buffer = NULL;
    snprintf(what, sizeof what, "v.buffer NULL on the last rank (%s, backward)", st_name(dt));
    expect_all_fail(
        e, what,
        flashcl_ring_backward(ctx, &d, &ring, &tq, &tk, &badv, &to, &tdo, bl, 0, &tdq, &tdk, &tdv, MPI_COMM_WORLD));

    cl_mem all[] = {bq, bk, bv, bdo, bo, bl, bdq, bdk, bdv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) clReleaseMemObject(all[i]);
    float *hosts[] = {q, k, v, dout, o32, l32, dq32, dk32, dv32, o16, l16, dq16, dk16, dv16, loc, ref, single, got};
    for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; ++i) free(hosts[i]);
}

/* Every rank must return an error, the same one: agreed before any transfer, or at the end. */
static void expect_all_fail(const mpi_env *e, const char *what, flashcl_status st) {
    int mine = (int)st, lo = 0, hi = 0;
    MPI_Allreduce(&mine, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&mine, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    const int ok = lo == hi && hi != FLASHCL_SUCCESS;
    if (!ok || e->rank == 0)
        printf("[rank %d] error agreement: %-46s -> %s on every rank %s\n", e->rank, what, flashcl_status_name(st),
               ok ? "ok" : "FAIL");
    CHECK(ok);
}

static uint64_t text_hash(const char *t) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *t; ++t) h = (h ^ (unsigned char)*t) * 1099511628211ull;
    return h;
}

/* expect_all_fail, and the message in msg (the ring descriptor's err_buf): the same on every
   rank, starting "rank FROM of P: " (from >= 0) and containing needle. */
static void expect_all_fail_msg(const mpi_env *e, const char *what, flashcl_status st, const char *msg, int from,
                                const char *needle) {
    expect_all_fail(e, what, st);
    char prefix[64] = ""; /* from < 0: a message about all ranks, no prefix */
    if (from >= 0) snprintf(prefix, sizeof prefix, "rank %d of %d: ", from, e->size);
    const uint64_t h = text_hash(msg);
    uint64_t lo = 0, hi = 0;
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    const int ok = lo == hi && strncmp(msg, prefix, strlen(prefix)) == 0 && strstr(msg, needle) != NULL;
    if (!ok || e->rank == 0) printf("[rank %d]   message: \"%s\" %s\n", e->rank, msg, ok ? "ok" : "FAIL");
    CHECK(ok);
}

static void run_errors(flashcl_context *ctx, const mpi_env *e) {
    const shape s = {1, 2, 1, 8 * (size_t)e->size, 8, 8, 1, FLASHCL_RING_ZIGZAG, 0, FLASHCL_DTYPE_F32, 0, 0, 0};
    const size_t n = s.n_global / (size_t)e->size, lq = n * s.hq * s.d, lk = n * s.hkv * s.d;
    cl_mem bq = buffer_of(ctx, lq, NULL), bk = buffer_of(ctx, lk, NULL), bv = buffer_of(ctx, lk, NULL);
    cl_mem bo = buffer_of(ctx, lq, NULL), bl = buffer_of(ctx, n * s.hq, NULL), bdo = buffer_of(ctx, lq, NULL);
    cl_mem bdq = buffer_of(ctx, lq, NULL), bdk = buffer_of(ctx, lk, NULL), bdv = buffer_of(ctx, lk, NULL);
    const flashcl_tensor tq = flashcl_tensor_bshd(bq, n, s.hq, s.d), tk = flashcl_tensor_bshd(bk, n, s.hkv, s.d);
    const flashcl_tensor tv = flashcl_tensor_bshd(bv, n, s.hkv, s.d), to = flashcl_tensor_bshd(bo, n, s.hq, s.d);
    const flashcl_tensor tdo = flashcl_tensor_bshd(bdo, n, s.hq, s.d), tdq = flashcl_tensor_bshd(bdq, n, s.hq, s.d);
    const flashcl_tensor tdk = flashcl_tensor_bshd(bdk, n, s.hkv, s.d), tdv = flashcl_tensor_bshd(bdv, n, s.hkv, s.d);
    flashcl_ring_desc ring = FLASHCL_RING_DESC_INIT;
    ring.layout = s.layout;
    char msg[512] = "(not written)";
    ring.err_buf = msg, ring.err_buf_size = sizeof msg;
    const int bad = e->size - 1; /* the last rank gets the bad argument */
    flashcl_attention_desc d = local_desc(&s, n);
    flashcl_status st;

    /* A field the ring checks itself: caught before any K/V moves. */
    flashcl_attention_desc dd = d;
    if (e->rank == bad) dd.head_dim = 0;
    expect_all_fail_msg(e, "head_dim 0 on the last rank (forward)",
                        flashcl_ring_forward(ctx, &dd, &ring, &tq, &tk, &tv, &to, bl, 0, MPI_COMM_WORLD), msg, bad,
                        "desc->head_dim (0) and head_dim_v (8) must be in 1..");
    /* Valid on each rank alone, but not the same shape everywhere. */
    dd = d;
    if (e->rank == bad) dd.heads_q = 4, dd.heads_kv = 2;
    st = flashcl_ring_forward(ctx, &dd, &ring, &tq, &tk, &tv, &to, bl, 0, MPI_COMM_WORLD);
    if (e->size > 1) /* with one process the views are too small for 4 heads: the core says so */
        expect_all_fail_msg(e, "heads differ on the last rank (forward)", st, msg, -1,
                            "the ranks disagree on desc->heads_q (from 2 to 4)");
    else
        expect_all_fail_msg(e, "heads 4 / 2 on the views of 2 / 1 (forward)", st, msg, 0, ": FLASHCL_ERR_");
    /* An unsupported variant on one rank. */
    dd = d;
    if (e->rank == bad) dd.dropout_p = 0.1f;
    expect_all_fail_msg(e, "dropout on the last rank (forward)",
                        flashcl_ring_forward(ctx, &dd, &ring, &tq, &tk, &tv, &to, bl, 0, MPI_COMM_WORLD), msg, bad,
                        "desc->dropout_p is set: ring attention does not support it");
    /* A window that is invalid on one rank, and one that is valid but on that rank only. */
    dd = d;
    if (e->rank == bad) dd.window = 1, dd.window_left = -2, dd.window_right = 0;
    expect_all_fail_msg(e, "window_left -2 on the last rank (forward)",
                        flashcl_ring_forward(ctx, &dd, &ring, &tq, &tk, &tv, &to, bl, 0, MPI_COMM_WORLD), msg, bad,
                        "desc->window_left/window_right (-2, 0) must be >= -1");
    if (e->size > 1) {
        dd = d;
        if (e->rank == bad) dd.window = 1, dd.window_left = 4, dd.window_right = 0;
        expect_all_fail_msg(e, "window (4, 0) on the last rank only (forward)",
                            flashcl_ring_forward(ctx, &dd, &ring, &tq, &tk, &tv, &to, bl, 0, MPI_COMM_WORLD), msg, -1,
                            "the ranks disagree on desc->window (from 0 to 1)");
        dd = d;
        dd.window = 1, dd.window_left = e->rank == bad ? 3 : 4, dd.window_right = 0;
        expect_all_fail_msg(
            e, "window_left differs on the last rank (backward)",
            flashcl_ring_backward(ctx, &dd, &ring, &tq, &tk, &tv, &to, &tdo, bl, 0, &tdq, &tdk, &tdv, MPI_COMM_WORLD),
            msg, -1, "the ranks disagree on desc->window_left (from 3 to 4)");
    }
    /* A storage type that differs between ranks (K/V messages of another size): agreed first.
       With one process a bf16 view of these float32 buffers is simply valid. */
    if (e->size > 1) {
        dd = d;
        if (e->rank == bad) dd.dtype = FLASHCL_DTYPE_BF16;
        expect_all_fail_msg(e, "dtype bf16 on the last rank only (forward)",
                            flashcl_ring_forward(ctx, &dd, &ring, &tq, &tk, &tv, &to, bl, 0, MPI_COMM_WORLD), msg, -1,
                            "the ranks disagree on desc->dtype");
    }
    /* A bad view that only the core's checks see (at the rank's first call): agreed at the end. */
    flashcl_tensor badq = tq;
    if (e->rank == bad) badq.buffer = NULL;
    expect_all_fail_msg(e, "q.buffer NULL on the last rank (forward)",
                        flashcl_ring_forward(ctx, &d, &ring, &badq, &tk, &tv, &to, bl, 0, MPI_COMM_WORLD), msg, bad,
                        "flashcl_forward at ring step 0: FLASHCL_ERR_INVALID_BUFFER: ");
    flashcl_tensor badk = tk;
    if (e->rank == 0) badk.offset = lk; /* past the end of its buffer */
    expect_all_fail_msg(e, "k.offset out of bounds on rank 0 (forward)",
                        flashcl_ring_forward(ctx, &d, &ring, &tq, &badk, &tv, &to, bl, 0, MPI_COMM_WORLD), msg, 0,
                        "k (copied by a one-state merge): FLASHCL_ERR_OUT_OF_BOUNDS: ");
    expect_all_fail_msg(e, "dk NULL on the last rank (backward)",
                        flashcl_ring_backward(ctx, &d, &ring, &tq, &tk, &tv, &to, &tdo, bl, 0, &tdq,
                                              e->rank == bad ? NULL : &tdk, &tdv, MPI_COMM_WORLD),
                        msg, bad, "dk is NULL");
    flashcl_tensor baddv = tdv;
    if (e->rank == bad) baddv.stride_row = 1, baddv.stride_head = 1, baddv.stride_batch = 1; /* overlapping rows */
    expect_all_fail_msg(
        e, "dv strides overlap on the last rank (backward)",
        flashcl_ring_backward(ctx, &d, &ring, &tq, &tk, &tv, &to, &tdo, bl, 0, &tdq, &tdk, &baddv, MPI_COMM_WORLD), msg,
        bad, "dv (written by a one-state merge): FLASHCL_ERR_INVALID_STRIDE: ");
    /* No communicator: each rank alone, nothing to agree with (no rank prefix). */
    CHECK_STATUS(flashcl_ring_forward(ctx, &d, &ring, &tq, &tk, &tv, &to, bl, 0, MPI_COMM_NULL),
                 FLASHCL_ERR_INVALID_ARGUMENT);
    CHECK(strcmp(msg, "comm is MPI_COMM_NULL") == 0);
    /* After all that, a good call on the same context still works, and clears the message. */
    CHECK_STATUS(flashcl_ring_forward(ctx, &d, &ring, &tq, &tk, &tv, &to, bl, 0, MPI_COMM_WORLD), FLASHCL_SUCCESS);
    CHECK(msg[0] == '\0');
    /* A ring descriptor from an older header (no err_buf fields): nothing is written past it. */
    flashcl_ring_desc old = ring;
    old.struct_size = offsetof(flashcl_ring_desc, err_buf);
    snprintf(msg, sizeof msg, "untouched");
    dd = d;
    if (e->rank == bad) dd.head_dim = 0;
    expect_all_fail(e, "head_dim 0, an older ring descriptor (forward)",
                    flashcl_ring_forward(ctx, &dd, &old, &tq, &tk, &tv, &to, bl, 0, MPI_COMM_WORLD));
    CHECK(strcmp(msg, "untouched") == 0);
    cl_mem all[] = {bq, bk, bv, bo, bl, bdo, bdq, bdk, bdv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) clReleaseMemObject(all[i]);
}

/* flashcl_ring_rows alone: the documented layouts and its refusals. */
static void check_rows(void) {
    size_t f[2], r[2];
    int n = 0;
    CHECK_STATUS(flashcl_ring_rows(FLASHCL_RING_ZIGZAG, 32, 4, 1, f, r, &n), FLASHCL_SUCCESS);
    CHECK(n == 2 && f[0] == 4 && r[0] == 4 && f[1] == 24 && r[1] == 4); /* chunks 1 and 6 of 8 */
    CHECK_STATUS(flashcl_ring_rows(FLASHCL_RING_CONTIGUOUS, 32, 4, 3, f, r, &n), FLASHCL_SUCCESS);
    CHECK(n == 1 && f[0] == 24 && r[0] == 8);
    CHECK_STATUS(flashcl_ring_rows(FLASHCL_RING_ZIGZAG, 36, 4, 0, f, r, &n), FLASHCL_ERR_INVALID_SHAPE);
    CHECK_STATUS(flashcl_ring_rows(FLASHCL_RING_CONTIGUOUS, 30, 4, 0, f, r, &n), FLASHCL_ERR_INVALID_SHAPE);
    CHECK_STATUS(flashcl_ring_rows(FLASHCL_RING_ZIGZAG, 32, 4, 4, f, r, &n), FLASHCL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(flashcl_ring_rows((flashcl_ring_layout)7, 32, 4, 0, f, r, &n), FLASHCL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(flashcl_ring_rows(FLASHCL_RING_ZIGZAG, 32, 4, 0, NULL, r, &n), FLASHCL_ERR_INVALID_ARGUMENT);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    mpi_env e;
    MPI_Comm_rank(MPI_COMM_WORLD, &e.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &e.size);
    check_rows();
    flashcl_context *ctx = tu_context_create();

    /* Small shapes: each process builds (or loads from the shared program cache) every kernel. */
    const size_t P = (size_t)e.size, N = 16 * P; /* zigzag chunks of 8 rows */
    const shape cases[] = {
        {2, 4, 2, N, 16, 16, 1, FLASHCL_RING_ZIGZAG, 0, FLASHCL_DTYPE_F32, 0, 0, 0},     /* causal, balanced, GQA 2 */
        {2, 4, 2, N, 16, 16, 1, FLASHCL_RING_CONTIGUOUS, 0, FLASHCL_DTYPE_F32, 0, 0, 0}, /* causal, contiguous */
        {1, 4, 1, N, 16, 8, 0, FLASHCL_RING_CONTIGUOUS, 1, FLASHCL_DTYPE_F32, 0, 0,
         0},                                                                         /* not causal, MQA, d_v 8, bhsd */
        {1, 2, 2, N, 16, 16, 0, FLASHCL_RING_ZIGZAG, 0, FLASHCL_DTYPE_F32, 0, 0, 0}, /* not causal, zigzag rows, MHA */
    };
    const char *names[] = {"causal zigzag GQA", "causal contiguous GQA", "full contiguous MQA dv8 bhsd",
                           "full zigzag MHA"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) run_case(ctx, &e, names[i], &cases[i]);
    /* Windows on global positions, chunks of 4 (zigzag) or 8 (contiguous) rows: a window of 5
       crosses one or two chunk boundaries, takes some rows and keys of a chunk, and skips the
       chunks it does not reach; the zigzag chunks of a rank are far apart globally. */
    const size_t NW = 8 * P;
    const shape windows[] = {
        {2, 4, 2, NW, 16, 16, 1, FLASHCL_RING_ZIGZAG, 0, FLASHCL_DTYPE_F32, 1, 5, -1},     /* causal, left 5 */
        {2, 4, 2, NW, 16, 16, 1, FLASHCL_RING_CONTIGUOUS, 0, FLASHCL_DTYPE_F32, 1, 5, 0},  /* causal, left 5 */
        {1, 4, 2, NW, 16, 16, 0, FLASHCL_RING_ZIGZAG, 0, FLASHCL_DTYPE_F32, 1, 3, 7},      /* (3, 7) */
        {1, 4, 1, NW, 16, 8, 0, FLASHCL_RING_CONTIGUOUS, 1, FLASHCL_DTYPE_F32, 1, 3, 7},   /* (3, 7) MQA bhsd */
        {1, 2, 1, NW, 16, 16, 0, FLASHCL_RING_ZIGZAG, 1, FLASHCL_DTYPE_F32, 1, -1, 2},     /* (-inf, 2) */
        {1, 2, 2, NW, 16, 16, 0, FLASHCL_RING_CONTIGUOUS, 0, FLASHCL_DTYPE_F32, 1, 6, -1}, /* (6, +inf) */
        {1, 2, 2, NW, 16, 16, 0, FLASHCL_RING_ZIGZAG, 0, FLASHCL_DTYPE_F32, 1, 0, 0},      /* the diagonal only */
    };
    const char *window_names[] = {"window causal (5) zigzag GQA",   "window causal (5) contiguous GQA",
                                  "window (3, 7) zigzag GQA",       "window (3, 7) contiguous MQA dv8 bhsd",
                                  "window (-1, 2) zigzag MQA bhsd", "window (6, -1) contiguous MHA",
                                  "window (0, 0) zigzag MHA"};
    for (size_t i = 0; i < sizeof windows / sizeof windows[0]; ++i) run_case(ctx, &e, window_names[i], &windows[i]);
    /* 16-bit storage: merged and summed in float32, rounded once at the end. */
    const shape lowp[] = {
        {1, 4, 2, N, 16, 16, 1, FLASHCL_RING_ZIGZAG, 0, FLASHCL_DTYPE_BF16, 0, 0, 0}, /* causal, balanced, GQA 2 */
        {1, 2, 1, N, 16, 16, 0, FLASHCL_RING_CONTIGUOUS, 1, FLASHCL_DTYPE_F16, 0, 0,
         0}, /* full, MQA, [b, h, s, d] views */
        {1, 4, 2, NW, 16, 16, 0, FLASHCL_RING_ZIGZAG, 0, FLASHCL_DTYPE_BF16, 1, 3, 7}, /* window (3, 7), GQA 2 */
    };
    const char *lowp_names[] = {"bf16 causal zigzag GQA", "f16 full contiguous MQA bhsd",
                                "bf16 window (3, 7) zigzag GQA"};
    for (size_t i = 0; i < sizeof lowp / sizeof lowp[0]; ++i) {
        const double t0 = MPI_Wtime();
        run_case_lowp(ctx, &e, lowp_names[i], &lowp[i]);
        if (e.rank == 0) printf("[rank 0] %s: %.2f s\n", lowp_names[i], MPI_Wtime() - t0);
    }
    run_errors(ctx, &e);

    int mine = tu_failures(), total = 0;
    MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    char label[64];
    snprintf(label, sizeof label, "test_ring (rank %d of %d)", e.rank, e.size);
    int rc = tu_finish(label);
    flashcl_context_destroy(ctx);
    MPI_Finalize();
    return total ? 1 : rc;
}
