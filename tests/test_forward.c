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

int main(int argc, char **argv) {
    sweep_options opt;
    sweep_parse_options(argc, argv,
                        "usage: test_forward [--quick] [--path flash|standard] [--case N] [--list] [--fresh-context]",
                        0, &opt);
    const int quick = opt.quick, list_only = opt.list_only, fresh = opt.fresh;
    const long only = opt.only;
    const flashcl_path path = opt.path;

    case_list cases = {0};
    if (quick)
        forward_cases_quick(&cases);
    else
        forward_cases_full(&cases);
    if (only >= (long)cases.count) {
        fprintf(stderr, "--case %ld: only %zu cases\n", only, cases.count);
        return 2;
    }

    char desc[256];
    if (list_only) {
        for (size_t i = 0; i < cases.count; i++) {
            tu_shape_describe(&cases.items[i], desc, sizeof desc);
            printf("%4zu %s\n", i, desc);
        }
        case_list_free(&cases);
        return 0;
    }

    const char *path_name = sweep_path_name(path);
    flashcl_context *ctx = tu_context_create();
    size_t ran = 0, passed = 0;
    struct timespec t0;
    timespec_get(&t0, TIME_UTC);
    for (size_t i = 0; i < cases.count; i++) {
        if (only >= 0 && (size_t)only != i) continue;
        tu_shape_describe(&cases.items[i], desc, sizeof desc);
        char label[320];
        snprintf(label, sizeof label, "case %zu %s %s", i, path_name, desc);

        if (fresh && ran > 0) {
            flashcl_context_destroy(ctx);
            ctx = tu_context_create();
        }
        struct timespec case_start;
        timespec_get(&case_start, TIME_UTC);
        cl_command_queue queue = flashcl_context_queue(ctx);
        tu_problem p;
        tu_problem_init(&p, flashcl_context_cl_context(ctx), &cases.items[i]);
        int ok = CHECK_STATUS(tu_problem_run(ctx, &p, path, 0, NULL, NULL), FLASHCL_SUCCESS);
        if (!ok) {
            fprintf(stderr, "  %s\n  last message: %s\n", label, flashcl_last_error(ctx));
        } else {
            /* A successful call clears the context's message. */
            CHECK(flashcl_last_error(ctx)[0] == '\0');
            ok = tu_problem_verify(&p, queue, NULL, label);
        }
        printf("%s %s (%.2f s)\n", ok ? "ok  " : "FAIL", label, sweep_seconds_since(&case_start));
        fflush(stdout);
        ran++;
        passed += (size_t)ok;
        tu_problem_free(&p);
    }
    printf("%zu/%zu cases passed (%s path, %.1f s)\n", passed, ran, path_name, sweep_seconds_since(&t0));
    CHECK(ran > 0);
    flashcl_context_destroy(ctx);
    case_list_free(&cases);
    return tu_finish("test_forward");
}
