/* One time step of an all-pairs N-body simulation (float4: xyz position, w mass).
 * Each group stages a tile of positions in local memory; n % local size == 0. */
__kernel void nbody_step(__global const float4 *pos, __global const float4 *vel,
                         __global float4 *new_pos, __global float4 *new_vel,
                         __local float4 *tile, const uint n, const float dt, const float eps2)
{
    const uint gid = get_global_id(0);
    const uint lid = get_local_id(0);
    const uint lsz = get_local_size(0);
    const float4 p = pos[gid];
    float3 acc = (float3)(0.0f, 0.0f, 0.0f);
    for (uint t = 0; t < n; t += lsz) {
        tile[lid] = pos[t + lid];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint j = 0; j < lsz; ++j) {
            const float4 q = tile[j];
            const float3 r = q.xyz - p.xyz;
            const float d2 = r.x * r.x + r.y * r.y + r.z * r.z + eps2;
            const float inv = rsqrt(d2);
            acc += (q.w * inv * inv * inv) * r;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float4 v = vel[gid];
    const float3 nv = v.xyz + acc * dt;
    new_vel[gid] = (float4)(nv, v.w);
    new_pos[gid] = (float4)(p.xyz + nv * dt, p.w);
}
