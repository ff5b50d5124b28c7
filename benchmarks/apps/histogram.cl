/* 256-bin histogram of bytes: per-group histogram with local atomics, then one global
 * atomic per bin and group. Each work-item handles `per_item` consecutive bytes. */
__kernel void histogram256(__global const uchar *data, __global uint *hist, const uint n,
                           const uint per_item)
{
    __local uint local_hist[256];
    const uint lid = get_local_id(0);
    const uint lsz = get_local_size(0);
    for (uint b = lid; b < 256u; b += lsz)
        local_hist[b] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint start = get_global_id(0) * per_item;
    for (uint i = 0; i < per_item; ++i) {
        const uint k = start + i;
        if (k < n)
            atomic_inc(&local_hist[data[k]]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint b = lid; b < 256u; b += lsz)
        atomic_add(&hist[b], local_hist[b]);
}
