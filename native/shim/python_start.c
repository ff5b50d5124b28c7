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
#include <pthread.h>

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

int clproj_python_start(void) {
    int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (s == READY) return 1;
    if (s == FAILED) return 0;
    if (!clproj_python_load()) {
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
