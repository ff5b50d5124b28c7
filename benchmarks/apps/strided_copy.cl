/* out[i] = in[(i * stride) mod n], n a power of two and stride odd (a permutation).
 * stride 1 is a perfectly coalesced copy; a large odd stride puts every work-item of a
 * warp in a different memory segment. */
__kernel void strided_copy(__global const float *in, __global float *out, const uint stride,
                           const uint n)
{
    const uint i = get_global_id(0);
    out[i] = in[(i * stride) & (n - 1u)];
}
