/* Invalid OpenCL calls: prints one "name code" line per call. The codes must be the same
 * with and without the clproj shim (the shim forwards and never invents errors). */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <stdio.h>

#define T(name, expr) do { cl_int e_ = (expr); printf("%s %d\n", name, e_); } while (0)
#define TP(name, expr) do { cl_int e_ = 12345; void *p_ = (void *)(expr); printf("%s %d %s\n", name, e_, p_ ? "obj" : "null"); if (p_) {} } while (0)

int main(void) {
    cl_platform_id plat;
    cl_device_id dev;
    cl_int err;
    clGetPlatformIDs(1, &plat, NULL);
    clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
    const char *src = "__kernel void k(__global int *x, int a, __local int *t) { x[get_global_id(0)] = a; }";
    const char *bad = "__kernel void k(__global int *x) { this is not C }";
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    clBuildProgram(p, 1, &dev, "", NULL, NULL);
    cl_kernel k = clCreateKernel(p, "k", &err);
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64, NULL, &err);
    size_t g = 16, l = 16, huge = (size_t)1 << 40, zero = 0, l3 = 3;
    int v = 1;

    T("SetKernelArg.bad_index", clSetKernelArg(k, 7, sizeof b, &b));
    T("SetKernelArg.bad_size", clSetKernelArg(k, 1, 2, &v));
    T("SetKernelArg.null_kernel", clSetKernelArg(NULL, 0, sizeof b, &b));
    T("SetKernelArg.local_nonnull", clSetKernelArg(k, 2, 16, &v));
    T("SetKernelArg.local_zero", clSetKernelArg(k, 2, 0, NULL));
    T("SetKernelArg.scalar_null", clSetKernelArg(k, 1, sizeof v, NULL));
    T("Enqueue.args_unset", clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, NULL));
    clSetKernelArg(k, 0, sizeof b, &b);
    clSetKernelArg(k, 1, sizeof v, &v);
    clSetKernelArg(k, 2, 64, NULL);
    T("Enqueue.null_queue", clEnqueueNDRangeKernel(NULL, k, 1, NULL, &g, &l, 0, NULL, NULL));
    T("Enqueue.work_dim0", clEnqueueNDRangeKernel(q, k, 0, NULL, &g, &l, 0, NULL, NULL));
    T("Enqueue.work_dim4", clEnqueueNDRangeKernel(q, k, 4, NULL, &g, &l, 0, NULL, NULL));
    T("Enqueue.null_global", clEnqueueNDRangeKernel(q, k, 1, NULL, NULL, &l, 0, NULL, NULL));
    T("Enqueue.global_zero", clEnqueueNDRangeKernel(q, k, 1, NULL, &zero, NULL, 0, NULL, NULL));
    T("Enqueue.local_not_divisor", clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l3, 0, NULL, NULL));
    T("Enqueue.local_too_big", clEnqueueNDRangeKernel(q, k, 1, NULL, &huge, &huge, 0, NULL, NULL));
    T("EnqueueTask.null_queue", clEnqueueTask(NULL, k, 0, NULL, NULL));
    T("BuildProgram.null", clBuildProgram(NULL, 0, NULL, "", NULL, NULL));
    cl_program pb = clCreateProgramWithSource(ctx, 1, &bad, NULL, &err);
    T("BuildProgram.syntax", clBuildProgram(pb, 1, &dev, "", NULL, NULL));
    T("BuildProgram.bad_option", clBuildProgram(p, 1, &dev, "-not-an-option-xyz", NULL, NULL));
    TP("CreateKernel.bad_name", clCreateKernel(p, "nope", &err)); printf("  err %d\n", err);
    TP("CreateKernel.unbuilt", clCreateKernel(pb, "k", &err)); printf("  err %d\n", err);
    TP("CreateKernel.null_program", clCreateKernel(NULL, "k", &err)); printf("  err %d\n", err);
    T("CreateKernelsInProgram.small", clCreateKernelsInProgram(p, 0, (cl_kernel[1]){0}, NULL));
    TP("CreateProgramWithSource.count0", clCreateProgramWithSource(ctx, 0, &src, NULL, &err)); printf("  err %d\n", err);
    TP("CreateProgramWithSource.null_ctx", clCreateProgramWithSource(NULL, 1, &src, NULL, &err)); printf("  err %d\n", err);
    TP("CreateBuffer.size0", clCreateBuffer(ctx, CL_MEM_READ_WRITE, 0, NULL, &err)); printf("  err %d\n", err);
    TP("CreateBuffer.bad_flags", clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_WRITE_ONLY, 64, NULL, &err)); printf("  err %d\n", err);
    TP("CreateBuffer.hostptr_no_flag", clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64, &v, &err)); printf("  err %d\n", err);
    TP("CreateBuffer.use_host_null", clCreateBuffer(ctx, CL_MEM_USE_HOST_PTR, 64, NULL, &err)); printf("  err %d\n", err);
    TP("CreateBuffer.null_ctx", clCreateBuffer(NULL, CL_MEM_READ_WRITE, 64, NULL, &err)); printf("  err %d\n", err);
    cl_buffer_region r = {32, 64};
    TP("CreateSubBuffer.out_of_range", clCreateSubBuffer(b, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &err)); printf("  err %d\n", err);
    TP("CreateSubBuffer.bad_type", clCreateSubBuffer(b, CL_MEM_READ_WRITE, 0x9999, &r, &err)); printf("  err %d\n", err);
    TP("CreateCommandQueue.bad_props", clCreateCommandQueue(ctx, dev, (cl_command_queue_properties)1 << 20, &err)); printf("  err %d\n", err);
    TP("CreateCommandQueue.null_ctx", clCreateCommandQueue(NULL, dev, 0, &err)); printf("  err %d\n", err);
    cl_queue_properties bp[] = {0x7777, 1, 0};
    TP("CreateQueueWithProps.bad_key", clCreateCommandQueueWithProperties(ctx, dev, bp, &err)); printf("  err %d\n", err);
    T("ReleaseMemObject.null", clReleaseMemObject(NULL));
    T("ReleaseKernel.null", clReleaseKernel(NULL));
    T("ReleaseProgram.null", clReleaseProgram(NULL));
    T("ReleaseCommandQueue.null", clReleaseCommandQueue(NULL));
    T("RetainKernel.null", clRetainKernel(NULL));
    T("ReadBuffer.out_of_range", clEnqueueReadBuffer(q, b, CL_TRUE, 32, 64, &v, 0, NULL, NULL));
    T("ReadBuffer.null_ptr", clEnqueueReadBuffer(q, b, CL_TRUE, 0, 4, NULL, 0, NULL, NULL));
    T("Finish.null", clFinish(NULL));
    cl_event ev;
    clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, &ev);
    clWaitForEvents(1, &ev);
    cl_ulong t;
    T("GetEventProfilingInfo.not_enabled", clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t, &t, NULL));
    cl_command_queue_properties qp = 0;
    T("GetCommandQueueInfo.props", clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof qp, &qp, NULL));
    printf("  props %llu\n", (unsigned long long)qp);
    T("GetCommandQueueInfo.small", clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, 1, &qp, NULL));
    T("GetKernelInfo.bad_param", clGetKernelInfo(k, 0x7777, 0, NULL, NULL));
    T("SetKernelArgSVMPointer.bad_index", clSetKernelArgSVMPointer(k, 9, NULL));
    clReleaseEvent(ev);
    clFinish(q);
    clReleaseMemObject(b);
    clReleaseKernel(k);
    clReleaseProgram(pb);
    clReleaseProgram(p);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 0;
}
