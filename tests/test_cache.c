/*
 * The on-disk program cache (FLASHCL_CACHE_DIR): a first context fills it,
 * a second reuses it with identical results, and damaged files of every kind
 * are rebuilt rather than trusted. "off" must write nothing anywhere.
 * setenv happens before each context, which is when the library reads it.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, chdir, getcwd */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "problem.h"
#include "tmpdir.h"

/* Both paths' outputs from one context, kept to compare contexts bit for bit. */
typedef struct outputs {
    float *o[2];
    float *lse[2];
    size_t o_count, lse_count;
} outputs;

/* Runs both paths in a new context; checks them and keeps the outputs. */
static void run_context(const tu_shape *shape, const char *label, outputs *out) {
    flashcl_context *ctx = tu_context_create();
    tu_problem p;
    tu_problem_init(&p, flashcl_context_cl_context(ctx), shape);
    cl_command_queue queue = flashcl_context_queue(ctx);
    for (int path = 0; path < 2; path++) {
        char what[128];
        snprintf(what, sizeof what, "%s [%s]", label, path ? "standard" : "flash");
        tu_problem_reset_outputs(&p, queue);
        if (!CHECK_STATUS(tu_problem_run(ctx, &p, (flashcl_path)path, 0, NULL, NULL), FLASHCL_SUCCESS))
            fprintf(stderr, "  %s: %s\n", what, flashcl_last_error(ctx));
        tu_problem_verify(&p, queue, NULL, what);
        if (out) tu_problem_read(&p, queue, NULL, &out->o[path], &out->lse[path]);
    }
    if (out) {
        out->o_count = p.o.count;
        out->lse_count = p.lse_count;
    }
    tu_problem_free(&p);
    flashcl_context_destroy(ctx);
}

static void free_outputs(outputs *o) {
    for (int i = 0; i < 2; i++) {
        free(o->o[i]);
        free(o->lse[i]);
    }
}

typedef enum damage { TRUNCATE_EMPTY, TRUNCATE_HALF, FLIP_MIDDLE, GARBAGE, DAMAGE_COUNT } damage;
static const char *k_damage_names[] = {"truncated to 0 bytes", "truncated to half", "bytes flipped in the middle",
                                       "replaced by garbage"};

static void damage_file(const char *path, void *user) {
    damage how = *(const damage *)user;
    struct stat st;
    REQUIRE(stat(path, &st) == 0);
    size_t size = (size_t)st.st_size;
    FILE *f;
    switch (how) {
    case TRUNCATE_EMPTY:
    case TRUNCATE_HALF:
        REQUIRE(truncate(path, how == TRUNCATE_EMPTY ? 0 : (off_t)(size / 2)) == 0);
        break;
    case FLIP_MIDDLE:
        f = fopen(path, "r+b");
        REQUIRE(f != NULL);
        for (size_t i = size / 2; i < size / 2 + 64 && i < size; i++) {
            REQUIRE(fseek(f, (long)i, SEEK_SET) == 0);
            int c = fgetc(f);
            REQUIRE(fseek(f, (long)i, SEEK_SET) == 0);
            fputc(c ^ 0x5a, f);
        }
        fclose(f);
        break;
    case GARBAGE: {
        tu_rng rng = tu_rng_seed(size);
        f = fopen(path, "wb");
        REQUIRE(f != NULL);
        for (size_t i = 0; i < size + 100; i++) fputc((int)(tu_rng_next(&rng) & 0xff), f);
        fclose(f);
        break;
    }
    case DAMAGE_COUNT:
        break;
    }
}

static void check_cache_dir(const tu_shape *shape) {
    char *dir = tu_tmpdir_make("flashcl-cache-test");
    REQUIRE(setenv("FLASHCL_CACHE_DIR", dir, 1) == 0);

    flashcl_context *ctx = tu_context_create();
    const char *in_use = flashcl_context_cache_dir(ctx);
    if (strncmp(in_use, dir, strlen(dir)) != 0) {
        fprintf(stderr, "FAIL cache dir in use is \"%s\", expected it under \"%s\"\n", in_use, dir);
        tu_fail_count();
    }
    flashcl_context_destroy(ctx);

    outputs first, second;
    memset(&first, 0, sizeof first);
    memset(&second, 0, sizeof second);
    run_context(shape, "cold cache", &first);
    size_t files = tu_tmpdir_files(dir, NULL, NULL);
    printf("cold cache: %zu file(s) written to %s\n", files, dir);
    CHECK(files > 0);

    run_context(shape, "warm cache", &second);
    for (int path = 0; path < 2; path++) {
        CHECK(memcmp(first.o[path], second.o[path], first.o_count * sizeof(float)) == 0);
        CHECK(memcmp(first.lse[path], second.lse[path], first.lse_count * sizeof(float)) == 0);
    }

    for (damage how = 0; how < DAMAGE_COUNT; how++) {
        char label[96];
        size_t damaged = tu_tmpdir_files(dir, damage_file, &how);
        snprintf(label, sizeof label, "cache %s", k_damage_names[how]);
        printf("%s: %zu file(s)\n", label, damaged);
        CHECK(damaged > 0);
        run_context(shape, label, NULL);
    }
    free_outputs(&first);
    free_outputs(&second);
    tu_tmpdir_remove(dir);
    free(dir);
}

/*
 * "off": no files in the default locations, nor in the working directory.
 * The OpenCL platform was initialised (by check_cache_dir) before HOME
 * moves, so a driver's own cache (POCL's ~/.cache/pocl) is not redirected
 * into the directory this checks.
 */
static void check_cache_off(const tu_shape *shape, const char *off) {
    char *home = tu_tmpdir_make("flashcl-cache-off");
    char cwd[4096];
    REQUIRE(getcwd(cwd, sizeof cwd) != NULL);
    REQUIRE(setenv("HOME", home, 1) == 0);
    REQUIRE(setenv("XDG_CACHE_HOME", home, 1) == 0);
    REQUIRE(setenv("FLASHCL_CACHE_DIR", off, 1) == 0);
    REQUIRE(chdir(home) == 0);

    flashcl_context *ctx = tu_context_create();
    CHECK(strcmp(flashcl_context_cache_dir(ctx), "") == 0);
    flashcl_context_destroy(ctx);
    run_context(shape, "cache off", NULL);
    size_t files = tu_tmpdir_files(home, NULL, NULL);
    if (files) {
        fprintf(stderr, "FAIL FLASHCL_CACHE_DIR=%s: %zu file(s) appeared under %s\n", off, files, home);
        tu_fail_count();
    }
    REQUIRE(chdir(cwd) == 0);
    tu_tmpdir_remove(home);
    free(home);
}

int main(void) {
    /* Any small shape will do: each cache directory starts empty, so it is built cold. */
    tu_shape shape = tu_shape_make(1, 4, 2, 65, 33, 32, 1, TU_BSHD);
    check_cache_dir(&shape);
    check_cache_off(&shape, "off");
    check_cache_off(&shape, "OFF"); /* any case: CMake's spelling made a directory named OFF */
    return tu_finish("test_cache");
}
