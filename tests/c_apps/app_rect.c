/* Rectangular transfers and migration hints (tests/test_route_coverage.py).
 * clEnqueueRead/Write/CopyBufferRect with explicit and tightly packed (0) pitches, 2D and
 * 3D, blocking and non-blocking with events and wait lists, between kernels; then
 * clEnqueueMigrateMemObjects. Prints checksums of every result and the error code of
 * each invalid call: the output must be the same with and without the clproj shim. */
#include "test_app.h"
#include <string.h>
#define T(name, expr) printf("%s %d\n", name, (int)(expr))

static unsigned fnv(const unsigned char *p, size_t n) {
    unsigned h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}
static void dump(const char *what, const unsigned char *p, size_t n) {
    printf("%s %08x", what, fnv(p, n));
    for (size_t i = 0; i < n && i < 24; i++) printf(" %02x", p[i]);
    printf("\n");
}

#define N 4096

int main(void) {
    cl_device_id dev;
    cl_command_queue q;
    cl_int err;
    cl_context ctx = test_context(&dev, &q);
    const char *src = "__kernel void bump(__global uchar *x, uchar a) {"
                      " size_t i = get_global_id(0); x[i] = (uchar)(x[i] * 3u + a + i); }";
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(p, 1, &dev, "", NULL, NULL));
    cl_kernel k = clCreateKernel(p, "bump", &err);
    CHECK(err);

    static unsigned char init[N], host[N], out[N], big[2 * N];
    for (int i = 0; i < N; i++) init[i] = (unsigned char)(i * 7 + 1);
    cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, N, init, &err);
    CHECK(err);
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, N, NULL, &err);
    CHECK(err);
    unsigned char zero = 0;
    CHECK(clEnqueueFillBuffer(q, b, &zero, 1, 0, N, 0, NULL, NULL));
    size_t g = N;
    cl_uchar s = 5;
    CHECK(clSetKernelArg(k, 0, sizeof a, &a));
    CHECK(clSetKernelArg(k, 1, 1, &s));
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));

    /* 2D read after the kernel: buffer pitch 64, host pitch 40, origins in bytes */
    size_t bo[3] = {3, 2, 0}, ho[3] = {5, 1, 0}, r2[3] = {29, 7, 1};
    memset(host, 0xee, sizeof host);
    CHECK(clEnqueueReadBufferRect(q, a, CL_TRUE, bo, ho, r2, 64, 0, 40, 0, host, 0, NULL, NULL));
    dump("read2d", host, 40 * 9);

    /* 3D read, tightly packed host side (0 pitches), non-blocking + event */
    size_t bo3[3] = {1, 1, 1}, ho3[3] = {0, 0, 0}, r3[3] = {13, 5, 3};
    cl_event ev;
    memset(host, 0xee, sizeof host);
    CHECK(clEnqueueReadBufferRect(q, a, CL_FALSE, bo3, ho3, r3, 32, 32 * 8, 0, 0, host, 0, NULL, &ev));
    CHECK(clWaitForEvents(1, &ev));
    cl_command_type ct;
    CHECK(clGetEventInfo(ev, CL_EVENT_COMMAND_TYPE, sizeof ct, &ct, NULL));
    printf("read3d type %#x\n", (unsigned)ct);
    dump("read3d", host, 13 * 5 * 3 + 8);

    /* 2D write, non-blocking, waiting on the read's event; gaps must stay untouched */
    for (int i = 0; i < N; i++) host[i] = (unsigned char)(255 - i);
    size_t wbo[3] = {7, 3, 0}, who[3] = {2, 4, 0}, wr[3] = {17, 9, 1};
    cl_event wev;
    CHECK(clEnqueueWriteBufferRect(q, a, CL_FALSE, wbo, who, wr, 48, 0, 33, 0, host, 1, &ev, &wev));
    CHECK(clReleaseEvent(ev));
    CHECK(clWaitForEvents(1, &wev));
    CHECK(clReleaseEvent(wev));
    CHECK(clEnqueueReadBuffer(q, a, CL_TRUE, 0, N, out, 0, NULL, NULL));
    dump("write2d", out, N);

    /* 3D write, blocking, packed host side; then a kernel over the result */
    size_t wbo3[3] = {0, 1, 2}, wr3[3] = {16, 4, 3};
    CHECK(clEnqueueWriteBufferRect(q, a, CL_TRUE, wbo3, ho3, wr3, 20, 20 * 6, 0, 0, host + 100, 0, NULL, NULL));
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(q, a, CL_TRUE, 0, N, out, 0, NULL, NULL));
    dump("write3d", out, N);

    /* 3D copy a -> b with different pitches, then within b (disjoint regions) */
    size_t cso[3] = {2, 1, 1}, cdo[3] = {4, 0, 2}, cr[3] = {11, 6, 2};
    cl_event cev;
    CHECK(clEnqueueCopyBufferRect(q, a, b, cso, cdo, cr, 40, 400, 24, 24 * 7, 0, NULL, &cev));
    CHECK(clGetEventInfo(cev, CL_EVENT_COMMAND_TYPE, sizeof ct, &ct, NULL));
    printf("copy type %#x\n", (unsigned)ct);
    size_t so2[3] = {0, 0, 0}, do2[3] = {0, 0, 5}, cr2[3] = {24, 7, 3};
    CHECK(clEnqueueCopyBufferRect(q, b, b, so2, do2, cr2, 24, 24 * 7, 24, 24 * 7, 1, &cev, NULL));
    CHECK(clReleaseEvent(cev));
    CHECK(clFinish(q));
    CHECK(clEnqueueReadBuffer(q, b, CL_TRUE, 0, N, out, 0, NULL, NULL));
    dump("copy", out, N);
    /* a large sparse read: one column of a 64 x 64 matrix, covering span ~4 KiB */
    size_t colo[3] = {9, 0, 0}, colr[3] = {1, 64, 1}, zo[3] = {0, 0, 0};
    CHECK(clEnqueueReadBufferRect(q, a, CL_TRUE, colo, zo, colr, 64, 0, 2, 0, big, 0, NULL, NULL));
    dump("column", big, 128);

    /* invalid calls: the codes must match the real implementation's */
    T("rect.region_zero", clEnqueueReadBufferRect(q, a, CL_TRUE, bo, ho, (size_t[3]){4, 0, 1}, 64, 0, 40, 0, host, 0, NULL, NULL));
    T("rect.region2_zero", clEnqueueWriteBufferRect(q, a, CL_TRUE, bo, ho, (size_t[3]){4, 2, 0}, 64, 0, 40, 0, host, 0, NULL, NULL));
    T("rect.buf_row_pitch_small", clEnqueueReadBufferRect(q, a, CL_TRUE, bo, ho, r2, 20, 0, 40, 0, host, 0, NULL, NULL));
    T("rect.host_row_pitch_small", clEnqueueReadBufferRect(q, a, CL_TRUE, bo, ho, r2, 64, 0, 20, 0, host, 0, NULL, NULL));
    T("rect.buf_slice_small", clEnqueueReadBufferRect(q, a, CL_TRUE, bo3, ho3, r3, 32, 64, 0, 0, host, 0, NULL, NULL));
    T("rect.buf_slice_not_multiple", clEnqueueReadBufferRect(q, a, CL_TRUE, bo3, ho3, r3, 32, 32 * 8 + 1, 0, 0, host, 0, NULL, NULL));
    T("rect.host_slice_small", clEnqueueWriteBufferRect(q, a, CL_TRUE, bo3, ho3, r3, 32, 0, 16, 16, host, 0, NULL, NULL));
    T("rect.out_of_bounds", clEnqueueReadBufferRect(q, a, CL_TRUE, (size_t[3]){0, 60, 0}, ho, r2, 64, 0, 40, 0, host, 0, NULL, NULL));
    T("rect.out_of_bounds_x", clEnqueueWriteBufferRect(q, a, CL_TRUE, (size_t[3]){N - 8, 0, 0}, ho, (size_t[3]){9, 1, 1}, 0, 0, 0, 0, host, 0, NULL, NULL));
    T("rect.end_exact", clEnqueueReadBufferRect(q, a, CL_TRUE, (size_t[3]){N - 8, 0, 0}, zo, (size_t[3]){8, 1, 1}, 0, 0, 0, 0, host, 0, NULL, NULL));
    T("rect.null_ptr", clEnqueueReadBufferRect(q, a, CL_TRUE, bo, ho, r2, 64, 0, 40, 0, NULL, 0, NULL, NULL));
    T("rect.null_queue", clEnqueueReadBufferRect(NULL, a, CL_TRUE, bo, ho, r2, 64, 0, 40, 0, host, 0, NULL, NULL));
    T("rect.null_buffer", clEnqueueWriteBufferRect(q, NULL, CL_TRUE, bo, ho, r2, 64, 0, 40, 0, host, 0, NULL, NULL));
    T("rect.bad_wait_list", clEnqueueReadBufferRect(q, a, CL_TRUE, bo, ho, r2, 64, 0, 40, 0, host, 1, NULL, NULL));
    T("copyrect.overlap", clEnqueueCopyBufferRect(q, b, b, so2, (size_t[3]){2, 1, 0}, cr2, 24, 24 * 7, 24, 24 * 7, 0, NULL, NULL));
    T("copyrect.same_pitch_differs", clEnqueueCopyBufferRect(q, b, b, so2, do2, cr2, 24, 24 * 7, 32, 32 * 7, 0, NULL, NULL));
    T("copyrect.dst_out_of_bounds", clEnqueueCopyBufferRect(q, a, b, so2, (size_t[3]){0, 0, 30}, cr2, 0, 0, 24, 24 * 7, 0, NULL, NULL));
    T("copyrect.region_zero", clEnqueueCopyBufferRect(q, a, b, so2, so2, (size_t[3]){0, 1, 1}, 0, 0, 0, 0, 0, NULL, NULL));

    /* migration: a hint; the data stays as it was */
    cl_mem both[2] = {a, b};
    cl_event mev;
    CHECK(clEnqueueMigrateMemObjects(q, 2, both, 0, 0, NULL, &mev));
    CHECK(clWaitForEvents(1, &mev));
    cl_int st;
    CHECK(clGetEventInfo(mev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
    CHECK(clGetEventInfo(mev, CL_EVENT_COMMAND_TYPE, sizeof ct, &ct, NULL));
    printf("migrate status %d type %#x\n", st, (unsigned)ct);
    CHECK(clReleaseEvent(mev));
    CHECK(clEnqueueMigrateMemObjects(q, 1, &a, CL_MIGRATE_MEM_OBJECT_HOST, 0, NULL, NULL));
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
    CHECK(clEnqueueMigrateMemObjects(q, 1, &a, 0, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(q, a, CL_TRUE, 0, N, out, 0, NULL, NULL));
    dump("migrate", out, N);
    cl_mem bad[2] = {a, NULL};
    T("migrate.zero", clEnqueueMigrateMemObjects(q, 0, both, 0, 0, NULL, NULL));
    T("migrate.null_list", clEnqueueMigrateMemObjects(q, 1, NULL, 0, 0, NULL, NULL));
    T("migrate.bad_flags", clEnqueueMigrateMemObjects(q, 1, &a, 1 << 7, 0, NULL, NULL));
    T("migrate.null_mem", clEnqueueMigrateMemObjects(q, 2, bad, 0, 0, NULL, NULL));
    T("migrate.null_queue", clEnqueueMigrateMemObjects(NULL, 1, &a, 0, 0, NULL, NULL));
    T("migrate.bad_wait_list", clEnqueueMigrateMemObjects(q, 1, &a, 0, 1, NULL, NULL));

    CHECK(clFinish(q));
    clReleaseMemObject(a);
    clReleaseMemObject(b);
    clReleaseKernel(k);
    clReleaseProgram(p);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    printf("DONE\n");
    return 0;
}
