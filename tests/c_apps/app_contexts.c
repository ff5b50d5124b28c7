/* Calls a virtual platform must answer as the real one: prints "name code" per call.
 * Two contexts (objects of one used on the other's queue: CL_INVALID_CONTEXT, and no data
 * changes), a context made by a device type the device is not, reqd_work_group_size at the
 * enqueue, CL_MEM_HOST_* flags (conflicting, on sub-buffers, and enforced on transfers and
 * maps), conflicting host-pointer flags, CL_KERNEL_LOCAL_MEM_SIZE with a __local argument
 * set, and buffer and context destructor callbacks (last set, first called). Lines starting
 * "SUBDEV" may differ: route mode's virtual device has no partitions. */
#include <string.h>

#include "test_app.h"

#define T(name, expr) do { cl_int e_ = (expr); printf("%s %d\n", name, e_); } while (0)

static int order[8], norder = 0;
static void CL_CALLBACK mem_gone(cl_mem m, void *user) {
    (void)m;
    if (norder < 8) order[norder++] = (int)(size_t)user;
}
static void CL_CALLBACK ctx_gone(cl_context c, void *user) {
    (void)c;
    if (norder < 8) order[norder++] = (int)(size_t)user;
}

static const char *SRC =
    "__kernel void inc(__global int *o, __local int *t) { t[0] = 0; o[get_global_id(0)] += 1; }\n"
    "__kernel __attribute__((reqd_work_group_size(8, 1, 1)))\n"
    "void fixed(__global int *o) { o[get_global_id(0)] = 7; }\n";

static cl_program build(cl_context ctx, cl_device_id dev) {
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(p, 1, &dev, NULL, NULL, NULL));
    return p;
}

int main(void) {
    cl_device_id dev;
    cl_command_queue q, q2;
    cl_int err;
    cl_context ctx = test_context(&dev, &q), ctx2 = test_context(&dev, &q2);
    cl_platform_id plat;
    CHECK(clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL));
    cl_program p = build(ctx, dev);
    cl_kernel inc = clCreateKernel(p, "inc", &err), fixed = clCreateKernel(p, "fixed", &err);
    CHECK(err);
    int zeros[64];
    memset(zeros, 0, sizeof zeros);
    cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zeros, zeros, &err);
    cl_mem a2 = clCreateBuffer(ctx2, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zeros, zeros, &err);
    CHECK(err);
    CHECK(clSetKernelArg(inc, 0, sizeof a, &a));
    CHECK(clSetKernelArg(inc, 1, 1000, NULL));
    cl_ulong lmem = 0;
    CHECK(clGetKernelWorkGroupInfo(inc, dev, CL_KERNEL_LOCAL_MEM_SIZE, sizeof lmem, &lmem, NULL));
    printf("local_mem_with_arg_at_least_1000 %d\n", lmem >= 1000);

    /* another context's objects */
    size_t g = 64, l8 = 8, l4 = 4;
    T("ctx2.launch", clEnqueueNDRangeKernel(q2, inc, 1, NULL, &g, NULL, 0, NULL, NULL));
    T("ctx2.read", clEnqueueReadBuffer(q2, a, CL_TRUE, 0, 4, zeros, 0, NULL, NULL));
    T("ctx2.copy", clEnqueueCopyBuffer(q, a2, a, 0, 0, 64, 0, NULL, NULL));
    cl_event ev;
    CHECK(clEnqueueMarkerWithWaitList(q, 0, NULL, &ev));
    CHECK(clFinish(q));
    T("ctx2.wait_list", clEnqueueMarkerWithWaitList(q2, 1, &ev, NULL));
    CHECK(clFinish(q2));
    int h[64];
    CHECK(clEnqueueReadBuffer(q, a, CL_TRUE, 0, sizeof h, h, 0, NULL, NULL));
    printf("unchanged %d %d\n", h[0], h[63]);
    clReleaseEvent(ev);

    /* a context of a type the device is not */
    cl_device_type type;
    CHECK(clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL));
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)plat, 0};
    cl_device_type other = type & CL_DEVICE_TYPE_CPU ? CL_DEVICE_TYPE_GPU : CL_DEVICE_TYPE_CPU;
    cl_context none = clCreateContextFromType(props, other, NULL, NULL, &err);
    printf("ctx_from_other_type %d\n", err);
    (void)none; /* PoCL hands back an object with the error: not released (undefined) */

    /* reqd_work_group_size(8, 1, 1) */
    CHECK(clSetKernelArg(fixed, 0, sizeof a, &a));
    T("reqd.right", clEnqueueNDRangeKernel(q, fixed, 1, NULL, &g, &l8, 0, NULL, NULL));
    T("reqd.wrong", clEnqueueNDRangeKernel(q, fixed, 1, NULL, &g, &l4, 0, NULL, NULL));
    T("reqd.finish", clFinish(q));

    /* host access flags */
    cl_mem m;
    m = clCreateBuffer(ctx, CL_MEM_HOST_READ_ONLY | CL_MEM_HOST_WRITE_ONLY, 64, NULL, &err);
    printf("host.two_flags %d\n", err);
    m = clCreateBuffer(ctx, CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR, 64, zeros, &err);
    printf("host.use_and_copy %d\n", err);
    m = clCreateBuffer(ctx, CL_MEM_USE_HOST_PTR | CL_MEM_ALLOC_HOST_PTR, 64, zeros, &err);
    printf("host.use_and_alloc %d\n", err);
    cl_mem wo = clCreateBuffer(ctx, CL_MEM_HOST_WRITE_ONLY, 256, NULL, &err);
    CHECK(err);
    cl_mem na = clCreateBuffer(ctx, CL_MEM_HOST_NO_ACCESS, 256, NULL, &err);
    CHECK(err);
    T("host.read_write_only", clEnqueueReadBuffer(q, wo, CL_TRUE, 0, 4, h, 0, NULL, NULL));
    T("host.write_write_only", clEnqueueWriteBuffer(q, wo, CL_TRUE, 0, 4, h, 0, NULL, NULL));
    T("host.write_no_access", clEnqueueWriteBuffer(q, na, CL_TRUE, 0, 4, h, 0, NULL, NULL));
    clEnqueueMapBuffer(q, na, CL_TRUE, CL_MAP_WRITE, 0, 4, 0, NULL, NULL, &err);
    printf("host.map_no_access %d\n", err);
    cl_buffer_region reg = {0, 128};
    m = clCreateSubBuffer(wo, CL_MEM_HOST_READ_ONLY, CL_BUFFER_CREATE_TYPE_REGION, &reg, &err);
    printf("host.sub_read_of_write_only %d\n", err);
    if (m) clReleaseMemObject(m);
    clReleaseMemObject(wo);
    clReleaseMemObject(na);

    /* sub-devices */
    cl_device_partition_property eq[] = {CL_DEVICE_PARTITION_EQUALLY, 1, 0};
    cl_uint n = 0;
    printf("SUBDEV count %d\n", clCreateSubDevices(dev, eq, 0, NULL, &n));

    /* destructor callbacks: called when the object is freed, the last set first */
    cl_mem d = clCreateBuffer(ctx2, CL_MEM_READ_WRITE, 64, NULL, &err);
    CHECK(err);
    T("dtor.mem1", clSetMemObjectDestructorCallback(d, mem_gone, (void *)1));
    T("dtor.mem2", clSetMemObjectDestructorCallback(d, mem_gone, (void *)2));
    T("dtor.ctx", clSetContextDestructorCallback(ctx2, ctx_gone, (void *)3));
    clReleaseMemObject(d);
    clReleaseMemObject(a2);
    clReleaseCommandQueue(q2);
    clReleaseContext(ctx2);
    printf("dtor.order");
    for (int i = 0; i < norder; i++) printf(" %d", order[i]);
    printf("\n");
    clReleaseMemObject(a);
    clReleaseKernel(inc);
    clReleaseKernel(fixed);
    clReleaseProgram(p);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 0;
}
