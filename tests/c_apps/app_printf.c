/* A kernel's printf: two work-items of one work-group print a line each between the app's
 * own "before" and "after" (each flushed, so the order does not depend on how stdout is
 * buffered). Route mode must print the kernel's lines on the app's stdout too. */
#include "test_app.h"

static const char *SRC =
    "__kernel void say(int base) { printf(\"kernel says %d\\n\", base + (int)get_global_id(0)); }\n";

int main(void) {
    cl_device_id dev;
    cl_command_queue q;
    cl_context ctx = test_context(&dev, &q);
    cl_kernel k = test_kernel(ctx, dev, SRC, "say");
    int base = 40;
    CHECK(clSetKernelArg(k, 0, sizeof base, &base));
    printf("before\n");
    fflush(stdout);
    size_t two = 2;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &two, &two, 0, NULL, NULL));
    CHECK(clFinish(q));
    printf("after\n");
    return 0;
}
