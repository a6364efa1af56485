/* SGEMM roof for `flashcl bench` (see roof.h). OpenBLAS is optional: built
   with FLASHCL_HAVE_OPENBLAS when CMake found it, otherwise only --roof. */
#include "roof.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json_print.h"
#include "timing.h"

#ifdef FLASHCL_HAVE_OPENBLAS
#include <cblas.h>

#define ROOF_N 2048
#define ROOF_RUNS 3

/* Best GFLOP/s of ROOF_RUNS sgemm calls after one warm-up, or NaN without memory. */
static double measure_sgemm(void) {
    const size_t n = ROOF_N, count = n * n;
    float *a = malloc(count * sizeof *a), *b = malloc(count * sizeof *b), *c = malloc(count * sizeof *c);
    double best = NAN;
    if (a && b && c) {
        for (size_t i = 0; i < count; ++i) {
            a[i] = (float)((i * 7u) % 13u) * 0.01f;
            b[i] = (float)((i * 5u) % 11u) * 0.01f;
        }
        memset(c, 0, count * sizeof *c);
        for (int run = 0; run <= ROOF_RUNS; ++run) {
            double t0 = wall_seconds();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a, (int)n, b, (int)n,
                        0.0f, c, (int)n);
            double ms = (wall_seconds() - t0) * 1e3;
            double gflops = 2.0 * (double)n * (double)n * (double)n / (ms * 1e-3) * 1e-9;
            if (run > 0 && (isnan(best) || gflops > best)) best = gflops;
        }
    }
    free(a);
    free(b);
    free(c);
    return best;
}
#endif

void roof_init(bench_roof *roof, bool cpu_device, double user_gflops) {
    roof->gflops = NAN;
    if (user_gflops > 0.0) {
        roof->gflops = user_gflops;
        snprintf(roof->source, sizeof roof->source, "given with --roof");
        return;
    }
    if (!cpu_device) {
        snprintf(roof->source, sizeof roof->source, "not a CPU device: give --roof GFLOPS");
        return;
    }
#ifdef FLASHCL_HAVE_OPENBLAS
    roof->gflops = measure_sgemm();
    snprintf(roof->source, sizeof roof->source, "OpenBLAS cblas_sgemm %dx%dx%d float32, best of %d, %s threads", ROOF_N,
             ROOF_N, ROOF_N, ROOF_RUNS, getenv("OPENBLAS_NUM_THREADS") ? "OPENBLAS_NUM_THREADS" : "default");
#else
    snprintf(roof->source, sizeof roof->source, "built without OpenBLAS: give --roof GFLOPS");
#endif
}

void roof_print_line(FILE *out, const bench_roof *roof) {
    if (isnan(roof->gflops))
        fprintf(out, "roof     n/a (%s)\n", roof->source);
    else
        fprintf(out, "roof     %.1f GFLOP/s (%s); %%roof = GFLOP/s / roof\n", roof->gflops, roof->source);
}

void roof_format_percent(char *buf, size_t cap, const bench_roof *roof, double gflops) {
    if (isnan(roof->gflops) || isnan(gflops))
        snprintf(buf, cap, "n/a");
    else
        snprintf(buf, cap, "%.1f%%", 100.0 * gflops / roof->gflops);
}

/* NaN (no roof, or no rate) prints as null. */
void roof_json_fields(FILE *out, const bench_roof *roof, double gflops) {
    json_member_number(out, "roof_gflops", roof->gflops);
    json_member_number(out, "roof_percent", 100.0 * gflops / roof->gflops);
}

void roof_json_summary(FILE *out, const bench_roof *roof) {
    json_member_number(out, "roof_gflops", roof->gflops);
    json_member_string(out, "roof_source", roof->source);
}
