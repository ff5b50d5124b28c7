/* Functions shared between C and Python (cffi cdef). */
typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef struct _cl_command_queue *cl_command_queue;
typedef struct _cl_kernel *cl_kernel;
typedef struct _cl_event *cl_event;

extern "Python+C" void clproj_py_on_launch(cl_command_queue, cl_kernel, cl_uint, const size_t *,
                                         const size_t *, const size_t *, cl_int);
