"""OpenCL device discovery, device profiles (spec sheets + measured curves) and NVML data."""
