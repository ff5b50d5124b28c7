/* Resolution of the real OpenCL entry points. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#include "shim.h"

__thread int clproj_in_shim = 0;

/* The real entry point: the next definition in link order (an application linked
 * against the system ICD loader), else the system loader opened by us. pyopencl loads
 * its bundled loader privately (RTLD_LOCAL), so RTLD_NEXT finds nothing there; ICD
 * objects carry their own dispatch table, so any loader can forward their calls. */
void *clproj_real(const char *name) {
    static void *system_loader = NULL;
    void *fn = clproj_real_dlsym(RTLD_NEXT, name);
    if (fn == NULL) {
        if (system_loader == NULL) system_loader = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
        /* the C library's dlsym: the shim's own (dlsym.c) would answer with the shim */
        if (system_loader != NULL) fn = clproj_real_dlsym(system_loader, name);
    }
    if (fn == NULL) fprintf(stderr, "clproj: cannot resolve real %s: %s\n", name, dlerror());
    return fn;
}
