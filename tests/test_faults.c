/*
 * Error paths by fault injection (cl_shim.c, LD_PRELOAD). For every OpenCL
 * entry point the library calls, and every occurrence of it in one round of
 * scenario_run (create, forward, backward, standard, host calls, KV-cache calls, destroy),
 * the call is made to fail with CL_OUT_OF_RESOURCES. Then:
 *   - nothing crashes, and no OpenCL object outlives the round;
 *   - the round either reports the failure — the injected error itself or
 *     a documented FlashCL status, with a message naming the OpenCL call and
 *     "CL_OUT_OF_RESOURCES" — or succeeds with verified results (a failure
 *     the library may absorb: a cache read, an optional query);
 *   - after a reported failure the same context, with the fault removed,
 *     runs a forward pass that verifies.
 * Entry points the scenario never calls are reported, so a new call in src/
 * that the shim does not wrap shows up here.
 * The calls that find the device (platforms, devices, their names and types)
 * are failed once for each way of naming it: FLASHCL_DEVICE unset (the
 * default device), "P:D" and part of the device's name. A failure there must
 * come back as the OpenCL error, never as "no device" or "no such device".
 */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cl_shim.h"
#include "scenario.h"
#include "testutil.h"
#include "tmpdir.h"

/* Every OpenCL call in src/ that can fail (grep for cl[A-Z] calls in src), retain/release aside. */
static const char *const k_entry_points[] = {
    "clGetPlatformIDs",
    "clGetDeviceIDs",
    "clGetPlatformInfo",
    "clGetDeviceInfo",
    "clCreateContext",
    "clCreateCommandQueue",
    "clGetCommandQueueInfo",
    "clGetMemObjectInfo",
    "clCreateProgramWithSource",
    "clCreateProgramWithBinary",
    "clBuildProgram",
    "clGetProgramInfo",
    "clGetProgramBuildInfo",
    "clCreateKernel",
    "clGetKernelWorkGroupInfo",
    "clSetKernelArg",
    "clCreateBuffer",
    "clEnqueueNDRangeKernel",
    "clEnqueueReadBuffer",
    "clEnqueueWriteBuffer",
    "clEnqueueMarkerWithWaitList",
};
#define ENTRY_COUNT (sizeof k_entry_points / sizeof k_entry_points[0])

static cl_shim_api shim;
static char *fresh_cache; /* --fresh-cache: emptied before every round */

static void round_prepare(void) {
    if (!fresh_cache) return;
    tu_tmpdir_remove(fresh_cache);
    REQUIRE(mkdir(fresh_cache, 0700) == 0);
}

/* FlashCL statuses a failed OpenCL call may become (documented in flashcl.h). */
static int acceptable_status(flashcl_status st) {
    return st == (flashcl_status)CL_OUT_OF_RESOURCES || st == FLASHCL_ERR_OUT_OF_DEVICE_MEMORY ||
           st == FLASHCL_ERR_BUILD_FAILED ||
           st == FLASHCL_ERR_INVALID_BUFFER || /* a cl_mem whose size cannot be read cannot be checked */
           st == FLASHCL_ERR_INVALID_QUEUE;    /* likewise a queue whose context cannot be read */
}

typedef struct tally {
    long injected, reported, absorbed;
} tally;

static void check_one(const char *name, long index, tally *t) {
    long base[CL_SHIM_TYPES];
    for (int i = 0; i < CL_SHIM_TYPES; ++i) base[i] = shim.live(i);
    round_prepare();
    shim.set_fault(name, index, CL_OUT_OF_RESOURCES);
    scenario_result r;
    scenario_run(&shim, &r);
    int fired = shim.fault_fired();
    shim.set_fault(NULL, 0, 0);
    if (!fired) return;
    t->injected++;
    char where[128];
    snprintf(where, sizeof where, "%s #%ld", name, index);
    if (r.status == FLASHCL_SUCCESS) {
        t->absorbed++;
        if (!r.results_ok) {
            fprintf(stderr, "FAIL %s: the round succeeded but its results are wrong\n", where);
            tu_fail_count();
        }
    } else {
        t->reported++;
        int named = strstr(r.message, name) != NULL && strstr(r.message, "CL_OUT_OF_RESOURCES") != NULL;
        if (!acceptable_status(r.status) || !named) {
            fprintf(stderr, "FAIL %s: %s returned %s: \"%s\"\n", where, r.step, flashcl_status_name(r.status),
                    r.message);
            tu_fail_count();
        }
        if (r.context_created == -1) {
            fprintf(stderr, "FAIL %s: flashcl_context_create failed but returned a context\n", where);
            tu_fail_count();
        }
        if (r.context_created == 1 && !r.context_reusable) {
            fprintf(stderr, "FAIL %s: the context did not work after the fault was removed\n", where);
            tu_fail_count();
        }
    }
    for (int i = 0; i < CL_SHIM_TYPES; ++i) {
        if (shim.live(i) != base[i]) {
            fprintf(stderr, "FAIL %s: %ld %s leaked\n", where, shim.live(i) - base[i], cl_shim_type_name(i));
            tu_fail_count();
        }
    }
}

/* Calls made while picking the device: each is failed under every device-spec form. */
static int finds_device(const char *name) {
    static const char *const calls[] = {"clGetPlatformIDs", "clGetDeviceIDs", "clGetPlatformInfo", "clGetDeviceInfo"};
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; ++i)
        if (strcmp(calls[i], name) == 0) return 1;
    return 0;
}

/* The default device as "P:D" and as its name, for the spec forms (the shim is paused). */
static void default_device_specs(char *index_spec, size_t index_cap, char *name_spec, size_t name_cap) {
    shim.pause_faults(1);
    flashcl_context *ctx = tu_context_create();
    cl_device_id dev = flashcl_context_device(ctx);
    cl_platform_id plat = NULL, platforms[32];
    cl_uint np = 0;
    REQUIRE(clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL) == CL_SUCCESS);
    REQUIRE(clGetDeviceInfo(dev, CL_DEVICE_NAME, name_cap, name_spec, NULL) == CL_SUCCESS);
    REQUIRE(clGetPlatformIDs(32, platforms, &np) == CL_SUCCESS);
    for (cl_uint p = 0; p < np && p < 32; ++p) {
        cl_device_id devs[64];
        cl_uint nd = 0;
        if (platforms[p] != plat || clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 64, devs, &nd) != CL_SUCCESS) continue;
        for (cl_uint d = 0; d < nd && d < 64; ++d)
            if (devs[d] == dev) snprintf(index_spec, index_cap, "%u:%u", (unsigned)p, (unsigned)d);
    }
    REQUIRE(index_spec[0] != '\0');
    flashcl_context_destroy(ctx);
    shim.pause_faults(0);
}

int main(int argc, char **argv) {
    if (!cl_shim_load(&shim)) {
        fprintf(stderr, "FAIL the OpenCL shim is not loaded: run with LD_PRELOAD=libflashcl_cl_shim.so\n");
        return 1;
    }
    /* --fresh-cache: every round starts with an empty program cache (builds from
       source, then stores); names after it pick entry points (default: all). */
    int first_name = 1;
    if (argc > 1 && strcmp(argv[1], "--fresh-cache") == 0) {
        fresh_cache = tu_tmpdir_make("flashcl-faults-cache");
        REQUIRE(setenv("FLASHCL_CACHE_DIR", fresh_cache, 1) == 0);
        first_name = 2;
    }
    /* A clean round first: it checks the set-up and warms the caches. */
    scenario_result clean;
    round_prepare();
    shim.set_fault(NULL, 0, 0);
    scenario_run(&shim, &clean);
    if (clean.status == FLASHCL_ERR_NO_DEVICE) {
        printf("skipped: no OpenCL device\n");
        return TU_EXIT_SKIP;
    }
    REQUIRE(clean.status == FLASHCL_SUCCESS && clean.results_ok);
    char index_spec[32] = "", name_spec[256] = "";
    default_device_specs(index_spec, sizeof index_spec, name_spec, sizeof name_spec);
    const char *const env_spec = getenv("FLASHCL_DEVICE");
    char *const saved_spec = env_spec ? strdup(env_spec) : NULL;
    const char *const spec_forms[] = {NULL, index_spec, name_spec}; /* default, P:D, name */
    long total_calls = 0;
    tally all = {0, 0, 0};
    for (size_t e = 0; e < ENTRY_COUNT; ++e) {
        const char *name = k_entry_points[e];
        int selected = argc <= first_name;
        for (int a = first_name; a < argc; ++a) selected |= strcmp(argv[a], name) == 0;
        if (!selected) continue;
        const int forms = finds_device(name) ? 3 : 1;
        for (int f = 0; f < forms; ++f) {
            const char *spec = forms == 1 ? saved_spec : spec_forms[f];
            if (spec)
                REQUIRE(setenv("FLASHCL_DEVICE", spec, 1) == 0);
            else
                REQUIRE(unsetenv("FLASHCL_DEVICE") == 0);
            /* A round with nothing armed counts this entry point's calls. */
            round_prepare();
            shim.set_fault("", 0, 0);
            scenario_run(&shim, &clean);
            long calls = shim.calls(name);
            total_calls += calls;
            tally t = {0, 0, 0};
            /* Each occurrence in turn, until the index runs past the last call (the fault never fires). */
            for (long i = 1; i <= calls; ++i) check_one(name, i, &t);
            printf("%-28s %4ld calls: %ld failed on purpose, %ld reported, %ld absorbed (FLASHCL_DEVICE %s)\n", name,
                   calls, t.injected, t.reported, t.absorbed, spec ? spec : "unset");
            all.injected += t.injected, all.reported += t.reported, all.absorbed += t.absorbed;
        }
    }
    if (saved_spec) REQUIRE(setenv("FLASHCL_DEVICE", saved_spec, 1) == 0);
    free(saved_spec);
    printf("faults: %ld injected over %ld calls, %ld reported, %ld absorbed\n", all.injected, total_calls, all.reported,
           all.absorbed);
    CHECK(all.injected > 0);
    if (fresh_cache) {
        tu_tmpdir_remove(fresh_cache);
        free(fresh_cache);
    }
    return tu_finish("test_faults");
}
