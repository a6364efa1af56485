/* Command line and timing shared by the correctness sweeps (test_forward, test_backward). */
#ifndef FLASHCL_TEST_SWEEP_OPTIONS_H
#define FLASHCL_TEST_SWEEP_OPTIONS_H

#include <flashcl.h>
#include <time.h>

typedef struct sweep_options {
    int quick;         /* --quick: the few small shapes the Oclgrind tests use */
    int list_only;     /* --list: print the cases with their indices */
    int fresh;         /* --fresh-context: a new context per case */
    int rerun;         /* 1 unless --no-rerun (only where allow_no_rerun) */
    long only;         /* --case N, or -1 for all */
    flashcl_path path; /* --path flash|standard */
} sweep_options;

/* Parses argv; prints `usage` and exits 2 on anything it does not know. */
void sweep_parse_options(int argc, char **argv, const char *usage, int allow_no_rerun, sweep_options *out);

const char *sweep_path_name(flashcl_path path);

double sweep_seconds_since(const struct timespec *t0);

/* A sweep's cases as the driver sees them: how many, how to describe case i, how to run it. */
typedef struct sweep_cases {
    size_t count;
    const void *items; /* the sweep's own case list */
    void (*describe)(const void *items, size_t i, char *out, size_t cap);
    /* 1 when case i passed; `label` names it in messages. */
    int (*run)(flashcl_context *ctx, const void *items, size_t i, const sweep_options *opt, const char *label);
} sweep_cases;

/* --list prints the cases; otherwise runs the chosen ones (all, or --case N) on one context (or a
   fresh one per case), a line "ok"/"FAIL" per case with its time, then the totals. Returns the
   exit status: tu_finish(test_name), or 2 for a --case past the list. */
int sweep_run(const sweep_options *opt, const sweep_cases *cases, const char *test_name);

#endif
