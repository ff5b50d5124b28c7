/* clproj interception shim: shared declarations.
 * The C side forwards every OpenCL call to the real implementation and keeps
 * per-call work minimal; Python callbacks are declared in shim_api.h. */
#ifndef CLPROJ_SHIM_H
#define CLPROJ_SHIM_H
#include <CL/cl.h>
#include <stdint.h>

/* Resolve the next definition of an OpenCL symbol (the real ICD loader). */
void *clproj_real(const char *name);

/* Thread-local guard: non-zero while the shim itself is calling OpenCL, so those
 * calls are forwarded untouched and never recurse into the shim. */
extern __thread int clproj_in_shim;

#endif
