/* Two valid uses of OpenCL that crashed an app under the shim, natively fine:
 * "fail": a kernel waits for a user event the app then sets to an error status (-77); the
 *   kernel's event reports the failure (clWaitForEvents gives
 *   CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST). PoCL aborted the app when the shim had
 *   timed that launch across a second queue.
 * "subdevice": a kernel runs on a sub-device the app releases before it exits; the shim's
 *   exit summary must not ask the driver about the released device (PoCL segfaulted).
 * Prints one line per step; exit status 0. */
#include <string.h>

#include "test_app.h"

static const char *SRC = "__kernel void inc(__global int *o) { o[get_global_id(0)] += 1; }\n";

static void user_event_fails(void) {
    cl_device_id dev;
    cl_command_queue q;
    cl_int err, status;
    cl_context ctx = test_context(&dev, &q);
    cl_kernel k = test_kernel(ctx, dev, SRC, "inc");
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 1024, NULL, &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    size_t g = 256;
    cl_event ue = clCreateUserEvent(ctx, &err), done;
    CHECK(err);
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 1, &ue, &done));
    CHECK(clSetUserEventStatus(ue, -77));
    cl_int waited = clWaitForEvents(1, &done);
    CHECK(clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL));
    printf("fail: wait %d, kernel failed %d\n", waited, status < 0);
    clReleaseEvent(done);
    clReleaseEvent(ue);
    printf("fail: finish %d\n", clFinish(q));
}

static void subdevice_released(void) {
    cl_device_id dev, subs[64], sub;
    cl_command_queue q;
    cl_int err;
    cl_uint n = 0;
    cl_context whole = test_context(&dev, &q);
    cl_device_partition_property props[] = {CL_DEVICE_PARTITION_EQUALLY, 1, 0};
    if (clCreateSubDevices(dev, props, 0, NULL, &n) != CL_SUCCESS || n == 0 || n > 64 ||
        clCreateSubDevices(dev, props, n, subs, NULL) != CL_SUCCESS) {
        printf("subdevice: not supported\n");
        return;
    }
    sub = subs[0];
    for (cl_uint i = 1; i < n; i++) clReleaseDevice(subs[i]);
    cl_context ctx = clCreateContext(NULL, 1, &sub, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue sq = clCreateCommandQueue(ctx, sub, 0, &err);
    CHECK(err);
    cl_kernel k = test_kernel(ctx, sub, SRC, "inc");
    int host[64];
    memset(host, 0, sizeof host);
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof host, host,
                                &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    size_t g = 64;
    CHECK(clEnqueueNDRangeKernel(sq, k, 1, NULL, &g, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(sq, buf, CL_TRUE, 0, sizeof host, host, 0, NULL, NULL));
    printf("subdevice: sum %d\n", host[0] + host[63]);
    clReleaseMemObject(buf);
    clReleaseKernel(k);
    clReleaseCommandQueue(sq);
    clReleaseContext(ctx);
    clReleaseDevice(sub);
    clReleaseContext(whole);
}

int main(int argc, char **argv) {
    const char *step = argc > 1 ? argv[1] : "both";
    if (strcmp(step, "subdevice") != 0) user_event_fails();
    if (strcmp(step, "fail") != 0) subdevice_released();
    return 0;
}
