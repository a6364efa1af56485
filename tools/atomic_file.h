/*
 * Output files that appear whole or not at all: data goes to a temporary
 * file in the destination's directory (so the final rename stays on one
 * file system and is atomic), and only a finished file is renamed over the
 * destination. A failure or interruption never leaves a partial output.
 */
#ifndef FLASHCL_TOOLS_ATOMIC_FILE_H
#define FLASHCL_TOOLS_ATOMIC_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct atomic_file {
    FILE *stream;     /* write here between open and finish */
    char *final_path; /* where the file goes on publish */
    char *temp_path;  /* NULL once published or aborted */
} atomic_file;

/*
 * Cheap early check that `path` can be written later: its directory exists
 * and is writable, and path is not itself a directory. Returns 0 or -1.
 */
int atomic_file_check(const char *path, char *err, size_t err_size);

/* Whether a and b name one existing file (the same device and inode: "./q.npy" and "q.npy" too). */
bool atomic_file_same(const char *a, const char *b);

/* Whether writing a and b would write one file: atomic_file_same, or, for names that do not exist
   yet, the same name in the same (resolved) directory. */
bool atomic_file_same_destination(const char *a, const char *b);

/* Creates a fresh temporary file next to path. Returns 0 or -1. */
int atomic_file_open(atomic_file *af, const char *path, char *err, size_t err_size);

/* Flushes and closes the stream (the step where a full disk shows). Returns 0 or -1. */
int atomic_file_finish(atomic_file *af, char *err, size_t err_size);

/* Renames the finished temporary file over the destination. Returns 0 or -1. */
int atomic_file_publish(atomic_file *af, char *err, size_t err_size);

/* Closes and removes whatever is left of the temporary file. Safe to call twice. */
void atomic_file_abort(atomic_file *af);

#endif
