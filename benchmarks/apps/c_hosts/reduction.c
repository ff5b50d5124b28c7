/* Reduction host: sums SIZE (default 1048576) unsigned ints with reduction.cl's reduce_sum,
 * stage after stage, and checks the result against a C loop. */
#include "clhost.h"

int main(int argc, char **argv)
{
    const long n = clh_size_arg(argc, argv, 1048576);
    clh_env env;
    clh_init(&env, "reduction.cl", "");
    cl_kernel k = clh_kernel(&env, "reduce_sum");
    uint32_t *data = (uint32_t *)malloc((size_t)n * sizeof *data);
    uint64_t rng = 42;
    uint32_t want = 0;
    for (long i = 0; i < n; ++i) {
        data[i] = clh_rand(&rng) % 1000u;
        want += data[i];
    }
    cl_mem src = clh_buffer(&env, (size_t)n * sizeof *data, data);
    cl_uint count = (cl_uint)n;
    double ns = 0.0;
    while (count > 1) {
        cl_uint half = (count + 1) / 2, lsz = 1;
        while (lsz < half && lsz < 256)
            lsz <<= 1;
        cl_uint groups = (count + 2 * lsz - 1) / (2 * lsz);
        cl_mem dst = clh_buffer(&env, groups * sizeof(cl_uint), NULL);
        CLH_CHECK(clSetKernelArg(k, 0, sizeof src, &src));
        CLH_CHECK(clSetKernelArg(k, 1, sizeof dst, &dst));
        CLH_CHECK(clSetKernelArg(k, 2, lsz * sizeof(cl_uint), NULL));
        CLH_CHECK(clSetKernelArg(k, 3, sizeof count, &count));
        size_t gsz = (size_t)groups * lsz, l = lsz;
        cl_event ev;
        CLH_CHECK(clEnqueueNDRangeKernel(env.queue, k, 1, NULL, &gsz, &l, 0, NULL, &ev));
        ns += clh_event_ns(ev);
        clReleaseEvent(ev);
        clReleaseMemObject(src);
        src = dst;
        count = groups;
    }
    cl_uint got = 0;
    CLH_CHECK(clEnqueueReadBuffer(env.queue, src, CL_TRUE, 0, sizeof got, &got, 0, NULL, NULL));
    printf("sum %u, expected %u\n", got, want);
    clReleaseMemObject(src);
    clReleaseKernel(k);
    clh_release(&env);
    free(data);
    return clh_result(got == want, ns);
}
