"""OpenCL through ctypes (dlopen + dlsym): one kernel launch, result checked."""

import ctypes as C

CL_DEVICE_TYPE_ALL = 0xFFFFFFFF  # <CL/cl.h>
cl = C.CDLL("libOpenCL.so.1")
u32, sz, vp = C.c_uint32, C.c_size_t, C.c_void_p
for f, res, args in [
    ("clGetPlatformIDs", C.c_int, [u32, C.POINTER(vp), C.POINTER(u32)]),
    ("clGetDeviceIDs", C.c_int, [vp, C.c_uint64, u32, C.POINTER(vp), C.POINTER(u32)]),
    ("clCreateContext", vp, [vp, u32, C.POINTER(vp), vp, vp, C.POINTER(C.c_int)]),
    ("clCreateCommandQueue", vp, [vp, vp, C.c_uint64, C.POINTER(C.c_int)]),
    (
        "clCreateProgramWithSource",
        vp,
        [vp, u32, C.POINTER(C.c_char_p), C.POINTER(sz), C.POINTER(C.c_int)],
    ),
    ("clBuildProgram", C.c_int, [vp, u32, C.POINTER(vp), C.c_char_p, vp, vp]),
    ("clCreateKernel", vp, [vp, C.c_char_p, C.POINTER(C.c_int)]),
    ("clCreateBuffer", vp, [vp, C.c_uint64, sz, vp, C.POINTER(C.c_int)]),
    ("clSetKernelArg", C.c_int, [vp, u32, sz, vp]),
    (
        "clEnqueueNDRangeKernel",
        C.c_int,
        [vp, vp, u32, C.POINTER(sz), C.POINTER(sz), C.POINTER(sz), u32, vp, vp],
    ),
    ("clEnqueueReadBuffer", C.c_int, [vp, vp, u32, sz, sz, vp, u32, vp, vp]),
    ("clFinish", C.c_int, [vp]),
]:
    getattr(cl, f).restype = res
    getattr(cl, f).argtypes = args
err = C.c_int()
plat = vp()
dev = vp()
assert cl.clGetPlatformIDs(1, C.byref(plat), None) == 0
assert cl.clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, C.byref(dev), None) == 0
ctx = cl.clCreateContext(None, 1, C.byref(dev), None, None, C.byref(err))
q = cl.clCreateCommandQueue(ctx, dev, 0, C.byref(err))
src = C.c_char_p(
    b"__kernel void fill(__global int *a) { a[get_global_id(0)] = 3 * get_global_id(0); }"
)
prog = cl.clCreateProgramWithSource(ctx, 1, C.byref(src), None, C.byref(err))
assert cl.clBuildProgram(prog, 0, None, b"", None, None) == 0
k = cl.clCreateKernel(prog, b"fill", C.byref(err))
n = 1024
buf = cl.clCreateBuffer(ctx, 1, 4 * n, None, C.byref(err))
assert cl.clSetKernelArg(k, 0, C.sizeof(vp), C.byref(vp(buf))) == 0
g = (sz * 1)(n)
assert cl.clEnqueueNDRangeKernel(q, k, 1, None, g, None, 0, None, None) == 0
out = (C.c_int * n)()
assert cl.clEnqueueReadBuffer(q, buf, 1, 0, 4 * n, out, 0, None, None) == 0
assert list(out) == [3 * i for i in range(n)]
print("PASS")
