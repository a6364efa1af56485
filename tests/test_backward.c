/*
 * Backward correctness sweep: flashcl_backward (or flashcl_standard_backward)
 * against the double-precision reference gradients.
 *
 *   test_backward [--quick] [--path flash|standard] [--case N] [--list]
 *                 [--fresh-context] [--no-rerun]
 *
 * Every case runs flashcl_forward first, so the backward consumes the O and
 * LSE the library itself produced (checked too), exactly as an application's
 * would; the backward waits on the forward's event. The backward then runs a
 * second time into fresh output buffers, which must hold the same bytes: the
 * library promises run-to-run identical gradients (no atomics).
 * --quick runs a few tiny shapes (what the Oclgrind tests use); --case runs
 * one case by the index --list prints; --fresh-context gives every case its
 * own context (Oclgrind 21.10 reports false "uninitialized" reads of a
 * scratch buffer that was released and re-created larger); --no-rerun skips
 * the second run (under Oclgrind it would double the time and find nothing new).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sweep_options.h"

#include "backward_cases.h"

/* The same backward into fresh output buffers must give the same bytes. */
static int check_rerun(flashcl_context *ctx, const bw_problem *p, flashcl_path path, const char *label) {
    bw_grads again;
    bw_grads_init(&again, flashcl_context_cl_context(ctx), p);
    int ok = 0;
    char what[512];
    snprintf(what, sizeof what, "%s (rerun)", label);
    if (CHECK_STATUS(bw_problem_backward(ctx, p, path, &again, 0, NULL, NULL), FLASHCL_SUCCESS))
        ok = bw_grads_same_bits(&p->grads, &again, flashcl_context_queue(ctx), what);
    else
        fprintf(stderr, "  %s\n  last message: %s\n", what, flashcl_last_error(ctx));
    bw_grads_release(&again);
    return ok;
}

/* Forward, backward, verify, rerun and compare bits. Returns 1 when the case passed. */
static int run_case(flashcl_context *ctx, const bw_shape *shape, flashcl_path path, int rerun, const char *label) {
    cl_command_queue queue = flashcl_context_queue(ctx);
    cl_context cl_ctx = flashcl_context_cl_context(ctx);
    bw_problem p;
    bw_problem_init(&p, cl_ctx, shape);
    int ok = 0;
    char what[512];
    cl_event fwd = NULL, bwd = NULL;
    if (!CHECK_STATUS(bw_problem_forward(ctx, &p, &fwd), FLASHCL_SUCCESS)) {
        fprintf(stderr, "  %s (forward)\n  last message: %s\n", label, flashcl_last_error(ctx));
        goto done;
    }
    if (!CHECK_STATUS(bw_problem_backward(ctx, &p, path, &p.grads, 1, &fwd, &bwd), FLASHCL_SUCCESS)) {
        fprintf(stderr, "  %s\n  last message: %s\n", label, flashcl_last_error(ctx));
        goto done;
    }
    CHECK(bwd != NULL);
    /* A successful call clears the context's message. */
    CHECK(flashcl_last_error(ctx)[0] == '\0');

    snprintf(what, sizeof what, "%s (forward)", label);
    ok = tu_problem_verify(&p.fwd, queue, fwd, what);
    ok &= bw_grads_verify(&p, &p.grads, queue, bwd, label);

    if (rerun) ok &= check_rerun(ctx, &p, path, label);
done:
    if (fwd) clReleaseEvent(fwd);
    if (bwd) clReleaseEvent(bwd);
    bw_problem_free(&p);
    return ok;
}

static void describe(const void *items, size_t i, char *out, size_t cap) {
    bw_shape_describe(&((const bw_shape *)items)[i], out, cap);
}

static int run_indexed(flashcl_context *ctx, const void *items, size_t i, const sweep_options *opt,
                       const char *label) {
    return run_case(ctx, &((const bw_shape *)items)[i], opt->path, opt->rerun, label);
}

int main(int argc, char **argv) {
    sweep_options opt;
    sweep_parse_options(argc, argv,
                        "usage: test_backward [--quick] [--path flash|standard] [--case N] [--list] "
                        "[--fresh-context] [--no-rerun]",
                        1, &opt);
    bw_case_list cases = {0};
    if (opt.quick)
        backward_cases_quick(&cases);
    else
        backward_cases_full(&cases);
    const sweep_cases sweep = {cases.count, cases.items, describe, run_indexed};
    const int status = sweep_run(&opt, &sweep, "test_backward");
    bw_case_list_free(&cases);
    return status;
}
