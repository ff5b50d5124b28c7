/* Live pages (live_pages.c): a region filled on first touch from another process's
 * buffer, or from its copy once the copy is whole. */
#ifndef CLPROJ_LIVE_PAGES_H
#define CLPROJ_LIVE_PAGES_H

#include <stddef.h>
#include <stdint.h>

/* The app's state file: one little-endian uint32 at offset 0 (intercept.live_view). */
#define LIVE_COPYING 0u   /* the buffer holds still; the copy is under way */
#define LIVE_DONE 1u      /* the copy is whole: read it */
#define LIVE_ABANDONED 2u /* the copy failed: nothing more can be had */

typedef struct lp_region lp_region;

/* A region of `size` bytes mirroring `size` bytes at `remote` in process `pid`, its copy
 * in `file`, the app's state in `state_path`; a page not to be had within `wait_s` is
 * zeros (clproj_lp_failed), or ends the process with `exit_status` when that is nonzero.
 * NULL on failure, the cause in `err`. */
lp_region *clproj_lp_open(int pid, uint64_t remote, uint64_t size, const char *file,
                          const char *state_path, double wait_s, int exit_status, char *err,
                          size_t errlen);
void *clproj_lp_address(lp_region *r);
/* Nonzero when a page was given zeros: what was computed from the region is void. */
int clproj_lp_failed(const lp_region *r);
/* Chunks read from the app (from_file 0) or from the copy (from_file 1). */
int clproj_lp_reads(const lp_region *r, int from_file);
void clproj_lp_close(lp_region *r);

#endif
