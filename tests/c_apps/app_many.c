/* Launch-heavy app for the overhead benchmark: N tiny kernel launches (set args + enqueue),
 * one clFinish every 100 launches. Usage: app_many N */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10000;
    cl_platform_id plat;
    cl_device_id dev;
    cl_int err;
    clGetPlatformIDs(1, &plat, NULL);
    clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
    const char *src = "__kernel void inc(__global int *x, int a) { x[get_global_id(0)] += a; }";
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    clBuildProgram(p, 1, &dev, "", NULL, NULL);
    cl_kernel k = clCreateKernel(p, "inc", &err);
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64 * sizeof(int), NULL, &err);
    int zero[64] = {0};
    clEnqueueWriteBuffer(q, b, CL_TRUE, 0, sizeof zero, zero, 0, NULL, NULL);
    size_t g = 64;
    for (int i = 0; i < n; i++) {
        int a = 1;
        clSetKernelArg(k, 0, sizeof b, &b);
        clSetKernelArg(k, 1, sizeof a, &a);
        if (clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL) != CL_SUCCESS) return 1;
        if (i % 100 == 99) clFinish(q);
    }
    int out[64];
    clEnqueueReadBuffer(q, b, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL);
    printf("x[0] = %d\n", out[0]);
    clReleaseMemObject(b);
    clReleaseKernel(k);
    clReleaseProgram(p);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 0;
}
