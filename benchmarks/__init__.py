"""Benchmark applications, the ground-truth timing harness and the project's benchmarks."""
