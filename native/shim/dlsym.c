/* Interception of OpenCL entry points found through dlopen + dlsym.
 *
 * Applications and runtimes that load OpenCL at run time (ctypes, plugins, language
 * runtimes) call dlopen("libOpenCL.so.1") and dlsym(handle, "clEnqueueNDRangeKernel").
 * dlsym on a handle searches that library, not the preloaded shim, so such calls would
 * reach the ICD loader directly and never be seen. The shim therefore interposes dlsym:
 * when the symbol found lives in an OpenCL ICD loader (a library named libOpenCL.so*) and
 * the shim defines the same entry point, the shim's definition is returned instead.
 *
 * Limits (docs/intercept.md): only names the shim itself defines are redirected; handles
 * of other libraries, RTLD_DEFAULT and RTLD_NEXT are never touched; a program that opens
 * a vendor ICD library directly (libpocl.so, libnvidia-opencl.so) bypasses the loader
 * and is not intercepted, nor is clGetExtensionFunctionAddress*.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "shim.h"

typedef void *(*dlsym_fn)(void *, const char *);

/* The C library's dlsym. dlsym(RTLD_NEXT, "dlsym") would return this very function, so
 * the versioned lookup names the C library's definition (GLIBC_2.34 since glibc merged
 * libdl; GLIBC_2.2.5 before, on x86-64). */
static dlsym_fn libc_dlsym(void) {
    static dlsym_fn fn = NULL;
    if (fn == NULL) fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (fn == NULL) fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    return fn;
}

void *clproj_real_dlsym(void *handle, const char *name) {
    dlsym_fn fn = libc_dlsym();
    return fn ? fn(handle, name) : NULL;
}

/* Does the object that defines `addr` have a file name starting "libOpenCL.so"? */
static int in_opencl_loader(void *addr) {
    Dl_info info;
    if (!dladdr(addr, &info) || info.dli_fname == NULL) return 0;
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    return strncmp(base, "libOpenCL.so", 12) == 0;
}

/* The shim's own definition of `name`, or NULL when the shim does not define it. */
static void *own_definition(const char *name) {
    static void *self = NULL;
    if (self == NULL) {
        Dl_info info;
        if (!dladdr((void *)&own_definition, &info) || info.dli_fname == NULL) return NULL;
        self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
        if (self == NULL) return NULL;
    }
    void *fn = clproj_real_dlsym(self, name);
    Dl_info a, b;
    /* a symbol of one of the shim's dependencies is not the shim's own */
    if (fn == NULL || !dladdr(fn, &a) || !dladdr((void *)&own_definition, &b) ||
        a.dli_fbase != b.dli_fbase)
        return NULL;
    return fn;
}

void *dlsym(void *__restrict handle, const char *__restrict name) {
    void *fn = clproj_real_dlsym(handle, name);
    if (fn == NULL || name == NULL || name[0] != 'c' || name[1] != 'l' || handle == RTLD_NEXT ||
        handle == RTLD_DEFAULT || !in_opencl_loader(fn))
        return fn;
    void *ours = own_definition(name);
    return ours ? ours : fn;
}
