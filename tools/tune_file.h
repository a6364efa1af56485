/*
 * What `flashcl tune` keeps between runs: every measurement ("measured"
 * lines, which the library skips) and, per shape key, the fastest verified
 * one ("tuned" lines, which the library reads). The whole file is rewritten
 * through atomic_file after each measurement, under the identity header and
 * with the checksum line the library requires (flashcl_tuning_info), so an
 * interruption leaves the last complete file and a rerun resumes from it.
 */
#ifndef FLASHCL_TOOLS_TUNE_FILE_H
#define FLASHCL_TOOLS_TUNE_FILE_H

#include <stdbool.h>
#include <stddef.h>

#include "tune_candidates.h"

typedef struct tune_record {
    char key[64]; /* "d=64 dtype=f32 causal=0", "decode d=128 dtype=f32 cache=same rows=4" */
    char tile[TUNE_TILE_CAP];
    char size[96]; /* the timed problem, "b1 h8 n2048": a rerun at another size measures again */
    double ms;     /* NAN: did not plan or run */
    bool verified;
} tune_record;

typedef struct tune_log {
    size_t count, cap;
    tune_record *records;
} tune_log;

/* Loads the measured lines of an existing file; the caller has checked (flashcl_tuning_query) that the library
   accepts it. Returns 0, or -1 when the file cannot be read (a missing file is an empty log). */
int tune_log_load(tune_log *log, const char *path);

int tune_log_add(tune_log *log, const tune_record *r);

/* The record of (key, tile, size), or NULL. */
const tune_record *tune_log_find(const tune_log *log, const char *key, const char *tile, const char *size);

/* The fastest verified record of key at size, or NULL. */
const tune_record *tune_log_best(const tune_log *log, const char *key, const char *size);

/* The suffix of a size whose records are the confirmation rounds (cmd_tune.c): the untuned plan and the
   provisional winner timed in turns, after the search, so that a winner owed to noise loses. */
#define TUNE_CONFIRM_SUFFIX "+confirm"

/* The winner of key at size: the best of its confirmation rounds where there are any, else the best record. */
const tune_record *tune_log_winner(const tune_log *log, const char *key, const char *size);

/* Writes identity + tuned lines (the winner of each key at its latest size) + measured lines + checksum, atomically. */
int tune_log_write(const tune_log *log, const char *path, const char *identity, char *err, size_t cap);

void tune_log_free(tune_log *log);

#endif
