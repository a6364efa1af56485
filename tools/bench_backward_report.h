/*
 * `bench --backward` results: per path, three passes (forward, backward,
 * forward+backward), and the flash-versus-standard check of the gradients.
 * An aligned table for people, JSON lines for scripts.
 */
#ifndef FLASHCL_TOOLS_BENCH_BACKWARD_REPORT_H
#define FLASHCL_TOOLS_BENCH_BACKWARD_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include <flashcl.h>

#include "bench_report.h"
#include "bench_run.h"
#include "compare.h"

enum { BENCH_PASS_FWD, BENCH_PASS_BWD, BENCH_PASS_FWD_BWD, BENCH_PASS_COUNT };
enum { BENCH_GRAD_DQ, BENCH_GRAD_DK, BENCH_GRAD_DV, BENCH_GRAD_COUNT };

/* "fwd", "bwd", "fwd+bwd". */
const char *bench_pass_name(int pass);
/* "dq", "dk", "dv". */
const char *bench_grad_name(int grad);

/* FlashAttention's convention: the backward does 2.5 times the forward's FLOPs. */
#define BENCH_BWD_FLOP_RATIO 2.5

typedef struct bench_pass_report {
    bool ran;           /* timed successfully */
    bool skipped;       /* could not allocate its buffers; reason says why */
    char reason[1024];
    bench_result result;
    size_t bytes_extra; /* flashcl_context_scratch_bytes of the path's own context after the pass */
} bench_pass_report;

typedef struct bench_backward_path {
    const char *name;      /* "flash" or "standard" */
    bool selected;         /* asked for with --path */
    flashcl_plan fwd_plan; /* flashcl_plan_query */
    flashcl_plan bwd_plan; /* flashcl_backward_plan_query; scratch_bytes is the planned scratch */
    bool planned;          /* both plans are filled in */
    bench_pass_report passes[BENCH_PASS_COUNT];
} bench_backward_path;

typedef struct bench_backward_report {
    char device[256];
    flashcl_attention_desc desc; /* with heads_kv and seqlen_k filled in */
    size_t warmup;
    double flops[BENCH_PASS_COUNT]; /* fwd 4*b*hq*sq*sk*d (halved if causal), bwd 2.5x, both 3.5x */
    double bytes[BENCH_PASS_COUNT]; /* the tensors each pass reads or writes, once each */
    bench_backward_path paths[BENCH_PATH_COUNT];
    bool compared;                  /* both paths produced gradients */
    compare_result grads[BENCH_GRAD_COUNT];
    bench_roof roof;                /* the %roof column's divisor */
} bench_backward_report;

/* Whether every gradient agrees (true when nothing was compared). */
bool bench_backward_agree(const bench_backward_report *report);

void bench_backward_print_table(FILE *out, const bench_backward_report *report);
void bench_backward_print_json(FILE *out, const bench_backward_report *report);

#endif
