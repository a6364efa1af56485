/*
 * What one kernel launch costs on this device and driver: an empty-ish kernel
 * enqueued N times back to back, then one clFinish; per launch, the wall time
 * and the time spent inside clEnqueueNDRangeKernel, on a queue with and
 * without profiling, with no event, an event out, and an event out waiting on
 * the previous launch's. On the H200 (driver 580.159) every form ran 35.7-37.9
 * us per launch with 2.1-2.7 us of it inside the call: the reason the decode
 * family merges its splits in the same launch on NVIDIA (cl/flash_decode.cl,
 * FUSED_MERGE). Usage: launch_cost [launches]
 */
#define _POSIX_C_SOURCE 199309L
#define CL_TARGET_OPENCL_VERSION 200
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static const char *source =
    "__kernel void k(__global float *x, int n, float a) { int i = get_global_id(0); if (i < n) x[i] = x[i] * a; }";

int main(int argc, char **argv) {
    const int launches = argc > 1 ? atoi(argv[1]) : 4000;
    cl_platform_id platform;
    cl_device_id device;
    cl_int err = clGetPlatformIDs(1, &platform, NULL);
    if (err == CL_SUCCESS) err = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "launch_cost: no OpenCL device (%d)\n", err);
        return 1;
    }
    cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    cl_program prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
    if (clBuildProgram(prog, 1, &device, "", NULL, NULL) != CL_SUCCESS) {
        fprintf(stderr, "launch_cost: build failed\n");
        return 1;
    }
    cl_kernel kernel = clCreateKernel(prog, "k", &err);
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 1 << 20, NULL, &err);
    const int n = 256;
    const float a = 1.0f;
    clSetKernelArg(kernel, 0, sizeof buf, &buf);
    clSetKernelArg(kernel, 1, sizeof n, &n);
    clSetKernelArg(kernel, 2, sizeof a, &a);
    const size_t global = 256, local = 128;
    static const char *const modes[3] = {"no event", "event out", "event out, waits on the previous"};
    for (int profiling = 0; profiling < 2; ++profiling) {
        cl_queue_properties props[] = {CL_QUEUE_PROPERTIES, profiling ? CL_QUEUE_PROFILING_ENABLE : 0, 0};
        cl_command_queue q = clCreateCommandQueueWithProperties(ctx, device, props, &err);
        for (int mode = 0; mode < 3; ++mode) {
            for (int round = 0; round < 2; ++round) { /* the first round warms up */
                cl_event prev = NULL;
                double start = now_us(), inside = 0.0;
                for (int i = 0; i < launches; ++i) {
                    cl_event ev = NULL;
                    const double t0 = now_us();
                    if (mode == 0)
                        clEnqueueNDRangeKernel(q, kernel, 1, NULL, &global, &local, 0, NULL, NULL);
                    else
                        clEnqueueNDRangeKernel(q, kernel, 1, NULL, &global, &local, mode == 2 && prev ? 1 : 0,
                                               mode == 2 && prev ? &prev : NULL, &ev);
                    inside += now_us() - t0;
                    if (prev) clReleaseEvent(prev);
                    prev = ev;
                }
                if (prev) clReleaseEvent(prev);
                clFinish(q);
                if (round)
                    printf("profiling %d, %-33s %7.2f us per launch, %6.2f us inside clEnqueueNDRangeKernel\n",
                           profiling, modes[mode], (now_us() - start) / launches, inside / launches);
            }
        }
        clReleaseCommandQueue(q);
    }
    clReleaseMemObject(buf);
    clReleaseKernel(kernel);
    clReleaseProgram(prog);
    clReleaseContext(ctx);
    return 0;
}
