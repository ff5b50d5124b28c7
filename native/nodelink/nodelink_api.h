/* API of the node's native same-host link (native/nodelink/nodelink.c), as seen by
 * Python through cffi (runtime/nodelink.py). Plain declarations only: this text is also
 * the cffi cdef. */
typedef struct nl_link nl_link;

/* One message for Python: nframes frames concatenated in data (lens[i] bytes each), from
 * connection conn whose routing id is peer. nframes == 0: the connection closed. */
typedef struct nl_msg {
    struct nl_msg *next;
    int32_t conn;
    uint32_t nframes;
    uint64_t lens[9];
    uint8_t *data;
    uint32_t peer_len;
    uint8_t peer[256];
} nl_msg;

/* Start serving the listening Unix socket listen_fd (the caller keeps it open) on a new
 * thread. max_frames / max_frame_bytes: the framing limits of runtime.protocol;
 * settle_s: how long a lone fast launch is polled before a completion callback takes over;
 * version: runtime.protocol.PROTOCOL_VERSION (for the replies C writes). NULL on failure. */
nl_link *nl_start(int listen_fd, uint32_t max_frames, uint64_t max_frame_bytes, double settle_s,
                  int version);
/* Stop the thread, close every connection, release what is still in flight. */
void nl_stop(nl_link *l);
/* Readable (eventfd) while messages wait for Python. */
int nl_py_fd(nl_link *l);
/* The oldest message for Python, or NULL; free it with nl_free. */
nl_msg *nl_pop(nl_link *l);
void nl_free(nl_msg *m);
/* Python has handled (enqueued) one message of conn: fast launches behind it may run. */
void nl_handled(nl_link *l, int32_t conn);
/* Send one framed message to conn; -1 when the connection is gone. */
int nl_send(nl_link *l, int32_t conn, uint32_t nframes, const uint8_t *const *ptrs,
            const uint64_t *lens);
/* A fast-launch slot: kernel (its own cl_kernel, arguments already set) on queue with a
 * fixed NDRange, usable by connection conn only. slot in 1..NL_MAX_SLOTS-1. */
int nl_slot_add(nl_link *l, uint32_t slot, int32_t conn, void *kernel, void *queue, int32_t dev,
                uint32_t ndim, const uint64_t *gsize, const uint64_t *lsize,
                const uint64_t *goff);
void nl_slot_drop(nl_link *l, uint32_t slot);
/* Kernel seconds summed over the slot's launches completed since the last call. */
uint32_t nl_slot_take(nl_link *l, uint32_t slot, double *seconds);
/* Fast launches enqueued on device dev and not yet completed. */
int32_t nl_inflight(nl_link *l, int32_t dev);
/* Counters: messages rejected (framing, bad fast frames), fast launches served. */
uint64_t nl_rejects(nl_link *l);
uint64_t nl_served(nl_link *l);
