/* A kernel with almost no work: its time is launch and scheduling overhead. */
__kernel void tiny_increment(__global int *data)
{
    data[get_global_id(0)] += 1;
}
