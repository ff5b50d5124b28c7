/* The node's fast-launch link: a C thread that runs clients' repeated launches alone
 * (runtime/cluster/node/nodelink.py drives it; runtime.cluster.node.server owns everything else).
 *
 * Why: on the same host, a launch the client waits for crossed the node's Python twice
 * per round trip (wake-up, read, msgpack decode and validation, pyopencl enqueue, event
 * polling, reply encoding): about 100 us of a ~270 us round trip on the 2-core VM. A
 * client that sends exactly the same launch again (kernel, arguments, NDRange) gets a
 * *slot* from the node's Python: a dedicated cl_kernel with those arguments, registered
 * here. Later copies of that launch travel on a second Unix socket (the node's command
 * socket path + ".fast") as 24-byte frames that this thread enqueues, waits for and
 * answers with the same msgpack "done"/"reply" messages Python would send.
 *
 * Ordering across the two connections of one client (its command link, served by Python,
 * and its fast link, served here), both numbered by the client's request ids:
 * - a fast frame carries `after`, the id of the last command the client sent on its
 *   command link; it runs only when Python has handled (enqueued) that command
 *   (nl_handled); until then its connection is parked;
 * - a command sent after fast frames carries `after` = the last fast frame's id, and
 *   Python holds it back until this thread has taken that frame (nl_fast_done, nl_want).
 * Device queues are in order, so completion order then agrees with the client's order.
 *
 * Framing as runtime/cluster/unixlink.py: u32 nframes, u32 length per frame, the frames; the
 * first message of a connection is the client's routing id. A framing violation cuts the
 * connection off; any other malformed message is counted and dropped.
 *
 * Threads: the link thread owns the connections and the in-flight lists; the mutex guards
 * what Python also touches (clients' counters, slots, notes for Python). OpenCL is called
 * through each object's ICD dispatch table, so no OpenCL library is linked. */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl_icd.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
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
#define NL_MAX_PEERS 256
#define NL_MAX_SLOTS 4096
#define NL_MAX_DEVS 64
#define NL_FAST_MAGIC 0xC1 /* a byte msgpack never uses: no header starts with it */
#define NL_FAST_HEAD 24   /* a fast frame's fixed part; scalar arguments follow */
#define NL_MAX_SCALAR 256 /* bytes of one scalar argument (runtime.cluster.protocol) */
#define NL_MAX_FRAME (1u << 16) /* nothing larger belongs on this link */
#define NL_BATCH 4096         /* runtime.cluster.protocol.MAX_LIST: ids in one "done" */

typedef struct {
    uint8_t *p;
    size_t len, cap;
} nl_bytes;

/* A client (by routing id): how far each of its two connections has got. */
typedef struct {
    int used;
    uint32_t gen; /* bumped when the entry is given to another client */
    uint32_t len;
    uint8_t id[256];
    uint64_t handled;   /* newest command Python has handled from its command link */
    uint64_t fast_done; /* newest fast frame taken here */
    uint64_t want;      /* Python waits for fast_done >= want (0: no) */
    uint64_t touched;
} nl_peer;

typedef struct {
    int fd; /* -1: free */
    int32_t id;   /* generation * NL_MAX_CONNS + index: replies to a reused entry go nowhere */
    int32_t peer; /* index into peers, -1 until the routing id arrived */
    uint32_t peer_gen;
    nl_bytes in;
    size_t in_off;
    nl_bytes out; /* guarded by the mutex */
    size_t out_off;
    uint64_t park_after; /* a fast frame waits for handled >= this (0: not parked) */
    int eof;
} nl_conn;

typedef struct {
    int used;
    int32_t peer;
    uint32_t peer_gen;
    cl_kernel kernel;
    cl_command_queue queue;
    int32_t dev;
    cl_uint ndim;
    size_t g[3], l[3], o[3];
    int has_l, has_o;
    double tsum, tsum_key; /* kernel seconds: every launch, those of the slot's own key */
    uint32_t tn, tn_key;
} nl_slot;

typedef struct nl_fly {
    struct nl_fly *next;
    cl_event ev;
    int32_t conn;
    uint64_t rid;
    uint32_t slot;
    int same_key; /* the launch's placement key is the slot's (its time is that key's) */
} nl_fly;

struct nl_link {
    pthread_mutex_t mu;
    pthread_t thread;
    int started, stop;
    int listen_fd, wake_fd, py_fd;
    double settle_s;
    int version;
    uint64_t clock; /* peers' LRU */
    int32_t next_gen;
    nl_conn conns[NL_MAX_CONNS];
    nl_peer peers[NL_MAX_PEERS];
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

/* The entry of client `id` (mutex held); created, reusing the least recently used one,
 * when `create`. -1 when absent. */
static int32_t peer_find(nl_link *l, const uint8_t *id, uint32_t len, int create) {
    if (len == 0 || len > 255) return -1;
    int32_t lru = 0;
    for (int32_t i = 0; i < NL_MAX_PEERS; i++) {
        nl_peer *p = &l->peers[i];
        if (p->used && p->len == len && memcmp(p->id, id, len) == 0) {
            p->touched = ++l->clock;
            return i;
        }
        if (!p->used || (l->peers[lru].used && p->touched < l->peers[lru].touched)) lru = i;
    }
    if (!create) return -1;
    nl_peer *p = &l->peers[lru];
    uint32_t gen = p->gen + 1;
    memset(p, 0, sizeof *p);
    p->used = 1;
    p->gen = gen;
    p->len = len;
    memcpy(p->id, id, len);
    p->touched = ++l->clock;
    return lru;
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

/* ---- msgpack replies written by C (the shapes runtime.cluster.protocol validates) ---------------- */
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

/* Send one encoded header as a message to conn (gone: dropped) and free it. */
static void send_message(nl_link *l, int32_t conn, nl_bytes *b) {
    const uint8_t *p = b->p;
    uint64_t len = b->len;
    pthread_mutex_lock(&l->mu);
    send_locked(l, conn_of(l, conn), 1, &p, &len);
    pthread_mutex_unlock(&l->mu);
    bytes_free(b);
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
    send_message(l, conn, &b);
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
    send_message(l, conn, &b);
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
            __atomic_sub_fetch(&l->fly_n[d], 1, __ATOMIC_RELAXED);
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
                        if (f->same_key) {
                            s->tsum_key += secs;
                            s->tn_key++;
                        }
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
/* The client's fast frame rid is on the device queue (or refused): commands the node's
 * Python holds back until then (`after`) may follow it now. */
static void taken(nl_link *l, nl_conn *c, uint64_t rid) {
    pthread_mutex_lock(&l->mu);
    nl_peer *peer = &l->peers[c->peer];
    if (peer->gen == c->peer_gen && rid > peer->fast_done) peer->fast_done = rid;
    if (peer->want && peer->fast_done >= peer->want) {
        peer->want = 0;
        wake(l->py_fd);
    }
    pthread_mutex_unlock(&l->mu);
}

/* A well-formed fast frame of n bytes? Frame (little-endian): u8 0xC1, u8 version 1,
 * u8 flags (bit 0: the launch's key is the slot's), u8 count of scalar arguments, u32
 * slot, u64 request id, u64 after (the last command sent on the client's command link),
 * then per scalar argument u16 index, u16 size (1..256), its bytes. */
static int fast_frame_ok(const uint8_t *p, uint64_t n) {
    if (n < NL_FAST_HEAD || p[0] != NL_FAST_MAGIC || p[1] != 1 || p[2] > 1) return 0;
    uint64_t pos = NL_FAST_HEAD;
    for (unsigned i = 0; i < p[3]; i++) {
        if (pos + 4 > n) return 0;
        uint32_t size = (uint32_t)p[pos + 2] | (uint32_t)p[pos + 3] << 8;
        if (size == 0 || size > NL_MAX_SCALAR || pos + 4 + size > n) return 0;
        pos += 4 + size;
    }
    return pos == n;
}

/* Run a fast frame (checked by fast_frame_ok) that may run now; `more`: further
 * messages are already buffered (a burst). */
static void fast_launch(nl_link *l, nl_conn *c, const uint8_t *p, int more) {
    uint32_t slot = rd32(p + 4);
    uint64_t rid = rd64(p + 8);
    pthread_mutex_lock(&l->mu);
    nl_slot s = slot > 0 && slot < NL_MAX_SLOTS ? l->slots[slot] : (nl_slot){0};
    pthread_mutex_unlock(&l->mu);
    if (!s.used || s.peer != c->peer || s.peer_gen != c->peer_gen || s.dev < 0 ||
        s.dev >= NL_MAX_DEVS) {
        __atomic_add_fetch(&l->rejects, 1, __ATOMIC_RELAXED);
        char msg[80];
        snprintf(msg, sizeof msg, "rejected: no fast-launch slot %u for this client", slot);
        reply_error(l, c->id, rid, msg);
        taken(l, c, rid);
        return;
    }
    /* this thread is the only one that sets the slot's kernel arguments after its
     * creation: the frame's scalars are this launch's */
    uint64_t pos = NL_FAST_HEAD;
    for (unsigned i = 0; i < p[3]; i++) {
        cl_uint index = (cl_uint)p[pos] | (cl_uint)p[pos + 1] << 8;
        size_t size = (size_t)p[pos + 2] | (size_t)p[pos + 3] << 8;
        cl_int e = disp(s.kernel)->clSetKernelArg(s.kernel, index, size, p + pos + 4);
        if (e != CL_SUCCESS) {
            char msg[80];
            snprintf(msg, sizeof msg, "OpenCL error: clSetKernelArg(%u) failed: %d", index, (int)e);
            reply_error(l, c->id, rid, msg);
            taken(l, c, rid);
            return;
        }
        pos += 4 + size;
    }
    cl_event ev = NULL;
    cl_int err = disp(s.queue)->clEnqueueNDRangeKernel(
        s.queue, s.kernel, s.ndim, s.has_o ? s.o : NULL, s.g, s.has_l ? s.l : NULL, 0, NULL, &ev);
    if (err != CL_SUCCESS) {
        char msg[80];
        snprintf(msg, sizeof msg, "OpenCL error: clEnqueueNDRangeKernel failed: %d", (int)err);
        reply_error(l, c->id, rid, msg);
        taken(l, c, rid);
        return;
    }
    taken(l, c, rid); /* enqueued: commands held back behind it may go now */
    nl_fly *f = calloc(1, sizeof *f);
    if (!f) { /* cannot track it: wait here rather than lose the reply */
        disp(ev)->clWaitForEvents(1, &ev);
        disp(ev)->clReleaseEvent(ev);
        reply_error(l, c->id, rid, "node out of memory after the launch");
        return;
    }
    *f = (nl_fly){NULL, ev, c->id, rid, slot, p[2] & 1};
    int d = s.dev;
    if (l->fly_tail[d]) l->fly_tail[d]->next = f;
    else l->fly_head[d] = f;
    l->fly_tail[d] = f;
    __atomic_add_fetch(&l->fly_n[d], 1, __ATOMIC_RELAXED);
    l->fly_total++;
    __atomic_add_fetch(&l->served, 1, __ATOMIC_RELAXED);
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
static void close_conn(nl_link *l, nl_conn *c) {
    nl_msg *m = calloc(1, sizeof *m);
    pthread_mutex_lock(&l->mu);
    close(c->fd);
    c->fd = -1;
    bytes_free(&c->out);
    c->out_off = 0;
    if (m && c->peer >= 0 && l->peers[c->peer].gen == c->peer_gen) {
        /* tell Python: drop this client's slots (it forgets them too when a link closes) */
        m->peer_len = l->peers[c->peer].len;
        memcpy(m->peer, l->peers[c->peer].id, m->peer_len);
        if (l->py_tail) l->py_tail->next = m;
        else l->py_head = m;
        l->py_tail = m;
        m = NULL;
        wake(l->py_fd);
    }
    pthread_mutex_unlock(&l->mu);
    free(m);
    bytes_free(&c->in);
    c->in_off = 0;
    c->park_after = 0;
}

static void reject(nl_link *l) { __atomic_add_fetch(&l->rejects, 1, __ATOMIC_RELAXED); }

/* Handle the complete messages buffered on c; -1 when c was closed. */
static int parse(nl_link *l, nl_conn *c) {
    for (;;) {
        size_t avail = c->in.len - c->in_off;
        const uint8_t *p = c->in.p + c->in_off;
        if (avail < 4) break;
        uint32_t nf = rd32(p);
        if (nf != 1) { /* everything on this link is one frame */
            reject(l);
            close_conn(l, c);
            return -1;
        }
        if (avail < 8) break;
        uint32_t n = rd32(p + 4);
        if (n > NL_MAX_FRAME) {
            reject(l);
            close_conn(l, c);
            return -1;
        }
        if (avail < 8 + (size_t)n) break;
        const uint8_t *body = p + 8;
        if (c->peer < 0) { /* the routing id */
            if (n == 0 || n > 255) {
                reject(l);
                close_conn(l, c);
                return -1;
            }
            pthread_mutex_lock(&l->mu);
            c->peer = peer_find(l, body, n, 1);
            c->peer_gen = l->peers[c->peer].gen;
            pthread_mutex_unlock(&l->mu);
        } else if (fast_frame_ok(body, n)) {
            uint64_t after = rd64(body + 16);
            pthread_mutex_lock(&l->mu);
            nl_peer *peer = &l->peers[c->peer];
            int evicted = peer->gen != c->peer_gen;
            pthread_mutex_unlock(&l->mu);
            if (evicted) { /* over NL_MAX_PEERS clients: this one starts over */
                reject(l);
                close_conn(l, c);
                return -1;
            }
            pthread_mutex_lock(&l->mu);
            int ready = peer->handled >= after;
            c->park_after = ready ? 0 : after ? after : 1;
            pthread_mutex_unlock(&l->mu);
            if (!ready) break; /* resumed by nl_handled */
            fast_launch(l, c, body, avail > 8 + (size_t)n);
        } else {
            reject(l); /* not a fast frame: dropped, as Python drops an undecodable header */
        }
        c->in_off += 8 + (size_t)n;
    }
    if (c->in_off == c->in.len) {
        c->in.len = c->in_off = 0;
    } else if (c->in_off > (1u << 16)) {
        memmove(c->in.p, c->in.p + c->in_off, c->in.len - c->in_off);
        c->in.len -= c->in_off;
        c->in_off = 0;
    }
    return 0;
}

/* Read a bounded burst; -1 when the peer went away (complete messages are handled first). */
static int read_conn(nl_link *l, nl_conn *c) {
    size_t got = 0;
    int eof = 0;
    while (got < (1u << 20) && c->in.len - c->in_off < (1u << 20)) {
        if (bytes_reserve(&c->in, 1 << 16)) break;
        ssize_t n = recv(c->fd, c->in.p + c->in.len, 1 << 16, MSG_DONTWAIT);
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
        if (n < (1 << 16)) break;
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
            if (l->conns[i].fd < 0) {
                c = &l->conns[i];
                memset(c, 0, sizeof *c);
                c->fd = fd;
                c->id = l->next_gen * NL_MAX_CONNS + i;
                c->peer = -1;
                break;
            }
        }
        l->next_gen = (l->next_gen + 1) % (INT32_MAX / NL_MAX_CONNS - 1);
        pthread_mutex_unlock(&l->mu);
        if (!c) {
            reject(l);
            close(fd);
        }
    }
}

/* The process's signals are for its own threads: Linux may deliver a process-directed
 * signal to any thread not blocking it, and one taken here would not wake the node's
 * Python main thread, whose handler stops the node (clproj/background_thread.py says the
 * same of clproj's Python threads). Faults stay unblocked: they belong to the thread. */
static void block_async_signals(void) {
    sigset_t set;
    sigfillset(&set);
    static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT};
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) sigdelset(&set, faults[i]);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void *link_main(void *arg) {
    nl_link *l = arg;
    block_async_signals();
    struct pollfd pf[2 + NL_MAX_CONNS];
    int idx[2 + NL_MAX_CONNS];
    while (!__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE)) {
        int n = 0;
        pf[n++] = (struct pollfd){l->wake_fd, POLLIN, 0};
        pf[n++] = (struct pollfd){l->listen_fd, POLLIN, 0};
        for (int i = 0; i < NL_MAX_CONNS; i++) {
            nl_conn *c = &l->conns[i];
            if (c->fd < 0) continue;
            pthread_mutex_lock(&l->mu);
            int eof = c->eof;
            int resume = c->park_after && l->peers[c->peer].handled >= c->park_after;
            if (c->park_after && l->peers[c->peer].gen != c->peer_gen) resume = 1; /* evicted */
            pthread_mutex_unlock(&l->mu);
            if (eof) { /* a send failed: the peer is gone */
                close_conn(l, c);
                continue;
            }
            if (resume) {
                c->park_after = 0;
                if (parse(l, c) < 0) continue;
            }
            pthread_mutex_lock(&l->mu);
            short ev = (short)((c->park_after ? 0 : POLLIN) | (c->out.len ? POLLOUT : 0));
            pthread_mutex_unlock(&l->mu);
            idx[n] = i;
            pf[n++] = (struct pollfd){c->fd, ev, 0};
        }
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
nl_link *nl_start(int listen_fd, double settle_s, int version) {
    nl_link *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    pthread_mutex_init(&l->mu, NULL);
    for (int i = 0; i < NL_MAX_CONNS; i++) l->conns[i].fd = -1;
    l->listen_fd = listen_fd;
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
        free(m);
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

void nl_free(nl_msg *m) { free(m); }

void nl_handled(nl_link *l, const uint8_t *peer, uint32_t peer_len, uint64_t rid) {
    pthread_mutex_lock(&l->mu);
    int32_t i = peer_find(l, peer, peer_len, 1);
    int resume = 0;
    if (i >= 0 && rid > l->peers[i].handled) {
        l->peers[i].handled = rid;
        for (int k = 0; k < NL_MAX_CONNS && !resume; k++) {
            nl_conn *c = &l->conns[k];
            resume = c->fd >= 0 && c->peer == i && c->park_after && c->park_after <= rid;
        }
    }
    pthread_mutex_unlock(&l->mu);
    if (resume) wake(l->wake_fd);
}

uint64_t nl_fast_done(nl_link *l, const uint8_t *peer, uint32_t peer_len) {
    pthread_mutex_lock(&l->mu);
    int32_t i = peer_find(l, peer, peer_len, 0);
    uint64_t v = i >= 0 ? l->peers[i].fast_done : 0;
    pthread_mutex_unlock(&l->mu);
    return v;
}

void nl_want(nl_link *l, const uint8_t *peer, uint32_t peer_len, uint64_t rid) {
    pthread_mutex_lock(&l->mu);
    int32_t i = peer_find(l, peer, peer_len, 1);
    if (i >= 0) {
        if (l->peers[i].fast_done >= rid) wake(l->py_fd);
        else l->peers[i].want = rid;
    }
    pthread_mutex_unlock(&l->mu);
}

int nl_slot_add(nl_link *l, uint32_t slot, const uint8_t *peer, uint32_t peer_len, void *kernel,
                void *queue, int32_t dev, uint32_t ndim, const uint64_t *gsize,
                const uint64_t *lsize, const uint64_t *goff) {
    if (slot == 0 || slot >= NL_MAX_SLOTS || dev < 0 || dev >= NL_MAX_DEVS || ndim < 1 ||
        ndim > 3 || !kernel || !queue)
        return -1;
    nl_slot s = {1, -1, 0, kernel, queue, dev, ndim, {1, 1, 1}, {1, 1, 1}, {0, 0, 0},
                 lsize != NULL, goff != NULL, 0.0, 0.0, 0, 0};
    for (uint32_t i = 0; i < ndim; i++) {
        s.g[i] = (size_t)gsize[i];
        if (lsize) s.l[i] = (size_t)lsize[i];
        if (goff) s.o[i] = (size_t)goff[i];
    }
    pthread_mutex_lock(&l->mu);
    int32_t p = peer_find(l, peer, peer_len, 1);
    if (p >= 0) {
        s.peer = p;
        s.peer_gen = l->peers[p].gen;
        l->slots[slot] = s;
    }
    pthread_mutex_unlock(&l->mu);
    return p >= 0 ? 0 : -1;
}

void nl_slot_drop(nl_link *l, uint32_t slot) {
    if (slot == 0 || slot >= NL_MAX_SLOTS) return;
    pthread_mutex_lock(&l->mu);
    memset(&l->slots[slot], 0, sizeof l->slots[slot]);
    pthread_mutex_unlock(&l->mu);
}

uint32_t nl_slot_take(nl_link *l, uint32_t slot, double *seconds, uint32_t *key_n,
                      double *key_seconds) {
    *seconds = *key_seconds = 0.0;
    *key_n = 0;
    if (slot == 0 || slot >= NL_MAX_SLOTS) return 0;
    pthread_mutex_lock(&l->mu);
    nl_slot *s = &l->slots[slot];
    uint32_t n = s->tn;
    *seconds = s->tsum;
    *key_n = s->tn_key;
    *key_seconds = s->tsum_key;
    s->tn = s->tn_key = 0;
    s->tsum = s->tsum_key = 0.0;
    pthread_mutex_unlock(&l->mu);
    return n;
}

int32_t nl_inflight(nl_link *l, int32_t dev) {
    return dev >= 0 && dev < NL_MAX_DEVS ? __atomic_load_n(&l->fly_n[dev], __ATOMIC_RELAXED) : 0;
}
uint64_t nl_rejects(nl_link *l) { return __atomic_load_n(&l->rejects, __ATOMIC_RELAXED); }
uint64_t nl_served(nl_link *l) { return __atomic_load_n(&l->served, __ATOMIC_RELAXED); }
