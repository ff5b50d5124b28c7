/* Program and launch keys (identity.h says why and what they agree with). */
#include "identity.h"

#include <stdio.h>
#include <string.h>

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

uint64_t clproj_program_key(const char *source, const char *options, const void *binary,
                            size_t binary_size) {
    uint64_t h = fnv1a(FNV_OFFSET, source ? source : "", source ? strlen(source) : 0);
    h = fnv1a(h, "", 1); /* NUL: "ab"+"c" and "a"+"bc" differ */
    h = fnv1a(h, options ? options : "", options ? strlen(options) : 0);
    if (binary) {
        h = fnv1a(h, "", 1);
        h = fnv1a(h, binary, binary_size);
    }
    return h;
}

/* identity.ndrange_text: "(2, [64, 64], [8, 8])" or "(1, [64], None)". */
static size_t ndrange_text(char *buf, size_t cap, unsigned dim, const size_t *gsz,
                           const size_t *lsz) {
    size_t n = (size_t)snprintf(buf, cap, "(%u, [", dim);
    for (unsigned i = 0; i < dim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, i ? ", %zu" : "%zu", gsz[i]);
    if (n < cap) n += (size_t)snprintf(buf + n, cap - n, lsz ? "], [" : "], None)");
    for (unsigned i = 0; lsz && i < dim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, i ? ", %zu" : "%zu", lsz[i]);
    if (lsz && n < cap) n += (size_t)snprintf(buf + n, cap - n, "])");
    return n < cap ? n : cap - 1;
}

uint64_t clproj_launch_key_head(uint64_t program_key, const char *kernel, unsigned dim,
                                const size_t *gsz, const size_t *lsz) {
    char text[160]; /* 3 dims x 2 sizes x 20 digits + punctuation */
    uint64_t h = fnv1a(program_key, "", 1);
    h = fnv1a(h, kernel, strlen(kernel));
    h = fnv1a(h, "", 1);
    return fnv1a(h, text, ndrange_text(text, sizeof text, dim > 3 ? 3 : dim, gsz, lsz));
}

uint64_t clproj_launch_key_scalar(uint64_t h, const void *data, size_t size) {
    uint32_t n = (uint32_t)size;
    unsigned char len[4] = {n & 0xff, (n >> 8) & 0xff, (n >> 16) & 0xff, n >> 24};
    h = fnv1a(h, len, 4);
    return fnv1a(h, data, size);
}

uint64_t clproj_launch_key_end(uint64_t h) { return h | 1; }
