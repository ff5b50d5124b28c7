/* Tiled matrix multiply host: C = A B for SIZE x SIZE (default 1024, a multiple of 16)
 * with matmul_lmem.cl, checked against a C triple loop (double accumulation). */
#include <math.h>

#include "clhost.h"

int main(int argc, char **argv)
{
    const long n = clh_size_arg(argc, argv, 1024);
    if (n % 16) {
        fprintf(stderr, "SIZE must be a multiple of 16\n");
        return 2;
    }
    clh_env env;
    clh_init(&env, "matmul_lmem.cl", "-DTILE=16");
    cl_kernel k = clh_kernel(&env, "matmul_lmem");
    const size_t nn = (size_t)n * (size_t)n;
    float *a = (float *)malloc(nn * sizeof *a), *b = (float *)malloc(nn * sizeof *b);
    float *c = (float *)malloc(nn * sizeof *c);
    uint64_t rng = 7;
    for (size_t i = 0; i < nn; ++i) {
        a[i] = (float)(clh_rand(&rng) % 1024u) / 1024.0f;
        b[i] = (float)(clh_rand(&rng) % 1024u) / 1024.0f;
    }
    cl_mem da = clh_buffer(&env, nn * sizeof *a, a), db = clh_buffer(&env, nn * sizeof *b, b);
    cl_mem dc = clh_buffer(&env, nn * sizeof *c, NULL);
    cl_uint un = (cl_uint)n;
    CLH_CHECK(clSetKernelArg(k, 0, sizeof da, &da));
    CLH_CHECK(clSetKernelArg(k, 1, sizeof db, &db));
    CLH_CHECK(clSetKernelArg(k, 2, sizeof dc, &dc));
    CLH_CHECK(clSetKernelArg(k, 3, sizeof un, &un));
    size_t gsz[2] = {(size_t)n, (size_t)n}, lsz[2] = {16, 16};
    cl_event ev;
    CLH_CHECK(clEnqueueNDRangeKernel(env.queue, k, 2, NULL, gsz, lsz, 0, NULL, &ev));
    double ns = clh_event_ns(ev);
    clReleaseEvent(ev);
    CLH_CHECK(clEnqueueReadBuffer(env.queue, dc, CL_TRUE, 0, nn * sizeof *c, c, 0, NULL, NULL));
    /* Reference: i-k-j order in double keeps it cache friendly. */
    double *ref = (double *)calloc(nn, sizeof *ref);
    for (long i = 0; i < n; ++i)
        for (long kk = 0; kk < n; ++kk) {
            const double aik = a[i * n + kk];
            for (long j = 0; j < n; ++j)
                ref[i * n + j] += aik * b[kk * n + j];
        }
    long bad = 0;
    for (size_t i = 0; i < nn; ++i)
        if (fabs(c[i] - ref[i]) > 1e-4 * fabs(ref[i]) + 1e-3)
            ++bad;
    printf("%ld of %zu elements outside tolerance\n", bad, nn);
    clReleaseMemObject(da);
    clReleaseMemObject(db);
    clReleaseMemObject(dc);
    clReleaseKernel(k);
    clh_release(&env);
    free(a);
    free(b);
    free(c);
    free(ref);
    return clh_result(bad == 0, ns);
}
