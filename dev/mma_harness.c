/*
 * Kernel-development harness for the NVIDIA tensor-core forward
 * (cl/flash_fwd_mma.cl), independent of the library: builds the .cl files
 * directly, after the preludes the library puts first (read_program), runs
 * the probe, checks the kernel on small shapes against a double-precision
 * reference, then times the shapes.
 *
 *   cmake -S . -B build -DFLASHCL_BUILD_DEV=ON && cmake --build build --target mma_harness
 *   (or: cc -O2 -std=c11 dev/mma_harness.c -lOpenCL -lm -o mma_harness)
 *   ./mma_harness cl [warps:bc:mt[:maxrregcount[:qlocal]] ...]   (kernel variants to check and time; default 4:64:2)
 *
 * Built only when asked (FLASHCL_BUILD_DEV) and not run by CI: it needs an NVIDIA sm_80+ device.
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(x)                                                                                                       \
    do {                                                                                                               \
        cl_int e_ = (x);                                                                                               \
        if (e_ != CL_SUCCESS) {                                                                                        \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, e_);                                          \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static cl_context ctx;
static cl_command_queue queue;
static cl_device_id dev;

static char *read_text(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) exit(1);
    s[n] = 0;
    fclose(f);
    return s;
}

/* A kernel source as the library assembles it (src/kernel_sources.c): the
   preludes in the same order, then the kernel, each followed by a newline. */
static char *read_program(const char *dir, const char *name) {
    static const char *const prelude[] = {"common.cl", "variants.cl", "ptx.cl"};
    enum { PRELUDE = sizeof prelude / sizeof prelude[0] };
    char *parts[PRELUDE + 1];
    size_t total = 1;
    for (size_t i = 0; i <= PRELUDE; ++i) {
        parts[i] = read_text(dir, i < PRELUDE ? prelude[i] : name);
        total += strlen(parts[i]) + 1;
    }
    char *all = malloc(total), *at = all;
    if (!all) exit(1);
    for (size_t i = 0; i <= PRELUDE; ++i) {
        const size_t len = strlen(parts[i]);
        memcpy(at, parts[i], len);
        at += len;
        *at++ = '\n';
        free(parts[i]);
    }
    *at = 0;
    return all;
}

static cl_program build(const char *src, const char *opts, int verbose) {
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    err = clBuildProgram(p, 1, &dev, opts, NULL, NULL);
    size_t n = 0;
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
    char *log = malloc(n + 1);
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, n, log, NULL);
    log[n] = 0;
    if (err != CL_SUCCESS) {
        fprintf(stderr, "build failed (%d) with %s:\n%s\n", err, opts, log);
        exit(1);
    }
    if (verbose) {
        /* ptxas lines: registers, spills, shared memory. */
        char *line = strtok(log, "\n");
        while (line) {
            if (strstr(line, "egisters") || strstr(line, "spill") || strstr(line, "smem") || strstr(line, "stack") ||
                strstr(line, "ptxas") || strstr(line, "Used"))
                printf("  ptxas: %s\n", line);
            line = strtok(NULL, "\n");
        }
    }
    free(log);
    return p;
}

static uint16_t f2bf(float x) { /* round to nearest even */
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}
static uint16_t f2h(float x) { /* normal range, round to nearest even; enough for test data */
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    int e = (int)((u >> 23) & 0xff) - 127 + 15;
    uint32_t m = u & 0x7fffff;
    if ((u & 0x7fffffff) == 0) return (uint16_t)sign;
    if (e <= 0) { /* subnormal */
        m |= 0x800000;
        int shift = 14 - e;
        if (shift > 24) return (uint16_t)sign;
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = m >> 13, rem = m & 0x1fff;
    uint32_t out = sign | ((uint32_t)e << 10) | r;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) out++;
    return (uint16_t)out;
}
static float h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float x;
    if (e == 0)
        x = ldexpf((float)m, -24);
    else
        x = ldexpf((float)(m | 0x400), (int)e - 25);
    uint32_t u;
    memcpy(&u, &x, 4);
    u |= sign;
    memcpy(&x, &u, 4);
    return x;
}

static int run_probe(const char *dir) {
    char *src = read_program(dir, "probe_mma.cl");
    cl_program p = build(src, "", 0);
    cl_int err;
    cl_kernel k = clCreateKernel(p, "probe_mma", &err);
    CHECK(err);
    uint16_t in[896];
    float A[16][16], B[16][8]; /* B[k][n] */
    for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 16; ++j) A[i][j] = (float)((i * 3 + j * 5) % 7 - 3);
    for (int kk = 0; kk < 16; ++kk)
        for (int n = 0; n < 8; ++n) B[kk][n] = (float)((kk * 2 + n * 3) % 5 - 2);
    for (int i = 0; i < 256; ++i) in[i] = f2bf(A[i / 16][i % 16]), in[512 + i] = f2h(A[i / 16][i % 16]);
    for (int n = 0; n < 8; ++n)
        for (int kk = 0; kk < 16; ++kk) in[256 + n * 16 + kk] = f2bf(B[kk][n]), in[768 + n * 16 + kk] = f2h(B[kk][n]);
    for (int kk = 0; kk < 16; ++kk)
        for (int n = 0; n < 8; ++n) in[384 + kk * 8 + n] = f2bf(B[kk][n]);
    cl_mem bin = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof in, in, &err);
    CHECK(err);
    cl_mem bout = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, 480 * 4, NULL, &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof bin, &bin));
    CHECK(clSetKernelArg(k, 1, sizeof bout, &bout));
    size_t g = 32;
    CHECK(clEnqueueNDRangeKernel(queue, k, 1, NULL, &g, &g, 0, NULL, NULL));
    float out[480];
    CHECK(clEnqueueReadBuffer(queue, bout, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    int bad = 0;
    for (int i = 0; i < 16; ++i)
        for (int n = 0; n < 8; ++n) {
            float r = 0;
            for (int kk = 0; kk < 16; ++kk) r += A[i][kk] * B[kk][n];
            for (int t = 0; t < 3; ++t)
                if (out[t * 128 + i * 8 + n] != r) {
                    if (bad < 5) printf("probe: mma %d [%d][%d] = %g, want %g\n", t, i, n, out[t * 128 + i * 8 + n], r);
                    bad++;
                }
        }
    for (int l = 0; l < 32; ++l) {
        if (out[384 + l] != 496.0f) bad++;
        if (out[416 + l] != -18.5f * l || out[448 + l] != -18.5f * l) {
            if (bad < 5) printf("probe: pack lane %d: %g %g\n", l, out[416 + l], out[448 + l]);
            bad++;
        }
    }
    printf("probe: %s (%d mismatches)\n", bad ? "FAIL" : "ok", bad);
    clReleaseMemObject(bin);
    clReleaseMemObject(bout);
    clReleaseKernel(k);
    clReleaseProgram(p);
    free(src);
    return bad == 0;
}

typedef struct {
    int b, hq, hkv, sq, sk, d, causal, f16;
} shape;

/* A kernel variant: "warps:bc:mt[:maxrregcount[:qlocal]]" on the command line. */
typedef struct {
    int warps, bc, mt, maxrreg, qlocal;
} variant;

static double now_ms(cl_event e0, cl_event e1) {
    cl_ulong t0, t1;
    clGetEventProfilingInfo(e0, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
    clGetEventProfilingInfo(e1, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    return (double)(t1 - t0) * 1e-6;
}

static cl_kernel get_kernel(const char *src, int d, const variant *va, int f16, int verbose) {
    char opts[256], rr[64] = "";
    if (va->maxrreg) snprintf(rr, sizeof rr, " -cl-nv-maxrregcount=%d", va->maxrreg);
    /* Q resident in __local needs d = 64 or 128 (swizzle); other dims take the register form. */
    snprintf(opts, sizeof opts,
             "-cl-mad-enable -cl-nv-verbose -DHEAD_DIM=%d -DMMA_WARPS=%d -DMMA_BC=%d -DMMA_MT=%d -DMMA_QLOCAL=%d "
             "-DMMA_F16=%d -D HEAD_DIM_V=%d%s",
             d, va->warps, va->bc, va->mt, va->qlocal && d % 64 == 0, f16, d, rr);
    if (verbose) printf("build %s\n", opts);
    cl_program p = build(src, opts, verbose);
    cl_int err;
    cl_kernel k = clCreateKernel(p, "flash_fwd_mma", &err);
    CHECK(err);
    clReleaseProgram(p);
    return k;
}

static void set_args(cl_kernel k, const shape *s, cl_mem q, cl_mem kb, cl_mem v, cl_mem o, cl_mem lse) {
    cl_uint a = 0;
    cl_mem bufs[4] = {q, kb, v, o};
    int rows[4] = {s->sq, s->sk, s->sk, s->sq}, heads[4] = {s->hq, s->hkv, s->hkv, s->hq};
    for (int i = 0; i < 4; ++i) {
        cl_ulong off = 0, sr = (cl_ulong)heads[i] * s->d, sh = (cl_ulong)s->d, sb = (cl_ulong)rows[i] * sr;
        CHECK(clSetKernelArg(k, a++, sizeof(cl_mem), &bufs[i]));
        CHECK(clSetKernelArg(k, a++, 8, &off));
        CHECK(clSetKernelArg(k, a++, 8, &sb));
        CHECK(clSetKernelArg(k, a++, 8, &sh));
        CHECK(clSetKernelArg(k, a++, 8, &sr));
    }
    cl_ulong lse_off = 0;
    cl_int wl = 1, sq = s->sq, sk = s->sk, hq = s->hq, group = s->hq / s->hkv, causal = s->causal;
    cl_float sl = (cl_float)(1.0 / sqrt((double)s->d) * 1.4426950408889634);
    CHECK(clSetKernelArg(k, a++, sizeof(cl_mem), &lse));
    CHECK(clSetKernelArg(k, a++, 8, &lse_off));
    CHECK(clSetKernelArg(k, a++, 4, &wl));
    CHECK(clSetKernelArg(k, a++, 4, &sq));
    CHECK(clSetKernelArg(k, a++, 4, &sk));
    CHECK(clSetKernelArg(k, a++, 4, &hq));
    CHECK(clSetKernelArg(k, a++, 4, &group));
    CHECK(clSetKernelArg(k, a++, 4, &sl));
    /* VARIANT_ARGS (cl/variants.cl): the window (causal folded in as (-1, 0)), softcap 0, and
       for every feature that is off a dummy buffer (Q's) with zero offsets and strides. */
    const cl_int win_left = -1, win_right = causal ? 0 : -1, one = 1;
    const cl_float zero_f = 0.0f, one_f = 1.0f;
    const cl_ulong zero = 0;
    const cl_uint zero_u = 0;
    CHECK(clSetKernelArg(k, a++, 4, &win_left));
    CHECK(clSetKernelArg(k, a++, 4, &win_right));
    CHECK(clSetKernelArg(k, a++, 4, &zero_f));
    /* alibi (buffer, off, sb), sinks (buffer, off), bias/mask/block mask (buffer + 4 each) */
    static const int ulongs_after[] = {2, 1, 4, 4, 4};
    for (int f = 0; f < 5; ++f) {
        CHECK(clSetKernelArg(k, a++, sizeof(cl_mem), &q));
        for (int u = 0; u < ulongs_after[f]; ++u) CHECK(clSetKernelArg(k, a++, 8, &zero));
    }
    CHECK(clSetKernelArg(k, a++, 4, &one));                                /* bmask_bq */
    CHECK(clSetKernelArg(k, a++, 4, &one));                                /* bmask_bk */
    CHECK(clSetKernelArg(k, a++, sizeof(cl_mem), &q));                     /* cu_q */
    CHECK(clSetKernelArg(k, a++, sizeof(cl_mem), &q));                     /* cu_k */
    CHECK(clSetKernelArg(k, a++, 4, &zero_u));                             /* drop_threshold */
    CHECK(clSetKernelArg(k, a++, 4, &one_f));                              /* drop_scale */
    for (int u = 0; u < 4; ++u) CHECK(clSetKernelArg(k, a++, 4, &zero_u)); /* seeds, offsets */
}

/* Checks one shape against a double reference on the 16-bit-rounded inputs. */
static int check_shape(const char *src, const shape *s, const variant *va) {
    size_t nq = (size_t)s->b * s->sq * s->hq * s->d, nk = (size_t)s->b * s->sk * s->hkv * s->d;
    uint16_t *hq = malloc(nq * 2), *hk = malloc(nk * 2), *hv = malloc(nk * 2), *ho = malloc(nq * 2);
    float *fq = malloc(nq * 4), *fk = malloc(nk * 4), *fv = malloc(nk * 4);
    size_t nl = (size_t)s->b * s->hq * s->sq;
    float *lse = malloc(nl * 4);
    srand(1234 + s->sq * 7 + s->sk);
    for (size_t i = 0; i < nq; ++i) {
        float x = (float)rand() / RAND_MAX * 4 - 2;
        hq[i] = s->f16 ? f2h(x) : f2bf(x);
        fq[i] = s->f16 ? h2f(hq[i]) : bf2f(hq[i]);
    }
    for (size_t i = 0; i < nk; ++i) {
        float x = (float)rand() / RAND_MAX * 4 - 2, y = (float)rand() / RAND_MAX * 2 - 1;
        hk[i] = s->f16 ? f2h(x) : f2bf(x);
        fk[i] = s->f16 ? h2f(hk[i]) : bf2f(hk[i]);
        hv[i] = s->f16 ? f2h(y) : f2bf(y);
        fv[i] = s->f16 ? h2f(hv[i]) : bf2f(hv[i]);
    }
    cl_int err;
    cl_mem bq = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nq * 2, hq, &err);
    cl_mem bk = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nk * 2, hk, &err);
    cl_mem bv = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nk * 2, hv, &err);
    memset(ho, 0xff, nq * 2); /* poison: NaN in both formats */
    cl_mem bo = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, nq * 2, ho, &err);
    cl_mem bl = clCreateBuffer(ctx, CL_MEM_READ_WRITE, nl * 4, NULL, &err);
    CHECK(err);
    cl_kernel k = get_kernel(src, s->d, va, s->f16, 0);
    set_args(k, s, bq, bk, bv, bo, bl);
    int br = 16 * va->mt * va->warps;
    size_t g[3] = {(size_t)((s->sq + br - 1) / br) * 32 * va->warps, (size_t)s->hq, (size_t)s->b},
           l[3] = {32 * (size_t)va->warps, 1, 1};
    CHECK(clEnqueueNDRangeKernel(queue, k, 3, NULL, g, l, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(queue, bo, CL_TRUE, 0, nq * 2, ho, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(queue, bl, CL_TRUE, 0, nl * 4, lse, 0, NULL, NULL));
    double num = 0, den = 0, maxerr = 0, lse_err = 0;
    int bad = 0;
    double *p = malloc((size_t)s->sk * sizeof(double)), *o = malloc((size_t)s->d * sizeof(double));
    double scale = 1.0 / sqrt((double)s->d);
    int group = s->hq / s->hkv;
    for (int b = 0; b < s->b; ++b)
        for (int h = 0; h < s->hq; ++h)
            for (int i = 0; i < s->sq; ++i) {
                const float *qr = fq + (((size_t)b * s->sq + i) * s->hq + h) * s->d;
                double mx = -INFINITY;
                for (int j = 0; j < s->sk; ++j) {
                    if (s->causal && j > i + s->sk - s->sq) {
                        p[j] = -INFINITY;
                        continue;
                    }
                    const float *kr = fk + (((size_t)b * s->sk + j) * s->hkv + h / group) * s->d;
                    double acc = 0;
                    for (int c = 0; c < s->d; ++c) acc += (double)qr[c] * kr[c];
                    p[j] = acc * scale;
                    if (p[j] > mx) mx = p[j];
                }
                double sum = 0;
                for (int c = 0; c < s->d; ++c) o[c] = 0;
                if (mx != -INFINITY)
                    for (int j = 0; j < s->sk; ++j) {
                        if (p[j] == -INFINITY) continue;
                        double e = exp(p[j] - mx);
                        sum += e;
                        const float *vr = fv + (((size_t)b * s->sk + j) * s->hkv + h / group) * s->d;
                        for (int c = 0; c < s->d; ++c) o[c] += e * vr[c];
                    }
                double ref_lse = sum > 0 ? mx + log(sum) : -INFINITY;
                float got_lse = lse[((size_t)b * s->hq + h) * s->sq + i];
                if (ref_lse == -INFINITY) {
                    if (!(isinf(got_lse) && got_lse < 0)) bad++;
                } else {
                    double e = fabs(got_lse - ref_lse);
                    if (!(e <= 1e-2)) bad++;
                    if (e > lse_err || e != e) lse_err = e;
                }
                const uint16_t *orow = ho + (((size_t)b * s->sq + i) * s->hq + h) * s->d;
                for (int c = 0; c < s->d; ++c) {
                    double r = sum > 0 ? o[c] / sum : 0;
                    double g2 = s->f16 ? h2f(orow[c]) : bf2f(orow[c]);
                    double e = fabs(g2 - r);
                    if (!(e <= 2e-2)) bad++;
                    if (e > maxerr || e != e) maxerr = e;
                    num += (g2 - r) * (g2 - r);
                    den += r * r;
                }
            }
    double rel = sqrt(num / (den > 0 ? den : 1));
    printf("check w%d bc%d mt%d ql%d b%d hq%d hkv%d sq%d sk%d d%d causal%d %s: rel_l2 %.2e max_abs %.2e lse_max %.2e "
           "-> %s\n",
           va->warps, va->bc, va->mt, va->qlocal, s->b, s->hq, s->hkv, s->sq, s->sk, s->d, s->causal,
           s->f16 ? "f16" : "bf16", rel, maxerr, lse_err, bad || !(rel < 1e-2) ? "FAIL" : "ok");
    clReleaseKernel(k);
    clReleaseMemObject(bq);
    clReleaseMemObject(bk);
    clReleaseMemObject(bv);
    clReleaseMemObject(bo);
    clReleaseMemObject(bl);
    free(hq), free(hk), free(hv), free(ho), free(fq), free(fk), free(fv), free(lse), free(p), free(o);
    return bad == 0 && rel < 1e-2;
}

static void bench_shape(const char *src, const shape *s, const variant *va) {
    size_t nq = (size_t)s->b * s->sq * s->hq * s->d, nk = (size_t)s->b * s->sk * s->hkv * s->d;
    uint16_t *h = malloc((nq > nk ? nq : nk) * 2);
    for (size_t i = 0; i < (nq > nk ? nq : nk); ++i) h[i] = f2bf((float)rand() / RAND_MAX * 2 - 1);
    cl_int err;
    cl_mem bq = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nq * 2, h, &err);
    cl_mem bk = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nk * 2, h, &err);
    cl_mem bv = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nk * 2, h, &err);
    cl_mem bo = clCreateBuffer(ctx, CL_MEM_READ_WRITE, nq * 2, NULL, &err);
    cl_mem bl = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)s->b * s->hq * s->sq * 4, NULL, &err);
    CHECK(err);
    cl_kernel k = get_kernel(src, s->d, va, s->f16, 1);
    set_args(k, s, bq, bk, bv, bo, bl);
    int br = 16 * va->mt * va->warps;
    size_t g[3] = {(size_t)((s->sq + br - 1) / br) * 32 * va->warps, (size_t)s->hq, (size_t)s->b},
           l[3] = {32 * (size_t)va->warps, 1, 1};
    for (int i = 0; i < 3; ++i) CHECK(clEnqueueNDRangeKernel(queue, k, 3, NULL, g, l, 0, NULL, NULL));
    CHECK(clFinish(queue));
    double t[15];
    for (int r = 0; r < 15; ++r) {
        cl_event e;
        CHECK(clEnqueueNDRangeKernel(queue, k, 3, NULL, g, l, 0, NULL, &e));
        CHECK(clWaitForEvents(1, &e));
        t[r] = now_ms(e, e);
        clReleaseEvent(e);
    }
    for (int i = 0; i < 15; ++i) /* median */
        for (int j = i + 1; j < 15; ++j)
            if (t[j] < t[i]) {
                double x = t[i];
                t[i] = t[j], t[j] = x;
            }
    double flops = 4.0 * s->b * s->hq * (double)s->sq * s->sk * s->d * (s->causal ? 0.5 : 1.0);
    printf("BENCH w%d bc%d mt%d rr%d ql%d b%d h%d N%d d%d causal%d: %.3f ms  %.1f TF/s\n", va->warps, va->bc, va->mt,
           va->maxrreg, va->qlocal, s->b, s->hq, s->sq, s->d, s->causal, t[7], flops / (t[7] * 1e-3) / 1e12);
    clReleaseKernel(k);
    clReleaseMemObject(bq);
    clReleaseMemObject(bk);
    clReleaseMemObject(bv);
    clReleaseMemObject(bo);
    clReleaseMemObject(bl);
    free(h);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "cl";
    cl_platform_id plats[8];
    cl_uint np = 0;
    CHECK(clGetPlatformIDs(8, plats, &np));
    cl_uint nd = 0;
    for (cl_uint i = 0; i < np && !nd; ++i)
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_GPU, 1, &dev, &nd) != CL_SUCCESS) nd = 0;
    if (!nd) {
        fprintf(stderr, "no GPU\n");
        return 1;
    }
    cl_int err;
    ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    queue = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    CHECK(err);
    if (!run_probe(dir)) return 1;
    char *src = read_program(dir, "flash_fwd_mma.cl");
    int fails = 0;
    variant vars[16] = {{4, 64, 2, 0, 0}};
    int nw = 1;
    if (argc > 2) {
        nw = 0;
        for (int i = 2; i < argc && nw < 16; ++i) {
            variant x = {4, 64, 2, 0, 0};
            sscanf(argv[i], "%d:%d:%d:%d:%d", &x.warps, &x.bc, &x.mt, &x.maxrreg, &x.qlocal);
            vars[nw++] = x;
        }
    }
    const shape checks[] = {
        {1, 2, 2, 200, 200, 64, 0, 0},  {1, 2, 2, 200, 200, 128, 0, 0}, {1, 2, 2, 200, 200, 128, 1, 0},
        {2, 4, 2, 77, 130, 64, 1, 0},   {1, 4, 1, 130, 77, 128, 1, 0},  {1, 2, 2, 1, 1, 64, 0, 0},
        {1, 2, 2, 1, 300, 128, 1, 0},   {1, 2, 1, 129, 129, 128, 0, 1}, {1, 2, 2, 300, 1, 64, 1, 1},
        {1, 1, 1, 256, 256, 128, 1, 0},
    };
    for (int w = 0; w < nw; ++w)
        for (size_t i = 0; i < sizeof checks / sizeof checks[0]; ++i) fails += !check_shape(src, &checks[i], &vars[w]);
    const shape bench[] = {
        {4, 16, 16, 4096, 4096, 128, 0, 0},
        {4, 16, 16, 4096, 4096, 128, 1, 0},
        {1, 16, 16, 16384, 16384, 128, 1, 0},
        {16, 16, 16, 1024, 1024, 64, 0, 0},
    };
    for (int w = 0; w < nw; ++w)
        for (size_t i = 0; i < sizeof bench / sizeof bench[0]; ++i) bench_shape(src, &bench[i], &vars[w]);
    printf("harness: %d check failures\n", fails);
    free(src);
    return fails != 0;
}
