/* One Jacobi sweep of a 5-point stencil on an n x n grid; boundary cells are copied. */
__kernel void jacobi5(__global const float *src, __global float *dst, const uint n)
{
    const uint x = get_global_id(0);
    const uint y = get_global_id(1);
    const uint i = y * n + x;
    if (x == 0 || y == 0 || x == n - 1u || y == n - 1u) {
        dst[i] = src[i];
        return;
    }
    dst[i] = 0.2f * (src[i] + src[i - 1u] + src[i + 1u] + src[i - n] + src[i + n]);
}
