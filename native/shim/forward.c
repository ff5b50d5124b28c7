/* Forwarding of intercepted OpenCL entry points to the real implementation. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include "shim.h"

__thread int clproj_in_shim = 0;

/* cffi-generated prototypes of the Python callbacks (defined in the generated module). */
extern void clproj_py_on_launch(cl_command_queue, cl_kernel, cl_uint, const size_t *,
                                const size_t *, const size_t *, cl_int);

/* The real entry point: the next definition in link order (an application linked
 * against the system ICD loader), else the system loader opened by us. pyopencl loads
 * its bundled loader privately (RTLD_LOCAL), so RTLD_NEXT finds nothing there; ICD
 * objects carry their own dispatch table, so any loader can forward their calls. */
void *clproj_real(const char *name) {
    static void *system_loader = NULL;
    void *fn = dlsym(RTLD_NEXT, name);
    if (fn == NULL) {
        if (system_loader == NULL) system_loader = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
        if (system_loader != NULL) fn = dlsym(system_loader, name);
    }
    if (fn == NULL) fprintf(stderr, "clproj: cannot resolve real %s: %s\n", name, dlerror());
    return fn;
}

typedef cl_int (*enqueue_ndrange_fn)(cl_command_queue, cl_kernel, cl_uint, const size_t *,
                                     const size_t *, const size_t *, cl_uint, const cl_event *,
                                     cl_event *);

CL_API_ENTRY cl_int CL_API_CALL clEnqueueNDRangeKernel(
    cl_command_queue queue, cl_kernel kernel, cl_uint work_dim, const size_t *offset,
    const size_t *global, const size_t *local, cl_uint n_wait, const cl_event *wait,
    cl_event *event) {
    static enqueue_ndrange_fn real = NULL;
    if (real == NULL) real = (enqueue_ndrange_fn)clproj_real("clEnqueueNDRangeKernel");
    if (real == NULL) return CL_OUT_OF_HOST_MEMORY;
    cl_int err = real(queue, kernel, work_dim, offset, global, local, n_wait, wait, event);
    if (!clproj_in_shim) {
        clproj_in_shim = 1;
        clproj_py_on_launch(queue, kernel, work_dim, offset, global, local, err);
        clproj_in_shim = 0;
    }
    return err;
}
