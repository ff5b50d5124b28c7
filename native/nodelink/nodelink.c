/* The node's same-host command link, served by a C thread (runtime/nodelink.py drives it).
 *
 * Why C: a launch the client waits for crossed the node's Python twice per round trip
 * (wake-up, read, msgpack decode and validation, pyopencl enqueue, event polling, reply
 * encoding), about 100 us of a ~270 us round trip on the 2-core VM. Here the link is read,
 * framed and written in C; every message still goes to Python (runtime.node) in order,
 * except *fast launches*: a 16-byte frame naming a slot, i.e. a kernel with its arguments
 * and NDRange fixed, which Python created on the client's request after seeing the same
 * launch twice. C enqueues those itself, waits for them and answers with the same msgpack
 * "done"/"reply" messages Python would send.
 *
 * Ordering: messages of one connection are handled in stream order. A fast launch runs
 * only when every earlier message of its connection has been handled by Python
 * (nl_handled, i.e. enqueued on the device's in-order queue); until then the connection
 * is parked and not read further. Device queues are in order, so completion order and
 * command order agree however the two threads interleave their enqueues.
 *
 * Framing (as runtime/unixlink.py): u32 nframes, u32 length per frame, the frames. The
 * first message of a connection is the client's routing id. Framing violations cut the
 * connection off; a malformed fast frame is counted and dropped, as Python drops an
 * undecodable header.
 *
 * Threads: the link thread owns the sockets' reading side and the in-flight lists; the
 * mutex guards what Python also touches (connections' output and backlog, the queue of
 * messages for Python, the slots). OpenCL calls are made through each object's ICD
 * dispatch table, so no OpenCL library is linked. */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl_icd.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "nodelink_api.h"

#define NL_MAX_CONNS 256
#define NL_MAX_SLOTS 4096
#define NL_MAX_DEVS 64
#define NL_FAST_MAGIC 0xC1 /* a byte msgpack never uses: no header starts with it */
#define NL_FAST_SIZE 16
#define NL_BATCH 4096 /* runtime.protocol.MAX_LIST: ids in one "done" */
#define NL_READ_BURST (16u << 20)

typedef struct {
    uint8_t *p;
    size_t len, cap;
} nl_bytes;

typedef struct {
    int fd; /* -1: free */
    int32_t id;
    int has_peer;
    uint32_t peer_len;
    uint8_t peer[256];
    nl_bytes in;
    size_t in_off;
    nl_bytes out; /* guarded by the mutex */
    size_t out_off;
    uint32_t backlog; /* messages handed to Python and not yet handled (mutex) */
    int parked;       /* a fast launch waits for backlog 0: stop reading */
    int eof;
} nl_conn;

typedef struct {
    int used;
    int32_t conn;
    cl_kernel kernel;
    cl_command_queue queue;
    int32_t dev;
    cl_uint ndim;
    size_t g[3], l[3], o[3];
    int has_l, has_o;
    double tsum;
    uint32_t tn;
} nl_slot;

typedef struct nl_fly {
    struct nl_fly *next;
    cl_event ev;
    int32_t conn;
    uint64_t rid;
    uint32_t slot;
} nl_fly;

struct nl_link {
    pthread_mutex_t mu;
    pthread_t thread;
    int started, stop;
    int listen_fd, wake_fd, py_fd;
    uint32_t max_frames;
    uint64_t max_frame;
    double settle_s;
    int version;
    int32_t next_gen;
    nl_conn conns[NL_MAX_CONNS];
    nl_slot slots[NL_MAX_SLOTS];
    nl_msg *py_head, *py_tail;
    nl_fly *fly_head[NL_MAX_DEVS], *fly_tail[NL_MAX_DEVS]; /* per device, in queue order */
    int32_t fly_n[NL_MAX_DEVS];
    int32_t fly_total;
    uint64_t rejects, served;
    uint64_t cb_set, cb_fired; /* completion callbacks registered / run (nl_stop waits) */
};

static const cl_icd_dispatch *disp(const void *obj) { return *(const cl_icd_dispatch *const *)obj; }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static int bytes_reserve(nl_bytes *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}
static int bytes_put(nl_bytes *b, const void *src, size_t n) {
    if (bytes_reserve(b, n)) return -1;
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}
static void bytes_free(nl_bytes *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

static void wake(int fd) {
    uint64_t one = 1;
    ssize_t r = write(fd, &one, sizeof one);
    (void)r; /* a full counter still wakes the reader */
}

static nl_conn *conn_of(nl_link *l, int32_t id) {
    if (id < 0) return NULL;
    nl_conn *c = &l->conns[id % NL_MAX_CONNS];
    return c->fd >= 0 && c->id == id ? c : NULL;
}

/* ---- output (mutex held) ------------------------------------------------------------ */
/* Write what the socket takes now; the link thread watches POLLOUT for the rest. */
static void flush_locked(nl_conn *c) {
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.p + c->out_off, c->out.len - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) c->eof = 1;
            break;
        }
        c->out_off += (size_t)n;
    }
    if (c->out_off == c->out.len) c->out.len = c->out_off = 0;
}

static int send_locked(nl_link *l, nl_conn *c, uint32_t nf, const uint8_t *const *ptrs,
                       const uint64_t *lens) {
    if (!c || c->eof) return -1;
    uint8_t head[4 + 4 * 16];
    if (nf == 0 || nf > 16) return -1;
    for (uint32_t i = 0; i < nf; i++)
        if (lens[i] > 0xffffffffu) return -1;
    size_t total = 4 + 4 * (size_t)nf;
    for (uint32_t i = 0; i < nf; i++) total += lens[i];
    if (bytes_reserve(&c->out, total)) return -1;
    uint32_t v = nf;
    memcpy(head, &v, 4); /* little-endian hosts only (x86-64, aarch64) */
    for (uint32_t i = 0; i < nf; i++) {
        v = (uint32_t)lens[i];
        memcpy(head + 4 + 4 * i, &v, 4);
    }
    bytes_put(&c->out, head, 4 + 4 * (size_t)nf);
    for (uint32_t i = 0; i < nf; i++) bytes_put(&c->out, ptrs[i], lens[i]);
    int queued_before = c->out_off > 0;
    if (!queued_before) flush_locked(c);
    if (c->out.len) wake(l->wake_fd); /* the link thread adds POLLOUT */
    return 0;
}

/* ---- msgpack replies written by C (the shapes runtime.protocol validates) ---------------- */
static void mp_u64(nl_bytes *b, uint64_t v) {
    uint8_t t[9] = {0xcf};
    for (int i = 0; i < 8; i++) t[1 + i] = (uint8_t)(v >> (56 - 8 * i));
    bytes_put(b, t, 9);
}
static void mp_f64(nl_bytes *b, double d) {
    uint64_t v;
    memcpy(&v, &d, 8);
    uint8_t t[9] = {0xcb};
    for (int i = 0; i < 8; i++) t[1 + i] = (uint8_t)(v >> (56 - 8 * i));
    bytes_put(b, t, 9);
}
static void mp_str(nl_bytes *b, const char *s) {
    size_t n = strlen(s);
    if (n > 255) n = 255;
    uint8_t t[2];
    if (n < 32) {
        t[0] = (uint8_t)(0xa0 | n);
        bytes_put(b, t, 1);
    } else {
        t[0] = 0xd9;
        t[1] = (uint8_t)n;
        bytes_put(b, t, 2);
    }
    bytes_put(b, s, n);
}
static void mp_array(nl_bytes *b, uint32_t n) {
    uint8_t t[3] = {0xdc, (uint8_t)(n >> 8), (uint8_t)n};
    bytes_put(b, t, 3);
}
static void mp_tail(nl_bytes *b, int version, const char *type) {
    mp_str(b, "v");
    uint8_t v = (uint8_t)(version & 0x7f);
    bytes_put(b, &v, 1);
    mp_str(b, "t");
    mp_str(b, type);
}

static void reply_done(nl_link *l, int32_t conn, const uint64_t *ids, const double *ts,
                       const int *has_t, uint32_t n) {
    nl_bytes b = {0};
    uint8_t map4 = 0x84;
    bytes_put(&b, &map4, 1);
    mp_str(&b, "ids");
    mp_array(&b, n);
    for (uint32_t i = 0; i < n; i++) mp_u64(&b, ids[i]);
    mp_str(&b, "ts");
    mp_array(&b, n);
    for (uint32_t i = 0; i < n; i++) {
        if (has_t[i]) {
            mp_f64(&b, ts[i]);
        } else {
            uint8_t nil = 0xc0;
            bytes_put(&b, &nil, 1);
        }
    }
    mp_tail(&b, l->version, "done");
    const uint8_t *p = b.p;
    uint64_t len = b.len;
    pthread_mutex_lock(&l->mu);
    send_locked(l, conn_of(l, conn), 1, &p, &len);
    pthread_mutex_unlock(&l->mu);
    bytes_free(&b);
}

static void reply_error(nl_link *l, int32_t conn, uint64_t rid, const char *err) {
    nl_bytes b = {0};
    uint8_t map5 = 0x85, no = 0xc2;
    bytes_put(&b, &map5, 1);
    mp_str(&b, "id");
    mp_u64(&b, rid);
    mp_str(&b, "ok");
    bytes_put(&b, &no, 1);
    mp_str(&b, "err");
    mp_str(&b, err);
    mp_tail(&b, l->version, "reply");
    const uint8_t *p = b.p;
    uint64_t len = b.len;
    pthread_mutex_lock(&l->mu);
    send_locked(l, conn_of(l, conn), 1, &p, &len);
    pthread_mutex_unlock(&l->mu);
    bytes_free(&b);
}

/* ---- completion ----------------------------------------------------------------------- */
static void CL_CALLBACK on_complete(cl_event ev, cl_int status, void *user) {
    (void)ev;
    (void)status;
    nl_link *l = user;
    wake(l->wake_fd);
    __atomic_add_fetch(&l->cb_fired, 1, __ATOMIC_RELEASE);
}

static int event_done(cl_event ev, cl_int *status) {
    cl_int st = CL_QUEUED;
    if (disp(ev)->clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL) !=
        CL_SUCCESS)
        st = -1;
    *status = st;
    return st <= CL_COMPLETE;
}

/* Answer completed fast launches, oldest first per device (its queue is in order, so the
 * first unfinished one ends that device's scan), one "done" per connection. */
static void complete(nl_link *l) {
    static __thread uint64_t ids[NL_BATCH];
    static __thread double ts[NL_BATCH];
    static __thread int has_t[NL_BATCH];
    static __thread int32_t conns[NL_BATCH];
    uint32_t n = 0;
    for (int d = 0; d < NL_MAX_DEVS && l->fly_total; d++) {
        while (l->fly_head[d] && n < NL_BATCH) {
            nl_fly *f = l->fly_head[d];
            cl_int st;
            if (!event_done(f->ev, &st)) break;
            l->fly_head[d] = f->next;
            if (!f->next) l->fly_tail[d] = NULL;
            l->fly_n[d]--;
            l->fly_total--;
            if (st < 0) {
                char msg[80];
                snprintf(msg, sizeof msg, "launch failed with status %d", (int)st);
                reply_error(l, f->conn, f->rid, msg);
            } else {
                cl_ulong t0 = 0, t1 = 0;
                int ok = disp(f->ev)->clGetEventProfilingInfo(f->ev, CL_PROFILING_COMMAND_START,
                                                               sizeof t0, &t0, NULL) == CL_SUCCESS &&
                         disp(f->ev)->clGetEventProfilingInfo(f->ev, CL_PROFILING_COMMAND_END,
                                                               sizeof t1, &t1, NULL) == CL_SUCCESS &&
                         t1 >= t0;
                double secs = ok ? (double)(t1 - t0) * 1e-9 : 0.0;
                if (ok) {
                    pthread_mutex_lock(&l->mu);
                    nl_slot *s = &l->slots[f->slot];
                    if (s->used) {
                        s->tsum += secs;
                        s->tn++;
                    }
                    pthread_mutex_unlock(&l->mu);
                }
                ids[n] = f->rid;
                ts[n] = secs;
                has_t[n] = ok;
                conns[n] = f->conn;
                n++;
            }
            disp(f->ev)->clReleaseEvent(f->ev);
            free(f);
        }
    }
    /* one message per connection (few connections: a quadratic pass is fine) */
    static __thread uint64_t cids[NL_BATCH];
    static __thread double cts[NL_BATCH];
    static __thread int chas[NL_BATCH];
    for (uint32_t i = 0; i < n; i++) {
        if (conns[i] == INT32_MIN) continue;
        int32_t c = conns[i];
        uint32_t m = 0;
        for (uint32_t j = i; j < n; j++) {
            if (conns[j] != c) continue;
            cids[m] = ids[j];
            cts[m] = ts[j];
            chas[m] = has_t[j];
            m++;
            conns[j] = INT32_MIN;
        }
        reply_done(l, c, cids, cts, chas, m);
    }
}

/* ---- fast launches -------------------------------------------------------------------- */
/* Frame: u8 0xC1, u8 version 1, u16 0, u32 slot, u64 request id (little-endian). */
static void fast_launch(nl_link *l, nl_conn *c, const uint8_t *p, uint64_t n, int more) {
    if (n != NL_FAST_SIZE || p[1] != 1 || p[2] || p[3]) {
        l->rejects++;
        return;
    }
    uint32_t slot = rd32(p + 4);
    uint64_t rid = rd64(p + 8);
    pthread_mutex_lock(&l->mu);
    nl_slot s = slot > 0 && slot < NL_MAX_SLOTS ? l->slots[slot] : (nl_slot){0};
    pthread_mutex_unlock(&l->mu);
    if (!s.used || s.conn != c->id || s.dev < 0 || s.dev >= NL_MAX_DEVS) {
        l->rejects++;
        char msg[80];
        snprintf(msg, sizeof msg, "rejected: no fast-launch slot %u on this link", slot);
        reply_error(l, c->id, rid, msg);
        return;
    }
    cl_event ev = NULL;
    cl_int err = disp(s.queue)->clEnqueueNDRangeKernel(
        s.queue, s.kernel, s.ndim, s.has_o ? s.o : NULL, s.g, s.has_l ? s.l : NULL, 0, NULL, &ev);
    if (err != CL_SUCCESS) {
        char msg[80];
        snprintf(msg, sizeof msg, "OpenCL error: clEnqueueNDRangeKernel failed: %d", (int)err);
        reply_error(l, c->id, rid, msg);
        return;
    }
    nl_fly *f = calloc(1, sizeof *f);
    if (!f) { /* cannot track it: wait here rather than lose the reply */
        disp(ev)->clWaitForEvents(1, &ev);
        disp(ev)->clReleaseEvent(ev);
        reply_error(l, c->id, rid, "node out of memory after the launch");
        return;
    }
    *f = (nl_fly){NULL, ev, c->id, rid, slot};
    int d = s.dev;
    if (l->fly_tail[d]) l->fly_tail[d]->next = f;
    else l->fly_head[d] = f;
    l->fly_tail[d] = f;
    l->fly_n[d]++;
    l->fly_total++;
    l->served++;
    cl_int st;
    if (!more && l->fly_n[d] == 1) {
        /* a lone launch (launch+wait): poll it briefly here, yielding to the device's
         * worker threads, instead of a callback and a wake-up of this thread */
        double deadline = now_s() + l->settle_s;
        while (!event_done(ev, &st) && now_s() < deadline) sched_yield();
        if (st <= CL_COMPLETE) {
            complete(l);
            return;
        }
    }
    disp(s.queue)->clFlush(s.queue);
    __atomic_add_fetch(&l->cb_set, 1, __ATOMIC_RELAXED);
    if (disp(ev)->clSetEventCallback(ev, CL_COMPLETE, on_complete, l) != CL_SUCCESS) {
        __atomic_sub_fetch(&l->cb_set, 1, __ATOMIC_RELAXED);
        wake(l->wake_fd); /* the 1 ms poll of in-flight launches is the safety net */
    }
}

/* ---- input ---------------------------------------------------------------------------- */
static void push_py(nl_link *l, nl_conn *c, uint32_t nf, const uint64_t *lens, const uint8_t *body,
                    uint64_t total) {
    nl_msg *m = calloc(1, sizeof *m);
    uint8_t *data = total ? malloc(total) : NULL;
    if (!m || (total && !data)) {
        free(m);
        free(data);
        l->rejects++;
        return;
    }
    m->conn = c->id;
    m->nframes = nf;
    for (uint32_t i = 0; i < nf; i++) m->lens[i] = lens[i];
    if (total) memcpy(data, body, total);
    m->data = data;
    m->peer_len = c->peer_len;
    memcpy(m->peer, c->peer, c->peer_len);
    pthread_mutex_lock(&l->mu);
    if (l->py_tail) l->py_tail->next = m;
    else l->py_head = m;
    l->py_tail = m;
    if (nf) c->backlog++;
    pthread_mutex_unlock(&l->mu);
    wake(l->py_fd);
}

static void close_conn(nl_link *l, nl_conn *c) {
    pthread_mutex_lock(&l->mu);
    int had_peer = c->has_peer;
    int32_t id = c->id;
    close(c->fd);
    c->fd = -1;
    bytes_free(&c->out);
    c->out_off = 0;
    for (int s = 1; s < NL_MAX_SLOTS; s++)
        if (l->slots[s].used && l->slots[s].conn == id) l->slots[s].conn = -1; /* unusable */
    pthread_mutex_unlock(&l->mu);
    bytes_free(&c->in);
    c->in_off = 0;
    if (had_peer) push_py(l, c, 0, NULL, NULL, 0); /* tell Python: drop its slots */
}

/* Handle the complete messages buffered on c; returns -1 when c was closed. */
static int parse(nl_link *l, nl_conn *c) {
    for (;;) {
        size_t avail = c->in.len - c->in_off;
        const uint8_t *p = c->in.p + c->in_off;
        if (avail < 4) break;
        uint32_t nf = rd32(p);
        if (nf < 1 || nf > l->max_frames || nf > 9) {
            l->rejects++;
            close_conn(l, c);
            return -1;
        }
        if (avail < 4 + 4 * (size_t)nf) break;
        uint64_t lens[9], total = 0;
        for (uint32_t i = 0; i < nf; i++) {
            lens[i] = rd32(p + 4 + 4 * i);
            if (lens[i] > l->max_frame) {
                l->rejects++;
                close_conn(l, c);
                return -1;
            }
            total += lens[i];
        }
        size_t need = 4 + 4 * (size_t)nf + total;
        if (avail < need) {
            if (bytes_reserve(&c->in, need - avail)) { /* cannot hold it: cut off */
                l->rejects++;
                close_conn(l, c);
                return -1;
            }
            break;
        }
        const uint8_t *body = p + 4 + 4 * (size_t)nf;
        if (!c->has_peer) {
            if (nf != 1 || lens[0] == 0 || lens[0] > 255) {
                l->rejects++;
                close_conn(l, c);
                return -1;
            }
            pthread_mutex_lock(&l->mu);
            c->peer_len = (uint32_t)lens[0];
            memcpy(c->peer, body, lens[0]);
            c->has_peer = 1;
            pthread_mutex_unlock(&l->mu);
        } else if (nf == 1 && lens[0] && body[0] == NL_FAST_MAGIC) {
            pthread_mutex_lock(&l->mu);
            c->parked = c->backlog > 0;
            pthread_mutex_unlock(&l->mu);
            if (c->parked) break; /* resumed by nl_handled */
            fast_launch(l, c, body, lens[0], avail > need);
        } else {
            push_py(l, c, nf, lens, body, total);
        }
        c->in_off += need;
    }
    if (c->in_off == c->in.len) {
        c->in.len = c->in_off = 0;
    } else if (c->in_off > (1u << 20) && c->in_off * 2 > c->in.len) {
        memmove(c->in.p, c->in.p + c->in_off, c->in.len - c->in_off);
        c->in.len -= c->in_off;
        c->in_off = 0;
    }
    return 0;
}

/* Read a bounded burst; -1 when the peer went away (complete messages are handled first). */
static int read_conn(nl_link *l, nl_conn *c) {
    size_t got = 0, want = 1 << 16;
    int eof = 0;
    while (got < NL_READ_BURST) {
        if (bytes_reserve(&c->in, want)) break;
        ssize_t n = recv(c->fd, c->in.p + c->in.len, want, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) eof = 1;
            break;
        }
        if (n == 0) {
            eof = 1;
            break;
        }
        c->in.len += (size_t)n;
        got += (size_t)n;
        if ((size_t)n < want) break;
        want = 1 << 20;
    }
    if (parse(l, c) < 0) return -1;
    if (eof) {
        close_conn(l, c);
        return -1;
    }
    return 0;
}

static void accept_all(nl_link *l) {
    for (int k = 0; k < 64; k++) {
        int fd = accept4(l->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        pthread_mutex_lock(&l->mu);
        nl_conn *c = NULL;
        for (int i = 0; i < NL_MAX_CONNS; i++) {
            int32_t id = l->next_gen * NL_MAX_CONNS + i;
            if (l->conns[i].fd < 0 && l->conns[i].backlog == 0) {
                c = &l->conns[i];
                memset(c, 0, sizeof *c);
                c->fd = fd;
                c->id = id;
                break;
            }
        }
        l->next_gen = (l->next_gen + 1) % (INT32_MAX / NL_MAX_CONNS - 1);
        pthread_mutex_unlock(&l->mu);
        if (!c) {
            l->rejects++;
            close(fd);
        }
    }
}

static void *link_main(void *arg) {
    nl_link *l = arg;
    struct pollfd pf[2 + NL_MAX_CONNS];
    int idx[2 + NL_MAX_CONNS];
    while (!__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE)) {
        int n = 0;
        pf[n++] = (struct pollfd){l->wake_fd, POLLIN, 0};
        pf[n++] = (struct pollfd){l->listen_fd, POLLIN, 0};
        pthread_mutex_lock(&l->mu);
        for (int i = 0; i < NL_MAX_CONNS; i++) {
            nl_conn *c = &l->conns[i];
            if (c->fd < 0) continue;
            if (c->eof) { /* a send failed: the peer is gone */
                pthread_mutex_unlock(&l->mu);
                close_conn(l, c);
                pthread_mutex_lock(&l->mu);
                continue;
            }
            if (c->parked && c->backlog == 0) {
                c->parked = 0;
                pthread_mutex_unlock(&l->mu);
                int r = parse(l, c);
                pthread_mutex_lock(&l->mu);
                if (r < 0) continue;
            }
            short ev = (short)((c->parked ? 0 : POLLIN) | (c->out.len ? POLLOUT : 0));
            idx[n] = i;
            pf[n++] = (struct pollfd){c->fd, ev, 0};
        }
        pthread_mutex_unlock(&l->mu);
        int r = poll(pf, (nfds_t)n, l->fly_total ? 1 : 100);
        if (r < 0 && errno != EINTR) break;
        if (pf[0].revents & POLLIN) {
            uint64_t v;
            ssize_t k = read(l->wake_fd, &v, sizeof v);
            (void)k;
        }
        if (pf[1].revents & POLLIN) accept_all(l);
        for (int j = 2; j < n; j++) {
            nl_conn *c = &l->conns[idx[j]];
            if (c->fd != pf[j].fd) continue;
            if (pf[j].revents & POLLOUT) {
                pthread_mutex_lock(&l->mu);
                flush_locked(c);
                pthread_mutex_unlock(&l->mu);
            }
            if (pf[j].revents & (POLLIN | POLLHUP | POLLERR)) read_conn(l, c);
        }
        if (l->fly_total) complete(l);
    }
    return NULL;
}

/* ---- API -------------------------------------------------------------------------------- */
nl_link *nl_start(int listen_fd, uint32_t max_frames, uint64_t max_frame_bytes, double settle_s,
                  int version) {
    nl_link *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    pthread_mutex_init(&l->mu, NULL);
    for (int i = 0; i < NL_MAX_CONNS; i++) l->conns[i].fd = -1;
    l->listen_fd = listen_fd;
    l->max_frames = max_frames;
    l->max_frame = max_frame_bytes;
    l->settle_s = settle_s;
    l->version = version;
    l->next_gen = 1;
    l->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    l->py_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (l->wake_fd < 0 || l->py_fd < 0 || pthread_create(&l->thread, NULL, link_main, l)) {
        if (l->wake_fd >= 0) close(l->wake_fd);
        if (l->py_fd >= 0) close(l->py_fd);
        free(l);
        return NULL;
    }
    l->started = 1;
    return l;
}

void nl_stop(nl_link *l) {
    if (!l) return;
    __atomic_store_n(&l->stop, 1, __ATOMIC_RELEASE);
    wake(l->wake_fd);
    if (l->started) pthread_join(l->thread, NULL);
    for (int d = 0; d < NL_MAX_DEVS; d++) {
        while (l->fly_head[d]) {
            nl_fly *f = l->fly_head[d];
            l->fly_head[d] = f->next;
            disp(f->ev)->clWaitForEvents(1, &f->ev);
            disp(f->ev)->clReleaseEvent(f->ev);
            free(f);
        }
    }
    for (int i = 0; i < NL_MAX_CONNS; i++) {
        nl_conn *c = &l->conns[i];
        if (c->fd >= 0) close(c->fd);
        bytes_free(&c->in);
        bytes_free(&c->out);
    }
    while (l->py_head) {
        nl_msg *m = l->py_head;
        l->py_head = m->next;
        nl_free(m);
    }
    close(l->py_fd);
    /* a completion callback may still be on its way (the implementation runs it after the
     * event completed): free only once every registered one has run, else keep the few
     * hundred KiB rather than let a late callback write into freed memory */
    double deadline = now_s() + 1.0;
    while (__atomic_load_n(&l->cb_fired, __ATOMIC_ACQUIRE) < l->cb_set && now_s() < deadline)
        sched_yield();
    if (__atomic_load_n(&l->cb_fired, __ATOMIC_ACQUIRE) < l->cb_set) return;
    close(l->wake_fd);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

int nl_py_fd(nl_link *l) { return l->py_fd; }

nl_msg *nl_pop(nl_link *l) {
    pthread_mutex_lock(&l->mu);
    nl_msg *m = l->py_head;
    if (m) {
        l->py_head = m->next;
        if (!l->py_head) l->py_tail = NULL;
        m->next = NULL;
    }
    pthread_mutex_unlock(&l->mu);
    return m;
}

void nl_free(nl_msg *m) {
    if (!m) return;
    free(m->data);
    free(m);
}

void nl_handled(nl_link *l, int32_t conn) {
    pthread_mutex_lock(&l->mu);
    nl_conn *c = &l->conns[(conn < 0 ? 0 : conn) % NL_MAX_CONNS];
    int resume = 0;
    if (c->id == conn && c->backlog) {
        c->backlog--;
        resume = c->backlog == 0 && c->parked;
    }
    pthread_mutex_unlock(&l->mu);
    if (resume) wake(l->wake_fd);
}

int nl_send(nl_link *l, int32_t conn, uint32_t nframes, const uint8_t *const *ptrs,
            const uint64_t *lens) {
    pthread_mutex_lock(&l->mu);
    int r = send_locked(l, conn_of(l, conn), nframes, ptrs, lens);
    pthread_mutex_unlock(&l->mu);
    return r;
}

int nl_slot_add(nl_link *l, uint32_t slot, int32_t conn, void *kernel, void *queue, int32_t dev,
                uint32_t ndim, const uint64_t *gsize, const uint64_t *lsize,
                const uint64_t *goff) {
    if (slot == 0 || slot >= NL_MAX_SLOTS || dev < 0 || dev >= NL_MAX_DEVS || ndim < 1 ||
        ndim > 3 || !kernel || !queue)
        return -1;
    nl_slot s = {1, conn, kernel, queue, dev, ndim, {1, 1, 1}, {1, 1, 1}, {0, 0, 0},
                 lsize != NULL, goff != NULL, 0.0, 0};
    for (uint32_t i = 0; i < ndim; i++) {
        s.g[i] = (size_t)gsize[i];
        if (lsize) s.l[i] = (size_t)lsize[i];
        if (goff) s.o[i] = (size_t)goff[i];
    }
    pthread_mutex_lock(&l->mu);
    l->slots[slot] = s;
    pthread_mutex_unlock(&l->mu);
    return 0;
}

void nl_slot_drop(nl_link *l, uint32_t slot) {
    if (slot == 0 || slot >= NL_MAX_SLOTS) return;
    pthread_mutex_lock(&l->mu);
    memset(&l->slots[slot], 0, sizeof l->slots[slot]);
    pthread_mutex_unlock(&l->mu);
}

uint32_t nl_slot_take(nl_link *l, uint32_t slot, double *seconds) {
    if (slot == 0 || slot >= NL_MAX_SLOTS) return 0;
    pthread_mutex_lock(&l->mu);
    nl_slot *s = &l->slots[slot];
    uint32_t n = s->tn;
    *seconds = s->tsum;
    s->tn = 0;
    s->tsum = 0.0;
    pthread_mutex_unlock(&l->mu);
    return n;
}

int32_t nl_inflight(nl_link *l, int32_t dev) {
    return dev >= 0 && dev < NL_MAX_DEVS ? __atomic_load_n(&l->fly_n[dev], __ATOMIC_RELAXED) : 0;
}
uint64_t nl_rejects(nl_link *l) { return __atomic_load_n(&l->rejects, __ATOMIC_RELAXED); }
uint64_t nl_served(nl_link *l) { return __atomic_load_n(&l->served, __ATOMIC_RELAXED); }
