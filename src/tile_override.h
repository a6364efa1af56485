/* FLASHCL_TILE: a tile plan forced from the environment, for experiments. */
#ifndef FLASHCL_TILE_OVERRIDE_H
#define FLASHCL_TILE_OVERRIDE_H

#include "internal.h"

/* Fields left at -1 were not given and keep the planner's choice. */
typedef struct flashcl__tile_override {
    int present;
    int block_rows, block_cols, threads_per_row, staging;
    int max_registers; /* regs=N: NVIDIA's -cl-nv-maxrregcount for the decode kernel (tuning); -1 not given */
    int kernel;        /* 0 rows, 1 split, 2 tiles, 3 cpu, 4 decode (the GPU kernel), 5 decode_cpu, 6 mma */
    /* The decode kernels' other knobs: lanes=N work-items per key and wg=N work-items per group
       (the GPU kernel), heads=N KV heads per work-item at most (the CPU kernel). */
    int lanes, work_group, heads;
    /* kernel=mma (NVIDIA tensor cores, FLASHCL_MMA_FWD's W:BC:MT:QL): warps=W, bc=BC, mt=MT
       16-row tiles per warp, ql=0|1 Q resident in __local. */
    int warps, row_tiles, q_local;
} flashcl__tile_override;
#define FLASHCL__TILE_KERNEL_CPU 3
#define FLASHCL__TILE_KERNEL_DECODE 4
#define FLASHCL__TILE_KERNEL_DECODE_CPU 5
#define FLASHCL__TILE_KERNEL_MMA 6

/* Parses "kernel=rows|split|tiles|cpu|decode|decode_cpu|mma,br=32,bc=64,tpr=4,staging=local|direct,regs=128,
   lanes=16,wg=128,heads=8,warps=4,mt=2,ql=1" (any subset, any order). */
flashcl_status flashcl__read_tile_override(flashcl_context *ctx, flashcl__tile_override *out);
/* The same grammar from any text (a tuned plan's, src/tuning.c); present is set on success. ctx may be NULL. */
flashcl_status flashcl__parse_tile_spec(flashcl_context *ctx, const char *spec, flashcl__tile_override *out);

/*
 * FLASHCL_BWD_KERNEL: forces the flash backward's kernel family, for tests and
 * experiments (FLASHCL_TILE stays the forward's, so forcing one pass never
 * changes the other):
 *   "rows"                                   the row kernels (cl/flash_bwd.cl)
 *   "tiles[,br=64][,bc=64][,slice=16]"       the GPU tiles (cl/flash_bwd_tiles.cl);
 *       br query rows and bc keys per block (16, 32, 48 or 64), slice rows per
 *       phase-B __local slice (1, 2, 4, 8 or 16). Sizes not given are fitted to the device.
 *   "cpu[,br=16][,bc=48]"                    the CPU family (cl/flash_cpu.cl); br rows (dQ) or
 *       keys (dK/dV) per work-item (16, 32, 64 or 128), bc keys or query rows per pass
 *       (a multiple of 6); fused=1 runs the fused backward (flash_bwd_cpu_fused: dK, dV and
 *       dQ in one pass), fused=0 the two kernels dK/dV and dQ; not given, the planner chooses.
 */
typedef struct flashcl__bwd_override {
    int present;
    int tiles;                         /* 0 rows, 1 tiles, 2 cpu (FLASHCL__BWD_KERNEL_CPU) */
    int block_rows, block_cols, slice; /* -1: not given */
    int fused;                         /* cpu: 1 fused, 0 two kernels, -1 not given */
} flashcl__bwd_override;

#define FLASHCL__BWD_KERNEL_CPU 2

flashcl_status flashcl__read_bwd_override(flashcl_context *ctx, flashcl__bwd_override *out);

#endif
