/* An app that abandons a kernel: it launches one that never ends, flushes, prints and
 * exits with status 4 without waiting for it. Natively the process ends at once (nothing
 * waits for a kernel at exit); under clproj it must too, in every mode. */
#include <unistd.h>

#include "test_app.h"

static const char *SRC =
    "__kernel void spin(__global volatile int *flag) {\n"
    "    while (flag[0] == 0) { flag[1] += 1; }\n"
    "}\n";

int main(void) {
    cl_device_id dev;
    cl_command_queue q;
    cl_int err;
    cl_context ctx = test_context(&dev, &q);
    cl_kernel k = test_kernel(ctx, dev, SRC, "spin");
    int zero[2] = {0, 0};
    cl_mem flag = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zero,
                                 zero, &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof flag, &flag));
    size_t one = 1;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &one, &one, 0, NULL, NULL));
    CHECK(clFlush(q));
    sleep(1);
    printf("abandoning the kernel\n");
    fflush(stdout);
    return 4;
}
