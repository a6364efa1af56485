/* The roof `bench` compares against: a measured SGEMM rate (OpenBLAS, CPU
   devices only, when the tool was built with it), on other devices their
   float32 FMA rate measured by a kernel, or one given with --roof. */
#ifndef FLASHCL_TOOLS_ROOF_H
#define FLASHCL_TOOLS_ROOF_H

#include <stdbool.h>

#include <flashcl.h>

#include "bench_ceiling.h"

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

/* Its names for bench_ceiling.h: "roof     196.3 GFLOP/s (OpenBLAS ...); %roof = GFLOP/s / roof", the
   "%roof" column, JSON "roof_gflops", "roof_percent" and "roof_source". */
extern const bench_ceiling_names roof_names;

#endif
