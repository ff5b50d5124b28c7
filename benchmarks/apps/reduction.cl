/* Sum of unsigned ints, one stage per launch: each group of L work-items (L a power of two)
 * reduces 2L inputs in local memory to one partial sum; stages repeat until one value is left. */
__kernel void reduce_sum(__global const uint *in, __global uint *out, __local uint *scratch,
                         const uint n)
{
    const uint lid = get_local_id(0);
    const uint lsz = get_local_size(0);
    const uint i = get_group_id(0) * lsz * 2u + lid;
    uint s = 0;
    if (i < n)
        s = in[i];
    if (i + lsz < n)
        s += in[i + lsz];
    scratch[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint off = lsz / 2u; off > 0; off >>= 1) {
        if (lid < off)
            scratch[lid] += scratch[lid + off];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        out[get_group_id(0)] = scratch[0];
}
