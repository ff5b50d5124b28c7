/* clGetDeviceInfo / clGetKernelWorkGroupInfo: forwarded untouched, and which of the answers
 * that can size a launch the app has read is remembered for its recorded launches.
 *
 * Why: an app that sizes its NDRange from the device (BabelStream's dot: 4 groups per
 * compute unit of the largest work-group on a GPU, a CPU formula elsewhere) launches here
 * as this machine's device answered; projected onto another device that launch is not the
 * one the app would make there. The record says which answers the app had read before the
 * launch and what they were (intercept.record LaunchRecord.asked), and a projection of a
 * launch whose shape follows from them says so (intercept/size_queries.py). One bit per
 * parameter of SIZE_PARAMS, process-wide, and the last answer read, set only by the app's
 * own successful reads (a size query, value NULL, reads nothing); the shim's own calls
 * never pass here. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <string.h>

#include "shim.h"

/* The answers that can size a launch and their C type's width in bytes (an array answer,
 * CL_DEVICE_MAX_WORK_ITEM_SIZES: its first element); the order is the bits'. */
static const struct {
    cl_uint param;
    unsigned width;
} SIZE_PARAMS[] = {
    {CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(cl_uint)},
    {CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(size_t)},
    {CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof(size_t)},
    {CL_DEVICE_LOCAL_MEM_SIZE, sizeof(cl_ulong)},
    {CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, sizeof(cl_uint)},
    {CL_DEVICE_PREFERRED_VECTOR_WIDTH_DOUBLE, sizeof(cl_uint)},
    {CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, sizeof(cl_uint)},
    {CL_DEVICE_NATIVE_VECTOR_WIDTH_DOUBLE, sizeof(cl_uint)},
    {CL_KERNEL_WORK_GROUP_SIZE, sizeof(size_t)},
    {CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE, sizeof(size_t)},
};
#define N_SIZE_PARAMS (sizeof SIZE_PARAMS / sizeof SIZE_PARAMS[0])

static _Atomic uint32_t asked = 0;
static _Atomic uint64_t answers[N_SIZE_PARAMS]; /* the last answer read of each */

static void note(cl_uint param, const void *value, size_t size, cl_int err) {
    if (clproj_in_shim || value == NULL || err != CL_SUCCESS) return;
    for (uint32_t i = 0; i < N_SIZE_PARAMS; i++) {
        if (SIZE_PARAMS[i].param != param || size < SIZE_PARAMS[i].width) continue;
        uint64_t v = 0;
        if (SIZE_PARAMS[i].width == sizeof(cl_uint)) {
            cl_uint u;
            memcpy(&u, value, sizeof u);
            v = u;
        } else {
            memcpy(&v, value, sizeof v);
        }
        /* plain loads first: an app asking the same in a loop pays no locked writes */
        if (atomic_load_explicit(&answers[i], memory_order_relaxed) != v)
            atomic_store(&answers[i], v);
        if (!(atomic_load_explicit(&asked, memory_order_relaxed) & (1u << i)))
            atomic_fetch_or(&asked, 1u << i);
    }
}

uint32_t clproj_size_queries(void) { return atomic_load(&asked); }

uint32_t clproj_size_query_param(uint32_t bit) {
    return bit < N_SIZE_PARAMS ? SIZE_PARAMS[bit].param : 0;
}

uint64_t clproj_size_query_answer(uint32_t bit) {
    return bit < N_SIZE_PARAMS ? atomic_load(&answers[bit]) : 0;
}

CL_API_ENTRY cl_int CL_API_CALL clGetDeviceInfo(cl_device_id device, cl_device_info param,
                                                size_t size, void *value, size_t *size_ret) {
    REAL(clGetDeviceInfo, FAIL_INT);
    cl_int err = real_clGetDeviceInfo(device, param, size, value, size_ret);
    note(param, value, size, err);
    return err;
}

CL_API_ENTRY cl_int CL_API_CALL clGetKernelWorkGroupInfo(cl_kernel kernel, cl_device_id device,
                                                         cl_kernel_work_group_info param,
                                                         size_t size, void *value,
                                                         size_t *size_ret) {
    REAL(clGetKernelWorkGroupInfo, FAIL_INT);
    cl_int err = real_clGetKernelWorkGroupInfo(kernel, device, param, size, value, size_ret);
    note(param, value, size, err);
    return err;
}
