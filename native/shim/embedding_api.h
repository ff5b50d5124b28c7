/* Exported through cffi's embedding machinery: calling it starts Python. */
int clproj_shim_start(void);
