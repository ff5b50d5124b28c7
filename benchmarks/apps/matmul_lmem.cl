/* C = A * B with TILE x TILE tiles of A and B staged in local memory (n % TILE == 0). */
#ifndef TILE
#define TILE 16
#endif
__kernel void matmul_lmem(__global const float *a, __global const float *b, __global float *c,
                          const uint n)
{
    __local float ta[TILE][TILE];
    __local float tb[TILE][TILE];
    const uint lx = get_local_id(0), ly = get_local_id(1);
    const uint col = get_group_id(0) * TILE + lx;
    const uint row = get_group_id(1) * TILE + ly;
    float acc = 0.0f;
    for (uint t = 0; t < n; t += TILE) {
        ta[ly][lx] = a[row * n + t + lx];
        tb[ly][lx] = b[(t + ly) * n + col];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint k = 0; k < TILE; ++k)
            acc += ta[ly][k] * tb[k][lx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    c[row * n + col] = acc;
}
