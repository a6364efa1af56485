/*
 * Soak (issue 20): one long-lived context runs thousands of calls with
 * changing shapes, storage types, variants and entry points, with OpenCL
 * failures injected along the way (cl_shim.c, LD_PRELOAD), and shows that
 *  - host memory (RSS), live OpenCL objects (the shim's counts), the
 *    context's scratch and the program cache (live cl_programs, files in
 *    FLASHCL_CACHE_DIR) stay flat once a warm-up has built every kernel
 *    variant and reached the largest shape;
 *  - sampled calls match the double-precision reference (variant_problem.h's
 *    tolerances), and the call after an injected failure succeeds and matches;
 *  - several threads, each with its own context, running the same calls
 *    without faults, produce bitwise the outputs of a single-threaded run.
 * Variant sets are kept to three profiles and decode shapes to packed query
 * rows >= 8 (one decode variant per profile), so a cold cache builds 17
 * programs (about 40 s on POCL with its own cache cold) and the steady state none.
 *   test_soak [--seconds S] [--calls N] [--threads T] [--thread-calls M]
 *             [--seed X] [--verify-every K] [--rss-slack-mib M]
 * After the warm-up, the random mix runs for S seconds or N calls, whichever
 * comes first (0 = no limit).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cl_shim.h"
#include "storage_types.h"
#include "tmpdir.h"
#include "variant_compare.h"
#include "variant_problem.h"

/* ------------------------------------------------------------ the mix */

typedef enum call_kind { K_FWD, K_STD, K_BWD, K_DECODE, K_KVCACHE, K_MERGE, K_KINDS } call_kind;
static const char *const k_kind_names[K_KINDS] = {"forward", "standard", "backward", "decode", "kvcache", "merge"};

/* A kernel variant set: what goes into the build options (causal, window and GQA do not). */
typedef struct profile {
    flashcl_dtype dtype;
    size_t head_dim;
    float softcap;
    int alibi, sinks;
    /* Windows are drawn only in the profiles that build variant kernels anyway (a window is a
       run-time argument of every family, but it keeps the plain profile's calls plain). */
    int windows;
} profile;

static const profile k_profiles[] = {
    {FLASHCL_DTYPE_F32, 32, 0.0f, 0, 0, 0},   /* the CPU family's kernels, and the standard path's */
    {FLASHCL_DTYPE_F16, 32, 30.0f, 1, 0, 1},  /* softcap, ALiBi slopes [h] */
    {FLASHCL_DTYPE_BF16, 64, 20.0f, 2, 1, 1}, /* softcap, ALiBi slopes [b, h], sinks */
};
#define PROFILES (sizeof k_profiles / sizeof k_profiles[0])

/* Largest sizes the mix draws; the warm-up runs each call kind at them so scratch peaks there. */
#define MAX_BATCH 2
#define MAX_HKV 2
#define MAX_GROUP 4
#define MAX_SQ 40
#define MAX_SK 64
#define MAX_DECODE_SK 96
#define MAX_MERGE_STATES 4
#define MAX_MERGE_ROWS 16

typedef struct call_spec {
    call_kind kind;
    size_t profile;
    vc_case c;         /* sizes and variants (merge: batch, heads_q, seqlen_q, head_dim, dtype) */
    size_t page_size;  /* kvcache */
    size_t num_states; /* merge */
    uint64_t seed;     /* the inputs */
} call_spec;

static size_t pick(tu_rng *r, size_t lo, size_t hi) { return lo + (size_t)(tu_rng_next(r) % (hi - lo + 1)); }

/* Sizes and the runtime variants (causal, window, GQA, scale) of one call. */
static void draw_shape(tu_rng *r, call_spec *s, int largest) {
    flashcl_attention_desc *d = &s->c.desc;
    const size_t groups[] = {1, 2, 4};
    size_t group = largest ? MAX_GROUP : groups[pick(r, 0, 2)];
    d->batch = largest ? MAX_BATCH : pick(r, 1, MAX_BATCH);
    d->heads_kv = largest ? MAX_HKV : pick(r, 1, MAX_HKV);
    d->heads_q = d->heads_kv * group;
    if (s->kind == K_DECODE || s->kind == K_KVCACHE) {
        /* Packed rows (query rows x group) >= 8: the decode family's one row shape on a CPU (ROWS=8);
           a GPU may take 16 rows at 16 packed rows and more, so the warm-up (largest = 4) runs 8 too. */
        const size_t fewest = (8 + group - 1) / group;
        d->seqlen_q = largest == 4 ? fewest : largest ? 16 : pick(r, fewest, 16);
        d->seqlen_k = largest ? MAX_DECODE_SK : pick(r, 1, MAX_DECODE_SK);
    } else {
        /* > 16 rows: flashcl_forward's short queries go to the decode family (the kind above). */
        d->seqlen_q = largest ? MAX_SQ : pick(r, 17, MAX_SQ);
        d->seqlen_k = largest ? MAX_SK : pick(r, 1, MAX_SK);
    }
    d->causal = !largest && pick(r, 0, 1);
    if (largest == 2) { /* the largest call once more with a window (a non-plain descriptor) */
        d->causal = 1, d->window = 1, d->window_left = 4, d->window_right = 0;
    } else if (largest == 3) { /* and causal alone: plans (tuned tiles) are kept per causal flag */
        d->causal = 1;
    } else if (k_profiles[s->profile].windows && !largest && pick(r, 0, 3) == 0) {
        d->window = 1;
        d->window_left = pick(r, 0, 2) == 0 ? -1 : (int)pick(r, 0, 16);
        d->window_right = d->causal ? 0 : pick(r, 0, 2) == 0 ? -1 : (int)pick(r, 0, 8);
    }
    if (pick(r, 0, 3) == 0) d->scale = tu_rng_float(r, 0.05f, 0.5f);
}

static void draw_spec(uint64_t seed, call_kind forced, size_t forced_profile, int largest, call_spec *s) {
    memset(s, 0, sizeof *s);
    tu_rng r = tu_rng_seed(seed * 0x9e3779b97f4a7c15ull + 1);
    s->seed = tu_rng_next(&r);
    if (forced < K_KINDS) {
        s->kind = forced;
        s->profile = forced_profile;
    } else {
        s->kind = (call_kind)pick(&r, 0, K_KINDS - 1);
        s->profile = s->kind == K_STD ? 0 : pick(&r, 0, PROFILES - 1); /* the standard path: plain float32 */
    }
    const profile *p = &k_profiles[s->profile];
    vc_case *c = &s->c;
    c->desc = flashcl_attention_desc_init();
    c->desc.dtype = p->dtype;
    c->desc.head_dim = p->head_dim;
    c->desc.softcap = p->softcap;
    c->alibi = p->alibi;
    c->sinks = p->sinks;
    c->desc.path = s->kind == K_STD ? FLASHCL_PATH_STANDARD : FLASHCL_PATH_FLASH;
    c->backward = s->kind == K_BWD;
    snprintf(c->name, sizeof c->name, "%s", k_kind_names[s->kind]);
    draw_shape(&r, s, largest);
    const size_t pages[] = {1, 5, 16};
    s->page_size = largest ? 1 : pages[pick(&r, 0, 2)];
    s->num_states = largest ? MAX_MERGE_STATES : pick(&r, 2, MAX_MERGE_STATES);
    if (s->kind == K_MERGE) c->desc.seqlen_q = largest ? MAX_MERGE_ROWS : pick(&r, 1, MAX_MERGE_ROWS);
}

static void describe(const call_spec *s, char *buf, size_t cap) {
    const flashcl_attention_desc *d = &s->c.desc;
    snprintf(buf, cap, "%s %s d=%zu%s%s%s b=%zu hq=%zu hkv=%zu sq=%zu sk=%zu causal=%d window=%d(%d,%d) page=%zu",
             k_kind_names[s->kind], st_name(d->dtype), d->head_dim, d->softcap > 0 ? " softcap" : "",
             s->c.alibi ? " alibi" : "", s->c.sinks ? " sinks" : "", d->batch, d->heads_q, d->heads_kv, d->seqlen_q,
             d->seqlen_k, d->causal, d->window, d->window_left, d->window_right, s->page_size);
}

/* ------------------------------------------------------------ helpers */

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    REQUIRE(p != NULL);
    return p;
}

static cl_mem storage_buffer(cl_context cl, flashcl_dtype dtype, const float *x, size_t n) {
    size_t es = flashcl_dtype_size(dtype);
    void *raw = xcalloc(n, es);
    flashcl__to_storage(dtype, x, raw, n);
    cl_int err = CL_SUCCESS;
    cl_mem buf = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * es, raw, &err);
    REQUIRE_CL(err);
    free(raw);
    return buf;
}

/* FNV-1a of a buffer's bytes: the thread check compares outputs bit for bit through it. */
static uint64_t digest_buffer(uint64_t h, cl_command_queue queue, cl_mem buf) {
    size_t bytes = 0;
    REQUIRE_CL(clGetMemObjectInfo(buf, CL_MEM_SIZE, sizeof bytes, &bytes, NULL));
    unsigned char *raw = xcalloc(bytes, 1);
    REQUIRE_CL(clEnqueueReadBuffer(queue, buf, CL_TRUE, 0, bytes, raw, 0, NULL, NULL));
    for (size_t i = 0; i < bytes; ++i) h = (h ^ raw[i]) * 0x100000001b3ull;
    free(raw);
    return h;
}

/* ------------------------------------------------------------ KV cache */

/* Paged pools holding the problem's K and V, its pages shuffled in the pool plus one spare page. */
typedef struct kv_pools {
    cl_mem k, v;
    int32_t *table, *seqlens;
    flashcl_kv_cache cache;
} kv_pools;

static void scatter_rows(const vp_problem *p, const float *src, size_t dim, const int32_t *table, size_t max_pages,
                         size_t ps, float *pool) {
    const flashcl_attention_desc *d = &p->desc;
    for (size_t b = 0; b < d->batch; ++b)
        for (size_t j = 0; j < d->seqlen_k; ++j) {
            size_t page = (size_t)table[b * max_pages + j / ps];
            memcpy(pool + ((page * ps + j % ps) * d->heads_kv) * dim, src + ((b * d->seqlen_k + j) * d->heads_kv) * dim,
                   d->heads_kv * dim * sizeof(float));
        }
}

static void kv_pools_init(kv_pools *kp, cl_context cl, const vp_problem *p, size_t ps, tu_rng *rng) {
    const flashcl_attention_desc *d = &p->desc;
    size_t max_pages = (d->seqlen_k + ps - 1) / ps, num_pages = d->batch * max_pages + 1;
    size_t *perm = xcalloc(num_pages, sizeof *perm);
    for (size_t i = 0; i < num_pages; ++i) perm[i] = i;
    for (size_t i = num_pages - 1; i > 0; --i) {
        size_t j = pick(rng, 0, i), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    kp->table = xcalloc(d->batch * max_pages, sizeof *kp->table);
    kp->seqlens = xcalloc(d->batch, sizeof *kp->seqlens);
    for (size_t i = 0; i < d->batch * max_pages; ++i) kp->table[i] = (int32_t)perm[i];
    for (size_t b = 0; b < d->batch; ++b) kp->seqlens[b] = (int32_t)d->seqlen_k;
    free(perm);
    size_t dk = d->head_dim, dv = d->head_dim_v, rows = num_pages * ps * d->heads_kv;
    /* Rows past each sequence's length hold finite noise: the call must not read them. */
    float *kpool = xcalloc(rows * dk, sizeof(float)), *vpool = xcalloc(rows * dv, sizeof(float));
    for (size_t i = 0; i < rows * dk; ++i) kpool[i] = st_round(d->dtype, tu_rng_float(rng, -8.0f, 8.0f));
    for (size_t i = 0; i < rows * dv; ++i) vpool[i] = st_round(d->dtype, tu_rng_float(rng, -8.0f, 8.0f));
    scatter_rows(p, p->k, dk, kp->table, max_pages, ps, kpool);
    scatter_rows(p, p->v, dv, kp->table, max_pages, ps, vpool);
    kp->k = storage_buffer(cl, d->dtype, kpool, rows * dk);
    kp->v = storage_buffer(cl, d->dtype, vpool, rows * dv);
    free(kpool);
    free(vpool);
    flashcl_kv_cache *c = &kp->cache;
    *c = flashcl_kv_cache_init();
    c->k = (flashcl_tensor){kp->k, 0, ps * d->heads_kv * dk, dk, d->heads_kv * dk};
    c->v = (flashcl_tensor){kp->v, 0, ps * d->heads_kv * dv, dv, d->heads_kv * dv};
    c->num_pages = num_pages, c->page_size = ps;
    c->block_table = kp->table, c->max_pages = max_pages;
    c->cache_seqlens = kp->seqlens;
}

static void kv_pools_free(kv_pools *kp) {
    clReleaseMemObject(kp->k);
    clReleaseMemObject(kp->v);
    free(kp->table);
    free(kp->seqlens);
}

/* ---------------------------------------------------------- merge states */

typedef struct merge_run {
    flashcl_merge_desc m;
    size_t n_o, n_lse; /* elements of one state's O and LSE */
    float *o_states, *lse_states;
    cl_mem o_states_buf, lse_states_buf, o_buf, lse_buf;
} merge_run;

static void merge_init(merge_run *mr, cl_context cl, const call_spec *s, tu_rng *rng) {
    const flashcl_attention_desc *d = &s->c.desc;
    flashcl_merge_desc *m = &mr->m;
    *m = flashcl_merge_desc_init();
    m->num_states = s->num_states, m->batch = d->batch, m->heads = d->heads_q, m->seqlen = d->seqlen_q;
    m->head_dim = d->head_dim, m->dtype = d->dtype;
    mr->n_lse = m->batch * m->heads * m->seqlen, mr->n_o = mr->n_lse * m->head_dim;
    mr->o_states = xcalloc(mr->n_o * m->num_states, sizeof(float));
    mr->lse_states = xcalloc(mr->n_lse * m->num_states, sizeof(float));
    for (size_t i = 0; i < mr->n_o * m->num_states; ++i) mr->o_states[i] = tu_rng_float(rng, -1.0f, 1.0f);
    for (size_t i = 0; i < mr->n_lse * m->num_states; ++i)
        mr->lse_states[i] = pick(rng, 0, 5) == 0 ? -INFINITY : tu_rng_float(rng, -4.0f, 4.0f);
    /* Row 0 sees no key in any state: O = 0 and LSE = -inf, never NaN. */
    for (size_t st = 0; st < m->num_states; ++st) mr->lse_states[st * mr->n_lse] = -INFINITY;
    mr->o_states_buf = storage_buffer(cl, FLASHCL_DTYPE_F32, mr->o_states, mr->n_o * m->num_states);
    mr->lse_states_buf = storage_buffer(cl, FLASHCL_DTYPE_F32, mr->lse_states, mr->n_lse * m->num_states);
    float *nan = xcalloc(mr->n_o, sizeof(float));
    for (size_t i = 0; i < mr->n_o; ++i) nan[i] = NAN;
    mr->o_buf = storage_buffer(cl, m->dtype, nan, mr->n_o);
    mr->lse_buf = storage_buffer(cl, FLASHCL_DTYPE_F32, nan, mr->n_lse);
    free(nan);
}

static flashcl_status merge_call(flashcl_context *ctx, merge_run *mr) {
    const flashcl_merge_desc *m = &mr->m;
    flashcl_tensor os = flashcl_tensor_bshd(mr->o_states_buf, m->seqlen, m->heads, m->head_dim);
    flashcl_tensor o = flashcl_tensor_bshd(mr->o_buf, m->seqlen, m->heads, m->head_dim);
    return flashcl_merge_states(ctx, m, &os, mr->lse_states_buf, 0, &o, mr->lse_buf, 0, 0, NULL, NULL);
}

/* The merge from its definition in double: lse = log sum exp(lse_i), O = sum exp(lse_i - lse) O_i. */
static void merge_reference(const merge_run *mr, double *o, double *lse) {
    const flashcl_merge_desc *m = &mr->m;
    for (size_t b = 0; b < m->batch; ++b)
        for (size_t h = 0; h < m->heads; ++h)
            for (size_t r = 0; r < m->seqlen; ++r) {
                size_t li = (b * m->heads + h) * m->seqlen + r, oi = ((b * m->seqlen + r) * m->heads + h) * m->head_dim;
                double mx = -INFINITY, sum = 0.0;
                for (size_t st = 0; st < m->num_states; ++st) mx = fmax(mx, mr->lse_states[st * mr->n_lse + li]);
                for (size_t st = 0; mx > -INFINITY && st < m->num_states; ++st)
                    sum += exp(mr->lse_states[st * mr->n_lse + li] - mx);
                lse[li] = mx > -INFINITY ? mx + log(sum) : -INFINITY;
                for (size_t c = 0; c < m->head_dim; ++c) {
                    double acc = 0.0;
                    for (size_t st = 0; mx > -INFINITY && st < m->num_states; ++st)
                        acc += exp(mr->lse_states[st * mr->n_lse + li] - lse[li]) * mr->o_states[st * mr->n_o + oi + c];
                    o[oi + c] = acc;
                }
            }
}

static int merge_check(const merge_run *mr, cl_command_queue queue, const char *label) {
    flashcl_dtype dt = mr->m.dtype;
    size_t es = flashcl_dtype_size(dt);
    void *raw = xcalloc(mr->n_o, es);
    float *o = xcalloc(mr->n_o, sizeof(float)), *lse = xcalloc(mr->n_lse, sizeof(float));
    REQUIRE_CL(clEnqueueReadBuffer(queue, mr->o_buf, CL_TRUE, 0, mr->n_o * es, raw, 0, NULL, NULL));
    REQUIRE_CL(clEnqueueReadBuffer(queue, mr->lse_buf, CL_TRUE, 0, mr->n_lse * sizeof(float), lse, 0, NULL, NULL));
    flashcl__from_storage(dt, raw, o, mr->n_o);
    double *ref_o = xcalloc(mr->n_o, sizeof(double)), *ref_lse = xcalloc(mr->n_lse, sizeof(double));
    merge_reference(mr, ref_o, ref_lse);
    /* O: float32's tolerance plus the rounding of the merged O to its storage type. */
    int ok = vcmp_elementwise(label, "merged O", o, ref_o, mr->n_o, 2e-5, 1e-4 + st_epsilon(dt));
    ok &= vcmp_elementwise(label, "merged LSE", lse, ref_lse, mr->n_lse, 1e-5, 1e-5);
    free(raw), free(o), free(lse), free(ref_o), free(ref_lse);
    return ok;
}

static void merge_free(merge_run *mr) {
    cl_mem all[] = {mr->o_states_buf, mr->lse_states_buf, mr->o_buf, mr->lse_buf};
    for (size_t i = 0; i < 4; ++i) clReleaseMemObject(all[i]);
    free(mr->o_states);
    free(mr->lse_states);
}

/* ------------------------------------------------------------ one call */

/* What the soak arms before a call: fail occurrence `index` of `name` (NULL: nothing armed). */
typedef struct fault {
    const char *name;
    long index;
} fault;

typedef struct call_result {
    flashcl_status status;
    int fired;    /* the armed fault fired */
    int verified; /* checked against the reference */
    int ok;       /* the check passed (1 when not checked) */
    uint64_t digest;
    char message[512];
} call_result;

static cl_shim_api shim;
static int shim_loaded;

static void arm(const fault *f) {
    if (shim_loaded && f && f->name) shim.set_fault(f->name, f->index, CL_OUT_OF_RESOURCES);
}

static int disarm(const fault *f) {
    if (!shim_loaded || !f || !f->name) return 0;
    shim.set_fault(NULL, 0, 0);
    return shim.fault_fired();
}

/* The library call(s) of the spec's kind on a prepared problem; faults are armed around the measured call only. */
static flashcl_status invoke(flashcl_context *ctx, const call_spec *s, vp_problem *p, kv_pools *kp, merge_run *mr,
                             const fault *f, int *fired) {
    flashcl_status st = FLASHCL_SUCCESS;
    if (s->kind == K_BWD) {
        st = vp_forward(ctx, p, NULL); /* the backward's inputs: not what is being failed */
        if (st != FLASHCL_SUCCESS) return st;
    }
    arm(f);
    switch (s->kind) {
    case K_BWD:
        st = vp_backward(ctx, p, 0, NULL, NULL);
        break;
    case K_KVCACHE:
        st = flashcl_forward_kvcache(ctx, &p->desc, &p->qv, &kp->cache, &p->ov, p->lse_buf, 0, 0, NULL, NULL);
        break;
    case K_MERGE:
        st = merge_call(ctx, mr);
        break;
    default:
        st = vp_forward(ctx, p, NULL);
        break;
    }
    *fired = disarm(f);
    return st;
}

static uint64_t digest_outputs(const call_spec *s, const vp_problem *p, const merge_run *mr, cl_command_queue q) {
    uint64_t h = 0xcbf29ce484222325ull;
    if (s->kind == K_MERGE) return digest_buffer(digest_buffer(h, q, mr->o_buf), q, mr->lse_buf);
    h = digest_buffer(digest_buffer(h, q, p->o_buf), q, p->lse_buf);
    if (s->kind == K_BWD) {
        h = digest_buffer(digest_buffer(digest_buffer(h, q, p->dq_buf), q, p->dk_buf), q, p->dv_buf);
        if (p->dsinks_buf) h = digest_buffer(h, q, p->dsinks_buf);
    }
    return h;
}

static int verify(const call_spec *s, vp_problem *p, const merge_run *mr, cl_command_queue q, const char *label) {
    if (s->kind == K_MERGE) return merge_check(mr, q, label);
    if (s->kind == K_BWD) return vp_check_forward(p, q, NULL, label) & vp_check_backward(p, q, NULL, label);
    return vp_check_forward(p, q, NULL, label);
}

/* Runs one call on ctx: set-up, the call (fault armed around it), digest, optional check, clean-up. */
static void run_call(flashcl_context *ctx, const call_spec *s, const fault *f, int check, call_result *out) {
    memset(out, 0, sizeof *out);
    out->ok = 1;
    cl_context cl = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    tu_rng rng = tu_rng_seed(s->seed);
    vp_problem p;
    kv_pools kp;
    merge_run mr;
    memset(&p, 0, sizeof p);
    if (s->kind == K_MERGE)
        merge_init(&mr, cl, s, &rng);
    else
        vp_init(&p, cl, &s->c, s->seed);
    if (s->kind == K_KVCACHE) kv_pools_init(&kp, cl, &p, s->page_size, &rng);
    out->status = invoke(ctx, s, &p, &kp, &mr, f, &out->fired);
    if (out->status != FLASHCL_SUCCESS) snprintf(out->message, sizeof out->message, "%s", flashcl_last_error(ctx));
    REQUIRE_CL(clFinish(queue));
    if (out->status == FLASHCL_SUCCESS) {
        out->digest = digest_outputs(s, &p, &mr, queue);
        if (check) {
            char label[300];
            describe(s, label, sizeof label);
            out->verified = 1;
            out->ok = verify(s, &p, &mr, queue, label);
        }
    }
    if (s->kind == K_KVCACHE) kv_pools_free(&kp);
    if (s->kind == K_MERGE)
        merge_free(&mr);
    else
        vp_free(&p);
}

/* ------------------------------------------------------------ samples */

typedef struct sample {
    double seconds;
    long calls;
    long rss_kib;
    long live[CL_SHIM_TYPES];
    size_t scratch;
    size_t cache_files;
} sample;

static long rss_kib(void) {
    long pages_total = 0, pages_resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    int n = fscanf(f, "%ld %ld", &pages_total, &pages_resident);
    fclose(f);
    return n == 2 ? pages_resident * (sysconf(_SC_PAGESIZE) / 1024) : -1;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double g_start;

static void take_sample(flashcl_context *ctx, long calls, sample *s) {
    s->seconds = now_seconds() - g_start;
    s->calls = calls;
    s->rss_kib = rss_kib();
    for (int t = 0; t < CL_SHIM_TYPES; ++t) s->live[t] = shim_loaded ? shim.live(t) : 0;
    s->scratch = flashcl_context_scratch_bytes(ctx);
    const char *dir = flashcl_context_cache_dir(ctx);
    s->cache_files = dir[0] ? tu_tmpdir_files(dir, NULL, NULL) : 0;
}

static void print_sample(const char *what, const sample *s) {
    printf("%-9s %7.1f s %6ld calls  RSS %6ld KiB  live ctx=%ld queue=%ld mem=%ld program=%ld kernel=%ld event=%ld  "
           "scratch %zu B  cache files %zu\n",
           what, s->seconds, s->calls, s->rss_kib, s->live[0], s->live[1], s->live[2], s->live[3], s->live[4],
           s->live[5], s->scratch, s->cache_files);
}

static void max_sample(sample *acc, const sample *s) {
    if (s->rss_kib > acc->rss_kib) acc->rss_kib = s->rss_kib;
    for (int t = 0; t < CL_SHIM_TYPES; ++t)
        if (s->live[t] > acc->live[t]) acc->live[t] = s->live[t];
    if (s->scratch > acc->scratch) acc->scratch = s->scratch;
    if (s->cache_files > acc->cache_files) acc->cache_files = s->cache_files;
}

/* AddressSanitizer keeps freed memory in quarantine (256 MiB by default), so RSS grows under it
   by design: the RSS bound is left to plain builds (LeakSanitizer checks the heap there). */
#if defined(__SANITIZE_ADDRESS__)
static const int k_asan = 1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
static const int k_asan = 1;
#else
static const int k_asan = 0;
#endif
#else
static const int k_asan = 0;
#endif

/* After the warm-up nothing may grow: objects, scratch and cache files not at all, RSS by the slack. */
static int check_bounded(const sample *warm, const sample *s, long rss_slack_kib) {
    int ok = 1;
    for (int t = 0; t < CL_SHIM_TYPES; ++t)
        if (s->live[t] > warm->live[t]) {
            fprintf(stderr, "FAIL after %ld calls: %ld %s alive, at most %ld after the warm-up\n", s->calls, s->live[t],
                    cl_shim_type_name(t), warm->live[t]);
            ok = 0;
        }
    if (s->scratch > warm->scratch) {
        fprintf(stderr, "FAIL after %ld calls: scratch %zu B, at most %zu after the warm-up\n", s->calls, s->scratch,
                warm->scratch);
        ok = 0;
    }
    if (s->cache_files > warm->cache_files) {
        fprintf(stderr, "FAIL after %ld calls: %zu cache files, %zu after the warm-up (a variant built late)\n",
                s->calls, s->cache_files, warm->cache_files);
        ok = 0;
    }
    if (!k_asan && s->rss_kib > warm->rss_kib + rss_slack_kib) {
        fprintf(stderr, "FAIL after %ld calls: RSS %ld KiB, more than %ld after the warm-up + %ld slack\n", s->calls,
                s->rss_kib, warm->rss_kib, rss_slack_kib);
        ok = 0;
    }
    if (!ok) tu_fail_count();
    return ok;
}

/* ------------------------------------------------------------ the soak */

typedef struct options {
    double seconds;
    long calls;
    int threads, thread_calls, verify_every;
    uint64_t seed;
    long rss_slack_kib;
} options;

/* Entry points every call kind reaches, failed on one of their first occurrences. */
static const char *const k_fault_calls[] = {"clSetKernelArg", "clEnqueueNDRangeKernel", "clCreateBuffer",
                                            "clGetMemObjectInfo", "clEnqueueMarkerWithWaitList"};
#define FAULT_CALLS (sizeof k_fault_calls / sizeof k_fault_calls[0])

/* Statuses an injected CL_OUT_OF_RESOURCES may come back as (as test_faults accepts). */
static int acceptable_status(flashcl_status st) {
    return st == (flashcl_status)CL_OUT_OF_RESOURCES || st == FLASHCL_ERR_OUT_OF_DEVICE_MEMORY ||
           st == FLASHCL_ERR_INVALID_BUFFER || st == FLASHCL_ERR_INVALID_QUEUE;
}

typedef struct tally {
    long calls, verified, injected, reported, absorbed, per_kind[K_KINDS];
} tally;

static void report_call(const call_spec *s, const call_result *r, const fault *f, long index, tally *t) {
    char what[300];
    describe(s, what, sizeof what);
    t->calls++;
    t->per_kind[s->kind]++;
    t->verified += r->verified;
    if (r->fired) {
        t->injected++;
        if (r->status == FLASHCL_SUCCESS) {
            t->absorbed++;
        } else {
            t->reported++;
            if (!acceptable_status(r->status) || !strstr(r->message, "CL_OUT_OF_RESOURCES")) {
                fprintf(stderr, "FAIL call %ld (%s, %s #%ld failed): %s: \"%s\"\n", index, what, f->name, f->index,
                        flashcl_status_name(r->status), r->message);
                tu_fail_count();
            }
        }
    } else if (r->status != FLASHCL_SUCCESS) {
        fprintf(stderr, "FAIL call %ld (%s): %s: %s\n", index, what, flashcl_status_name(r->status), r->message);
        tu_fail_count();
    }
    if (!r->ok) fprintf(stderr, "  (call %ld: %s)\n", index, what);
}

/* Every call kind and profile at the largest sizes, plain, with a window and causal, and the decode
   kinds at their fewest packed rows too: builds each variant (the families keep a plan per causal
   flag, the GPU decode kernel one per row count) and peaks scratch. */
static void warm_up(flashcl_context *ctx, tally *t, sample *peak) {
    long n = 0;
    for (int k = 0; k < K_KINDS; ++k)
        for (size_t pr = 0; pr < PROFILES; ++pr)
            for (int shape = 0; shape < 4; ++shape) {
                const int windowed = shape == 1, causal = shape == 2, few_rows = shape == 3;
                if ((k == K_STD && pr != 0) || (windowed && (k == K_MERGE || !k_profiles[pr].windows)) ||
                    (causal && k == K_MERGE) || (few_rows && k != K_DECODE && k != K_KVCACHE))
                    continue;
                call_spec s;
                draw_spec(1000 + (uint64_t)n, (call_kind)k, pr, 1 + shape, &s);
                call_result r;
                run_call(ctx, &s, NULL, 1, &r);
                report_call(&s, &r, NULL, -++n, t);
                sample now;
                take_sample(ctx, t->calls, &now);
                max_sample(peak, &now);
            }
}

static void soak(flashcl_context *ctx, const options *o) {
    tally t;
    memset(&t, 0, sizeof t);
    sample first, warm, s;
    take_sample(ctx, 0, &first);
    print_sample("start", &first);
    warm = first;
    warm_up(ctx, &t, &warm);
    take_sample(ctx, t.calls, &s);
    max_sample(&warm, &s);
    print_sample("warm-up", &s);
    const double warm_seconds = s.seconds;
    tu_rng rng = tu_rng_seed(o->seed);
    int after_fault = 0, bounded = 1;
    double next_print = s.seconds + 10.0, stop = now_seconds() + o->seconds;
    for (long i = 0; (o->calls <= 0 || i < o->calls) && (o->seconds <= 0 || now_seconds() < stop); ++i) {
        call_spec spec;
        draw_spec(o->seed + (uint64_t)i, K_KINDS, 0, 0, &spec);
        fault f = {NULL, 0};
        if (shim_loaded && !after_fault && pick(&rng, 0, 7) == 0)
            f = (fault){k_fault_calls[pick(&rng, 0, FAULT_CALLS - 1)], (long)pick(&rng, 1, 3)};
        if (pick(&rng, 0, 99) == 0) flashcl_context_release_scratch(ctx); /* then it grows back on demand */
        int check = after_fault || f.name || (o->verify_every > 0 && i % o->verify_every == 0);
        call_result r;
        long built = shim_loaded ? shim.created(CL_SHIM_PROGRAM) : 0;
        run_call(ctx, &spec, &f, check, &r);
        report_call(&spec, &r, &f, i, &t);
        if (shim_loaded && shim.created(CL_SHIM_PROGRAM) > built) {
            char what[300];
            describe(&spec, what, sizeof what);
            fprintf(stderr, "FAIL call %ld (%s) created a program: a variant the warm-up did not build\n", i, what);
            tu_fail_count();
        }
        if (after_fault && (r.status != FLASHCL_SUCCESS || !r.ok)) {
            fprintf(stderr, "FAIL call %ld: the call after an injected failure did not succeed and verify\n", i);
            tu_fail_count();
        }
        after_fault = r.fired && r.status != FLASHCL_SUCCESS;
        if (i % 50 == 49) {
            take_sample(ctx, t.calls, &s);
            bounded &= check_bounded(&warm, &s, o->rss_slack_kib);
            if (s.seconds >= next_print) {
                print_sample("running", &s);
                next_print = s.seconds + 10.0;
            }
        }
    }
    take_sample(ctx, t.calls, &s);
    bounded &= check_bounded(&warm, &s, o->rss_slack_kib);
    print_sample("end", &s);
    printf("soak: %ld calls (", t.calls);
    for (int k = 0; k < K_KINDS; ++k) printf("%s%s %ld", k ? ", " : "", k_kind_names[k], t.per_kind[k]);
    printf(") in %.1f s (%.1f s after the warm-up), %ld verified; %ld failures injected: %ld reported, %ld absorbed\n",
           s.seconds, s.seconds - warm_seconds, t.verified, t.injected, t.reported, t.absorbed);
    printf("soak: RSS %ld -> %ld KiB (warm-up peak %ld, slack %ld); scratch peak %zu B; cache files %zu; "
           "resources %s\n",
           first.rss_kib, s.rss_kib, warm.rss_kib, o->rss_slack_kib, warm.scratch, s.cache_files,
           bounded ? "bounded" : "GREW");
    CHECK(t.calls > (long)PROFILES * K_KINDS);
    if (shim_loaded && t.calls > 200) CHECK(t.injected > 0);
}

/* ------------------------------------------------------------ threads */

typedef struct worker {
    uint64_t seed;
    int calls;
    uint64_t *digests;
    flashcl_status *status;
    char error[512];
} worker;

/* The same calls (by seed) in a new context; no faults and no checks (the single-threaded run checks). */
static void *worker_main(void *arg) {
    worker *w = arg;
    flashcl_context *ctx = NULL;
    if (flashcl_context_create(&ctx, NULL, w->error, sizeof w->error) != FLASHCL_SUCCESS) return NULL;
    for (int i = 0; i < w->calls; ++i) {
        call_spec spec;
        draw_spec(w->seed + (uint64_t)i, K_KINDS, 0, 0, &spec);
        call_result r;
        run_call(ctx, &spec, NULL, 0, &r);
        w->status[i] = r.status;
        w->digests[i] = r.digest;
    }
    flashcl_context_destroy(ctx);
    return NULL;
}

static void threads(const options *o) {
    if (o->threads <= 0 || o->thread_calls <= 0) return;
    double t0 = now_seconds();
    int n = o->threads, m = o->thread_calls;
    worker *single = xcalloc((size_t)n, sizeof *single), *par = xcalloc((size_t)n, sizeof *par);
    for (int t = 0; t < n; ++t) {
        uint64_t seed = o->seed * 31 + 7919 * (uint64_t)(t + 1);
        worker *ws[2] = {&single[t], &par[t]};
        for (int k = 0; k < 2; ++k) {
            ws[k]->seed = seed, ws[k]->calls = m;
            ws[k]->digests = xcalloc((size_t)m, sizeof(uint64_t));
            ws[k]->status = xcalloc((size_t)m, sizeof(flashcl_status));
        }
        worker_main(&single[t]); /* one after the other, on this thread */
    }
    pthread_t *ids = xcalloc((size_t)n, sizeof *ids);
    for (int t = 0; t < n; ++t) REQUIRE(pthread_create(&ids[t], NULL, worker_main, &par[t]) == 0);
    for (int t = 0; t < n; ++t) REQUIRE(pthread_join(ids[t], NULL) == 0);
    long same = 0;
    for (int t = 0; t < n; ++t) {
        for (int i = 0; i < m; ++i) {
            int ok = single[t].status[i] == FLASHCL_SUCCESS && par[t].status[i] == FLASHCL_SUCCESS &&
                     single[t].digests[i] == par[t].digests[i];
            if (!ok) {
                call_spec spec;
                char what[300];
                draw_spec(single[t].seed + (uint64_t)i, K_KINDS, 0, 0, &spec);
                describe(&spec, what, sizeof what);
                fprintf(stderr, "FAIL thread %d call %d (%s): %s/%s, outputs %s\n", t, i, what,
                        flashcl_status_name(single[t].status[i]), flashcl_status_name(par[t].status[i]),
                        single[t].digests[i] == par[t].digests[i] ? "equal" : "differ");
                tu_fail_count();
            }
            same += ok;
        }
        free(single[t].digests), free(single[t].status), free(par[t].digests), free(par[t].status);
    }
    printf("threads: %d threads x %d calls, each on its own context: %ld of %d outputs bitwise equal to the "
           "single-threaded run (%.1f s)\n",
           n, m, same, n * m, now_seconds() - t0);
    free(single), free(par), free(ids);
}

/* ------------------------------------------------------------ main */

static void parse(int argc, char **argv, options *o) {
    *o = (options){25.0, 0, 3, 200, 2, 20, 16 * 1024};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "--seconds") == 0)
            o->seconds = atof(v);
        else if (strcmp(k, "--calls") == 0)
            o->calls = atol(v);
        else if (strcmp(k, "--threads") == 0)
            o->threads = atoi(v);
        else if (strcmp(k, "--thread-calls") == 0)
            o->thread_calls = atoi(v);
        else if (strcmp(k, "--verify-every") == 0)
            o->verify_every = atoi(v);
        else if (strcmp(k, "--seed") == 0)
            o->seed = strtoull(v, NULL, 0);
        else if (strcmp(k, "--rss-slack-mib") == 0)
            o->rss_slack_kib = atol(v) * 1024;
        else {
            fprintf(stderr, "unknown option %s\n", k);
            exit(2);
        }
    }
    if (argc % 2 == 0) {
        fprintf(stderr, "options come in pairs: --seconds S --calls N --threads T --thread-calls M --seed X "
                        "--verify-every K --rss-slack-mib M\n");
        exit(2);
    }
}

int main(int argc, char **argv) {
    options o;
    parse(argc, argv, &o);
    vcmp_set_quiet(1); /* thousands of checks: print only failures */
    shim_loaded = cl_shim_load(&shim);
    if (!shim_loaded) printf("note: the OpenCL shim is not preloaded: no object counts, no injected failures\n");
    g_start = now_seconds();
    flashcl_context *ctx = tu_context_create(); /* skips (77) when there is no device */
    soak(ctx, &o);
    flashcl_context_destroy(ctx);
    threads(&o);
    return tu_finish("test_soak");
}
