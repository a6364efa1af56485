/* The device read bandwidth behind bench's %bw column; see read_bandwidth.h. */
#include "read_bandwidth.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernel_rate.h"

/*
 * Sums the buffer so that no load can be dropped, and writes one vector per
 * work-item. CHUNKED: work-item i reads elements [i * per_item, (i + 1) *
 * per_item), one stream per core; otherwise consecutive work-items read
 * consecutive elements (coalesced), striding by the grid.
 */
static const char read_kernel_source[] =
    "__kernel void read_sum(__global const VEC *data, ulong count, ulong per_item, __global VEC *out) {\n"
    "    const ulong id = get_global_id(0);\n"
    "    VEC acc = (VEC)(0);\n"
    "#if CHUNKED\n"
    "    const ulong begin = id * per_item, end = min(begin + per_item, count);\n"
    "    for (ulong i = begin; i < end; ++i) acc += data[i];\n"
    "#else\n"
    "    const ulong step = get_global_size(0);\n"
    "    for (ulong i = id; i < count; i += step) acc += data[i];\n"
    "#endif\n"
    "    out[id] = acc;\n"
    "}\n";

#define MIB ((size_t)1 << 20)
#define GPU_DEFAULT_BYTES (1024 * MIB)
#define CPU_DEFAULT_BYTES (256 * MIB)
#define MAX_BYTES ((size_t)4096 * MIB)
#define CACHE_MULTIPLE 4
#define RUNS 5
#define RUN_SECONDS 0.05 /* each timed run repeats the read for at least this long */
#define MAX_REPEATS 200

void read_bw_none(bench_read_bw *bw, const char *why) {
    bw->gbps = NAN;
    snprintf(bw->source, sizeof bw->source, "%s", why);
}

void read_bw_given(bench_read_bw *bw, double gbps) {
    bw->gbps = gbps;
    snprintf(bw->source, sizeof bw->source, "given with --read-bw");
}

/* The device facts the measurement is sized by. */
typedef struct read_device {
    bool cpu;
    cl_uint compute_units;
    cl_ulong cache_bytes, global_bytes, max_alloc;
    size_t max_wg;
} read_device;

static bool query_device(cl_device_id device, read_device *d) {
    cl_device_type type = 0;
    memset(d, 0, sizeof *d);
    bool ok =
        clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL) == CL_SUCCESS &&
        clGetDeviceInfo(device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof d->compute_units, &d->compute_units, NULL) ==
            CL_SUCCESS &&
        clGetDeviceInfo(device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof d->global_bytes, &d->global_bytes, NULL) ==
            CL_SUCCESS &&
        clGetDeviceInfo(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof d->max_alloc, &d->max_alloc, NULL) == CL_SUCCESS &&
        clGetDeviceInfo(device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof d->max_wg, &d->max_wg, NULL) == CL_SUCCESS;
    /* Some drivers report no cache size: 0 then, and the default size stands. */
    if (clGetDeviceInfo(device, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof d->cache_bytes, &d->cache_bytes, NULL) !=
        CL_SUCCESS)
        d->cache_bytes = 0;
    d->cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
    if (d->compute_units == 0) d->compute_units = 1;
    return ok;
}

/* The buffer size: the default or several caches, whichever is larger, within what the device can hold. */
static size_t buffer_bytes(const read_device *d) {
    size_t bytes = d->cpu ? CPU_DEFAULT_BYTES : GPU_DEFAULT_BYTES;
    if (d->cache_bytes > 0 && d->cache_bytes < MAX_BYTES / CACHE_MULTIPLE && CACHE_MULTIPLE * d->cache_bytes > bytes)
        bytes = (size_t)(CACHE_MULTIPLE * d->cache_bytes);
    if (bytes > MAX_BYTES) bytes = MAX_BYTES;
    if (bytes > d->max_alloc) bytes = (size_t)d->max_alloc;
    if (bytes > d->global_bytes / 4) bytes = (size_t)(d->global_bytes / 4);
    return bytes / MIB * MIB; /* whole MiB: a multiple of every vector size */
}

/* The kernel and its buffers for one measurement. */
typedef struct read_job {
    rate_kernel k;
    cl_mem data, out;
    size_t bytes;
} read_job;

static void release_job(read_job *j) {
    rate_kernel_release(&j->k);
    if (j->data) clReleaseMemObject(j->data);
    if (j->out) clReleaseMemObject(j->out);
}

/* Builds the kernel, fills the buffer and sets the arguments; a message in why on failure. */
static bool prepare(flashcl_context *ctx, const read_device *d, read_job *j, char *why, size_t cap) {
    cl_context cl = flashcl_context_cl_context(ctx);
    const size_t vec_bytes = d->cpu ? 64 : 16;
    const char *options = d->cpu ? "-D CHUNKED=1 -D VEC=uint16" : "-D CHUNKED=0 -D VEC=uint4";
    if (!rate_kernel_build(ctx, read_kernel_source, options, "read_sum", &j->k, why, cap)) return false;
    cl_int err = CL_SUCCESS;
    j->bytes = buffer_bytes(d);
    const cl_ulong count = j->bytes / vec_bytes;
    if (d->cpu) {
        /* Work-groups of one: each work-item is a core's stream (a driver-chosen group would put them on one core). */
        j->k.local = 1;
        j->k.global = (size_t)d->compute_units * 4;
    } else {
        j->k.local = d->max_wg < 256 ? d->max_wg : 256;
        j->k.global = (size_t)d->compute_units * 2048 / j->k.local * j->k.local;
    }
    if (j->k.global > count) j->k.global = (size_t)count / j->k.local * j->k.local;
    const cl_ulong per_item = (count + j->k.global - 1) / j->k.global;
    j->data = clCreateBuffer(cl, CL_MEM_READ_ONLY, j->bytes, NULL, &err);
    if (err == CL_SUCCESS) j->out = clCreateBuffer(cl, CL_MEM_WRITE_ONLY, j->k.global * vec_bytes, NULL, &err);
    if (err != CL_SUCCESS) {
        snprintf(why, cap, "cannot allocate the %zu MiB read buffer: %s", j->bytes / MIB, flashcl_status_name(err));
        return false;
    }
    /* Written first, so the reads see memory that exists (an untouched page can read as a shared zero page). */
    const cl_uint pattern = 0x01010101u;
    err = clEnqueueFillBuffer(j->k.queue, j->data, &pattern, sizeof pattern, 0, j->bytes, 0, NULL, NULL);
    if (err == CL_SUCCESS) err = clSetKernelArg(j->k.kernel, 0, sizeof j->data, &j->data);
    if (err == CL_SUCCESS) err = clSetKernelArg(j->k.kernel, 1, sizeof count, &count);
    if (err == CL_SUCCESS) err = clSetKernelArg(j->k.kernel, 2, sizeof per_item, &per_item);
    if (err == CL_SUCCESS) err = clSetKernelArg(j->k.kernel, 3, sizeof j->out, &j->out);
    if (err == CL_SUCCESS) err = clFinish(j->k.queue);
    if (err != CL_SUCCESS) {
        snprintf(why, cap, "filling the read buffer failed: %s", flashcl_status_name(err));
        return false;
    }
    return true;
}

void read_bw_measure(flashcl_context *ctx, bench_read_bw *bw) {
    read_device d;
    read_job j;
    memset(&j, 0, sizeof j);
    char why[200];
    if (!query_device(flashcl_context_device(ctx), &d)) {
        read_bw_none(bw, "the device's memory sizes could not be queried");
        return;
    }
    if (!prepare(ctx, &d, &j, why, sizeof why)) {
        release_job(&j);
        read_bw_none(bw, why);
        return;
    }
    size_t repeats = 0;
    const double best = rate_kernel_best_seconds(&j.k, RUNS, RUN_SECONDS, MAX_REPEATS, &repeats);
    release_job(&j);
    if (!(best > 0.0) || !isfinite(best)) {
        read_bw_none(bw, "the read kernel failed to run");
        return;
    }
    bw->gbps = (double)j.bytes / best * 1e-9;
    snprintf(bw->source, sizeof bw->source,
             "measured: a %zu MiB buffer summed by %zu work-items (%s), best of %d runs of %zu read%s", j.bytes / MIB,
             j.k.global, d.cpu ? "64-byte loads, one contiguous chunk each" : "16-byte loads, interleaved", RUNS,
             repeats, repeats == 1 ? "" : "s");
}

const bench_ceiling_names read_bw_names = {"read bw", "GB/s", "bw", "read_gbps", "bw_percent", "read_bw_source"};
