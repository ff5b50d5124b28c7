/* Floyd-Warshall host: SIZE nodes (default 192, a multiple of 16), one launch of
 * floydwarshall.cl's pass per node, checked against the C triple loop. */
#include "clhost.h"

int main(int argc, char **argv)
{
    const long n = clh_size_arg(argc, argv, 192);
    if (n % 16) {
        fprintf(stderr, "SIZE must be a multiple of 16\n");
        return 2;
    }
    clh_env env;
    clh_init(&env, "floydwarshall.cl", "");
    cl_kernel k = clh_kernel(&env, "floyd_warshall_pass");
    const size_t nn = (size_t)n * (size_t)n;
    int *dist = (int *)malloc(nn * sizeof *dist), *path = (int *)malloc(nn * sizeof *path);
    int *ref = (int *)malloc(nn * sizeof *ref), *got = (int *)malloc(nn * sizeof *got);
    uint64_t rng = 11;
    for (long y = 0; y < n; ++y)
        for (long x = 0; x < n; ++x) {
            dist[y * n + x] = x == y ? 0 : 1 + (int)(clh_rand(&rng) % 99u);
            path[y * n + x] = (int)x;
        }
    memcpy(ref, dist, nn * sizeof *ref);
    cl_mem dd = clh_buffer(&env, nn * sizeof *dist, dist), dp = clh_buffer(&env, nn * sizeof *path, path);
    cl_uint un = (cl_uint)n;
    CLH_CHECK(clSetKernelArg(k, 0, sizeof dd, &dd));
    CLH_CHECK(clSetKernelArg(k, 1, sizeof dp, &dp));
    CLH_CHECK(clSetKernelArg(k, 2, sizeof un, &un));
    size_t gsz[2] = {(size_t)n, (size_t)n}, lsz[2] = {16, 16};
    double ns = 0.0;
    for (cl_uint kk = 0; kk < un; ++kk) {
        CLH_CHECK(clSetKernelArg(k, 3, sizeof kk, &kk));
        cl_event ev;
        CLH_CHECK(clEnqueueNDRangeKernel(env.queue, k, 2, NULL, gsz, lsz, 0, NULL, &ev));
        ns += clh_event_ns(ev);
        clReleaseEvent(ev);
    }
    CLH_CHECK(clEnqueueReadBuffer(env.queue, dd, CL_TRUE, 0, nn * sizeof *got, got, 0, NULL, NULL));
    for (long kk = 0; kk < n; ++kk)
        for (long y = 0; y < n; ++y)
            for (long x = 0; x < n; ++x) {
                const int via = ref[y * n + kk] + ref[kk * n + x];
                if (via < ref[y * n + x])
                    ref[y * n + x] = via;
            }
    long bad = 0;
    for (size_t i = 0; i < nn; ++i)
        if (got[i] != ref[i])
            ++bad;
    printf("%ld of %zu distances wrong\n", bad, nn);
    clReleaseMemObject(dd);
    clReleaseMemObject(dp);
    clReleaseKernel(k);
    clh_release(&env);
    free(dist);
    free(path);
    free(ref);
    free(got);
    return clh_result(bad == 0, ns);
}
