"""Route mode: the Python side of the shim's virtual OpenCL platform."""
