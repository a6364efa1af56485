/*
 * What one kernel launch costs on this device and driver: a near-empty kernel
 * enqueued N times back to back, then one clFinish; per launch, the wall time
 * and the time spent inside clEnqueueNDRangeKernel. The forms differ in what
 * a driver might serialise on: the queue's properties (profiling, out of
 * order), an event out or a wait on the previous launch, a clFlush after
 * every launch, a kernel with or without a buffer argument, arguments set
 * again before every launch (as the library does), and two queues taking
 * turns. With a profiling queue it also prints what the events say: the
 * kernel's own time (END - START) and the gap from one kernel's END to the
 * next one's START, which separates the GPU's idle time between kernels from
 * the host's cost. On the H200 (driver 580.159) the first forms ran
 * 35.7-37.9 us per launch with 2.1-2.7 us of it inside the call: the reason
 * the decode family merges its splits in the same launch on NVIDIA
 * (cl/flash_decode.cl, FUSED_MERGE). Usage: launch_cost [launches]
 */
#define _POSIX_C_SOURCE 199309L
#undef CL_TARGET_OPENCL_VERSION /* the project's 1.2 (CMakeLists.txt); this harness times 2.0's calls */
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
    "__kernel void k(__global float *x, int n, float a) { int i = get_global_id(0); if (i < n) x[i] = x[i] * a; }\n"
    "__kernel void e(int n) { }\n";

enum { EVENT_NONE, EVENT_OUT, EVENT_WAIT };

struct form {
    const char *name;
    cl_command_queue_properties props;
    int events;      /* EVENT_* */
    int flush_each;  /* clFlush after every launch */
    int empty;       /* the kernel without a buffer argument */
    int set_args;    /* clSetKernelArg before every launch */
    int two_queues;  /* alternate between two queues */
};

struct setup {
    cl_context ctx;
    cl_device_id device;
    cl_kernel k, e;
    cl_mem buf;
};

static void set_args(const struct setup *s) {
    const int n = 256;
    const float a = 1.0f;
    clSetKernelArg(s->k, 0, sizeof s->buf, &s->buf);
    clSetKernelArg(s->k, 1, sizeof n, &n);
    clSetKernelArg(s->k, 2, sizeof a, &a);
    clSetKernelArg(s->e, 0, sizeof n, &n);
}

static void run_form(const struct setup *s, const struct form *f, int launches) {
    cl_int err;
    cl_queue_properties props[] = {CL_QUEUE_PROPERTIES, f->props, 0};
    cl_command_queue q[2];
    q[0] = clCreateCommandQueueWithProperties(s->ctx, s->device, props, &err);
    if (err != CL_SUCCESS) {
        printf("%-46s queue refused (%d)\n", f->name, err);
        return;
    }
    q[1] = f->two_queues ? clCreateCommandQueueWithProperties(s->ctx, s->device, props, &err) : q[0];
    const int profiling = (f->props & CL_QUEUE_PROFILING_ENABLE) != 0;
    cl_event *events = profiling ? calloc((size_t)launches, sizeof *events) : NULL;
    const size_t global = 256, local = 128;
    cl_kernel kernel = f->empty ? s->e : s->k;
    for (int round = 0; round < 2; ++round) { /* the first round warms up */
        cl_event prev = NULL;
        double start = now_us(), inside = 0.0;
        for (int i = 0; i < launches; ++i) {
            cl_command_queue qi = q[i & 1];
            if (f->set_args) set_args(s);
            cl_event ev = NULL;
            const int want_event = f->events != EVENT_NONE || events;
            const int wait = f->events == EVENT_WAIT && prev;
            const double t0 = now_us();
            clEnqueueNDRangeKernel(qi, kernel, 1, NULL, &global, &local, wait ? 1 : 0, wait ? &prev : NULL,
                                   want_event ? &ev : NULL);
            if (f->flush_each) clFlush(qi);
            inside += now_us() - t0;
            if (prev && !(events && round)) clReleaseEvent(prev);
            prev = ev;
            if (events && round) events[i] = ev;
        }
        if (prev && !(events && round)) clReleaseEvent(prev);
        clFinish(q[0]);
        clFinish(q[1]);
        if (!round) continue;
        printf("%-46s %7.2f us per launch, %6.2f us inside the enqueue", f->name, (now_us() - start) / launches,
               inside / launches);
        if (events) {
            double busy = 0.0, gap = 0.0;
            cl_ulong last_end = 0;
            for (int i = 0; i < launches; ++i) {
                cl_ulong st = 0, en = 0;
                clGetEventProfilingInfo(events[i], CL_PROFILING_COMMAND_START, sizeof st, &st, NULL);
                clGetEventProfilingInfo(events[i], CL_PROFILING_COMMAND_END, sizeof en, &en, NULL);
                busy += (double)(en - st) * 1e-3;
                if (i && st > last_end) gap += (double)(st - last_end) * 1e-3;
                last_end = en;
                clReleaseEvent(events[i]);
            }
            printf("; events: kernel %.2f us, gap %.2f us", busy / launches, gap / (launches - 1));
        }
        printf("\n");
    }
    free(events);
    if (f->two_queues) clReleaseCommandQueue(q[1]);
    clReleaseCommandQueue(q[0]);
}

int main(int argc, char **argv) {
    const int launches = argc > 1 ? atoi(argv[1]) : 4000;
    struct setup s;
    cl_platform_id platform;
    cl_int err = clGetPlatformIDs(1, &platform, NULL);
    if (err == CL_SUCCESS) err = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &s.device, NULL);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "launch_cost: no OpenCL device (%d)\n", err);
        return 1;
    }
    s.ctx = clCreateContext(NULL, 1, &s.device, NULL, NULL, &err);
    cl_program prog = clCreateProgramWithSource(s.ctx, 1, &source, NULL, &err);
    if (clBuildProgram(prog, 1, &s.device, "", NULL, NULL) != CL_SUCCESS) {
        fprintf(stderr, "launch_cost: build failed\n");
        return 1;
    }
    s.k = clCreateKernel(prog, "k", &err);
    s.e = clCreateKernel(prog, "e", &err);
    s.buf = clCreateBuffer(s.ctx, CL_MEM_READ_WRITE, 1 << 20, NULL, &err);
    set_args(&s);
    const cl_command_queue_properties ooo = CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE;
    const cl_command_queue_properties prof = CL_QUEUE_PROFILING_ENABLE;
    const struct form forms[] = {
        {"in order", 0, EVENT_NONE, 0, 0, 0, 0},
        {"in order, event out", 0, EVENT_OUT, 0, 0, 0, 0},
        {"in order, waits on the previous", 0, EVENT_WAIT, 0, 0, 0, 0},
        {"in order, flush each", 0, EVENT_NONE, 1, 0, 0, 0},
        {"in order, no buffer argument", 0, EVENT_NONE, 0, 1, 0, 0},
        {"in order, arguments set each launch", 0, EVENT_NONE, 0, 0, 1, 0},
        {"in order, two queues", 0, EVENT_NONE, 0, 0, 0, 1},
        {"out of order", ooo, EVENT_NONE, 0, 0, 0, 0},
        {"out of order, waits on the previous", ooo, EVENT_WAIT, 0, 0, 0, 0},
        {"out of order, no buffer argument", ooo, EVENT_NONE, 0, 1, 0, 0},
        {"profiling, in order", prof, EVENT_NONE, 0, 0, 0, 0},
        {"profiling, in order, no buffer argument", prof, EVENT_NONE, 0, 1, 0, 0},
        {"profiling, out of order, waits", prof | ooo, EVENT_WAIT, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; ++i) run_form(&s, &forms[i], launches);
    clReleaseMemObject(s.buf);
    clReleaseKernel(s.k);
    clReleaseKernel(s.e);
    clReleaseProgram(prog);
    clReleaseContext(s.ctx);
    return 0;
}
