/* Test app for the shim's Python start ahead of the first launch (project mode, an app
 * without Python: native/shim/python_start.c). Each mode acts right after the app's first
 * OpenCL call, while that start may still run on its thread:
 *   exit N   end with status N at once;
 *   launch   launch a kernel at once (it waits for the start, and is recorded);
 *   fork     fork at once; parent and child each launch a kernel and print its result;
 *   fork-exit  fork at once; the child launches and ends with exit() (running the exit
 *            handlers it inherited), then the parent launches.
 * Prints the kernel results, identical with and without the shim. */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_app.h"

static const char *SRC =
    "__kernel void scale(__global float *x, float a) { size_t i = get_global_id(0); x[i] = x[i] * a + 1.0f; }\n";

static void launch(const char *who) {
    cl_int err;
    cl_device_id device;
    cl_command_queue q;
    cl_context ctx = test_context(&device, &q);
    cl_kernel k = test_kernel(ctx, device, SRC, "scale");
    float data[256];
    for (int i = 0; i < 256; i++) data[i] = (float)(i % 11);
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof data, data, &err);
    CHECK(err);
    float a = 0.5f;
    size_t g = 256;
    CHECK(clSetKernelArg(k, 0, sizeof b, &b));
    CHECK(clSetKernelArg(k, 1, sizeof a, &a));
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(q, b, CL_TRUE, 0, sizeof data, data, 0, NULL, NULL));
    double s = 0;
    for (int i = 0; i < 256; i++) s += data[i];
    printf("%s sum %.4f\n", who, s);
    fflush(stdout);
    clReleaseMemObject(b);
    clReleaseKernel(k);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: app_prestart exit N | launch | fork | fork-exit\n");
        return 2;
    }
    cl_platform_id platform;
    CHECK(clGetPlatformIDs(1, &platform, NULL));
    if (strcmp(argv[1], "exit") == 0) exit(argc > 2 ? atoi(argv[2]) : 0);
    if (strcmp(argv[1], "launch") == 0) {
        launch("app");
        return 0;
    }
    int at_exit = strcmp(argv[1], "fork-exit") == 0; /* the child ends with exit() */
    if (at_exit || strcmp(argv[1], "fork") == 0) {
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            launch("child");
            if (at_exit) exit(0);
            _exit(0);
        }
        if (!at_exit) launch("parent"); /* beside the child; after its end in fork-exit */
        int status = 0;
        if (waitpid(pid, &status, 0) != pid) return 1;
        if (at_exit) launch("parent");
        return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    }
    return 2;
}
