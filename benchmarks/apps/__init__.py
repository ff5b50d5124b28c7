"""Our own OpenCL implementations of the paper's applications and extra model-stressing kernels."""
