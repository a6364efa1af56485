#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures;

void tu_check_failed(const char *file, int line, const char *expr) {
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, expr);
    g_failures++;
}

void tu_require_failed(const char *file, int line, const char *expr) {
    fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", file, line, expr);
    exit(1);
}

int tu_check_status(const char *file, int line, const char *expr, int got, int expected) {
    if (got == expected) return 1;
    fprintf(stderr, "%s:%d: CHECK failed: %s returned %d (%s), expected %d (%s)\n", file, line, expr, got,
            flashcl_status_name(got), expected, flashcl_status_name(expected));
    g_failures++;
    return 0;
}

void tu_require_cl(const char *file, int line, const char *expr, int err) {
    if (err == CL_SUCCESS) return;
    fprintf(stderr, "%s:%d: OpenCL call failed: %s -> %d\n", file, line, expr, err);
    exit(1);
}

void tu_fail_count(void) { g_failures++; }

int tu_failures(void) { return g_failures; }

int tu_finish(const char *test_name) {
    if (g_failures) {
        fprintf(stderr, "%s: %d check(s) FAILED\n", test_name, g_failures);
        return 1;
    }
    printf("%s: all checks passed\n", test_name);
    return 0;
}

/* ---------------------------------------------------------------- RNG */

tu_rng tu_rng_seed(uint64_t seed) {
    /* splitmix64 step: spreads small seeds and never yields the stuck state 0. */
    uint64_t z = seed + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    tu_rng rng = {z ? z : 1};
    return rng;
}

uint64_t tu_rng_next(tu_rng *rng) {
    uint64_t x = rng->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng->state = x;
    return x * 0x2545f4914f6cdd1dull;
}

float tu_rng_float(tu_rng *rng, float lo, float hi) {
    /* 24 random bits: every value is exactly representable as a float. */
    float unit = (float)(tu_rng_next(rng) >> 40) / 16777216.0f;
    return lo + (hi - lo) * unit;
}

/* ------------------------------------------------------------ context */

flashcl_context *tu_context_create(void) {
    flashcl_context *ctx = NULL;
    char err[512] = "";
    flashcl_status st = flashcl_context_create(&ctx, NULL, err, sizeof err);
    if (st == FLASHCL_ERR_NO_DEVICE) {
        printf("skipped: no OpenCL device (%s)\n", err);
        exit(TU_EXIT_SKIP);
    }
    if (st != FLASHCL_SUCCESS || !ctx) {
        fprintf(stderr, "flashcl_context_create failed: %s: %s\n", flashcl_status_name(st), err);
        exit(1);
    }
    return ctx;
}

/* ------------------------------------------------------------ buffers */

cl_mem tu_buffer_create(cl_context cl_ctx, size_t count, const float *init) {
    cl_int err = CL_SUCCESS;
    cl_mem_flags flags = CL_MEM_READ_WRITE | (init ? CL_MEM_COPY_HOST_PTR : 0);
    /* The cast drops const only for the API's sake: COPY_HOST_PTR never writes. */
    cl_mem buf = clCreateBuffer(cl_ctx, flags, count * sizeof(float), (void *)(uintptr_t)init, &err);
    REQUIRE_CL(err);
    return buf;
}

void tu_buffer_write(cl_command_queue queue, cl_mem buf, size_t count, const float *src) {
    REQUIRE_CL(clEnqueueWriteBuffer(queue, buf, CL_TRUE, 0, count * sizeof(float), src, 0, NULL, NULL));
}

void tu_buffer_read(cl_command_queue queue, cl_mem buf, size_t count, float *dst, cl_event after) {
    REQUIRE_CL(clEnqueueReadBuffer(queue, buf, CL_TRUE, 0, count * sizeof(float), dst, after ? 1 : 0,
                                   after ? &after : NULL, NULL));
}

size_t tu_view_extent(const flashcl_tensor *view, tu_dims dims) {
    flashcl_tensor t = ref_resolve_view(view, dims.rows, dims.heads, dims.head_dim);
    return ref_index(&t, dims.batch - 1, dims.heads - 1, dims.rows - 1, dims.head_dim - 1) + 1;
}

void tu_fill_view(float *host, const flashcl_tensor *view, tu_dims dims, tu_rng *rng, float lo, float hi) {
    flashcl_tensor t = ref_resolve_view(view, dims.rows, dims.heads, dims.head_dim);
    for (size_t b = 0; b < dims.batch; b++)
        for (size_t h = 0; h < dims.heads; h++)
            for (size_t r = 0; r < dims.rows; r++)
                for (size_t c = 0; c < dims.head_dim; c++) host[ref_index(&t, b, h, r, c)] = tu_rng_float(rng, lo, hi);
}

void tu_view_mask(unsigned char *mask, size_t count, const flashcl_tensor *view, tu_dims dims) {
    flashcl_tensor t = ref_resolve_view(view, dims.rows, dims.heads, dims.head_dim);
    for (size_t b = 0; b < dims.batch; b++)
        for (size_t h = 0; h < dims.heads; h++)
            for (size_t r = 0; r < dims.rows; r++) {
                size_t at = ref_index(&t, b, h, r, 0);
                REQUIRE(at + dims.head_dim <= count);
                memset(mask + at, 1, dims.head_dim);
            }
}

void tu_fill_sentinel(float *host, size_t count) {
    for (size_t i = 0; i < count; i++) {
        uint32_t bits = 0xffc00000u | (uint32_t)(i & 0x3fffffu);
        memcpy(&host[i], &bits, sizeof bits);
    }
}

int tu_check_untouched(const char *label, const float *got, const float *before, const unsigned char *mask,
                       size_t count) {
    size_t changed = 0, first = 0;
    for (size_t i = 0; i < count; i++) {
        if (mask && mask[i]) continue;
        if (memcmp(&got[i], &before[i], sizeof(float)) != 0) {
            if (!changed) first = i;
            changed++;
        }
    }
    if (!changed) return 1;
    uint32_t g, b;
    memcpy(&g, &got[first], sizeof g);
    memcpy(&b, &before[first], sizeof b);
    fprintf(stderr,
            "FAIL %s: %zu element(s) that must stay untouched were written; first at "
            "index %zu: 0x%08x (%g), was 0x%08x\n",
            label, changed, first, (unsigned)g, (double)got[first], (unsigned)b);
    g_failures++;
    return 0;
}

int tu_names_tensor(const char *msg, const char *t) {
    size_t n = strlen(t);
    for (const char *p = strstr(msg, t); p; p = strstr(p + 1, t)) {
        int starts = p == msg || !(p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z'));
        char after = p[n];
        if (starts && (after == '.' || after == ':' || after == ' ' || after == '\0')) return 1;
    }
    return 0;
}

/* --------------------------------------------------------- comparisons */

/* err / tol for one element; +inf for NaN or a mismatched infinity. */
static double tol_ratio(double got, double ref, double abs_tol, double rel_tol) {
    if (isnan(got) || isnan(ref)) return INFINITY;
    if (isinf(ref) || isinf(got)) return got == ref ? 0.0 : INFINITY;
    return fabs(got - ref) / (abs_tol + rel_tol * fabs(ref));
}

int tu_compare_o(const char *label, const ref_problem *p, const float *got, const flashcl_tensor *o_view,
                 const double *ref) {
    flashcl_tensor t = ref_resolve_view(o_view, p->seqlen_q, p->heads_q, p->head_dim);
    double worst = -1.0;
    size_t wb = 0, wh = 0, wi = 0, wc = 0, bad = 0;
    for (size_t b = 0; b < p->batch; b++)
        for (size_t h = 0; h < p->heads_q; h++)
            for (size_t i = 0; i < p->seqlen_q; i++)
                for (size_t c = 0; c < p->head_dim; c++) {
                    size_t row = (b * p->heads_q + h) * p->seqlen_q + i;
                    double r = tol_ratio(got[ref_index(&t, b, h, i, c)], ref[row * p->head_dim + c], 2e-5, 1e-4);
                    bad += !(r <= 1.0);
                    if (!(r <= worst)) {
                        worst = r;
                        wb = b, wh = h, wi = i, wc = c;
                    }
                }
    if (!bad) return 1;
    double g = got[ref_index(&t, wb, wh, wi, wc)];
    double r = ref[((wb * p->heads_q + wh) * p->seqlen_q + wi) * p->head_dim + wc];
    fprintf(stderr,
            "FAIL %s: O has %zu element(s) out of tolerance; worst at b=%zu h=%zu row=%zu "
            "col=%zu: got %.9g, reference %.9g (|diff| %.3g, tolerance %.3g)\n",
            label, bad, wb, wh, wi, wc, g, r, fabs(g - r), 2e-5 + 1e-4 * fabs(r));
    g_failures++;
    return 0;
}

void tu_buffers_create(cl_context cl, int count, size_t cap, unsigned outputs, uint64_t seed, cl_mem *buf,
                       float **host) {
    tu_rng rng = tu_rng_seed(seed);
    for (int i = 0; i < count; i++) {
        host[i] = malloc(cap * sizeof(float));
        REQUIRE(host[i] != NULL);
        if (outputs & (1u << i))
            tu_fill_sentinel(host[i], cap);
        else
            for (size_t j = 0; j < cap; j++) host[i][j] = tu_rng_float(&rng, -1.0f, 1.0f);
        buf[i] = tu_buffer_create(cl, cap, host[i]);
    }
}

void tu_buffers_release(int count, cl_mem *buf, float **host) {
    for (int i = 0; i < count; i++) {
        clReleaseMemObject(buf[i]);
        free(host[i]);
    }
}

flashcl_attention_desc tu_small_desc(size_t batch) {
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = batch;
    d.heads_q = 2;
    d.heads_kv = 1;
    d.seqlen_q = 8;
    d.seqlen_k = 8;
    d.head_dim = 16;
    return d;
}

int tu_query_plan(flashcl_context *ctx, int backward, flashcl_path path, size_t heads_kv, size_t head_dim,
                  flashcl_plan *plan, char *label, size_t label_cap) {
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = 2;
    d.heads_q = 4;
    d.heads_kv = heads_kv;
    d.seqlen_q = 100;
    d.seqlen_k = 300;
    d.head_dim = head_dim;
    d.path = path;
    memset(plan, 0x55, sizeof *plan);
    snprintf(label, label_cap, "%splan [%s] d=%zu", backward ? "backward " : "",
             path == FLASHCL_PATH_FLASH ? "flash" : "standard", head_dim);
    const flashcl_status st = backward ? flashcl_backward_plan_query(ctx, &d, plan) : flashcl_plan_query(ctx, &d, plan);
    if (!CHECK_STATUS(st, FLASHCL_SUCCESS)) {
        fprintf(stderr, "  %s: %s\n", label, flashcl_last_error(ctx));
        return 0;
    }
    return 1;
}

void tu_check_plan_fields(flashcl_context *ctx, const flashcl_plan *plan, const char *origins) {
    cl_device_id dev = flashcl_context_device(ctx);
    cl_ulong local_mem = 0;
    size_t max_wg = 0;
    REQUIRE_CL(clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem, &local_mem, NULL));
    REQUIRE_CL(clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL));
    CHECK(memchr(plan->kernel, '\0', sizeof plan->kernel) && plan->kernel[0]);
    CHECK(memchr(plan->origin, '\0', sizeof plan->origin));
    CHECK(memchr(plan->build_options, '\0', sizeof plan->build_options));
    CHECK(memchr(plan->reason, '\0', sizeof plan->reason) && plan->reason[0]);
    int known = 0; /* origin as a whole word of `origins` */
    const char *end = memchr(plan->origin, '\0', sizeof plan->origin);
    const size_t n = end ? (size_t)(end - plan->origin) : 0;
    for (const char *at = origins; n > 0 && (at = strstr(at, plan->origin)) != NULL; at += n)
        known |= (at == origins || at[-1] == ' ') && (at[n] == ' ' || at[n] == '\0');
    CHECK(known);
    CHECK(plan->block_rows >= 1 && plan->block_cols >= 1 && plan->threads_per_row >= 1);
    CHECK(plan->staging == FLASHCL_STAGING_LOCAL || plan->staging == FLASHCL_STAGING_DIRECT);
    CHECK(plan->work_group_size >= 1 && plan->work_group_size <= max_wg);
    CHECK(plan->local_mem_bytes <= local_mem);
}

void tu_print_plan(const char *label, const flashcl_plan *plan) {
    printf("%s: kernel=%s Br=%d Bc=%d tpr=%d wg=%zu local=%zu private=%zu scratch=%zu origin=%s\n"
           "  reason: %s\n",
           label, plan->kernel, plan->block_rows, plan->block_cols, plan->threads_per_row, plan->work_group_size,
           plan->local_mem_bytes, plan->private_mem_bytes, plan->scratch_bytes, plan->origin, plan->reason);
}

int tu_compare_lse(const char *label, const ref_problem *p, const float *got, const double *ref) {
    size_t n = p->batch * p->heads_q * p->seqlen_q;
    double worst = -1.0;
    size_t at = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        double r = tol_ratio(got[i], ref[i], 1e-5, 1e-5);
        bad += !(r <= 1.0);
        if (!(r <= worst)) {
            worst = r;
            at = i;
        }
    }
    if (!bad) return 1;
    size_t row = at % p->seqlen_q, bh = at / p->seqlen_q;
    fprintf(stderr,
            "FAIL %s: LSE has %zu element(s) out of tolerance; worst at b=%zu h=%zu "
            "row=%zu: got %.9g, reference %.9g (tolerance %.3g)\n",
            label, bad, bh / p->heads_q, bh % p->heads_q, row, (double)got[at], ref[at], 1e-5 + 1e-5 * fabs(ref[at]));
    g_failures++;
    return 0;
}
