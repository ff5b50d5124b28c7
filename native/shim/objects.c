/* Entry points that create, retain and release OpenCL objects: each forwards to the real
 * implementation first and tracks the object only when the call succeeded, so every
 * error code the application sees is the real implementation's. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"
#include "identity.h"

#define PASS (clproj_in_shim || clproj_cfg.disabled)

/* ---------------- queues ----------------
 * The app's queues are created exactly as asked. Launches are timed on a profiling "twin"
 * queue (launch.c) unless the app enabled profiling itself: a profiling queue costs PoCL two
 * clock reads per command in the enqueuing thread (about 0.08 us of a 0.75 us launch),
 * which every launch would pay although only a sample of them is timed. */
static void track_queue(cl_command_queue q, cl_device_id dev, int app_profiling) {
    queue_info *qi = calloc(1, sizeof *qi);
    qi->app_refs = 1;
    qi->device = dev;
    qi->app_profiling = app_profiling;
    clproj_lock();
    free(pm_put_replace(clproj_queues, q, qi));
    clproj_unlock();
}

CL_API_ENTRY cl_command_queue CL_API_CALL clCreateCommandQueue(cl_context context,
                                                               cl_device_id device,
                                                               cl_command_queue_properties props,
                                                               cl_int *errcode_ret) {
    REAL(clCreateCommandQueue, FAIL_PTR);
    clproj_init();
    cl_int err = CL_SUCCESS;
    cl_command_queue q = real_clCreateCommandQueue(context, device, props, &err);
    if (errcode_ret) *errcode_ret = err;
    if (q && !PASS) track_queue(q, device, (props & CL_QUEUE_PROFILING_ENABLE) != 0);
    return q;
}

CL_API_ENTRY cl_command_queue CL_API_CALL clCreateCommandQueueWithProperties(
    cl_context context, cl_device_id device, const cl_queue_properties *props,
    cl_int *errcode_ret) {
    REAL(clCreateCommandQueueWithProperties, FAIL_PTR);
    clproj_init();
    cl_int err = CL_SUCCESS;
    cl_command_queue q = real_clCreateCommandQueueWithProperties(context, device, props, &err);
    if (errcode_ret) *errcode_ret = err;
    if (q && !PASS) {
        int prof = 0;
        for (int n = 0; props && props[n] != 0 && n < 64; n += 2)
            if (props[n] == CL_QUEUE_PROPERTIES) prof = (props[n + 1] & CL_QUEUE_PROFILING_ENABLE) != 0;
        track_queue(q, device, prof);
    }
    return q;
}

CL_API_ENTRY cl_int CL_API_CALL clRetainCommandQueue(cl_command_queue q) {
    REAL(clRetainCommandQueue, FAIL_INT);
    cl_int err = real_clRetainCommandQueue(q);
    if (err == CL_SUCCESS && !PASS) {
        clproj_lock();
        queue_info *qi = pm_get(clproj_queues, q);
        if (qi) qi->app_refs++;
        clproj_unlock();
    }
    return err;
}

CL_API_ENTRY cl_int CL_API_CALL clReleaseCommandQueue(cl_command_queue q) {
    REAL(clReleaseCommandQueue, FAIL_INT);
    int last = 0;
    if (!PASS) {
        clproj_lock();
        queue_info *qi = clproj_queues ? pm_get(clproj_queues, q) : NULL;
        last = qi && qi->app_refs == 1;
        clproj_unlock();
        if (last) pending_harvest(1); /* its launches end with it: collect their times */
    }
    cl_int err = real_clReleaseCommandQueue(q);
    if (err == CL_SUCCESS && !PASS) {
        cl_command_queue twin = NULL;
        clproj_lock();
        queue_info *qi = pm_get(clproj_queues, q);
        if (qi && --qi->app_refs <= 0) {
            pm_del(clproj_queues, q);
            twin = qi->twin;
            if (twin) pm_del(clproj_twins, twin);
            free(qi);
        }
        clproj_unlock();
        if (twin) {
            clproj_in_shim = 1;
            real_clReleaseCommandQueue(twin);
            clproj_in_shim = 0;
        }
    }
    return err;
}

/* The app's queue of an event: events of timed launches come from the twin queue. */
static cl_command_queue app_queue_of(cl_command_queue q) {
    if (!q || !clproj_twins) return NULL;
    clproj_lock();
    cl_command_queue app = pm_get(clproj_twins, q);
    clproj_unlock();
    return app;
}

CL_API_ENTRY cl_int CL_API_CALL clGetEventInfo(cl_event ev, cl_event_info param, size_t size,
                                               void *value, size_t *size_ret) {
    REAL(clGetEventInfo, FAIL_INT);
    cl_int err = real_clGetEventInfo(ev, param, size, value, size_ret);
    if (err == CL_SUCCESS && value && param == CL_EVENT_COMMAND_QUEUE && !PASS) {
        cl_command_queue app = app_queue_of(*(cl_command_queue *)value);
        if (app) *(cl_command_queue *)value = app;
    }
    return err;
}

int64_t clproj_pending_user_events = 0;

/* User events are counted, created minus set (launch.c's twin queue steps aside while one is
 * pending); the calls themselves are the driver's. */
CL_API_ENTRY cl_event CL_API_CALL clCreateUserEvent(cl_context ctx, cl_int *errcode_ret) {
    REAL(clCreateUserEvent, FAIL_PTR);
    cl_event e = real_clCreateUserEvent(ctx, errcode_ret);
    if (e && !PASS) __atomic_add_fetch(&clproj_pending_user_events, 1, __ATOMIC_RELEASE);
    return e;
}

CL_API_ENTRY cl_int CL_API_CALL clSetUserEventStatus(cl_event e, cl_int status) {
    REAL(clSetUserEventStatus, FAIL_INT);
    cl_int err = real_clSetUserEventStatus(e, status);
    if (err == CL_SUCCESS && !PASS)
        __atomic_sub_fetch(&clproj_pending_user_events, 1, __ATOMIC_RELEASE);
    return err;
}

/* The app did not ask for profiling: its events must not start reporting times. */
CL_API_ENTRY cl_int CL_API_CALL clGetEventProfilingInfo(cl_event ev, cl_profiling_info param,
                                                        size_t size, void *value,
                                                        size_t *size_ret) {
    REAL(clGetEventProfilingInfo, FAIL_INT);
    REAL(clGetEventInfo, FAIL_INT);
    cl_int err = real_clGetEventProfilingInfo(ev, param, size, value, size_ret);
    if (err == CL_SUCCESS && !PASS) {
        cl_command_queue q = NULL;
        int saved = clproj_in_shim;
        clproj_in_shim = 1;
        real_clGetEventInfo(ev, CL_EVENT_COMMAND_QUEUE, sizeof q, &q, NULL);
        clproj_in_shim = saved;
        if (app_queue_of(q)) return CL_PROFILING_INFO_NOT_AVAILABLE;
    }
    return err;
}

CL_API_ENTRY cl_int CL_API_CALL clFinish(cl_command_queue q) {
    REAL(clFinish, FAIL_INT);
    cl_int err = real_clFinish(q);
    if (!PASS) pending_harvest(0);
    return err;
}

/* ---------------- programs ---------------- */
/* The program part of launch signatures: intercept.identity.program_stream (source, build
 * options; two builds of one source with different -D options are different programs, and
 * each must get its own first-launch record), hashed by identity.c. The IL or binary bytes
 * are part of the stream too, but prog_info does not keep them yet (see identity.h). */
static uint64_t prog_hash(const char *source, const char *options) {
    return clproj_program_key(source, options, NULL, 0);
}

static prog_info *new_prog(char *source, const char *binary_kind, const char *reason) {
    prog_info *p = calloc(1, sizeof *p);
    p->refs = 1; /* the table's reference */
    p->app_refs = 1;
    p->source = source;
    p->options = strdup("");
    p->binary_kind = binary_kind;
    p->reason = reason;
    p->hash = prog_hash(source, p->options);
    return p;
}
static void track_prog(cl_program prog, prog_info *p) {
    clproj_lock();
    prog_info *old = pm_get(clproj_programs, prog);
    pm_put(clproj_programs, prog, p);
    if (old) prog_unref(old);
    clproj_unlock();
}

CL_API_ENTRY cl_program CL_API_CALL clCreateProgramWithSource(cl_context ctx, cl_uint count,
                                                              const char **strings,
                                                              const size_t *lengths,
                                                              cl_int *errcode_ret) {
    REAL(clCreateProgramWithSource, FAIL_PTR);
    clproj_init();
    cl_program prog = real_clCreateProgramWithSource(ctx, count, strings, lengths, errcode_ret);
    if (prog == NULL || PASS) return prog;
    size_t total = 0;
    for (cl_uint i = 0; i < count; i++)
        total += (lengths && lengths[i]) ? lengths[i] : strlen(strings[i]);
    char *src = malloc(total + 1), *p = src;
    for (cl_uint i = 0; i < count; i++) {
        size_t n = (lengths && lengths[i]) ? lengths[i] : strlen(strings[i]);
        memcpy(p, strings[i], n);
        p += n;
    }
    *p = 0;
    track_prog(prog, new_prog(src, NULL, NULL));
    return prog;
}

CL_API_ENTRY cl_program CL_API_CALL clCreateProgramWithBinary(
    cl_context ctx, cl_uint n, const cl_device_id *devs, const size_t *lengths,
    const unsigned char **bins, cl_int *status, cl_int *errcode_ret) {
    REAL(clCreateProgramWithBinary, FAIL_PTR);
    clproj_init();
    cl_program prog = real_clCreateProgramWithBinary(ctx, n, devs, lengths, bins, status, errcode_ret);
    if (prog && !PASS) track_prog(prog, new_prog(NULL, "binary", "not emulatable: program built from a binary"));
    return prog;
}

CL_API_ENTRY cl_program CL_API_CALL clCreateProgramWithIL(cl_context ctx, const void *il,
                                                          size_t length, cl_int *errcode_ret) {
    REAL(clCreateProgramWithIL, FAIL_PTR);
    clproj_init();
    cl_program prog = real_clCreateProgramWithIL(ctx, il, length, errcode_ret);
    if (prog && !PASS) track_prog(prog, new_prog(NULL, "il", "not emulatable: program built from IL (SPIR-V)"));
    return prog;
}

CL_API_ENTRY cl_program CL_API_CALL clCreateProgramWithBuiltInKernels(
    cl_context ctx, cl_uint n, const cl_device_id *devs, const char *names, cl_int *errcode_ret) {
    REAL(clCreateProgramWithBuiltInKernels, FAIL_PTR);
    clproj_init();
    cl_program prog = real_clCreateProgramWithBuiltInKernels(ctx, n, devs, names, errcode_ret);
    if (prog && !PASS) track_prog(prog, new_prog(NULL, "binary", "not emulatable: built-in kernels"));
    return prog;
}

static void set_options(cl_program prog, const char *options) {
    clproj_lock();
    prog_info *p = pm_get(clproj_programs, prog);
    if (p) {
        free(p->options);
        p->options = strdup(options ? options : "");
        p->hash = prog_hash(p->source, p->options);
    }
    clproj_unlock();
}

CL_API_ENTRY cl_int CL_API_CALL clBuildProgram(cl_program prog, cl_uint n, const cl_device_id *devs,
                                               const char *options,
                                               void(CL_CALLBACK *notify)(cl_program, void *),
                                               void *user_data) {
    REAL(clBuildProgram, FAIL_INT);
    cl_int err = real_clBuildProgram(prog, n, devs, options, notify, user_data);
    if (err == CL_SUCCESS && !PASS) set_options(prog, options);
    return err;
}

CL_API_ENTRY cl_int CL_API_CALL clCompileProgram(cl_program prog, cl_uint n,
                                                 const cl_device_id *devs, const char *options,
                                                 cl_uint n_headers, const cl_program *headers,
                                                 const char **header_names,
                                                 void(CL_CALLBACK *notify)(cl_program, void *),
                                                 void *user_data) {
    REAL(clCompileProgram, FAIL_INT);
    cl_int err = real_clCompileProgram(prog, n, devs, options, n_headers, headers, header_names,
                                       notify, user_data);
    if (err == CL_SUCCESS && !PASS) {
        set_options(prog, options);
        if (n_headers) {
            clproj_lock();
            prog_info *p = pm_get(clproj_programs, prog);
            if (p && !p->reason) p->reason = "not emulatable: program compiled with embedded headers";
            clproj_unlock();
        }
    }
    return err;
}

/* A linked program is replayed from the concatenated sources of its inputs. */
CL_API_ENTRY cl_program CL_API_CALL clLinkProgram(cl_context ctx, cl_uint n,
                                                  const cl_device_id *devs, const char *options,
                                                  cl_uint n_inputs, const cl_program *inputs,
                                                  void(CL_CALLBACK *notify)(cl_program, void *),
                                                  void *user_data, cl_int *errcode_ret) {
    REAL(clLinkProgram, FAIL_PTR);
    clproj_init();
    cl_program prog = real_clLinkProgram(ctx, n, devs, options, n_inputs, inputs, notify,
                                         user_data, errcode_ret);
    if (prog == NULL || PASS) return prog;
    clproj_lock();
    size_t total = 1;
    const char *reason = NULL, *binary_kind = NULL;
    char *opts = NULL;
    for (cl_uint i = 0; i < n_inputs; i++) {
        prog_info *p = pm_get(clproj_programs, inputs[i]);
        if (!p || !p->source) {
            reason = "not emulatable: linked from a binary or untracked program";
            binary_kind = "binary";
            continue;
        }
        if (p->reason && !reason) reason = p->reason;
        total += strlen(p->source) + 1;
        if (!opts) opts = strdup(p->options);
    }
    char *src = NULL;
    if (!binary_kind) {
        src = malloc(total);
        src[0] = 0;
        for (cl_uint i = 0; i < n_inputs; i++) {
            prog_info *p = pm_get(clproj_programs, inputs[i]);
            strcat(src, p->source);
            strcat(src, "\n");
        }
    }
    clproj_unlock();
    prog_info *p = new_prog(src, binary_kind, reason);
    free(p->options);
    p->options = opts ? opts : strdup("");
    p->hash = prog_hash(p->source, p->options);
    track_prog(prog, p);
    return prog;
}

CL_API_ENTRY cl_int CL_API_CALL clRetainProgram(cl_program prog) {
    REAL(clRetainProgram, FAIL_INT);
    cl_int err = real_clRetainProgram(prog);
    if (err == CL_SUCCESS && !PASS) {
        clproj_lock();
        prog_info *p = pm_get(clproj_programs, prog);
        if (p) p->app_refs++;
        clproj_unlock();
    }
    return err;
}

CL_API_ENTRY cl_int CL_API_CALL clReleaseProgram(cl_program prog) {
    REAL(clReleaseProgram, FAIL_INT);
    cl_int err = real_clReleaseProgram(prog);
    if (err == CL_SUCCESS && !PASS) {
        clproj_lock();
        prog_info *p = pm_get(clproj_programs, prog);
        if (p && --p->app_refs <= 0) {
            pm_del(clproj_programs, prog);
            prog_unref(p);
        }
        clproj_unlock();
    }
    return err;
}

/* ---------------- kernels ---------------- */
static void track_kernel(cl_kernel k, cl_program prog, const char *name) {
    REAL(clGetKernelInfo, return);
    kern_info *ki = calloc(1, sizeof *ki);
    ki->app_refs = 1;
    ki->stat_idx = -1;
    cl_uint nargs = 0;
    char buf[256] = {0};
    int saved = clproj_in_shim;
    clproj_in_shim = 1;
    real_clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof nargs, &nargs, NULL);
    if (!name) {
        real_clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof buf - 1, buf, NULL);
        name = buf;
    }
    clproj_in_shim = saved;
    ki->name = strdup(name);
    ki->nargs = nargs;
    ki->args = calloc(nargs ? nargs : 1, sizeof *ki->args);
    REAL(clGetKernelArgInfo, return);
    for (cl_uint i = 0; i < nargs; i++) {
        cl_kernel_arg_address_qualifier q = 0;
        ki->args[i].kind = CLPROJ_ARG_UNSET;
        clproj_in_shim = 1;
        if (real_clGetKernelArgInfo(k, i, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof q, &q, NULL) ==
            CL_SUCCESS)
            ki->args[i].addr = q == CL_KERNEL_ARG_ADDRESS_LOCAL     ? 2
                               : q == CL_KERNEL_ARG_ADDRESS_PRIVATE ? 3
                                                                    : 1;
        clproj_in_shim = saved;
    }
    clproj_lock();
    ki->prog = pm_get(clproj_programs, prog);
    if (ki->prog) ki->prog->refs++;
    kern_info *old = pm_get(clproj_kernels, k);
    pm_put(clproj_kernels, k, ki);
    if (old) kern_free(old);
    clproj_unlock();
}

CL_API_ENTRY cl_kernel CL_API_CALL clCreateKernel(cl_program prog, const char *name,
                                                  cl_int *errcode_ret) {
    REAL(clCreateKernel, FAIL_PTR);
    clproj_init();
    cl_kernel k = real_clCreateKernel(prog, name, errcode_ret);
    if (k && !PASS) track_kernel(k, prog, name);
    return k;
}

CL_API_ENTRY cl_int CL_API_CALL clCreateKernelsInProgram(cl_program prog, cl_uint n,
                                                         cl_kernel *kernels, cl_uint *n_ret) {
    REAL(clCreateKernelsInProgram, FAIL_INT);
    clproj_init();
    cl_uint got = 0;
    cl_int err = real_clCreateKernelsInProgram(prog, n, kernels, &got);
    if (n_ret) *n_ret = got;
    if (err == CL_SUCCESS && kernels && !PASS)
        for (cl_uint i = 0; i < got && i < n; i++) track_kernel(kernels[i], prog, NULL);
    return err;
}

CL_API_ENTRY cl_kernel CL_API_CALL clCloneKernel(cl_kernel src, cl_int *errcode_ret) {
    REAL(clCloneKernel, FAIL_PTR);
    cl_kernel k = real_clCloneKernel(src, errcode_ret);
    if (k && !PASS) {
        clproj_lock();
        kern_info *s = pm_get(clproj_kernels, src);
        kern_info *ki = NULL;
        if (s) {
            ki = calloc(1, sizeof *ki);
            *ki = *s;
            ki->app_refs = 1;
            ki->name = strdup(s->name);
            ki->args = calloc(s->nargs ? s->nargs : 1, sizeof *ki->args);
            for (cl_uint i = 0; i < s->nargs; i++) {
                ki->args[i] = s->args[i];
                if (s->args[i].data) {
                    ki->args[i].data = malloc(s->args[i].size);
                    memcpy(ki->args[i].data, s->args[i].data, s->args[i].size);
                }
            }
            if (ki->prog) ki->prog->refs++;
            pm_put(clproj_kernels, k, ki);
        }
        clproj_unlock();
    }
    return k;
}

CL_API_ENTRY cl_int CL_API_CALL clRetainKernel(cl_kernel k) {
    REAL(clRetainKernel, FAIL_INT);
    cl_int err = real_clRetainKernel(k);
    if (err == CL_SUCCESS && !PASS) {
        clproj_lock();
        kern_info *ki = pm_get(clproj_kernels, k);
        if (ki) ki->app_refs++;
        clproj_unlock();
    }
    return err;
}

CL_API_ENTRY cl_int CL_API_CALL clReleaseKernel(cl_kernel k) {
    REAL(clReleaseKernel, FAIL_INT);
    cl_int err = real_clReleaseKernel(k);
    if (err == CL_SUCCESS && !PASS) {
        clproj_lock();
        kern_info *ki = pm_get(clproj_kernels, k);
        if (ki && --ki->app_refs <= 0) {
            pm_del(clproj_kernels, k);
            kern_free(ki);
        }
        clproj_unlock();
    }
    return err;
}

CL_API_ENTRY cl_int CL_API_CALL clSetKernelArg(cl_kernel k, cl_uint index, size_t size,
                                               const void *value) {
    REAL(clSetKernelArg, FAIL_INT);
    /* Arguments matter only to recorded launches: otherwise a tail call. */
    if (!clproj_cfg.track_args) return real_clSetKernelArg(k, index, size, value);
    cl_int err = real_clSetKernelArg(k, index, size, value);
    if (err != CL_SUCCESS || PASS) return err;
    clproj_lock();
    kern_info *ki = pm_get(clproj_kernels, k);
    if (ki && index < ki->nargs) {
        karg *a = &ki->args[index];
        mem_info *mi = NULL;
        void *handle = (value && size == sizeof(void *)) ? *(void *const *)value : NULL;
        a->mem = NULL;
        a->what = NULL;
        if (a->addr == 2 || (value == NULL && a->addr == 0 && size != sizeof(void *))) {
            a->kind = CLPROJ_ARG_LOCAL; /* without arg info: NULL value, non-pointer size */
            a->size = size;
        } else if (value == NULL || (a->addr == 1 && handle == NULL)) {
            a->kind = CLPROJ_ARG_NULL;
            a->size = size;
        } else if (handle && (mi = pm_get(clproj_mems, handle)) != NULL) {
            a->kind = mi->kind;
            a->mem = handle;
            a->what = mi->what;
            a->size = mi->size;
        } else if (handle && pm_get(clproj_samplers, handle)) {
            a->kind = CLPROJ_ARG_UNSUPPORTED;
            a->what = "sampler";
        } else if (a->addr == 1) { /* a pointer argument we never saw created */
            a->kind = CLPROJ_ARG_UNSUPPORTED;
            a->what = "untracked memory object";
        } else {
            a->kind = CLPROJ_ARG_SCALAR;
            if (a->size != size || a->data == NULL) {
                free(a->data);
                a->data = malloc(size ? size : 1);
            }
            a->size = size;
            memcpy(a->data, value, size);
        }
        if (a->kind != CLPROJ_ARG_SCALAR && a->data) {
            free(a->data);
            a->data = NULL;
        }
    }
    clproj_unlock();
    return err;
}

CL_API_ENTRY cl_int CL_API_CALL clSetKernelArgSVMPointer(cl_kernel k, cl_uint index,
                                                         const void *value) {
    REAL(clSetKernelArgSVMPointer, FAIL_INT);
    cl_int err = real_clSetKernelArgSVMPointer(k, index, value);
    if (err == CL_SUCCESS && !PASS) {
        clproj_lock();
        kern_info *ki = pm_get(clproj_kernels, k);
        if (ki && index < ki->nargs) {
            free(ki->args[index].data);
            ki->args[index].data = NULL;
            ki->args[index].kind = CLPROJ_ARG_UNSUPPORTED;
            ki->args[index].what = "svm";
        }
        clproj_unlock();
    }
    return err;
}

CL_API_ENTRY cl_int CL_API_CALL clSetKernelExecInfo(cl_kernel k, cl_kernel_exec_info param,
                                                    size_t size, const void *value) {
    REAL(clSetKernelExecInfo, FAIL_INT);
    cl_int err = real_clSetKernelExecInfo(k, param, size, value);
    if (err == CL_SUCCESS && !PASS) {
        clproj_lock();
        kern_info *ki = pm_get(clproj_kernels, k);
        if (ki) ki->uses_svm = 1;
        clproj_unlock();
    }
    return err;
}

/* ---------------- memory objects ---------------- */
/* `written`: the buffer may hold data from its creation on (host data, a sub-buffer's
 * parent, external memory); writes.c says why never-written buffers are told apart. */
static void track_mem(cl_mem m, int kind, const char *what, size_t size, cl_mem_flags flags,
                      size_t origin, size_t parent_size, cl_mem parent, int written) {
    mem_info *mi = calloc(1, sizeof *mi);
    mi->parent = parent;
    mi->written = written;
    mi->kind = kind;
    mi->what = what;
    mi->app_refs = 1;
    mi->size = size;
    mi->flags = flags;
    mi->origin = origin;
    mi->parent_size = parent_size;
    clproj_lock();
    free(pm_put_replace(clproj_mems, m, mi));
    clproj_unlock();
}

CL_API_ENTRY cl_mem CL_API_CALL clCreateBuffer(cl_context ctx, cl_mem_flags flags, size_t size,
                                               void *host_ptr, cl_int *errcode_ret) {
    REAL(clCreateBuffer, FAIL_PTR);
    clproj_init();
    cl_mem m = real_clCreateBuffer(ctx, flags, size, host_ptr, errcode_ret);
    if (m && !PASS)
        track_mem(m, CLPROJ_ARG_BUFFER, NULL, size, flags, 0, 0, NULL,
                  (flags & (CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR)) != 0);
    return m;
}

CL_API_ENTRY cl_mem CL_API_CALL clCreateBufferWithProperties(cl_context ctx,
                                                             const cl_mem_properties *props,
                                                             cl_mem_flags flags, size_t size,
                                                             void *host_ptr, cl_int *errcode_ret) {
    REAL(clCreateBufferWithProperties, FAIL_PTR);
    clproj_init();
    cl_mem m = real_clCreateBufferWithProperties(ctx, props, flags, size, host_ptr, errcode_ret);
    /* any property (external memory, ...) may bring data: such a buffer is never fresh */
    if (m && !PASS)
        track_mem(m, CLPROJ_ARG_BUFFER, NULL, size, flags, 0, 0, NULL,
                  (flags & (CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR)) != 0 ||
                      (props && props[0]));
    return m;
}

CL_API_ENTRY cl_mem CL_API_CALL clCreateSubBuffer(cl_mem parent, cl_mem_flags flags,
                                                  cl_buffer_create_type type, const void *info,
                                                  cl_int *errcode_ret) {
    REAL(clCreateSubBuffer, FAIL_PTR);
    cl_mem m = real_clCreateSubBuffer(parent, flags, type, info, errcode_ret);
    if (m && !PASS) {
        const cl_buffer_region *r = info;
        clproj_lock();
        mem_info *pi = pm_get(clproj_mems, parent);
        size_t psize = pi ? pi->size : 0;
        cl_mem_flags pflags = pi ? pi->flags : 0;
        clproj_unlock();
        cl_mem_flags access = CL_MEM_READ_WRITE | CL_MEM_READ_ONLY | CL_MEM_WRITE_ONLY;
        if (!(flags & access)) flags |= pflags & access; /* inherited from the parent */
        track_mem(m, CLPROJ_ARG_BUFFER, NULL, r->size, flags, r->origin, psize, parent, 1);
    }
    return m;
}

#define TRACK_UNSUPPORTED(m, what)                                              \
    do {                                                                        \
        if ((m) && !PASS) track_mem((m), CLPROJ_ARG_UNSUPPORTED, (what), 0, 0, 0, 0, NULL, 1); \
    } while (0)

/* An image is recorded as unsupported; one made over a buffer writes that buffer
 * (writes.c; clproj_mems_written passes while the shim itself calls). */
static void track_image(cl_mem m, const cl_image_desc *desc) {
    TRACK_UNSUPPORTED(m, "image");
    if (m && desc && desc->buffer) clproj_mems_written(1, &desc->buffer);
}

CL_API_ENTRY cl_mem CL_API_CALL clCreateImage(cl_context ctx, cl_mem_flags flags,
                                              const cl_image_format *fmt,
                                              const cl_image_desc *desc, void *host_ptr,
                                              cl_int *errcode_ret) {
    REAL(clCreateImage, FAIL_PTR);
    clproj_init();
    cl_mem m = real_clCreateImage(ctx, flags, fmt, desc, host_ptr, errcode_ret);
    track_image(m, desc);
    return m;
}

CL_API_ENTRY cl_mem CL_API_CALL clCreateImageWithProperties(cl_context ctx,
                                                            const cl_mem_properties *props,
                                                            cl_mem_flags flags,
                                                            const cl_image_format *fmt,
                                                            const cl_image_desc *desc,
                                                            void *host_ptr, cl_int *errcode_ret) {
    REAL(clCreateImageWithProperties, FAIL_PTR);
    clproj_init();
    cl_mem m = real_clCreateImageWithProperties(ctx, props, flags, fmt, desc, host_ptr,
                                                errcode_ret);
    track_image(m, desc);
    return m;
}

CL_API_ENTRY cl_mem CL_API_CALL clCreateImage2D(cl_context ctx, cl_mem_flags flags,
                                                const cl_image_format *fmt, size_t w, size_t h,
                                                size_t pitch, void *host_ptr,
                                                cl_int *errcode_ret) {
    REAL(clCreateImage2D, FAIL_PTR);
    clproj_init();
    cl_mem m = real_clCreateImage2D(ctx, flags, fmt, w, h, pitch, host_ptr, errcode_ret);
    TRACK_UNSUPPORTED(m, "image");
    return m;
}

CL_API_ENTRY cl_mem CL_API_CALL clCreateImage3D(cl_context ctx, cl_mem_flags flags,
                                                const cl_image_format *fmt, size_t w, size_t h,
                                                size_t d, size_t rp, size_t sp, void *host_ptr,
                                                cl_int *errcode_ret) {
    REAL(clCreateImage3D, FAIL_PTR);
    clproj_init();
    cl_mem m = real_clCreateImage3D(ctx, flags, fmt, w, h, d, rp, sp, host_ptr, errcode_ret);
    TRACK_UNSUPPORTED(m, "image");
    return m;
}

CL_API_ENTRY cl_mem CL_API_CALL clCreatePipe(cl_context ctx, cl_mem_flags flags, cl_uint pkt,
                                             cl_uint max_pkts, const cl_pipe_properties *props,
                                             cl_int *errcode_ret) {
    REAL(clCreatePipe, FAIL_PTR);
    clproj_init();
    cl_mem m = real_clCreatePipe(ctx, flags, pkt, max_pkts, props, errcode_ret);
    TRACK_UNSUPPORTED(m, "pipe");
    return m;
}

CL_API_ENTRY cl_int CL_API_CALL clRetainMemObject(cl_mem m) {
    REAL(clRetainMemObject, FAIL_INT);
    cl_int err = real_clRetainMemObject(m);
    if (err == CL_SUCCESS && !PASS) {
        clproj_lock();
        mem_info *mi = pm_get(clproj_mems, m);
        if (mi) mi->app_refs++;
        clproj_unlock();
    }
    return err;
}

CL_API_ENTRY cl_int CL_API_CALL clReleaseMemObject(cl_mem m) {
    REAL(clReleaseMemObject, FAIL_INT);
    cl_int err = real_clReleaseMemObject(m);
    if (err == CL_SUCCESS && !PASS) {
        clproj_lock();
        mem_info *mi = pm_get(clproj_mems, m);
        if (mi && --mi->app_refs <= 0) free(pm_del(clproj_mems, m));
        clproj_unlock();
    }
    return err;
}

CL_API_ENTRY cl_sampler CL_API_CALL clCreateSampler(cl_context ctx, cl_bool norm,
                                                    cl_addressing_mode am, cl_filter_mode fm,
                                                    cl_int *errcode_ret) {
    REAL(clCreateSampler, FAIL_PTR);
    clproj_init();
    cl_sampler s = real_clCreateSampler(ctx, norm, am, fm, errcode_ret);
    if (s && !PASS) {
        clproj_lock();
        pm_put(clproj_samplers, s, (void *)1);
        clproj_unlock();
    }
    return s;
}

CL_API_ENTRY cl_sampler CL_API_CALL clCreateSamplerWithProperties(
    cl_context ctx, const cl_sampler_properties *props, cl_int *errcode_ret) {
    REAL(clCreateSamplerWithProperties, FAIL_PTR);
    clproj_init();
    cl_sampler s = real_clCreateSamplerWithProperties(ctx, props, errcode_ret);
    if (s && !PASS) {
        clproj_lock();
        pm_put(clproj_samplers, s, (void *)1);
        clproj_unlock();
    }
    return s;
}
