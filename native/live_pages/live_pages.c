/* Live pages: a region of this process whose pages are filled on first touch, from a
 * buffer of another process while that process holds the buffer still, or from the file
 * its copy went to once the copy is whole.
 *
 * Why: a launch over a 1 GiB buffer could be emulated only after the app had copied the
 * buffer into a snapshot file (0.27-0.32 s per GiB on a 2-core VM), although the sampled
 * work-items of an emulation touch kilobytes of it. While the app's thread is inside the
 * shim copying, the buffer cannot change (it is the launch's input, and the launch waits
 * for the copy), so the emulator can read the pages it touches straight from the app
 * (process_vm_readv) and start at once; every page it touches after the copy is read
 * from the copy. The app never waits for the emulator and nothing of it is changed.
 *
 * How: an anonymous mapping registered with userfaultfd (missing-page mode); a thread of
 * this library answers each fault with a chunk of the buffer (UFFDIO_COPY). The app says
 * where it stands in a small state file (one little-endian uint32 at offset 0):
 * LIVE_COPYING while the buffer holds still, LIVE_DONE once the file is whole,
 * LIVE_ABANDONED when the copy failed. A chunk read from the app counts only when the
 * state still says LIVE_COPYING after the read (so the read ended before the app went
 * on); otherwise it is read from the file. Where a page cannot be had (the app is gone,
 * the copy was abandoned, or no answer within the wait), the page is given zeros and
 * clproj_lp_failed() says so, or, where the region was opened with an exit status (the
 * emulator: Oclgrind may end the process itself once its statistics are out), the
 * process ends with that status: either way what was computed from it is discarded.
 *
 * Where userfaultfd or process_vm_readv is not allowed (a container's seccomp policy),
 * clproj_lp_open fails or the reads wait for the file: callers fall back to the
 * whole snapshot. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "live_pages.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

#define CHUNK_BYTES (64u << 10) /* filled per fault: a few pages ahead of a streaming read */

struct lp_region {
    unsigned char *base;  /* the mapping (page-rounded length) */
    size_t size;          /* the buffer's bytes */
    size_t mapped;        /* the mapping's bytes */
    pid_t pid;            /* the process holding the buffer */
    uint64_t remote;      /* the buffer's address there */
    int file_fd;          /* the copy, whole once the state says LIVE_DONE */
    const volatile uint32_t *state; /* the app's state file, mapped shared */
    int uffd;
    int stop[2];          /* a byte here ends the thread */
    double wait_s;        /* longest wait for a page before zeros */
    int exit_status;      /* nonzero: a page not to be had ends the process with it */
    pthread_t thread;
    int thread_started;
    volatile int failed;  /* a page was given zeros */
    volatile int remote_reads, file_reads;
    int remote_denied;    /* process_vm_readv refused: wait for the file */
    unsigned char *chunk; /* staging for one chunk */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint32_t load_state(const lp_region *r) {
    return __atomic_load_n(r->state, __ATOMIC_SEQ_CST);
}

static int read_remote(lp_region *r, size_t off, size_t len) {
    struct iovec local = {r->chunk, len};
    struct iovec remote = {(void *)(uintptr_t)(r->remote + off), len};
    ssize_t n = process_vm_readv(r->pid, &local, 1, &remote, 1, 0);
    if (n == (ssize_t)len)
        return 1;
    if (n < 0 && errno != ESRCH)
        r->remote_denied = 1; /* EPERM (policy), ENOSYS, EFAULT: only the file from now on */
    return 0;
}

static int read_file(lp_region *r, size_t off, size_t len) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(r->file_fd, r->chunk + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    if (done < len)
        memset(r->chunk + done, 0, len - done); /* a file shorter than the buffer: zeros */
    return 1;
}

/* Fill r->chunk with bytes [off, off + len) of the buffer; 0 when they cannot be had. */
static int fill(lp_region *r, size_t off, size_t len) {
    double deadline = now_s() + r->wait_s;
    for (;;) {
        uint32_t st = load_state(r);
        if (st == LIVE_DONE) {
            r->file_reads++;
            return read_file(r, off, len);
        }
        if (st != LIVE_COPYING)
            return 0;
        if (!r->remote_denied && read_remote(r, off, len) && load_state(r) == LIVE_COPYING) {
            r->remote_reads++;
            return 1;
        }
        if (kill(r->pid, 0) != 0 && errno == ESRCH && load_state(r) == LIVE_COPYING)
            return 0; /* the app is gone before its copy was whole */
        if (now_s() > deadline)
            return 0;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

static void serve_fault(lp_region *r, uintptr_t addr) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t off = ((size_t)(addr - (uintptr_t)r->base)) & ~(size_t)(CHUNK_BYTES - 1);
    size_t len = CHUNK_BYTES;
    if (off + len > r->mapped)
        len = r->mapped - off;
    size_t want = len;
    if (off >= r->size)
        want = 0; /* the page-rounding tail: zeros */
    else if (off + want > r->size)
        want = r->size - off;
    if (want && !fill(r, off, want)) {
        if (r->exit_status) {
            /* what this process computes from here on is void: end it, saying why */
            static const char why[] =
                "clproj: live pages: a page of the app's buffer could not be had (the app "
                "ended, or its copy failed, before it was read)\n";
            ssize_t n = write(2, why, sizeof why - 1);
            (void)n;
            _exit(r->exit_status);
        }
        r->failed = 1;
        want = 0;
    }
    memset(r->chunk + want, 0, len - want);
    struct uffdio_copy copy = {
        .dst = (uintptr_t)r->base + off, .src = (uintptr_t)r->chunk, .len = len, .mode = 0};
    if (ioctl(r->uffd, UFFDIO_COPY, &copy) != 0 && errno == EEXIST) {
        /* part of the chunk was there already: copy page by page, skipping those */
        for (size_t p = 0; p < len; p += page) {
            struct uffdio_copy one = {.dst = (uintptr_t)r->base + off + p,
                                      .src = (uintptr_t)r->chunk + p,
                                      .len = page,
                                      .mode = 0};
            (void)ioctl(r->uffd, UFFDIO_COPY, &one);
        }
        struct uffdio_range range = {.start = (uintptr_t)r->base + off, .len = len};
        (void)ioctl(r->uffd, UFFDIO_WAKE, &range);
    }
}

static void *serve(void *arg) {
    lp_region *r = arg;
    struct pollfd fds[2] = {{r->uffd, POLLIN, 0}, {r->stop[0], POLLIN, 0}};
    for (;;) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (fds[1].revents)
            break;
        struct uffd_msg msg;
        ssize_t n = read(r->uffd, &msg, sizeof msg);
        if (n != (ssize_t)sizeof msg) {
            if (n < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            break;
        }
        if (msg.event == UFFD_EVENT_PAGEFAULT)
            serve_fault(r, (uintptr_t)msg.arg.pagefault.address);
    }
    return NULL;
}

static void say(char *err, size_t errlen, const char *what) {
    if (err && errlen)
        snprintf(err, errlen, "%s: %s", what, strerror(errno));
}

static int open_uffd(void) {
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (fd < 0 && errno == EINVAL) /* a kernel before 5.11 knows no user-mode-only flag */
        fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    return fd;
}

lp_region *clproj_lp_open(int pid, uint64_t remote, uint64_t size, const char *file,
                          const char *state_path, double wait_s, int exit_status, char *err,
                          size_t errlen) {
    if (size == 0) {
        errno = EINVAL;
        say(err, errlen, "an empty buffer");
        return NULL;
    }
    lp_region *r = calloc(1, sizeof *r);
    if (!r) {
        say(err, errlen, "calloc");
        return NULL;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    r->size = (size_t)size;
    r->mapped = (r->size + CHUNK_BYTES - 1) & ~(size_t)(CHUNK_BYTES - 1);
    r->pid = (pid_t)pid;
    r->remote = remote;
    r->wait_s = wait_s;
    r->exit_status = exit_status;
    r->uffd = r->file_fd = r->stop[0] = r->stop[1] = -1;
    r->base = MAP_FAILED;
    void *st = MAP_FAILED;
    int sfd = open(state_path, O_RDONLY | O_CLOEXEC);
    if (sfd < 0) {
        say(err, errlen, "opening the state file");
        goto fail;
    }
    st = mmap(NULL, page, PROT_READ, MAP_SHARED, sfd, 0);
    close(sfd);
    if (st == MAP_FAILED) {
        say(err, errlen, "mapping the state file");
        goto fail;
    }
    r->state = st;
    r->file_fd = open(file, O_RDONLY | O_CLOEXEC);
    if (r->file_fd < 0) {
        say(err, errlen, "opening the copy");
        goto fail;
    }
    r->chunk = malloc(CHUNK_BYTES);
    if (!r->chunk) {
        say(err, errlen, "malloc");
        goto fail;
    }
    r->uffd = open_uffd();
    if (r->uffd < 0) {
        say(err, errlen, "userfaultfd");
        goto fail;
    }
    struct uffdio_api api = {.api = UFFD_API, .features = 0};
    if (ioctl(r->uffd, UFFDIO_API, &api) != 0) {
        say(err, errlen, "UFFDIO_API");
        goto fail;
    }
    r->base = mmap(NULL, r->mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r->base == MAP_FAILED) {
        say(err, errlen, "mmap");
        goto fail;
    }
    struct uffdio_register reg = {
        .range = {.start = (uintptr_t)r->base, .len = r->mapped},
        .mode = UFFDIO_REGISTER_MODE_MISSING};
    if (ioctl(r->uffd, UFFDIO_REGISTER, &reg) != 0) {
        say(err, errlen, "UFFDIO_REGISTER");
        goto fail;
    }
    if (pipe2(r->stop, O_CLOEXEC) != 0) {
        say(err, errlen, "pipe2");
        goto fail;
    }
    if ((errno = pthread_create(&r->thread, NULL, serve, r)) != 0) {
        say(err, errlen, "pthread_create");
        goto fail;
    }
    r->thread_started = 1;
    return r;
fail:
    clproj_lp_close(r);
    return NULL;
}

void *clproj_lp_address(lp_region *r) { return r->base; }

int clproj_lp_failed(const lp_region *r) { return r->failed; }

int clproj_lp_reads(const lp_region *r, int from_file) {
    return from_file ? r->file_reads : r->remote_reads;
}

void clproj_lp_close(lp_region *r) {
    if (!r)
        return;
    if (r->thread_started) {
        char b = 'x';
        ssize_t n;
        do
            n = write(r->stop[1], &b, 1);
        while (n < 0 && errno == EINTR);
        pthread_join(r->thread, NULL);
    }
    if (r->base != MAP_FAILED)
        munmap(r->base, r->mapped);
    if (r->state)
        munmap((void *)r->state, (size_t)sysconf(_SC_PAGESIZE));
    int fds[] = {r->uffd, r->file_fd, r->stop[0], r->stop[1]};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(r->chunk);
    free(r);
}
