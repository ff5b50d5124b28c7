/* Two different arithmetic loops selected by bit `shift` of the global id. shift 0: odd and
 * even work-items of every warp take different paths (divergence serialises both);
 * shift 6: the choice is uniform across any warp/wavefront of up to 64 work-items. */
__kernel void branchy(__global const float *in, __global float *out, const uint shift,
                      const uint iters)
{
    const uint gid = get_global_id(0);
    float x = in[gid];
    if ((gid >> shift) & 1u) {
        for (uint i = 0; i < iters; ++i)
            x = x * 0.999f + 0.5f;
    } else {
        for (uint i = 0; i < iters; ++i)
            x = x * 0.998f - 0.25f;
    }
    out[gid] = x;
}
