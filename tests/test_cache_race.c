/*
 * The program cache under concurrent processes (issue 20). Several processes
 * start at once on the same, empty FLASHCL_CACHE_DIR and each builds the
 * same kernels (the flash and standard forward) in a loop of contexts, so
 * they write and rename the same files while the others read them
 * (src/disk_cache.c: a per-process temporary name, then rename). Then:
 *  - every context's results match the reference;
 *  - after a process's first context, its later contexts build nothing from
 *    source (no clCreateProgramWithSource, counted by the shim): every file
 *    they opened was whole, since a torn or missing one is rebuilt;
 *  - at the end every file in the directory is a complete entry (its
 *    checksum holds) and no temporary file is left behind.
 * Damaged files (truncated, flipped, garbage) are test_cache's.
 *   test_cache_race [--procs N] [--rounds R] [--contexts C]
 * The parent never touches OpenCL: each child initialises its own platform after fork.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, fork */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cl_shim.h"
#include "problem.h"
#include "tmpdir.h"

/* ------------------------------------------------------------ a child */

/* One context: both paths on a small problem, verified. Returns 1 when all verified. */
static int run_context(int proc, int iter) {
    flashcl_context *ctx = tu_context_create();
    tu_shape shape = tu_shape_make(1, 4, 2, 33, 47, 32, 1, TU_BSHD);
    shape.seed = (uint64_t)(proc * 100 + iter + 1);
    tu_problem p;
    tu_problem_init(&p, flashcl_context_cl_context(ctx), &shape);
    cl_command_queue queue = flashcl_context_queue(ctx);
    int ok = 1;
    for (int path = 0; path < 2; ++path) {
        char label[96];
        snprintf(label, sizeof label, "process %d context %d [%s]", proc, iter, path ? "standard" : "flash");
        tu_problem_reset_outputs(&p, queue);
        flashcl_status st = tu_problem_run(ctx, &p, (flashcl_path)path, 0, NULL, NULL);
        if (st != FLASHCL_SUCCESS) {
            fprintf(stderr, "FAIL %s: %s: %s\n", label, flashcl_status_name(st), flashcl_last_error(ctx));
            ok = 0;
            continue;
        }
        ok &= tu_problem_verify(&p, queue, NULL, label);
    }
    tu_problem_free(&p);
    flashcl_context_destroy(ctx);
    return ok;
}

/* Waits for the parent's go (all children forked), then runs `contexts` contexts in a row. */
static int child_main(int proc, int go_fd, int contexts) {
    char byte;
    if (read(go_fd, &byte, 1) != 1) return 3;
    cl_shim_api shim;
    if (!cl_shim_load(&shim)) {
        fprintf(stderr, "FAIL the OpenCL shim is not loaded: run with LD_PRELOAD=libflashcl_cl_shim.so\n");
        return 1;
    }
    int ok = 1;
    for (int i = 0; i < contexts; ++i) {
        long built = shim.calls("clCreateProgramWithSource"), loaded = shim.calls("clCreateProgramWithBinary");
        ok &= run_context(proc, i);
        built = shim.calls("clCreateProgramWithSource") - built;
        loaded = shim.calls("clCreateProgramWithBinary") - loaded;
        /* This process's first context wrote (or found) every file the later ones need. */
        if (i > 0 && (built > 0 || loaded == 0)) {
            fprintf(stderr,
                    "FAIL process %d context %d built %ld program(s) from source and loaded %ld: a cache file was "
                    "unusable\n",
                    proc, i, built, loaded);
            ok = 0;
        }
    }
    return ok ? 0 : 1;
}

/* ------------------------------------------------------------ the files */

/* FNV-1a 64, as src/hash.c: the cache file's checksum. */
static uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* The layout src/disk_cache.c writes: "FLASHCLB" u32 format u32 ident_len ident u64 bin_len bin u64 checksum. */
static int file_whole(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char *buf = NULL;
    size_t size = 0, cap = 0, n;
    unsigned char chunk[65536];
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (size + n > cap) {
            cap = (size + n) * 2;
            unsigned char *grown = realloc(buf, cap);
            REQUIRE(grown != NULL);
            buf = grown;
        }
        memcpy(buf + size, chunk, n);
        size += n;
    }
    fclose(f);
    int ok = size >= 24 && memcmp(buf, "FLASHCLB", 8) == 0;
    uint32_t ident_len = 0;
    uint64_t bin_len = 0, sum = 0;
    if (ok) memcpy(&ident_len, buf + 12, 4);
    ok = ok && size >= 16 + (size_t)ident_len + 8;
    if (ok) memcpy(&bin_len, buf + 16 + ident_len, 8);
    ok = ok && size == 16 + (size_t)ident_len + 8 + bin_len + 8;
    if (ok) memcpy(&sum, buf + size - 8, 8);
    ok = ok && fnv1a(buf, size - 8) == sum;
    free(buf);
    return ok;
}

typedef struct file_tally {
    size_t whole, torn, temporary;
    char first[1200]; /* a whole file, for the checker's own test */
} file_tally;

static void check_file(const char *path, void *user) {
    file_tally *t = user;
    const char *name = strrchr(path, '/');
    name = name ? name + 1 : path;
    if (strstr(name, ".tmp.")) {
        fprintf(stderr, "FAIL a temporary file was left behind: %s\n", path);
        t->temporary++;
    } else if (file_whole(path)) {
        if (!t->whole++) snprintf(t->first, sizeof t->first, "%s", path);
    } else {
        fprintf(stderr, "FAIL %s is not a whole cache entry\n", path);
        t->torn++;
    }
}

/* The checker itself: a whole file cut by one byte must read as torn. */
static void check_checker(const char *path) {
    char cut[1300];
    snprintf(cut, sizeof cut, "%s.cut", path);
    FILE *in = fopen(path, "rb"), *out = fopen(cut, "wb");
    REQUIRE(in && out);
    int c, prev = fgetc(in);
    while (prev != EOF && (c = fgetc(in)) != EOF) {
        fputc(prev, out);
        prev = c;
    }
    fclose(in);
    fclose(out);
    CHECK(!file_whole(cut));
    remove(cut);
}

/* ------------------------------------------------------------ the race */

/* One round: N children on a fresh directory, released together. Returns the failed children. */
static int race_round(int round, int procs, int contexts) {
    char *dir = tu_tmpdir_make("flashcl-cache-race");
    REQUIRE(setenv("FLASHCL_CACHE_DIR", dir, 1) == 0);
    int go[2];
    REQUIRE(pipe(go) == 0);
    pid_t *pids = calloc((size_t)procs, sizeof *pids);
    REQUIRE(pids != NULL);
    fflush(NULL); /* or the children would print the parent's buffered lines again */
    for (int i = 0; i < procs; ++i) {
        pids[i] = fork();
        REQUIRE(pids[i] >= 0);
        if (pids[i] == 0) {
            close(go[1]);
            int code = child_main(i, go[0], contexts);
            fflush(NULL);
            _exit(code);
        }
    }
    close(go[0]);
    for (int i = 0; i < procs; ++i) REQUIRE(write(go[1], "g", 1) == 1);
    close(go[1]);
    int failed = 0, skipped = 0;
    for (int i = 0; i < procs; ++i) {
        int status = 0;
        REQUIRE(waitpid(pids[i], &status, 0) == pids[i]);
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        if (code == TU_EXIT_SKIP)
            skipped++;
        else if (code != 0) {
            fprintf(stderr, "FAIL round %d: process %d exited with %d\n", round, i, code);
            failed++;
        }
    }
    free(pids);
    if (skipped == procs) {
        printf("skipped: no OpenCL device\n");
        exit(TU_EXIT_SKIP);
    }
    file_tally t;
    memset(&t, 0, sizeof t);
    tu_tmpdir_files(dir, check_file, &t);
    if (t.whole) check_checker(t.first);
    printf("round %d: %d processes x %d contexts on one fresh cache: %d failed; %zu whole file(s), %zu torn, %zu "
           "temporary\n",
           round, procs, contexts, failed, t.whole, t.torn, t.temporary);
    CHECK(t.whole > 0 && t.torn == 0 && t.temporary == 0);
    tu_tmpdir_remove(dir);
    free(dir);
    return failed;
}

int main(int argc, char **argv) {
    int procs = 3, rounds = 2, contexts = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--procs") == 0)
            procs = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--rounds") == 0)
            rounds = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--contexts") == 0)
            contexts = atoi(argv[i + 1]);
    }
    REQUIRE(procs >= 2 && rounds >= 1 && contexts >= 2);
    for (int r = 0; r < rounds; ++r)
        if (race_round(r, procs, contexts)) tu_fail_count();
    return tu_finish("test_cache_race");
}
