/* Transpose host: SIZE x SIZE floats (default 1024, a multiple of 16) with
 * transpose_lmem.cl, checked element by element. */
#include "clhost.h"

int main(int argc, char **argv)
{
    const long n = clh_size_arg(argc, argv, 1024);
    if (n % 16) {
        fprintf(stderr, "SIZE must be a multiple of 16\n");
        return 2;
    }
    clh_env env;
    clh_init(&env, "transpose_lmem.cl", "-DTILE=16");
    cl_kernel k = clh_kernel(&env, "transpose_lmem");
    const size_t nn = (size_t)n * (size_t)n;
    float *in = (float *)malloc(nn * sizeof *in), *out = (float *)malloc(nn * sizeof *out);
    uint64_t rng = 3;
    for (size_t i = 0; i < nn; ++i)
        in[i] = (float)clh_rand(&rng) / 4294967296.0f;
    cl_mem din = clh_buffer(&env, nn * sizeof *in, in), dout = clh_buffer(&env, nn * sizeof *out, NULL);
    cl_uint un = (cl_uint)n;
    CLH_CHECK(clSetKernelArg(k, 0, sizeof dout, &dout));
    CLH_CHECK(clSetKernelArg(k, 1, sizeof din, &din));
    CLH_CHECK(clSetKernelArg(k, 2, 16 * 16 * sizeof(float), NULL));
    CLH_CHECK(clSetKernelArg(k, 3, sizeof un, &un));
    CLH_CHECK(clSetKernelArg(k, 4, sizeof un, &un));
    size_t gsz[2] = {(size_t)n, (size_t)n}, lsz[2] = {16, 16};
    cl_event ev;
    CLH_CHECK(clEnqueueNDRangeKernel(env.queue, k, 2, NULL, gsz, lsz, 0, NULL, &ev));
    double ns = clh_event_ns(ev);
    clReleaseEvent(ev);
    CLH_CHECK(clEnqueueReadBuffer(env.queue, dout, CL_TRUE, 0, nn * sizeof *out, out, 0, NULL, NULL));
    long bad = 0;
    for (long y = 0; y < n; ++y)
        for (long x = 0; x < n; ++x)
            if (out[x * n + y] != in[y * n + x])
                ++bad;
    printf("%ld of %zu elements wrong\n", bad, nn);
    clReleaseMemObject(din);
    clReleaseMemObject(dout);
    clReleaseKernel(k);
    clh_release(&env);
    free(in);
    free(out);
    return clh_result(bad == 0, ns);
}
