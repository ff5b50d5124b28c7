/* Energy windows inside an unmodified OpenCL app (LD_PRELOAD).
 *
 * Why: a device's energy counter steps every 20-100 ms, and most apps launch a kernel
 * once or a few times for a few milliseconds, far too short to integrate. This library
 * turns the first CLPROJ_ENERGY_SHAPES launch shapes (global and local size) of each
 * kernel into a measurable window, without changing what the app computes:
 *
 *   1. drain the app's queue, stay quiet CLPROJ_ENERGY_QUIET_S, then CLPROJ_ENERGY_IDLE_S
 *      more (the idle interval the reader samples idle power in);
 *   2. copy every buffer argument the kernel may write to a scratch buffer;
 *   3. launch the kernel with the app's arguments over and over for CLPROJ_ENERGY_WINDOW_S
 *      (batches of about 50 ms, each drained; the first batches are the warm-up);
 *   4. copy the saved buffers back, then make the app's own launch as it asked.
 *
 * Each window is one JSON line appended to CLPROJ_ENERGY_LOG with CLOCK_MONOTONIC times
 * (Python's time.monotonic()), so the process that polls the energy counter
 * (clproj.devices.energy_app) can cut its readings to the window. Nothing here reads a
 * counter or sets a clock. Unset CLPROJ_ENERGY_LOG: every call passes straight through.
 *
 * Buffers are known from clCreateBuffer/clCreateSubBuffer (a kernel argument is only
 * treated as a buffer when its value is one of them: dereferencing an unknown 8-byte
 * scalar as a cl_mem would crash the ICD loader). */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clproj_settings.h"

#define MAX_BUFFERS 65536 /* buffers remembered (an open-addressing set) */
#define MAX_KERNELS 4096  /* kernel objects whose buffer arguments are tracked */
#define MAX_ARGS 64       /* arguments tracked per kernel */
#define MAX_SHAPES 8192   /* distinct launch shapes remembered */
#define NAME_MAX_LEN 256
#define BATCH_TARGET_S 0.05
#define MAX_BATCH (1 << 20)

typedef cl_mem (*create_buffer_fn)(cl_context, cl_mem_flags, size_t, void *, cl_int *);
typedef cl_mem (*create_sub_fn)(cl_mem, cl_mem_flags, cl_buffer_create_type, const void *,
                                cl_int *);
typedef cl_int (*set_arg_fn)(cl_kernel, cl_uint, size_t, const void *);
typedef cl_int (*enqueue_fn)(cl_command_queue, cl_kernel, cl_uint, const size_t *,
                             const size_t *, const size_t *, cl_uint, const cl_event *,
                             cl_event *);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_file;
static int enabled = -1; /* -1: not decided yet */
static double window_s, quiet_s, idle_s;
static long long shapes_per_kernel;

static cl_mem buffers[MAX_BUFFERS];

typedef struct {
    cl_kernel kernel;
    cl_mem args[MAX_ARGS];
} kernel_args;
static kernel_args kernels[MAX_KERNELS];
static int n_kernels;

typedef struct {
    char name[NAME_MAX_LEN];
    cl_uint dim;
    size_t global[3];
    size_t local[3];
    int has_local;
} shape;
static shape shapes[MAX_SHAPES];
static int n_shapes;

static void *real(const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    if (f == NULL) {
        fprintf(stderr, "clproj energy window: no %s after this library (%s)\n", name,
                dlerror());
        abort();
    }
    return f;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Called with the lock held. */
static int on(void) {
    if (enabled >= 0) return enabled;
    const char *path = clproj_setting_energy_log();
    enabled = 0;
    if (path[0] == '\0') return 0;
    log_file = fopen(path, "a");
    if (log_file == NULL) {
        fprintf(stderr, "clproj energy window: cannot open %s; measuring nothing\n", path);
        return 0;
    }
    window_s = clproj_setting_energy_window_s();
    quiet_s = clproj_setting_energy_quiet_s();
    idle_s = clproj_setting_energy_idle_s();
    shapes_per_kernel = clproj_setting_energy_shapes();
    enabled = 1;
    return 1;
}

static size_t slot_of(cl_mem m) {
    return ((size_t)(uintptr_t)m >> 4) * 2654435761u % MAX_BUFFERS;
}

static void remember_buffer(cl_mem m) {
    if (m == NULL) return;
    size_t i = slot_of(m);
    for (int probe = 0; probe < MAX_BUFFERS; probe++, i = (i + 1) % MAX_BUFFERS) {
        if (buffers[i] == m) return;
        if (buffers[i] == NULL) {
            buffers[i] = m;
            return;
        }
    }
}

static int is_buffer(cl_mem m) {
    if (m == NULL) return 0;
    size_t i = slot_of(m);
    for (int probe = 0; probe < MAX_BUFFERS; probe++, i = (i + 1) % MAX_BUFFERS) {
        if (buffers[i] == m) return 1;
        if (buffers[i] == NULL) return 0;
    }
    return 0;
}

static kernel_args *args_of(cl_kernel k, int create) {
    for (int i = 0; i < n_kernels; i++)
        if (kernels[i].kernel == k) return &kernels[i];
    if (!create || n_kernels == MAX_KERNELS) return NULL;
    kernel_args *ka = &kernels[n_kernels++];
    memset(ka, 0, sizeof *ka);
    ka->kernel = k;
    return ka;
}

/* A buffer the app just created, remembered (under the lock) and handed back. */
static cl_mem created(cl_mem m) {
    pthread_mutex_lock(&lock);
    if (on()) remember_buffer(m);
    pthread_mutex_unlock(&lock);
    return m;
}

cl_mem clCreateBuffer(cl_context ctx, cl_mem_flags flags, size_t size, void *host,
                      cl_int *err) {
    static create_buffer_fn f;
    if (f == NULL) f = (create_buffer_fn)real("clCreateBuffer");
    return created(f(ctx, flags, size, host, err));
}

cl_mem clCreateSubBuffer(cl_mem parent, cl_mem_flags flags, cl_buffer_create_type type,
                         const void *info, cl_int *err) {
    static create_sub_fn f;
    if (f == NULL) f = (create_sub_fn)real("clCreateSubBuffer");
    return created(f(parent, flags, type, info, err));
}

cl_int clSetKernelArg(cl_kernel k, cl_uint index, size_t size, const void *value) {
    static set_arg_fn f;
    if (f == NULL) f = (set_arg_fn)real("clSetKernelArg");
    cl_int rc = f(k, index, size, value);
    pthread_mutex_lock(&lock);
    if (rc == CL_SUCCESS && on() && index < MAX_ARGS) {
        cl_mem m = NULL;
        if (size == sizeof(cl_mem) && value != NULL) memcpy(&m, value, sizeof m);
        kernel_args *ka = args_of(k, 1);
        if (ka != NULL) ka->args[index] = is_buffer(m) ? m : NULL;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* 1 when this launch's shape is one of the first shapes_per_kernel of its kernel name
 * (and remembers it). Called with the lock held. */
static int first_shapes(const char *name, cl_uint dim, const size_t *g, const size_t *l) {
    shape s;
    memset(&s, 0, sizeof s);
    snprintf(s.name, sizeof s.name, "%s", name);
    s.dim = dim;
    for (cl_uint d = 0; d < dim && d < 3; d++) {
        s.global[d] = g[d];
        s.local[d] = l ? l[d] : 0;
    }
    s.has_local = l != NULL;
    long long same_name = 0;
    for (int i = 0; i < n_shapes; i++) {
        if (strcmp(shapes[i].name, s.name) != 0) continue;
        if (memcmp(&shapes[i], &s, sizeof s) == 0) return 0;
        same_name++;
    }
    if (same_name >= shapes_per_kernel || n_shapes == MAX_SHAPES) return 0;
    shapes[n_shapes++] = s;
    return 1;
}

static void write_sizes(const char *key, cl_uint dim, const size_t *v) {
    fprintf(log_file, "\"%s\":", key);
    if (v == NULL) {
        fputs("null", log_file);
        return;
    }
    fputc('[', log_file);
    for (cl_uint d = 0; d < dim; d++) fprintf(log_file, "%s%zu", d ? "," : "", v[d]);
    fputc(']', log_file);
}

typedef struct {
    cl_mem buffer;
    cl_mem saved;
    size_t size;
} saved_buffer;

/* Scratch copies of the kernel's buffers that it may write (all but READ_ONLY ones).
 * Returns how many were saved, or -1 (with err) when one could not be. */
static int save_buffers(cl_command_queue q, const kernel_args *ka, saved_buffer *out,
                        const char **err) {
    int n = 0;
    for (int i = 0; ka != NULL && i < MAX_ARGS; i++) {
        cl_mem m = ka->args[i];
        if (m == NULL) continue;
        int dup = 0;
        for (int j = 0; j < n; j++) dup |= out[j].buffer == m;
        if (dup) continue;
        cl_mem_flags flags = 0;
        size_t size = 0;
        cl_context ctx = NULL;
        if (clGetMemObjectInfo(m, CL_MEM_FLAGS, sizeof flags, &flags, NULL) != CL_SUCCESS ||
            clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof size, &size, NULL) != CL_SUCCESS ||
            clGetMemObjectInfo(m, CL_MEM_CONTEXT, sizeof ctx, &ctx, NULL) != CL_SUCCESS) {
            *err = "a buffer argument could not be queried";
            return -1;
        }
        if (flags & CL_MEM_READ_ONLY) continue;
        static create_buffer_fn create;
        if (create == NULL) create = (create_buffer_fn)real("clCreateBuffer");
        cl_int rc = CL_SUCCESS;
        cl_mem copy = create(ctx, CL_MEM_READ_WRITE, size, NULL, &rc);
        if (rc != CL_SUCCESS ||
            clEnqueueCopyBuffer(q, m, copy, 0, 0, size, 0, NULL, NULL) != CL_SUCCESS) {
            if (copy != NULL) clReleaseMemObject(copy);
            *err = "no device memory to save a buffer the kernel writes";
            return -1;
        }
        out[n++] = (saved_buffer){m, copy, size};
    }
    clFinish(q);
    return n;
}

static void restore_buffers(cl_command_queue q, saved_buffer *saved, int n) {
    for (int i = 0; i < n; i++)
        clEnqueueCopyBuffer(q, saved[i].saved, saved[i].buffer, 0, 0, saved[i].size, 0, NULL,
                            NULL);
    clFinish(q);
    for (int i = 0; i < n; i++) clReleaseMemObject(saved[i].saved);
}

/* Launches of the app's launch, `batch` at a time, each batch drained; 0 or the error. */
static cl_int batch(enqueue_fn f, cl_command_queue q, cl_kernel k, cl_uint dim,
                    const size_t *off, const size_t *g, const size_t *l, long n) {
    for (long i = 0; i < n; i++) {
        cl_int rc = f(q, k, dim, off, g, l, 0, NULL, NULL);
        if (rc != CL_SUCCESS) return rc;
    }
    return clFinish(q);
}

static void measure(enqueue_fn f, cl_command_queue q, cl_kernel k, const char *name,
                    cl_uint dim, const size_t *off, const size_t *g, const size_t *l) {
    const char *err = NULL;
    cl_int rc = clFinish(q);
    double idle_start = 0, idle_end = 0, start = 0, end = 0;
    long launches = 0;
    saved_buffer saved[MAX_ARGS];
    int n_saved = 0;
    if (rc == CL_SUCCESS) {
        sleep_s(quiet_s);
        idle_start = now_s();
        sleep_s(idle_s);
        idle_end = now_s();
        n_saved = save_buffers(q, args_of(k, 0), saved, &err);
    } else {
        err = "the app's queue failed to drain";
    }
    if (err == NULL) {
        long n = 1; /* doubled until a batch lasts BATCH_TARGET_S: the warm-up */
        for (;;) {
            double t0 = now_s();
            rc = batch(f, q, k, dim, off, g, l, n);
            if (rc != CL_SUCCESS || now_s() - t0 >= BATCH_TARGET_S || n >= MAX_BATCH) break;
            n *= 2;
        }
        start = now_s();
        while (rc == CL_SUCCESS) {
            rc = batch(f, q, k, dim, off, g, l, n);
            if (rc == CL_SUCCESS) launches += n;
            end = now_s();
            if (end - start >= window_s) break;
        }
        if (rc != CL_SUCCESS) err = "a repeated launch failed";
        restore_buffers(q, saved, n_saved);
    }
    fprintf(log_file, "{\"kernel\":\"%s\",\"work_dim\":%u,", name, dim);
    write_sizes("global_size", dim, g);
    fputc(',', log_file);
    write_sizes("local_size", dim, l);
    fprintf(log_file,
            ",\"idle\":[%.6f,%.6f],\"start\":%.6f,\"end\":%.6f,\"launches\":%ld,"
            "\"saved_buffers\":%d,\"cl_error\":%d,\"error\":",
            idle_start, idle_end, start, end, launches, n_saved < 0 ? 0 : n_saved, rc);
    if (err != NULL)
        fprintf(log_file, "\"%s\"}\n", err);
    else
        fputs("null}\n", log_file);
    fflush(log_file);
}

/* 1 once the launch's wait list is complete; 0 (the launch is not measured) when it
 * holds a user event, which only the app's host code can complete: waiting on it here,
 * with the lock held, could wait forever. */
static int waits_done(cl_uint n_wait, const cl_event *wait) {
    for (cl_uint i = 0; i < n_wait; i++) {
        cl_command_type type = 0;
        if (wait == NULL ||
            clGetEventInfo(wait[i], CL_EVENT_COMMAND_TYPE, sizeof type, &type, NULL) !=
                CL_SUCCESS ||
            type == CL_COMMAND_USER)
            return 0;
    }
    return n_wait == 0 || clWaitForEvents(n_wait, wait) == CL_SUCCESS;
}

cl_int clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dim, const size_t *off,
                              const size_t *g, const size_t *l, cl_uint n_wait,
                              const cl_event *wait, cl_event *event) {
    static enqueue_fn f;
    if (f == NULL) f = (enqueue_fn)real("clEnqueueNDRangeKernel");
    pthread_mutex_lock(&lock);
    if (on() && g != NULL && dim >= 1 && dim <= 3) {
        char name[NAME_MAX_LEN] = "";
        size_t len = 0;
        int named = clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof name, name, &len) ==
                    CL_SUCCESS;
        for (char *p = name; named && *p; p++) /* an OpenCL C identifier, JSON-safe */
            if (!(*p == '_' || (*p >= '0' && *p <= '9') || ((*p | 32) >= 'a' && (*p | 32) <= 'z')))
                *p = '_';
        /* The app's own wait list must be complete before the device goes quiet. */
        if (named && waits_done(n_wait, wait) &&
            first_shapes(name, dim, g, l))
            measure(f, q, k, name, dim, off, g, l);
    }
    pthread_mutex_unlock(&lock);
    return f(q, k, dim, off, g, l, n_wait, wait, event);
}
