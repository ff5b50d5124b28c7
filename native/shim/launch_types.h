/* Plain declarations shared by the C shim and its cffi cdef (no preprocessor lines). */
typedef struct {
    int kind;                  /* CLPROJ_ARG_* below */
    size_t size;               /* scalar bytes, buffer bytes, local bytes */
    const unsigned char *data; /* scalar bytes */
    void *mem;                 /* cl_mem of a buffer */
    uint64_t flags;            /* cl_mem_flags */
    size_t origin;             /* sub-buffer origin in parent */
    size_t parent_size;        /* sub-buffer: size of parent; 0 otherwise */
    const char *what;          /* unsupported: image, pipe, svm, sampler */
    int fresh;                 /* buffer written by no command since its creation (writes.c) */
} clproj_arg;

typedef struct {
    void *queue;
    void *kernel;
    void *device;
    const char *kernel_name;
    const char *source;        /* NULL for IL / binary programs */
    const char *options;
    const char *binary_kind;   /* NULL, "il", "binary" */
    const char *not_emulatable;
    uint32_t work_dim;
    int has_offset;
    int has_local;
    size_t offset[3];
    size_t global_size[3];
    size_t local_size[3];
    uint32_t nargs;
    clproj_arg *args;
    uint32_t n_wait;
    void *const *wait;
    int verify;
    uint32_t size_queries;     /* launch-sizing answers the app had read (queries.c) */
} clproj_launch;
