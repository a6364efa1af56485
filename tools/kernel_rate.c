/* Build and time the tool's microbenchmark kernels; see kernel_rate.h. */
#include "kernel_rate.h"

#include <math.h>
#include <stdio.h>

#include "timing.h"

bool rate_kernel_build(flashcl_context *ctx, const char *source, const char *options, const char *name, rate_kernel *k,
                       char *why, size_t cap) {
    cl_context cl = flashcl_context_cl_context(ctx);
    cl_device_id device = flashcl_context_device(ctx);
    cl_int err = CL_SUCCESS;
    const char *step = "clCreateProgramWithSource";
    k->queue = flashcl_context_queue(ctx);
    k->program = clCreateProgramWithSource(cl, 1, &source, NULL, &err);
    if (err == CL_SUCCESS) step = "clBuildProgram", err = clBuildProgram(k->program, 1, &device, options, NULL, NULL);
    if (err == CL_SUCCESS) step = "clCreateKernel", k->kernel = clCreateKernel(k->program, name, &err);
    if (err != CL_SUCCESS) {
        snprintf(why, cap, "the %s kernel did not build: %s: %s", name, step, flashcl_status_name(err));
        return false;
    }
    return true;
}

/* Seconds per launch over `repeats` launches back to back; negative on failure. */
static double time_launches(const rate_kernel *k, size_t repeats) {
    double start = wall_seconds();
    for (size_t r = 0; r < repeats; ++r)
        if (clEnqueueNDRangeKernel(k->queue, k->kernel, 1, NULL, &k->global, &k->local, 0, NULL, NULL) != CL_SUCCESS)
            return -1.0;
    if (clFinish(k->queue) != CL_SUCCESS) return -1.0;
    return (wall_seconds() - start) / (double)repeats;
}

double rate_kernel_best_seconds(const rate_kernel *k, int runs, double run_seconds, size_t max_repeats,
                                size_t *repeats_out) {
    /* The warm-up launch (first launch, page mapping) also sizes the runs. */
    const double once = time_launches(k, 1);
    if (once < 0.0) return -1.0;
    size_t repeats = 1;
    if (once > 0.0 && once < run_seconds) repeats = (size_t)ceil(run_seconds / once);
    if (repeats > max_repeats) repeats = max_repeats;
    *repeats_out = repeats;
    double best = INFINITY;
    for (int run = 0; run < runs; ++run) {
        const double seconds = time_launches(k, repeats);
        if (seconds < 0.0) return -1.0;
        if (seconds < best) best = seconds;
    }
    return best;
}

void rate_kernel_release(rate_kernel *k) {
    if (k->kernel) clReleaseKernel(k->kernel);
    if (k->program) clReleaseProgram(k->program);
    k->kernel = NULL;
    k->program = NULL;
}
