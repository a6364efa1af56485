/*
 * The OpenCL counting and fault-injection shim (cl_shim.c, preloaded with
 * LD_PRELOAD) as a test sees it. Tests never link the shim: they look its
 * control functions up at run time (cl_shim_load), so a test run without
 * the preload fails loudly instead of checking nothing.
 */
#ifndef FLASHCL_TEST_CL_SHIM_H
#define FLASHCL_TEST_CL_SHIM_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

/* Object types the shim counts. */
enum { CL_SHIM_CONTEXT, CL_SHIM_QUEUE, CL_SHIM_MEM, CL_SHIM_PROGRAM, CL_SHIM_KERNEL, CL_SHIM_EVENT, CL_SHIM_TYPES };

typedef struct cl_shim_api {
    /* Fails the index-th (from 1) call of `name` from now on with `error` and resets the call counts;
       NULL disarms (fault_fired still tells whether it fired). */
    void (*set_fault)(const char *name, long index, cl_int error);
    int (*fault_fired)(void);
    /* While paused, calls are neither counted nor failed (the test's own set-up). */
    void (*pause_faults)(int paused);
    long (*calls)(const char *name);
    long (*live)(int type);
    long (*created)(int type);
} cl_shim_api;

/* Finds the preloaded shim; 0 when it is not loaded. */
int cl_shim_load(cl_shim_api *out);

/* "cl_mem", "cl_kernel", ... */
const char *cl_shim_type_name(int type);

#endif
