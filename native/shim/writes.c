/* What writes a buffer: the shim tells a buffer that no command has written apart from
 * one that may hold data.
 *
 * Why: OpenCL leaves a buffer's content undefined until something writes it (host data at
 * its creation, a write, fill, copy or map, a kernel, an image over it). Such a buffer is
 * recorded as zeros without reading it (intercept/shim_runtime.py). Reading it cost more
 * than the read: on PoCL the read maps the never-touched pages, and the app's first kernel
 * then writes them far more slowly. BabelStream's init over three 400 MiB arrays took
 * 1.34-1.45 s after such reads instead of 0.46-0.48 s (2-core VM, pyopencl, 2 runs each).
 *
 * A buffer counts as written from the first call below that names it, whatever the call's
 * outcome: a doubt costs a read, never a wrong record. Only while recording; every call
 * is forwarded unchanged and its error code is the real one.
 *
 * What the shim cannot see makes every buffer count as written: an entry point obtained
 * through clGetExtensionFunctionAddress* whose name starts "clEnqueue" or "clCommand"
 * (command buffers, vendor copies) may write any buffer. */
#include <string.h>

#include "shim.h"

#define PASS (clproj_in_shim || clproj_cfg.disabled)

/* Set once an extension entry point that may write buffers was handed out. */
static int untracked_writers = 0;

void clproj_mem_written(cl_mem m) {
    mem_info *mi = clproj_mems ? pm_get(clproj_mems, m) : NULL;
    if (!mi) return;
    mi->written = 1;
    mem_info *pi = mi->parent ? pm_get(clproj_mems, mi->parent) : NULL;
    if (pi) pi->written = 1;
}

int clproj_mem_fresh(cl_mem m) {
    if (__atomic_load_n(&untracked_writers, __ATOMIC_ACQUIRE)) return 0;
    mem_info *mi = clproj_mems ? pm_get(clproj_mems, m) : NULL;
    return mi && mi->kind == CLPROJ_ARG_BUFFER && !mi->written;
}

void clproj_mems_written(cl_uint n, const cl_mem *mems) {
    if (PASS || !clproj_cfg.recording || !mems) return;
    clproj_lock();
    for (cl_uint i = 0; i < n; i++)
        if (mems[i]) clproj_mem_written(mems[i]);
    clproj_unlock();
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueWriteBuffer(cl_command_queue q, cl_mem buf,
                                                     cl_bool blocking, size_t offset, size_t size,
                                                     const void *ptr, cl_uint nw,
                                                     const cl_event *wl, cl_event *ev) {
    REAL(clEnqueueWriteBuffer, FAIL_INT);
    clproj_mems_written(1, &buf);
    return real_clEnqueueWriteBuffer(q, buf, blocking, offset, size, ptr, nw, wl, ev);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueWriteBufferRect(
    cl_command_queue q, cl_mem buf, cl_bool blocking, const size_t *buffer_origin,
    const size_t *host_origin, const size_t *region, size_t buffer_row_pitch,
    size_t buffer_slice_pitch, size_t host_row_pitch, size_t host_slice_pitch, const void *ptr,
    cl_uint nw, const cl_event *wl, cl_event *ev) {
    REAL(clEnqueueWriteBufferRect, FAIL_INT);
    clproj_mems_written(1, &buf);
    return real_clEnqueueWriteBufferRect(q, buf, blocking, buffer_origin, host_origin, region,
                                         buffer_row_pitch, buffer_slice_pitch, host_row_pitch,
                                         host_slice_pitch, ptr, nw, wl, ev);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueFillBuffer(cl_command_queue q, cl_mem buf,
                                                    const void *pattern, size_t pattern_size,
                                                    size_t offset, size_t size, cl_uint nw,
                                                    const cl_event *wl, cl_event *ev) {
    REAL(clEnqueueFillBuffer, FAIL_INT);
    clproj_mems_written(1, &buf);
    return real_clEnqueueFillBuffer(q, buf, pattern, pattern_size, offset, size, nw, wl, ev);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueCopyBuffer(cl_command_queue q, cl_mem src, cl_mem dst,
                                                    size_t src_offset, size_t dst_offset,
                                                    size_t size, cl_uint nw, const cl_event *wl,
                                                    cl_event *ev) {
    REAL(clEnqueueCopyBuffer, FAIL_INT);
    clproj_mems_written(1, &dst);
    return real_clEnqueueCopyBuffer(q, src, dst, src_offset, dst_offset, size, nw, wl, ev);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueCopyBufferRect(
    cl_command_queue q, cl_mem src, cl_mem dst, const size_t *src_origin, const size_t *dst_origin,
    const size_t *region, size_t src_row_pitch, size_t src_slice_pitch, size_t dst_row_pitch,
    size_t dst_slice_pitch, cl_uint nw, const cl_event *wl, cl_event *ev) {
    REAL(clEnqueueCopyBufferRect, FAIL_INT);
    clproj_mems_written(1, &dst);
    return real_clEnqueueCopyBufferRect(q, src, dst, src_origin, dst_origin, region,
                                        src_row_pitch, src_slice_pitch, dst_row_pitch,
                                        dst_slice_pitch, nw, wl, ev);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueCopyImageToBuffer(cl_command_queue q, cl_mem src,
                                                           cl_mem dst, const size_t *src_origin,
                                                           const size_t *region,
                                                           size_t dst_offset, cl_uint nw,
                                                           const cl_event *wl, cl_event *ev) {
    REAL(clEnqueueCopyImageToBuffer, FAIL_INT);
    clproj_mems_written(1, &dst);
    return real_clEnqueueCopyImageToBuffer(q, src, dst, src_origin, region, dst_offset, nw, wl,
                                           ev);
}

/* Any map: the app gets a pointer into the buffer, and a read-only map written through is
 * the app's error, not a reason to record a wrong snapshot. */
CL_API_ENTRY void *CL_API_CALL clEnqueueMapBuffer(cl_command_queue q, cl_mem buf,
                                                  cl_bool blocking, cl_map_flags map_flags,
                                                  size_t offset, size_t size, cl_uint nw,
                                                  const cl_event *wl, cl_event *ev,
                                                  cl_int *errcode_ret) {
    REAL(clEnqueueMapBuffer, FAIL_PTR);
    clproj_mems_written(1, &buf);
    return real_clEnqueueMapBuffer(q, buf, blocking, map_flags, offset, size, nw, wl, ev,
                                   errcode_ret);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueNativeKernel(cl_command_queue q,
                                                      void(CL_CALLBACK *user_func)(void *),
                                                      void *args, size_t cb_args,
                                                      cl_uint num_mem_objects,
                                                      const cl_mem *mem_list,
                                                      const void **args_mem_loc, cl_uint nw,
                                                      const cl_event *wl, cl_event *ev) {
    REAL(clEnqueueNativeKernel, FAIL_INT);
    clproj_mems_written(num_mem_objects, mem_list);
    return real_clEnqueueNativeKernel(q, user_func, args, cb_args, num_mem_objects, mem_list,
                                      args_mem_loc, nw, wl, ev);
}

static void extension_asked(const char *name) {
    if (name && (strncmp(name, "clEnqueue", 9) == 0 || strncmp(name, "clCommand", 9) == 0))
        __atomic_store_n(&untracked_writers, 1, __ATOMIC_RELEASE);
}

CL_API_ENTRY void *CL_API_CALL clGetExtensionFunctionAddressForPlatform(cl_platform_id platform,
                                                                        const char *name) {
    REAL(clGetExtensionFunctionAddressForPlatform, return NULL);
    void *fn = real_clGetExtensionFunctionAddressForPlatform(platform, name);
    if (fn && !PASS) extension_asked(name);
    return fn;
}

CL_API_ENTRY void *CL_API_CALL clGetExtensionFunctionAddress(const char *name) {
    REAL(clGetExtensionFunctionAddress, return NULL);
    void *fn = real_clGetExtensionFunctionAddress(name);
    if (fn && !PASS) extension_asked(name);
    return fn;
}
