/* What the test apps share: the OpenCL headers, CHECK (print the failing call and its
 * code, exit 1) and the first device's context + queue. Header-only: each app is one
 * file compiled by its test (`gcc app.c -lOpenCL`), found next to the app. */
#ifndef CLPROJ_TEST_APP_H
#define CLPROJ_TEST_APP_H
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x) do { cl_int e_ = (x); if (e_ != CL_SUCCESS) { printf("%s:%d: %s = %d\n", __FILE__, __LINE__, #x, e_); exit(1); } } while (0)

/* The first platform's first device, a context on it and an in-order queue. */
static cl_context test_context(cl_device_id *dev, cl_command_queue *q) {
    cl_platform_id plat;
    cl_int err;
    CHECK(clGetPlatformIDs(1, &plat, NULL));
    CHECK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, dev, NULL));
    cl_context ctx = clCreateContext(NULL, 1, dev, NULL, NULL, &err);
    CHECK(err);
    *q = clCreateCommandQueue(ctx, *dev, 0, &err);
    CHECK(err);
    return ctx;
}

/* Kernel `name` of `src`, built for `dev` in `ctx` (the program's reference is the
 * kernel's: released with it). */
static inline cl_kernel test_kernel(cl_context ctx, cl_device_id dev, const char *src,
                                    const char *name) {
    cl_int err;
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, NULL, NULL, NULL));
    cl_kernel k = clCreateKernel(prog, name, &err);
    CHECK(err);
    clReleaseProgram(prog);
    return k;
}
#endif
