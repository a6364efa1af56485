/*
 * The one printer of `bench` results, for every mode: an aligned table for
 * people, JSON lines for scripts (one object per path and pass, then a
 * summary). With a single pass the table and the summary name no pass
 * (the forward-only layout); with several, each row and ratio names its.
 */
#ifndef FLASHCL_TOOLS_BENCH_REPORT_H
#define FLASHCL_TOOLS_BENCH_REPORT_H

#include <stdio.h>

#include "bench_runner.h"

void bench_print_table(FILE *out, const bench_job *job, const bench_results *results);
void bench_print_json(FILE *out, const bench_job *job, const bench_results *results);
/* A path's storage type as the JSON and the sweep's CSV name it: "float32", "float16", "bfloat16". */
const char *bench_dtype_name(flashcl_dtype dtype);

#endif
