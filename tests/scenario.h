/*
 * One round of everything a FlashCL user does, for the resource and fault
 * tests: create a context, run the flash and standard forward and backward
 * on device buffers and through the host-array calls, a variant forward
 * (softcap) and flashcl_dropout_mask, check every result against the
 * double-precision reference, destroy. The shim (cl_shim.h)
 * sees every OpenCL call; the test's own calls are made with faults paused.
 */
#ifndef FLASHCL_TEST_SCENARIO_H
#define FLASHCL_TEST_SCENARIO_H

#include "cl_shim.h"
#include "flashcl.h"

typedef struct scenario_result {
    flashcl_status status; /* SUCCESS, or the first failing call's status */
    const char *step;      /* which call failed ("flashcl_context_create", "flashcl_backward", ...) */
    char message[1024];    /* flashcl_last_error (or the create call's err_buf) after it */
    int context_created;
    int context_reusable; /* after a failure: 1 if a clean forward on the same context verified */
    int results_ok;       /* when every step succeeded: 1 if all outputs verified */
} scenario_result;

/* Runs the round. `shim` may be NULL (no pausing around the test's own calls). */
void scenario_run(const cl_shim_api *shim, scenario_result *out);

#endif
