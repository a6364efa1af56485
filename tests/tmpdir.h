/* Scratch directories for tests that look at files (program cache, CLI). */
#ifndef FLASHCL_TEST_TMPDIR_H
#define FLASHCL_TEST_TMPDIR_H

#include <stddef.h>

/* A new empty directory under $TMPDIR (or /tmp); malloc'd path, never NULL. */
char *tu_tmpdir_make(const char *prefix);
/* Calls fn on every regular file below dir, recursively; returns how many. */
size_t tu_tmpdir_files(const char *dir, void (*fn)(const char *path, void *user), void *user);
/* Removes dir and everything below it. */
void tu_tmpdir_remove(const char *dir);
/* Whether anything exists at path. */
int tu_path_exists(const char *path);

#endif
