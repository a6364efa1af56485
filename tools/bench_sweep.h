/*
 * `flashcl bench --sweep`: the same job (bench_runner.h) at each power of
 * two from min to max of the sequence length (of the keys alone for a
 * decode shape: its context length), one JSON line per path and pass plus a
 * summary per point (bench_print_json) and a CSV row per path and pass, each
 * file written whole at the end (atomic_file). A point's wall time bounds
 * the sweep: the next one (4x the work, 2x for decode) is not started when
 * it would pass max_seconds; the standard path drops out by itself where its
 * N x N buffers do not fit. With --json, stdout is a JSON array of the CSV's
 * rows (one object each, the CSV's columns as keys) instead of the tables.
 */
#ifndef FLASHCL_TOOLS_BENCH_SWEEP_H
#define FLASHCL_TOOLS_BENCH_SWEEP_H

#include <stdbool.h>
#include <stddef.h>

#include "bench_runner.h"

typedef struct bench_sweep_spec {
    size_t min, max;    /* powers of two */
    bool keys_only;     /* decode: seqlen_k sweeps, seqlen_q stays */
    double max_seconds; /* per point */
    const char *json_path, *csv_path;
    bool json_stdout; /* --json: stdout gets a JSON array of the CSV's rows as objects, not the tables */
} bench_sweep_spec;

/* Runs the sweep; returns the exit status (printing why on failure). */
int bench_sweep(bench_job *job, const bench_sweep_spec *spec);

#endif
