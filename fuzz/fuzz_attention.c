/*
 * libFuzzer target for descriptor and tensor-view validation. The input
 * bytes become a flashcl_attention_desc (tiny sizes, any causal/scale) and
 * four views (random offsets and strides) into buffers of random sizes.
 *
 * Plain inputs (nothing after the views) run flashcl_forward and must either
 * be refused with a status and a message, the output buffer untouched, or
 * succeed with O matching the double-precision reference and every output
 * byte outside the O view (the guard region) untouched.
 *
 * Inputs with bytes left after the views also set the variant fields
 * (fuzz_variants.c): the forward must refuse or run without writing outside
 * its outputs; the numbers are not checked there.
 *
 * Sizes are bounded (batch <= 2, heads <= 3, seqlen <= 5, head_dim 4 or 8)
 * so that each input is cheap; kernel builds are cached on disk
 * (FLASHCL_CACHE_DIR) and each distinct build option set costs one build.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "fuzz_variants.h"
#include "reference.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SENTINEL (-12345.0f)

static flashcl_context *g_ctx;

/* O against the reference; marks the O elements the view covers. */
static void check_reference(const flashcl_attention_desc *d, const flashcl_tensor views[4], float *const host[4],
                            const float *out, size_t out_floats, unsigned char *covered) {
    ref_problem p = ref_problem_from_desc(d);
    flashcl_tensor rv[4];
    for (int i = 0; i < 4; ++i) {
        int q_side = i == 0 || i == 3;
        rv[i] =
            ref_resolve_view(&views[i], q_side ? p.seqlen_q : p.seqlen_k, q_side ? p.heads_q : p.heads_kv, p.head_dim);
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
                    if (at >= out_floats) abort(); /* validation let a view past its buffer */
                    for (size_t byte = 0; byte < sizeof(float); ++byte) covered[at * sizeof(float) + byte] = 1;
                    double want = ref_o[n];
                    if (!(fabs(out[at] - want) <= 2e-5 + 1e-4 * fabs(want))) {
                        fprintf(stderr, "fuzz_attention: O[%zu] = %g, reference %g\n", at, out[at], want);
                        abort();
                    }
                }
    free(ref_o);
    free(ref_lse);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_ctx) {
        char err[256];
        if (flashcl_context_create(&g_ctx, NULL, err, sizeof err) != FLASHCL_SUCCESS) {
            fprintf(stderr, "fuzz_attention: no OpenCL device: %s\n", err);
            abort();
        }
    }
    fuzz_reader r = {data, size};
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = fuzz_next(&r) % 3; /* 0 is invalid on purpose */
    d.heads_q = fuzz_next(&r) % 4;
    d.heads_kv = fuzz_next(&r) % 4;
    d.seqlen_q = fuzz_next(&r) % 6;
    d.seqlen_k = fuzz_next(&r) % 6;
    /* Two head dims (0 = invalid, 4, 8): each new one is a kernel build. */
    d.head_dim = (fuzz_next(&r) % 3) * 4;
    d.causal = fuzz_next(&r) & 1;
    unsigned sc = fuzz_next(&r);
    d.scale = sc < 128 ? 0.0f : sc < 250 ? (float)(sc - 127) / 64.0f : sc == 250 ? -1.0f : sc == 251 ? NAN : INFINITY;
    flashcl_tensor views[4];
    fuzz_buffer bufs[4];
    float *host[4];
    for (int i = 0; i < 4; ++i) {
        size_t floats = 1 + (fuzz_next(&r) | (fuzz_next(&r) & 3) << 8); /* 1..1024 */
        host[i] = malloc(floats * sizeof(float));
        if (!host[i]) abort();
        if (i == 3)
            for (size_t j = 0; j < floats; ++j) host[i][j] = SENTINEL;
        else
            fuzz_fill_floats(host[i], floats, (unsigned)i);
        fuzz_buffer_make(&bufs[i], g_ctx, floats * sizeof(float), host[i]);
        views[i].buffer = bufs[i].mem;
        views[i].offset = fuzz_next(&r) % 32;
        /* Strides: zero (packed default) half the time, else anything small. */
        int packed = fuzz_next(&r) & 1;
        views[i].stride_batch = packed ? 0 : fuzz_next(&r) % 200;
        views[i].stride_head = packed ? 0 : fuzz_next(&r) % 60;
        views[i].stride_row = packed ? 0 : fuzz_next(&r) % 40;
    }
    if (r.n) {
        fuzz_variant_forward(g_ctx, &d, views, bufs, &r);
    } else {
        flashcl_status st =
            flashcl_forward(g_ctx, &d, &views[0], &views[1], &views[2], &views[3], NULL, 0, 0, NULL, NULL);
        unsigned char *out = fuzz_buffer_read(&bufs[3], g_ctx);
        unsigned char *covered = calloc(bufs[3].bytes, 1);
        if (!covered) abort();
        if (st == FLASHCL_SUCCESS) {
            if (*flashcl_last_error(g_ctx) != '\0') abort(); /* success leaves no message */
            check_reference(&d, views, host, (const float *)(const void *)out, bufs[3].bytes / sizeof(float), covered);
        } else if (*flashcl_last_error(g_ctx) == '\0') {
            abort(); /* a refusal must say why */
        }
        fuzz_buffer_check_guard(&bufs[3], out, covered, "o", st);
        free(covered);
        free(out);
    }
    for (int i = 0; i < 4; ++i) {
        fuzz_buffer_free(&bufs[i]);
        free(host[i]);
    }
    return 0;
}
