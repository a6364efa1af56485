/* FLASHCL_TILE: a tile plan forced from the environment, for experiments. */
#ifndef FLASHCL_TILE_OVERRIDE_H
#define FLASHCL_TILE_OVERRIDE_H

#include "internal.h"

/* Fields left at -1 were not given and keep the planner's choice. */
typedef struct flashcl__tile_override {
    int present;
    int block_rows, block_cols, threads_per_row, staging;
    int kernel; /* 0 rows, 1 split, 2 tiles */
} flashcl__tile_override;

/* Parses "kernel=rows|split|tiles,br=32,bc=64,tpr=4,staging=local|direct" (any subset, any order). */
flashcl_status flashcl__read_tile_override(flashcl_context *ctx, flashcl__tile_override *out);

#endif
