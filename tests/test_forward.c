/*
 * Correctness sweep: FlashCL's output against the double-precision reference
 * over seqlens, head dims, GQA/MQA, masks, layouts, batch and scale.
 *
 *   test_forward [--quick] [--path flash|standard] [--case N] [--list] [--fresh-context]
 *
 * --quick runs a few small shapes (what the Oclgrind tests use); --case runs
 * one case of the chosen sweep by the index --list prints; --fresh-context
 * gives every case its own context (Oclgrind 21.10 reports false
 * "uninitialized" reads when a context's scratch buffer is released and
 * re-created larger, which the standard path does as shapes grow).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sweep_options.h"

#include "forward_cases.h"

static void describe(const void *items, size_t i, char *out, size_t cap) {
    tu_shape_describe(&((const tu_shape *)items)[i], out, cap);
}

static int run_case(flashcl_context *ctx, const void *items, size_t i, const sweep_options *opt, const char *label) {
    tu_problem p;
    tu_problem_init(&p, flashcl_context_cl_context(ctx), &((const tu_shape *)items)[i]);
    int ok = CHECK_STATUS(tu_problem_run(ctx, &p, opt->path, 0, NULL, NULL), FLASHCL_SUCCESS);
    if (!ok) {
        fprintf(stderr, "  %s\n  last message: %s\n", label, flashcl_last_error(ctx));
    } else {
        /* A successful call clears the context's message. */
        CHECK(flashcl_last_error(ctx)[0] == '\0');
        ok = tu_problem_verify(&p, flashcl_context_queue(ctx), NULL, label);
    }
    tu_problem_free(&p);
    return ok;
}

int main(int argc, char **argv) {
    sweep_options opt;
    sweep_parse_options(argc, argv,
                        "usage: test_forward [--quick] [--path flash|standard] [--case N] [--list] [--fresh-context]",
                        0, &opt);
    case_list cases = {0};
    if (opt.quick)
        forward_cases_quick(&cases);
    else
        forward_cases_full(&cases);
    const sweep_cases sweep = {cases.count, cases.items, describe, run_case};
    const int status = sweep_run(&opt, &sweep, "test_forward");
    case_list_free(&cases);
    return status;
}
