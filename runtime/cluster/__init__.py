"""The cluster: wire protocol, broker, nodes and the client of the virtual OpenCL platform."""
