/*
 * An LD_PRELOAD shim over the OpenCL ICD loader, for the resource and
 * error-path tests. Every function below forwards to the real libOpenCL
 * (dlsym(RTLD_NEXT)) and
 *   - counts the OpenCL objects alive, per type: a successful create or
 *     retain adds one, a successful release removes one (events count when
 *     a call returns one), so a test can check a create/destroy loop returns
 *     to where it started;
 *   - can fail one call on purpose: the n-th call (from 1) of a named entry
 *     point returns a chosen error without reaching the driver. Set it with
 *     cl_shim_set_fault() or, for whole programs such as the CLI, with
 *     FLASHCL_FAULT=clCreateBuffer:2[:-5] (default error CL_OUT_OF_RESOURCES);
 *   - refuses an enqueue's wait list the way NVIDIA does (a pointer with
 *     no events: CL_INVALID_EVENT_WAIT_LIST), which POCL accepts.
 * Retain and release are counted but never failed: the library cannot
 * report a failed release, and its callers have nothing to do about it.
 * The test finds the control functions with dlsym(RTLD_DEFAULT), so it can
 * tell whether the shim is really loaded.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>

#include "cl_shim.h"

#define SHIM_API __attribute__((visibility("default")))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long live[CL_SHIM_TYPES];
static long created[CL_SHIM_TYPES];

/* Per entry point call counts (for the fault's index and for coverage). */
#define MAX_NAMES 64
static struct {
    const char *name;
    long calls;
} counters[MAX_NAMES];
static int counter_count;

static char fault_name[64];
static long fault_index; /* 0: no fault armed */
static cl_int fault_error = CL_OUT_OF_RESOURCES;
static int fault_fired;
static int faults_paused;
static int env_read;

static void read_env_fault(void) {
    if (env_read) return;
    env_read = 1;
    const char *spec = getenv("FLASHCL_FAULT");
    if (!spec || !*spec) return;
    char name[64];
    long index = 0, error = CL_OUT_OF_RESOURCES;
    if (sscanf(spec, "%63[^:]:%ld:%ld", name, &index, &error) >= 2 && index > 0) {
        snprintf(fault_name, sizeof fault_name, "%s", name);
        fault_index = index;
        fault_error = (cl_int)error;
    }
}

/* Counts a call of `name`; true when this call is the one to fail. */
static int should_fail(const char *name) {
    pthread_mutex_lock(&lock);
    read_env_fault();
    int slot = -1;
    for (int i = 0; i < counter_count; ++i)
        if (counters[i].name == name || strcmp(counters[i].name, name) == 0) slot = i;
    if (slot < 0 && counter_count < MAX_NAMES) {
        slot = counter_count++;
        counters[slot].name = name;
        counters[slot].calls = 0;
    }
    int fail = 0;
    if (slot >= 0 && !faults_paused) {
        long n = ++counters[slot].calls;
        fail = fault_index > 0 && n == fault_index && strcmp(fault_name, name) == 0;
        if (fail) fault_fired = 1;
    }
    pthread_mutex_unlock(&lock);
    return fail;
}

static void count(int type, long delta) {
    pthread_mutex_lock(&lock);
    live[type] += delta;
    if (delta > 0) created[type] += delta;
    pthread_mutex_unlock(&lock);
}

static void *real(const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "cl_shim: %s not found in the real OpenCL library\n", name);
        abort();
    }
    return f;
}

#define REAL(fn) ((__typeof__(&fn))real(#fn))

/* ------------------------------------------------------------ control */

SHIM_API void cl_shim_set_fault(const char *name, long index, cl_int error) {
    pthread_mutex_lock(&lock);
    env_read = 1; /* a test's own setting wins over the environment */
    snprintf(fault_name, sizeof fault_name, "%s", name ? name : "");
    fault_index = name ? index : 0;
    fault_error = error;
    /* Disarming keeps the record of whether the fault fired; arming starts afresh. */
    if (name) {
        fault_fired = 0;
        for (int i = 0; i < counter_count; ++i) counters[i].calls = 0;
    }
    pthread_mutex_unlock(&lock);
}

SHIM_API int cl_shim_fault_fired(void) { return fault_fired; }

SHIM_API void cl_shim_pause_faults(int paused) {
    pthread_mutex_lock(&lock);
    faults_paused = paused;
    pthread_mutex_unlock(&lock);
}

SHIM_API long cl_shim_calls(const char *name) {
    long n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < counter_count; ++i)
        if (strcmp(counters[i].name, name) == 0) n = counters[i].calls;
    pthread_mutex_unlock(&lock);
    return n;
}

SHIM_API long cl_shim_live(int type) { return type >= 0 && type < CL_SHIM_TYPES ? live[type] : -1; }
SHIM_API long cl_shim_created(int type) { return type >= 0 && type < CL_SHIM_TYPES ? created[type] : -1; }

/* ------------------------------------------------- wrapping helpers */

/* A create call: fails on demand, else forwards and counts a success. */
#define CREATE_BODY(type, fn, errcode_ret, ...)                                                                        \
    if (should_fail(#fn)) {                                                                                            \
        if (errcode_ret) *(errcode_ret) = fault_error;                                                                 \
        return NULL;                                                                                                   \
    }                                                                                                                  \
    cl_int shim_err_ = CL_SUCCESS;                                                                                     \
    __typeof__(fn(__VA_ARGS__)) obj_ = REAL(fn)(__VA_ARGS__);                                                          \
    if (errcode_ret) shim_err_ = *(errcode_ret);                                                                       \
    if (obj_ && shim_err_ == CL_SUCCESS) count(type, 1);                                                               \
    return obj_;

/* A call returning cl_int: fails on demand, else forwards. */
#define PLAIN_BODY(fn, ...)                                                                                            \
    if (should_fail(#fn)) return fault_error;                                                                          \
    return REAL(fn)(__VA_ARGS__);

/* An enqueue with an event out-parameter: an event returned counts as created. */
/* The wait list judged as the strictest driver does (NVIDIA's): a list pointer with no events, or
   events with no list, is CL_INVALID_EVENT_WAIT_LIST even where POCL lets it pass. */
#define ENQUEUE_BODY(fn, event, nw, wl, ...)                                                                           \
    if (should_fail(#fn)) return fault_error;                                                                          \
    if (((nw) == 0) != ((wl) == NULL)) return CL_INVALID_EVENT_WAIT_LIST;                                              \
    cl_int e_ = REAL(fn)(__VA_ARGS__);                                                                                 \
    if (e_ == CL_SUCCESS && (event)) count(CL_SHIM_EVENT, 1);                                                          \
    return e_;

/* Retain / release: counted, never failed. */
#define REF_BODY(type, delta, fn, obj)                                                                                 \
    cl_int e_ = REAL(fn)(obj);                                                                                         \
    if (e_ == CL_SUCCESS) count(type, delta);                                                                          \
    return e_;

/* ------------------------------------------------------- the wrappers */

SHIM_API cl_context clCreateContext(const cl_context_properties *props, cl_uint n, const cl_device_id *devs,
                                    void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *), void *user,
                                    cl_int *errcode_ret) {
    cl_int local_err;
    if (!errcode_ret) errcode_ret = &local_err;
    CREATE_BODY(CL_SHIM_CONTEXT, clCreateContext, errcode_ret, props, n, devs, notify, user, errcode_ret)
}

SHIM_API cl_command_queue clCreateCommandQueue(cl_context c, cl_device_id d, cl_command_queue_properties p,
                                               cl_int *errcode_ret) {
    cl_int local_err;
    if (!errcode_ret) errcode_ret = &local_err;
    CREATE_BODY(CL_SHIM_QUEUE, clCreateCommandQueue, errcode_ret, c, d, p, errcode_ret)
}

#ifdef CL_VERSION_2_0
SHIM_API cl_command_queue clCreateCommandQueueWithProperties(cl_context c, cl_device_id d, const cl_queue_properties *p,
                                                             cl_int *errcode_ret) {
    cl_int local_err;
    if (!errcode_ret) errcode_ret = &local_err;
    CREATE_BODY(CL_SHIM_QUEUE, clCreateCommandQueueWithProperties, errcode_ret, c, d, p, errcode_ret)
}
#endif

SHIM_API cl_mem clCreateBuffer(cl_context c, cl_mem_flags f, size_t size, void *host, cl_int *errcode_ret) {
    cl_int local_err;
    if (!errcode_ret) errcode_ret = &local_err;
    CREATE_BODY(CL_SHIM_MEM, clCreateBuffer, errcode_ret, c, f, size, host, errcode_ret)
}

SHIM_API cl_program clCreateProgramWithSource(cl_context c, cl_uint n, const char **strings, const size_t *lengths,
                                              cl_int *errcode_ret) {
    cl_int local_err;
    if (!errcode_ret) errcode_ret = &local_err;
    CREATE_BODY(CL_SHIM_PROGRAM, clCreateProgramWithSource, errcode_ret, c, n, strings, lengths, errcode_ret)
}

SHIM_API cl_program clCreateProgramWithBinary(cl_context c, cl_uint n, const cl_device_id *devs, const size_t *lengths,
                                              const unsigned char **binaries, cl_int *status, cl_int *errcode_ret) {
    cl_int local_err;
    if (!errcode_ret) errcode_ret = &local_err;
    CREATE_BODY(CL_SHIM_PROGRAM, clCreateProgramWithBinary, errcode_ret, c, n, devs, lengths, binaries, status,
                errcode_ret)
}

SHIM_API cl_kernel clCreateKernel(cl_program p, const char *name, cl_int *errcode_ret) {
    cl_int local_err;
    if (!errcode_ret) errcode_ret = &local_err;
    CREATE_BODY(CL_SHIM_KERNEL, clCreateKernel, errcode_ret, p, name, errcode_ret)
}

SHIM_API cl_event clCreateUserEvent(cl_context c, cl_int *errcode_ret) {
    cl_int local_err;
    if (!errcode_ret) errcode_ret = &local_err;
    CREATE_BODY(CL_SHIM_EVENT, clCreateUserEvent, errcode_ret, c, errcode_ret)
}

SHIM_API cl_int clBuildProgram(cl_program p, cl_uint n, const cl_device_id *devs, const char *options,
                               void(CL_CALLBACK *notify)(cl_program, void *),
                               void *user){PLAIN_BODY(clBuildProgram, p, n, devs, options, notify, user)}

SHIM_API cl_int clSetKernelArg(cl_kernel k, cl_uint index, size_t size,
                               const void *value){PLAIN_BODY(clSetKernelArg, k, index, size, value)}

SHIM_API cl_int clGetPlatformIDs(cl_uint n, cl_platform_id *platforms,
                                 cl_uint *count_out){PLAIN_BODY(clGetPlatformIDs, n, platforms, count_out)}

SHIM_API cl_int clGetDeviceIDs(cl_platform_id p, cl_device_type t, cl_uint n, cl_device_id *devs,
                               cl_uint *count_out){PLAIN_BODY(clGetDeviceIDs, p, t, n, devs, count_out)}

SHIM_API cl_int clGetPlatformInfo(cl_platform_id p, cl_platform_info what, size_t size, void *value,
                                  size_t *ret){PLAIN_BODY(clGetPlatformInfo, p, what, size, value, ret)}

SHIM_API cl_int clGetDeviceInfo(cl_device_id d, cl_device_info what, size_t size, void *value,
                                size_t *ret){PLAIN_BODY(clGetDeviceInfo, d, what, size, value, ret)}

SHIM_API cl_int clGetCommandQueueInfo(cl_command_queue q, cl_command_queue_info what, size_t size, void *value,
                                      size_t *ret){PLAIN_BODY(clGetCommandQueueInfo, q, what, size, value, ret)}

SHIM_API cl_int clGetMemObjectInfo(cl_mem m, cl_mem_info what, size_t size, void *value,
                                   size_t *ret){PLAIN_BODY(clGetMemObjectInfo, m, what, size, value, ret)}

SHIM_API cl_int clGetProgramInfo(cl_program p, cl_program_info what, size_t size, void *value,
                                 size_t *ret){PLAIN_BODY(clGetProgramInfo, p, what, size, value, ret)}

SHIM_API cl_int
    clGetProgramBuildInfo(cl_program p, cl_device_id d, cl_program_build_info what, size_t size, void *value,
                          size_t *ret){PLAIN_BODY(clGetProgramBuildInfo, p, d, what, size, value, ret)}

SHIM_API cl_int
    clGetKernelWorkGroupInfo(cl_kernel k, cl_device_id d, cl_kernel_work_group_info what, size_t size, void *value,
                             size_t *ret){PLAIN_BODY(clGetKernelWorkGroupInfo, k, d, what, size, value, ret)}

SHIM_API cl_int
    clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t *offset, const size_t *global,
                           const size_t *local, cl_uint nw, const cl_event *wl, cl_event *event){
        ENQUEUE_BODY(clEnqueueNDRangeKernel, event, nw, wl, q, k, dims, offset, global, local, nw, wl, event)}

SHIM_API cl_int clEnqueueReadBuffer(cl_command_queue q, cl_mem m, cl_bool blocking, size_t offset, size_t size,
                                    void *ptr, cl_uint nw, const cl_event *wl, cl_event *event){
    ENQUEUE_BODY(clEnqueueReadBuffer, event, nw, wl, q, m, blocking, offset, size, ptr, nw, wl, event)}

SHIM_API cl_int clEnqueueWriteBuffer(cl_command_queue q, cl_mem m, cl_bool blocking, size_t offset, size_t size,
                                     const void *ptr, cl_uint nw, const cl_event *wl, cl_event *event){
    ENQUEUE_BODY(clEnqueueWriteBuffer, event, nw, wl, q, m, blocking, offset, size, ptr, nw, wl, event)}

SHIM_API cl_int clEnqueueMarkerWithWaitList(cl_command_queue q, cl_uint nw, const cl_event *wl, cl_event *event){
    ENQUEUE_BODY(clEnqueueMarkerWithWaitList, event, nw, wl, q, nw, wl, event)}

SHIM_API cl_int clRetainContext(cl_context c){REF_BODY(CL_SHIM_CONTEXT, 1, clRetainContext, c)} SHIM_API cl_int
    clReleaseContext(cl_context c){REF_BODY(CL_SHIM_CONTEXT, -1, clReleaseContext, c)} SHIM_API cl_int
    clRetainCommandQueue(cl_command_queue q){REF_BODY(CL_SHIM_QUEUE, 1, clRetainCommandQueue, q)} SHIM_API cl_int
    clReleaseCommandQueue(cl_command_queue q){REF_BODY(CL_SHIM_QUEUE, -1, clReleaseCommandQueue, q)} SHIM_API cl_int
    clRetainMemObject(cl_mem m){REF_BODY(CL_SHIM_MEM, 1, clRetainMemObject, m)} SHIM_API cl_int
    clReleaseMemObject(cl_mem m){REF_BODY(CL_SHIM_MEM, -1, clReleaseMemObject, m)} SHIM_API cl_int
    clRetainProgram(cl_program p){REF_BODY(CL_SHIM_PROGRAM, 1, clRetainProgram, p)} SHIM_API cl_int
    clReleaseProgram(cl_program p){REF_BODY(CL_SHIM_PROGRAM, -1, clReleaseProgram, p)} SHIM_API cl_int
    clRetainKernel(cl_kernel k){REF_BODY(CL_SHIM_KERNEL, 1, clRetainKernel, k)} SHIM_API cl_int
    clReleaseKernel(cl_kernel k){REF_BODY(CL_SHIM_KERNEL, -1, clReleaseKernel, k)} SHIM_API cl_int
    clRetainEvent(cl_event e){REF_BODY(CL_SHIM_EVENT, 1, clRetainEvent, e)} SHIM_API cl_int clReleaseEvent(cl_event e) {
    REF_BODY(CL_SHIM_EVENT, -1, clReleaseEvent, e)
}
