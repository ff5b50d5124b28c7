/* Event callbacks and the image probe (tests/test_route_coverage.py).
 * clSetEventCallback as real apps use it: a CL_COMPLETE callback on a launch whose event
 * the app releases at once and never waits on, while the main thread blocks on a
 * condition variable the callback signals; SUBMITTED/RUNNING/COMPLETE on one event;
 * a callback on a non-blocking read that checks the data is there; a callback on an
 * event that has already completed. Every callback must run exactly once, with its event
 * and user data, never inside the app's own call. Then the image probe an app makes
 * before choosing images or buffers. Lines starting with "IMG " describe the platform's
 * image support (it differs between a real device and the virtual one), "ASYNC " says
 * which callbacks ran inside the app's own clSetEventCallback call (PoCL runs them there
 * when the status has already been reached; the virtual platform never does); every
 * other line must be the same with and without the clproj shim. */
#include "test_app.h"
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#define T(name, expr) printf("%s %d\n", name, (int)(expr))

#define NCB 8
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_t main_thread;
static volatile int in_call = 0; /* the main thread is inside an OpenCL call */
static struct {
    int calls, status, inside, wrong_event;
    cl_event expect;
    unsigned first; /* read callback: the first value it sees in the host buffer */
} cb[NCB];
static unsigned host_out[1024];

static void CL_CALLBACK on_event(cl_event e, cl_int status, void *user) {
    int i = (int)(size_t)user;
    pthread_mutex_lock(&mu);
    cb[i].calls++;
    cb[i].status = status;
    cb[i].inside |= in_call && pthread_equal(pthread_self(), main_thread);
    cb[i].wrong_event |= cb[i].expect != NULL && e != cb[i].expect;
    if (i == 4) cb[i].first = host_out[1023];
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}
/* Wait (up to 10 s) until callback i ran; 0 on timeout. */
static int wait_cb(int i) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 10;
    pthread_mutex_lock(&mu);
    int rc = 0;
    while (cb[i].calls == 0 && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&cv, &mu, &ts);
    int ok = cb[i].calls > 0;
    pthread_mutex_unlock(&mu);
    return ok;
}
static cl_int reg(cl_event e, cl_int type, int i) {
    cb[i].expect = e;
    in_call = 1;
    cl_int r = clSetEventCallback(e, type, on_event, (void *)(size_t)i);
    in_call = 0;
    return r;
}

int main(void) {
    main_thread = pthread_self();
    cl_device_id dev;
    cl_command_queue q;
    cl_int err;
    cl_context ctx = test_context(&dev, &q);
    const char *src = "__kernel void spin(__global uint *x, uint n) {"
                      " size_t i = get_global_id(0); uint v = x[i];"
                      " for (uint r = 0; r < n; r++) v = v * 1664525u + 1013904223u; x[i] = v; }";
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(p, 1, &dev, "", NULL, NULL));
    cl_kernel k = clCreateKernel(p, "spin", &err);
    CHECK(err);
    cl_mem x = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof host_out, NULL, &err);
    CHECK(err);
    cl_uint zero = 0, n = 20000;
    CHECK(clEnqueueFillBuffer(q, x, &zero, sizeof zero, 0, sizeof host_out, 0, NULL, NULL));
    CHECK(clSetKernelArg(k, 0, sizeof x, &x));
    CHECK(clSetKernelArg(k, 1, sizeof n, &n));
    size_t g = 1024;

    /* 1. fire and forget: the event is released at once, the app never waits on it */
    cl_event e0;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, &e0));
    CHECK(reg(e0, CL_COMPLETE, 0));
    CHECK(clReleaseEvent(e0));
    CHECK(clFlush(q));
    printf("forget ran %d\n", wait_cb(0));

    /* 2. SUBMITTED, RUNNING, COMPLETE on one launch */
    cl_event e1;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, &e1));
    CHECK(reg(e1, CL_SUBMITTED, 1));
    CHECK(reg(e1, CL_RUNNING, 2));
    CHECK(reg(e1, CL_COMPLETE, 3));
    CHECK(clFlush(q));
    printf("phases ran %d %d %d\n", wait_cb(1), wait_cb(2), wait_cb(3));
    CHECK(clReleaseEvent(e1));

    /* 3. a non-blocking read: at CL_COMPLETE the data is in the app's memory */
    cl_event e2;
    memset(host_out, 0, sizeof host_out);
    CHECK(clEnqueueReadBuffer(q, x, CL_FALSE, 0, sizeof host_out, host_out, 0, NULL, &e2));
    CHECK(reg(e2, CL_COMPLETE, 4));
    CHECK(clFlush(q));
    printf("read ran %d\n", wait_cb(4));
    CHECK(clReleaseEvent(e2));

    /* 4. an event that completed before its callback was set */
    cl_event e3;
    CHECK(clEnqueueMarkerWithWaitList(q, 0, NULL, &e3));
    CHECK(clFinish(q));
    CHECK(reg(e3, CL_COMPLETE, 5));
    printf("late ran %d\n", wait_cb(5));
    CHECK(clReleaseEvent(e3));

    /* exactly once: nothing more arrives later */
    struct timespec pause = {0, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
    pthread_mutex_lock(&mu);
    for (int i = 0; i <= 5; i++)
        printf("cb%d calls %d status %d wrong_event %d\n", i, cb[i].calls, cb[i].status,
               cb[i].wrong_event);
    printf("ASYNC inside");
    for (int i = 0; i <= 5; i++) printf(" %d", cb[i].inside);
    printf("\n");
    printf("read callback saw %u (final %u)\n", cb[4].first, host_out[1023]);
    pthread_mutex_unlock(&mu);

    /* invalid calls */
    cl_event e4;
    CHECK(clEnqueueMarkerWithWaitList(q, 0, NULL, &e4));
    T("callback.bad_type", clSetEventCallback(e4, CL_QUEUED, on_event, NULL));
    T("callback.type_minus", clSetEventCallback(e4, -5, on_event, NULL));
    T("callback.null_fn", clSetEventCallback(e4, CL_COMPLETE, NULL, NULL));
    T("callback.null_event", clSetEventCallback(NULL, CL_COMPLETE, on_event, NULL));
    CHECK(clWaitForEvents(1, &e4));
    CHECK(clReleaseEvent(e4));

    /* 5. the image probe: support and formats agree, so the app picks buffers or images */
    cl_bool images = CL_TRUE;
    CHECK(clGetDeviceInfo(dev, CL_DEVICE_IMAGE_SUPPORT, sizeof images, &images, NULL));
    cl_uint nfmt = 12345;
    CHECK(clGetSupportedImageFormats(ctx, CL_MEM_READ_ONLY, CL_MEM_OBJECT_IMAGE2D, 0, NULL, &nfmt));
    cl_image_format fmts[4];
    cl_uint nfmt2 = 12345;
    CHECK(clGetSupportedImageFormats(ctx, CL_MEM_READ_WRITE, CL_MEM_OBJECT_IMAGE3D, 4, fmts, &nfmt2));
    printf("IMG support %d formats %u %u\n", (int)images, nfmt, nfmt2);
    printf("image probe consistent %d\n", (images == CL_FALSE) == (nfmt == 0));
    T("formats.null_context", clGetSupportedImageFormats(NULL, CL_MEM_READ_ONLY, CL_MEM_OBJECT_IMAGE2D, 0, NULL, &nfmt));
    T("formats.zero_entries", clGetSupportedImageFormats(ctx, CL_MEM_READ_ONLY, CL_MEM_OBJECT_IMAGE2D, 0, fmts, NULL));

    /* 6. exit with a launch and its callback still pending (no clFinish, nothing
     * released): the callback may or may not run, nothing may crash or hang */
    cl_event e5;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, &e5));
    CHECK(reg(e5, CL_COMPLETE, 7));
    CHECK(clReleaseEvent(e5));
    printf("DONE\n");
    fflush(stdout);
    return 0;
}
