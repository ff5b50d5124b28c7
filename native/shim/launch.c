/* clEnqueueNDRangeKernel / clEnqueueTask: count every launch and time a sample of them in C
 * (see stats_ticket); call Python only for the launches that are recorded. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"
#include "identity.h"

#define PASS (clproj_in_shim || clproj_cfg.disabled)

static int name_selected(const char *name) {
    if (!clproj_cfg.kernel_filter) return 1;
    for (char **p = clproj_cfg.kernel_filter; *p; p++)
        if (strcmp(*p, name) == 0) return 1;
    return 0;
}

/* Signature of a launch: intercept.identity.signature_stream (program, kernel, NDRange,
 * by-value arguments in argument order), hashed by identity.c. */
static uint64_t launch_signature(kern_info *ki, cl_uint dim, const size_t *gsz, const size_t *lsz) {
    uint64_t h = clproj_launch_key_head(ki->prog ? ki->prog->hash : 0, ki->name, dim, gsz, lsz);
    for (cl_uint i = 0; i < ki->nargs; i++)
        if (ki->args[i].kind == CLPROJ_ARG_SCALAR)
            h = clproj_launch_key_scalar(h, ki->args[i].data, ki->args[i].size);
    return clproj_launch_key_end(h);
}

/* Snapshot of everything Python needs (under the lock; Python runs without it). */
static clproj_launch *build_launch(kern_info *ki, cl_command_queue q, cl_device_id dev,
                                   cl_kernel k, cl_uint dim, const size_t *off, const size_t *gsz,
                                   const size_t *lsz, cl_uint nw, const cl_event *wl) {
    static CLPROJ_TLS char reason[160];
    clproj_launch *L = calloc(1, sizeof *L);
    L->queue = q;
    L->kernel = k;
    L->device = dev;
    L->kernel_name = strdup(ki->name);
    prog_info *p = ki->prog;
    if (p) p->refs++;
    L->source = p ? p->source : NULL;
    L->options = strdup(p && p->options ? p->options : "");
    L->binary_kind = p ? p->binary_kind : "binary";
    L->not_emulatable = p ? p->reason : "not emulatable: program not seen by the shim";
    L->work_dim = dim;
    L->size_queries = clproj_size_queries();
    for (cl_uint i = 0; i < dim && i < 3; i++) {
        L->global_size[i] = gsz[i];
        if (lsz) L->local_size[i] = lsz[i];
        if (off) L->offset[i] = off[i];
    }
    L->has_local = lsz != NULL;
    L->has_offset = off != NULL;
    L->nargs = ki->nargs;
    L->args = calloc(ki->nargs ? ki->nargs : 1, sizeof *L->args);
    for (cl_uint i = 0; i < ki->nargs; i++) {
        karg *a = &ki->args[i];
        clproj_arg *o = &L->args[i];
        o->kind = a->kind == CLPROJ_ARG_UNSET ? CLPROJ_ARG_NULL : a->kind;
        o->size = a->size;
        o->what = a->what;
        if (a->kind == CLPROJ_ARG_SCALAR) {
            unsigned char *d = malloc(a->size ? a->size : 1);
            memcpy(d, a->data, a->size);
            o->data = d;
        } else if (a->kind == CLPROJ_ARG_BUFFER) {
            mem_info *mi = pm_get(clproj_mems, a->mem);
            o->mem = a->mem;
            o->fresh = clproj_mem_fresh(a->mem);
            if (mi) {
                o->size = mi->size;
                o->flags = mi->flags;
                o->origin = mi->origin;
                o->parent_size = mi->parent_size;
            }
        } else if (a->kind == CLPROJ_ARG_UNSUPPORTED && !L->not_emulatable) {
            snprintf(reason, sizeof reason, "not emulatable: %s argument %u",
                     a->what ? a->what : "unsupported", i);
            L->not_emulatable = reason;
        }
    }
    if (ki->uses_svm && !L->not_emulatable)
        L->not_emulatable = "not emulatable: SVM pointers passed with clSetKernelExecInfo";
    if (L->not_emulatable) L->not_emulatable = strdup(L->not_emulatable);
    L->n_wait = nw;
    L->wait = (void *const *)wl;
    L->verify = clproj_cfg.verify;
    return L;
}

static void free_launch(clproj_launch *L, prog_info *p) {
    for (uint32_t i = 0; i < L->nargs; i++) free((void *)L->args[i].data);
    free(L->args);
    free((void *)L->kernel_name);
    free((void *)L->options);
    free((void *)L->not_emulatable);
    clproj_lock();
    prog_unref(p);
    clproj_unlock();
    free(L);
}

typedef cl_int (*ndrange_fn)(cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *,
                             const size_t *, cl_uint, const cl_event *, cl_event *);
typedef cl_int (*task_fn)(cl_command_queue, cl_kernel, cl_uint, const cl_event *, cl_event *);

static cl_int forward(ndrange_fn nd, task_fn task, cl_command_queue q, cl_kernel k, cl_uint dim,
                      const size_t *off, const size_t *gsz, const size_t *lsz, cl_uint nw,
                      const cl_event *wl, cl_event *ev) {
    return task ? task(q, k, nw, wl, ev) : nd(q, k, dim, off, gsz, lsz, nw, wl, ev);
}

/* The profiling twin of an app queue (same context and device), created at its first timed
 * launch; NULL when it cannot be had (the launch is then not timed). */
static cl_command_queue twin_of(cl_command_queue q, queue_info *qi) {
    cl_command_queue t = __atomic_load_n(&qi->twin, __ATOMIC_ACQUIRE);
    if (t || qi->twin_failed) return t;
    REAL(clGetCommandQueueInfo, return NULL);
    REAL(clCreateCommandQueue, return NULL);
    REAL(clReleaseCommandQueue, return NULL);
    cl_context ctx = NULL;
    cl_int err = CL_SUCCESS;
    clproj_in_shim = 1;
    if (real_clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL) == CL_SUCCESS)
        t = real_clCreateCommandQueue(ctx, qi->device, CL_QUEUE_PROFILING_ENABLE, &err);
    clproj_in_shim = 0;
    cl_command_queue extra = NULL;
    clproj_lock();
    if (!t) {
        qi->twin_failed = 1;
    } else if (qi->twin) { /* another thread was first */
        extra = t;
    } else {
        pm_put(clproj_twins, t, q);
        __atomic_store_n(&qi->twin, t, __ATOMIC_RELEASE);
    }
    t = qi->twin;
    clproj_unlock();
    if (extra) {
        clproj_in_shim = 1;
        real_clReleaseCommandQueue(extra);
        clproj_in_shim = 0;
    }
    if (!t) clproj_once_log("twin", "cannot create a profiling queue; launches are not timed");
    return t;
}

#define NOT_DONE 1 /* not an OpenCL code: the caller launches on the app's queue itself */

/* A timed launch on the twin, ordered exactly as on the app's queue: a marker on the app's
 * queue (after everything before it, or after the app's wait list), the kernel on the twin
 * waiting for that marker, a barrier on the app's queue waiting for the kernel (everything
 * after it waits for the kernel). The app gets the kernel's event if it asked for one;
 * clGetEventInfo/clGetEventProfilingInfo (objects.c) report it as the app queue's, without
 * profiling. Any failure before the kernel is enqueued returns NOT_DONE. */
static cl_int twin_launch(ndrange_fn nd, task_fn task, cl_command_queue q, cl_command_queue twin,
                          cl_kernel k, cl_uint dim, const size_t *off, const size_t *gsz,
                          const size_t *lsz, cl_uint nw, const cl_event *wl, cl_event *ev,
                          cl_event *mine) {
    REAL(clEnqueueMarkerWithWaitList, return NOT_DONE);
    REAL(clEnqueueBarrierWithWaitList, return NOT_DONE);
    REAL(clFlush, return NOT_DONE);
    REAL(clReleaseEvent, return NOT_DONE);
    REAL(clRetainEvent, return NOT_DONE);
    REAL(clWaitForEvents, return NOT_DONE);
    cl_event m = NULL, kev = NULL;
    clproj_in_shim = 1;
    cl_int err = real_clEnqueueMarkerWithWaitList(q, nw, wl, &m);
    if (err == CL_SUCCESS) {
        err = forward(nd, task, twin, k, dim, off, gsz, lsz, 1, &m, &kev);
        real_clReleaseEvent(m);
    }
    if (err != CL_SUCCESS) { /* the app's own launch reports the real error */
        clproj_in_shim = 0;
        return NOT_DONE;
    }
    /* a failed barrier would let later commands overtake the kernel: wait instead */
    if (real_clEnqueueBarrierWithWaitList(q, 1, &kev, NULL) != CL_SUCCESS)
        real_clWaitForEvents(1, &kev);
    real_clFlush(twin); /* the app's queue now waits for it: it must be submitted */
    if (ev) {
        *ev = kev;
        real_clRetainEvent(kev); /* one reference for the app, one for us */
    }
    clproj_in_shim = 0;
    *mine = kev;
    return CL_SUCCESS;
}

/* Forward a launch that is to be timed; returns the real error code. *mine (when not NULL)
 * is an event of the launch on a profiling queue that we hold a reference to. */
static cl_int forward_timed(ndrange_fn nd, task_fn task, cl_command_queue q, queue_info *qi,
                            cl_kernel k, cl_uint dim, const size_t *off, const size_t *gsz,
                            const size_t *lsz, cl_uint nw, const cl_event *wl, cl_event *ev,
                            cl_event *mine) {
    *mine = NULL;
    if (qi->app_profiling) { /* the app's own queue times it */
        cl_event own = NULL;
        cl_event *evp = ev ? ev : &own;
        cl_int err = forward(nd, task, q, k, dim, off, gsz, lsz, nw, wl, evp);
        if (err == CL_SUCCESS && *evp) {
            if (ev) {
                REAL(clRetainEvent, return err);
                clproj_in_shim = 1;
                real_clRetainEvent(*ev);
                clproj_in_shim = 0;
            }
            *mine = *evp;
        }
        return err;
    }
    /* While the app holds a user event it has not set, it may set it to an error, and PoCL 3.1
     * aborts when such an error reaches a barrier that waits across queues (the twin's order
     * back to the app's queue): such launches run on the app's queue, untimed. */
    int user_pending = __atomic_load_n(&clproj_pending_user_events, __ATOMIC_ACQUIRE) > 0;
    cl_command_queue twin = user_pending ? NULL : twin_of(q, qi);
    if (twin) {
        cl_int err = twin_launch(nd, task, q, twin, k, dim, off, gsz, lsz, nw, wl, ev, mine);
        if (err != NOT_DONE) return err;
    }
    return forward(nd, task, q, k, dim, off, gsz, lsz, nw, wl, ev);
}

/* Per-thread cache of the last (kernel, queue) lookup. Without recording a launch needs only
 * the kernel's statistics slot and whether the queue is ours, and launch-heavy apps launch
 * the same kernel on the same queue over and over: the global lock and two hash lookups per
 * launch were a measurable share of the observe overhead. The entry is valid while
 * clproj_table_gen (bumped on every change of the kernel or queue table) is unchanged; an
 * app cannot legally release the kernel or queue it is launching with. */
static CLPROJ_TLS struct {
    cl_kernel k;
    cl_command_queue q;
    uint64_t gen;
    int stat;
    queue_info *qi;
    uint64_t *tickets; /* NULL: no statistics slot (the slow path handles it) */
} last;

static cl_int launch_untimed(ndrange_fn nd, task_fn task, cl_command_queue q, cl_kernel k,
                             cl_uint dim, const size_t *off, const size_t *gsz, const size_t *lsz,
                             cl_uint nw, const cl_event *wl, cl_event *ev, int stat, int rest) {
    cl_int err = forward(nd, task, q, k, dim, off, gsz, lsz, nw, wl, ev);
    if (err != CL_SUCCESS) stats_failed(stat, rest);
    return err;
}

static cl_int launch_timed(ndrange_fn nd, task_fn task, cl_command_queue q, queue_info *qi,
                           cl_kernel k, cl_uint dim, const size_t *off, const size_t *gsz,
                           const size_t *lsz, cl_uint nw, const cl_event *wl, cl_event *ev,
                           int stat, int rest) {
    cl_event mine = NULL;
    cl_int err = forward_timed(nd, task, q, qi, k, dim, off, gsz, lsz, nw, wl, ev, &mine);
    if (err != CL_SUCCESS) stats_failed(stat, rest);
    else if (mine) pending_add(mine, stat, rest);
    return err;
}

/* The common case, inlined into the entry points: not recording, same kernel and queue as
 * this thread's last launch, not drawn for timing. One atomic increment, then the real call. */
static inline __attribute__((always_inline)) cl_int
fast_launch(ndrange_fn nd, task_fn task, cl_command_queue q, cl_kernel k, cl_uint dim,
            const size_t *off, const size_t *gsz, const size_t *lsz, cl_uint nw,
            const cl_event *wl, cl_event *ev, int *done) {
    *done = 0;
    if (clproj_cfg.recording || last.k != k || last.q != q || !last.tickets ||
        last.gen != __atomic_load_n(&clproj_table_gen, __ATOMIC_ACQUIRE))
        return CL_SUCCESS;
    *done = 1;
    int stat = last.stat;
    queue_info *qi = last.qi;
    uint64_t t = __atomic_fetch_add(last.tickets, 1, __ATOMIC_RELAXED);
    int rest = t >= clproj_cfg.timing_first;
    if (clproj_cfg.timing && qi && clproj_ticket_timed(t))
        return launch_timed(nd, task, q, qi, k, dim, off, gsz, lsz, nw, wl, ev, stat, rest);
    cl_int err = forward(nd, task, q, k, dim, off, gsz, lsz, nw, wl, ev);
    if (err != CL_SUCCESS) stats_failed(stat, rest);
    return err;
}

/* Does the launch wait for a user event that has not completed? Then the app completes it
 * only after this call returns (pyopencl's test_event_set_callback does exactly that), and a
 * recorded launch, whose inputs are read before it and which is waited for after it, would
 * wait for ever. Such a launch is run without recording; a later one of the same signature is
 * recorded. Called without the shim's lock: clGetEventInfo may take the driver's. */
static int waits_on_pending_user_event(cl_uint nw, const cl_event *wl) {
    REAL(clGetEventInfo, return 0);
    for (cl_uint i = 0; wl && i < nw; i++) {
        cl_command_type type = 0;
        cl_int status = CL_COMPLETE;
        if (real_clGetEventInfo(wl[i], CL_EVENT_COMMAND_TYPE, sizeof type, &type, NULL) !=
                CL_SUCCESS ||
            type != CL_COMMAND_USER)
            continue;
        if (real_clGetEventInfo(wl[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status,
                                NULL) == CL_SUCCESS &&
            status > CL_COMPLETE)
            return 1;
    }
    return 0;
}

static cl_int launch(ndrange_fn nd, task_fn task, cl_command_queue q, cl_kernel k, cl_uint dim,
                     const size_t *off, const size_t *gsz, const size_t *lsz, cl_uint nw,
                     const cl_event *wl, cl_event *ev) {
    static const size_t one[1] = {1};
    const size_t *rgsz = task ? one : gsz, *rlsz = task ? one : lsz;
    cl_uint rdim = task ? 1 : dim;
    int stat = -1, record = 0;
    queue_info *qi = NULL;
    clproj_launch *L = NULL;
    prog_info *prog = NULL;
    int user_wait = clproj_cfg.recording && nw ? waits_on_pending_user_event(nw, wl) : 0;
    clproj_lock();
    kern_info *ki = clproj_kernels ? pm_get(clproj_kernels, k) : NULL;
    qi = clproj_queues ? pm_get(clproj_queues, q) : NULL;
    cl_device_id dev = qi ? qi->device : NULL;
    if (ki) {
        if (ki->stat_idx < 0 || ki->stat_device != dev) {
            ki->stat_idx = stats_index(ki->name, dev);
            ki->stat_device = dev;
        }
        stat = ki->stat_idx;
        if (qi && clproj_cfg.recording && !user_wait && !clproj_python_failed() && rdim >= 1 &&
            rdim <= 3 && rgsz && name_selected(ki->name)) {
            if (clproj_cfg.which_all) {
                record = 1;
            } else {
                uint64_t sig = launch_signature(ki, rdim, rgsz, rlsz);
                if (!pm_get(clproj_signatures, (void *)(uintptr_t)sig)) {
                    pm_put(clproj_signatures, (void *)(uintptr_t)sig, (void *)1);
                    record = 1;
                }
            }
        }
        if (!clproj_cfg.recording) {
            last.k = k;
            last.q = q;
            last.gen = clproj_table_gen; /* read under the lock that guards its changes */
            last.stat = stat;
            last.qi = qi;
            last.tickets = stats_tickets(stat);
        }
    }
    if (record) {
        L = build_launch(ki, q, dev, k, rdim, task ? NULL : off, rgsz, rlsz, nw, wl);
        prog = ki->prog;
    }
    if (ki && clproj_cfg.recording) /* the kernel may write every buffer it is given */
        for (cl_uint i = 0; i < ki->nargs; i++)
            if (ki->args[i].kind == CLPROJ_ARG_BUFFER) clproj_mem_written(ki->args[i].mem);
    clproj_unlock();
    stats_name_device(stat);

    int rest = 0;
    int timed = stats_ticket(stat, &rest) && clproj_cfg.timing && qi != NULL;

    /* A launch to record: Python snapshots its inputs first. Python may decline it (project
     * mode's reuse cache answers it, or Python is not there); then it is launched like any
     * other, since waiting for it as below would serialise a launch-heavy app: LU's 2046
     * launches each waited for cost it 0.6 s (PoCL's workers slept and woke every time). */
    int handle = 0;
    if (L) {
        clproj_in_shim = 1;
        if (clproj_python_start()) handle = clproj_py_pre_launch(L);
        clproj_in_shim = 0;
        if (handle <= 0) {
            free_launch(L, prog);
            L = NULL;
        }
    }
    if (!L) return timed ? launch_timed(nd, task, q, qi, k, dim, off, gsz, lsz, nw, wl, ev, stat,
                                        rest)
                         : launch_untimed(nd, task, q, k, dim, off, gsz, lsz, nw, wl, ev, stat,
                                          rest);

    /* A recorded launch. Python published its record before the launch (pre_launch); its
     * time joins the record when the launch completes, found as any timed launch's is
     * (pending_harvest) and taken by Python later (clproj_take_record_times): the app is not
     * held here, so an app that abandons a kernel that never ends exits as it does natively.
     * With --verify the launch is waited for, since its outputs are read right after it. */
    cl_event mine = NULL;
    cl_int err = forward_timed(nd, task, q, qi, k, dim, off, gsz, lsz, nw, wl, ev, &mine);
    int64_t time_ns = -1;
    if (err != CL_SUCCESS) stats_failed(stat, rest);
    if (err == CL_SUCCESS && mine && !clproj_cfg.verify) {
        pending_add_record(mine, stat, rest, handle);
        free_launch(L, prog);
        return err;
    }
    if (err == CL_SUCCESS && mine) {
        REAL(clWaitForEvents, return err);
        REAL(clGetEventProfilingInfo, return err);
        REAL(clReleaseEvent, return err);
        clproj_in_shim = 1;
        /* A pyopencl app's thread holds the GIL here: waiting with it stopped every Python
         * thread of the app for the kernel's run, project mode's record writer among them
         * (the record it was handed before the launch appeared only after the launch). */
        void *gil = clproj_release_gil();
        cl_int waited = real_clWaitForEvents(1, &mine);
        clproj_reacquire_gil(gil);
        if (waited == CL_SUCCESS) {
            cl_ulong t0 = 0, t1 = 0;
            if (real_clGetEventProfilingInfo(mine, CL_PROFILING_COMMAND_START, sizeof t0, &t0,
                                             NULL) == CL_SUCCESS &&
                real_clGetEventProfilingInfo(mine, CL_PROFILING_COMMAND_END, sizeof t1, &t1,
                                             NULL) == CL_SUCCESS &&
                t1 >= t0) {
                time_ns = (int64_t)(t1 - t0);
                stats_add_time(stat, (uint64_t)time_ns, rest);
            }
        }
        real_clReleaseEvent(mine);
        clproj_in_shim = 0;
    }
    clproj_in_shim = 1;
    clproj_py_post_launch(handle, L, err, time_ns);
    clproj_in_shim = 0;
    free_launch(L, prog);
    return err;
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k,
                                                       cl_uint dim, const size_t *off,
                                                       const size_t *gsz, const size_t *lsz,
                                                       cl_uint nw, const cl_event *wl,
                                                       cl_event *ev) {
    REAL(clEnqueueNDRangeKernel, FAIL_INT);
    if (PASS) return real_clEnqueueNDRangeKernel(q, k, dim, off, gsz, lsz, nw, wl, ev);
    int done;
    cl_int err =
        fast_launch(real_clEnqueueNDRangeKernel, NULL, q, k, dim, off, gsz, lsz, nw, wl, ev, &done);
    if (done) return err;
    return launch(real_clEnqueueNDRangeKernel, NULL, q, k, dim, off, gsz, lsz, nw, wl, ev);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueTask(cl_command_queue q, cl_kernel k, cl_uint nw,
                                              const cl_event *wl, cl_event *ev) {
    REAL(clEnqueueTask, FAIL_INT);
    if (PASS) return real_clEnqueueTask(q, k, nw, wl, ev);
    int done;
    cl_int err = fast_launch(NULL, real_clEnqueueTask, q, k, 1, NULL, NULL, NULL, nw, wl, ev, &done);
    if (done) return err;
    return launch(NULL, real_clEnqueueTask, q, k, 1, NULL, NULL, NULL, nw, wl, ev);
}
