/* Shared helpers of the plain-C benchmark hosts: device choice, kernel source loading,
 * program build, error checks. Header-only (static functions) so each host is one
 * translation unit linked only against the system OpenCL loader (-lOpenCL): the point of
 * these hosts is to be ordinary, unmodified OpenCL programs for LD_PRELOAD interception.
 *
 * Environment: CLPROJ_DEVICE=<index> picks a device in clproj's order (platforms as the
 * loader returns them, devices within each); CLPROJ_KERNEL_DIR overrides where the .cl
 * files are looked for (default: the directory above the executable, i.e. benchmarks/apps). */
#ifndef CLPROJ_CLHOST_H
#define CLPROJ_CLHOST_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clproj_settings.h" /* native/: settings read as the rest of clproj reads them */

#define CLH_CHECK(expr)                                                                    \
    do {                                                                                   \
        cl_int clh_err_ = (expr);                                                          \
        if (clh_err_ != CL_SUCCESS) {                                                      \
            fprintf(stderr, "%s:%d: %s failed with OpenCL error %d\n", __FILE__, __LINE__, \
                    #expr, (int)clh_err_);                                                 \
            exit(2);                                                                       \
        }                                                                                  \
    } while (0)

typedef struct {
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
    cl_program program;
} clh_env;

static char *clh_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = (char *)malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

/* The app's kernel source: $CLPROJ_KERNEL_DIR/<name>, else <exe dir>/../<name>. */
static char *clh_load_kernel_source(const char *name)
{
    char path[PATH_MAX + 64];
    const char *dir = clproj_setting_kernel_dir();
    if (dir && *dir) {
        snprintf(path, sizeof path, "%s/%s", dir, name);
    } else {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) {
            fprintf(stderr, "cannot locate the executable to find %s; set CLPROJ_KERNEL_DIR\n", name);
            exit(2);
        }
        exe[n] = '\0';
        snprintf(path, sizeof path, "%s/../%s", dirname(exe), name);
    }
    char *src = clh_read_file(path, NULL);
    if (!src) {
        fprintf(stderr, "cannot read kernel source %s (set CLPROJ_KERNEL_DIR to benchmarks/apps)\n", path);
        exit(2);
    }
    return src;
}

static void clh_init(clh_env *env, const char *cl_file, const char *options)
{
    cl_uint nplat = 0;
    CLH_CHECK(clGetPlatformIDs(0, NULL, &nplat));
    if (nplat == 0) {
        fprintf(stderr, "no OpenCL platform\n");
        exit(2);
    }
    cl_platform_id plats[16];
    if (nplat > 16)
        nplat = 16;
    CLH_CHECK(clGetPlatformIDs(nplat, plats, NULL));
    int want = (int)clproj_setting_device(), seen = 0, found = 0;
    for (cl_uint p = 0; p < nplat && !found; ++p) {
        cl_uint ndev = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &ndev) != CL_SUCCESS)
            continue;
        cl_device_id devs[64];
        if (ndev > 64)
            ndev = 64;
        CLH_CHECK(clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, ndev, devs, NULL));
        for (cl_uint d = 0; d < ndev; ++d, ++seen) {
            if (seen == want) {
                env->platform = plats[p];
                env->device = devs[d];
                found = 1;
                break;
            }
        }
    }
    if (!found) {
        fprintf(stderr, "CLPROJ_DEVICE=%d but only %d OpenCL devices\n", want, seen);
        exit(2);
    }
    char name[256] = {0};
    clGetDeviceInfo(env->device, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    printf("device %d: %s\n", want, name);
    cl_int err;
    env->context = clCreateContext(NULL, 1, &env->device, NULL, NULL, &err);
    CLH_CHECK(err);
    env->queue = clCreateCommandQueue(env->context, env->device, CL_QUEUE_PROFILING_ENABLE, &err);
    CLH_CHECK(err);
    char *src = clh_load_kernel_source(cl_file);
    const char *srcs[1] = {src};
    env->program = clCreateProgramWithSource(env->context, 1, srcs, NULL, &err);
    CLH_CHECK(err);
    err = clBuildProgram(env->program, 1, &env->device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        size_t n = 0;
        clGetProgramBuildInfo(env->program, env->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
        char *log = (char *)malloc(n + 1);
        clGetProgramBuildInfo(env->program, env->device, CL_PROGRAM_BUILD_LOG, n, log, NULL);
        log[n] = '\0';
        fprintf(stderr, "build of %s failed (%d):\n%s\n", cl_file, (int)err, log);
        exit(2);
    }
    free(src);
}

static cl_kernel clh_kernel(clh_env *env, const char *name)
{
    cl_int err;
    cl_kernel k = clCreateKernel(env->program, name, &err);
    CLH_CHECK(err);
    return k;
}

static cl_mem clh_buffer(clh_env *env, size_t bytes, const void *host)
{
    cl_int err;
    cl_mem m = clCreateBuffer(env->context, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0),
                              bytes, (void *)host, &err);
    CLH_CHECK(err);
    return m;
}

/* Device time of a finished event, in nanoseconds. */
static double clh_event_ns(cl_event ev)
{
    cl_ulong t0 = 0, t1 = 0;
    CLH_CHECK(clWaitForEvents(1, &ev));
    CLH_CHECK(clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL));
    CLH_CHECK(clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL));
    return (double)(t1 - t0);
}

static void clh_release(clh_env *env)
{
    clReleaseProgram(env->program);
    clReleaseCommandQueue(env->queue);
    clReleaseContext(env->context);
}

/* Deterministic pseudo-random numbers (the C hosts do not share the Python apps' data). */
static uint32_t clh_rand(uint64_t *state)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(*state >> 33);
}

static long clh_size_arg(int argc, char **argv, long dflt)
{
    if (argc < 2)
        return dflt;
    char *end = NULL;
    long v = strtol(argv[1], &end, 10);
    if (!end || *end || v <= 0) {
        fprintf(stderr, "usage: %s [SIZE]  (default %ld)\n", argv[0], dflt);
        exit(2);
    }
    return v;
}

static int clh_result(int ok, double device_ns)
{
    printf("device time %.3f ms\n%s\n", device_ns / 1e6, ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

#endif
