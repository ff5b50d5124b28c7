/* c = a + b: the streaming-bandwidth baseline (two reads, one write per work-item). */
__kernel void vecadd(__global const float *a, __global const float *b, __global float *c)
{
    const uint i = get_global_id(0);
    c[i] = a[i] + b[i];
}
