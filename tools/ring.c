/*
 * flashcl_ring: ring attention under mpirun, timed. Every rank holds its rows
 * of one random problem ([b, N, h, d] split by the layout; --dtype f32, f16
 * or bf16 storage, float32 by default), runs
 * flashcl_ring_forward (and with --backward flashcl_ring_backward) a few
 * times, and rank 0 prints each step's compute, exposed wait and staging time
 * (the maximum over ranks), the time of a bare K/V exchange of the same size
 * (the transfer that the compute has to hide) and the time per call.
 *
 *   mpirun -np 4 build/tools/flashcl_ring --seqlen 4096 --heads 8 --dim 64 --causal --layout zigzag
 *   mpirun -np 2 build/tools/flashcl_ring --seqlen 65536 --heads 16 --dim 128 --causal --dtype bf16 --backward
 *   mpirun -np 4 build/tools/flashcl_ring --seqlen 8192 --causal --window 1024,0   (a sliding window, global)
 */
#include "flashcl_mpi.h"
#include "storage_codec.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct options {
    size_t batch, seqlen, heads, heads_kv, dim;
    int causal, backward, iters;
    int window, wl, wr; /* --window L,R (-1 = unbounded) */
    flashcl_ring_layout layout;
    flashcl_dtype dtype;
} options;

/* A whole decimal number from 1 up (a typo such as "--dim abc" is a usage error, not 0). */
static int count(const char *s, size_t *out) {
    char *end = NULL;
    errno = 0;
    const unsigned long long v = strtoull(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || *end || errno || v == 0 || v > SIZE_MAX) return 0;
    *out = (size_t)v;
    return 1;
}

/* A whole number >= -1 (-1: unbounded) up to *end, which must be `stop` (strict, as tools/options.c parses
   flashcl's options: "3,4x" or "3 ,4" is refused, not read as 3,4). */
static int window_side(const char *s, char stop, const char **end, int *out) {
    const char *digits = s[0] == '-' ? s + 1 : s;
    char *e = NULL;
    errno = 0;
    const long v = strtol(s, &e, 10);
    if (digits[0] < '0' || digits[0] > '9' || *e != stop || errno || v < -1 || v > INT_MAX) return 0;
    *out = (int)v;
    *end = e;
    return 1;
}

/* "L,R": the window's left and right extents. */
static int window(const char *s, int *wl, int *wr) {
    const char *end = NULL;
    return window_side(s, ',', &end, wl) && window_side(end + 1, '\0', &end, wr);
}

static void usage(void) {
    fprintf(stderr, "usage: flashcl_ring [--seqlen N] [--batch B] [--heads H] [--kv-heads H] [--head-dim D] "
                    "[--causal] [--window L,R] [--layout zigzag|contiguous] [--dtype f32|f16|bf16] "
                    "[--backward] [--iters I]\n(times random data; the tests check results: ctest -L mpi)\n");
}

/* One line naming the option and what it takes, as flashcl's own options say it (rank 0 only). */
static int bad_value(int rank, const char *option, const char *expected, const char *got) {
    if (rank != 0) return 0;
    if (got)
        fprintf(stderr, "flashcl_ring: %s: expected %s, got '%s'\n", option, expected, got);
    else
        fprintf(stderr, "flashcl_ring: %s: missing value: expected %s\n", option, expected);
    return 0;
}

static int parse(int argc, char **argv, options *o, int rank) {
    *o = (options){1, 4096, 8, 0, 64, 0, 0, 3, 0, -1, -1, FLASHCL_RING_ZIGZAG, FLASHCL_DTYPE_F32};
    const struct {
        const char *name, *alias;
        size_t *value;
    } counts[] = {{"--batch", NULL, &o->batch},
                  {"--seqlen", NULL, &o->seqlen},
                  {"--heads", NULL, &o->heads},
                  {"--kv-heads", "--heads-kv", &o->heads_kv},
                  {"--head-dim", "--dim", &o->dim}};
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--causal")) {
            o->causal = 1;
            continue;
        }
        if (!strcmp(a, "--backward")) {
            o->backward = 1;
            continue;
        }
        int known = 0;
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; ++c) {
            if (strcmp(a, counts[c].name) != 0 && !(counts[c].alias && !strcmp(a, counts[c].alias))) continue;
            if (!val || !count(val, counts[c].value)) return bad_value(rank, a, "a whole number from 1", val);
            known = 1;
        }
        if (known) {
            ++i;
            continue;
        }
        size_t n = 0;
        if (!strcmp(a, "--layout")) {
            if (!val || (strcmp(val, "contiguous") != 0 && strcmp(val, "zigzag") != 0))
                return bad_value(rank, a, "zigzag or contiguous", val);
            o->layout = !strcmp(val, "contiguous") ? FLASHCL_RING_CONTIGUOUS : FLASHCL_RING_ZIGZAG;
        } else if (!strcmp(a, "--dtype")) {
            if (!val || (strcmp(val, "f32") != 0 && strcmp(val, "f16") != 0 && strcmp(val, "bf16") != 0))
                return bad_value(rank, a, "f32, f16 or bf16", val);
            o->dtype = !strcmp(val, "f16")    ? FLASHCL_DTYPE_F16
                       : !strcmp(val, "bf16") ? FLASHCL_DTYPE_BF16
                                              : FLASHCL_DTYPE_F32;
        } else if (!strcmp(a, "--iters")) {
            if (!val || !count(val, &n) || n > 1000000)
                return bad_value(rank, a, "a whole number from 1 to 1000000", val);
            o->iters = (int)n;
        } else if (!strcmp(a, "--window")) {
            if (!val || !window(val, &o->wl, &o->wr))
                return bad_value(rank, a, "L,R: two whole numbers >= -1 (-1 unbounded)", val);
            o->window = 1;
        } else {
            const int help = !strcmp(a, "--help") || !strcmp(a, "-h");
            if (rank == 0 && !help) fprintf(stderr, "flashcl_ring: unknown option '%s'\n", a);
            if (rank == 0) usage();
            return 0;
        }
        ++i;
    }
    if (!o->heads_kv) o->heads_kv = o->heads;
    return 1;
}

static const char *dtype_name(flashcl_dtype dt) {
    return dt == FLASHCL_DTYPE_F16 ? "f16" : dt == FLASHCL_DTYPE_BF16 ? "bf16" : "f32";
}

/* count random values in [-1, 1) in storage dt. */
static cl_mem random_buffer(flashcl_context *ctx, size_t count, unsigned seed, flashcl_dtype dt) {
    float *h = malloc(count * sizeof *h);
    if (!h) return NULL;
    uint64_t x = 0x9e3779b97f4a7c15ull ^ seed;
    for (size_t i = 0; i < count; ++i) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        h[i] = (float)((x * 0x2545f4914f6cdd1dull) >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
    }
    flashcl__to_storage(dt, h, h, count); /* in place */
    cl_int e = CL_SUCCESS;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                              count * flashcl_dtype_size(dt), h, &e);
    free(h);
    return e == CL_SUCCESS ? m : NULL;
}

/* Seconds of one bare ring exchange of `count` elements of `type` (what one step sends), the
   median of a few. */
static double bare_exchange(size_t count, MPI_Datatype type, size_t elem, int rank, int size) {
    char *a = calloc(count, elem), *b = calloc(count, elem);
    double best[5] = {0};
    for (int t = 0; t < 5 && a && b; ++t) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        MPI_Sendrecv(a, (int)count, type, (rank + 1) % size, 7, b, (int)count, type, (rank + size - 1) % size, 7,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        double dt = MPI_Wtime() - t0, worst = 0.0;
        MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        best[t] = worst;
    }
    free(a), free(b);
    for (int i = 0; i < 5; ++i) /* median by sorting five */
        for (int j = i + 1; j < 5; ++j)
            if (best[j] < best[i]) {
                const double t = best[i];
                best[i] = best[j], best[j] = t;
            }
    return best[2];
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    options o;
    const int parsed = parse(argc, argv, &o, rank);
    /* Each rank holds N / P rows; the zigzag layout cuts them into two chunks of N / (2P). */
    const size_t split = o.layout == FLASHCL_RING_ZIGZAG ? 2 * (size_t)size : (size_t)size;
    if (!parsed || o.seqlen % split) {
        if (rank == 0 && parsed)
            fprintf(stderr, "flashcl_ring: --seqlen must be a multiple of %sthe number of ranks (%zu)\n",
                    o.layout == FLASHCL_RING_ZIGZAG ? "2 x " : "", split);
        MPI_Finalize();
        return 2;
    }
    char err[512] = "";
    flashcl_context *ctx = NULL;
    flashcl_status st = flashcl_context_create(&ctx, NULL, err, sizeof err);
    int ok = st == FLASHCL_SUCCESS, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (!ok) fprintf(stderr, "[rank %d] %s: %s\n", rank, flashcl_status_name(st), err);
        flashcl_context_destroy(ctx);
        MPI_Finalize();
        return 1;
    }
    const size_t n = o.seqlen / (size_t)size, nq = o.batch * n * o.heads * o.dim;
    const size_t nk = o.batch * n * o.heads_kv * o.dim;
    const flashcl_dtype dtype = o.dtype;
    const size_t es = flashcl_dtype_size(dtype);
    cl_mem q = random_buffer(ctx, nq, 1 + (unsigned)rank, dtype),
           k = random_buffer(ctx, nk, 101 + (unsigned)rank, dtype);
    cl_mem v = random_buffer(ctx, nk, 201 + (unsigned)rank, dtype);
    cl_mem dout = random_buffer(ctx, nq, 301 + (unsigned)rank, dtype), out = random_buffer(ctx, nq, 0, dtype);
    cl_mem lse = random_buffer(ctx, o.batch * o.heads * n, 0, FLASHCL_DTYPE_F32); /* float32 always */
    cl_mem dq = random_buffer(ctx, nq, 0, dtype), dk = random_buffer(ctx, nk, 0, dtype),
           dv = random_buffer(ctx, nk, 0, dtype);
    const flashcl_tensor tq = flashcl_tensor_bshd(q, n, o.heads, o.dim),
                         tk = flashcl_tensor_bshd(k, n, o.heads_kv, o.dim);
    const flashcl_tensor tv = flashcl_tensor_bshd(v, n, o.heads_kv, o.dim),
                         to = flashcl_tensor_bshd(out, n, o.heads, o.dim);
    const flashcl_tensor tdo = flashcl_tensor_bshd(dout, n, o.heads, o.dim),
                         tdq = flashcl_tensor_bshd(dq, n, o.heads, o.dim);
    const flashcl_tensor tdk = flashcl_tensor_bshd(dk, n, o.heads_kv, o.dim);
    const flashcl_tensor tdv = flashcl_tensor_bshd(dv, n, o.heads_kv, o.dim);
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = o.batch, d.heads_q = o.heads, d.heads_kv = o.heads_kv, d.seqlen_q = d.seqlen_k = n;
    d.head_dim = o.dim, d.causal = o.causal, d.dtype = dtype;
    d.window = o.window, d.window_left = o.wl, d.window_right = o.wr;

    double *comp = calloc((size_t)size, sizeof(double)), *wait = calloc((size_t)size, sizeof(double));
    double *stage = calloc((size_t)size, sizeof(double)), *worst = calloc(3 * (size_t)size, sizeof(double));
    flashcl_ring_desc ring = FLASHCL_RING_DESC_INIT;
    ring.layout = o.layout, ring.step_compute_s = comp, ring.step_wait_s = wait, ring.step_stage_s = stage;
    char ring_err[512] = "";
    ring.err_buf = ring_err, ring.err_buf_size = sizeof ring_err; /* the same message on every rank */

    const char *pass[2] = {"forward", "backward"};
    int rc = 0;
    for (int which = 0; which <= o.backward && rc == 0; ++which) {
        double total = 0.0, fastest = 1e30, mine[3 * 64] = {0};
        const int steps = size < 64 ? size : 64;
        for (int it = 0; it <= o.iters && rc == 0; ++it) { /* iteration 0 warms up (kernel builds) */
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = MPI_Wtime();
            st = which == 0 ? flashcl_ring_forward(ctx, &d, &ring, &tq, &tk, &tv, &to, lse, 0, MPI_COMM_WORLD)
                            : flashcl_ring_backward(ctx, &d, &ring, &tq, &tk, &tv, &to, &tdo, lse, 0, &tdq, &tdk, &tdv,
                                                    MPI_COMM_WORLD);
            double dt = MPI_Wtime() - t0, slowest = 0.0;
            MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (st != FLASHCL_SUCCESS) {
                if (rank == 0) fprintf(stderr, "flashcl_ring: %s: %s\n", flashcl_status_name(st), ring_err);
                rc = 1;
            }
            if (it > 0) total += slowest;
            if (it > 0 && slowest < fastest) { /* keep the steps of the fastest call: the machine is shared */
                fastest = slowest;
                for (int s = 0; s < steps; ++s)
                    mine[3 * s] = comp[s], mine[3 * s + 1] = wait[s], mine[3 * s + 2] = stage[s];
            }
        }
        if (rc) break;
        /* The fastest call's steps, each the slowest rank's. */
        MPI_Reduce(mine, worst, 3 * steps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        const double bare =
            bare_exchange(o.batch * n * o.heads_kv * o.dim * 2, es == 4 ? MPI_FLOAT : MPI_UINT16_T, es, rank, size);
        if (rank == 0) {
            char win[48] = "";
            if (o.window) snprintf(win, sizeof win, " window (%d, %d)", o.wl, o.wr);
            printf("%s: %d ranks, b%zu N%zu (%zu rows per rank) hq%zu hkv%zu d%zu %s %s%s %s\n", pass[which], size,
                   o.batch, o.seqlen, n, o.heads, o.heads_kv, o.dim, dtype_name(dtype), o.causal ? "causal" : "full",
                   win, o.layout == FLASHCL_RING_ZIGZAG ? "zigzag" : "contiguous");
            printf("  K/V chunk per step: %.3f MB; a bare ring exchange of it: %.3f ms%s\n",
                   (double)(o.batch * n * o.heads_kv * o.dim * 2 * es) / 1e6, 1e3 * bare,
                   which ? " (the backward also sends dK/dV, float32)" : "");
            for (int s = 0; s < steps; ++s)
                printf("  step %2d: compute %8.3f ms  exposed wait %7.3f ms  staging %7.3f ms\n", s, 1e3 * worst[3 * s],
                       1e3 * worst[3 * s + 1], 1e3 * worst[3 * s + 2]);
            printf("  per call: %.3f ms mean, %.3f ms fastest (of %d calls, each the slowest rank)\n",
                   1e3 * total / o.iters, 1e3 * fastest, o.iters);
        }
    }
    cl_mem all[] = {q, k, v, dout, out, lse, dq, dk, dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        if (all[i]) clReleaseMemObject(all[i]);
    free(comp), free(wait), free(stage), free(worst);
    flashcl_context_destroy(ctx);
    MPI_Finalize();
    return rc;
}
