"""Client of the virtual OpenCL platform (what route mode calls into)."""
