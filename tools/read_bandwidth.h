/*
 * The read bandwidth `bench` divides decode-shaped results by (the %bw
 * column): measured on the device itself with a small read kernel the tool
 * builds (every byte of a buffer several times the last-level cache read
 * once per call and summed, the best of a few timed runs), or given with
 * --read-bw. Decode reads every key and value once and does two multiply-adds
 * per element, so its ceiling is this rate, not the FLOP rate.
 */
#ifndef FLASHCL_TOOLS_READ_BANDWIDTH_H
#define FLASHCL_TOOLS_READ_BANDWIDTH_H

#include <flashcl.h>

#include "bench_ceiling.h"

typedef struct bench_read_bw {
    double gbps;      /* NaN: none */
    char source[256]; /* how it was obtained, or why there is none */
} bench_read_bw;

/* No read bandwidth, for the reason given (printed as "n/a (why)"). */
void read_bw_none(bench_read_bw *bw, const char *why);
/* The rate given with --read-bw. */
void read_bw_given(bench_read_bw *bw, double gbps);
/*
 * Measures on ctx's device with ctx's queue (which must be idle): a buffer of
 * max(1 GiB on a GPU / 256 MiB on a CPU, 4x CL_DEVICE_GLOBAL_MEM_CACHE_SIZE),
 * at most a quarter of the device memory and its largest allocation, filled
 * first (so every page is real), then read by a kernel that sums it: 16-byte
 * loads interleaved across work-items on a GPU, 64-byte loads over one
 * contiguous chunk per work-item on a CPU (what its prefetchers stream best).
 * GB/s = buffer bytes / wall-clock seconds per call, calls enqueued back to
 * back as bench times attention; the best of a few runs. A failure leaves no
 * rate and says why (it does not stop the bench).
 */
void read_bw_measure(flashcl_context *ctx, bench_read_bw *bw);

/* Its names for bench_ceiling.h: "read bw  812.3 GB/s (measured: ...); %bw = GB/s / read bw", the "%bw"
   column, JSON "read_gbps", "bw_percent" and "read_bw_source". */
extern const bench_ceiling_names read_bw_names;

#endif
