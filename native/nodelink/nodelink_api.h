/* API of the node's native fast-launch link (native/nodelink/nodelink.c), as seen by
 * Python through cffi (runtime/cluster/node/nodelink.py). Plain declarations only: this text is also
 * the cffi cdef. */
typedef struct nl_link nl_link;

/* A note for Python: the fast connection of client `peer` closed (drop its slots). */
typedef struct nl_msg {
    struct nl_msg *next;
    uint32_t peer_len;
    uint8_t peer[256];
} nl_msg;

/* Serve the listening Unix socket listen_fd (the caller keeps it open) on a new thread.
 * settle_s: how long a lone fast launch is polled before a completion callback takes
 * over; version: runtime.cluster.protocol.PROTOCOL_VERSION (for the replies C writes). NULL on
 * failure. */
nl_link *nl_start(int listen_fd, double settle_s, int version);
/* Stop the thread, close every connection, release what is still in flight. */
void nl_stop(nl_link *l);
/* Readable (eventfd) while notes wait for Python or a awaited fast launch was taken. */
int nl_py_fd(nl_link *l);
/* The oldest note for Python, or NULL; free it with nl_free. */
nl_msg *nl_pop(nl_link *l);
void nl_free(nl_msg *m);
/* Python has handled (enqueued) the client's command `rid` from its command link: fast
 * launches that must follow it may run. */
void nl_handled(nl_link *l, const uint8_t *peer, uint32_t peer_len, uint64_t rid);
/* Request id of the client's newest fast launch taken (enqueued or refused), 0: none. */
uint64_t nl_fast_done(nl_link *l, const uint8_t *peer, uint32_t peer_len);
/* Make nl_py_fd readable once the client's fast launch `rid` has been taken. */
void nl_want(nl_link *l, const uint8_t *peer, uint32_t peer_len, uint64_t rid);
/* A fast-launch slot: kernel (its own cl_kernel, arguments already set; fast frames
 * bring new scalar values) on queue with a fixed NDRange, usable by client `peer` only.
 * slot in 1..4095. */
int nl_slot_add(nl_link *l, uint32_t slot, const uint8_t *peer, uint32_t peer_len, void *kernel,
                void *queue, int32_t dev, uint32_t ndim, const uint64_t *gsize,
                const uint64_t *lsize, const uint64_t *goff);
void nl_slot_drop(nl_link *l, uint32_t slot);
/* The slot's launches completed since the last call: their number (returned) and summed
 * kernel seconds, and the same for those whose placement key was the slot's own. */
uint32_t nl_slot_take(nl_link *l, uint32_t slot, double *seconds, uint32_t *key_n,
                      double *key_seconds);
/* Fast launches enqueued on device dev and not yet completed. */
int32_t nl_inflight(nl_link *l, int32_t dev);
/* Counters: messages rejected (framing, bad fast frames), fast launches served. */
uint64_t nl_rejects(nl_link *l);
uint64_t nl_served(nl_link *l);
