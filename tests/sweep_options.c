#include "sweep_options.h"

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage_exit(const char *usage) {
    fprintf(stderr, "%s\n", usage);
    exit(2);
}

void sweep_parse_options(int argc, char **argv, const char *usage, int allow_no_rerun, sweep_options *out) {
    sweep_options o = {0, 0, 0, 1, -1, FLASHCL_PATH_FLASH};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            o.quick = 1;
        } else if (!strcmp(argv[i], "--fresh-context")) {
            o.fresh = 1;
        } else if (allow_no_rerun && !strcmp(argv[i], "--no-rerun")) {
            o.rerun = 0;
        } else if (!strcmp(argv[i], "--list")) {
            o.list_only = 1;
        } else if (!strcmp(argv[i], "--path") && i + 1 < argc) {
            const char *name = argv[++i];
            if (!strcmp(name, "flash"))
                o.path = FLASHCL_PATH_FLASH;
            else if (!strcmp(name, "standard"))
                o.path = FLASHCL_PATH_STANDARD;
            else
                usage_exit(usage);
        } else if (!strcmp(argv[i], "--case") && i + 1 < argc) {
            char *end;
            o.only = strtol(argv[++i], &end, 10);
            if (*end || o.only < 0) usage_exit(usage);
        } else {
            usage_exit(usage);
        }
    }
    *out = o;
}

const char *sweep_path_name(flashcl_path path) { return path == FLASHCL_PATH_FLASH ? "flash" : "standard"; }

double sweep_seconds_since(const struct timespec *t0) {
    struct timespec t1;
    timespec_get(&t1, TIME_UTC);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

int sweep_run(const sweep_options *opt, const sweep_cases *cases, const char *test_name) {
    if (opt->only >= (long)cases->count) {
        fprintf(stderr, "--case %ld: only %zu cases\n", opt->only, cases->count);
        return 2;
    }
    char desc[400], label[480];
    if (opt->list_only) {
        for (size_t i = 0; i < cases->count; i++) {
            cases->describe(cases->items, i, desc, sizeof desc);
            printf("%4zu %s\n", i, desc);
        }
        return 0;
    }
    const char *path_name = sweep_path_name(opt->path);
    flashcl_context *ctx = tu_context_create();
    size_t ran = 0, passed = 0;
    struct timespec t0;
    timespec_get(&t0, TIME_UTC);
    for (size_t i = 0; i < cases->count; i++) {
        if (opt->only >= 0 && (size_t)opt->only != i) continue;
        cases->describe(cases->items, i, desc, sizeof desc);
        snprintf(label, sizeof label, "case %zu %s %s", i, path_name, desc);
        if (opt->fresh && ran > 0) {
            flashcl_context_destroy(ctx);
            ctx = tu_context_create();
        }
        struct timespec case_start;
        timespec_get(&case_start, TIME_UTC);
        const int ok = cases->run(ctx, cases->items, i, opt, label);
        printf("%s %s (%.2f s)\n", ok ? "ok  " : "FAIL", label, sweep_seconds_since(&case_start));
        fflush(stdout);
        ran++;
        passed += (size_t)ok;
    }
    printf("%zu/%zu cases passed (%s path, %.1f s)\n", passed, ran, path_name, sweep_seconds_since(&t0));
    CHECK(ran > 0);
    flashcl_context_destroy(ctx);
    return tu_finish(test_name);
}
