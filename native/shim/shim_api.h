/* Python callbacks (reached only at recorded launches) and C helpers Python calls. */
extern "Python+C" int clproj_py_start(void);
extern "Python+C" int clproj_py_pre_launch(clproj_launch *);
extern "Python+C" void clproj_py_post_launch(int, clproj_launch *, int32_t, int64_t);

int32_t clproj_read_mem(void *queue, void *mem, size_t size, void *dst, uint32_t n_wait,
                        void *const *wait);
void *clproj_map_mem(void *queue, void *mem, size_t size, uint32_t n_wait, void *const *wait);
int32_t clproj_unmap_mem(void *queue, void *mem, void *ptr);
int32_t clproj_host_unified(void *device);
int32_t clproj_device_str(void *device, uint32_t param, char *buf, size_t n);
uint64_t clproj_device_type(void *device);
int32_t clproj_take_record_times(int32_t *handles, int64_t *ns, int32_t max);
void clproj_harvest_now(void);
uint32_t clproj_size_query_param(uint32_t bit);
uint64_t clproj_size_query_answer(uint32_t bit);
void clproj_log(const char *msg);
/* Route mode (route.c <-> runtime/route/platform.py). */
extern "Python+C" int32_t clproj_py_route(clproj_rcall *);
void *clproj_route_handle(int32_t kind, int64_t id);
void *clproj_route_static(int32_t kind);
void clproj_route_closed(void);
void clproj_route_retain(void *h);
void clproj_route_release(void *h);
void clproj_route_fire(void *fn, void *event, int32_t status, void *user);
