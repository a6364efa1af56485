/*
 * The NVIDIA tensor-core forward (cl/flash_fwd_mma.cl) against the same
 * double-precision reference as the portable kernels, in bf16 and f16
 * storage. On a device where the probe does not pass (POCL in CI, any
 * non-NVIDIA or pre-sm_80 GPU) it checks that the vendor path is NOT chosen,
 * that the plan says why, and that the fallback computes the same thing.
 * FLASHCL_VENDOR_PATH=off must force the portable plan on any device.
 * On compute capability 9.0 (Hopper) the d = 128 forward must take the
 * wgmma form (sm_90a, src/backends/nvidia/wgmma.c) unless FLASHCL_WGMMA=0, as
 * must d = 256 (Q in registers) and d = 144 (padded), not d = 96, and
 * every case runs twice: in that form, then with FLASHCL_WGMMA=0 in mma.sync. There the
 * backward of a general (windowed) call must run its dQ kernel on wgmma, a plain call's not.
 *
 * Tolerance: inputs are rounded to the storage type first, so the reference
 * sees exactly what the kernel sees; what remains is P rounded to 16 bits
 * before P V and the output's own rounding. |O - ref| <= 4 eps(type) (|ref| + 1)
 * element-wise and LSE within 1e-3: several times the rounding of one store,
 * far below what a wrong mask or tile (errors of order 1) produces.
 *
 * Backward (cl/flash_bwd_mma.cl, from the kernel's own O and LSE and a random
 * dO in storage precision) against the fp64 reference gradients on the same
 * rounded inputs: relative L2 error of dQ, dK, dV each at most 2.5e-2 (bf16) or
 * 5e-3 (f16). P and dS are rounded to 16 bits before their products and the
 * outputs are stored in 16 bits (each a relative error of eps/2 = 2^-9 in bf16,
 * 2^-12 in f16), so a correct kernel lands near 5e-3 (bf16) and 1e-3 (f16);
 * a wrong mask, group or tile gives errors of order 1. Where the fast path does
 * not apply, the portable backward (16-bit storage, fp32 P) must meet the same bound.
 */
#define _POSIX_C_SOURCE 200112L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "storage_types.h"
#include "testutil.h"

typedef struct mma_case {
    size_t b, hq, hkv, sq, sk, d;
    int causal, f16, bhsd, offset; /* offset: elements before each tensor (8 keeps alignment, 4 breaks it) */
    int ramp; /* 1: key j scaled by 1 + 4 j / sk, so a row's max keeps growing past the forward's rescale slack */
} mma_case;

static uint16_t to16(const mma_case *c, float x);
static float from16(const mma_case *c, uint16_t h);

/* Relative L2 error of a 16-bit result (addressed through view) against a packed reference. */
static double rel_l2(const mma_case *c, const uint16_t *got, const flashcl_tensor *view, const double *ref,
                     size_t heads, size_t rows) {
    double num = 0.0, den = 0.0;
    for (size_t b = 0; b < c->b; ++b)
        for (size_t h = 0; h < heads; ++h)
            for (size_t r = 0; r < rows; ++r)
                for (size_t col = 0; col < c->d; ++col) {
                    const double x = ref[((b * heads + h) * rows + r) * c->d + col];
                    const double g = from16(c, got[ref_index(view, b, h, r, col)]);
                    num += (g - x) * (g - x);
                    den += x * x;
                }
    if (num != num) return INFINITY; /* NaN: an unwritten element */
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

static cl_mem upload16(cl_context c, const uint16_t *h, size_t n) {
    cl_int err;
    cl_mem m = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * 2, (void *)h, &err);
    REQUIRE_CL(err);
    return m;
}

static flashcl_tensor make_view(cl_mem buf, const mma_case *c, size_t rows, size_t heads) {
    flashcl_tensor t =
        c->bhsd ? flashcl_tensor_bhsd(buf, rows, heads, c->d) : flashcl_tensor_bshd(buf, rows, heads, c->d);
    t.offset = (size_t)c->offset;
    if (t.stride_batch == 0) { /* packed default made explicit so the offset applies */
        t.stride_row = heads * c->d;
        t.stride_head = c->d;
        t.stride_batch = rows * heads * c->d;
    }
    return t;
}

/* 16-bit storage through tests/storage_types.c (round to nearest even). */
static uint16_t to16(const mma_case *c, float x) {
    return c->f16 ? flashcl__float_to_f16(x) : flashcl__float_to_bf16(x);
}
static float from16(const mma_case *c, uint16_t h) {
    return c->f16 ? flashcl__f16_to_float(h) : flashcl__bf16_to_float(h);
}

/* The backward from the forward's O and LSE (the tensor-core kernels, or the
   portable ones off the fast path); 1 when it matches the reference. */
static int run_backward_case(flashcl_context *ctx, const mma_case *c, tu_rng *rng, const char *label, int vendor,
                             const flashcl_attention_desc *desc, const float *fq, const flashcl_tensor *q,
                             const float *fk, const flashcl_tensor *k, const float *fv, const flashcl_tensor *v,
                             const flashcl_tensor *o, cl_mem bl) {
    cl_context clc = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    const size_t nq = (size_t)c->offset + c->b * c->sq * c->hq * c->d;
    const size_t nk = (size_t)c->offset + c->b * c->sk * c->hkv * c->d;
    uint16_t *hdo = calloc(nq, 2), *hdq = malloc(nq * 2), *hdk = malloc(nk * 2), *hdv = malloc(nk * 2);
    float *fdo = calloc(nq, 4);
    double *rq = malloc(c->b * c->hq * c->sq * c->d * sizeof(double));
    double *rk = malloc(c->b * c->hkv * c->sk * c->d * sizeof(double)),
           *rv = malloc(c->b * c->hkv * c->sk * c->d * sizeof(double));
    REQUIRE(hdo && hdq && hdk && hdv && fdo && rq && rk && rv);
    for (size_t i = (size_t)c->offset; i < nq; ++i) {
        hdo[i] = to16(c, tu_rng_float(rng, -1.0f, 1.0f));
        fdo[i] = from16(c, hdo[i]);
    }
    memset(hdq, 0xff, nq * 2), memset(hdk, 0xff, nk * 2), memset(hdv, 0xff, nk * 2);
    cl_mem bdo = upload16(clc, hdo, nq), bdq = upload16(clc, hdq, nq), bdk = upload16(clc, hdk, nk),
           bdv = upload16(clc, hdv, nk);
    flashcl_tensor dout = *o, dq = *q, dk = *k, dv = *v;
    dout.buffer = bdo, dq.buffer = bdq, dk.buffer = bdk, dv.buffer = bdv;
    int ok = 1;
    flashcl_status st = flashcl_backward(ctx, desc, q, k, v, o, &dout, bl, 0, &dq, &dk, &dv, 0, NULL, NULL);
    (void)vendor;
    if (st != FLASHCL_SUCCESS) {
        printf("FAIL %s backward: %s: %s\n", label, flashcl_status_name(st), flashcl_last_error(ctx));
        ok = 0;
    } else {
        REQUIRE_CL(clEnqueueReadBuffer(queue, bdq, CL_TRUE, 0, nq * 2, hdq, 0, NULL, NULL));
        REQUIRE_CL(clEnqueueReadBuffer(queue, bdk, CL_TRUE, 0, nk * 2, hdk, 0, NULL, NULL));
        REQUIRE_CL(clEnqueueReadBuffer(queue, bdv, CL_TRUE, 0, nk * 2, hdv, 0, NULL, NULL));
        ref_problem p = ref_problem_from_desc(desc);
        ref_attention_backward(&p, fq, q, fk, k, fv, v, fdo, &dout, rq, rk, rv);
        const double eq = rel_l2(c, hdq, &dq, rq, c->hq, c->sq), ek = rel_l2(c, hdk, &dk, rk, c->hkv, c->sk);
        const double ev = rel_l2(c, hdv, &dv, rv, c->hkv, c->sk), bound = c->f16 ? 5e-3 : 2.5e-2;
        ok = eq <= bound && ek <= bound && ev <= bound;
        printf("%s %s backward: rel L2 dQ %.3g dK %.3g dV %.3g (bound %.3g)\n", ok ? "ok  " : "FAIL", label, eq, ek, ev,
               bound);
    }
    clReleaseMemObject(bdo), clReleaseMemObject(bdq), clReleaseMemObject(bdk), clReleaseMemObject(bdv);
    free(hdo), free(hdq), free(hdk), free(hdv), free(fdo), free(rq), free(rk), free(rv);
    return ok;
}

/* Runs one case through flashcl_forward; returns 1 when it matches the reference. */
static int run_case(flashcl_context *ctx, const mma_case *c, tu_rng *rng, const char *expect_kernel) {
    cl_context clc = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    flashcl_attention_desc desc = FLASHCL_ATTENTION_DESC_INIT;
    desc.dtype = c->f16 ? FLASHCL_DTYPE_F16 : FLASHCL_DTYPE_BF16;
    desc.batch = c->b, desc.heads_q = c->hq, desc.heads_kv = c->hkv, desc.seqlen_q = c->sq, desc.seqlen_k = c->sk;
    desc.head_dim = c->d, desc.causal = c->causal;
    const size_t nq = (size_t)c->offset + c->b * c->sq * c->hq * c->d;
    const size_t nk = (size_t)c->offset + c->b * c->sk * c->hkv * c->d;
    uint16_t *hq = calloc(nq, 2), *hk = calloc(nk, 2), *hv = calloc(nk, 2), *ho = malloc(nq * 2);
    float *fq = calloc(nq, 4), *fk = calloc(nk, 4), *fv = calloc(nk, 4);
    const size_t nl = c->b * c->hq * c->sq;
    float *lse = malloc(nl * 4);
    double *ro = malloc(nq * sizeof(double)), *rl = malloc(nl * sizeof(double));
    REQUIRE(hq && hk && hv && ho && fq && fk && fv && lse && ro && rl);
    for (size_t i = (size_t)c->offset; i < nq; ++i) {
        float x = tu_rng_float(rng, -2.0f, 2.0f);
        hq[i] = to16(c, x);
        fq[i] = from16(c, hq[i]);
    }
    for (size_t i = (size_t)c->offset; i < nk; ++i) {
        float x = tu_rng_float(rng, -2.0f, 2.0f), y = tu_rng_float(rng, -1.0f, 1.0f);
        if (c->ramp) { /* the key's position in its sequence, either layout */
            const size_t e = i - (size_t)c->offset, key = c->bhsd ? e / c->d % c->sk : e / (c->hkv * c->d) % c->sk;
            x *= 1.0f + 4.0f * (float)key / (float)c->sk;
        }
        hk[i] = to16(c, x);
        fk[i] = from16(c, hk[i]);
        hv[i] = to16(c, y);
        fv[i] = from16(c, hv[i]);
    }
    memset(ho, 0xff, nq * 2); /* NaN in both formats: an unwritten element fails */
    cl_mem bq = upload16(clc, hq, nq), bk = upload16(clc, hk, nk), bv = upload16(clc, hv, nk),
           bo = upload16(clc, ho, nq);
    cl_int err;
    cl_mem bl = clCreateBuffer(clc, CL_MEM_READ_WRITE, nl * 4, NULL, &err);
    REQUIRE_CL(err);
    flashcl_tensor q = make_view(bq, c, c->sq, c->hq), k = make_view(bk, c, c->sk, c->hkv);
    flashcl_tensor v = make_view(bv, c, c->sk, c->hkv), o = make_view(bo, c, c->sq, c->hq);

    char label[160];
    snprintf(label, sizeof label, "%s b%zu hq%zu hkv%zu sq%zu sk%zu d%zu%s%s off%d", c->f16 ? "f16" : "bf16", c->b,
             c->hq, c->hkv, c->sq, c->sk, c->d, c->causal ? " causal" : "", c->bhsd ? " bhsd" : "", c->offset);
    int ok = 1;
    flashcl_plan plan;
    CHECK_STATUS(flashcl_plan_query(ctx, &desc, &plan), FLASHCL_SUCCESS);
    if (expect_kernel && strcmp(plan.kernel, expect_kernel) != 0) {
        printf("FAIL %s: plan is %s (%s), expected %s\n", label, plan.kernel, plan.reason, expect_kernel);
        ok = 0;
    }
    flashcl_status st = flashcl_forward(ctx, &desc, &q, &k, &v, &o, bl, 0, 0, NULL, NULL);
    if (st != FLASHCL_SUCCESS) {
        printf("FAIL %s: %s: %s\n", label, flashcl_status_name(st), flashcl_last_error(ctx));
        ok = 0;
    } else {
        REQUIRE_CL(clEnqueueReadBuffer(queue, bo, CL_TRUE, 0, nq * 2, ho, 0, NULL, NULL));
        REQUIRE_CL(clEnqueueReadBuffer(queue, bl, CL_TRUE, 0, nl * 4, lse, 0, NULL, NULL));
        ref_problem p = ref_problem_from_desc(&desc);
        ref_attention(&p, fq, &q, fk, &k, fv, &v, ro, rl);
        const double eps = c->f16 ? 1.0 / 1024 : 1.0 / 128;
        double worst = 0.0, worst_lse = 0.0;
        size_t bad = 0;
        for (size_t bb = 0; bb < c->b; ++bb)
            for (size_t h = 0; h < c->hq; ++h)
                for (size_t r = 0; r < c->sq; ++r) {
                    const size_t row = (bb * c->hq + h) * c->sq + r;
                    for (size_t col = 0; col < c->d; ++col) {
                        const double ref = ro[row * c->d + col];
                        const uint16_t g = ho[ref_index(&o, bb, h, r, col)];
                        const double got = from16(c, g);
                        const double e = fabs(got - ref);
                        if (!(e <= 4 * eps * (fabs(ref) + 1))) bad++;
                        if (!(e <= worst)) worst = e;
                    }
                    const double rlse = rl[row], glse = lse[row];
                    if (isinf(rlse)) {
                        if (!(isinf(glse) && glse < 0)) bad++;
                    } else {
                        const double e = fabs(glse - rlse);
                        if (!(e <= 1e-3)) bad++;
                        if (!(e <= worst_lse)) worst_lse = e;
                    }
                }
        ok = ok && bad == 0;
        printf("%s %s [%s]: max |O - ref| %.3g, max |lse - ref| %.3g%s\n", ok ? "ok  " : "FAIL", label, plan.kernel,
               worst, worst_lse, bad ? " (out of tolerance)" : "");
        const int vendor = expect_kernel != NULL && strcmp(plan.kernel, "flash_fwd_mma") == 0;
        if (!run_backward_case(ctx, c, rng, label, vendor, &desc, fq, &q, fk, &k, fv, &v, &o, bl)) ok = 0;
    }
    clReleaseMemObject(bq), clReleaseMemObject(bk), clReleaseMemObject(bv), clReleaseMemObject(bo),
        clReleaseMemObject(bl);
    free(hq), free(hk), free(hv), free(ho), free(fq), free(fk), free(fv), free(lse), free(ro), free(rl);
    return ok;
}

/* The forward plan on a tensor-core device: queries of at most 16 rows (sq 1 cases here) go to the
   decode family first (src/backends/decode, FLASHCL__DECODE_MAX_SEQLEN_Q), the rest to the tensor
   cores; the backward of every case runs the tensor-core kernels either way. */
static const char *expected_forward(const mma_case *c) { return c->sq <= 16 ? "flash_decode" : "flash_fwd_mma"; }

int main(void) {
    flashcl_context *ctx = tu_context_create();
    tu_rng rng = tu_rng_seed(5);
    flashcl_attention_desc probe = FLASHCL_ATTENTION_DESC_INIT;
    probe.dtype = FLASHCL_DTYPE_BF16;
    probe.batch = probe.heads_q = 1;
    probe.seqlen_q = 64;
    probe.head_dim = 128;
    flashcl_plan plan;
    flashcl_status st = flashcl_plan_query(ctx, &probe, &plan);
    if (st == FLASHCL_ERR_UNSUPPORTED_DTYPE) {
        printf("skip: this build does not accept 16-bit storage yet\n");
        flashcl_context_destroy(ctx);
        return TU_EXIT_SKIP;
    }
    CHECK_STATUS(st, FLASHCL_SUCCESS);
    const int vendor = strcmp(plan.kernel, "flash_fwd_mma") == 0;
    printf("plan: %s (%s): %s\n", plan.kernel, plan.origin, plan.reason);
    cl_device_type type = 0;
    clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_TYPE, sizeof type, &type, NULL);
    if (type & CL_DEVICE_TYPE_CPU) CHECK(!vendor); /* never on POCL */
    if (!vendor) CHECK(strstr(plan.reason, "tensor-core path") != NULL);
    /* Compute capability 9.0 (Hopper): d = 128 bf16 must take the wgmma form (its probe must pass)
       unless FLASHCL_WGMMA=0; the cases then run once in each form. */
    cl_uint cc_major = 0, cc_minor = 0;
    if (vendor) {
        clGetDeviceInfo(flashcl_context_device(ctx), 0x4000 /* CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV */,
                        sizeof cc_major, &cc_major, NULL);
        clGetDeviceInfo(flashcl_context_device(ctx), 0x4001 /* CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV */,
                        sizeof cc_minor, &cc_minor, NULL);
    }
    const char *wg_env = getenv("FLASHCL_WGMMA");
    const int wgmma = strstr(plan.reason, "wgmma (sm_90a PTX)") != NULL;
    if (vendor && cc_major == 9 && cc_minor == 0 && !(wg_env && strcmp(wg_env, "0") == 0)) CHECK(wgmma);
    if (!vendor || cc_major != 9 || cc_minor != 0) CHECK(!wgmma);
    if (wgmma) {
        /* Above d = 128 the form keeps Q in registers, and padded head dims take it where the padding
           pays (144 -> 192/256) but not at d = 96 (-> 128 would add a third): the plans the cases
           below then run (d = 144 and 256 on wgmma, d = 96 on mma.sync). */
        static const struct {
            size_t d;
            const char *want, *refuse;
        } dims[] = {{256, "Q in registers", NULL}, {144, "padded to 192/256", NULL}, {96, NULL, "wgmma (sm_90a PTX)"}};
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i) {
            flashcl_attention_desc other = probe;
            other.head_dim = dims[i].d;
            flashcl_plan p;
            CHECK_STATUS(flashcl_plan_query(ctx, &other, &p), FLASHCL_SUCCESS);
            printf("d = %zu: %s\n", dims[i].d, p.reason);
            CHECK(strcmp(p.kernel, "flash_fwd_mma") == 0);
            if (dims[i].want) CHECK(strstr(p.reason, "wgmma (sm_90a PTX)") && strstr(p.reason, dims[i].want));
            if (dims[i].refuse) CHECK(strstr(p.reason, dims[i].refuse) == NULL);
        }
        /* The backward's general dQ kernel runs on wgmma (a window makes the call general) unless
           FLASHCL_WGMMA_BWD=0; plain calls keep the MMA_PLAIN mma.sync kernels. */
        const char *wg_bwd = getenv("FLASHCL_WGMMA_BWD");
        flashcl_attention_desc plain = probe, windowed = probe;
        plain.seqlen_k = windowed.seqlen_k = 64;
        windowed.window = 1;
        windowed.window_left = 32;
        flashcl_plan pw, pp;
        CHECK_STATUS(flashcl_backward_plan_query(ctx, &windowed, &pw), FLASHCL_SUCCESS);
        CHECK_STATUS(flashcl_backward_plan_query(ctx, &plain, &pp), FLASHCL_SUCCESS);
        printf("backward, window: %s\nbackward, plain: %s\n", pw.reason, pp.reason);
        if (!(wg_bwd && strcmp(wg_bwd, "0") == 0)) CHECK(strstr(pw.reason, "on wgmma") != NULL);
        CHECK(strstr(pp.reason, "on wgmma") == NULL);
    }

    const mma_case cases[] = {
        {1, 2, 2, 200, 200, 128, 0, 0, 0, 0, 0},
        {1, 2, 2, 200, 200, 64, 1, 0, 0, 0, 0},
        {2, 4, 2, 77, 130, 64, 1, 0, 0, 8, 0},  /* sq < sk, GQA, offset */
        {1, 4, 1, 130, 77, 128, 1, 0, 1, 0, 0}, /* sq > sk: fully masked rows; MQA; bhsd */
        {1, 2, 2, 1, 1, 32, 0, 0, 0, 0, 0},
        {1, 2, 2, 1, 300, 96, 1, 0, 0, 0, 0},
        {1, 2, 1, 129, 129, 128, 0, 1, 0, 0, 0}, /* f16 */
        {1, 2, 2, 300, 1, 64, 1, 1, 1, 0, 0},
        {1, 1, 1, 257, 257, 96, 1, 0, 0, 0, 0},
        {1, 3, 3, 64, 193, 32, 0, 1, 0, 0, 0},
        {1, 4, 2, 133, 150, 256, 1, 0, 0, 0, 0}, /* d > 128: the backward's two output slices; GQA */
        {1, 2, 1, 70, 90, 144, 1, 1, 1, 0, 0},   /* f16, d padded to 160 inside the sliced kernels */
        {1, 2, 2, 150, 700, 128, 0, 0, 0, 0, 1}, /* ramp: the forward's online max grows tile after tile */
        {1, 2, 1, 200, 300, 64, 1, 1, 0, 0, 1},  /* ramp, f16, causal, GQA */
    };
    /* On sm_80+ the backward's dQ reads the dK/dV kernel's dS (flash_bwd_mma_dq_ds: plain calls above
       d = 64, the probe's d is 128; the d = 144 and 256 cases in the sliced general kernels); with
       FLASHCL_BWD_DS=0 it recomputes dS (flash_bwd_mma_dq), the way it goes where the scratch would
       not fit: the cases run once more that way. */
    int ds_form = 0;
    if (vendor) {
        flashcl_attention_desc plain = probe;
        plain.seqlen_k = 64;
        flashcl_plan pp;
        CHECK_STATUS(flashcl_backward_plan_query(ctx, &plain, &pp), FLASHCL_SUCCESS);
        ds_form = strstr(pp.reason, "flash_bwd_mma_dq_ds") != NULL;
        const char *sm75_env = getenv("FLASHCL_MMA_SM75");
        if (cc_major >= 8 && !(sm75_env && strcmp(sm75_env, "1") == 0)) CHECK(ds_form);
    }
    const size_t ncases = vendor ? sizeof cases / sizeof cases[0] : 2; /* fallback: a sample */
    const int forms = (wgmma ? 2 : 1) + ds_form;
    for (int form = 0; form < forms; ++form) {
        if (form > 0 && form == forms - 1 && ds_form) { /* dQ recomputing dS */
            flashcl_context_destroy(ctx);
            setenv("FLASHCL_BWD_DS", "0", 1);
            ctx = tu_context_create();
            printf("FLASHCL_BWD_DS=0: the backward's dQ recomputes dS\n");
        } else if (form == 1) { /* the same cases in the mma.sync form */
            flashcl_context_destroy(ctx);
            setenv("FLASHCL_WGMMA", "0", 1);
            ctx = tu_context_create();
            CHECK_STATUS(flashcl_plan_query(ctx, &probe, &plan), FLASHCL_SUCCESS);
            CHECK(strstr(plan.reason, "mma.sync bf16") != NULL);
            printf("FLASHCL_WGMMA=0: %s\n", plan.reason);
        }
        for (size_t i = 0; i < ncases; ++i)
            if (!run_case(ctx, &cases[i], &rng, vendor ? expected_forward(&cases[i]) : NULL)) tu_fail_count();
        if (vendor) {
            /* A 4-element offset breaks 16-byte alignment: the call must fall back, still correct. */
            const mma_case unaligned = {1, 2, 2, 100, 100, 64, 1, 0, 0, 4, 0};
            if (!run_case(ctx, &unaligned, &rng, NULL)) tu_fail_count();
        }
    }
    flashcl_context_destroy(ctx);

    /* FLASHCL_VENDOR_PATH=off: the portable plan on any device, saying why. */
    setenv("FLASHCL_VENDOR_PATH", "off", 1);
    ctx = tu_context_create();
    CHECK_STATUS(flashcl_plan_query(ctx, &probe, &plan), FLASHCL_SUCCESS);
    CHECK(strcmp(plan.kernel, "flash_fwd_mma") != 0);
    CHECK(strstr(plan.reason, "FLASHCL_VENDOR_PATH=off") != NULL);
    printf("FLASHCL_VENDOR_PATH=off: %s\n", plan.kernel);
    flashcl_context_destroy(ctx);
    return tu_finish("test_mma");
}
