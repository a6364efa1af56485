#define _POSIX_C_SOURCE 200809L /* mkdtemp, opendir, lstat */

#include "tmpdir.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

char *tu_tmpdir_make(const char *prefix) {
    const char *base = getenv("TMPDIR");
    if (!base || !base[0]) base = "/tmp";
    size_t size = strlen(base) + strlen(prefix) + 16;
    char *path = malloc(size);
    REQUIRE(path != NULL);
    snprintf(path, size, "%s/%s-XXXXXX", base, prefix);
    REQUIRE(mkdtemp(path) != NULL);
    return path;
}

/* Visits entries below dir; files go to fn, directories recurse (and are
 * removed afterwards when `remove_all`). lstat, so links are never followed. */
static size_t walk(const char *dir, void (*fn)(const char *, void *), void *user, int remove_all) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        size_t size = strlen(dir) + strlen(e->d_name) + 2;
        char *path = malloc(size);
        REQUIRE(path != NULL);
        snprintf(path, size, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) == 0) {
            if (S_ISDIR(st.st_mode)) {
                count += walk(path, fn, user, remove_all);
                if (remove_all) rmdir(path);
            } else {
                if (S_ISREG(st.st_mode)) {
                    count++;
                    if (fn) fn(path, user);
                }
                if (remove_all) unlink(path);
            }
        }
        free(path);
    }
    closedir(d);
    return count;
}

size_t tu_tmpdir_files(const char *dir, void (*fn)(const char *path, void *user), void *user) {
    return walk(dir, fn, user, 0);
}

void tu_tmpdir_remove(const char *dir) {
    walk(dir, NULL, NULL, 1);
    rmdir(dir);
}

int tu_path_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}
