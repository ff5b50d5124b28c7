/* Object tracking, per-kernel statistics, pending profiling events, summary at exit.
 * One global mutex guards every table; it is never held while calling OpenCL or Python. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "shim.h"
#include "../clproj_settings.h"

shim_config clproj_cfg;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
void clproj_lock(void) { pthread_mutex_lock(&lock); }
void clproj_unlock(void) { pthread_mutex_unlock(&lock); }

/* ---- open-addressing pointer map ---- */
struct ptrmap {
    size_t cap, used, live;
    int bumps_gen; /* kernel and queue tables: changes invalidate launch.c's lookup cache */
    const void **keys; /* NULL empty, TOMB deleted */
    void **vals;
};
static const char tomb_c;
#define TOMB ((const void *)&tomb_c)

static ptrmap *pm_new(void) {
    ptrmap *m = calloc(1, sizeof *m);
    m->cap = 64;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->vals = calloc(m->cap, sizeof *m->vals);
    return m;
}
static size_t pm_hash(const void *k) {
    uint64_t x = (uint64_t)(uintptr_t)k;
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33;
    return (size_t)x;
}
uint64_t clproj_table_gen = 1;
static void pm_changed(ptrmap *m) {
    if (m->bumps_gen) __atomic_add_fetch(&clproj_table_gen, 1, __ATOMIC_RELEASE);
}
static void pm_grow(ptrmap *m) {
    size_t oc = m->cap;
    const void **ok = m->keys;
    void **ov = m->vals;
    m->cap = m->live * 4 > oc ? oc * 2 : oc;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->vals = calloc(m->cap, sizeof *m->vals);
    m->used = m->live = 0;
    for (size_t i = 0; i < oc; i++)
        if (ok[i] && ok[i] != TOMB) pm_put(m, ok[i], ov[i]);
    free(ok);
    free(ov);
}
void *pm_get(ptrmap *m, const void *key) {
    size_t mask = m->cap - 1, i = pm_hash(key) & mask;
    while (m->keys[i]) {
        if (m->keys[i] == key) return m->vals[i];
        i = (i + 1) & mask;
    }
    return NULL;
}
void pm_put(ptrmap *m, const void *key, void *val) {
    pm_changed(m);
    if ((m->used + 1) * 2 > m->cap) pm_grow(m);
    size_t mask = m->cap - 1, i = pm_hash(key) & mask, tomb = (size_t)-1;
    while (m->keys[i]) {
        if (m->keys[i] == key) { m->vals[i] = val; return; }
        if (m->keys[i] == TOMB && tomb == (size_t)-1) tomb = i;
        i = (i + 1) & mask;
    }
    if (tomb != (size_t)-1) i = tomb; else m->used++;
    m->keys[i] = key;
    m->vals[i] = val;
    m->live++;
}
void *pm_put_replace(ptrmap *m, const void *key, void *val) {
    void *old = pm_del(m, key);
    pm_put(m, key, val);
    return old;
}
void *pm_del(ptrmap *m, const void *key) {
    size_t mask = m->cap - 1, i = pm_hash(key) & mask;
    while (m->keys[i]) {
        if (m->keys[i] == key) {
            void *v = m->vals[i];
            pm_changed(m);
            m->keys[i] = TOMB;
            m->vals[i] = NULL;
            m->live--;
            return v;
        }
        i = (i + 1) & mask;
    }
    return NULL;
}
static void pm_free_all(ptrmap *m, void (*fn)(void *)) {
    if (!m) return;
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i] && m->keys[i] != TOMB && fn) fn(m->vals[i]);
    free(m->keys);
    free(m->vals);
    free(m);
}

ptrmap *clproj_programs, *clproj_kernels, *clproj_mems, *clproj_queues, *clproj_samplers,
    *clproj_signatures, *clproj_twins;

void prog_unref(prog_info *p) {
    if (p && --p->refs == 0) {
        free(p->source);
        free(p->options);
        free(p);
    }
}
void kern_free(kern_info *k) {
    for (cl_uint i = 0; i < k->nargs; i++) free(k->args[i].data);
    free(k->args);
    free(k->name);
    prog_unref(k->prog);
    free(k);
}

/* ---- once-only log ---- */
void clproj_once_log(const char *key, const char *msg) {
    static char seen[32][48];
    static int n = 0;
    clproj_lock();
    for (int i = 0; i < n; i++)
        if (strcmp(seen[i], key) == 0) { clproj_unlock(); return; }
    if (n < 32) snprintf(seen[n++], sizeof seen[0], "%s", key);
    clproj_unlock();
    clproj_log(msg);
}
void clproj_log(const char *msg) {
    if (!clproj_std_fd_closed_at_start(2)) fprintf(stderr, "clproj: %s\n", msg); /* else: an app's file */
}

/* ---- per-kernel statistics ---- */
#define MAX_STATS 1024
typedef struct {
    char kernel[128];
    char device[96];
    void *dev;
    int named; /* device[] holds the name (set once, under the lock) */
    uint64_t tickets, failed, rest_failed; /* launches attempted; refused ones */
    uint64_t timed, total_ns;              /* timed launches and their device time */
    uint64_t rest_timed, rest_ns;          /* the same, after the first timing_first */
} kstat;
static uint64_t st_launches(const kstat *s) { return s->tickets - s->failed; }
static uint64_t st_rest_launches(const kstat *s) {
    uint64_t first = s->tickets < clproj_cfg.timing_first ? s->tickets : clproj_cfg.timing_first;
    return s->tickets - first - s->rest_failed;
}
static kstat stats[MAX_STATS];
static int nstats = 0;

int stats_index(const char *kernel, cl_device_id device) {
    for (int i = 0; i < nstats; i++)
        if (stats[i].dev == device && strcmp(stats[i].kernel, kernel) == 0) return i;
    if (nstats >= MAX_STATS) return -1;
    kstat *s = &stats[nstats];
    snprintf(s->kernel, sizeof s->kernel, "%s", kernel);
    s->dev = device;
    s->device[0] = 0; /* named by stats_name_device, outside the lock */
    s->named = 0;
    return nstats++;
}
/* The name is read at the first launch, not at exit: by then the app may have released the
 * device (a sub-device), and PoCL crashes on a query of a released one. */
void stats_name_device(int idx) {
    if (idx < 0 || __atomic_load_n(&stats[idx].named, __ATOMIC_ACQUIRE)) return;
    char name[sizeof stats[idx].device];
    clproj_device_str(stats[idx].dev, CL_DEVICE_NAME, name, sizeof name);
    clproj_lock();
    if (!stats[idx].named) {
        memcpy(stats[idx].device, name, sizeof name);
        __atomic_store_n(&stats[idx].named, 1, __ATOMIC_RELEASE);
    }
    clproj_unlock();
}
int stats_ticket(int idx, int *rest) {
    *rest = 0;
    if (idx < 0) return 0;
    uint64_t t = __atomic_fetch_add(&stats[idx].tickets, 1, __ATOMIC_RELAXED);
    *rest = t >= clproj_cfg.timing_first;
    return clproj_ticket_timed(t);
}
uint64_t *stats_tickets(int idx) { return idx >= 0 ? &stats[idx].tickets : NULL; }
void stats_failed(int idx, int rest) {
    if (idx < 0) return;
    __atomic_add_fetch(&stats[idx].failed, 1, __ATOMIC_RELAXED);
    if (rest) __atomic_add_fetch(&stats[idx].rest_failed, 1, __ATOMIC_RELAXED);
}
void stats_add_time(int idx, uint64_t ns, int rest) {
    if (idx < 0) return;
    __atomic_add_fetch(&stats[idx].timed, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&stats[idx].total_ns, ns, __ATOMIC_RELAXED);
    if (rest) {
        __atomic_add_fetch(&stats[idx].rest_timed, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&stats[idx].rest_ns, ns, __ATOMIC_RELAXED);
    }
}

/* Device time of all launches of a kernel, estimated stratum by stratum: the first
 * timing_first launches (all timed; they carry the warm-up) and the sampled rest, each
 * scaled by launches / timed. Exact when every launch was timed. A stratum without a
 * timed launch borrows the other's mean. */
static uint64_t stats_estimate(const kstat *s) {
    uint64_t launches = st_launches(s), rest_launches = st_rest_launches(s);
    uint64_t fl = launches - rest_launches, ft = s->timed - s->rest_timed;
    uint64_t fns = s->total_ns - s->rest_ns;
    if (s->timed == launches) return s->total_ns;
    double fm = ft ? (double)fns / ft : -1.0;
    double rm = s->rest_timed ? (double)s->rest_ns / s->rest_timed : -1.0;
    if (fm < 0) fm = rm;
    if (rm < 0) rm = fm;
    if (fm < 0) return 0;
    double first = ft == fl ? (double)fns : fm * fl;
    double rest = s->rest_timed == rest_launches ? (double)s->rest_ns : rm * rest_launches;
    return (uint64_t)(first + rest + 0.5);
}

/* ---- pending profiling events (observe mode timing) ---- */
#define MAX_PENDING 8192
#define HARVEST_AT 128
/* record: the Python handle of a recorded launch whose time its record awaits (0: none) */
typedef struct { cl_event ev; int stat; int rest; int32_t record; } pend;
static pend pending[MAX_PENDING];
static int npending = 0;
static pthread_mutex_t harvest_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- recorded launches' times, handed to Python (clproj_take_record_times) ----
 * A recorded launch is not waited for (an app that abandons a kernel at exit, or never
 * waits for it, must not wait in clproj): its event joins the pending ones, and the time
 * found when it completes waits here until Python takes it. */
typedef struct { int32_t handle; int64_t ns; } record_time;
static record_time *record_times = NULL;
static int nrecord_times = 0, record_times_cap = 0;

static void record_time_done(int32_t handle, int64_t ns) { /* under clproj_lock */
    if (nrecord_times == record_times_cap) {
        int cap = record_times_cap ? 2 * record_times_cap : 64;
        record_time *grown = realloc(record_times, sizeof *grown * (size_t)cap);
        if (!grown) return; /* the record keeps no time: nothing else is lost */
        record_times = grown;
        record_times_cap = cap;
    }
    record_times[nrecord_times].handle = handle;
    record_times[nrecord_times].ns = ns;
    nrecord_times++;
}

int32_t clproj_take_record_times(int32_t *handles, int64_t *ns, int32_t max) {
    clproj_lock();
    int32_t n = nrecord_times < max ? nrecord_times : max;
    for (int32_t i = 0; i < n; i++) {
        handles[i] = record_times[i].handle;
        ns[i] = record_times[i].ns;
    }
    if (n > 0) {
        memmove(record_times, record_times + n,
                sizeof *record_times * (size_t)(nrecord_times - n));
        nrecord_times -= n;
    }
    clproj_unlock();
    return n;
}

void clproj_harvest_now(void) { pending_harvest(0); }

static void pending_push(cl_event ev, int stat_idx, int rest, int32_t record) {
    int full = 0, harvest = 0;
    clproj_lock();
    if (npending < MAX_PENDING) {
        pending[npending].ev = ev;
        pending[npending].stat = stat_idx;
        pending[npending].rest = rest;
        pending[npending].record = record;
        npending++;
        harvest = npending >= HARVEST_AT;
    } else {
        full = 1;
        if (record) record_time_done(record, -1);
    }
    clproj_unlock();
    if (full) {
        REAL(clReleaseEvent, return);
        real_clReleaseEvent(ev);
        clproj_once_log("pending", "too many kernels in flight; some launches are not timed");
    }
    if (harvest) pending_harvest(0);
}

void pending_add(cl_event ev, int stat_idx, int rest) { pending_push(ev, stat_idx, rest, 0); }

void pending_add_record(cl_event ev, int stat_idx, int rest, int32_t handle) {
    pending_push(ev, stat_idx, rest, handle);
}

/* Collect the times of completed events; the others stay pending. `block` waits for the
 * harvest lock only, never for a kernel: an app may abandon a kernel that never ends (at
 * exit, or by releasing its queue), and natively nothing waits for it. */
void pending_harvest(int block) {
    REAL(clGetEventInfo, return);
    REAL(clGetEventProfilingInfo, return);
    REAL(clReleaseEvent, return);
    /* clFinish harvests: with sampled timing there is usually nothing to do */
    if (__atomic_load_n(&npending, __ATOMIC_RELAXED) == 0) return;
    if (pthread_mutex_trylock(&harvest_lock) != 0) {
        if (!block) return;
        pthread_mutex_lock(&harvest_lock);
    }
    int saved = clproj_in_shim;
    clproj_in_shim = 1;
    clproj_lock();
    int n = npending;
    pend *batch = malloc(sizeof(pend) * (n ? n : 1));
    memcpy(batch, pending, sizeof(pend) * n);
    npending = 0;
    clproj_unlock();
    int keep = 0;
    for (int i = 0; i < n; i++) {
        cl_int status = CL_QUEUED;
        if (real_clGetEventInfo(batch[i].ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status,
                                &status, NULL) != CL_SUCCESS)
            status = -1;
        if (status == CL_COMPLETE || status < 0) { /* done; a failed command has no time */
            cl_ulong t0 = 0, t1 = 0;
            int64_t ns = -1;
            if (status == CL_COMPLETE &&
                real_clGetEventProfilingInfo(batch[i].ev, CL_PROFILING_COMMAND_START, sizeof t0,
                                             &t0, NULL) == CL_SUCCESS &&
                real_clGetEventProfilingInfo(batch[i].ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1,
                                             NULL) == CL_SUCCESS &&
                t1 >= t0) {
                stats_add_time(batch[i].stat, t1 - t0, batch[i].rest);
                ns = (int64_t)(t1 - t0);
            }
            if (batch[i].record) {
                clproj_lock();
                record_time_done(batch[i].record, ns);
                clproj_unlock();
            }
            real_clReleaseEvent(batch[i].ev);
        } else {
            batch[keep++] = batch[i];
        }
    }
    if (keep) {
        clproj_lock();
        int room = MAX_PENDING - npending;
        if (keep > room) keep = room;
        memmove(pending + keep, pending, sizeof(pend) * npending);
        memcpy(pending, batch, sizeof(pend) * keep);
        npending += keep;
        clproj_unlock();
    }
    free(batch);
    clproj_in_shim = saved;
    pthread_mutex_unlock(&harvest_lock);
}

/* ---- helpers called from Python ---- */
int32_t clproj_read_mem(void *queue, void *mem, size_t size, void *dst, uint32_t n_wait,
                        void *const *wait) {
    REAL(clEnqueueReadBuffer, FAIL_INT);
    int saved = clproj_in_shim;
    clproj_in_shim = 1;
    cl_int err = real_clEnqueueReadBuffer((cl_command_queue)queue, (cl_mem)mem, CL_TRUE, 0, size,
                                          dst, n_wait, (const cl_event *)wait, NULL);
    clproj_in_shim = saved;
    return err;
}
void *clproj_map_mem(void *queue, void *mem, size_t size, uint32_t n_wait, void *const *wait) {
    REAL(clEnqueueMapBuffer, return NULL);
    cl_int err = CL_SUCCESS;
    int saved = clproj_in_shim;
    clproj_in_shim = 1;
    void *p = real_clEnqueueMapBuffer((cl_command_queue)queue, (cl_mem)mem, CL_TRUE, CL_MAP_READ,
                                      0, size, n_wait, (const cl_event *)wait, NULL, &err);
    clproj_in_shim = saved;
    return err == CL_SUCCESS ? p : NULL;
}
int32_t clproj_unmap_mem(void *queue, void *mem, void *ptr) {
    REAL(clEnqueueUnmapMemObject, FAIL_INT);
    REAL(clWaitForEvents, FAIL_INT);
    REAL(clReleaseEvent, FAIL_INT);
    int saved = clproj_in_shim;
    clproj_in_shim = 1;
    cl_event ev = NULL;
    cl_int err = real_clEnqueueUnmapMemObject((cl_command_queue)queue, (cl_mem)mem, ptr, 0, NULL,
                                              &ev);
    if (err == CL_SUCCESS && ev) {
        err = real_clWaitForEvents(1, &ev);
        real_clReleaseEvent(ev);
    }
    clproj_in_shim = saved;
    return err;
}
int32_t clproj_device_str(void *device, uint32_t param, char *buf, size_t n) {
    REAL(clGetDeviceInfo, FAIL_INT);
    int saved = clproj_in_shim;
    clproj_in_shim = 1;
    cl_int err = real_clGetDeviceInfo((cl_device_id)device, param, n, buf, NULL);
    clproj_in_shim = saved;
    if (err != CL_SUCCESS && n) buf[0] = 0;
    if (n) buf[n - 1] = 0;
    return err;
}
int32_t clproj_host_unified(void *device) {
    cl_bool unified = CL_FALSE;
    REAL(clGetDeviceInfo, return 0);
    int saved = clproj_in_shim;
    clproj_in_shim = 1;
    cl_int err = real_clGetDeviceInfo((cl_device_id)device, CL_DEVICE_HOST_UNIFIED_MEMORY,
                                      sizeof unified, &unified, NULL);
    clproj_in_shim = saved;
    return err == CL_SUCCESS && unified;
}
uint64_t clproj_device_type(void *device) {
    cl_device_type t = 0;
    REAL(clGetDeviceInfo, return 0);
    int saved = clproj_in_shim;
    clproj_in_shim = 1;
    real_clGetDeviceInfo((cl_device_id)device, CL_DEVICE_TYPE, sizeof t, &t, NULL);
    clproj_in_shim = saved;
    return t;
}

/* ---- libpython, loaded on demand (lazy_python.h says why) ---- */
#ifndef CLPROJ_LIBPYTHON
#define CLPROJ_LIBPYTHON "libpython3.so"
#endif
static int py_loaded = 0; /* 1 loaded, -1 failed */
/* An interpreter embedded in a C app finds its standard library from the `python3` on
 * PATH (the app itself is not Python). Where that is another build than the libpython the
 * shim was built for (pyenv or conda beside /usr/bin/python3), it mixes that build's
 * standard library with this libpython and fails to start (`No module named 'math'`), and
 * the app runs unrecorded. So the home is pinned to the build's own prefix, unless the
 * user set PYTHONHOME. */
static void pin_python_home(void) {
#ifdef CLPROJ_PYTHONHOME
    static wchar_t home[PATH_MAX];
    void (*set_home)(const wchar_t *);
    if (getenv("PYTHONHOME"))
        return;
    *(void **)(&set_home) = dlsym(RTLD_DEFAULT, "Py_SetPythonHome");
    if (set_home && mbstowcs(home, CLPROJ_PYTHONHOME, PATH_MAX - 1) != (size_t)-1)
        set_home(home);
#endif
}
static pthread_once_t py_once = PTHREAD_ONCE_INIT;
static void python_load_once(void) {
    char msg[512];
    /* A Python app (pyopencl) has Python already: the module binds to that one. */
    if (dlsym(RTLD_DEFAULT, "Py_IsInitialized") != NULL) {
        py_loaded = 1;
        return;
    }
    /* With eager binding the shim's (weak) references to Python were bound to nothing when
     * it was loaded; binding them later is impossible. */
    const char *now = getenv("LD_BIND_NOW");
    if (now && *now) {
        clproj_once_log("libpython", "LD_BIND_NOW is set in a process without Python: the "
                                     "shim cannot call Python; recording is off");
        py_loaded = -1;
        return;
    }
    if (dlopen(CLPROJ_LIBPYTHON, RTLD_NOW | RTLD_GLOBAL) != NULL) {
        pin_python_home();
        py_loaded = 1;
        return;
    }
    snprintf(msg, sizeof msg, "cannot load %s (%s); recording is off", CLPROJ_LIBPYTHON,
             dlerror());
    clproj_once_log("libpython", msg);
    py_loaded = -1;
}
int clproj_python_load(void) {
    pthread_once(&py_once, python_load_once);
    return py_loaded == 1;
}
/* The cffi embedding code's two data references into libpython (lazy_python.h). */
void *clproj_py_capsule_type(void) {
    static void *p = NULL;
    if (!p) p = dlsym(RTLD_DEFAULT, "PyCapsule_Type");
    return p;
}
void *clproj_py_none_struct(void) {
    static void *p = NULL;
    if (!p) p = dlsym(RTLD_DEFAULT, "_Py_NoneStruct");
    return p;
}

/* ---- configuration and exit ---- */
static void at_exit(void);
static char **split_list(const char *s) {
    if (!s || !*s) return NULL;
    size_t n = 2;
    for (const char *p = s; *p; p++) n += *p == ',';
    char **out = calloc(n, sizeof *out);
    char *copy = strdup(s), *save = NULL;
    size_t i = 0;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) out[i++] = strdup(t);
    free(copy);
    return out;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void init_once(void) {
    const char *which = clproj_setting_record_which(), *timing = clproj_setting_timing();
    memset(&clproj_cfg, 0, sizeof clproj_cfg);
    snprintf(clproj_cfg.mode, sizeof clproj_cfg.mode, "%s", clproj_setting_mode());
    clproj_cfg.recording = clproj_setting_record_dir()[0] || strcmp(clproj_cfg.mode, "project") == 0;
    clproj_cfg.which_all = strcmp(which, "all") == 0;
    if (strcmp(which, "none") == 0) clproj_cfg.recording = 0;
    clproj_cfg.kernel_filter = split_list(clproj_setting_record_kernels());
    /* Kernel arguments are read only when a launch is recorded: plain observe mode does
     * not track clSetKernelArg at all (it is the hottest call of launch-heavy apps). */
    clproj_cfg.track_args = clproj_cfg.recording;
    /* Python runs only for recording and route mode: only they load libpython. */
    if (clproj_cfg.recording || strcmp(clproj_cfg.mode, "observe") != 0) clproj_python_load();
    clproj_cfg.verify = clproj_setting_verify();
    clproj_cfg.timing = strcmp(timing, "0") != 0;
    clproj_cfg.timing_all = strcmp(timing, "all") == 0;
    clproj_cfg.timing_first = (uint64_t)clproj_setting_timing_first();
    clproj_cfg.timing_every = (uint64_t)clproj_setting_timing_every();
    if (clproj_cfg.timing_every == 0 || clproj_cfg.timing_all) clproj_cfg.timing_every = 1;
    clproj_cfg.sample_below = UINT64_MAX / clproj_cfg.timing_every;
    clproj_cfg.disabled = clproj_setting_disable();
    clproj_programs = pm_new();
    clproj_kernels = pm_new();
    clproj_kernels->bumps_gen = 1;
    clproj_mems = pm_new();
    clproj_queues = pm_new();
    clproj_queues->bumps_gen = 1;
    clproj_samplers = pm_new();
    clproj_signatures = pm_new();
    clproj_twins = pm_new();
    /* Registered at the first OpenCL call: runs before the drivers' own destructors. */
    atexit(at_exit);
    /* last: the start's thread finds the tables made (python_start.c) */
    if (strcmp(clproj_cfg.mode, "project") == 0 && clproj_cfg.recording && !clproj_cfg.disabled)
        clproj_python_prestart();
}
void clproj_init(void) { pthread_once(&once, init_once); }

static void free_prog(void *p) { prog_unref(p); /* the table's reference */ }
static void free_kern(void *k) { kern_free(k); }

/* stderr table, or a TSV for `clproj run`: kernel, device, launches, timed launches,
 * estimated total ns (all launches), measured ns (timed launches only). */
static void write_summary(void) {
    const char *path = clproj_setting_summary_file();
    FILE *f = NULL;
    if (*path) f = fopen(path, "w");
    else if (clproj_setting_summary()) f = stderr;
    if (!f) return;
    int sampled = 0;
    if (f == stderr) fprintf(f, "clproj: %-32s %10s %10s %14s %12s  %s\n", "kernel", "launches",
                             "timed", "total_ms", "mean_us", "device");
    for (int i = 0; i < nstats; i++) {
        kstat *s = &stats[i];
        uint64_t est = stats_estimate(s);
        uint64_t launches = st_launches(s);
        sampled |= s->timed < launches;
        if (f == stderr) {
            double mean = s->timed && launches ? (double)est / launches / 1e3 : 0.0;
            fprintf(f, "clproj: %-32s %10llu %10llu %14.3f %12.3f  %s\n", s->kernel,
                    (unsigned long long)launches, (unsigned long long)s->timed, est / 1e6,
                    mean, s->device);
        } else {
            fprintf(f, "%s\t%s\t%llu\t%llu\t%llu\t%llu\n", s->kernel, s->device,
                    (unsigned long long)launches, (unsigned long long)s->timed,
                    (unsigned long long)est, (unsigned long long)s->total_ns);
        }
    }
    if (f == stderr && sampled)
        fprintf(f, "clproj: total_ms estimated from the timed launches (the first %llu of each "
                   "kernel, then 1 in %llu); CLPROJ_TIMING=all times every launch\n",
                (unsigned long long)clproj_cfg.timing_first,
                (unsigned long long)clproj_cfg.timing_every);
    if (f != stderr) fclose(f);
}

static void at_exit(void) {
    pending_harvest(1);
    if (npending) /* still running: natively nothing waits for them either */
        clproj_once_log("exit-pending", "launches still running at exit are not timed");
    write_summary();
    clproj_lock();
    pm_free_all(clproj_kernels, free_kern);
    pm_free_all(clproj_programs, free_prog);
    pm_free_all(clproj_mems, free);
    pm_free_all(clproj_queues, free);
    pm_free_all(clproj_samplers, NULL);
    pm_free_all(clproj_signatures, NULL);
    pm_free_all(clproj_twins, NULL);
    clproj_kernels = clproj_programs = clproj_mems = clproj_queues = clproj_samplers =
        clproj_signatures = clproj_twins = NULL;
    if (clproj_cfg.kernel_filter) {
        for (char **p = clproj_cfg.kernel_filter; *p; p++) free(*p);
        free(clproj_cfg.kernel_filter);
        clproj_cfg.kernel_filter = NULL;
    }
    free(record_times);
    record_times = NULL;
    nrecord_times = record_times_cap = 0;
    clproj_cfg.disabled = 1; /* calls made by other exit handlers pass straight through */
    clproj_unlock();
}
