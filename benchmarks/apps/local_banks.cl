/* Local-memory reads whose bank pattern is set by `stride` (in 4-byte words): work-item l
 * reads word (l * stride + it) mod LWORDS at iteration it. stride 1: conflict-free;
 * stride 32: all work-items of a warp hit the same bank (32-way conflict on 32 banks). */
#define LWORDS 4096
__kernel void local_bank_stride(__global const float *in, __global float *out,
                                const uint stride, const uint iters)
{
    __local float buf[LWORDS];
    const uint lid = get_local_id(0);
    const uint lsz = get_local_size(0);
    for (uint i = lid; i < LWORDS; i += lsz)
        buf[i] = in[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    uint idx = (lid * stride) & (LWORDS - 1u);
    float acc = 0.0f;
    for (uint it = 0; it < iters; ++it) {
        acc += buf[idx];
        idx = (idx + 1u) & (LWORDS - 1u);
    }
    out[get_global_id(0)] = acc;
}
