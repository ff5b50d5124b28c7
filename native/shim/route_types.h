/* Route mode: one call from a virtual-platform entry point into Python
 * (intercept/route_runtime.py). Plain declarations shared with the cffi cdef. */
enum {
    RT_PLATFORM = 1, RT_DEVICE = 2, RT_CONTEXT = 3, RT_QUEUE = 4, RT_MEM = 5, RT_PROGRAM = 6,
    RT_KERNEL = 7, RT_EVENT = 8
};
enum {
    RT_OP_INFO = 1, RT_OP_CREATE_CONTEXT = 2, RT_OP_CREATE_QUEUE = 3, RT_OP_CREATE_BUFFER = 4,
    RT_OP_CREATE_PROGRAM = 5, RT_OP_BUILD = 6, RT_OP_CREATE_KERNEL = 7, RT_OP_KERNELS_IN_PROGRAM = 8,
    RT_OP_SET_ARG = 9, RT_OP_RELEASE = 10, RT_OP_WAIT = 11, RT_OP_FINISH = 12, RT_OP_READ = 13,
    RT_OP_WRITE = 14, RT_OP_COPY = 15, RT_OP_FILL = 16, RT_OP_MAP = 17, RT_OP_UNMAP = 18,
    RT_OP_LAUNCH = 19, RT_OP_MARKER = 20, RT_OP_FLUSH = 21, RT_OP_UNSUPPORTED = 22,
    RT_OP_PROGRAM_BINARY = 23, RT_OP_READ_RECT = 24, RT_OP_WRITE_RECT = 25, RT_OP_COPY_RECT = 26,
    RT_OP_CALLBACK = 27
};
/* info classes (u[2] of RT_OP_INFO) */
enum { RT_INFO_OBJECT = 0, RT_INFO_BUILD = 1, RT_INFO_KERNEL_WG = 2, RT_INFO_KERNEL_ARG = 3,
       RT_INFO_PROFILING = 4 };

typedef struct {
    int32_t op;
    int32_t kind;            /* RT_* kind of the subject handle */
    int64_t id;              /* subject handle id */
    int64_t id2;             /* second handle id (copy destination, device, ...) or 0 */
    uint64_t u[6];           /* integer arguments, per op */
    const void *src;         /* input pointer: host data, arg value, source, options, name */
    void *dst;               /* output pointer: info value, read destination */
    size_t *size_ret;        /* info: bytes the value needs (may be NULL) */
    const size_t *g;         /* NDRange global size */
    const size_t *l;         /* NDRange local size or NULL */
    const size_t *o;         /* NDRange offset or NULL */
    uint32_t n_wait;
    const int64_t *wait_ids; /* ids of the wait-list events */
    int32_t want_event;      /* create an event handle in ret_event */
    void *ret;               /* created handle / mapped pointer */
    void *ret_event;         /* created event handle */
    const char *what;        /* RT_OP_UNSUPPORTED: the entry point's name */
    uint32_t n_released;     /* events released (count 0) since the last call: Python */
    const int64_t *released; /* drops them before the call itself (ids) */
} clproj_rcall;
