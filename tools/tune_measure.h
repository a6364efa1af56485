/*
 * One measurement of `flashcl tune`: a fresh context with FLASHCL_TILE set to
 * the candidate (so the library plans it exactly as an override), the
 * forward timed with OpenCL profiling events on the shape's realistic size,
 * then the same plan checked on a small problem (odd length, so partial
 * tiles run) against a double-precision reference. A candidate that does not
 * plan, fails, or disagrees is recorded and never wins. A decode shape is
 * checked with its own GQA group and query rows (so the check runs the same
 * build: the plan depends on the packed rows) against 517 keys, split.
 */
#ifndef FLASHCL_TOOLS_TUNE_MEASURE_H
#define FLASHCL_TOOLS_TUNE_MEASURE_H

#include <stdbool.h>
#include <stddef.h>

#include <flashcl.h>

typedef struct tune_shape {
    size_t batch, heads, seqlen, head_dim; /* heads: query heads; seqlen: query rows */
    flashcl_dtype dtype;
    bool causal;
    /* The decode family: KV heads (heads a multiple of them) and keys; a forward shape has
       heads_kv = heads and seqlen_k = seqlen. */
    bool decode;
    size_t heads_kv, seqlen_k;
} tune_shape;

typedef struct tune_measurement {
    bool planned;      /* the library accepted the candidate on this device */
    bool ran;          /* timed */
    bool verified;     /* agreed with the reference on the small case */
    double ms;         /* per call, from the events */
    size_t iters;      /* timed calls */
    flashcl_plan plan; /* as planned (origin "env") */
    char error[512];   /* why not, when !planned, !ran or !verified */
} tune_measurement;

/* The plan the library picks for the shape without FLASHCL_TILE or a tuning file. Returns a flashcl_status. */
int tune_untuned_plan(const char *device, const tune_shape *s, flashcl_plan *plan, char *err, size_t cap);

/* Measures tile on the shape; calls take about target_seconds in all. */
void tune_measure(const char *device, const char *tile, const tune_shape *s, double target_seconds,
                  tune_measurement *m);

#endif
