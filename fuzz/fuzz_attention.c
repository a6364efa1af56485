/*
 * libFuzzer target for descriptor and tensor-view validation: the input
 * bytes become a flashcl_attention_desc (tiny sizes, any causal/scale) and
 * four views (random offsets and strides) into buffers of random sizes, and
 * flashcl_forward runs on a POCL context made once. Either the call returns
 * a non-success status and the output buffer is untouched, or it succeeds,
 * O matches the double-precision reference, and every element of the output
 * buffer outside the O view (the guard region) is untouched. Anything else
 * aborts, which libFuzzer reports as a finding.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashcl.h"
#include "reference.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SENTINEL (-12345.0f)

/* Reads the input a byte at a time; zeros once it runs out. */
typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static unsigned next(reader *r) {
    if (!r->n) return 0;
    --r->n;
    return *r->p++;
}

static flashcl_context *g_ctx;

static cl_mem make_buffer(size_t floats, const float *init) {
    cl_int err;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(g_ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                              floats * sizeof(float), (void *)(uintptr_t)init, &err);
    if (err != CL_SUCCESS) abort();
    return m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_ctx) {
        char err[256];
        if (flashcl_context_create(&g_ctx, NULL, err, sizeof err) != FLASHCL_SUCCESS) {
            fprintf(stderr, "fuzz_attention: no OpenCL device: %s\n", err);
            abort();
        }
    }
    reader r = {data, size};
    flashcl_attention_desc d = {0};
    d.batch = next(&r) % 3;            /* 0 is invalid on purpose */
    d.heads_q = next(&r) % 4;
    d.heads_kv = next(&r) % 4;
    d.seqlen_q = next(&r) % 6;
    d.seqlen_k = next(&r) % 6;
    /* Two head dims (0 = invalid, 4, 8): each new one is a kernel build, seconds under ASan. */
    d.head_dim = (next(&r) % 3) * 4;
    d.causal = next(&r) & 1;
    unsigned sc = next(&r);
    d.scale = sc < 128 ? 0.0f : sc < 250 ? (float)(sc - 127) / 64.0f : sc == 250 ? -1.0f : sc == 251 ? NAN : INFINITY;
    flashcl_tensor views[4];
    size_t floats[4];
    float *host[4];
    cl_mem bufs[4];
    for (int i = 0; i < 4; ++i) {
        floats[i] = 1 + (next(&r) | (next(&r) & 3) << 8); /* 1..1024 */
        host[i] = malloc(floats[i] * sizeof(float));
        if (!host[i]) abort();
        for (size_t j = 0; j < floats[i]; ++j) host[i][j] = i == 3 ? SENTINEL : (float)((j * 37 + i * 11) % 23) / 11.0f - 1.0f;
        bufs[i] = make_buffer(floats[i], host[i]);
        views[i].buffer = bufs[i];
        views[i].offset = next(&r) % 32;
        /* Strides: zero (packed default) half the time, else anything small. */
        int packed = next(&r) & 1;
        views[i].stride_batch = packed ? 0 : next(&r) % 200;
        views[i].stride_head = packed ? 0 : next(&r) % 60;
        views[i].stride_row = packed ? 0 : next(&r) % 40;
    }
    flashcl_status st = flashcl_forward(g_ctx, &d, &views[0], &views[1], &views[2], &views[3], NULL, 0, 0, NULL, NULL);
    float *out = malloc(floats[3] * sizeof(float));
    if (!out) abort();
    if (clEnqueueReadBuffer(flashcl_context_queue(g_ctx), bufs[3], CL_TRUE, 0, floats[3] * sizeof(float), out, 0, NULL,
                            NULL) != CL_SUCCESS)
        abort();
    unsigned char *covered = calloc(floats[3], 1);
    if (!covered) abort();
    if (st == FLASHCL_SUCCESS) {
        if (*flashcl_last_error(g_ctx) != '\0') abort(); /* success leaves no message */
        ref_problem p = ref_problem_from_desc(&d);
        flashcl_tensor rv[4];
        for (int i = 0; i < 4; ++i) {
            int q_side = i == 0 || i == 3;
            rv[i] = ref_resolve_view(&views[i], q_side ? p.seqlen_q : p.seqlen_k, q_side ? p.heads_q : p.heads_kv,
                                     p.head_dim);
        }
        double *ref_o = malloc(p.batch * p.heads_q * p.seqlen_q * p.head_dim * sizeof(double));
        double *ref_lse = malloc(p.batch * p.heads_q * p.seqlen_q * sizeof(double));
        if (!ref_o || !ref_lse) abort();
        ref_attention(&p, host[0], &rv[0], host[1], &rv[1], host[2], &rv[2], ref_o, ref_lse);
        size_t n = 0;
        for (size_t b = 0; b < p.batch; ++b)
            for (size_t h = 0; h < p.heads_q; ++h)
                for (size_t row = 0; row < p.seqlen_q; ++row)
                    for (size_t c = 0; c < p.head_dim; ++c, ++n) {
                        size_t at = ref_index(&rv[3], b, h, row, c);
                        if (at >= floats[3]) abort(); /* validation let a view past its buffer */
                        covered[at] = 1;
                        double want = ref_o[n];
                        if (!(fabs(out[at] - want) <= 2e-5 + 1e-4 * fabs(want))) {
                            fprintf(stderr, "fuzz_attention: O[%zu] = %g, reference %g\n", at, out[at], want);
                            abort();
                        }
                    }
        free(ref_o);
        free(ref_lse);
    } else if (*flashcl_last_error(g_ctx) == '\0') {
        abort(); /* a refusal must say why */
    }
    for (size_t j = 0; j < floats[3]; ++j)
        if (!covered[j] && memcmp(&out[j], &host[3][j], sizeof(float)) != 0) {
            fprintf(stderr, "fuzz_attention: status %s but O buffer element %zu outside the view changed\n",
                    flashcl_status_name(st), j);
            abort();
        }
    free(covered);
    free(out);
    for (int i = 0; i < 4; ++i) {
        clReleaseMemObject(bufs[i]);
        free(host[i]);
    }
    return 0;
}
