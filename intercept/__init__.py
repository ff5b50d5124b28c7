"""Interception of unmodified OpenCL applications (LD_PRELOAD shim) and launch records."""
