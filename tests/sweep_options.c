#include "sweep_options.h"

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
