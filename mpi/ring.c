/*
 * Ring attention over MPI (include/flashcl_mpi.h): the forward merges one
 * partial (O, LSE) per ring step with flashcl_merge_states; the backward
 * sums per-step gradients on the host, where the travelling dK/dV already are.
 * With f16/bf16 storage K/V travel in the storage type; each call's partial O
 * and gradients come out of the core in the storage type and are widened to
 * float32 on the host; the merges, the running O, the dQ sum and the
 * travelling dK/dV are float32, rounded once to storage at the end.
 *
 * Only the core's public API is used, so the component links against any
 * build of the library. Device copies between arbitrary views and packed
 * buffers go through flashcl_merge_states with one state (a weight of 1 makes
 * it a strided float32 copy), so no kernel of our own has to be built.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */

#include "flashcl_mpi.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The library's f16/bf16 conversions, compiled into this component too (they are not public API). */
#include "float16.h"

/* One attention call of a ring step: query rows [q0, q0 + qn) of segment g against key rows
   [k0, k0 + kn) of the chunk held at this step, causal, fully visible or (window) the core's
   bottom-right window (wl, wr) on those sub-views. */
typedef struct ring_run {
    size_t q0, qn, k0, kn;
    int causal;
    int window, wl, wr;
} ring_run;

/* The next step's K/V, written to the device on a queue of our own as soon as its message has
   arrived (polled while the step computes), so that the host-to-device copy overlaps the
   compute too instead of following it. */
typedef struct ring_stage {
    MPI_Request *recv; /* the K/V receive; NULL: nothing to stage this step */
    cl_mem dst;
    const void *src;
    size_t bytes;
    cl_event done; /* the write, once enqueued */
} ring_stage;

typedef struct ring {
    flashcl_context *ctx;
    cl_context cl;
    cl_command_queue queue, copy_queue;
    ring_stage stage;
    MPI_Comm comm; /* our duplicate: own tag space, MPI_ERRORS_RETURN */
    int size, rank, next, prev;
    flashcl_attention_desc d; /* this rank's descriptor, defaults resolved */
    flashcl_dtype dt;         /* storage of q, k, v, o and the gradients (f32, f16 or bf16) */
    size_t es;                /* its bytes per element */
    MPI_Datatype kv_type;     /* K/V messages: MPI_FLOAT or, for 16-bit storage, MPI_UINT16_T */
    flashcl_ring_layout layout;
    int wl, wr;                     /* the global window (desc.window; causal: wr = 0); -1 = unbounded */
    size_t b, hq, hkv, dk, dv, n;   /* batch, heads, head dims, local rows */
    int nseg;                       /* query segments: the layout's runs when causal or windowed, else 1 */
    size_t seg_row0[2], seg_len[2]; /* local first row and rows of each query segment */
    size_t k_elems, kv_elems;       /* floats of a packed K chunk, of K then V */
    cl_event last;                  /* the last command enqueued (chains every call: the queue may be out-of-order) */
    flashcl_status st;              /* first failure on this rank; later device work is skipped */
    int own;                        /* st is this rank's own failure (msg says what), not an agreed one */
    char msg[512];                  /* what failed first on this rank */
    int global;                     /* msg is about all ranks (a disagreement), not about this one */
    char *err_buf;                  /* the caller's (flashcl_ring_desc.err_buf), or NULL */
    size_t err_cap;
    const flashcl_ring_desc *opt;
} ring;

static double now(void) { return MPI_Wtime(); }

/* Records this rank's first failure and what it was (later ones are consequences). */
static void failf(ring *r, flashcl_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void failf(ring *r, flashcl_status st, const char *fmt, ...) {
    if (r->st != FLASHCL_SUCCESS) return;
    r->st = st;
    r->own = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
}

/* An OpenCL call of the component failed with e. */
static void fail_cl(ring *r, const char *call, cl_int e) {
    failf(r, (flashcl_status)e, "%s failed: %s (%d)", call, flashcl_status_name(e), (int)e);
}

/* A core call failed: its message, from the context, before anything else is called on it. */
static void fail_core(ring *r, flashcl_status st, const char *what) {
    failf(r, st, "%s: %s: %s", what, flashcl_status_name(st), flashcl_last_error(r->ctx));
}

/* A core call of ring step `step` failed. */
static void fail_core_at_step(ring *r, flashcl_status st, const char *call, int step) {
    failf(r, st, "%s at ring step %d: %s: %s", call, step, flashcl_status_name(st), flashcl_last_error(r->ctx));
}

static void mpi_check(ring *r, int e, const char *call) {
    if (e == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(e, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "error code %d", e);
    failf(r, FLASHCL_ERR_MPI, "%s failed: %s", call, text);
}

/* Replaces the chain's last event with ev (the event of a call just made). */
static void chain(ring *r, cl_event ev) {
    if (!ev) return;
    if (r->last) clReleaseEvent(r->last);
    r->last = ev;
}

static cl_uint nwait(const ring *r) { return r->last ? 1u : 0u; }
static const cl_event *waitl(const ring *r) { return r->last ? &r->last : NULL; }

/* Enqueues the staging write once its message is complete (or, with force, after waiting for it). */
static void stage_poll(ring *r, int force) {
    ring_stage *g = &r->stage;
    if (!g->recv || g->done || r->st != FLASHCL_SUCCESS) return;
    int flag = 1;
    if (force)
        mpi_check(r, MPI_Wait(g->recv, MPI_STATUS_IGNORE), "MPI_Wait (the K/V receive)");
    else
        MPI_Test(g->recv, &flag, MPI_STATUS_IGNORE);
    if (!flag || r->st != FLASHCL_SUCCESS) return;
    cl_int e = clEnqueueWriteBuffer(r->copy_queue, g->dst, CL_FALSE, 0, g->bytes, g->src, 0, NULL, &g->done);
    if (e == CL_SUCCESS) e = clFlush(r->copy_queue);
    if (e != CL_SUCCESS) fail_cl(r, "clEnqueueWriteBuffer (staging the next K/V)", e);
}

/* Ends the step's staging: the write enqueued (if its message came after the compute, now) and
   finished, so the next step's calls may read the buffer. */
static void stage_finish(ring *r) {
    stage_poll(r, 1);
    ring_stage *g = &r->stage;
    if (g->done) {
        cl_int e = clWaitForEvents(1, &g->done);
        if (e != CL_SUCCESS) fail_cl(r, "clWaitForEvents (staging the next K/V)", e);
        clReleaseEvent(g->done);
    }
    memset(g, 0, sizeof *g);
}

/* Waits for the chain while giving MPI's progress engine the CPU now and then: OpenMPI moves
   a large non-blocking message only inside MPI calls, so a plain clWaitForEvents would leave
   the K/V transfer stalled until the compute ends (no overlap). */
static void wait_device(ring *r, MPI_Request *reqs, int nreq) {
    if (!r->last) return;
    if (clFlush(r->queue) != CL_SUCCESS) failf(r, FLASHCL_ERR_INVALID_QUEUE, "clFlush of the context's queue failed");
    for (;;) {
        cl_int status = CL_COMPLETE;
        cl_int e = clGetEventInfo(r->last, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL);
        if (e != CL_SUCCESS) {
            fail_cl(r, "clGetEventInfo", e);
            break;
        }
        if (status < 0) {
            fail_cl(r, "a command of the ring step (its event's execution status)", status);
            break;
        }
        if (status == CL_COMPLETE) break;
        stage_poll(r, 0);
        if (nreq > 0) {
            int flag = 0;
            MPI_Testall(nreq, reqs, &flag, MPI_STATUSES_IGNORE);
        }
        const struct timespec pause = {0, 50000}; /* 50 us: short next to a step, long enough to yield the core */
        nanosleep(&pause, NULL);
    }
    clReleaseEvent(r->last);
    r->last = NULL;
}

static cl_mem make_bytes(ring *r, size_t bytes) {
    if (r->st != FLASHCL_SUCCESS) return NULL;
    cl_int e = CL_SUCCESS;
    cl_mem m = clCreateBuffer(r->cl, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &e);
    if (e != CL_SUCCESS) fail_cl(r, "clCreateBuffer", e);
    return e == CL_SUCCESS ? m : NULL;
}

static cl_mem make_buffer(ring *r, size_t floats) { return make_bytes(r, floats * sizeof(float)); }

/* count elements of the storage type (half the bytes of float32 for f16/bf16). */
static cl_mem make_storage(ring *r, size_t count) { return make_bytes(r, count * r->es); }

static void release(cl_mem m) {
    if (m) clReleaseMemObject(m);
}

static void write_bytes(ring *r, cl_mem m, size_t offset, size_t bytes, const void *src) {
    if (r->st != FLASHCL_SUCCESS) return;
    cl_event ev = NULL;
    cl_int e = clEnqueueWriteBuffer(r->queue, m, CL_TRUE, offset, bytes, src, nwait(r), waitl(r), &ev);
    if (e != CL_SUCCESS) fail_cl(r, "clEnqueueWriteBuffer", e);
    chain(r, ev);
}

static void read_bytes(ring *r, cl_mem m, size_t offset, size_t bytes, void *dst) {
    if (r->st != FLASHCL_SUCCESS) return;
    cl_event ev = NULL;
    cl_int e = clEnqueueReadBuffer(r->queue, m, CL_TRUE, offset, bytes, dst, nwait(r), waitl(r), &ev);
    if (e != CL_SUCCESS) fail_cl(r, "clEnqueueReadBuffer", e);
    chain(r, ev);
}

static void write_floats(ring *r, cl_mem m, size_t offset, size_t count, const float *src) {
    write_bytes(r, m, offset * sizeof(float), count * sizeof(float), src);
}

static void read_floats(ring *r, cl_mem m, size_t offset, size_t count, float *dst) {
    read_bytes(r, m, offset * sizeof(float), count * sizeof(float), dst);
}

/* count floats of m from float offset `offset` set to value. */
static void fill_floats(ring *r, cl_mem m, size_t offset, size_t count, float value) {
    if (r->st != FLASHCL_SUCCESS) return;
    cl_event ev = NULL;
    cl_int e = clEnqueueFillBuffer(r->queue, m, &value, sizeof value, offset * sizeof(float), count * sizeof(float),
                                   nwait(r), waitl(r), &ev);
    if (e != CL_SUCCESS) fail_cl(r, "clEnqueueFillBuffer", e);
    chain(r, ev);
}

/* blocks runs of width floats, from src (float offset so, one run every src_pitch floats) to dst
   (do, dst_pitch), on the device: rows of a [b, h, rows] LSE or of a packed [b, rows, h, d] view. */
static void copy_runs(ring *r, cl_mem src, size_t so, size_t src_pitch, cl_mem dst, size_t dof, size_t dst_pitch,
                      size_t width, size_t blocks) {
    if (r->st != FLASHCL_SUCCESS) return;
    const size_t f = sizeof(float), src_origin[3] = {so * f, 0, 0}, dst_origin[3] = {dof * f, 0, 0},
                 region[3] = {width * f, blocks, 1};
    cl_event ev = NULL;
    cl_int e = clEnqueueCopyBufferRect(r->queue, src, dst, src_origin, dst_origin, region, src_pitch * f, 0,
                                       dst_pitch * f, 0, nwait(r), waitl(r), &ev);
    if (e != CL_SUCCESS) fail_cl(r, "clEnqueueCopyBufferRect", e);
    chain(r, ev);
}

/* The same from host floats to the device. */
static void write_runs(ring *r, const float *src, size_t src_pitch, cl_mem dst, size_t dof, size_t dst_pitch,
                       size_t width, size_t blocks) {
    if (r->st != FLASHCL_SUCCESS) return;
    const size_t f = sizeof(float), dst_origin[3] = {dof * f, 0, 0}, host_origin[3] = {0, 0, 0},
                 region[3] = {width * f, blocks, 1};
    cl_event ev = NULL;
    cl_int e = clEnqueueWriteBufferRect(r->queue, dst, CL_TRUE, dst_origin, host_origin, region, dst_pitch * f, 0,
                                        src_pitch * f, 0, src, nwait(r), waitl(r), &ev);
    if (e != CL_SUCCESS) fail_cl(r, "clEnqueueWriteBufferRect", e);
    chain(r, ev);
}

/* count storage-type elements of m from element offset 0, as float32 on the host (scratch: count
   16-bit elements, unused for float32). */
static void read_as_float(ring *r, cl_mem m, size_t count, float *dst, void *scratch) {
    if (r->dt == FLASHCL_DTYPE_F32) {
        read_floats(r, m, 0, count, dst);
        return;
    }
    read_bytes(r, m, 0, count * r->es, scratch);
    if (r->st == FLASHCL_SUCCESS) flashcl__from_storage(r->dt, scratch, dst, count);
}

/* A view of rows [row0, ..) of a [batch, heads, rows, dim] view (packed when all strides are 0). */
static flashcl_tensor rows_of(const flashcl_tensor *t, size_t rows, size_t heads, size_t dim, size_t row0) {
    flashcl_tensor v = *t;
    if (v.stride_batch == 0 && v.stride_head == 0 && v.stride_row == 0) {
        v = flashcl_tensor_bshd(t->buffer, rows, heads, dim);
        v.offset = t->offset;
    }
    v.offset += row0 * v.stride_row;
    return v;
}

static flashcl_tensor packed(cl_mem m, size_t offset, size_t rows, size_t heads, size_t dim) {
    flashcl_tensor v = flashcl_tensor_bshd(m, rows, heads, dim);
    v.offset = offset;
    return v;
}

/* dst (storage dt) = src (float32) on the device, any strides: a merge of one state (weight 1),
   which rounds once to dt. zeros holds at least batch*heads*rows zero floats, the one state's LSE. */
static void copy_view(ring *r, const flashcl_tensor *src, const flashcl_tensor *dst, size_t heads, size_t rows,
                      size_t dim, cl_mem zeros, flashcl_dtype dt, const char *what) {
    if (r->st != FLASHCL_SUCCESS) return;
    flashcl_merge_desc m = FLASHCL_MERGE_DESC_INIT;
    m.num_states = 1;
    m.dtype = dt;
    m.batch = r->b;
    m.heads = heads;
    m.seqlen = rows;
    m.head_dim = dim;
    cl_event ev = NULL;
    flashcl_status st = flashcl_merge_states(r->ctx, &m, src, zeros, 0, dst, NULL, 0, nwait(r), waitl(r), &ev);
    if (st != FLASHCL_SUCCESS) fail_core(r, st, what);
    chain(r, ev);
}

flashcl_status flashcl_ring_rows(flashcl_ring_layout layout, size_t seqlen_global, int size, int rank,
                                 size_t first_row[2], size_t rows[2], int *num_segments) {
    if (!first_row || !rows || !num_segments || size < 1 || rank < 0 || rank >= size)
        return FLASHCL_ERR_INVALID_ARGUMENT;
    const size_t p = (size_t)size, q = (size_t)rank;
    if (layout == FLASHCL_RING_CONTIGUOUS) {
        if (seqlen_global == 0 || seqlen_global % p) return FLASHCL_ERR_INVALID_SHAPE;
        const size_t n = seqlen_global / p;
        first_row[0] = q * n, rows[0] = n, first_row[1] = rows[1] = 0, *num_segments = 1;
        return FLASHCL_SUCCESS;
    }
    if (layout == FLASHCL_RING_ZIGZAG) {
        if (seqlen_global == 0 || seqlen_global % (2 * p)) return FLASHCL_ERR_INVALID_SHAPE;
        const size_t c = seqlen_global / (2 * p);
        first_row[0] = q * c, first_row[1] = (2 * p - 1 - q) * c, rows[0] = rows[1] = c, *num_segments = 2;
        return FLASHCL_SUCCESS;
    }
    return FLASHCL_ERR_INVALID_ARGUMENT;
}

/* The attention calls query segment g makes against the chunk rank src holds, in key order.
   Causal: per (query chunk, key chunk) pair of equal, aligned chunks the pair is fully visible
   (every key before the first query), diagonal (the same global rows: causal inside) or
   invisible (skipped). Consecutive visible key chunks are one call when only the last is
   diagonal: causal there is bottom-right aligned, so with sk = m*len keys and sq = len queries,
   key j is visible iff j <= i + (m-1)*len, which is exactly "earlier chunks full, last diagonal". */
static int plan_window(const ring *r, int src, int g, ring_run runs[2]);

static int plan_runs(const ring *r, int src, int g, ring_run runs[2]) {
    if (r->d.window) return plan_window(r, src, g, runs);
    if (!r->d.causal) {
        runs[0] = (ring_run){0, r->n, 0, r->n, 0, 0, -1, -1};
        return 1;
    }
    size_t qf[2], qn[2], kf[2], kn[2];
    int nq = 0, nk = 0;
    const size_t total = r->n * (size_t)r->size;
    flashcl_ring_rows(r->layout, total, r->size, r->rank, qf, qn, &nq);
    flashcl_ring_rows(r->layout, total, r->size, src, kf, kn, &nk);
    const size_t qa = qf[g];
    int count = 0, open = 0;
    size_t local = 0;
    for (int j = 0; j < nk; local += kn[j], ++j) {
        const size_t ka = kf[j];
        const int full = ka + kn[j] <= qa, diag = ka == qa;
        if (!full && !diag) {
            open = 0; /* invisible: every key after the last query */
            continue;
        }
        if (open)
            runs[count - 1].kn += kn[j], runs[count - 1].causal = diag;
        else
            runs[count++] = (ring_run){0, qn[g], local, kn[j], diag, 0, -1, -1};
        open = full;
    }
    return count;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* A window on global positions: key j is visible to query i iff i - WL <= j <= i + WR (-1 =
   unbounded). Query segment g (global rows qa.., nq of them) against each chunk of rank src
   (global rows ka.., nk of them; one call per chunk, since the chunks of a rank are not
   adjacent globally): with local rows a = i - qa, b = j - ka the visible band is
   lo <= b - a <= hi, lo = (qa - ka) - WL, hi = (qa - ka) + WR. Queries a < -hi or
   a >= nk - lo see no key of the chunk and keys b < a0 + lo or b >= a1 + hi are seen by no
   query of [a0, a1), so the call takes the sub-views a in [a0, a1) = [max(0, -hi),
   min(nq, nk - lo)) and b in [b0, b1) = [max(0, a0 + lo), min(nk, a1 + hi)) (an empty range:
   no call). On them (a' = a - a0, b' = b - b0, sq' = a1 - a0, sk' = b1 - b0) the core's
   window keeps a' + sk' - sq' - wl' <= b' <= a' + sk' - sq' + wr', which is lo <= b - a <= hi
   for wl' = b1 - a1 - lo and wr' = hi - b1 + a1; both are >= 0 by the choice of a1 and b1.
   A bound past the sub-view (wl' >= sk', wr' >= sq') is clamped there: it masks nothing. */
static int plan_window(const ring *r, int src, int g, ring_run runs[2]) {
    size_t qf[2], qn[2], kf[2], kn[2];
    int nq = 0, nk = 0;
    const size_t total = r->n * (size_t)r->size;
    flashcl_ring_rows(r->layout, total, r->size, r->rank, qf, qn, &nq);
    flashcl_ring_rows(r->layout, total, r->size, src, kf, kn, &nk);
    const int has_lo = r->wl >= 0, has_hi = r->wr >= 0;
    const int64_t n_q = (int64_t)qn[g];
    int count = 0;
    size_t local = 0;
    for (int j = 0; j < nk; local += kn[j], ++j) {
        const int64_t n_k = (int64_t)kn[j], shift = (int64_t)qf[g] - (int64_t)kf[j];
        const int64_t lo = shift - r->wl, hi = shift + r->wr;
        const int64_t a0 = has_hi ? max64(0, -hi) : 0, a1 = has_lo ? min64(n_q, n_k - lo) : n_q;
        if (a0 >= a1) continue;
        const int64_t b0 = has_lo ? max64(0, a0 + lo) : 0, b1 = has_hi ? min64(n_k, a1 + hi) : n_k;
        if (b0 >= b1) continue;
        const int64_t sq = a1 - a0, sk = b1 - b0;
        const int wl = has_lo ? (int)min64(b1 - a1 - lo, sk) : -1, wr = has_hi ? (int)min64(hi - b1 + a1, sq) : -1;
        runs[count++] = (ring_run){(size_t)a0, (size_t)sq, local + (size_t)b0, (size_t)sk, 0, 1, wl, wr};
    }
    return count;
}

static int64_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (int64_t)u;
}

/* Local checks of this rank's arguments, then one MPI_Allreduce that agrees on the status and
   on the shape: a rank whose sizes differ would post receives of another length (truncation
   is an MPI error, and with a mismatched step count a hang), so disagreement is an error too. */
static void setup(ring *r, flashcl_context *ctx, const flashcl_attention_desc *desc, const flashcl_ring_desc *opt,
                  const char *null_arg, MPI_Comm user_comm) {
    memset(r, 0, sizeof *r);
    r->ctx = ctx;
    r->opt = opt;
    r->comm = MPI_COMM_NULL;
    /* The caller's message buffer, when its ring descriptor has the fields. */
    if (opt && opt->struct_size >= offsetof(flashcl_ring_desc, err_buf_size) + sizeof(size_t) && opt->err_buf &&
        opt->err_buf_size > 0) {
        r->err_buf = opt->err_buf, r->err_cap = opt->err_buf_size;
        r->err_buf[0] = '\0';
    }
    if (!ctx)
        failf(r, FLASHCL_ERR_INVALID_CONTEXT, "ctx is NULL");
    else if (!desc)
        failf(r, FLASHCL_ERR_INVALID_ARGUMENT, "desc is NULL");
    else if (null_arg)
        failf(r, FLASHCL_ERR_INVALID_ARGUMENT, "%s is NULL", null_arg);
    else if (desc->struct_size == 0)
        failf(r, FLASHCL_ERR_INVALID_STRUCT_SIZE, "desc->struct_size is 0 (start from FLASHCL_ATTENTION_DESC_INIT)");
    else if (desc->struct_size > sizeof(flashcl_attention_desc)) {
        /* The core's rule: fields of a newer header that this build does not know must be zero. */
        const unsigned char *extra = (const unsigned char *)desc + sizeof(flashcl_attention_desc);
        for (size_t i = 0; i < desc->struct_size - sizeof(flashcl_attention_desc); ++i)
            if (extra[i])
                failf(r, FLASHCL_ERR_UNSUPPORTED_FIELD,
                      "desc has a nonzero byte at offset %zu, past the fields this library knows (%zu bytes)",
                      sizeof(flashcl_attention_desc) + i, sizeof(flashcl_attention_desc));
    }
    if (r->st == FLASHCL_SUCCESS && opt &&
        opt->struct_size < offsetof(flashcl_ring_desc, step_stage_s) + sizeof(double *))
        failf(r, FLASHCL_ERR_INVALID_STRUCT_SIZE,
              "ring->struct_size (%zu) is smaller than the oldest flashcl_ring_desc", opt->struct_size);
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    if (r->st == FLASHCL_SUCCESS) {
        memcpy(&d, desc, desc->struct_size < sizeof d ? desc->struct_size : sizeof d);
        d.struct_size = sizeof d;
        if (d.heads_kv == 0) d.heads_kv = d.heads_q;
        if (d.seqlen_k == 0) d.seqlen_k = d.seqlen_q;
        if (d.head_dim_v == 0) d.head_dim_v = d.head_dim;
        if (d.dtype == FLASHCL_DTYPE_DEFAULT) d.dtype = FLASHCL_DTYPE_F32;
        r->layout = opt ? opt->layout : FLASHCL_RING_CONTIGUOUS;
        const size_t dims[] = {d.batch, d.heads_q, d.heads_kv, d.seqlen_q};
        const char *dim_names[] = {"batch", "heads_q", "heads_kv", "seqlen_q"};
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i)
            if (dims[i] == 0 || dims[i] > INT32_MAX)
                failf(r, FLASHCL_ERR_INVALID_SHAPE, "desc->%s (%zu) must be in 1..%d", dim_names[i], dims[i],
                      INT32_MAX);
        if (d.seqlen_k != d.seqlen_q)
            failf(r, FLASHCL_ERR_INVALID_SHAPE,
                  "desc->seqlen_k (%zu) must equal seqlen_q (%zu): ring attention is self-attention", d.seqlen_k,
                  d.seqlen_q);
        if (r->st == FLASHCL_SUCCESS && d.heads_q % d.heads_kv)
            failf(r, FLASHCL_ERR_INVALID_HEADS, "desc->heads_q (%zu) must be a multiple of heads_kv (%zu)", d.heads_q,
                  d.heads_kv);
        if (d.head_dim == 0 || d.head_dim > FLASHCL_MAX_HEAD_DIM || d.head_dim_v == 0 ||
            d.head_dim_v > FLASHCL_MAX_HEAD_DIM)
            failf(r, FLASHCL_ERR_INVALID_HEAD_DIM, "desc->head_dim (%zu) and head_dim_v (%zu) must be in 1..%d",
                  d.head_dim, d.head_dim_v, FLASHCL_MAX_HEAD_DIM);
        if (d.dtype != FLASHCL_DTYPE_F32 && d.dtype != FLASHCL_DTYPE_F16 && d.dtype != FLASHCL_DTYPE_BF16)
            failf(r, FLASHCL_ERR_INVALID_DTYPE, "desc->dtype (%d) is not f32, f16 or bf16", (int)d.dtype);
        const char *unsupported = d.alibi_slopes                     ? "alibi_slopes"
                                  : d.sinks || d.dsinks              ? "sinks"
                                  : d.dropout_p != 0.0f              ? "dropout_p"
                                  : d.bias.buffer                    ? "bias"
                                  : d.mask.buffer                    ? "mask"
                                  : d.block_mask.buffer              ? "block_mask"
                                  : d.cu_seqlens_q || d.cu_seqlens_k ? "cu_seqlens_q/cu_seqlens_k (varlen)"
                                                                     : NULL;
        if (unsupported)
            failf(r, FLASHCL_ERR_UNSUPPORTED_VARIANT, "desc->%s is set: ring attention does not support it",
                  unsupported);
        if (d.window && (d.window_left < -1 || d.window_right < -1))
            failf(r, FLASHCL_ERR_INVALID_VARIANT,
                  "desc->window_left/window_right (%d, %d) must be >= -1 (-1 = unbounded)", d.window_left,
                  d.window_right);
        if (r->layout != FLASHCL_RING_CONTIGUOUS && r->layout != FLASHCL_RING_ZIGZAG)
            failf(r, FLASHCL_ERR_INVALID_ARGUMENT, "ring->layout (%d) is neither CONTIGUOUS nor ZIGZAG",
                  (int)r->layout);
        if (r->layout == FLASHCL_RING_ZIGZAG && d.seqlen_q % 2)
            failf(r, FLASHCL_ERR_INVALID_SHAPE, "desc->seqlen_q (%zu) must be even with the ZIGZAG layout", d.seqlen_q);
        /* A chunk's K then V go in one MPI message, whose count is an int. */
        if ((double)d.batch * (double)d.seqlen_q * (double)d.heads_kv * (double)(d.head_dim + d.head_dim_v) > INT32_MAX)
            failf(r, FLASHCL_ERR_INVALID_SHAPE,
                  "a K/V chunk (batch * seqlen_q * heads_kv * (head_dim + head_dim_v) elements) must fit one MPI "
                  "message (at most %d elements)",
                  INT32_MAX);
    }
    /* The window on global positions, resolved as the core does: off = (-1, -1), causal: wr = 0. */
    r->wl = d.window ? d.window_left : -1;
    r->wr = d.causal ? 0 : d.window ? d.window_right : -1;
    r->d = d;
    /* The staging queue: created before the agreement, since a rank that failed after it would
       leave its partners waiting for its messages. */
    if (r->st == FLASHCL_SUCCESS) {
        cl_int e = CL_SUCCESS;
        r->copy_queue = clCreateCommandQueue(flashcl_context_cl_context(ctx), flashcl_context_device(ctx), 0, &e);
        if (e != CL_SUCCESS) r->copy_queue = NULL, fail_cl(r, "clCreateCommandQueue (the staging queue)", e);
    }
    if (user_comm == MPI_COMM_NULL) { /* nothing to agree with: this rank alone returns */
        r->st = FLASHCL_SUCCESS;
        failf(r, FLASHCL_ERR_INVALID_ARGUMENT, "comm is MPI_COMM_NULL");
        return;
    }
    /* A duplicate, so our messages can never match the application's, and errors that return. */
    const int dup = MPI_Comm_dup(user_comm, &r->comm);
    if (dup != MPI_SUCCESS) {
        r->comm = MPI_COMM_NULL;
        r->st = FLASHCL_SUCCESS;
        mpi_check(r, dup, "MPI_Comm_dup");
        return;
    }
    MPI_Comm_set_errhandler(r->comm, MPI_ERRORS_RETURN);
    MPI_Comm_size(r->comm, &r->size);
    MPI_Comm_rank(r->comm, &r->rank);
    r->next = (r->rank + 1) % r->size;
    r->prev = (r->rank + r->size - 1) % r->size;

    /* [0] the status (the minimum wins), then each field as +x and -x: min and -max in one call. */
    enum { FIELDS = 14 };
    const int64_t f[FIELDS] = {(int64_t)d.batch,
                               (int64_t)d.heads_q,
                               (int64_t)d.heads_kv,
                               (int64_t)d.seqlen_q,
                               (int64_t)d.head_dim,
                               (int64_t)d.head_dim_v,
                               d.causal != 0,
                               (int64_t)r->layout,
                               bits_of(d.scale),
                               bits_of(d.softcap),
                               d.window != 0,
                               r->wl,
                               r->wr,
                               (int64_t)d.dtype};
    static const char *const field_names[FIELDS] = {"batch",
                                                    "heads_q",
                                                    "heads_kv",
                                                    "seqlen_q",
                                                    "head_dim",
                                                    "head_dim_v",
                                                    "causal",
                                                    "ring->layout",
                                                    "scale",
                                                    "softcap",
                                                    "window",
                                                    "window_left",
                                                    "window_right (causal: 0)",
                                                    "dtype"};
    int64_t v[1 + 2 * FIELDS];
    v[0] = r->st;
    for (int i = 0; i < FIELDS; ++i) v[1 + i] = f[i], v[1 + FIELDS + i] = -f[i];
    const int agreed = MPI_Allreduce(MPI_IN_PLACE, v, 1 + 2 * FIELDS, MPI_INT64_T, MPI_MIN, r->comm);
    if (agreed != MPI_SUCCESS) {
        r->st = FLASHCL_SUCCESS; /* this failure is the one to report */
        mpi_check(r, agreed, "MPI_Allreduce (the argument agreement)");
        return;
    }
    if (v[0] != FLASHCL_SUCCESS && r->st == FLASHCL_SUCCESS) r->st = (flashcl_status)v[0]; /* another rank's */
    for (int i = 0; r->st == FLASHCL_SUCCESS && i < FIELDS; ++i)
        if (v[1 + i] != -v[1 + FIELDS + i]) {
            const flashcl_status st = i < 6            ? FLASHCL_ERR_INVALID_SHAPE
                                      : i < FIELDS - 1 ? FLASHCL_ERR_INVALID_VARIANT
                                                       : FLASHCL_ERR_INVALID_DTYPE;
            r->global = 1;
            if (i == 8 || i == 9) /* float bits */
                failf(r, st, "the ranks disagree on desc->%s", field_names[i]);
            else
                failf(r, st, "the ranks disagree on %s%s (from %lld to %lld)", i == 7 ? "" : "desc->", field_names[i],
                      (long long)v[1 + i], (long long)-v[1 + FIELDS + i]);
        }
    if (r->st != FLASHCL_SUCCESS) return;

    r->cl = flashcl_context_cl_context(ctx);
    r->queue = flashcl_context_queue(ctx);
    r->b = d.batch, r->hq = d.heads_q, r->hkv = d.heads_kv, r->dk = d.head_dim, r->dv = d.head_dim_v;
    r->n = d.seqlen_q;
    r->dt = d.dtype;
    r->es = flashcl_dtype_size(d.dtype);
    r->kv_type = r->es == sizeof(float) ? MPI_FLOAT : MPI_UINT16_T;
    r->k_elems = r->b * r->n * r->hkv * r->dk;
    r->kv_elems = r->k_elems + r->b * r->n * r->hkv * r->dv;
    if ((d.causal || d.window) && r->layout == FLASHCL_RING_ZIGZAG) {
        /* A mask on global positions: the two chunks of a rank are far apart globally. */
        r->nseg = 2;
        r->seg_row0[0] = 0, r->seg_len[0] = r->n / 2, r->seg_row0[1] = r->n / 2, r->seg_len[1] = r->n / 2;
    } else {
        /* Without a mask every key is visible to every query: the layout only says which rows
           a rank holds, and one call per step covers all of them. */
        r->nseg = 1;
        r->seg_row0[0] = 0, r->seg_len[0] = r->n;
    }
}

/* The caller's message: "" on success; else the failing rank's message, prefixed by its rank
   (from; -1: none, the message is this rank's alone or about all ranks). */
static void report(ring *r, flashcl_status st, int from) {
    if (!r->err_buf) return;
    if (st == FLASHCL_SUCCESS)
        r->err_buf[0] = '\0';
    else if (from < 0)
        snprintf(r->err_buf, r->err_cap, "%s", r->msg[0] ? r->msg : flashcl_status_string(st));
    else
        snprintf(r->err_buf, r->err_cap, "rank %d of %d: %s", from, r->size,
                 r->msg[0] ? r->msg : flashcl_status_string(st));
}

/* The last agreement: every rank returns the lowest status any rank had, and (into the caller's
   err_buf) the message of the lowest rank that had it itself rather than by agreement. */
static flashcl_status finish(ring *r) {
    if (r->last) clWaitForEvents(1, &r->last), clReleaseEvent(r->last), r->last = NULL;
    if (r->copy_queue) clReleaseCommandQueue(r->copy_queue), r->copy_queue = NULL;
    if (r->comm == MPI_COMM_NULL) {
        report(r, r->st, -1);
        return r->st;
    }
    /* MINLOC on 2 * status + (not our own failure): the lowest status wins, and among the ranks
       with it one whose own failure it was (it has the message); then the lowest rank. */
    struct {
        int key, rank;
    } v = {2 * (int)r->st + !r->own, r->rank};
    flashcl_status st;
    int from = -1;
    if (MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_2INT, MPI_MINLOC, r->comm) != MPI_SUCCESS) {
        st = FLASHCL_ERR_MPI;
        snprintf(r->msg, sizeof r->msg, "MPI_Allreduce (the final status agreement) failed");
    } else {
        st = (flashcl_status)((v.key - (int)((unsigned)v.key & 1u)) / 2);
        if (st != FLASHCL_SUCCESS) {        /* every rank knows it failed: all take part */
            char packet[1 + sizeof r->msg]; /* whether the message is about all ranks, then it */
            packet[0] = (char)r->global;
            memcpy(packet + 1, r->msg, sizeof r->msg);
            if (MPI_Bcast(packet, (int)sizeof packet, MPI_CHAR, v.rank, r->comm) == MPI_SUCCESS) {
                memcpy(r->msg, packet + 1, sizeof r->msg);
                r->global = packet[0] != 0;
            } else
                snprintf(r->msg, sizeof r->msg, "%s (its message did not arrive: MPI_Bcast failed)",
                         flashcl_status_name(st));
            r->msg[sizeof r->msg - 1] = '\0';
            from = r->global ? -1 : v.rank;
        }
    }
    report(r, st, from);
    MPI_Comm_free(&r->comm);
    return st;
}

static void record(const ring *r, int step, double compute, double wait, double stage) {
    if (!r->opt) return;
    if (r->opt->step_compute_s) r->opt->step_compute_s[step] = compute;
    if (r->opt->step_wait_s) r->opt->step_wait_s[step] = wait;
    if (r->opt->step_stage_s) r->opt->step_stage_s[step] = stage;
}

/* A 16-bit view [b, heads, rows, dim] (any strides) packed [b, rows, heads, dim] into dst on the
   host: the span the view covers is read back once and gathered (merge_states, the device copy
   of the float32 path, reads float32 states only). The bounds are checked here, as the core
   would: FLASHCL_ERR_INVALID_BUFFER, FLASHCL_ERR_OUT_OF_BOUNDS. */
static void pack_view_host(ring *r, const flashcl_tensor *t, size_t heads, size_t rows, size_t dim, uint16_t *dst,
                           const char *name) {
    if (r->st != FLASHCL_SUCCESS) return;
    size_t bytes = 0;
    if (!t->buffer || clGetMemObjectInfo(t->buffer, CL_MEM_SIZE, sizeof bytes, &bytes, NULL) != CL_SUCCESS) {
        failf(r, FLASHCL_ERR_INVALID_BUFFER, "%s.buffer is %s", name, t->buffer ? "not a valid cl_mem" : "NULL");
        return;
    }
    const size_t span = (r->b - 1) * t->stride_batch + (heads - 1) * t->stride_head + (rows - 1) * t->stride_row + dim;
    if (t->offset > bytes / r->es || span > bytes / r->es - t->offset) {
        failf(r, FLASHCL_ERR_OUT_OF_BOUNDS,
              "%s: offset %zu + %zu elements of %zu bytes reach past the end of its buffer (%zu bytes)", name,
              t->offset, span, r->es, bytes);
        return;
    }
    uint16_t *all = malloc(span * sizeof *all);
    if (!all) {
        failf(r, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "host memory for packing %s (%zu bytes)", name, span * sizeof *all);
        return;
    }
    read_bytes(r, t->buffer, t->offset * r->es, span * r->es, all);
    for (size_t b = 0; b < r->b && r->st == FLASHCL_SUCCESS; ++b)
        for (size_t i = 0; i < rows; ++i)
            for (size_t h = 0; h < heads; ++h)
                memcpy(dst + ((b * rows + i) * heads + h) * dim,
                       all + b * t->stride_batch + h * t->stride_head + i * t->stride_row, dim * sizeof *all);
    free(all);
}

/* This rank's K and V in the storage type, packed [b, n, hkv, d] one after the other, on the
   device (kv) and the host. */
static void stage_own_kv(ring *r, const flashcl_tensor *k, const flashcl_tensor *v, cl_mem kv, cl_mem zeros,
                         void *host) {
    const flashcl_tensor ks = rows_of(k, r->n, r->hkv, r->dk, 0), vs = rows_of(v, r->n, r->hkv, r->dv, 0);
    if (r->dt != FLASHCL_DTYPE_F32) {
        pack_view_host(r, &ks, r->hkv, r->n, r->dk, host, "k");
        pack_view_host(r, &vs, r->hkv, r->n, r->dv, (uint16_t *)host + r->k_elems, "v");
        write_bytes(r, kv, 0, r->kv_elems * r->es, host);
        return;
    }
    const flashcl_tensor kp = packed(kv, 0, r->n, r->hkv, r->dk), vp = packed(kv, r->k_elems, r->n, r->hkv, r->dv);
    copy_view(r, &ks, &kp, r->hkv, r->n, r->dk, zeros, FLASHCL_DTYPE_F32, "k (copied by a one-state merge)");
    copy_view(r, &vs, &vp, r->hkv, r->n, r->dv, zeros, FLASHCL_DTYPE_F32, "v (copied by a one-state merge)");
    read_floats(r, kv, 0, r->kv_elems, host);
}

static cl_mem zeros_buffer(ring *r, size_t floats) {
    if (r->st != FLASHCL_SUCCESS) return NULL;
    float *z = calloc(floats ? floats : 1, sizeof *z);
    if (!z) {
        failf(r, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "host memory for %zu zero floats", floats);
        return NULL;
    }
    cl_int e = CL_SUCCESS;
    cl_mem m =
        clCreateBuffer(r->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (floats ? floats : 1) * sizeof(float), z, &e);
    free(z);
    if (e != CL_SUCCESS) fail_cl(r, "clCreateBuffer", e);
    return e == CL_SUCCESS ? m : NULL;
}

/* Posts this step's exchange: send what we hold to next, receive what prev holds. */
static void exchange(ring *r, void *send, void *recv, size_t count, MPI_Datatype type, int tag, MPI_Request reqs[2]) {
    reqs[0] = reqs[1] = MPI_REQUEST_NULL;
    if (r->comm == MPI_COMM_NULL) return;
    if (!send || !recv) count = 0; /* after a failed allocation: still match the partner's message */
    mpi_check(r, MPI_Irecv(recv, (int)count, type, r->prev, tag, r->comm, &reqs[0]), "MPI_Irecv");
    mpi_check(r, MPI_Isend(send, (int)count, type, r->next, tag, r->comm, &reqs[1]), "MPI_Isend");
}

static void wait_all(ring *r, MPI_Request *reqs, int n) {
    if (n > 0) mpi_check(r, MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE), "MPI_Waitall");
}

flashcl_status flashcl_ring_forward(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                    const flashcl_ring_desc *opt, const flashcl_tensor *q, const flashcl_tensor *k,
                                    const flashcl_tensor *v, const flashcl_tensor *o, cl_mem lse, size_t lse_offset,
                                    MPI_Comm comm) {
    ring rr, *r = &rr;
    setup(r, ctx, desc, opt, !q ? "q" : !k ? "k" : !v ? "v" : !o ? "o" : NULL, comm);
    if (r->st != FLASHCL_SUCCESS) return finish(r);

    void *host[2] = {malloc(r->kv_elems * r->es), malloc(r->kv_elems * r->es)}; /* K/V in the storage type */
    float *lse_host = malloc(r->b * r->hq * r->n * sizeof(float)),
          *lse_seg = malloc(r->b * r->hq * r->n * sizeof(float));
    if (!host[0] || !host[1] || !lse_host || !lse_seg)
        failf(r, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "host memory for the K/V double buffer and the LSE");
    cl_mem kv[2] = {make_storage(r, r->kv_elems), make_storage(r, r->kv_elems)};
    cl_mem zeros = zeros_buffer(r, r->b * r->hq * r->n);
    cl_mem lse_tmp = r->d.window ? make_buffer(r, r->b * r->hq * r->n) : NULL;
    /* 16-bit storage: flashcl_forward writes the step's partial O in the storage type here; it is
       read back, widened to float32 on the host and written into the state region (the merge
       reads float32 states only). Rounding the partial O to 16 bits is the one extra rounding
       against a single-process call; the merges and the running state stay float32. */
    const size_t ostep_n = r->b * r->hq * r->n * r->dv;
    cl_mem ostep = r->dt != FLASHCL_DTYPE_F32 ? make_storage(r, ostep_n) : NULL;
    float *ostep_f = r->dt != FLASHCL_DTYPE_F32 ? malloc(ostep_n * sizeof(float)) : NULL;
    uint16_t *ostep_h = r->dt != FLASHCL_DTYPE_F32 ? malloc(ostep_n * sizeof(uint16_t)) : NULL;
    if (r->dt != FLASHCL_DTYPE_F32 && (!ostep_f || !ostep_h))
        failf(r, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "host memory for widening the partial O");
    /* Per query segment: three float32 (O, LSE) regions, the running state at 0 or 2 and the
       step's in the middle, so that the two inputs of every merge are one state stride apart. */
    cl_mem ost[2] = {NULL, NULL}, lst[2] = {NULL, NULL};
    size_t os[2] = {0, 0}, ls[2] = {0, 0};
    int acc[2] = {-1, -1};
    for (int g = 0; g < r->nseg; ++g) {
        ls[g] = r->b * r->hq * r->seg_len[g];
        os[g] = ls[g] * r->dv;
        ost[g] = make_buffer(r, 3 * os[g]);
        lst[g] = make_buffer(r, 3 * ls[g]);
    }
    stage_own_kv(r, k, v, kv[0], zeros, host[0]);

    for (int s = 0; s < r->size; ++s) {
        const int src = (r->rank - s + r->size) % r->size, cur = s % 2;
        MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        /* Every rank exchanges at every step even after a failure, so no partner waits forever. */
        if (s + 1 < r->size) {
            exchange(r, host[cur], host[1 - cur], r->kv_elems, r->kv_type, s, reqs);
            r->stage = (ring_stage){&reqs[0], kv[1 - cur], host[1 - cur], r->kv_elems * r->es, NULL};
        }
        const double t0 = now();
        for (int g = 0; g < r->nseg && r->st == FLASHCL_SUCCESS; ++g) {
            ring_run runs[2];
            const int nruns = plan_runs(r, src, g, runs);
            for (int i = 0; i < nruns && r->st == FLASHCL_SUCCESS; ++i) {
                const ring_run *u = &runs[i];
                const size_t len = r->seg_len[g], rows = u->qn, orow = r->hq * r->dv;
                /* A window's call may take only some rows of the segment (the others see no key of
                   this chunk): its state region is then O = 0, LSE = -inf outside those rows, which
                   the merge weighs 0, and its LSE goes through lse_tmp ([b, hq, rows]). */
                const int part = rows < len;
                flashcl_attention_desc sd = r->d;
                sd.seqlen_q = rows;
                sd.seqlen_k = u->kn;
                sd.causal = u->causal;
                sd.window = u->window, sd.window_left = u->wl, sd.window_right = u->wr;
                const flashcl_tensor qs = rows_of(q, r->n, r->hq, r->dk, r->seg_row0[g] + u->q0);
                const flashcl_tensor ks = packed(kv[cur], u->k0 * r->hkv * r->dk, r->n, r->hkv, r->dk);
                const flashcl_tensor vs = packed(kv[cur], r->k_elems + u->k0 * r->hkv * r->dv, r->n, r->hkv, r->dv);
                const int into = acc[g] < 0 ? 0 : 1; /* the first result is the running state itself */
                const size_t obase = (size_t)into * os[g], lbase = (size_t)into * ls[g];
                if (part) {
                    fill_floats(r, ost[g], obase, os[g], 0.0f);
                    fill_floats(r, lst[g], lbase, ls[g], -INFINITY);
                }
                flashcl_tensor os_view =
                    ostep ? packed(ostep, 0, rows, r->hq, r->dv) : packed(ost[g], obase, len, r->hq, r->dv);
                if (!ostep) os_view.offset += u->q0 * orow;
                cl_event ev = NULL;
                flashcl_status st = r->st;
                if (st == FLASHCL_SUCCESS)
                    st = flashcl_forward(ctx, &sd, &qs, &ks, &vs, &os_view, part ? lse_tmp : lst[g], part ? 0 : lbase,
                                         nwait(r), waitl(r), &ev);
                if (st != FLASHCL_SUCCESS) {
                    fail_core_at_step(r, st, "flashcl_forward", s);
                    break;
                }
                chain(r, ev);
                if (part) copy_runs(r, lse_tmp, 0, rows, lst[g], lbase + u->q0, len, rows, r->b * r->hq);
                if (ostep) { /* the partial O as float32 into its state region (its rows of each batch) */
                    wait_device(r, reqs, 2);
                    read_as_float(r, ostep, r->b * rows * orow, ostep_f, ostep_h);
                    write_runs(r, ostep_f, rows * orow, ost[g], obase + u->q0 * orow, len * orow, rows * orow, r->b);
                }
                if (acc[g] < 0) {
                    acc[g] = 0;
                    continue;
                }
                /* Merge the running state and the step's: states at regions (0, 1) -> 2 or (1, 2) -> 0. */
                const int first = acc[g] == 0 ? 0 : 1, out = acc[g] == 0 ? 2 : 0;
                flashcl_merge_desc m = FLASHCL_MERGE_DESC_INIT;
                m.num_states = 2;
                m.batch = r->b, m.heads = r->hq, m.seqlen = r->seg_len[g], m.head_dim = r->dv;
                m.o_state_stride = os[g], m.lse_state_stride = ls[g];
                const flashcl_tensor states = packed(ost[g], (size_t)first * os[g], r->seg_len[g], r->hq, r->dv);
                const flashcl_tensor merged = packed(ost[g], (size_t)out * os[g], r->seg_len[g], r->hq, r->dv);
                ev = NULL;
                st = flashcl_merge_states(ctx, &m, &states, lst[g], (size_t)first * ls[g], &merged, lst[g],
                                          (size_t)out * ls[g], nwait(r), waitl(r), &ev);
                if (st != FLASHCL_SUCCESS) fail_core(r, st, "flashcl_merge_states (the running state)");
                chain(r, ev);
                acc[g] = out;
            }
        }
        wait_device(r, reqs, 2);
        const double t1 = now();
        wait_all(r, reqs, 2);
        const double t2 = now();
        stage_finish(r);
        record(r, s, t1 - t0, t2 - t1, now() - t2);
    }

    /* The running states into the caller's o (its strides, its rows) and its LSE. */
    for (int g = 0; g < r->nseg && r->st == FLASHCL_SUCCESS; ++g) {
        if (acc[g] < 0) { /* cannot happen: every query segment sees its own diagonal at step 0 */
            failf(r, FLASHCL_ERR_INVALID_VARIANT, "query segment %d saw no key at any step", g);
            break;
        }
        const flashcl_tensor from = packed(ost[g], (size_t)acc[g] * os[g], r->seg_len[g], r->hq, r->dv);
        const flashcl_tensor to = rows_of(o, r->n, r->hq, r->dv, r->seg_row0[g]);
        copy_view(r, &from, &to, r->hq, r->seg_len[g], r->dv, zeros, r->dt,
                  "o (written by a one-state merge)"); /* rounded once to storage */
        if (lse) {
            float *seg = lse_seg; /* b*hq*len floats */
            read_floats(r, lst[g], (size_t)acc[g] * ls[g], ls[g], seg);
            for (size_t bh = 0; bh < r->b * r->hq && r->st == FLASHCL_SUCCESS; ++bh)
                memcpy(lse_host + bh * r->n + r->seg_row0[g], seg + bh * r->seg_len[g], r->seg_len[g] * sizeof(float));
        }
    }
    if (lse) write_floats(r, lse, lse_offset, r->b * r->hq * r->n, lse_host);
    if (r->last) wait_device(r, NULL, 0);

    for (int g = 0; g < 2; ++g) release(ost[g]), release(lst[g]);
    release(kv[0]), release(kv[1]), release(zeros), release(ostep), release(lse_tmp);
    free(host[0]), free(host[1]), free(lse_host), free(lse_seg), free(ostep_f), free(ostep_h);
    return finish(r);
}

/* dst[rows r0.., packed [b, total, h, d]] += src (packed [b, n, h, d]) */
static void add_rows(float *dst, size_t total, size_t r0, const float *src, size_t n, size_t b, size_t hd) {
    for (size_t i = 0; i < b; ++i)
        for (size_t j = 0; j < n * hd; ++j) dst[(i * total + r0) * hd + j] += src[i * n * hd + j];
}

flashcl_status flashcl_ring_backward(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                     const flashcl_ring_desc *opt, const flashcl_tensor *q, const flashcl_tensor *k,
                                     const flashcl_tensor *v, const flashcl_tensor *o, const flashcl_tensor *dout,
                                     cl_mem lse, size_t lse_offset, const flashcl_tensor *dq, const flashcl_tensor *dk,
                                     const flashcl_tensor *dv, MPI_Comm comm) {
    ring rr, *r = &rr;
    setup(r, ctx, desc, opt,
          !q      ? "q"
          : !k    ? "k"
          : !v    ? "v"
          : !o    ? "o"
          : !dout ? "dout"
          : !lse  ? "lse"
          : !dq   ? "dq"
          : !dk   ? "dk"
          : !dv   ? "dv"
                  : NULL,
          comm);
    if (r->st != FLASHCL_SUCCESS) return finish(r);

    const size_t kv_n = r->kv_elems, dq_n = r->b * r->n * r->hq * r->dk, lse_n = r->b * r->hq * r->n;
    /* host: K/V double buffer, dK/dV double buffer (they travel), the step's dK/dV sum, dQ, scratch */
    void *host[2] = {malloc(kv_n * r->es), malloc(kv_n * r->es)}; /* K/V in the storage type */
    float *dacc[2] = {calloc(kv_n, sizeof(float)), calloc(kv_n, sizeof(float))};
    float *contrib = malloc(kv_n * sizeof(float)), *dq_host = calloc(dq_n, sizeof(float));
    const size_t tmp_n = kv_n > dq_n ? kv_n : dq_n; /* >= lse_n, since dq_n = lse_n * dk */
    float *tmp = malloc(tmp_n * sizeof(float)), *lse_host = malloc(lse_n * sizeof(float));
    /* 16-bit storage: each call's gradients come back in the storage type (read through tmp16)
       and are summed in float32 here; the sums are rounded once, into the caller's views. */
    uint16_t *tmp16 = malloc(tmp_n * sizeof(uint16_t));
    if (!host[0] || !host[1] || !dacc[0] || !dacc[1] || !contrib || !dq_host || !tmp || !lse_host || !tmp16)
        failf(r, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "host memory for the backward's K/V, dK/dV and dQ buffers");
    cl_mem kv[2] = {make_storage(r, kv_n), make_storage(r, kv_n)};
    cl_mem zeros = zeros_buffer(r, lse_n), dq_dev = make_buffer(r, dq_n), dkv_dev = make_buffer(r, kv_n);
    cl_mem lse_seg[2] = {NULL, NULL}, lse_tmp = r->d.window ? make_buffer(r, lse_n) : NULL;
    /* The global LSE of each query segment, contiguous [b, hq, len] as flashcl_backward reads it. */
    read_floats(r, lse, lse_offset, lse_n, lse_host);
    for (int g = 0; g < r->nseg; ++g) {
        const size_t len = r->seg_len[g];
        lse_seg[g] = make_buffer(r, r->b * r->hq * len);
        for (size_t bh = 0; bh < r->b * r->hq && r->st == FLASHCL_SUCCESS; ++bh)
            memcpy(tmp + bh * len, lse_host + bh * r->n + r->seg_row0[g], len * sizeof(float));
        write_floats(r, lse_seg[g], 0, r->b * r->hq * len, tmp);
    }
    stage_own_kv(r, k, v, kv[0], zeros, host[0]);

    MPI_Request dreqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    for (int s = 0; s < r->size; ++s) {
        const int src = (r->rank - s + r->size) % r->size, cur = s % 2;
        MPI_Request reqs[4] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        if (s + 1 < r->size) {
            exchange(r, host[cur], host[1 - cur], kv_n, r->kv_type, 2 * s, reqs);
            r->stage = (ring_stage){&reqs[0], kv[1 - cur], host[1 - cur], kv_n * r->es, NULL};
        }
        reqs[2] = dreqs[0], reqs[3] = dreqs[1]; /* the dK/dV of this step's chunk, still arriving */
        const double t0 = now();
        if (r->st == FLASHCL_SUCCESS) memset(contrib, 0, kv_n * sizeof(float));
        for (int g = 0; g < r->nseg && r->st == FLASHCL_SUCCESS; ++g) {
            ring_run runs[2];
            const int nruns = plan_runs(r, src, g, runs);
            const size_t len = r->seg_len[g];
            for (int i = 0; i < nruns && r->st == FLASHCL_SUCCESS; ++i) {
                /* The forward's sub-views (a window's call may take some rows of the segment and
                   some keys of the chunk): rows and keys outside them get nothing from this call. */
                const ring_run *u = &runs[i];
                const size_t rows = u->qn, row0 = r->seg_row0[g] + u->q0, k0 = u->k0, kn = u->kn;
                const int part = rows < len;
                flashcl_attention_desc sd = r->d;
                sd.seqlen_q = rows;
                sd.seqlen_k = kn;
                sd.causal = u->causal;
                sd.window = u->window, sd.window_left = u->wl, sd.window_right = u->wr;
                const flashcl_tensor qs = rows_of(q, r->n, r->hq, r->dk, row0);
                const flashcl_tensor os = rows_of(o, r->n, r->hq, r->dv, row0);
                const flashcl_tensor dos = rows_of(dout, r->n, r->hq, r->dv, row0);
                const flashcl_tensor ks = packed(kv[cur], k0 * r->hkv * r->dk, r->n, r->hkv, r->dk);
                const flashcl_tensor vs = packed(kv[cur], r->k_elems + k0 * r->hkv * r->dv, r->n, r->hkv, r->dv);
                /* The step's gradients, packed: dq [b, rows, hq, dk]; dk [b, kn, hkv, dk]; dv after dk. */
                const flashcl_tensor dqs = packed(dq_dev, 0, rows, r->hq, r->dk);
                const size_t dk_n = r->b * kn * r->hkv * r->dk, dv_n = r->b * kn * r->hkv * r->dv;
                const flashcl_tensor dks = packed(dkv_dev, 0, kn, r->hkv, r->dk);
                const flashcl_tensor dvs = packed(dkv_dev, dk_n, kn, r->hkv, r->dv);
                /* The LSE of those rows, [b, hq, rows] as flashcl_backward reads it. */
                if (part) copy_runs(r, lse_seg[g], u->q0, len, lse_tmp, 0, rows, rows, r->b * r->hq);
                cl_event ev = NULL;
                /* D = rowsum(dO o O) from the global O and P from the global LSE: each step's
                   dS = P (dP - D) is then exactly the global one restricted to these keys. */
                flashcl_status st = r->st;
                if (st == FLASHCL_SUCCESS)
                    st = flashcl_backward(ctx, &sd, &qs, &ks, &vs, &os, &dos, part ? lse_tmp : lse_seg[g], 0, &dqs,
                                          &dks, &dvs, nwait(r), waitl(r), &ev);
                if (st != FLASHCL_SUCCESS) {
                    fail_core_at_step(r, st, "flashcl_backward", s);
                    break;
                }
                chain(r, ev);
                wait_device(r, reqs, 4);
                read_as_float(r, dq_dev, r->b * rows * r->hq * r->dk, tmp, tmp16);
                if (r->st != FLASHCL_SUCCESS) break;
                add_rows(dq_host, r->n, row0, tmp, rows, r->b, r->hq * r->dk);
                read_as_float(r, dkv_dev, dk_n + dv_n, tmp, tmp16);
                if (r->st != FLASHCL_SUCCESS) break;
                add_rows(contrib, r->n, k0, tmp, kn, r->b, r->hkv * r->dk);
                add_rows(contrib + r->k_elems, r->n, k0, tmp + dk_n, kn, r->b, r->hkv * r->dv);
            }
        }
        const double t1 = now();
        wait_all(r, reqs, 4); /* this step's K/V for the next, and the dK/dV of the chunk we hold */
        const double t2 = now();
        if (r->st == FLASHCL_SUCCESS)
            for (size_t i = 0; i < kv_n; ++i) dacc[cur][i] += contrib[i];
        /* The accumulator travels on with its chunk; after step P-1 this send takes it home. */
        exchange(r, dacc[cur], dacc[1 - cur], kv_n, MPI_FLOAT, 2 * s + 1, dreqs);
        const double t3 = now();
        stage_finish(r);
        record(r, s, t1 - t0, t2 - t1, now() - t3);
    }
    wait_all(r, dreqs, 2);
    const float *home = dacc[r->size % 2];

    /* dq, dk, dv into the caller's views. */
    write_floats(r, dq_dev, 0, dq_n, dq_host);
    const flashcl_tensor dqp = packed(dq_dev, 0, r->n, r->hq, r->dk), dqu = rows_of(dq, r->n, r->hq, r->dk, 0);
    copy_view(r, &dqp, &dqu, r->hq, r->n, r->dk, zeros, r->dt, "dq (written by a one-state merge)");
    write_floats(r, dkv_dev, 0, kv_n, home);
    const flashcl_tensor dkp = packed(dkv_dev, 0, r->n, r->hkv, r->dk), dku = rows_of(dk, r->n, r->hkv, r->dk, 0);
    const flashcl_tensor dvp = packed(dkv_dev, r->k_elems, r->n, r->hkv, r->dv),
                         dvu = rows_of(dv, r->n, r->hkv, r->dv, 0);
    copy_view(r, &dkp, &dku, r->hkv, r->n, r->dk, zeros, r->dt, "dk (written by a one-state merge)");
    copy_view(r, &dvp, &dvu, r->hkv, r->n, r->dv, zeros, r->dt, "dv (written by a one-state merge)");
    if (r->last) wait_device(r, NULL, 0);

    for (int g = 0; g < 2; ++g) release(lse_seg[g]);
    release(kv[0]), release(kv[1]), release(zeros), release(dq_dev), release(dkv_dev), release(lse_tmp);
    free(host[0]), free(host[1]), free(dacc[0]), free(dacc[1]), free(contrib), free(dq_host), free(tmp);
    free(lse_host), free(tmp16);
    return finish(r);
}
