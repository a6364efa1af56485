/* The roof `bench` compares against: a measured SGEMM rate (OpenBLAS, CPU
   devices only, when the tool was built with it), on other devices their
   float32 FMA rate measured by a kernel, or one given with --roof. */
#ifndef FLASHCL_TOOLS_ROOF_H
#define FLASHCL_TOOLS_ROOF_H

#include <stdbool.h>
#include <stdio.h>

#include <flashcl.h>

typedef struct bench_roof {
    double gflops;    /* NaN when there is no roof */
    char source[160]; /* how it was obtained, or why there is none */
} bench_roof;

/* user_gflops > 0: that roof (--roof). Otherwise on a CPU device, OpenBLAS
   cblas_sgemm on 2048^3 float32, best of 3 after a warm-up, on OpenBLAS's
   default threads (all cores), no roof without OpenBLAS; on other devices
   (GPUs) the float32 FMA rate: eight float4 FMA chains per work-item, 2048
   work-items per compute unit, timed on ctx's queue (idle) like the read
   kernel, best of 5 runs; 2 FLOPs per FMA. */
void roof_init(bench_roof *roof, flashcl_context *ctx, bool cpu_device, double user_gflops);

/* "roof     196.3 GFLOP/s (OpenBLAS ...)" or "roof     n/a (...)". */
void roof_print_line(FILE *out, const bench_roof *roof);
/* The "%roof" column for a rate: "51.2%" or "n/a". */
void roof_format_percent(char *buf, size_t cap, const bench_roof *roof, double gflops);
/* JSON members ,"roof_gflops":x,"roof_percent":y (null without a roof). */
void roof_json_fields(FILE *out, const bench_roof *roof, double gflops);
/* ,"roof_gflops":x,"roof_source":"..." for a summary object. */
void roof_json_summary(FILE *out, const bench_roof *roof);

#endif
