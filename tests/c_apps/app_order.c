/* Ordering and event semantics under timed launches (tests/test_observe_sampling.py).
 * A non-commutative chain x = 3x + i with buffer copies between launches: the checksums
 * change if any launch or copy is reordered. Events the app asks for must belong to its
 * queue and carry no profiling information (its queue has none); on a queue created with
 * profiling they must. Prints the checksums and every violated expectation.
 * Usage: app_order [launches] */
#include "test_app.h"

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 500;
    cl_device_id dev;
    cl_command_queue q;
    cl_int err;
    cl_context ctx = test_context(&dev, &q);
    cl_command_queue qp = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    CHECK(err);
    cl_command_queue_properties props = 1234;
    CHECK(clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL));
    if (props != 0) printf("queue properties %lu\n", (unsigned long)props);
    const char *src = "__kernel void chain(__global uint *x, uint a) {"
                      " size_t i = get_global_id(0); x[i] = x[i] * 3u + a + (uint)i; }";
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(p, 1, &dev, "", NULL, NULL));
    cl_kernel k = clCreateKernel(p, "chain", &err);
    CHECK(err);
    cl_uint init[64] = {0}, acc[64];
    cl_mem x = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof init, init, &err);
    CHECK(err);
    cl_mem y = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof init, NULL, &err);
    CHECK(err);
    size_t g = 64;
    cl_uint ysum = 0;
    for (int i = 0; i < n; i++) {
        cl_uint a = (cl_uint)i;
        cl_event e = NULL;
        int want = i % 7 == 3;
        CHECK(clSetKernelArg(k, 0, sizeof x, &x));
        CHECK(clSetKernelArg(k, 1, sizeof a, &a));
        CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, want ? &e : NULL));
        if (want) {
            cl_command_queue eq = NULL;
            cl_command_type type = 0;
            cl_ulong t = 0;
            CHECK(clGetEventInfo(e, CL_EVENT_COMMAND_QUEUE, sizeof eq, &eq, NULL));
            CHECK(clGetEventInfo(e, CL_EVENT_COMMAND_TYPE, sizeof type, &type, NULL));
            if (eq != q) printf("launch %d: event of another queue\n", i);
            if (type != CL_COMMAND_NDRANGE_KERNEL) printf("launch %d: command type %u\n", i, type);
            CHECK(clWaitForEvents(1, &e));
            err = clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof t, &t, NULL);
            if (err != CL_PROFILING_INFO_NOT_AVAILABLE) printf("launch %d: profiling %d\n", i, err);
            CHECK(clReleaseEvent(e));
        }
        if (i % 10 == 9) { /* a snapshot of x between launches: order-sensitive */
            CHECK(clEnqueueCopyBuffer(q, x, y, 0, 0, sizeof init, 0, NULL, NULL));
            CHECK(clEnqueueReadBuffer(q, y, CL_TRUE, 0, sizeof acc, acc, 0, NULL, NULL));
            for (int j = 0; j < 64; j++) ysum = ysum * 31u + acc[j];
        }
    }
    /* the app's own profiling queue keeps its profiling */
    for (int i = 0; i < 20; i++) {
        cl_event e = NULL;
        cl_ulong t0 = 0, t1 = 0;
        CHECK(clEnqueueNDRangeKernel(qp, k, 1, NULL, &g, NULL, 0, NULL, &e));
        CHECK(clWaitForEvents(1, &e));
        CHECK(clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL));
        CHECK(clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL));
        if (t1 < t0) printf("profiling queue: end before start\n");
        CHECK(clReleaseEvent(e));
    }
    CHECK(clEnqueueReadBuffer(q, x, CL_TRUE, 0, sizeof acc, acc, 0, NULL, NULL));
    cl_uint xsum = 0;
    for (int j = 0; j < 64; j++) xsum = xsum * 31u + acc[j];
    printf("x %u y %u\n", xsum, ysum);
    clReleaseMemObject(x);
    clReleaseMemObject(y);
    clReleaseKernel(k);
    clReleaseProgram(p);
    clReleaseCommandQueue(qp);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 0;
}
