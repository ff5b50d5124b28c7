/* Starting the shim's Python side, once, without ever waiting on a lock while holding one
 * that the starting thread needs.
 *
 * cffi starts the embedded Python side (its init code: imports of the intercept package) under its
 * own start-up mutex, and that code needs the GIL (imports release and retake it around
 * file-system calls). A pyopencl thread calls clEnqueueNDRangeKernel holding the GIL; had
 * it gone straight to cffi while another thread was inside the start-up, it would have
 * waited on cffi's mutex holding the GIL the other thread needs: four pyopencl threads
 * launching at once hung for ever under project mode. Here one thread starts Python; any
 * other thread that arrives meanwhile waits on a condition of ours, and lets the GIL go
 * while it waits when it holds it. cffi's mutex is then only ever taken by the starter, and
 * after the start by calls that never wait inside it. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "../clproj_settings.h"
#include "shim.h"

/* The Python API used here (this file does not include Python.h): weak, like every
 * reference into libpython (lazy_python.h); bound once clproj_python_load() succeeded. */
int Py_IsInitialized(void);
int PyGILState_Check(void);
void *PyEval_SaveThread(void);
void PyEval_RestoreThread(void *);
#pragma weak Py_IsInitialized
#pragma weak PyGILState_Check
#pragma weak PyEval_SaveThread
#pragma weak PyEval_RestoreThread

enum { NOT_STARTED = 0, STARTING = 1, READY = 2, FAILED = -1 };
static int state = NOT_STARTED;
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t state_done = PTHREAD_COND_INITIALIZER;

/* Standard descriptors (0, 1, 2) the app was started without (`>&-`): noted before main,
 * while nothing the app or its driver opens can have taken their numbers yet. */
static int closed_at_start[3];
__attribute__((constructor)) static void note_standard_fds(void) {
    for (int fd = 0; fd < 3; fd++) closed_at_start[fd] = fcntl(fd, F_GETFD) == -1;
}
int clproj_std_fd_closed_at_start(int fd) { return fd >= 0 && fd < 3 && closed_at_start[fd]; }

/* An app started without a standard descriptor gets no interpreter of ours: the next file
 * the app or its driver opens takes that number (a directory, an output file), at any time,
 * and a new interpreter makes what it finds there its sys.stdin/stdout/stderr: a directory
 * is a fatal error that ended the app (project mode with `>&-`), a file would take
 * clproj's lines. Checking first and starting after would race the app's own opens. Its
 * launches pass through unrecorded; an app with its own interpreter (pyopencl) is not
 * concerned. */
static int started_without_standard_fd(void) {
    if (!(closed_at_start[0] || closed_at_start[1] || closed_at_start[2])) return 0;
    clproj_once_log("closed-std",
                    "the app started with stdin, stdout or stderr closed: its launches are not "
                    "recorded or projected (give it /dev/null instead, e.g. >/dev/null)");
    return 1;
}

int clproj_python_start(void) {
    int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (s == READY) return 1;
    if (s == FAILED) return 0;
    if (!clproj_python_load() || (!Py_IsInitialized() && started_without_standard_fd())) {
        __atomic_store_n(&state, FAILED, __ATOMIC_RELEASE);
        return 0;
    }
    pthread_mutex_lock(&state_lock);
    int starter = state == NOT_STARTED;
    if (starter) state = STARTING;
    pthread_mutex_unlock(&state_lock);
    if (starter) {
        int saved = clproj_in_shim;
        clproj_in_shim = 1;
        /* failure is logged once by Python (or by cffi when Python cannot start) */
        int ok = clproj_py_start() == 1;
        clproj_in_shim = saved;
        pthread_mutex_lock(&state_lock);
        __atomic_store_n(&state, ok ? READY : FAILED, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&state_done);
        pthread_mutex_unlock(&state_lock);
        return ok;
    }
    /* Another thread is starting Python and may need the GIL to finish. */
    void *tstate = NULL;
    if (Py_IsInitialized() && PyGILState_Check()) tstate = PyEval_SaveThread();
    pthread_mutex_lock(&state_lock);
    while (state == STARTING) pthread_cond_wait(&state_done, &state_lock);
    s = state;
    pthread_mutex_unlock(&state_lock);
    if (tstate) PyEval_RestoreThread(tstate);
    return s == READY;
}

int clproj_python_failed(void) { return __atomic_load_n(&state, __ATOMIC_ACQUIRE) == FAILED; }

void *clproj_release_gil(void) {
    if (__atomic_load_n(&state, __ATOMIC_ACQUIRE) != READY) return NULL;
    return Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : NULL;
}

void clproj_reacquire_gil(void *saved) {
    if (saved) PyEval_RestoreThread(saved);
}

/* ---- the start ahead of the first launch (project mode, an app without Python) ----
 * The first recorded launch of a C app waited 0.11-0.13 s for the start (an interpreter and
 * the intercept package's imports; PolyBench bicg on the 2-core VM) while the app's own
 * set-up before it (host arrays, buffers, the driver's build) leaves a core idle. Started at
 * the app's first OpenCL call on a thread of its own, it is over by then; a launch that
 * comes first waits on the condition above, as any second thread does. An app with its own
 * interpreter (pyopencl) keeps the start at its first launch: a second thread would only
 * contend for its GIL. The thread blocks every signal (they stay the app's threads').
 * A fork waits for a start under way (bounded): the starting thread holds what the start
 * holds, the loader's lock while it loads an extension module among them, and a child
 * forked then has no thread to release it (its next dlopen would wait for ever; a project
 * run of tests/c_apps/app_prestart.c's fork under ASan, beside the test suite under load,
 * hung once before this wait, not reproduced in 9 runs either way). Where the wait runs
 * out, the child's state is FAILED (its launches pass through unrecorded) with a fresh
 * lock and condition. exit() waits as well, so the interpreter is never half-made while
 * the process ends; the exit functions the start registers run after that wait. */
static CLPROJ_TLS int is_prestart_thread = 0;

static void *prestart_main(void *unused) {
    (void)unused;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    is_prestart_thread = 1;
    clproj_python_start();
    return NULL;
}

enum { PRESTART_WAIT_S = 30 };

static void wait_while_starting(void) {
    if (is_prestart_thread) return; /* a fork of the start itself cannot wait for it */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += PRESTART_WAIT_S;
    pthread_mutex_lock(&state_lock);
    while (state == STARTING)
        if (pthread_cond_timedwait(&state_done, &state_lock, &until) != 0) break;
    pthread_mutex_unlock(&state_lock);
}

static void prestart_child(void) {
    if (__atomic_load_n(&state, __ATOMIC_ACQUIRE) != STARTING) return;
    pthread_mutex_init(&state_lock, NULL);
    pthread_cond_init(&state_done, NULL);
    __atomic_store_n(&state, FAILED, __ATOMIC_RELEASE);
}

void clproj_python_prestart(void) {
    if (!clproj_setting_python_prestart() || !clproj_python_load() || Py_IsInitialized()) return;
    if (__atomic_load_n(&state, __ATOMIC_ACQUIRE) != NOT_STARTED) return;
    pthread_atfork(wait_while_starting, NULL, prestart_child);
    atexit(wait_while_starting);
    pthread_attr_t attr;
    pthread_t thread;
    if (pthread_attr_init(&attr) != 0) return;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_create(&thread, &attr, prestart_main, NULL); /* failing: the launch starts it */
    pthread_attr_destroy(&attr);
}
