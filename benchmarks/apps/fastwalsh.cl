/* Fast Walsh-Hadamard transform, in place: one launch per butterfly width `step`
 * (1, 2, 4, ..., n/2); each work-item computes one butterfly. */
__kernel void fast_walsh_pass(__global float *data, const uint step)
{
    const uint tid = get_global_id(0);
    const uint group = tid % step;
    const uint pair = 2u * step * (tid / step) + group;
    const uint match = pair + step;
    const float a = data[pair];
    const float b = data[match];
    data[pair] = a + b;
    data[match] = a - b;
}
