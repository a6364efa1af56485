/* `bench` results: an aligned table for people, JSON lines for scripts. */
#ifndef FLASHCL_TOOLS_BENCH_REPORT_H
#define FLASHCL_TOOLS_BENCH_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include <flashcl.h>

#include "bench_run.h"
#include "compare.h"
#include "roof.h"

enum { BENCH_FLASH = 0, BENCH_STANDARD = 1, BENCH_PATH_COUNT = 2 };

typedef struct bench_path_report {
    const char *name;     /* "flash" or "standard" */
    bool selected;        /* asked for with --path */
    bool ran;             /* timed successfully */
    bool skipped;         /* could not allocate its buffers; reason says why */
    char reason[1024];
    flashcl_plan plan;
    bench_result result;
    size_t bytes_extra;   /* device memory beyond inputs and outputs */
} bench_path_report;

typedef struct bench_report {
    char device[256];
    flashcl_attention_desc desc; /* with heads_kv and seqlen_k filled in */
    size_t warmup;
    double flops;                /* 4*b*hq*sq*sk*d, halved when causal */
    double bytes;                /* minimum traffic: Q, K, V read once, O written once */
    bench_path_report paths[BENCH_PATH_COUNT];
    bool compared;
    compare_result comparison;
    bench_roof roof;             /* the %roof column's divisor */
} bench_report;

/* Tolerance of the flash-versus-standard check: |flash - std| <= ATOL + RTOL * |std|. */
#define BENCH_ATOL 1e-3
#define BENCH_RTOL 1e-2

void bench_print_table(FILE *out, const bench_report *report);
void bench_print_json(FILE *out, const bench_report *report);

/* JSON members (each with its leading comma) shared with the backward report. */
/* device, batch, heads, kv_heads, seqlen, seqlen_k, head_dim, causal, dtype, head_dim_v */
void bench_json_problem_fields(FILE *out, const char *device, const flashcl_attention_desc *desc);
/* kernel, block_rows, block_cols, work_group_size, staging, local_mem_bytes */
void bench_json_plan_fields(FILE *out, const flashcl_plan *plan);

#endif
