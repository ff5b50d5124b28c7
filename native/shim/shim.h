/* clproj interception shim: shared declarations.
 * The C side forwards every OpenCL call to the real implementation and keeps
 * per-call work minimal; Python callbacks are declared in shim_api.h. */
#ifndef CLPROJ_SHIM_H
#define CLPROJ_SHIM_H
#define CL_USE_DEPRECATED_OPENCL_1_0_APIS
#define CL_USE_DEPRECATED_OPENCL_1_1_APIS
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#define CL_USE_DEPRECATED_OPENCL_2_0_APIS
#include <CL/cl.h>
#include <stddef.h>
#include <stdint.h>

#include "launch_types.h"

enum { CLPROJ_ARG_SCALAR = 0, CLPROJ_ARG_BUFFER = 1, CLPROJ_ARG_LOCAL = 2, CLPROJ_ARG_NULL = 3,
       CLPROJ_ARG_UNSUPPORTED = 4, CLPROJ_ARG_UNSET = 5 };

/* Resolve the next definition of an OpenCL symbol (the real ICD loader). */
void *clproj_real(const char *name);
/* The C library's dlsym, past the shim's own interposed dlsym (dlsym.c). */
void *clproj_real_dlsym(void *handle, const char *name);

/* Thread-local guard: non-zero while the shim itself is calling OpenCL, so those
 * calls are forwarded untouched and never recurse into the shim. */
extern __thread int clproj_in_shim __attribute__((tls_model("initial-exec")));
/* initial-exec: a plain %fs-relative load instead of a __tls_get_addr call on every
 * intercepted call; the shim is preloaded (or loaded into a Python process that has room
 * in its static TLS block for these few bytes). */
#define CLPROJ_TLS __thread __attribute__((tls_model("initial-exec")))

/* dlopen libpython (once) unless the process has Python already; 0 when it cannot. Must
 * precede the first Python callback: the shim is not linked against libpython. */
int clproj_python_load(void);
/* Start the shim's Python side once (python_start.c says how it cannot deadlock): 1 when it
 * runs, 0 when it cannot. Every path into Python passes here first. */
int clproj_python_start(void);
/* 1 once Python failed to start (it is never retried: launches are no longer recorded). */
int clproj_python_failed(void);
/* Project mode, a process without an interpreter of its own: start the Python side now on a
 * thread of its own (python_start.c), so that the first recorded launch finds it running. */
void clproj_python_prestart(void);
/* Around a wait of the shim's own in a thread that may hold the GIL (a pyopencl thread:
 * pyopencl keeps it across clEnqueueNDRangeKernel): let it go (NULL when the thread holds
 * none), then take it back. python_start.c. */
void *clproj_release_gil(void);
void clproj_reacquire_gil(void *saved);

/* Python callbacks (defined by cffi from shim_api.h). */
int clproj_py_start(void);
/* Whether standard descriptor fd (0-2) was closed when the app started (python_start.c). */
int clproj_std_fd_closed_at_start(int fd);
int clproj_py_pre_launch(clproj_launch *);
void clproj_py_post_launch(int, clproj_launch *, int32_t, int64_t);

int32_t clproj_read_mem(void *queue, void *mem, size_t size, void *dst, uint32_t n_wait,
                        void *const *wait);
/* Map `size` bytes of `mem` for reading (blocking, after the wait list): the buffer's own
 * memory on a device that shares the host's (clproj_host_unified), a copy elsewhere; NULL
 * on failure. clproj_unmap_mem unmaps it and waits until that is done. */
void *clproj_map_mem(void *queue, void *mem, size_t size, uint32_t n_wait, void *const *wait);
int32_t clproj_unmap_mem(void *queue, void *mem, void *ptr);
/* CL_DEVICE_HOST_UNIFIED_MEMORY: 1 when the device's memory is the host's. */
int32_t clproj_host_unified(void *device);
int32_t clproj_device_str(void *device, uint32_t param, char *buf, size_t n);
uint64_t clproj_device_type(void *device);
void clproj_log(const char *msg);
/* The launch-sizing answers the app has read so far, one bit each (queries.c), the
 * OpenCL parameter of a bit (0 past the last) and its last answer read. */
/* Recorded launches that completed since the last call: up to `max` (handle, ns) pairs, ns
 * -1 where the launch gave no time; the count. clproj_harvest_now collects completed events
 * without waiting (Python calls it at exit before taking the last times). track.c. */
int32_t clproj_take_record_times(int32_t *handles, int64_t *ns, int32_t max);
void clproj_harvest_now(void);
uint32_t clproj_size_queries(void);
uint32_t clproj_size_query_param(uint32_t bit);
uint64_t clproj_size_query_answer(uint32_t bit);

/* REAL(fn, fail): cached pointer real_fn to the real implementation of fn; runs
 * `fail` (a return statement) when no implementation exists. */
#define REAL(fn, fail)                                                        \
    static __typeof__(&fn) real_##fn = NULL;                                  \
    if (real_##fn == NULL) real_##fn = (__typeof__(&fn))clproj_real(#fn);     \
    if (real_##fn == NULL) fail
#define FAIL_INT return CL_OUT_OF_HOST_MEMORY
#define FAIL_PTR                                                              \
    do {                                                                      \
        if (errcode_ret) *errcode_ret = CL_OUT_OF_HOST_MEMORY;                \
        return NULL;                                                          \
    } while (0)

/* ---- tracking (track.c) ---- */
typedef struct prog_info {
    int refs; /* app references + kernels + in-flight launches */
    int app_refs;
    char *source;      /* NULL for IL/binary */
    char *options;     /* options of the last build/compile/link */
    const char *binary_kind;
    const char *reason; /* not-emulatable reason or NULL */
    uint64_t hash;
} prog_info;

typedef struct {
    int kind;
    size_t size;
    unsigned char *data; /* scalar copy (owned) */
    void *mem;
    const char *what;
    int addr; /* 0 unknown, 1 global/constant, 2 local, 3 private */
} karg;

typedef struct kern_info {
    int app_refs;
    char *name;
    prog_info *prog;
    cl_uint nargs;
    karg *args;
    int uses_svm;
    int stat_idx;
    void *stat_device;
} kern_info;

typedef struct {
    int kind; /* CLPROJ_ARG_BUFFER or CLPROJ_ARG_UNSUPPORTED */
    int app_refs;
    size_t size;
    cl_mem_flags flags;
    size_t origin, parent_size;
    cl_mem parent; /* a sub-buffer's parent, NULL otherwise */
    int written;   /* a command may have written it since its creation (writes.c) */
    const char *what;
} mem_info;

typedef struct {
    int app_refs;
    cl_device_id device;
    int app_profiling;       /* the app created it with CL_QUEUE_PROFILING_ENABLE */
    cl_command_queue twin;   /* profiling queue that runs the timed launches (launch.c) */
    int twin_failed;
} queue_info;

typedef struct {
    char mode[16];
    int recording;  /* record dir configured */
    int which_all;  /* 1: every launch; 0: first of each signature */
    char **kernel_filter; /* NULL-terminated, or NULL */
    int verify;
    int timing;       /* add profiling to queues and time launches */
    int timing_all;   /* time every launch (CLPROJ_TIMING=all) instead of sampling */
    uint64_t timing_first; /* sampled timing: the first N launches of each kernel are timed */
    uint64_t timing_every; /* ... then about 1 in K of the others, chosen by a hash */
    uint64_t sample_below; /* UINT64_MAX / timing_every: a ticket is timed when its hash is below */
    int track_args;   /* clSetKernelArg state is needed (recording) */
    int disabled;
} shim_config;

extern shim_config clproj_cfg;
void clproj_lock(void);
void clproj_unlock(void);
void clproj_init(void);

/* pointer maps (all accessed under clproj_lock) */
typedef struct ptrmap ptrmap;
void *pm_get(ptrmap *m, const void *key);
void pm_put(ptrmap *m, const void *key, void *val);
void *pm_del(ptrmap *m, const void *key);
void *pm_put_replace(ptrmap *m, const void *key, void *val); /* returns the old value */
extern ptrmap *clproj_programs, *clproj_kernels, *clproj_mems, *clproj_queues, *clproj_samplers,
    *clproj_signatures, *clproj_twins; /* twins: twin queue -> the app's queue */
/* Bumped (under the lock) whenever an entry of the kernel or queue table is added, replaced or
 * removed: launch.c's per-thread lookup cache is valid only while it is unchanged. */
extern uint64_t clproj_table_gen;
/* User events the app created and has not set yet (objects.c). While one is pending no launch
 * is timed on a twin queue (launch.c says why). */
extern int64_t clproj_pending_user_events;

void prog_unref(prog_info *p); /* under lock */
/* What writes a buffer (writes.c): `m` may hold data from now on (a sub-buffer: its parent
 * too). Under lock. */
void clproj_mem_written(cl_mem m);
/* The same for `n` buffers, taking the lock; only while recording (the only time freshness
 * is asked). */
void clproj_mems_written(cl_uint n, const cl_mem *mems);
/* Whether `m` holds data nobody gave it: created without host data and written by no
 * command since. Under lock. */
int clproj_mem_fresh(cl_mem m);
void kern_free(kern_info *k);
int stats_index(const char *kernel, cl_device_id device); /* under lock */
/* Sampled timing (observe mode): stats_ticket counts the launch (its only atomic operation)
 * and says whether it is to be timed; `rest` (out) is 1 for launches after the first
 * timing_first ones of the kernel, the stratum the summary scales up. A launch the real
 * implementation refuses is taken back with stats_failed. */
int stats_ticket(int idx, int *rest);
uint64_t *stats_tickets(int idx); /* the slot's ticket counter (launch.c's fast path) */
/* splitmix64 finaliser: the sampling decision is a hash of the launch's ticket, so it is
 * deterministic per kernel yet cannot fall into step with a periodic pattern of the app
 * (every k-th launch could always hit the same one of k alternating sizes). */
static inline uint64_t clproj_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
static inline int clproj_ticket_timed(uint64_t t) {
    return t < clproj_cfg.timing_first || clproj_mix64(t) <= clproj_cfg.sample_below;
}
void stats_failed(int idx, int rest);
/* Read the device name of statistics slot idx now, while the app still holds the device
 * (not under lock: clGetDeviceInfo may take the driver's). */
void stats_name_device(int idx);
void stats_add_time(int idx, uint64_t ns, int rest);
void pending_add(cl_event ev, int stat_idx, int rest);
/* A recorded launch's event: its time goes to Python's record `handle` once it completes. */
void pending_add_record(cl_event ev, int stat_idx, int rest, int32_t handle);
void pending_harvest(int block);
void clproj_once_log(const char *key, const char *msg);

#endif
