/* C = A * B for square row-major n x n matrices, straight from global memory:
 * A is read along rows (broadcast within a row of work-items), B along columns (coalesced). */
__kernel void matmul_gmem(__global const float *a, __global const float *b, __global float *c,
                          const uint n)
{
    const uint col = get_global_id(0);
    const uint row = get_global_id(1);
    float acc = 0.0f;
    for (uint k = 0; k < n; ++k)
        acc += a[row * n + k] * b[k * n + col];
    c[row * n + col] = acc;
}
