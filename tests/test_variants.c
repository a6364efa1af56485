/*
 * Attention variants against the double-precision reference: every case of
 * variant_cases.c runs flashcl_forward (O, LSE) and flashcl_backward (dQ, dK,
 * dV, dsinks) on the device; with dropout, flashcl_dropout_mask first, which
 * must equal the host Philox bit for bit and keep 1 - p of the elements
 * (5 sigma), and whose mask the reference then applies.
 *
 * The standard path is the plain baseline: for a case with any variant other
 * than the storage type it must refuse with FLASHCL_ERR_UNSUPPORTED_VARIANT.
 *
 * Last, the family check: one dropout case under the row kernels and under
 * the tiles kernels (FLASHCL_TILE / FLASHCL_BWD_KERNEL, read when a context
 * plans), in fresh contexts, must give the same mask bytes and both pass.
 * CTest also runs the whole list under each forced family.
 *
 * A head dim above FLASHCL_MAX_HEAD_DIM (576/512, DeepSeek's MLA shape) must
 * be refused with FLASHCL_ERR_INVALID_HEAD_DIM while the header says so, and
 * pass once the maximum covers it.
 *
 *   test_variants [--quick] [--case N] [--skip N] [--list] [--no-family-check] [--forward-only]
 *                 [--backward-on-tensor-cores-only] [--fresh-context] [--storage f16|bf16] [--tensor-cores]
 *                 [--cpu-family]
 *
 * --cpu-family runs only the cases the CPU kernel family covers (all but
 * d or d_v > 256), for the run that forces that family
 * (FLASHCL_TILE=kernel=cpu, where an uncovered call is an error);
 * --quick runs a few tiny cases with every feature on (the Oclgrind runs);
 * --case N runs only case N, --skip N all but case N;
 * --forward-only skips the backward; --backward-on-tensor-cores-only skips it
 * unless the tensor-core family is planned (the f16 run: on NVIDIA the f16
 * backward has its own builds, elsewhere it would repeat the bf16 run's
 * families at POCL's compile cost); --fresh-context gives every case its
 * own context, and the case's backward a second one on the same queue
 * (flashcl_context_create_from_queue): Oclgrind 21.10 reports false
 * "uninitialized" reads of a scratch buffer that was released and re-created
 * larger, and the fused CPU backward's float32 dQ takes the scratch slot of
 * the forward's packed K, re-created larger within a case in one context.
 * The backward's scratch buffers are then its own, never the forward's, so
 * Oclgrind also checks that the backward writes what it reads.
 * --storage runs every case in that 16-bit storage type (the NVIDIA
 * tensor-core forward's sweep); --tensor-cores then requires, on a device
 * where a plain 16-bit call plans the tensor-core forward (flash_fwd_mma),
 * every case that forward covers (d and d_v multiples of 8 up to 256, and not
 * a short query the decode family takes) to plan it too, and the backward
 * of every case with d = d_v <= 256 to plan flash_bwd_mma, so a silent
 * fallback to another family fails instead of passing. Elsewhere (POCL) the
 * cases run on whatever family takes them, against the same reference.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv, strdup */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "variant_problem.h"

static double seconds_since(const struct timespec *t0) {
    struct timespec t;
    timespec_get(&t, TIME_UTC);
    return (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec);
}

/* A variant other than the storage type (what the standard path refuses). */
static int has_variant(const vc_case *c) {
    const flashcl_attention_desc *d = &c->desc;
    return d->window || d->softcap > 0.0f || c->alibi || c->sinks || d->dropout_p > 0.0f || c->bias || c->mask ||
           c->block_mask || c->nseq || (d->head_dim_v && d->head_dim_v != d->head_dim);
}

/* The standard path refuses variants before touching anything. */
static int check_standard_refuses(flashcl_context *ctx, vp_problem *p, const char *label) {
    flashcl_attention_desc d = p->desc;
    d.path = FLASHCL_PATH_STANDARD;
    flashcl_status st = flashcl_forward(ctx, &d, &p->qv, &p->kv, &p->vv, &p->ov, p->lse_buf, 0, 0, NULL, NULL);
    if (st == FLASHCL_ERR_UNSUPPORTED_VARIANT && flashcl_last_error(ctx)[0] != '\0') return 1;
    fprintf(stderr,
            "FAIL %s: the standard forward returned %s (\"%s\"), expected "
            "FLASHCL_ERR_UNSUPPORTED_VARIANT with a message\n",
            label, flashcl_status_name(st), flashcl_last_error(ctx));
    tu_fail_count();
    return 0;
}

static int g_forward_only;
static int g_backward_context;       /* --fresh-context: the backward runs in a second context on the case's queue */
static const char *g_expect_forward; /* "flash_fwd_mma" with --tensor-cores on a device that has them */
static int g_expect_cpu;             /* the CPU family must plan every case it covers (see check_cpu_family) */

static int g_tf32; /* --tf32: every case in float32 with allow_tf32 (TF32 tensor cores forward and backward) */

/* The plan of a plain d = 64 forward of 64 rows in storage `t` (with --tf32's opt-in) on this device. */
static flashcl_status plain_plan(flashcl_context *ctx, flashcl_dtype t, flashcl_plan *plan) {
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.dtype = t;
    d.allow_tf32 = g_tf32;
    d.batch = d.heads_q = d.heads_kv = 1;
    d.seqlen_q = d.seqlen_k = 64;
    d.head_dim = 64;
    memset(plan, 0, sizeof *plan);
    return flashcl_plan_query(ctx, &d, plan);
}

/* Whether such a forward in storage `t` plans the tensor-core kernel on this device. */
static int device_has_tensor_cores(flashcl_context *ctx, flashcl_dtype t) {
    flashcl_plan plan;
    return plain_plan(ctx, t, &plan) == FLASHCL_SUCCESS && strcmp(plan.kernel, "flash_fwd_mma") == 0;
}

/* The compute capability of an NVIDIA device as 10 * major + minor (cl_nv_device_attribute_query),
   0 on any other device. */
static int nvidia_compute_capability(cl_device_id dev) {
    size_t n = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &n) != CL_SUCCESS || n == 0) return 0;
    char *ext = calloc(n + 1, 1);
    int has = ext && clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, n, ext, NULL) == CL_SUCCESS &&
              strstr(ext, "cl_nv_device_attribute_query") != NULL;
    free(ext);
    cl_uint major = 0, minor = 0;
    if (!has ||
        clGetDeviceInfo(dev, 0x4000 /* CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV */, sizeof major, &major, NULL) !=
            CL_SUCCESS ||
        clGetDeviceInfo(dev, 0x4001 /* _MINOR_NV */, sizeof minor, &minor, NULL) != CL_SUCCESS)
        return 0;
    return (int)(major * 10 + minor);
}

/* --sm75 (FLASHCL_MMA_SM75=1, set before the context exists): where f16 runs on the tensor cores,
   their plan must name the sm_75 form, and bf16, which that form lacks, must not plan them. */
static int check_sm75_plans(flashcl_context *ctx) {
    flashcl_plan plan;
    flashcl_status st = plain_plan(ctx, FLASHCL_DTYPE_F16, &plan);
    if (st != FLASHCL_SUCCESS || !strstr(plan.reason, "sm_75 form")) {
        fprintf(stderr, "FAIL --sm75: the f16 plan (%s, %s) does not name the sm_75 form: %s\n", plan.kernel,
                flashcl_status_name(st), plan.reason);
        return 0;
    }
    st = plain_plan(ctx, FLASHCL_DTYPE_BF16, &plan);
    if (st != FLASHCL_SUCCESS || strcmp(plan.kernel, "flash_fwd_mma") == 0) {
        fprintf(stderr, "FAIL --sm75: the bf16 plan is %s (%s), expected a portable kernel\n", plan.kernel,
                flashcl_status_name(st));
        return 0;
    }
    return 1;
}

/* Whether the backward of a windowed 16-bit call (the general kernels) on sm_80+ plans
   dQ from the dK/dV kernel's stored dS (flash_bwd_mma_dq_ds). Calls fall back to recomputing it
   (flash_bwd_mma_dq) where the scratch would not fit, or with FLASHCL_BWD_DS=0 (--recompute-ds). */
static int check_ds_plan(flashcl_context *ctx, flashcl_dtype t) {
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.dtype = t;
    d.batch = d.heads_q = d.heads_kv = 1;
    d.seqlen_q = d.seqlen_k = 64;
    d.head_dim = 128;
    d.window = 1;
    d.window_left = 16;
    d.window_right = 0;
    flashcl_plan plan;
    memset(&plan, 0, sizeof plan);
    const flashcl_status st = flashcl_backward_plan_query(ctx, &d, &plan);
    if (st != FLASHCL_SUCCESS || !strstr(plan.reason, "flash_bwd_mma_dq_ds")) {
        fprintf(stderr, "FAIL: the windowed d = 128 backward plan (%s, %s) does not name flash_bwd_mma_dq_ds: %s\n",
                plan.kernel, flashcl_status_name(st), plan.reason);
        return 0;
    }
    return 1;
}

/* Whether the tensor-core forward covers the case (see --expect-forward). */
static int tensor_core_case(const vc_case *c) {
    const flashcl_attention_desc *d = &c->desc;
    const size_t dv = d->head_dim_v ? d->head_dim_v : d->head_dim;
    size_t max_q = d->seqlen_q;
    if (c->nseq) {
        max_q = 0;
        for (size_t i = 0; i < c->nseq; i++) max_q = c->len_q[i] > max_q ? c->len_q[i] : max_q;
    }
    const int decode = max_q <= 16 && !c->bias && !c->mask && !c->block_mask && d->dropout_p == 0.0f;
    const int lowp = d->dtype == FLASHCL_DTYPE_F16 || d->dtype == FLASHCL_DTYPE_BF16;
    const size_t max_dim = lowp ? 256 : 128; /* TF32: d, d_v <= 128 */
    return (lowp || d->allow_tf32) && d->head_dim % 8 == 0 && d->head_dim <= max_dim && dv % 8 == 0 && dv <= max_dim &&
           !decode;
}

/* Whether the tensor-core backward covers the case: d = d_v a multiple of 8 up to 256 (TF32: 128). */
static int tensor_core_backward_case(const vc_case *c) {
    const flashcl_attention_desc *d = &c->desc;
    const size_t dv = d->head_dim_v ? d->head_dim_v : d->head_dim;
    const int lowp = d->dtype == FLASHCL_DTYPE_F16 || d->dtype == FLASHCL_DTYPE_BF16;
    return (lowp || d->allow_tf32) && d->head_dim % 8 == 0 && d->head_dim <= (lowp ? 256u : 128u) && dv == d->head_dim;
}

static int expect_kernel(flashcl_context *ctx, flashcl_status st, const flashcl_plan *plan, const char *pass,
                         const char *want, const char *label) {
    if (st == FLASHCL_SUCCESS && strcmp(plan->kernel, want) == 0) return 1;
    fprintf(stderr, "FAIL %s: %s plan %s (%s), expected %s: %s\n", label, pass, plan->kernel, flashcl_status_name(st),
            want, st == FLASHCL_SUCCESS ? plan->reason : flashcl_last_error(ctx));
    tu_fail_count();
    return 0;
}

/* --tf32: each case at d = d_v = 64 or 128 again at head dims that the kernels pad (40, 72, 120) or
   slice into uneven steps (96), which no other case reaches in float32: 128 -> 72, 96, 120 and
   64 -> 40, variants kept. Added only here: elsewhere they would cost every device's runs. */
static void add_tf32_head_dims(vc_list *cases) {
    static const struct { size_t from, to; } dims[] = {{128, 72}, {128, 96}, {128, 120}, {64, 40}};
    const size_t n = cases->count;
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++)
        for (size_t i = 0; i < n; i++) {
            const flashcl_attention_desc *d = &cases->items[i].desc;
            if (d->head_dim != dims[k].from || (d->head_dim_v && d->head_dim_v != d->head_dim)) continue;
            vc_case *c = vc_list_add(cases); /* (may move the items: copy by index) */
            *c = cases->items[i];
            c->desc.head_dim = dims[k].to;
            if (c->desc.head_dim_v) c->desc.head_dim_v = dims[k].to;
        }
}

/* --tensor-cores: the plans of a covered case must be the tensor-core forward (and backward). */
static int check_forward_kernel(flashcl_context *ctx, const vp_problem *p, const char *label) {
    if (!g_expect_forward) return 1;
    flashcl_plan plan;
    memset(&plan, 0, sizeof plan);
    int ok = 1;
    if (tensor_core_case(&p->c))
        ok = expect_kernel(ctx, flashcl_plan_query(ctx, &p->desc, &plan), &plan, "forward", g_expect_forward, label);
    /* Short queries run the decode family forward, but its backward is the tensor cores'. */
    if (p->c.backward && !g_forward_only && tensor_core_backward_case(&p->c)) {
        memset(&plan, 0, sizeof plan);
        ok &= expect_kernel(ctx, flashcl_backward_plan_query(ctx, &p->desc, &plan), &plan, "backward", "flash_bwd_mma",
                            label);
        /* On Hopper a build of the wgmma dQ that failed would fall back to mma.sync for the rest of
           the context (correct, so the gradients would pass): its plans name the failure. */
        if (strstr(plan.reason, "wgmma backward build failed")) {
            fprintf(stderr, "FAIL %s: backward plan: %s\n", label, plan.reason);
            ok = 0;
        }
    }
    return ok;
}

/* What the CPU family (src/backends/cpu/plan.c) takes: every variant (varlen and d_v != d included),
   d and d_v up to 256. */
static int cpu_family_covers(const vc_case *c) {
    const flashcl_attention_desc *d = &c->desc;
    return d->head_dim <= 256 && d->head_dim_v <= 256;
}

/* Whether a plain float32 call plans the CPU family (a CPU device with no override against it). */
static int device_plans_cpu_family(flashcl_context *ctx) {
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = d.heads_q = d.heads_kv = 1;
    d.seqlen_q = d.seqlen_k = 64;
    d.head_dim = 64;
    flashcl_plan plan;
    return flashcl_plan_query(ctx, &d, &plan) == FLASHCL_SUCCESS && strcmp(plan.kernel, "flash_fwd_cpu") == 0;
}

/* Where the CPU family plans (g_expect_cpu), every case it covers must plan it: the forward
   flash_fwd_cpu (or the decode family, ahead of it in the chain, for a short query) with no
   "not cpu:" in the reason, the backward flash_bwd_cpu_dkdv (flash_bwd_cpu_fused when forced). A silent fallback to the row
   kernels fails instead of passing on them. */
static int check_cpu_family(flashcl_context *ctx, const vp_problem *p, const char *label) {
    if (!g_expect_cpu || !cpu_family_covers(&p->c)) return 1;
    flashcl_plan plan;
    memset(&plan, 0, sizeof plan);
    flashcl_status st = flashcl_plan_query(ctx, &p->desc, &plan);
    int ok = 1;
    if (st == FLASHCL_SUCCESS && strncmp(plan.kernel, "flash_decode", 12) == 0 && !strstr(plan.reason, "not cpu:"))
        ;
    else
        ok = expect_kernel(ctx, st, &plan, "forward", "flash_fwd_cpu", label);
    if (p->c.backward && !g_forward_only) {
        memset(&plan, 0, sizeof plan);
        /* Either form unless FLASHCL_BWD_KERNEL forces one (fused=1: test_variants_cpu_fused). */
        const char *env = getenv("FLASHCL_BWD_KERNEL"), *fused = "flash_bwd_cpu_fused";
        st = flashcl_backward_plan_query(ctx, &p->desc, &plan);
        const int forced = env && strstr(env, "fused=") != NULL, as_forced = env && strstr(env, "fused=1") != NULL;
        const int is_fused = st == FLASHCL_SUCCESS && strcmp(plan.kernel, fused) == 0;
        ok &= expect_kernel(ctx, st, &plan, "backward", (forced ? as_forced : is_fused) ? fused : "flash_bwd_cpu_dkdv",
                            label);
    }
    return ok;
}

/* Head dims past the maximum: refused, naming the field. */
static int check_refused_head_dim(flashcl_context *ctx, const vc_case *c, const char *label) {
    vp_problem p;
    vp_init(&p, flashcl_context_cl_context(ctx), c, 1);
    flashcl_status st = vp_forward(ctx, &p, NULL);
    int ok = CHECK_STATUS(st, FLASHCL_ERR_INVALID_HEAD_DIM) && strstr(flashcl_last_error(ctx), "head_dim") != NULL;
    if (!ok)
        fprintf(stderr, "FAIL %s: not refused as FLASHCL_MAX_HEAD_DIM (%d) says (\"%s\")\n", label,
                FLASHCL_MAX_HEAD_DIM, flashcl_last_error(ctx));
    vp_free(&p);
    return ok;
}

/* Dropout mask, forward, backward: each checked. Returns 1 when all pass. */
static int run_case(flashcl_context *ctx, const vc_case *c, const char *label, unsigned char **keep_out) {
    if (c->desc.head_dim > FLASHCL_MAX_HEAD_DIM || c->desc.head_dim_v > FLASHCL_MAX_HEAD_DIM)
        return check_refused_head_dim(ctx, c, label);
    cl_command_queue queue = flashcl_context_queue(ctx);
    vp_problem p;
    vp_init(&p, flashcl_context_cl_context(ctx), c, 0x5eed0000u + (uint64_t)c->desc.head_dim);
    int ok = check_forward_kernel(ctx, &p, label);
    ok &= check_cpu_family(ctx, &p, label);
    cl_event fwd = NULL, bwd = NULL;
    flashcl_context *bctx = ctx; /* the backward's: a second one with --fresh-context */
    if (c->desc.dropout_p > 0.0f) {
        if (!CHECK_STATUS(vp_dropout_mask(ctx, &p), FLASHCL_SUCCESS)) {
            fprintf(stderr, "  %s (dropout mask)\n  last message: %s\n", label, flashcl_last_error(ctx));
            ok = 0;
            goto done;
        }
        ok &= vp_check_dropout_mask(&p, label);
        if (keep_out) {
            *keep_out = malloc(p.keep_bytes);
            REQUIRE(*keep_out != NULL);
            memcpy(*keep_out, p.keep, p.keep_bytes);
        }
    }
    if (!CHECK_STATUS(vp_forward(ctx, &p, &fwd), FLASHCL_SUCCESS)) {
        fprintf(stderr, "  %s (forward)\n  last message: %s\n", label, flashcl_last_error(ctx));
        ok = 0;
        goto done;
    }
    CHECK(flashcl_last_error(ctx)[0] == '\0');
    char what[512];
    snprintf(what, sizeof what, "%s (forward)", label);
    ok &= vp_check_forward(&p, queue, fwd, what);
    if (c->backward && !g_forward_only) {
        if (g_backward_context) REQUIRE(flashcl_context_create_from_queue(&bctx, queue) == FLASHCL_SUCCESS);
        if (!CHECK_STATUS(vp_backward(bctx, &p, 1, &fwd, &bwd), FLASHCL_SUCCESS)) {
            fprintf(stderr, "  %s (backward)\n  last message: %s\n", label, flashcl_last_error(bctx));
            ok = 0;
            goto done;
        }
        snprintf(what, sizeof what, "%s (backward)", label);
        ok &= vp_check_backward(&p, queue, bwd, what);
    }
    if (has_variant(c)) ok &= check_standard_refuses(ctx, &p, label);
done:
    if (fwd) clReleaseEvent(fwd);
    if (bwd) clReleaseEvent(bwd);
    if (bctx != ctx) flashcl_context_destroy(bctx);
    vp_free(&p);
    return ok;
}

/* Sets (value != NULL) or clears an environment variable. */
static void set_env(const char *name, const char *value) {
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

static char *saved_env(const char *name) {
    const char *v = getenv(name);
    return v ? strdup(v) : NULL;
}

/*
 * The dropout mask is a function of (seed, offset, b, h, i, j) alone: the
 * row kernels and the tiles kernels, each in a fresh context, must write the
 * same mask and both match the reference.
 */
static int check_families(const vc_case *c) {
    static const char *tiles[2] = {"kernel=rows", "kernel=tiles,br=64,bc=64"};
    static const char *bwd[2] = {"rows", "tiles"};
    char *old_tile = saved_env("FLASHCL_TILE"), *old_bwd = saved_env("FLASHCL_BWD_KERNEL");
    unsigned char *keep[2] = {NULL, NULL};
    int ok = 1;
    const int expect_cpu = g_expect_cpu;
    const char *expect_forward = g_expect_forward;
    g_expect_cpu = 0; /* the portable families are forced here, so no plan check for the fast families */
    g_expect_forward = NULL;
    for (int f = 0; f < 2; f++) {
        set_env("FLASHCL_TILE", tiles[f]);
        set_env("FLASHCL_BWD_KERNEL", bwd[f]);
        flashcl_context *ctx = tu_context_create();
        char label[400], desc[300];
        vc_describe(c, desc, sizeof desc);
        snprintf(label, sizeof label, "family %s / bwd %s: %s", tiles[f], bwd[f], desc);
        int one = run_case(ctx, c, label, &keep[f]);
        printf("%s %s\n", one ? "ok  " : "FAIL", label);
        ok &= one;
        flashcl_context_destroy(ctx);
    }
    set_env("FLASHCL_TILE", old_tile);
    set_env("FLASHCL_BWD_KERNEL", old_bwd);
    g_expect_cpu = expect_cpu;
    g_expect_forward = expect_forward;
    free(old_tile);
    free(old_bwd);
    if (keep[0] && keep[1]) {
        size_t bytes = c->desc.batch * c->desc.heads_q * c->desc.seqlen_q * c->desc.seqlen_k;
        if (memcmp(keep[0], keep[1], bytes) != 0) {
            fprintf(stderr, "FAIL dropout masks differ between the row and the tiles kernels\n");
            tu_fail_count();
            ok = 0;
        }
    } else {
        ok = 0;
    }
    free(keep[0]);
    free(keep[1]);
    return ok;
}

int main(int argc, char **argv) {
    long only = -1, skip = -1;
    int list_only = 0, family_check = 1, quick = 0, fresh = 0, cpu_only = 0;
    int tensor_cores = 0, sm75 = 0, recompute_ds = 0, backward_on_tc_only = 0;
    flashcl_dtype storage = FLASHCL_DTYPE_DEFAULT;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--case") == 0 && i + 1 < argc)
            only = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--skip") == 0 && i + 1 < argc)
            skip = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--list") == 0)
            list_only = 1;
        else if (strcmp(argv[i], "--no-family-check") == 0)
            family_check = 0;
        else if (strcmp(argv[i], "--forward-only") == 0)
            g_forward_only = 1;
        else if (strcmp(argv[i], "--backward-on-tensor-cores-only") == 0)
            backward_on_tc_only = 1;
        else if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--fresh-context") == 0)
            fresh = g_backward_context = 1;
        else if (strcmp(argv[i], "--storage") == 0 && i + 1 < argc && strcmp(argv[i + 1], "f16") == 0)
            storage = FLASHCL_DTYPE_F16, ++i;
        else if (strcmp(argv[i], "--storage") == 0 && i + 1 < argc && strcmp(argv[i + 1], "bf16") == 0)
            storage = FLASHCL_DTYPE_BF16, ++i;
        else if (strcmp(argv[i], "--tensor-cores") == 0)
            tensor_cores = 1;
        else if (strcmp(argv[i], "--cpu-family") == 0)
            cpu_only = 1;
        else if (strcmp(argv[i], "--sm75") == 0)
            sm75 = 1;
        else if (strcmp(argv[i], "--tf32") == 0)
            g_tf32 = 1;
        else if (strcmp(argv[i], "--recompute-ds") == 0)
            recompute_ds = 1;
        else {
            fprintf(stderr, "usage: test_variants [--quick] [--case N] [--skip N] [--list] "
                            "[--no-family-check] [--forward-only] [--backward-on-tensor-cores-only] [--fresh-context] "
                            "[--storage f16|bf16] "
                            "[--tensor-cores [--sm75 | --tf32 | --recompute-ds]] [--cpu-family]\n");
            return 2;
        }
    }
    vc_list cases = {0};
    if (quick)
        variant_cases_quick(&cases);
    else
        variant_cases_all(&cases);
    if (g_tf32 && (storage != FLASHCL_DTYPE_DEFAULT || !tensor_cores || sm75)) {
        fprintf(stderr, "--tf32 needs --tensor-cores and float32 storage (no --storage, no --sm75)\n");
        return 2;
    }
    /* --tf32: every case in float32 with the opt-in (the 16-bit ones bring the larger head dims
       and tiles: d = 64 and 128 with GQA, varlen, dropout, block masks). */
    for (size_t i = 0; i < cases.count && g_tf32; i++) {
        cases.items[i].desc.dtype = FLASHCL_DTYPE_F32;
        cases.items[i].desc.allow_tf32 = 1;
    }
    if (g_tf32) add_tf32_head_dims(&cases);
    if (storage != FLASHCL_DTYPE_DEFAULT)
        for (size_t i = 0; i < cases.count; i++) cases.items[i].desc.dtype = storage;
    char desc[400];
    if (list_only) {
        for (size_t i = 0; i < cases.count; i++) {
            vc_describe(&cases.items[i], desc, sizeof desc);
            printf("%4zu %s\n", i, desc);
        }
        vc_list_free(&cases);
        return 0;
    }
    if (only >= (long)cases.count) {
        fprintf(stderr, "--case %ld: only %zu cases\n", only, cases.count);
        return 2;
    }

    if (sm75 && (!tensor_cores || storage != FLASHCL_DTYPE_F16)) {
        fprintf(stderr, "--sm75 needs --tensor-cores --storage f16 (the sm_75 form runs f16 only)\n");
        return 2;
    }
    if (recompute_ds && (!tensor_cores || storage == FLASHCL_DTYPE_DEFAULT || sm75 || g_tf32)) {
        fprintf(stderr, "--recompute-ds needs --tensor-cores and 16-bit storage (no --sm75, no --tf32)\n");
        return 2;
    }
    /* The tensor-core family reads FLASHCL_MMA_SM75 when a context first plans it, and
       FLASHCL_BWD_DS at each backward call. */
    if (sm75) setenv("FLASHCL_MMA_SM75", "1", 1);
    if (recompute_ds) setenv("FLASHCL_BWD_DS", "0", 1);
    flashcl_context *ctx = tu_context_create();
    const flashcl_dtype tc_type = g_tf32                             ? FLASHCL_DTYPE_F32
                                  : storage == FLASHCL_DTYPE_DEFAULT ? FLASHCL_DTYPE_BF16
                                                                     : storage;
    if (tensor_cores && device_has_tensor_cores(ctx, tc_type)) g_expect_forward = "flash_fwd_mma";
    printf("tensor-core forward expected: %s\n", g_expect_forward ? "yes" : "no (not planned for plain 16-bit)");
    if (backward_on_tc_only && !g_expect_forward) {
        g_forward_only = 1;
        printf("backward: skipped (the tensor-core family is not planned here)\n");
    }
    const char *vendor_path = getenv("FLASHCL_VENDOR_PATH");
    const int cc = nvidia_compute_capability(flashcl_context_device(ctx));
    const char *form = sm75 ? "--sm75" : g_tf32 ? "--tf32" : "--recompute-ds";
    if ((sm75 || g_tf32 || recompute_ds) &&
        (cc < (sm75 ? 75 : 80) || (vendor_path && strcmp(vendor_path, "off") == 0))) {
        /* Not an NVIDIA GPU with the instructions (or the vendor path is off): FLASHCL_MMA_SM75,
           allow_tf32 and FLASHCL_BWD_DS change nothing, and the cases would repeat another run's. */
        printf("%s: compute capability %d.%d, no tensor-core form to check here\n", form, cc / 10, cc % 10);
        flashcl_context_destroy(ctx);
        vc_list_free(&cases);
        return 77; /* CTest's SKIP_RETURN_CODE: reported as skipped, not passed */
    }
    if ((sm75 || g_tf32 || recompute_ds) && !g_expect_forward) {
        /* An NVIDIA GPU that has them, yet the plan is not the tensor cores': the probe or the build
           failed. That is what these runs are for. */
        flashcl_plan plan;
        plain_plan(ctx, tc_type, &plan);
        fprintf(stderr, "FAIL %s: compute capability %d.%d but the plain plan is %s: %s\n", form, cc / 10, cc % 10,
                plan.kernel, plan.reason);
        tu_fail_count();
    }
    if (sm75) CHECK(check_sm75_plans(ctx));
    if (tensor_cores && storage != FLASHCL_DTYPE_DEFAULT && !sm75 && cc >= 80 && g_expect_forward)
        CHECK(check_ds_plan(ctx, storage));
    g_expect_cpu = cpu_only || device_plans_cpu_family(ctx);
    printf("CPU family expected on the cases it covers: %s\n", g_expect_cpu ? "yes" : "no");
    size_t ran = 0, passed = 0;
    const vc_case *family_case = NULL;
    struct timespec t0;
    timespec_get(&t0, TIME_UTC);
    for (size_t i = 0; i < cases.count; i++) {
        const vc_case *c = &cases.items[i];
        if (c->desc.dropout_p > 0.0f && c->desc.causal && !c->nseq && !family_case) family_case = c;
        if ((only >= 0 && (size_t)only != i) || (skip >= 0 && (size_t)skip == i)) continue;
        if (cpu_only && !cpu_family_covers(c)) continue;
        if (g_tf32 && !c->desc.allow_tf32) continue;
        vc_describe(c, desc, sizeof desc);
        char label[480];
        snprintf(label, sizeof label, "case %zu %s", i, desc);
        if (fresh && ran > 0) {
            flashcl_context_destroy(ctx);
            ctx = tu_context_create();
        }
        struct timespec start;
        timespec_get(&start, TIME_UTC);
        int ok = run_case(ctx, c, label, NULL);
        printf("%s %s (%.2f s)\n", ok ? "ok  " : "FAIL", label, seconds_since(&start));
        fflush(stdout);
        ran++;
        passed += (size_t)ok;
    }
    flashcl_context_destroy(ctx);
    printf("%zu/%zu variant cases passed (%.1f s)\n", passed, ran, seconds_since(&t0));
    CHECK(ran > 0);
    if (family_check && only < 0) {
        REQUIRE(family_case != NULL);
        CHECK(check_families(family_case));
    }
    vc_list_free(&cases);
    return tu_finish("test_variants");
}
