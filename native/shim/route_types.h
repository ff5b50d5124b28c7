/* Route mode: one call from a virtual-platform entry point (route.c) into Python
 * (runtime/route/platform.py). Plain declarations shared with the cffi cdef
 * (native/build_shim.py reads this file): route.c writes named fields, Python reads the
 * same names; nothing here is positional. */
enum {
    RT_PLATFORM = 1, RT_DEVICE = 2, RT_CONTEXT = 3, RT_QUEUE = 4, RT_MEM = 5, RT_PROGRAM = 6,
    RT_KERNEL = 7, RT_EVENT = 8
};
/* The calls (clproj_rcall.op); each reads the member of clproj_rargs named after it. */
enum {
    RT_OP_INFO = 1, RT_OP_CREATE_CONTEXT = 2, RT_OP_CREATE_QUEUE = 3, RT_OP_CREATE_BUFFER = 4,
    RT_OP_CREATE_PROGRAM = 5, RT_OP_BUILD = 6, RT_OP_CREATE_KERNEL = 7, RT_OP_KERNELS_IN_PROGRAM = 8,
    RT_OP_RELEASE = 10, RT_OP_WAIT = 11, RT_OP_FINISH = 12, RT_OP_READ = 13,
    RT_OP_WRITE = 14, RT_OP_COPY = 15, RT_OP_FILL = 16, RT_OP_MAP = 17, RT_OP_UNMAP = 18,
    RT_OP_LAUNCH = 19, RT_OP_MARKER = 20, RT_OP_FLUSH = 21,
    RT_OP_READ_RECT = 24, RT_OP_WRITE_RECT = 25, RT_OP_COPY_RECT = 26,
    RT_OP_CALLBACK = 27, RT_OP_CREATE_SUBBUF = 28, RT_OP_USER_EVENT = 29, RT_OP_USER_STATUS = 30,
    RT_OP_COMPILE = 31, RT_OP_LINK = 32, RT_OP_CLONE_KERNEL = 33, RT_OP_PRESTART = 34
};
/* a kernel argument's kind (clproj_route_kernel_args), from the real kernel */
enum { RT_ARG_UNKNOWN = 0, RT_ARG_SCALAR = 1, RT_ARG_POINTER = 2, RT_ARG_LOCAL = 3, RT_ARG_OTHER = 4,
       RT_ARG_SAMPLER = 5 };
/* what clSetKernelArg left in an argument (clproj_karg.kind) */
enum { RT_SET_NONE = 0, RT_SET_BYTES = 1, RT_SET_MEM = 2, RT_SET_NULL = 3, RT_SET_LOCAL = 4 };
#define RT_ARG_SIZES 8   /* accepted sizes of a by-value argument (0-terminated; none: any) */
#define RT_ARG_MAX 4096  /* the largest by-value argument the cluster protocol carries */
/* which clGet*Info an RT_OP_INFO answers (u.info.cls) */
enum { RT_INFO_OBJECT = 0, RT_INFO_BUILD = 1, RT_INFO_KERNEL_WG = 2, RT_INFO_KERNEL_ARG = 3,
       RT_INFO_PROFILING = 4 };
/* what an RT_OP_MARKER stands for (u.marker.type): its event's command type */
enum { RT_MARKER_PLAIN = 0, RT_MARKER_MIGRATE = 1, RT_MARKER_BARRIER = 2 };

/* The integer arguments of one call, one member per op family (named after the op). */
typedef union {
    struct {
        uint32_t param;    /* the clGet*Info parameter */
        uint32_t cls;      /* RT_INFO_* */
        uint64_t size;     /* bytes at dst (0: no value wanted) */
        uint32_t arg;      /* RT_INFO_KERNEL_ARG: the argument's index */
    } info;
    struct { uint64_t properties; } create_queue;            /* cl_command_queue_properties */
    struct { uint64_t flags, size; } create_buffer;           /* src: host pointer */
    struct { uint64_t flags, origin, size; } create_subbuf;   /* the region */
    struct { uint64_t length; uint32_t binary; } create_program; /* src: source or binary */
    struct { uint32_t capacity, count; } kernels_in_program;  /* dst entries in; made out */
    struct { uint32_t blocking; uint64_t offset, size; } rw;  /* READ (dst), WRITE (src) */
    struct { uint64_t src_offset, dst_offset, size; } copy;   /* id2: the destination */
    struct { uint64_t pattern_size, offset, size; } fill;     /* src: the pattern */
    struct { uint32_t blocking; uint64_t offset, size, flags; } map; /* ret: the pointer */
    struct {
        uint32_t dim;
        const size_t *global_size, *local_size, *global_offset; /* local, offset: or NULL */
    } launch;
    struct {
        uint32_t blocking;
        const size_t *region;
        const size_t *a_origin; /* the buffer (copy: the source), bytes */
        const size_t *b_origin; /* the host memory (copy: the destination, id2) */
        uint64_t a_row, a_slice, b_row, b_slice; /* pitches, 0 already resolved */
    } rect;
    struct { uint32_t type; } marker;         /* RT_MARKER_* */
    struct { int32_t status; } user_status;   /* clSetUserEventStatus */
    struct { int32_t type; } callback;        /* CL_COMPLETE / CL_RUNNING / CL_SUBMITTED */
} clproj_rargs;

typedef struct {
    int32_t op;              /* RT_OP_* */
    int32_t kind;            /* RT_* kind of the subject handle */
    int64_t id;              /* subject handle id */
    int64_t id2;             /* copy / copy rect: the destination buffer's id */
    int64_t queue;           /* commands: the queue's id */
    clproj_rargs u;          /* the op's integer arguments */
    const void *src;         /* input pointer: host data, source, options, name, pattern, fn */
    void *dst;               /* output pointer: info value, read destination, kernels, user */
    size_t *size_ret;        /* info: bytes the value needs (may be NULL) */
    uint32_t n_wait;
    const int64_t *wait_ids; /* ids of the wait-list events */
    int32_t want_event;      /* create an event handle in ret_event */
    void *ret;               /* created handle / mapped pointer */
    void *ret_event;         /* created event handle */
    uint32_t n_released;     /* events released (count 0) since the last call: Python */
    const int64_t *released; /* drops them before the call itself (ids) */
    uint32_t n_ids;          /* compile: header programs; link: input programs */
    const int64_t *ids;
    const char *const *names; /* compile: the headers' include names */
} clproj_rcall;

/* One kernel argument as set by the app: clSetKernelArg is answered in C (no call into
 * Python per argument); Python reads the arguments whose gen changed at each launch. */
typedef struct {
    uint64_t gen;   /* the kernel's set counter when this argument was last set; 0: never */
    int32_t kind;   /* RT_SET_* */
    int64_t id;     /* RT_SET_MEM: the cl_mem's id */
    uint64_t size;  /* RT_SET_BYTES: value bytes; RT_SET_LOCAL: __local bytes */
    uint8_t *bytes; /* RT_SET_BYTES: a copy of the value (made at the call) */
} clproj_karg;

/* Helpers runtime/route/ calls (declared here: the cdef reads this file too). */
/* The real kernel's argument kinds (RT_ARG_*) and, per argument, RT_ARG_SIZES accepted
 * by-value sizes (0-terminated; all 0: any size): clSetKernelArg checks them in C with
 * the driver's codes, and knows which values are cl_mem handles it may look at. */
void clproj_route_kernel_args(void *h, uint32_t n, const uint8_t *kinds, const uint32_t *sizes);
/* The kernel's arguments (n of them, as set by clproj_route_kernel_args), or NULL. */
clproj_karg *clproj_route_kernel_argv(void *h);
/* Copy the arguments of kernel src to kernel dst (clCloneKernel). */
void clproj_route_kernel_copy_args(void *dst, void *src);
