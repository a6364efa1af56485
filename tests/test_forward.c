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

#include "forward_cases.h"

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    timespec_get(&t1, TIME_UTC);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

static void usage(void)
{
    fprintf(stderr, "usage: test_forward [--quick] [--path flash|standard] [--case N] [--list] "
                    "[--fresh-context]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int quick = 0, list_only = 0, fresh = 0;
    long only = -1;
    flashcl_path path = FLASHCL_PATH_FLASH;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else if (!strcmp(argv[i], "--fresh-context")) {
            fresh = 1;
        } else if (!strcmp(argv[i], "--list")) {
            list_only = 1;
        } else if (!strcmp(argv[i], "--path") && i + 1 < argc) {
            const char *name = argv[++i];
            if (!strcmp(name, "flash"))
                path = FLASHCL_PATH_FLASH;
            else if (!strcmp(name, "standard"))
                path = FLASHCL_PATH_STANDARD;
            else
                usage();
        } else if (!strcmp(argv[i], "--case") && i + 1 < argc) {
            char *end;
            only = strtol(argv[++i], &end, 10);
            if (*end || only < 0)
                usage();
        } else {
            usage();
        }
    }

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

    const char *path_name = path == FLASHCL_PATH_FLASH ? "flash" : "standard";
    flashcl_context *ctx = tu_context_create();
    size_t ran = 0, passed = 0;
    struct timespec t0;
    timespec_get(&t0, TIME_UTC);
    for (size_t i = 0; i < cases.count; i++) {
        if (only >= 0 && (size_t)only != i)
            continue;
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
        printf("%s %s (%.2f s)\n", ok ? "ok  " : "FAIL", label, seconds_since(&case_start));
        fflush(stdout);
        ran++;
        passed += (size_t)ok;
        tu_problem_free(&p);
    }
    printf("%zu/%zu cases passed (%s path, %.1f s)\n", passed, ran, path_name, seconds_since(&t0));
    CHECK(ran > 0);
    flashcl_context_destroy(ctx);
    case_list_free(&cases);
    return tu_finish("test_forward");
}
