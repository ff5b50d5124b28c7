/* Double-precision multiply-add chain (needs cl_khr_fp64): exposes the fp64:fp32 rate. */
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
__kernel void fp64_fma(__global const double *in, __global double *out, const uint iters)
{
    const uint gid = get_global_id(0);
    double x = in[gid];
    double y = 1.0 - x;
    for (uint i = 0; i < iters; ++i) {
        x = x * 0.999 + 0.001;
        y = y * 0.998 + 0.002;
    }
    out[gid] = x + y;
}
