/* Route mode (CLPROJ_MODE=route): the virtual OpenCL platform.
 *
 * Every handle of the virtual platform is a small struct whose first member is an ICD
 * dispatch table (ours), so the application's own ICD loader (system or pyopencl's
 * bundled one) forwards every call on such a handle to the functions below, also for
 * entry points the shim does not export. Each function checks the handle kinds, packs
 * its arguments into a clproj_rcall and calls runtime/route/platform.py, which carries
 * the call out on the cluster through runtime.cluster.client.platform.RemotePlatform. Handles that are
 * not ours pass through untouched (the exported entry points forward to the real ones).
 * Entry points the virtual platform does not implement return CL_INVALID_OPERATION (or
 * NULL with that error code) and are logged once by name. */
#define _GNU_SOURCE
#include <CL/cl_ext.h>
#include <CL/cl_icd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../clproj_settings.h"
#include "route.h"
#include "shim.h"

#define RT_MAGIC 0x636c7072u /* "clpr" */

/* A destructor callback the app set on a buffer or context (called when it is freed). */
typedef struct rt_dtor {
    void(CL_CALLBACK *fn)(void *obj, void *user);
    void *user;
    struct rt_dtor *next;
} rt_dtor;

typedef struct rt_obj {
    const cl_icd_dispatch *dispatch; /* must be first: the ICD loader reads it */
    uint32_t magic;
    int32_t kind;
    int64_t id;
    int refs;
    uint32_t nargs;     /* kernels: the real kernel's argument count ... */
    uint8_t *argkinds;  /* ... and kinds (RT_ARG_*), NULL until Python sets them, */
    uint32_t *argsizes; /* ... accepted by-value sizes (RT_ARG_SIZES each), */
    clproj_karg *argv;  /* ... and the values set (clSetKernelArg) */
    uint64_t setgen;    /* counts clSetKernelArg calls that succeeded */
    rt_dtor *dtors;     /* buffers, contexts: destructor callbacks, the last set first */
} rt_obj;

static cl_icd_dispatch rt_table;
static rt_obj rt_platform = {&rt_table, RT_MAGIC, RT_PLATFORM, 1, 1, 0, NULL, NULL, NULL, 0};
static rt_obj rt_device = {&rt_table, RT_MAGIC, RT_DEVICE, 1, 1, 0, NULL, NULL, NULL, 0};
static int rt_mode = -1;   /* -1 unknown, 0 off, 1 route */
static int rt_closed = 0;  /* set by Python at exit: no more calls into Python */

#define OBJ(h) ((rt_obj *)(h))
/* Ours iff its dispatch pointer is our table: safe for any valid ICD handle. */
static int rt_ours(const void *h) {
    return h != NULL && *(const cl_icd_dispatch *const *)h == &rt_table &&
           OBJ(h)->magic == RT_MAGIC;
}
static int rt_is(const void *h, int kind) { return rt_ours(h) && OBJ(h)->kind == kind; }

static void rt_log_once(const char *what) {
    char msg[200];
    snprintf(msg, sizeof msg, "route mode: %s is not supported by the virtual platform "
                              "(CL_INVALID_OPERATION)", what);
    clproj_once_log(what, msg);
}

static pthread_once_t rt_once = PTHREAD_ONCE_INIT;
static void rt_fill_table(void);
/* A process forked from a routed app runs its OpenCL calls natively. Why: what routes them
 * is the parent's (its Python threads, its sockets to the cluster, the cluster processes
 * it started and watches: the child took them for dead, and its first call into the cluster
 * failed with CL_OUT_OF_RESOURCES), and one process's messages on another's sockets would
 * break the parent's run. The child's new platforms are the machine's own; a handle the
 * parent got from the virtual platform answers as after the app's exit (rt_call): releases,
 * waits and flushes succeed, anything else is CL_INVALID_OPERATION. */
static void rt_after_fork_child(void) {
    if (__atomic_load_n(&rt_mode, __ATOMIC_ACQUIRE) == 1) {
        __atomic_store_n(&rt_mode, 0, __ATOMIC_RELEASE);
        rt_closed = 1;
    }
}
static void rt_init_once(void) {
    rt_mode = strcmp(clproj_setting_mode(), "route") == 0;
    rt_fill_table();
    clproj_init();
    if (rt_mode) {
        clproj_cfg.disabled = 1; /* the observe-mode wrappers pass everything through */
        pthread_atfork(NULL, NULL, rt_after_fork_child);
        /* closing at exit: runtime/route/platform.py registers it through intercept.hooks.at_exit,
         * which knows how to run at exit in C apps and Python apps alike (in the process that
         * registered it only) */
    }
}
/* Route mode needs Python (the virtual platform is written in it). Where the embedded
 * interpreter cannot start (cffi has printed why), the app is better served natively than
 * by a platform whose every call fails: route mode turns itself off before the app holds
 * any of its handles, says so in one line, and every call passes through. */
static void rt_give_up(void) {
    if (__atomic_exchange_n(&rt_mode, 0, __ATOMIC_ACQ_REL) == 1)
        fprintf(stderr, "clproj: route mode could not start its Python part (see above); "
                        "this app runs natively on its own devices\n");
}
int clproj_route_on(void) {
    pthread_once(&rt_once, rt_init_once);
    if (__atomic_load_n(&rt_mode, __ATOMIC_ACQUIRE) != 1) return 0;
    if (clproj_in_shim || clproj_python_start()) return 1;
    rt_give_up();
    return 0;
}

/* Helpers called by Python. */
void *clproj_route_handle(int32_t kind, int64_t id) {
    rt_obj *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->dispatch = &rt_table;
    o->magic = RT_MAGIC;
    o->kind = kind;
    o->id = id;
    o->refs = 1;
    return o;
}
void *clproj_route_static(int32_t kind) {
    return kind == RT_PLATFORM ? (void *)&rt_platform : kind == RT_DEVICE ? (void *)&rt_device : NULL;
}
void clproj_route_closed(void) { rt_closed = 1; }
static void rt_free_args(rt_obj *o) {
    for (uint32_t i = 0; o->argv && i < o->nargs; i++) free(o->argv[i].bytes);
    free(o->argv);
    free(o->argkinds);
    free(o->argsizes);
    o->argv = NULL;
    o->argkinds = NULL;
    o->argsizes = NULL;
    o->nargs = 0;
}
void clproj_route_kernel_args(void *h, uint32_t n, const uint8_t *kinds, const uint32_t *sizes) {
    if (!rt_ours(h)) return;
    rt_obj *o = OBJ(h);
    size_t m = n ? n : 1;
    uint8_t *k = malloc(m);
    uint32_t *sz = calloc(m * RT_ARG_SIZES, sizeof *sz);
    clproj_karg *argv = calloc(m, sizeof *argv);
    if (!k || !sz || !argv) {
        free(k);
        free(sz);
        free(argv);
        return;
    }
    memcpy(k, kinds, n);
    if (sizes) memcpy(sz, sizes, (size_t)n * RT_ARG_SIZES * sizeof *sz);
    rt_free_args(o);
    o->argkinds = k;
    o->argsizes = sz;
    o->argv = argv;
    o->nargs = n;
}
clproj_karg *clproj_route_kernel_argv(void *h) { return rt_ours(h) ? OBJ(h)->argv : NULL; }
void clproj_route_kernel_copy_args(void *dst, void *src) {
    if (!rt_ours(dst) || !rt_ours(src)) return;
    rt_obj *d = OBJ(dst), *s = OBJ(src);
    if (!d->argv || !s->argv || d->nargs != s->nargs) return;
    for (uint32_t i = 0; i < s->nargs; i++) {
        clproj_karg a = s->argv[i];
        if (a.gen == 0) continue; /* never set: not set in the clone either */
        if (a.kind == RT_SET_BYTES) {
            a.bytes = malloc(a.size ? a.size : 1);
            if (!a.bytes) continue;
            memcpy(a.bytes, s->argv[i].bytes, a.size);
        }
        free(d->argv[i].bytes);
        d->argv[i] = a;
        d->argv[i].gen = ++d->setgen;
    }
}
static cl_int rt_retain(void *h, int kind, cl_int bad);
static cl_int rt_release(void *h, int kind, cl_int bad);
/* Implicit references (a queue keeps its context alive, a kernel its program, ...). */
void clproj_route_retain(void *h) {
    if (rt_ours(h)) rt_retain(h, OBJ(h)->kind, 0);
}
void clproj_route_release(void *h) {
    if (rt_ours(h)) rt_release(h, OBJ(h)->kind, 0);
}

/* Events whose count reached 0, not yet told to Python: they ride along with the next
 * call into Python (c->released) instead of costing a callback each. Why: an app that waits
 * for each launch (pyopencl: launch, wait, drop the event) made three callbacks per launch;
 * the release one is now a few stores. Python drops its side before the call is handled. */
#define RT_REL_MAX 256
static pthread_mutex_t rt_rel_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t rt_rel_ids[RT_REL_MAX];
static void *rt_rel_handles[RT_REL_MAX];
static uint32_t rt_rel_n = 0;

/* The Python API used here (route.c does not include Python.h): weak, like every reference
 * into libpython (lazy_python.h), bound through the PLT once route mode has loaded it. */
int Py_IsInitialized(void);
int PyGILState_Check(void);
void PyErr_Fetch(void **type, void **value, void **traceback);
void PyErr_Restore(void *type, void *value, void *traceback);
#pragma weak PyGILState_Check
#pragma weak PyErr_Restore

/* One call into Python. An exception pending in the calling thread (pyopencl releasing a
 * buffer while it raises: a destructor runs with the error set) is set aside for the call
 * and restored after it: Python code running with it set fails ("SystemError: ... returned
 * a result with an exception set"). */
static cl_int rt_call(clproj_rcall *c) {
    if (rt_closed) /* after exit: everything has completed, nothing can start */
        return (c->op == RT_OP_RELEASE || c->op == RT_OP_WAIT || c->op == RT_OP_FINISH ||
                c->op == RT_OP_FLUSH)
                   ? CL_SUCCESS
                   : CL_INVALID_OPERATION;
    int64_t ids[RT_REL_MAX];
    void *handles[RT_REL_MAX];
    uint32_t n = 0;
    if (__atomic_load_n(&rt_rel_n, __ATOMIC_RELAXED)) {
        pthread_mutex_lock(&rt_rel_lock);
        n = rt_rel_n;
        memcpy(ids, rt_rel_ids, n * sizeof *ids);
        memcpy(handles, rt_rel_handles, n * sizeof *handles);
        __atomic_store_n(&rt_rel_n, 0, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&rt_rel_lock);
    }
    c->n_released = n;
    c->released = ids;
    int saved = clproj_in_shim;
    clproj_in_shim = 1;
    void *et = NULL, *ev = NULL, *etb = NULL;
    clproj_python_start(); /* past the start-up before cffi's own start-up lock */
    int py = clproj_python_load() && Py_IsInitialized() && PyGILState_Check();
    if (py) PyErr_Fetch(&et, &ev, &etb);
    cl_int r = clproj_py_route(c);
    if (py && et) PyErr_Restore(et, ev, etb);
    clproj_in_shim = saved;
    for (uint32_t i = 0; i < n; i++) free(handles[i]);
    return r;
}
/* Queue a released event for the next call; 0 when the queue is full (call now). */
static int rt_defer_release(void *h) {
    int ok = 0;
    pthread_mutex_lock(&rt_rel_lock);
    if (rt_rel_n < RT_REL_MAX) {
        rt_rel_ids[rt_rel_n] = OBJ(h)->id;
        rt_rel_handles[rt_rel_n] = h;
        OBJ(h)->magic = 0; /* from now on an invalid handle, as after a real release */
        __atomic_store_n(&rt_rel_n, rt_rel_n + 1, __ATOMIC_RELAXED);
        ok = 1;
    }
    pthread_mutex_unlock(&rt_rel_lock);
    return ok;
}
static void rt_init_call(clproj_rcall *c, int op, const void *h) {
    memset(c, 0, sizeof *c);
    c->op = op;
    if (h) {
        c->kind = OBJ(h)->kind;
        c->id = OBJ(h)->id;
    }
}
static cl_int rt_wait_list(cl_uint nw, const cl_event *wl) {
    if ((nw > 0) != (wl != NULL)) return CL_INVALID_EVENT_WAIT_LIST;
    for (cl_uint i = 0; i < nw; i++)
        if (!rt_is(wl[i], RT_EVENT)) return CL_INVALID_EVENT_WAIT_LIST;
    return CL_SUCCESS;
}
/* The ids of a command's wait list, handed to Python (user events defer commands). */
#define RT_WAIT_STACK 16
typedef struct {
    int64_t s[RT_WAIT_STACK];
    int64_t *p;
} rt_wids;
static cl_int rt_take_wait(clproj_rcall *c, rt_wids *w, cl_uint nw, const cl_event *wl) {
    w->p = nw <= RT_WAIT_STACK ? w->s : malloc(nw * sizeof *w->p);
    if (!w->p) return CL_OUT_OF_HOST_MEMORY;
    for (cl_uint i = 0; i < nw; i++) w->p[i] = OBJ(wl[i])->id;
    c->n_wait = nw;
    c->wait_ids = w->p;
    return CL_SUCCESS;
}
static cl_int rt_call_waiting(clproj_rcall *c, cl_uint nw, const cl_event *wl) {
    rt_wids w;
    cl_int r = rt_take_wait(c, &w, nw, wl);
    if (r == CL_SUCCESS) r = rt_call(c);
    if (w.p != w.s) free(w.p);
    return r;
}
#define SET_ERR(e)                        \
    do {                                  \
        if (errcode_ret) *errcode_ret = (e); \
    } while (0)

/* ---------------- unsupported entry points ---------------- */
static cl_int rt_unsupported(void) {
    rt_log_once("an OpenCL entry point (images, samplers, SVM, pipes, ...)");
    return CL_INVALID_OPERATION;
}
#define UNSUPPORTED_PTR(name, params, err_expr)                \
    static void *rt_##name params {                           \
        rt_log_once(#name);                                   \
        if (err_expr) *(err_expr) = CL_INVALID_OPERATION;     \
        return NULL;                                          \
    }
UNSUPPORTED_PTR(clCreateImage, (cl_context c, cl_mem_flags f, const cl_image_format *fmt, const cl_image_desc *d, void *h, cl_int *e), e)
UNSUPPORTED_PTR(clCreateImage2D, (cl_context c, cl_mem_flags f, const cl_image_format *fmt, size_t w, size_t hh, size_t p, void *h, cl_int *e), e)
UNSUPPORTED_PTR(clCreateImage3D, (cl_context c, cl_mem_flags f, const cl_image_format *fmt, size_t w, size_t hh, size_t d, size_t p, size_t s, void *h, cl_int *e), e)
UNSUPPORTED_PTR(clCreateSampler, (cl_context c, cl_bool n, cl_addressing_mode a, cl_filter_mode f, cl_int *e), e)
UNSUPPORTED_PTR(clCreateSamplerWithProperties, (cl_context c, const cl_sampler_properties *p, cl_int *e), e)
UNSUPPORTED_PTR(clCreateProgramWithIL, (cl_context c, const void *il, size_t n, cl_int *e), e)
UNSUPPORTED_PTR(clCreateProgramWithBuiltInKernels, (cl_context c, cl_uint n, const cl_device_id *d, const char *k, cl_int *e), e)
UNSUPPORTED_PTR(clCreatePipe, (cl_context c, cl_mem_flags f, cl_uint ps, cl_uint mp, const cl_pipe_properties *p, cl_int *e), e)
UNSUPPORTED_PTR(clEnqueueMapImage, (cl_command_queue q, cl_mem i, cl_bool b, cl_map_flags f, const size_t *o, const size_t *r, size_t *rp, size_t *sp, cl_uint nw, const cl_event *wl, cl_event *ev, cl_int *e), e)
UNSUPPORTED_PTR(clCreateFromGLBuffer, (cl_context c, cl_mem_flags f, cl_GLuint b, int *e), e)
static void *rt_clSVMAlloc(cl_context c, cl_svm_mem_flags f, size_t n, cl_uint a) {
    rt_log_once("clSVMAlloc");
    return NULL;
}
static void *rt_clGetExtensionFunctionAddressForPlatform(cl_platform_id p, const char *n) {
    return NULL;
}

/* ---------------- platform and device ---------------- */
static int rt_prestarted = 0;
static cl_int rt_clGetPlatformIDs(cl_uint n, cl_platform_id *platforms, cl_uint *num) {
    if ((n == 0 && platforms) || (!platforms && !num)) return CL_INVALID_VALUE;
    if (!__atomic_exchange_n(&rt_prestarted, 1, __ATOMIC_ACQ_REL)) {
        /* the local cluster starts now, while the app goes on (runtime/route/platform.py: prestart) */
        clproj_rcall c;
        rt_init_call(&c, RT_OP_PRESTART, NULL);
        rt_call(&c);
    }
    if (platforms) platforms[0] = (cl_platform_id)&rt_platform;
    if (num) *num = 1;
    return CL_SUCCESS;
}

static cl_int rt_info(const void *h, cl_uint param, size_t size, void *value, size_t *size_ret,
                      int cls, cl_uint arg) {
    clproj_rcall c;
    rt_init_call(&c, RT_OP_INFO, h);
    c.u.info.param = param;
    c.u.info.size = value ? size : 0;
    c.u.info.cls = (uint32_t)cls;
    c.u.info.arg = arg;
    c.dst = value;
    c.size_ret = size_ret;
    return rt_call(&c);
}

static cl_int rt_clGetPlatformInfo(cl_platform_id p, cl_platform_info param, size_t size,
                                   void *value, size_t *size_ret) {
    if (p != NULL && !rt_is(p, RT_PLATFORM)) return CL_INVALID_PLATFORM;
    return rt_info(&rt_platform, param, size, value, size_ret, RT_INFO_OBJECT, 0);
}

/* The one virtual device stands for every device of the cluster; it matches the types
 * it reports (CL_DEVICE_TYPE: what the cluster's devices are), ALL and DEFAULT. Any other
 * type, 0 and unknown bits included, is CL_DEVICE_NOT_FOUND (clGetDeviceIDs: with *num
 * untouched; clCreateContextFromType too), as PoCL answers (a bit it knows among unknown
 * ones still matches). */
static cl_int rt_device_has_type(cl_device_type type) {
    if (type == CL_DEVICE_TYPE_ALL || (type & CL_DEVICE_TYPE_DEFAULT)) return CL_SUCCESS;
    cl_device_type mine = 0;
    cl_int r = rt_info(&rt_device, CL_DEVICE_TYPE, sizeof mine, &mine, NULL, RT_INFO_OBJECT, 0);
    if (r != CL_SUCCESS) return r;
    return (mine & type) ? CL_SUCCESS : CL_DEVICE_NOT_FOUND;
}

static cl_int rt_clGetDeviceIDs(cl_platform_id p, cl_device_type type, cl_uint n,
                                cl_device_id *devices, cl_uint *num) {
    if (p != NULL && !rt_is(p, RT_PLATFORM)) return CL_INVALID_PLATFORM;
    if ((n == 0 && devices) || (!devices && !num)) return CL_INVALID_VALUE;
    cl_int r = rt_device_has_type(type);
    if (r != CL_SUCCESS) return r;
    if (devices) devices[0] = (cl_device_id)&rt_device;
    if (num) *num = 1;
    return CL_SUCCESS;
}

static cl_int rt_clGetDeviceInfo(cl_device_id d, cl_device_info param, size_t size, void *value,
                                 size_t *size_ret) {
    if (!rt_is(d, RT_DEVICE)) return CL_INVALID_DEVICE;
    return rt_info(d, param, size, value, size_ret, RT_INFO_OBJECT, 0);
}
/* The virtual device reports no partition type (CL_DEVICE_PARTITION_PROPERTIES: 0), so
 * every partition asked for is one "not supported by the device": CL_INVALID_VALUE. */
static cl_int rt_clCreateSubDevices(cl_device_id d, const cl_device_partition_property *props,
                                    cl_uint n, cl_device_id *out, cl_uint *num) {
    (void)props, (void)n, (void)out, (void)num;
    return rt_is(d, RT_DEVICE) ? CL_INVALID_VALUE : CL_INVALID_DEVICE;
}
static cl_int rt_clRetainDevice(cl_device_id d) { return rt_is(d, RT_DEVICE) ? CL_SUCCESS : CL_INVALID_DEVICE; }
static cl_int rt_clReleaseDevice(cl_device_id d) { return rt_is(d, RT_DEVICE) ? CL_SUCCESS : CL_INVALID_DEVICE; }

/* ---------------- generic retain / release / info ---------------- */
static cl_int rt_retain(void *h, int kind, cl_int bad) {
    if (!rt_is(h, kind)) return bad;
    __atomic_add_fetch(&OBJ(h)->refs, 1, __ATOMIC_RELAXED);
    return CL_SUCCESS;
}
static cl_int rt_release(void *h, int kind, cl_int bad) {
    if (!rt_is(h, kind)) return bad;
    if (__atomic_sub_fetch(&OBJ(h)->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        if (kind == RT_EVENT && !rt_closed && rt_defer_release(h)) return CL_SUCCESS;
        clproj_rcall c;
        rt_init_call(&c, RT_OP_RELEASE, h);
        rt_call(&c);
        /* the object is gone for the app: its destructor callbacks, the last set first */
        for (rt_dtor *d = OBJ(h)->dtors, *next; d; d = next) {
            next = d->next;
            d->fn(h, d->user);
            free(d);
        }
        OBJ(h)->magic = 0;
        rt_free_args(OBJ(h));
        free(h);
    }
    return CL_SUCCESS;
}
static pthread_mutex_t rt_dtor_lock = PTHREAD_MUTEX_INITIALIZER;
static cl_int rt_add_dtor(void *h, int kind, cl_int bad, void(CL_CALLBACK *fn)(void *, void *),
                          void *user) {
    if (!rt_is(h, kind)) return bad;
    if (!fn) return CL_INVALID_VALUE;
    rt_dtor *d = malloc(sizeof *d);
    if (!d) return CL_OUT_OF_HOST_MEMORY;
    d->fn = fn;
    d->user = user;
    pthread_mutex_lock(&rt_dtor_lock);
    d->next = OBJ(h)->dtors;
    OBJ(h)->dtors = d;
    pthread_mutex_unlock(&rt_dtor_lock);
    return CL_SUCCESS;
}
static cl_int rt_clSetMemObjectDestructorCallback(cl_mem m,
                                                  void(CL_CALLBACK *fn)(cl_mem, void *),
                                                  void *user) {
    return rt_add_dtor(m, RT_MEM, CL_INVALID_MEM_OBJECT, (void(CL_CALLBACK *)(void *, void *))fn,
                       user);
}
static cl_int rt_clSetContextDestructorCallback(cl_context ctx,
                                                void(CL_CALLBACK *fn)(cl_context, void *),
                                                void *user) {
    return rt_add_dtor(ctx, RT_CONTEXT, CL_INVALID_CONTEXT,
                       (void(CL_CALLBACK *)(void *, void *))fn, user);
}
static cl_int rt_refcount_info(void *h, size_t size, void *value, size_t *size_ret) {
    if (value && size < sizeof(cl_uint)) return CL_INVALID_VALUE;
    if (value) *(cl_uint *)value = (cl_uint)OBJ(h)->refs;
    if (size_ret) *size_ret = sizeof(cl_uint);
    return CL_SUCCESS;
}
#define RETAIN_RELEASE(Name, type, kind, bad)                                           \
    static cl_int rt_clRetain##Name(type h) { return rt_retain(h, kind, bad); }         \
    static cl_int rt_clRelease##Name(type h) { return rt_release(h, kind, bad); }
RETAIN_RELEASE(Context, cl_context, RT_CONTEXT, CL_INVALID_CONTEXT)
RETAIN_RELEASE(CommandQueue, cl_command_queue, RT_QUEUE, CL_INVALID_COMMAND_QUEUE)
RETAIN_RELEASE(MemObject, cl_mem, RT_MEM, CL_INVALID_MEM_OBJECT)
RETAIN_RELEASE(Program, cl_program, RT_PROGRAM, CL_INVALID_PROGRAM)
RETAIN_RELEASE(Kernel, cl_kernel, RT_KERNEL, CL_INVALID_KERNEL)
RETAIN_RELEASE(Event, cl_event, RT_EVENT, CL_INVALID_EVENT)

#define INFO_FN(Name, type, ptype, kind, bad, refparam)                                   \
    static cl_int rt_clGet##Name##Info(type h, ptype param, size_t size, void *value,     \
                                       size_t *size_ret) {                                \
        if (!rt_is(h, kind)) return bad;                                                  \
        if (param == (refparam)) return rt_refcount_info(h, size, value, size_ret);       \
        return rt_info(h, param, size, value, size_ret, RT_INFO_OBJECT, 0);            \
    }
INFO_FN(Context, cl_context, cl_context_info, RT_CONTEXT, CL_INVALID_CONTEXT, CL_CONTEXT_REFERENCE_COUNT)
INFO_FN(CommandQueue, cl_command_queue, cl_command_queue_info, RT_QUEUE, CL_INVALID_COMMAND_QUEUE, CL_QUEUE_REFERENCE_COUNT)
INFO_FN(MemObject, cl_mem, cl_mem_info, RT_MEM, CL_INVALID_MEM_OBJECT, CL_MEM_REFERENCE_COUNT)
INFO_FN(Program, cl_program, cl_program_info, RT_PROGRAM, CL_INVALID_PROGRAM, CL_PROGRAM_REFERENCE_COUNT)
INFO_FN(Kernel, cl_kernel, cl_kernel_info, RT_KERNEL, CL_INVALID_KERNEL, CL_KERNEL_REFERENCE_COUNT)
INFO_FN(Event, cl_event, cl_event_info, RT_EVENT, CL_INVALID_EVENT, CL_EVENT_REFERENCE_COUNT)

static cl_int rt_clGetProgramBuildInfo(cl_program p, cl_device_id d, cl_program_build_info param,
                                       size_t size, void *value, size_t *size_ret) {
    if (!rt_is(p, RT_PROGRAM)) return CL_INVALID_PROGRAM;
    if (!rt_is(d, RT_DEVICE)) return CL_INVALID_DEVICE;
    return rt_info(p, param, size, value, size_ret, RT_INFO_BUILD, 0);
}
static cl_int rt_clGetKernelWorkGroupInfo(cl_kernel k, cl_device_id d,
                                          cl_kernel_work_group_info param, size_t size,
                                          void *value, size_t *size_ret) {
    if (!rt_is(k, RT_KERNEL)) return CL_INVALID_KERNEL;
    if (d != NULL && !rt_is(d, RT_DEVICE)) return CL_INVALID_DEVICE;
    return rt_info(k, param, size, value, size_ret, RT_INFO_KERNEL_WG, 0);
}
static cl_int rt_clGetKernelArgInfo(cl_kernel k, cl_uint idx, cl_kernel_arg_info param,
                                    size_t size, void *value, size_t *size_ret) {
    if (!rt_is(k, RT_KERNEL)) return CL_INVALID_KERNEL;
    return rt_info(k, param, size, value, size_ret, RT_INFO_KERNEL_ARG, idx);
}
static cl_int rt_clGetEventProfilingInfo(cl_event e, cl_profiling_info param, size_t size,
                                         void *value, size_t *size_ret) {
    if (!rt_is(e, RT_EVENT)) return CL_INVALID_EVENT;
    return rt_info(e, param, size, value, size_ret, RT_INFO_PROFILING, 0);
}

/* ---------------- context and queue ---------------- */
/* Run a creating call: the new handle, or NULL with the error in *errcode_ret (if given). */
static void *rt_create(clproj_rcall *c, cl_int *errcode_ret) {
    cl_int r = rt_call(c);
    SET_ERR(r);
    return r == CL_SUCCESS ? c->ret : NULL;
}

static cl_context rt_new_context(cl_int *errcode_ret) {
    clproj_rcall c;
    rt_init_call(&c, RT_OP_CREATE_CONTEXT, NULL);
    return rt_create(&c, errcode_ret);
}
static cl_context rt_clCreateContext(const cl_context_properties *props, cl_uint n,
                                     const cl_device_id *devs,
                                     void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *),
                                     void *user_data, cl_int *errcode_ret) {
    if (n == 0 || devs == NULL) {
        SET_ERR(CL_INVALID_VALUE);
        return NULL;
    }
    for (cl_uint i = 0; i < n; i++)
        if (!rt_is(devs[i], RT_DEVICE)) {
            SET_ERR(CL_INVALID_DEVICE);
            return NULL;
        }
    return rt_new_context(errcode_ret);
}
static cl_context rt_clCreateContextFromType(const cl_context_properties *props, cl_device_type t,
                                             void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *),
                                             void *user_data, cl_int *errcode_ret) {
    cl_int r = rt_device_has_type(t);
    if (r != CL_SUCCESS) {
        SET_ERR(r);
        return NULL;
    }
    return rt_new_context(errcode_ret);
}

static cl_command_queue rt_new_queue(cl_context ctx, cl_device_id dev, cl_command_queue_properties p,
                                     cl_int *errcode_ret) {
    if (!rt_is(ctx, RT_CONTEXT)) {
        SET_ERR(CL_INVALID_CONTEXT);
        return NULL;
    }
    if (!rt_is(dev, RT_DEVICE)) {
        SET_ERR(CL_INVALID_DEVICE);
        return NULL;
    }
    clproj_rcall c;
    rt_init_call(&c, RT_OP_CREATE_QUEUE, ctx);
    c.u.create_queue.properties = p;
    return rt_create(&c, errcode_ret);
}
static cl_command_queue rt_clCreateCommandQueue(cl_context ctx, cl_device_id dev,
                                                cl_command_queue_properties p, cl_int *errcode_ret) {
    return rt_new_queue(ctx, dev, p, errcode_ret);
}
static cl_command_queue rt_clCreateCommandQueueWithProperties(cl_context ctx, cl_device_id dev,
                                                              const cl_queue_properties *props,
                                                              cl_int *errcode_ret) {
    cl_command_queue_properties p = 0;
    for (int i = 0; props && props[i] != 0; i += 2) {
        if (props[i] == CL_QUEUE_PROPERTIES) {
            p = props[i + 1];
        } else if (props[i] != CL_QUEUE_SIZE && props[i] != CL_QUEUE_PRIORITY_KHR &&
                   props[i] != CL_QUEUE_THROTTLE_KHR) {
            /* a name no OpenCL version defines: what an implementation answers (PoCL) */
            if (!rt_is(ctx, RT_CONTEXT)) break; /* the context is checked first */
            SET_ERR(CL_INVALID_VALUE);
            return NULL;
        }
        /* the other names are hints this platform ignores, as before */
    }
    return rt_new_queue(ctx, dev, p, errcode_ret);
}

/* ---------------- buffers ---------------- */
static cl_mem rt_clCreateBuffer(cl_context ctx, cl_mem_flags flags, size_t size, void *host,
                                cl_int *errcode_ret) {
    if (!rt_is(ctx, RT_CONTEXT)) {
        SET_ERR(CL_INVALID_CONTEXT);
        return NULL;
    }
    clproj_rcall c;
    rt_init_call(&c, RT_OP_CREATE_BUFFER, ctx);
    c.u.create_buffer.flags = flags;
    c.u.create_buffer.size = size;
    c.src = host;
    return rt_create(&c, errcode_ret);
}
static cl_mem rt_clCreateBufferWithProperties(cl_context ctx, const cl_mem_properties *props,
                                              cl_mem_flags flags, size_t size, void *host,
                                              cl_int *errcode_ret) {
    if (props && props[0] != 0) {
        SET_ERR(CL_INVALID_PROPERTY);
        return NULL;
    }
    return rt_clCreateBuffer(ctx, flags, size, host, errcode_ret);
}

/* A region of a buffer (CL_BUFFER_CREATE_TYPE_REGION, the only type): Python checks the
 * region against the buffer, its alignment and the flags against the parent's. */
static cl_mem rt_clCreateSubBuffer(cl_mem b, cl_mem_flags flags, cl_buffer_create_type t,
                                   const void *info, cl_int *errcode_ret) {
    if (!rt_is(b, RT_MEM)) {
        SET_ERR(CL_INVALID_MEM_OBJECT);
        return NULL;
    }
    if (t != CL_BUFFER_CREATE_TYPE_REGION || info == NULL) {
        SET_ERR(CL_INVALID_VALUE);
        return NULL;
    }
    const cl_buffer_region *r = info;
    clproj_rcall c;
    rt_init_call(&c, RT_OP_CREATE_SUBBUF, b);
    c.u.create_subbuf.flags = flags;
    c.u.create_subbuf.origin = r->origin;
    c.u.create_subbuf.size = r->size;
    cl_int e = rt_call(&c);
    SET_ERR(e);
    return e == CL_SUCCESS ? c.ret : NULL;
}

/* ---------------- programs and kernels ---------------- */
/* Device lists name the one virtual device (or none: all of them). */
static cl_int rt_devices(cl_uint n, const cl_device_id *devs) {
    if ((n > 0) != (devs != NULL)) return CL_INVALID_VALUE;
    for (cl_uint i = 0; i < n; i++)
        if (!rt_is(devs[i], RT_DEVICE)) return CL_INVALID_DEVICE;
    return CL_SUCCESS;
}
static int64_t *rt_ids(cl_uint n, const void *const *objs, int kind) {
    int64_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return NULL;
    for (cl_uint i = 0; i < n; i++) {
        if (!rt_is(objs[i], kind)) {
            free(ids);
            return NULL;
        }
        ids[i] = OBJ(objs[i])->id;
    }
    return ids;
}

static cl_program rt_program_from_source(cl_context ctx, const char *src, size_t n,
                                         cl_int *errcode_ret) {
    clproj_rcall c;
    rt_init_call(&c, RT_OP_CREATE_PROGRAM, ctx);
    c.src = src;
    c.u.create_program.length = n;
    return rt_create(&c, errcode_ret);
}
static cl_program rt_clCreateProgramWithSource(cl_context ctx, cl_uint count, const char **strings,
                                               const size_t *lengths, cl_int *errcode_ret) {
    if (!rt_is(ctx, RT_CONTEXT)) {
        SET_ERR(CL_INVALID_CONTEXT);
        return NULL;
    }
    if (count == 0 || strings == NULL) {
        SET_ERR(CL_INVALID_VALUE);
        return NULL;
    }
    size_t total = 0;
    for (cl_uint i = 0; i < count; i++) {
        if (!strings[i]) {
            SET_ERR(CL_INVALID_VALUE);
            return NULL;
        }
        total += (lengths && lengths[i]) ? lengths[i] : strlen(strings[i]);
    }
    char *src = malloc(total + 1), *p = src;
    if (!src) {
        SET_ERR(CL_OUT_OF_HOST_MEMORY);
        return NULL;
    }
    for (cl_uint i = 0; i < count; i++) {
        size_t n = (lengths && lengths[i]) ? lengths[i] : strlen(strings[i]);
        memcpy(p, strings[i], n);
        p += n;
    }
    *p = 0;
    cl_program prog = rt_program_from_source(ctx, src, total, errcode_ret);
    free(src);
    return prog;
}
/* Our "binaries" are what clGetProgramInfo(CL_PROGRAM_BINARIES) of this platform gave
 * (the program's source and options behind a magic prefix, so pyopencl's binary cache
 * works); Python decodes them, anything else is CL_INVALID_BINARY. */
static cl_program rt_clCreateProgramWithBinary(cl_context ctx, cl_uint n, const cl_device_id *devs,
                                               const size_t *lengths, const unsigned char **bins,
                                               cl_int *status, cl_int *errcode_ret) {
    if (!rt_is(ctx, RT_CONTEXT)) {
        SET_ERR(CL_INVALID_CONTEXT);
        return NULL;
    }
    if (n == 0 || !devs || !lengths || !bins) {
        SET_ERR(CL_INVALID_VALUE);
        return NULL;
    }
    for (cl_uint i = 0; i < n; i++) {
        if (!rt_is(devs[i], RT_DEVICE)) {
            SET_ERR(CL_INVALID_DEVICE);
            return NULL;
        }
        if (!bins[i] || lengths[i] == 0) {
            if (status) status[i] = CL_INVALID_VALUE;
            SET_ERR(CL_INVALID_VALUE);
            return NULL;
        }
    }
    clproj_rcall c;
    rt_init_call(&c, RT_OP_CREATE_PROGRAM, ctx);
    c.src = bins[0];
    c.u.create_program.length = lengths[0];
    c.u.create_program.binary = 1;
    cl_int r = rt_call(&c);
    if (status)
        for (cl_uint i = 0; i < n; i++) status[i] = r == CL_SUCCESS ? CL_SUCCESS : CL_INVALID_BINARY;
    if (r != CL_SUCCESS) rt_log_once("clCreateProgramWithBinary (only binaries from clGetProgramInfo of this platform)");
    SET_ERR(r);
    return r == CL_SUCCESS ? c.ret : NULL;
}

static cl_int rt_clBuildProgram(cl_program prog, cl_uint n, const cl_device_id *devs,
                                const char *options, void(CL_CALLBACK *notify)(cl_program, void *),
                                void *user_data) {
    if (!rt_is(prog, RT_PROGRAM)) return CL_INVALID_PROGRAM;
    cl_int e = rt_devices(n, devs);
    if (e != CL_SUCCESS) return e;
    if (!notify && user_data) return CL_INVALID_VALUE;
    clproj_rcall c;
    rt_init_call(&c, RT_OP_BUILD, prog);
    c.src = options;
    cl_int r = rt_call(&c);
    if (notify) notify(prog, user_data);
    return r;
}
static cl_int rt_clCompileProgram(cl_program prog, cl_uint n, const cl_device_id *devs,
                                  const char *options, cl_uint nh, const cl_program *hdrs,
                                  const char **names, void(CL_CALLBACK *notify)(cl_program, void *),
                                  void *user_data) {
    if (!rt_is(prog, RT_PROGRAM)) return CL_INVALID_PROGRAM;
    cl_int e = rt_devices(n, devs);
    if (e != CL_SUCCESS) return e;
    if ((nh > 0) != (hdrs != NULL) || (nh > 0) != (names != NULL)) return CL_INVALID_VALUE;
    if (!notify && user_data) return CL_INVALID_VALUE;
    for (cl_uint i = 0; i < nh; i++)
        if (!names[i]) return CL_INVALID_VALUE;
    int64_t *ids = rt_ids(nh, (const void *const *)hdrs, RT_PROGRAM);
    if (!ids) return nh ? CL_INVALID_PROGRAM : CL_OUT_OF_HOST_MEMORY;
    clproj_rcall c;
    rt_init_call(&c, RT_OP_COMPILE, prog);
    c.src = options;
    c.n_ids = nh;
    c.ids = ids;
    c.names = names;
    cl_int r = rt_call(&c);
    free(ids);
    if (notify) notify(prog, user_data);
    return r;
}
/* A linked program is returned also when linking failed (its build log says why). */
static cl_program rt_clLinkProgram(cl_context ctx, cl_uint n, const cl_device_id *devs,
                                   const char *options, cl_uint np, const cl_program *progs,
                                   void(CL_CALLBACK *notify)(cl_program, void *), void *user_data,
                                   cl_int *errcode_ret) {
    cl_int e = !rt_is(ctx, RT_CONTEXT) ? CL_INVALID_CONTEXT : rt_devices(n, devs);
    if (e == CL_SUCCESS && (np == 0 || progs == NULL || (!notify && user_data)))
        e = CL_INVALID_VALUE;
    int64_t *ids = e == CL_SUCCESS ? rt_ids(np, (const void *const *)progs, RT_PROGRAM) : NULL;
    if (e == CL_SUCCESS && !ids) e = CL_INVALID_PROGRAM;
    if (e != CL_SUCCESS) {
        SET_ERR(e);
        return NULL;
    }
    clproj_rcall c;
    rt_init_call(&c, RT_OP_LINK, ctx);
    c.src = options;
    c.n_ids = np;
    c.ids = ids;
    cl_int r = rt_call(&c);
    free(ids);
    SET_ERR(r);
    if (c.ret && notify) notify((cl_program)c.ret, user_data);
    return c.ret;
}
static cl_int rt_clUnloadPlatformCompiler(cl_platform_id p) { return CL_SUCCESS; }
static cl_int rt_clUnloadCompiler(void) { return CL_SUCCESS; }

static cl_kernel rt_clCreateKernel(cl_program prog, const char *name, cl_int *errcode_ret) {
    if (!rt_is(prog, RT_PROGRAM)) {
        SET_ERR(CL_INVALID_PROGRAM);
        return NULL;
    }
    if (!name) {
        SET_ERR(CL_INVALID_VALUE);
        return NULL;
    }
    clproj_rcall c;
    rt_init_call(&c, RT_OP_CREATE_KERNEL, prog);
    c.src = name;
    return rt_create(&c, errcode_ret);
}
static cl_int rt_clCreateKernelsInProgram(cl_program prog, cl_uint n, cl_kernel *kernels,
                                          cl_uint *n_ret) {
    if (!rt_is(prog, RT_PROGRAM)) return CL_INVALID_PROGRAM;
    clproj_rcall c;
    rt_init_call(&c, RT_OP_KERNELS_IN_PROGRAM, prog);
    c.u.kernels_in_program.capacity = n;
    c.dst = kernels;
    cl_int r = rt_call(&c);
    if (r == CL_SUCCESS && n_ret) *n_ret = c.u.kernels_in_program.count;
    return r;
}
/* Answered here, without Python: the argument's index, kind and accepted sizes come from
 * the real kernel (clproj_route_kernel_args), the checks and codes in PoCL's order. Only a
 * __global/__constant pointer argument's value is a cl_mem that may be looked at; any
 * other value is bytes (an 8-byte double or long2 is not a pointer), copied at the call.
 * Python reads the arguments that changed at the next launch (clproj_route_kernel_argv). */
/* SVM is not served, but an argument index the kernel does not have is the first error an
 * implementation reports (PoCL: CL_INVALID_ARG_INDEX). */
static cl_int rt_clSetKernelArgSVMPointer(cl_kernel k, cl_uint idx, const void *value) {
    (void)value;
    if (!rt_is(k, RT_KERNEL)) return CL_INVALID_KERNEL;
    if (OBJ(k)->argv && idx >= OBJ(k)->nargs) return CL_INVALID_ARG_INDEX;
    return rt_unsupported();
}
static cl_int rt_clSetKernelArg(cl_kernel k, cl_uint idx, size_t size, const void *value) {
    if (!rt_is(k, RT_KERNEL)) return CL_INVALID_KERNEL;
    rt_obj *o = OBJ(k);
    if (!o->argv) return CL_INVALID_KERNEL;
    if (idx >= o->nargs) return CL_INVALID_ARG_INDEX;
    int kind = o->argkinds[idx];
    clproj_karg *a = &o->argv[idx];
    int32_t set;
    int64_t id = 0;
    if (kind == RT_ARG_LOCAL) {
        if (value) return CL_INVALID_ARG_VALUE;
        if (size == 0) return CL_INVALID_ARG_SIZE;
        set = RT_SET_LOCAL;
    } else if (kind == RT_ARG_POINTER) {
        if (size != sizeof(cl_mem)) return CL_INVALID_ARG_SIZE;
        void *m = value ? *(void *const *)value : NULL;
        if (m == NULL) {
            set = RT_SET_NULL;
        } else if (rt_is(m, RT_MEM)) {
            set = RT_SET_MEM;
            id = OBJ(m)->id;
        } else {
            return CL_INVALID_ARG_VALUE; /* not a memory object of the virtual platform */
        }
    } else if (kind == RT_ARG_SCALAR) {
        if (!value) return CL_INVALID_ARG_VALUE;
        const uint32_t *ok = &o->argsizes[(size_t)idx * RT_ARG_SIZES];
        int fits = ok[0] == 0;
        for (int i = 0; i < RT_ARG_SIZES && ok[i] && !fits; i++) fits = ok[i] == size;
        if (size == 0 || size > RT_ARG_MAX || !fits) return CL_INVALID_ARG_SIZE;
        uint8_t *b = a->kind == RT_SET_BYTES && a->size >= size ? a->bytes : malloc(size);
        if (!b) return CL_OUT_OF_HOST_MEMORY;
        memcpy(b, value, size);
        if (b != a->bytes) free(a->bytes);
        a->bytes = b;
        set = RT_SET_BYTES;
    } else {
        /* images, samplers, pipes, queues: no such objects on the virtual platform */
        return value && size != sizeof(cl_mem) ? CL_INVALID_ARG_SIZE : CL_INVALID_ARG_VALUE;
    }
    if (set != RT_SET_BYTES && a->kind == RT_SET_BYTES) {
        free(a->bytes);
        a->bytes = NULL;
    }
    a->kind = set;
    a->id = id;
    a->size = size;
    a->gen = ++o->setgen;
    return CL_SUCCESS;
}
static cl_kernel rt_clCloneKernel(cl_kernel k, cl_int *errcode_ret) {
    if (!rt_is(k, RT_KERNEL)) {
        SET_ERR(CL_INVALID_KERNEL);
        return NULL;
    }
    clproj_rcall c;
    rt_init_call(&c, RT_OP_CLONE_KERNEL, k);
    return rt_create(&c, errcode_ret);
}

/* ---------------- events ---------------- */
static cl_int rt_clWaitForEvents(cl_uint n, const cl_event *list) {
    if (n == 0 || list == NULL) return CL_INVALID_VALUE;
    int64_t ids_s[32], *ids = n <= 32 ? ids_s : malloc(n * sizeof *ids);
    if (!ids) return CL_OUT_OF_HOST_MEMORY;
    for (cl_uint i = 0; i < n; i++) {
        if (!rt_is(list[i], RT_EVENT)) {
            if (ids != ids_s) free(ids);
            return CL_INVALID_EVENT;
        }
        ids[i] = OBJ(list[i])->id;
    }
    clproj_rcall c;
    rt_init_call(&c, RT_OP_WAIT, NULL);
    c.n_wait = n;
    c.wait_ids = ids;
    cl_int r = rt_call(&c);
    if (ids != ids_s) free(ids);
    return r;
}

/* ---------------- queue commands ---------------- */
#define QCHECK(q, nw, wl)                                          \
    if (!rt_is(q, RT_QUEUE)) return CL_INVALID_COMMAND_QUEUE;      \
    do {                                                           \
        cl_int e_ = rt_wait_list(nw, wl);                          \
        if (e_ != CL_SUCCESS) return e_;                           \
    } while (0)
static cl_int rt_event_out(cl_int r, clproj_rcall *c, cl_event *ev) {
    if (r == CL_SUCCESS && ev) *ev = c->ret_event;
    return r;
}

static cl_int rt_clFlush(cl_command_queue q) {
    if (!rt_is(q, RT_QUEUE)) return CL_INVALID_COMMAND_QUEUE;
    clproj_rcall c;
    rt_init_call(&c, RT_OP_FLUSH, q);
    return rt_call(&c);
}
static cl_int rt_clFinish(cl_command_queue q) {
    if (!rt_is(q, RT_QUEUE)) return CL_INVALID_COMMAND_QUEUE;
    clproj_rcall c;
    rt_init_call(&c, RT_OP_FINISH, q);
    return rt_call(&c);
}

static cl_int rt_rw(int op, cl_command_queue q, cl_mem b, cl_bool blocking, size_t off, size_t n,
                    const void *src, void *dst, cl_uint nw, const cl_event *wl, cl_event *ev) {
    QCHECK(q, nw, wl);
    if (!rt_is(b, RT_MEM)) return CL_INVALID_MEM_OBJECT;
    if ((src == NULL && dst == NULL) || n == 0) return CL_INVALID_VALUE;
    clproj_rcall c;
    rt_init_call(&c, op, b);
    c.u.rw.blocking = blocking;
    c.u.rw.offset = off;
    c.u.rw.size = n;
    c.queue = OBJ(q)->id;
    c.src = src;
    c.dst = dst;
    c.want_event = ev != NULL;
    return rt_event_out(rt_call_waiting(&c, nw, wl), &c, ev);
}
static cl_int rt_clEnqueueReadBuffer(cl_command_queue q, cl_mem b, cl_bool blocking, size_t off,
                                     size_t n, void *ptr, cl_uint nw, const cl_event *wl,
                                     cl_event *ev) {
    if (!ptr) return CL_INVALID_VALUE;
    return rt_rw(RT_OP_READ, q, b, blocking, off, n, NULL, ptr, nw, wl, ev);
}
static cl_int rt_clEnqueueWriteBuffer(cl_command_queue q, cl_mem b, cl_bool blocking, size_t off,
                                      size_t n, const void *ptr, cl_uint nw, const cl_event *wl,
                                      cl_event *ev) {
    if (!ptr) return CL_INVALID_VALUE;
    return rt_rw(RT_OP_WRITE, q, b, blocking, off, n, ptr, NULL, nw, wl, ev);
}
static cl_int rt_clEnqueueCopyBuffer(cl_command_queue q, cl_mem s, cl_mem d, size_t so, size_t dof,
                                     size_t n, cl_uint nw, const cl_event *wl, cl_event *ev) {
    QCHECK(q, nw, wl);
    if (!rt_is(s, RT_MEM) || !rt_is(d, RT_MEM)) return CL_INVALID_MEM_OBJECT;
    clproj_rcall c;
    rt_init_call(&c, RT_OP_COPY, s);
    c.id2 = OBJ(d)->id;
    c.u.copy.src_offset = so;
    c.u.copy.dst_offset = dof;
    c.u.copy.size = n;
    c.queue = OBJ(q)->id;
    c.want_event = ev != NULL;
    return rt_event_out(rt_call_waiting(&c, nw, wl), &c, ev);
}
/* Rectangular transfers. C checks what needs no buffer size (OpenCL's rules, in PoCL's
 * order) and hands Python pitches with 0 replaced by the tightly packed value; Python
 * checks the bounds against the buffer and moves only the covering byte span. */
static cl_int rt_pitches(const size_t *region, size_t *row, size_t *slice) {
    if (*row != 0 && *row < region[0]) return CL_INVALID_VALUE;
    if (*row == 0) *row = region[0];
    if (*slice != 0 && (*slice < region[1] * *row || *slice % *row != 0)) return CL_INVALID_VALUE;
    if (*slice == 0) *slice = region[1] * *row;
    return CL_SUCCESS;
}
/* A rect's region and both sides' pitches (0: tightly packed, filled in here), checked
 * in PoCL's order after the wait list. */
static cl_int rt_rect_shape(const size_t *region, size_t *arp, size_t *asp, size_t *brp,
                            size_t *bsp) {
    if (region[0] == 0 || region[1] == 0 || region[2] == 0) return CL_INVALID_VALUE;
    if (rt_pitches(region, arp, asp) != CL_SUCCESS || rt_pitches(region, brp, bsp) != CL_SUCCESS)
        return CL_INVALID_VALUE;
    return CL_SUCCESS;
}
/* The queue and the two sides (a: the buffer or copy source, b: the host or copy
 * destination) of a rect transfer, as the read/write and copy entry points share them. */
static void rt_set_rect(clproj_rcall *c, cl_command_queue q, const size_t *region,
                        const size_t *a_origin, size_t a_row, size_t a_slice,
                        const size_t *b_origin, size_t b_row, size_t b_slice) {
    c->queue = OBJ(q)->id;
    c->u.rect.region = region;
    c->u.rect.a_origin = a_origin;
    c->u.rect.a_row = a_row;
    c->u.rect.a_slice = a_slice;
    c->u.rect.b_origin = b_origin;
    c->u.rect.b_row = b_row;
    c->u.rect.b_slice = b_slice;
}
static cl_int rt_rect(int op, cl_command_queue q, cl_mem b, cl_bool blocking, const size_t *bo,
                      const size_t *ho, const size_t *region, size_t brp, size_t bsp, size_t hrp,
                      size_t hsp, const void *src, void *dst, cl_uint nw, const cl_event *wl,
                      cl_event *ev) {
    if (!rt_is(q, RT_QUEUE)) return CL_INVALID_COMMAND_QUEUE;
    if (!rt_is(b, RT_MEM)) return CL_INVALID_MEM_OBJECT;
    if ((src == NULL && dst == NULL) || !bo || !ho || !region) return CL_INVALID_VALUE;
    cl_int e = rt_wait_list(nw, wl);
    if (e == CL_SUCCESS) e = rt_rect_shape(region, &brp, &bsp, &hrp, &hsp);
    if (e != CL_SUCCESS) return e;
    clproj_rcall c;
    rt_init_call(&c, op, b);
    c.u.rect.blocking = blocking;
    rt_set_rect(&c, q, region, bo, brp, bsp, ho, hrp, hsp);
    c.src = src;
    c.dst = dst;
    c.want_event = ev != NULL;
    return rt_event_out(rt_call_waiting(&c, nw, wl), &c, ev);
}
static cl_int rt_clEnqueueReadBufferRect(cl_command_queue q, cl_mem b, cl_bool blocking,
                                         const size_t *bo, const size_t *ho, const size_t *region,
                                         size_t brp, size_t bsp, size_t hrp, size_t hsp, void *ptr,
                                         cl_uint nw, const cl_event *wl, cl_event *ev) {
    return rt_rect(RT_OP_READ_RECT, q, b, blocking, bo, ho, region, brp, bsp, hrp, hsp, NULL, ptr,
                   nw, wl, ev);
}
static cl_int rt_clEnqueueWriteBufferRect(cl_command_queue q, cl_mem b, cl_bool blocking,
                                          const size_t *bo, const size_t *ho, const size_t *region,
                                          size_t brp, size_t bsp, size_t hrp, size_t hsp,
                                          const void *ptr, cl_uint nw, const cl_event *wl,
                                          cl_event *ev) {
    return rt_rect(RT_OP_WRITE_RECT, q, b, blocking, bo, ho, region, brp, bsp, hrp, hsp, ptr, NULL,
                   nw, wl, ev);
}
static cl_int rt_clEnqueueCopyBufferRect(cl_command_queue q, cl_mem s, cl_mem d, const size_t *so,
                                         const size_t *dof, const size_t *region, size_t srp,
                                         size_t ssp, size_t drp, size_t dsp, cl_uint nw,
                                         const cl_event *wl, cl_event *ev) {
    if (!rt_is(q, RT_QUEUE)) return CL_INVALID_COMMAND_QUEUE;
    if (!rt_is(s, RT_MEM) || !rt_is(d, RT_MEM)) return CL_INVALID_MEM_OBJECT;
    if (!so || !dof || !region) return CL_INVALID_VALUE;
    cl_int e = rt_wait_list(nw, wl);
    if (e == CL_SUCCESS) e = rt_rect_shape(region, &srp, &ssp, &drp, &dsp);
    if (e != CL_SUCCESS) return e;
    clproj_rcall c;
    rt_init_call(&c, RT_OP_COPY_RECT, s);
    c.id2 = OBJ(d)->id;
    rt_set_rect(&c, q, region, so, srp, ssp, dof, drp, dsp);
    c.want_event = ev != NULL;
    return rt_event_out(rt_call_waiting(&c, nw, wl), &c, ev);
}
static cl_int rt_clEnqueueFillBuffer(cl_command_queue q, cl_mem b, const void *pattern, size_t ps,
                                     size_t off, size_t n, cl_uint nw, const cl_event *wl,
                                     cl_event *ev) {
    QCHECK(q, nw, wl);
    if (!rt_is(b, RT_MEM)) return CL_INVALID_MEM_OBJECT;
    if (!pattern || ps == 0 || ps > 128) return CL_INVALID_VALUE;
    clproj_rcall c;
    rt_init_call(&c, RT_OP_FILL, b);
    c.src = pattern;
    c.u.fill.pattern_size = ps;
    c.u.fill.offset = off;
    c.u.fill.size = n;
    c.queue = OBJ(q)->id;
    c.want_event = ev != NULL;
    return rt_event_out(rt_call_waiting(&c, nw, wl), &c, ev);
}
static void *rt_clEnqueueMapBuffer(cl_command_queue q, cl_mem b, cl_bool blocking, cl_map_flags f,
                                   size_t off, size_t n, cl_uint nw, const cl_event *wl,
                                   cl_event *ev, cl_int *errcode_ret) {
    cl_int e = !rt_is(q, RT_QUEUE) ? CL_INVALID_COMMAND_QUEUE
               : !rt_is(b, RT_MEM) ? CL_INVALID_MEM_OBJECT
                                   : rt_wait_list(nw, wl);
    if (e != CL_SUCCESS) {
        SET_ERR(e);
        return NULL;
    }
    clproj_rcall c;
    rt_init_call(&c, RT_OP_MAP, b);
    c.u.map.blocking = blocking;
    c.u.map.offset = off;
    c.u.map.size = n;
    c.u.map.flags = f;
    c.queue = OBJ(q)->id;
    c.want_event = ev != NULL;
    cl_int r = rt_event_out(rt_call_waiting(&c, nw, wl), &c, ev);
    SET_ERR(r);
    return r == CL_SUCCESS ? c.ret : NULL;
}
static cl_int rt_clEnqueueUnmapMemObject(cl_command_queue q, cl_mem b, void *ptr, cl_uint nw,
                                         const cl_event *wl, cl_event *ev) {
    QCHECK(q, nw, wl);
    if (!rt_is(b, RT_MEM)) return CL_INVALID_MEM_OBJECT;
    clproj_rcall c;
    rt_init_call(&c, RT_OP_UNMAP, b);
    c.src = ptr;
    c.queue = OBJ(q)->id;
    c.want_event = ev != NULL;
    return rt_event_out(rt_call_waiting(&c, nw, wl), &c, ev);
}
static cl_int rt_marker(cl_command_queue q, cl_uint nw, const cl_event *wl, cl_event *ev);
static cl_int rt_clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dim,
                                        const size_t *off, const size_t *g, const size_t *l,
                                        cl_uint nw, const cl_event *wl, cl_event *ev) {
    QCHECK(q, nw, wl);
    if (!rt_is(k, RT_KERNEL)) return CL_INVALID_KERNEL;
    if (dim < 1 || dim > 3) return CL_INVALID_WORK_DIMENSION;
    /* With no global size, or a zero in it, the command trivially succeeds once its wait
     * list has (a marker): what the implementations behind the virtual platform answer
     * natively (OpenCL 2.1 on; PoCL 3.1), although it reports 1.2, whose rule was
     * CL_INVALID_GLOBAL_WORK_SIZE. An app sees the code it would see without clproj. */
    int empty = g == NULL;
    for (cl_uint i = 0; g && i < dim; i++) empty |= g[i] == 0;
    if (empty) return rt_marker(q, nw, wl, ev);
    for (cl_uint i = 0; i < dim; i++)
        if (l && (l[i] == 0 || g[i] % l[i])) return CL_INVALID_WORK_GROUP_SIZE;
    clproj_rcall c;
    rt_init_call(&c, RT_OP_LAUNCH, k);
    c.u.launch.dim = dim;
    c.queue = OBJ(q)->id;
    c.u.launch.global_size = g;
    c.u.launch.local_size = l;
    c.u.launch.global_offset = off;
    c.want_event = ev != NULL;
    return rt_event_out(rt_call_waiting(&c, nw, wl), &c, ev);
}
static cl_int rt_clEnqueueTask(cl_command_queue q, cl_kernel k, cl_uint nw, const cl_event *wl,
                               cl_event *ev) {
    static const size_t one[1] = {1};
    return rt_clEnqueueNDRangeKernel(q, k, 1, NULL, one, one, nw, wl, ev);
}
static cl_int rt_marker(cl_command_queue q, cl_uint nw, const cl_event *wl, cl_event *ev) {
    QCHECK(q, nw, wl);
    clproj_rcall c;
    rt_init_call(&c, RT_OP_MARKER, q);
    c.u.marker.type = RT_MARKER_PLAIN;
    c.want_event = ev != NULL;
    return rt_event_out(rt_call_waiting(&c, nw, wl), &c, ev);
}
static cl_int rt_clEnqueueMarkerWithWaitList(cl_command_queue q, cl_uint nw, const cl_event *wl,
                                             cl_event *ev) {
    return rt_marker(q, nw, wl, ev);
}
static cl_int rt_clEnqueueBarrierWithWaitList(cl_command_queue q, cl_uint nw, const cl_event *wl,
                                              cl_event *ev) {
    QCHECK(q, nw, wl);
    clproj_rcall c;
    rt_init_call(&c, RT_OP_MARKER, q);
    c.u.marker.type = RT_MARKER_BARRIER;
    c.want_event = ev != NULL;
    return rt_event_out(rt_call_waiting(&c, nw, wl), &c, ev);
}
static cl_int rt_clEnqueueMarker(cl_command_queue q, cl_event *ev) {
    if (!ev) return CL_INVALID_VALUE;
    return rt_marker(q, 0, NULL, ev);
}
static cl_int rt_clEnqueueBarrier(cl_command_queue q) {
    return rt_clEnqueueBarrierWithWaitList(q, 0, NULL, NULL);
}
static cl_int rt_clEnqueueWaitForEvents(cl_command_queue q, cl_uint n, const cl_event *list) {
    if (n == 0 || !list) return CL_INVALID_VALUE;
    return rt_marker(q, n, list, NULL);
}

/* A hint only (the client moves buffers to the kernels that use them): an in-order
 * marker whose event says CL_COMMAND_MIGRATE_MEM_OBJECTS. Checks in PoCL's order. */
static cl_int rt_clEnqueueMigrateMemObjects(cl_command_queue q, cl_uint n, const cl_mem *mems,
                                            cl_mem_migration_flags flags, cl_uint nw,
                                            const cl_event *wl, cl_event *ev) {
    if (!rt_is(q, RT_QUEUE)) return CL_INVALID_COMMAND_QUEUE;
    if (n == 0 || mems == NULL) return CL_INVALID_VALUE;
    if (flags & ~(cl_mem_migration_flags)(CL_MIGRATE_MEM_OBJECT_HOST |
                                          CL_MIGRATE_MEM_OBJECT_CONTENT_UNDEFINED))
        return CL_INVALID_VALUE;
    cl_int e = rt_wait_list(nw, wl);
    if (e != CL_SUCCESS) return e;
    for (cl_uint i = 0; i < n; i++)
        if (!rt_is(mems[i], RT_MEM)) return CL_INVALID_MEM_OBJECT;
    clproj_rcall c;
    rt_init_call(&c, RT_OP_MARKER, q);
    c.u.marker.type = RT_MARKER_MIGRATE;
    c.want_event = ev != NULL;
    return rt_event_out(rt_call_waiting(&c, nw, wl), &c, ev);
}

/* User events: complete when the app says so; commands waiting on one are held back by
 * Python (runtime/route/held.py) until then. */
static cl_event rt_clCreateUserEvent(cl_context ctx, cl_int *errcode_ret) {
    if (!rt_is(ctx, RT_CONTEXT)) {
        SET_ERR(CL_INVALID_CONTEXT);
        return NULL;
    }
    clproj_rcall c;
    rt_init_call(&c, RT_OP_USER_EVENT, ctx);
    return rt_create(&c, errcode_ret);
}
static cl_int rt_clSetUserEventStatus(cl_event e, cl_int status) {
    if (!rt_is(e, RT_EVENT)) return CL_INVALID_EVENT;
    if (status > CL_COMPLETE) return CL_INVALID_VALUE;
    clproj_rcall c;
    rt_init_call(&c, RT_OP_USER_STATUS, e);
    c.u.user_status.status = status;
    return rt_call(&c);
}

/* Callbacks are fired by runtime/route/callbacks.py's thread (never inside the app's call):
 * the event is retained here until clproj_route_fire has called the function. */
static cl_int rt_clSetEventCallback(cl_event e, cl_int type,
                                    void(CL_CALLBACK *fn)(cl_event, cl_int, void *), void *user) {
    if (!rt_is(e, RT_EVENT)) return CL_INVALID_EVENT;
    if (!fn || (type != CL_COMPLETE && type != CL_RUNNING && type != CL_SUBMITTED))
        return CL_INVALID_VALUE;
    rt_retain(e, RT_EVENT, 0);
    clproj_rcall c;
    rt_init_call(&c, RT_OP_CALLBACK, e);
    c.u.callback.type = type;
    c.src = (const void *)fn;
    c.dst = user;
    c.ret = e;
    cl_int r = rt_call(&c);
    if (r != CL_SUCCESS) rt_release(e, RT_EVENT, 0);
    return r;
}
void clproj_route_fire(void *fn, void *event, int32_t status, void *user) {
    ((void(CL_CALLBACK *)(cl_event, cl_int, void *))fn)((cl_event)event, status, user);
    clproj_route_release(event);
}

/* No images on the virtual platform (CL_DEVICE_IMAGE_SUPPORT is CL_FALSE): zero formats,
 * so apps that probe for images take their buffer path. */
static cl_int rt_clGetSupportedImageFormats(cl_context ctx, cl_mem_flags flags,
                                            cl_mem_object_type type, cl_uint n,
                                            cl_image_format *formats, cl_uint *num) {
    if (!rt_is(ctx, RT_CONTEXT)) return CL_INVALID_CONTEXT;
    if (n == 0 && formats != NULL) return CL_INVALID_VALUE;
    if (num) *num = 0;
    return CL_SUCCESS;
}

/* ---------------- dispatch table ---------------- */
static void rt_fill_table(void) {
    void **slots = (void **)&rt_table;
    for (size_t i = 0; i < sizeof rt_table / sizeof(void *); i++) slots[i] = (void *)rt_unsupported;
#define T(name) rt_table.name = (void *)rt_##name
    T(clGetPlatformIDs); T(clGetPlatformInfo); T(clGetDeviceIDs); T(clGetDeviceInfo);
    T(clRetainDevice); T(clReleaseDevice); T(clCreateSubDevices);
    T(clCreateContext); T(clCreateContextFromType); T(clRetainContext); T(clReleaseContext);
    T(clGetContextInfo);
    T(clCreateCommandQueue); T(clCreateCommandQueueWithProperties); T(clRetainCommandQueue);
    T(clReleaseCommandQueue); T(clGetCommandQueueInfo);
    T(clCreateBuffer); T(clCreateBufferWithProperties); T(clRetainMemObject);
    T(clSetMemObjectDestructorCallback); T(clSetContextDestructorCallback);
    T(clReleaseMemObject); T(clGetMemObjectInfo);
    T(clCreateProgramWithSource); T(clCreateProgramWithBinary); T(clRetainProgram);
    T(clReleaseProgram); T(clBuildProgram); T(clCompileProgram); T(clGetProgramInfo);
    T(clGetProgramBuildInfo); T(clUnloadPlatformCompiler); T(clUnloadCompiler);
    T(clCreateKernel); T(clCreateKernelsInProgram); T(clRetainKernel); T(clReleaseKernel);
    T(clSetKernelArg); T(clSetKernelArgSVMPointer); T(clGetKernelInfo); T(clGetKernelWorkGroupInfo); T(clGetKernelArgInfo);
    T(clWaitForEvents); T(clGetEventInfo); T(clRetainEvent); T(clReleaseEvent);
    T(clGetEventProfilingInfo);
    T(clFlush); T(clFinish);
    T(clEnqueueReadBuffer); T(clEnqueueWriteBuffer); T(clEnqueueCopyBuffer);
    T(clEnqueueFillBuffer); T(clEnqueueMapBuffer); T(clEnqueueUnmapMemObject);
    T(clEnqueueNDRangeKernel); T(clEnqueueTask); T(clEnqueueMarker); T(clEnqueueBarrier);
    T(clEnqueueWaitForEvents); T(clEnqueueMarkerWithWaitList); T(clEnqueueBarrierWithWaitList);
    T(clEnqueueReadBufferRect); T(clEnqueueWriteBufferRect); T(clEnqueueCopyBufferRect);
    T(clEnqueueMigrateMemObjects); T(clSetEventCallback); T(clGetSupportedImageFormats);
    T(clSetUserEventStatus);
    /* pointer-returning entry points we do not implement: NULL + CL_INVALID_OPERATION */
    T(clCreateSubBuffer); T(clCreateImage); T(clCreateImage2D); T(clCreateImage3D);
    T(clCreateSampler); T(clCreateSamplerWithProperties); T(clCreateProgramWithIL);
    T(clCreateProgramWithBuiltInKernels); T(clLinkProgram); T(clCreatePipe);
    T(clCreateUserEvent); T(clCloneKernel); T(clEnqueueMapImage); T(clCreateFromGLBuffer);
    T(clSVMAlloc); T(clGetExtensionFunctionAddressForPlatform);
#undef T
}

/* ---------------- exported entry points (reached before any handle of ours exists) ---------------- */
CL_API_ENTRY cl_int CL_API_CALL clGetPlatformIDs(cl_uint n, cl_platform_id *platforms,
                                                 cl_uint *num) {
    if (!clproj_in_shim && clproj_route_on()) return rt_clGetPlatformIDs(n, platforms, num);
    REAL(clGetPlatformIDs, FAIL_INT);
    return real_clGetPlatformIDs(n, platforms, num);
}

CL_API_ENTRY cl_int CL_API_CALL clGetPlatformInfo(cl_platform_id p, cl_platform_info param,
                                                  size_t size, void *value, size_t *size_ret) {
    if (!clproj_in_shim && clproj_route_on() && (p == NULL || rt_ours(p)))
        return rt_clGetPlatformInfo(p, param, size, value, size_ret);
    REAL(clGetPlatformInfo, FAIL_INT);
    return real_clGetPlatformInfo(p, param, size, value, size_ret);
}

CL_API_ENTRY cl_int CL_API_CALL clGetDeviceIDs(cl_platform_id p, cl_device_type type, cl_uint n,
                                               cl_device_id *devices, cl_uint *num) {
    if (!clproj_in_shim && clproj_route_on() && (p == NULL || rt_ours(p)))
        return rt_clGetDeviceIDs(p, type, n, devices, num);
    REAL(clGetDeviceIDs, FAIL_INT);
    return real_clGetDeviceIDs(p, type, n, devices, num);
}

static const void *props_platform(const cl_context_properties *props) {
    for (int i = 0; props && props[i] != 0; i += 2)
        if (props[i] == CL_CONTEXT_PLATFORM) return (const void *)props[i + 1];
    return NULL;
}

CL_API_ENTRY cl_context CL_API_CALL clCreateContext(
    const cl_context_properties *props, cl_uint n, const cl_device_id *devs,
    void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *), void *user_data,
    cl_int *errcode_ret) {
    if (!clproj_in_shim && clproj_route_on() &&
        (rt_ours(props_platform(props)) || (n > 0 && devs && rt_ours(devs[0]))))
        return rt_clCreateContext(props, n, devs, notify, user_data, errcode_ret);
    REAL(clCreateContext, FAIL_PTR);
    return real_clCreateContext(props, n, devs, notify, user_data, errcode_ret);
}

CL_API_ENTRY cl_context CL_API_CALL clCreateContextFromType(
    const cl_context_properties *props, cl_device_type type,
    void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *), void *user_data,
    cl_int *errcode_ret) {
    const void *plat = props_platform(props);
    if (!clproj_in_shim && clproj_route_on() && (plat == NULL || rt_ours(plat)))
        return rt_clCreateContextFromType(props, type, notify, user_data, errcode_ret);
    REAL(clCreateContextFromType, FAIL_PTR);
    return real_clCreateContextFromType(props, type, notify, user_data, errcode_ret);
}

CL_API_ENTRY cl_int CL_API_CALL clWaitForEvents(cl_uint n, const cl_event *list) {
    if (!clproj_in_shim && n > 0 && list && rt_ours(list[0])) return rt_clWaitForEvents(n, list);
    REAL(clWaitForEvents, FAIL_INT);
    return real_clWaitForEvents(n, list);
}
