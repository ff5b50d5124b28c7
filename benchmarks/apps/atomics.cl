/* Every work-item atomically adds its value to one of `nbins` global counters
 * (gid mod nbins): a few hot addresses, maximal contention. */
__kernel void atomic_contention(__global const int *in, __global int *counters, const uint nbins)
{
    const uint gid = get_global_id(0);
    atomic_add(&counters[gid % nbins], in[gid]);
}
