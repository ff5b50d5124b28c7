/* out (width x height) = transpose of in (height x width), through a TILE x TILE local tile
 * so that both the read and the write are coalesced. Dimensions are multiples of TILE.
 * The tile is not padded (as in the vendor samples): the column read of the tile conflicts
 * in the local-memory banks. */
#ifndef TILE
#define TILE 16
#endif
__kernel void transpose_lmem(__global float *out, __global const float *in,
                             __local float *tile, const uint width, const uint height)
{
    const uint lx = get_local_id(0), ly = get_local_id(1);
    const uint gx = get_group_id(0), gy = get_group_id(1);
    tile[ly * TILE + lx] = in[(gy * TILE + ly) * width + gx * TILE + lx];
    barrier(CLK_LOCAL_MEM_FENCE);
    out[(gx * TILE + ly) * height + gy * TILE + lx] = tile[lx * TILE + ly];
}
