/*
 * The plans `flashcl tune` tries for one shape, in the FLASHCL_TILE grammar
 * (the library's override names every tile parameter of each family, so a
 * candidate is planned exactly as an override is). The list starts with the
 * plan the library picks without tuning (the table's or the formula's), so
 * the winner is never slower than it; then the other sizes of that family
 * and of the portable kernels, nearest first, cut to what the device's
 * work-group limit allows (local memory and the built kernel's limits are
 * checked by the library's plan query, which refuses what does not fit).
 */
#ifndef FLASHCL_TOOLS_TUNE_CANDIDATES_H
#define FLASHCL_TOOLS_TUNE_CANDIDATES_H

#include <stdbool.h>
#include <stddef.h>

#include <flashcl.h>

enum { TUNE_TILE_CAP = 96, TUNE_MAX_CANDIDATES = 64 };

typedef struct tune_candidates {
    size_t count;
    char tile[TUNE_MAX_CANDIDATES][TUNE_TILE_CAP];
} tune_candidates;

/* The FLASHCL_TILE text that reproduces plan; false for a family the grammar cannot name (tensor cores, decode). */
bool tune_encode_plan(const flashcl_plan *plan, char *out, size_t cap);

/* The candidates for a shape whose untuned plan encodes as `base` (first in the list), on a device
   with max_work_group_size work-items per group. */
void tune_candidates_for(const char *base, bool is_cpu_family, size_t max_work_group_size, tune_candidates *out);

/* Whether tile is in the list. */
bool tune_candidates_contain(const tune_candidates *c, const char *tile);

#endif
