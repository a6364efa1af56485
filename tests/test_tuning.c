/*
 * The tuning file (src/tuning.c) as the plan chain sees it: a file written
 * for this context's identity, with a valid checksum, gives origin "tuned"
 * and exactly its sizes; a corrupt, truncated, foreign, unparsable or
 * oversized file is ignored, the note saying why appears in the tuning
 * query and at the front of the plan's reason, and the plan is the untuned
 * one. Runs on a CPU device (the CPU family's sizes); skips elsewhere.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#endif

#include <flashcl.h>

#include "testutil.h"
#include "tmpdir.h"
#include "tuning_text.h"

static char g_path[1200]; /* test-only scratch; the library has no such state */

static void write_text(const char *text, size_t n) { tt_write_text(g_path, text, n); }
static void write_sealed(const char *identity, const char *body) { tt_write_sealed(g_path, identity, body); }

/* A fresh context (it reads the file at creation), its tuning info and the d=32 forward plan. */
static void plan_at(flashcl_tuning_info *info, flashcl_plan *plan, int causal, size_t head_dim) {
    flashcl_context *ctx = tu_context_create();
    REQUIRE(ctx != NULL);
    memset(info, 0, sizeof *info);
    info->struct_size = sizeof *info;
    CHECK_STATUS(flashcl_tuning_query(ctx, info), FLASHCL_SUCCESS);
    flashcl_attention_desc d = flashcl_attention_desc_init();
    d.batch = 1;
    d.heads_q = 2;
    d.seqlen_q = 256;
    d.head_dim = head_dim;
    d.causal = causal;
    CHECK_STATUS(flashcl_plan_query(ctx, &d, plan), FLASHCL_SUCCESS);
    flashcl_context_destroy(ctx);
}

static void plan_now(flashcl_tuning_info *info, flashcl_plan *plan, int causal) { plan_at(info, plan, causal, 32); }

/* Makes dir unwritable (on) or writable again (off); returns whether it is unwritable now. Root passes
   permission bits, so as root the directory is made immutable (Linux, CAP_LINUX_IMMUTABLE), which
   stops root's writes too; where neither works the check is skipped. */
static int read_only(const char *dir, int on) {
    if (geteuid() != 0) {
        REQUIRE(chmod(dir, on ? 0500 : 0700) == 0);
    } else {
#ifdef __linux__
        int fd = open(dir, O_RDONLY | O_DIRECTORY), flags = 0;
        if (fd >= 0 && ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0) {
            flags = on ? flags | FS_IMMUTABLE_FL : flags & ~FS_IMMUTABLE_FL;
            (void)ioctl(fd, FS_IOC_SETFLAGS, &flags);
        }
        if (fd >= 0) close(fd);
#endif
    }
    return access(dir, W_OK | X_OK) != 0;
}

static void expect_ignored(const char *what, const char *note_part) {
    flashcl_tuning_info info;
    flashcl_plan plan;
    plan_now(&info, &plan, 0);
    if (!strstr(info.note, note_part) || strcmp(plan.origin, "tuned") == 0 || !strstr(plan.reason, "ignored") ||
        info.entries != 0) {
        fprintf(stderr, "%s: note \"%s\", origin %s, reason \"%.120s\", %zu entries\n", what, info.note, plan.origin,
                plan.reason, info.entries);
        tu_fail_count();
    }
}

int main(void) {
    char *dir = tu_tmpdir_make("flashcl-tuning");
    REQUIRE(dir != NULL);
    snprintf(g_path, sizeof g_path, "%s/tuning.txt", dir);
    setenv("FLASHCL_TUNING", g_path, 1);
    unsetenv("FLASHCL_TILE");

    flashcl_tuning_info info;
    flashcl_plan plan;
    plan_now(&info, &plan, 0); /* no file yet: the untuned plan, no note */
    CHECK(strcmp(info.path, g_path) == 0);
    CHECK(info.note[0] == '\0' && info.off == 0);
    if (strcmp(plan.kernel, "flash_fwd_cpu") != 0) {
        printf("test_tuning: skipped (the device runs %s, not the CPU family)\n", plan.kernel);
        tu_tmpdir_remove(dir);
        free(dir);
        return TU_EXIT_SKIP;
    }
    CHECK(strcmp(plan.origin, "tuned") != 0);
    const int untuned_rows = plan.block_rows; /* the table's (a built-in tuned entry may change it) */
    char identity[sizeof info.identity];
    snprintf(identity, sizeof identity, "%s", info.identity);
    const char *good = "measured d=32 dtype=f32 causal=0 tile=kernel=cpu,br=16,bc=48 size=b1_h8_n1024 ms=2 "
                       "verified=1\ntuned d=32 dtype=f32 causal=0 tile=kernel=cpu,br=32,bc=96\n";

    /* Read: origin tuned with the file's sizes; causal (not in the file) stays untuned. */
    write_sealed(identity, good);
    plan_now(&info, &plan, 0);
    CHECK(info.entries == 1 && info.note[0] == '\0');
    CHECK(strcmp(plan.origin, "tuned") == 0);
    CHECK(plan.block_rows == 32 && plan.block_cols == 96);
    plan_now(&info, &plan, 1);
    CHECK(strcmp(plan.origin, "tuned") != 0);

    /* Corrupt: one byte changed after sealing. */
    write_sealed(identity, good);
    {
        FILE *f = fopen(g_path, "r+b");
        REQUIRE(f != NULL);
        char text[8192];
        size_t n = fread(text, 1, sizeof text, f);
        char *bc = strstr(text, "bc=96");
        REQUIRE(bc != NULL);
        bc[3] = '0';
        rewind(f);
        REQUIRE(fwrite(text, 1, n, f) == n);
        fclose(f);
    }
    expect_ignored("corrupt", "corrupt");

    /* Truncated: the checksum line (or part of it) lost. */
    {
        char text[8192];
        int n = snprintf(text, sizeof text, "%s%s", identity, good);
        write_text(text, (size_t)n);
        expect_ignored("truncated (no checksum)", "truncated");
        write_sealed(identity, good);
        FILE *f = fopen(g_path, "rb");
        REQUIRE(f != NULL);
        size_t got = fread(text, 1, sizeof text, f);
        fclose(f);
        write_text(text, got - 5);
        expect_ignored("truncated (half a checksum)", "truncated");
    }

    /* FLASHCL_TUNING naming a directory or an unreadable path: the note says which (it said "unreadable or
       over 1048576 bytes" for both). */
    setenv("FLASHCL_TUNING", dir, 1);
    expect_ignored("a directory", "is a directory");
    setenv("FLASHCL_TUNING", g_path, 1);

    /* Foreign: another driver, sealed correctly. */
    {
        char foreign[sizeof identity];
        snprintf(foreign, sizeof foreign, "%s", identity);
        char *drv = strstr(foreign, "\ndriver=");
        REQUIRE(drv != NULL);
        drv[8] = drv[8] == 'X' ? 'Y' : 'X';
        write_sealed(foreign, good);
        expect_ignored("foreign driver", "another device");
        /* The note names the field that differs, with the file's value and this context's. */
        char want[512], ours[128];
        const char *drv_ours = strstr(identity, "\ndriver=") + 8;
        snprintf(ours, sizeof ours, "%.*s", (int)strcspn(drv_ours, "\n"), drv_ours);
        snprintf(want, sizeof want, "driver: the file's '%c%s', this context's '%s')", drv[8], ours + 1, ours);
        expect_ignored("foreign driver, named", want);
        /* ... and another library version. */
        snprintf(foreign, sizeof foreign, "%s", identity);
        char *lib = strstr(foreign, "\nlibrary=");
        REQUIRE(lib != NULL);
        lib[9] = '9';
        write_sealed(foreign, good);
        expect_ignored("foreign library", "another device");
        snprintf(want, sizeof want, "library: the file's '9%s', this context's '%s')", &FLASHCL_VERSION_STRING[1],
                 FLASHCL_VERSION_STRING);
        expect_ignored("foreign library, named", want);
        /* ... and a field the old note never named (the platform's version), left out of the file altogether. */
        snprintf(foreign, sizeof foreign, "%s", identity);
        char *pv = strstr(foreign, "\nplatform_version=");
        REQUIRE(pv != NULL);
        pv[1] = 'x';
        write_sealed(foreign, good);
        expect_ignored("foreign platform version", "(platform_version: not in the file, this context's '");
    }

    /* Sealed and ours, but a line that does not parse, or a plan the grammar rejects. */
    write_sealed(identity, "tuned d=32 dtype=f32 causal=0 tile=kernel=cpu,br=32,bc=96 extra\n");
    expect_ignored("extra field", "does not parse");
    write_sealed(identity, "tuned d=32 dtype=f64 causal=0 tile=kernel=cpu\n");
    expect_ignored("bad dtype", "does not parse");
    write_sealed(identity, "tuned d=32 dtype=f32 causal=0 tile=kernel=gpu\n");
    expect_ignored("bad tile", "does not parse");
    write_sealed(identity, "hello\n");
    expect_ignored("unknown line", "does not parse");
    /* Not a tuning file at all. */
    write_text("FLASHCLB\1\0\0\0", 12);
    expect_ignored("binary", "truncated");

    /* Sizes the grammar accepts but the CPU family does not (br=17): the untuned plan, untrusted, and the
       reason says the tuned plan was not used and why. */
    write_sealed(identity, "tuned d=32 dtype=f32 causal=0 tile=kernel=cpu,br=17,bc=96\n");
    plan_now(&info, &plan, 0);
    CHECK(strcmp(plan.origin, "tuned") != 0 && plan.block_rows == untuned_rows);
    if (!strstr(plan.reason, "tuned plan was not used") || !strstr(plan.reason, "br in {16, 32, 64, 128} (got 17)") ||
        !strstr(plan.reason, "kernel=cpu,br=17,bc=96")) {
        fprintf(stderr, "rejected sizes: reason \"%s\"\n", plan.reason);
        tu_fail_count();
    }
    /* Another family's entry (the tensor cores') on this CPU device: not used, and said. */
    write_sealed(identity, "tuned d=32 dtype=f32 causal=0 tile=kernel=mma,warps=4,bc=32\n");
    plan_now(&info, &plan, 0);
    CHECK(strcmp(plan.origin, "tuned") != 0 && plan.block_rows == untuned_rows);
    if (!strstr(plan.reason, "tuned plan was not used: kernel=mma")) {
        fprintf(stderr, "another family's entry: reason \"%s\"\n", plan.reason);
        tu_fail_count();
    }

    /* A CPU-family entry above the family's d 256 (written by hand): the portable kernels run the call from
       their table, and the reason says the entry was not used. */
    write_sealed(identity, "tuned d=320 dtype=f32 causal=0 tile=kernel=cpu,br=32,bc=48\n");
    plan_at(&info, &plan, 0, 320);
    CHECK(strcmp(plan.origin, "tuned") != 0);
    if (!strstr(plan.reason, "kernel=cpu,br=32,bc=48") || !strstr(plan.reason, "not used")) {
        fprintf(stderr, "kernel=cpu entry above d 256: reason \"%s\"\n", plan.reason);
        tu_fail_count();
    }

    /* FLASHCL_TILE still wins over the file. */
    write_sealed(identity, good);
    setenv("FLASHCL_TILE", "kernel=cpu,br=64,bc=24", 1);
    plan_now(&info, &plan, 0);
    CHECK(strcmp(plan.origin, "env") == 0 && plan.block_rows == 64 && plan.block_cols == 24);
    unsetenv("FLASHCL_TILE");

    /* The device's own file in a read-only cache directory: read (the program cache is off there, the
       tuning file is not). */
    {
        char cache[1200];
        snprintf(cache, sizeof cache, "%s/cache", dir);
        unsetenv("FLASHCL_TUNING");
        const char *old_cache = getenv("FLASHCL_CACHE_DIR");
        char *saved = old_cache ? strdup(old_cache) : NULL;
        setenv("FLASHCL_CACHE_DIR", cache, 1);
        plan_now(&info, &plan, 0); /* makes the directory, names the file */
        REQUIRE(strncmp(info.path, cache, strlen(cache)) == 0);
        tt_write_sealed(info.path, identity, good);
        if (!read_only(cache, 1)) {
            printf("test_tuning: read-only cache directory not checked (%s stays writable here)\n", cache);
        } else {
            plan_now(&info, &plan, 0);
            if (strncmp(info.path, cache, strlen(cache)) != 0 || info.entries != 1 || strcmp(plan.origin, "tuned")) {
                fprintf(stderr, "read-only cache directory: path \"%s\", %zu entries, origin %s, note \"%s\"\n",
                        info.path, info.entries, plan.origin, info.note);
                tu_fail_count();
            }
        }
        read_only(cache, 0);
        if (saved)
            setenv("FLASHCL_CACHE_DIR", saved, 1);
        else
            unsetenv("FLASHCL_CACHE_DIR");
        free(saved);
    }

    /* FLASHCL_TUNING=off: no file, no note. */
    setenv("FLASHCL_TUNING", "off", 1);
    plan_now(&info, &plan, 0);
    CHECK(info.path[0] == '\0' && info.note[0] == '\0' && strcmp(plan.origin, "tuned") != 0);
    CHECK(info.off == 1); /* the query says why there is no path (the tuner words its message from it) */
    setenv("FLASHCL_TUNING", "0", 1);
    plan_now(&info, &plan, 0);
    CHECK(info.path[0] == '\0' && info.off == 1);

    tu_tmpdir_remove(dir);
    free(dir);
    return tu_finish("test_tuning");
}
