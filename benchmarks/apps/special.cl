/* Transcendental-heavy loop: sin, cos, exp, log, sqrt per iteration. Terms do not feed back
 * into each other, so rounding differences between devices do not grow. */
__kernel void special_functions(__global const float *in, __global float *out, const uint iters)
{
    const uint gid = get_global_id(0);
    const float x = in[gid];
    float acc = 0.0f;
    for (uint k = 0; k < iters; ++k) {
        const float t = x + 0.01f * (float)k;
        acc += sin(t) * exp(-t) + cos(t) * 0.5f + sqrt(t) - log(1.0f + t);
    }
    out[gid] = acc;
}
