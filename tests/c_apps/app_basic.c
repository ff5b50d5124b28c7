/* Test app for the shim: several contexts/queues, clCreateKernelsInProgram,
 * clCompileProgram + clLinkProgram, sub-buffers, CL_MEM_USE_HOST_PTR, __local and NULL
 * arguments, clEnqueueTask, threads launching concurrently. Prints a checksum that must be
 * identical with and without the shim. Usage: app_basic [launches] [threads] */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(x) do { cl_int e_ = (x); if (e_ != CL_SUCCESS) { fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #x, e_); exit(1); } } while (0)

static const char *SRC =
    "__kernel void scale(__global float *x, float a) { size_t i = get_global_id(0); x[i] = x[i] * a + 1.0f; }\n"
    "__kernel void rev(__global const int *in, __global int *out, __local int *tmp, __global int *opt) {\n"
    "  int l = get_local_id(0), n = get_local_size(0);\n"
    "  tmp[l] = in[get_global_id(0)]; barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  out[get_global_id(0)] = tmp[n - 1 - l] + (opt == 0 ? 1 : opt[0]); }\n"
    "__kernel void one(__global int *x) { x[0] += 41; }\n";
static const char *LIB_SRC = "float helper(float v) { return v * 2.0f; }\n";
static const char *MAIN_SRC =
    "float helper(float v);\n"
    "__kernel void twice(__global float *x) { size_t i = get_global_id(0); x[i] = helper(x[i]); }\n";

static cl_device_id device;
static cl_context ctx;
static int launches = 20;

static void *worker(void *arg) {
    long id = (long)arg;
    cl_int err;
    cl_command_queue q = clCreateCommandQueue(ctx, device, 0, &err);
    CHECK(err);
    cl_program p = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(p, 1, &device, "-cl-mad-enable", NULL, NULL));
    cl_kernel k = clCreateKernel(p, "scale", &err);
    CHECK(err);
    float data[256];
    for (int i = 0; i < 256; i++) data[i] = (float)(i % 7) + (float)id;
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof data, data, &err);
    CHECK(err);
    for (int i = 0; i < launches; i++) {
        float a = 0.5f;
        size_t g = 256;
        CHECK(clSetKernelArg(k, 0, sizeof b, &b));
        CHECK(clSetKernelArg(k, 1, sizeof a, &a));
        CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
    }
    CHECK(clEnqueueReadBuffer(q, b, CL_TRUE, 0, sizeof data, data, 0, NULL, NULL));
    double s = 0;
    for (int i = 0; i < 256; i++) s += data[i];
    printf("thread %ld sum %.4f\n", id, s);
    clReleaseMemObject(b);
    clReleaseKernel(k);
    clReleaseProgram(p);
    clReleaseCommandQueue(q);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) launches = atoi(argv[1]);
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    cl_platform_id plat;
    cl_int err;
    CHECK(clGetPlatformIDs(1, &plat, NULL));
    CHECK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &device, NULL));
    ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    CHECK(err);

    /* threads launching concurrently, each with its own queue/program/kernel */
    pthread_t th[16];
    for (long t = 0; t < threads && t < 16; t++) pthread_create(&th[t], NULL, worker, (void *)t);
    for (long t = 0; t < threads && t < 16; t++) pthread_join(th[t], NULL);

    /* a second context with its own queue: clCreateKernelsInProgram, sub-buffers,
     * USE_HOST_PTR, __local and NULL arguments, clEnqueueTask */
    cl_context ctx2 = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue q2 = clCreateCommandQueue(ctx2, device, CL_QUEUE_PROFILING_ENABLE, &err);
    CHECK(err);
    cl_program p = clCreateProgramWithSource(ctx2, 1, &SRC, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(p, 0, NULL, "", NULL, NULL));
    cl_kernel ks[8];
    cl_uint nk = 0;
    CHECK(clCreateKernelsInProgram(p, 8, ks, &nk));
    cl_kernel rev = NULL, one = NULL;
    for (cl_uint i = 0; i < nk; i++) {
        char name[64];
        CHECK(clGetKernelInfo(ks[i], CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL));
        if (!strcmp(name, "rev")) rev = ks[i];
        else if (!strcmp(name, "one")) one = ks[i];
    }
    static int host_in[128];
    int out[128];
    for (int i = 0; i < 128; i++) host_in[i] = i;
    cl_mem in = clCreateBuffer(ctx2, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, sizeof host_in, host_in, &err);
    CHECK(err);
    cl_mem big = clCreateBuffer(ctx2, CL_MEM_READ_WRITE, 2 * sizeof out, NULL, &err);
    CHECK(err);
    cl_buffer_region region = {sizeof out, sizeof out};
    cl_mem sub = clCreateSubBuffer(big, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
    CHECK(err);
    size_t g = 128, l = 32;
    CHECK(clSetKernelArg(rev, 0, sizeof in, &in));
    CHECK(clSetKernelArg(rev, 1, sizeof sub, &sub));
    CHECK(clSetKernelArg(rev, 2, 32 * sizeof(int), NULL));
    CHECK(clSetKernelArg(rev, 3, sizeof(cl_mem), NULL));
    cl_event ev;
    CHECK(clEnqueueNDRangeKernel(q2, rev, 1, NULL, &g, &l, 0, NULL, &ev));
    CHECK(clWaitForEvents(1, &ev));
    cl_ulong t0, t1;
    CHECK(clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL));
    CHECK(clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL));
    clReleaseEvent(ev);
    CHECK(clSetKernelArg(one, 0, sizeof sub, &sub));
    CHECK(clEnqueueTask(q2, one, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(q2, sub, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    long s = 0;
    for (int i = 0; i < 128; i++) s += (long)out[i] * (i + 1);
    printf("rev checksum %ld\n", s);

    /* clCompileProgram + clLinkProgram */
    cl_program lib = clCreateProgramWithSource(ctx2, 1, &LIB_SRC, NULL, &err);
    CHECK(err);
    cl_program mainp = clCreateProgramWithSource(ctx2, 1, &MAIN_SRC, NULL, &err);
    CHECK(err);
    CHECK(clCompileProgram(lib, 0, NULL, "", 0, NULL, NULL, NULL, NULL));
    CHECK(clCompileProgram(mainp, 0, NULL, "", 0, NULL, NULL, NULL, NULL));
    cl_program inputs[2] = {mainp, lib};
    cl_program linked = clLinkProgram(ctx2, 0, NULL, "", 2, inputs, NULL, NULL, &err);
    CHECK(err);
    cl_kernel twice = clCreateKernel(linked, "twice", &err);
    CHECK(err);
    float f[64];
    for (int i = 0; i < 64; i++) f[i] = (float)i;
    cl_mem fb = clCreateBuffer(ctx2, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof f, f, &err);
    CHECK(err);
    g = 64;
    CHECK(clSetKernelArg(twice, 0, sizeof fb, &fb));
    CHECK(clEnqueueNDRangeKernel(q2, twice, 1, NULL, &g, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(q2, fb, CL_TRUE, 0, sizeof f, f, 0, NULL, NULL));
    printf("twice %.1f %.1f\n", f[1], f[63]);
    CHECK(clFinish(q2));

    clReleaseMemObject(fb);
    clReleaseKernel(twice);
    clReleaseProgram(linked);
    clReleaseProgram(lib);
    clReleaseProgram(mainp);
    clReleaseMemObject(sub);
    clReleaseMemObject(big);
    clReleaseMemObject(in);
    for (cl_uint i = 0; i < nk; i++) clReleaseKernel(ks[i]);
    clReleaseProgram(p);
    clReleaseCommandQueue(q2);
    clReleaseContext(ctx2);
    clReleaseContext(ctx);
    return 0;
}
