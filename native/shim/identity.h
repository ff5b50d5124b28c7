/* Program and launch keys of the shim: the C side of intercept/identity.py.
 *
 * The shim records "the first launch of each distinct signature"; it decides which
 * launches those are from these keys, before Python is reached. They hash the very byte
 * streams Python's intercept.identity defines (program_stream, signature_stream) with
 * 64-bit FNV-1a; tests/intercept/test_identity.py compiles this file and checks that
 * they agree with identity.shim_program_key / shim_launch_key. Self-contained (no
 * OpenCL, no shim state) so that the test can build it alone. */
#ifndef CLPROJ_IDENTITY_H
#define CLPROJ_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

/* source NUL options [NUL binary]: binary is NULL for a program made from source. */
uint64_t clproj_program_key(const char *source, const char *options, const void *binary,
                            size_t binary_size);

/* A launch key, built in three steps so that the caller walks its own argument table:
 * head (program key, kernel, NDRange; lsz NULL for a NULL local size), then each
 * by-value argument in argument order, then end. */
uint64_t clproj_launch_key_head(uint64_t program_key, const char *kernel, unsigned dim,
                                const size_t *gsz, const size_t *lsz);
uint64_t clproj_launch_key_scalar(uint64_t h, const void *data, size_t size);
uint64_t clproj_launch_key_end(uint64_t h);

#endif
