/*
 * The plans `flashcl tune` tries for one shape, in the FLASHCL_TILE grammar
 * (the library's override names every tile parameter of each family, so a
 * candidate is planned exactly as an override is). The list starts with the
 * plan the library picks without tuning (the table's or the formula's), so
 * the winner is never slower than it; then the other sizes of that family
 * and of the portable kernels, nearest first, cut to what the device's
 * work-group limit allows (local memory and the built kernel's limits are
 * checked by the library's plan query, which refuses what does not fit).
 *
 * Families and their knobs:
 *   forward, CPU family     kernel=cpu,br,bc
 *   forward, portable       kernel=tiles|split|rows,br,bc[,tpr][,staging]
 *   forward, tensor cores   kernel=mma,warps,bc,mt,ql (FLASHCL_MMA_FWD's W:BC:MT:QL)
 *   decode, GPU kernel      kernel=decode,br,bc,lanes,wg (rows, keys per lane group and step, lanes per key,
 *                           work-items per group)
 *   decode, CPU kernel      kernel=decode_cpu,br,bc,heads (rows, keys per chunk, KV heads per work-item)
 * Pure functions of their arguments (no OpenCL), so tests can check the lists anywhere.
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

/* The FLASHCL_TILE text that reproduces plan (for the decode and tensor-core kernels, read from its
   build options); false for a kernel the grammar cannot name, and for the tensor-core forward's
   Hopper wgmma form (MMA_WG=1): kernel=mma is always mma.sync, and the library picks the wgmma form
   before any tuned plan, so a search there would time shapes the library never runs. */
bool tune_encode_plan(const flashcl_plan *plan, char *out, size_t cap);

/* Whether plan is the tensor-core forward in its Hopper wgmma form (MMA_WG=1 in its build options). */
bool tune_plan_is_wgmma(const flashcl_plan *plan);

/* The candidates for a forward shape whose untuned plan encodes as `base` (first in the list), on a device
   with max_work_group_size work-items per group. A kernel=mma base gives the tensor-core shapes (head_dim and
   storage say where Q may stay in __local); kernel=cpu the CPU family; anything else the portable kernels. */
void tune_candidates_for(const char *base, size_t head_dim, flashcl_dtype dtype, size_t max_work_group_size,
                         tune_candidates *out);

/* The candidates for a decode shape whose untuned plan encodes as `base` (kernel=decode or kernel=decode_cpu
   with every knob given); packed_rows: the query rows one KV head serves. A CPU-kernel base also lists a
   few GPU-kernel shapes, last (that kernel runs anywhere, about 20x slower on POCL). */
void tune_decode_candidates(const char *base, size_t packed_rows, size_t max_work_group_size, tune_candidates *out);

/* Whether tile is in the list. */
bool tune_candidates_contain(const tune_candidates *c, const char *tile);

#endif
