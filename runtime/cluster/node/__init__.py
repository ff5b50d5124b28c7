"""A cluster node: runs clients' OpenCL commands on this machine's real devices."""
