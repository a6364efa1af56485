/*
 * How much __local memory one work-group can really get. CL_DEVICE_LOCAL_MEM_SIZE
 * says 48 KiB on NVIDIA, while the SM holds up to 227 KiB; CUDA reaches the rest
 * only through an opt-in (the maximum dynamic shared size attribute). OpenCL has
 * no such call, but a __local kernel argument is sized at launch, so this asks
 * the driver directly: for each size, a kernel with one __local argument of
 * that size (and, second form, a 32 KiB static __local array beside it) fills
 * every word, reads them back in another order after a barrier and returns a
 * checksum that the host recomputes. Each line gives the status of
 * clSetKernelArg, clEnqueueNDRangeKernel and the blocking read, and whether
 * the checksums agree. Usage: local_limit [max KiB]
 */
#undef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>

static const char *source =
    "uint mix(uint i) { return i * 2654435761u ^ (i >> 7); }\n"
    "__kernel void dyn(__global uint *out, __local uint *buf, uint n) {\n"
    "  uint lid = get_local_id(0), ls = get_local_size(0), acc = 0;\n"
    "  for (uint i = lid; i < n; i += ls) buf[i] = mix(i + get_group_id(0));\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  for (uint i = lid; i < n; i += ls) acc += buf[n - 1 - i] * (i | 1u);\n"
    "  out[get_global_id(0)] = acc;\n"
    "}\n"
    "__kernel void both(__global uint *out, __local uint *buf, uint n) {\n"
    "  __local uint fixed[8192];\n"
    "  uint lid = get_local_id(0), ls = get_local_size(0), acc = 0;\n"
    "  for (uint i = lid; i < 8192u; i += ls) fixed[i] = mix(i + 7u);\n"
    "  for (uint i = lid; i < n; i += ls) buf[i] = mix(i + get_group_id(0));\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  for (uint i = lid; i < n; i += ls) acc += buf[n - 1 - i] * (i | 1u) + fixed[i & 8191u];\n"
    "  out[get_global_id(0)] = acc;\n"
    "}\n";

static cl_uint mix(cl_uint i) { return i * 2654435761u ^ (i >> 7); }

enum { LOCAL = 256, GROUPS = 264 };

/* The checksum one work-item should return (the kernels' arithmetic, wrapped). */
static cl_uint expected(int both, cl_uint group, cl_uint lid, cl_uint n) {
    cl_uint acc = 0;
    for (cl_uint i = lid; i < n; i += LOCAL) {
        acc += mix(n - 1 - i + group) * (i | 1u);
        if (both) acc += mix((i & 8191u) + 7u);
    }
    return acc;
}

int main(int argc, char **argv) {
    int max_kib = argc > 1 ? atoi(argv[1]) : 228;
    cl_platform_id platform;
    cl_device_id device;
    cl_int err = clGetPlatformIDs(1, &platform, NULL);
    if (err == CL_SUCCESS) err = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL);
    if (err != CL_SUCCESS) { printf("no device (%d)\n", err); return 1; }
    char name[256] = "";
    cl_ulong local_size = 0;
    clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name, name, NULL);
    clGetDeviceInfo(device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_size, &local_size, NULL);
    printf("%s: CL_DEVICE_LOCAL_MEM_SIZE %llu\n", name, (unsigned long long)local_size);
    cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    cl_command_queue queue = clCreateCommandQueue(ctx, device, 0, &err);
    cl_program prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
    if ((err = clBuildProgram(prog, 1, &device, "", NULL, NULL)) != CL_SUCCESS) { printf("build %d\n", err); return 1; }
    cl_mem out = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, sizeof(cl_uint) * LOCAL * GROUPS, NULL, &err);
    cl_uint *host = malloc(sizeof(cl_uint) * LOCAL * GROUPS);
    const char *names[2] = {"dyn", "both"};
    for (int both = 0; both < 2; ++both) {
        cl_kernel k = clCreateKernel(prog, names[both], &err);
        cl_ulong static_bytes = 0;
        clGetKernelWorkGroupInfo(k, device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof static_bytes, &static_bytes, NULL);
        printf("kernel %s: CL_KERNEL_LOCAL_MEM_SIZE %llu before the argument\n", names[both], (unsigned long long)static_bytes);
        /* KiB, and 16 bytes past 48 KiB: the first size above CL_DEVICE_LOCAL_MEM_SIZE on NVIDIA. */
        const size_t sizes[] = {16 << 10, 32 << 10, 44 << 10, 48 << 10, (48 << 10) + 16, 56 << 10, 64 << 10, 96 << 10,
                                100 << 10, 128 << 10, 160 << 10, 192 << 10, 200 << 10, 227 << 10, 228 << 10};
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes && sizes[s] <= (size_t)max_kib << 10; ++s) {
            const size_t bytes = sizes[s];
            cl_uint n = (cl_uint)(bytes / sizeof(cl_uint));
            cl_int e_arg = clSetKernelArg(k, 0, sizeof out, &out);
            if (e_arg == CL_SUCCESS) e_arg = clSetKernelArg(k, 1, bytes, NULL);
            if (e_arg == CL_SUCCESS) e_arg = clSetKernelArg(k, 2, sizeof n, &n);
            size_t global = (size_t)LOCAL * GROUPS, local = LOCAL;
            cl_int e_run = e_arg == CL_SUCCESS ? clEnqueueNDRangeKernel(queue, k, 1, NULL, &global, &local, 0, NULL, NULL) : 1;
            cl_int e_read = e_run == CL_SUCCESS
                                ? clEnqueueReadBuffer(queue, out, CL_TRUE, 0, sizeof(cl_uint) * global, host, 0, NULL, NULL)
                                : 1;
            long bad = -1;
            if (e_read == CL_SUCCESS) {
                bad = 0;
                for (cl_uint g = 0; g < GROUPS; ++g)
                    for (cl_uint l = 0; l < LOCAL; ++l) bad += host[g * LOCAL + l] != expected(both, g, l, n);
            }
            cl_ulong used = 0;
            clGetKernelWorkGroupInfo(k, device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof used, &used, NULL);
            printf("  %s %6zu bytes: set %d, enqueue %d, read %d, CL_KERNEL_LOCAL_MEM_SIZE %llu, %s\n", names[both], bytes,
                   e_arg, e_run, e_read, (unsigned long long)used,
                   bad < 0 ? "not run" : bad == 0 ? "checksums agree" : "CHECKSUMS DIFFER");
            if (e_run != CL_SUCCESS && e_run != 1) clFinish(queue);
        }
        clReleaseKernel(k);
    }
    free(host);
    clReleaseMemObject(out);
    clReleaseProgram(prog);
    clReleaseCommandQueue(queue);
    clReleaseContext(ctx);
    return 0;
}
