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

/* Everything on the path of an interposed dlsym call may run before any constructor,
 * including a sanitizer's: AddressSanitizer resolves its own interceptors with
 * dlsym(RTLD_NEXT, ...) while it initialises, before its shadow memory exists. This code
 * is therefore never instrumented (it is small, and has no buffers). */
#define CLPROJ_EARLY __attribute__((no_sanitize("address", "undefined")))

/* The C library's dlsym. dlsym(RTLD_NEXT, "dlsym") would return this very function, so
 * the versioned lookup names the C library's definition (GLIBC_2.34 since glibc merged
 * libdl; GLIBC_2.2.5 before, on x86-64). */
CLPROJ_EARLY static dlsym_fn libc_dlsym(void) {
    static dlsym_fn fn = NULL;
    if (fn == NULL) fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (fn == NULL) fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    return fn;
}

CLPROJ_EARLY void *clproj_real_dlsym(void *handle, const char *name) {
    dlsym_fn fn = libc_dlsym();
    return fn ? fn(handle, name) : NULL;
}

/* Does the object that defines `addr` have a file name starting "libOpenCL.so"? */
CLPROJ_EARLY static int in_opencl_loader(void *addr) {
    Dl_info info;
    if (!dladdr(addr, &info) || info.dli_fname == NULL) return 0;
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    return strncmp(base, "libOpenCL.so", 12) == 0;
}

/* The shim's own definition of `name`, or NULL when the shim does not define it. */
CLPROJ_EARLY static void *own_definition(const char *name) {
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

/* dlsym on every handle but RTLD_NEXT (the trampoline below handles that one). */
CLPROJ_EARLY __attribute__((visibility("hidden"))) void *clproj_dlsym_other(void *handle,
                                                                          const char *name) {
    void *fn = clproj_real_dlsym(handle, name);
    if (fn == NULL || name[0] != 'c' || name[1] != 'l' || handle == RTLD_DEFAULT ||
        !in_opencl_loader(fn))
        return fn;
    void *ours = own_definition(name);
    return ours ? ours : fn;
}

/* The C library's dlsym, for the trampoline (NULL if it cannot be found). */
CLPROJ_EARLY __attribute__((visibility("hidden"))) void *clproj_libc_dlsym_address(void) {
    return (void *)libc_dlsym();
}

/* The interposed dlsym. RTLD_NEXT means "the next object after the one that called
 * dlsym", and the C library finds the caller from its return address: a lookup that
 * passed through a C function of the shim would be resolved after the shim instead. Then
 * an interposer preloaded after the shim that wraps clFinish with dlsym(RTLD_NEXT,
 * "clFinish") got its own wrapper back and recursed without end, and one preloaded before
 * the shim skipped the shim. So RTLD_NEXT jumps to the C library's dlsym with the
 * caller's return address still in place (a tail jump, written in assembly because C
 * cannot promise one); every other handle goes to clproj_dlsym_other. */
#if defined(__x86_64__)
__asm__(
    ".text\n"
    ".globl dlsym\n"
    ".type dlsym, @function\n"
    "dlsym:\n"
    "    cmpq $-1, %rdi\n" /* RTLD_NEXT is ((void *) -1) */
    "    jne clproj_dlsym_other\n"
    "    pushq %rdi\n"
    "    pushq %rsi\n"
    "    subq $8, %rsp\n" /* 16-byte alignment at the call */
    "    call clproj_libc_dlsym_address\n"
    "    addq $8, %rsp\n"
    "    popq %rsi\n"
    "    popq %rdi\n"
    "    testq %rax, %rax\n"
    "    je 1f\n"
    "    jmp *%rax\n"
    "1:  ret\n" /* no C library dlsym: NULL, already in %rax */
    ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(
    ".text\n"
    ".globl dlsym\n"
    ".type dlsym, %function\n"
    "dlsym:\n"
    "    cmn x0, #1\n" /* RTLD_NEXT is ((void *) -1) */
    "    b.ne clproj_dlsym_other\n"
    "    stp x29, x30, [sp, #-32]!\n"
    "    mov x29, sp\n"
    "    stp x0, x1, [sp, #16]\n"
    "    bl clproj_libc_dlsym_address\n"
    "    mov x16, x0\n"
    "    ldp x0, x1, [sp, #16]\n"
    "    ldp x29, x30, [sp], #32\n"
    "    cbz x16, 1f\n"
    "    br x16\n"
    "1:  mov x0, #0\n"
    "    ret\n"
    ".size dlsym, .-dlsym\n");
#else
/* Elsewhere RTLD_NEXT is resolved after the shim (the limit docs/intercept.md names). */
void *dlsym(void *__restrict handle, const char *__restrict name) {
    return clproj_dlsym_other(handle, name);
}
#endif
