/* Each work-item follows `steps` hops of a random permutation: every load depends on the
 * previous one, so the time is memory latency times steps, whatever the bandwidth. */
__kernel void pointer_chase(__global const uint *next, __global uint *out, const uint steps)
{
    const uint gid = get_global_id(0);
    uint p = gid;
    for (uint s = 0; s < steps; ++s)
        p = next[p];
    out[gid] = p;
}
