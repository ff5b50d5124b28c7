/* Floyd-Warshall all-pairs shortest paths: one launch per intermediate node k.
 * Row k and column k do not change during pass k (dist[k][k] == 0, weights >= 0),
 * so every work-item of a pass may read them without synchronisation. */
__kernel void floyd_warshall_pass(__global int *dist, __global int *path, const uint n,
                                  const uint k)
{
    const uint x = get_global_id(0);
    const uint y = get_global_id(1);
    if (x >= n || y >= n)
        return;
    const int direct = dist[y * n + x];
    const int via = dist[y * n + k] + dist[k * n + x];
    if (via < direct) {
        dist[y * n + x] = via;
        path[y * n + x] = (int)k;
    }
}
