/* out (width x height) = transpose of in (height x width), directly: reads are coalesced,
 * writes stride by `height` words (uncoalesced). */
__kernel void transpose_naive(__global float *out, __global const float *in, const uint width,
                              const uint height)
{
    const uint x = get_global_id(0);
    const uint y = get_global_id(1);
    out[x * height + y] = in[y * width + x];
}
