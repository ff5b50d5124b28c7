"""A pyopencl app whose kernels read a table where a large index buffer says:
``out[i] = t[idx[i]]``, 4 MiB of shuffled indices into a 4 MiB table. What the emulated
work-items touch depends on the indices, so a profile shows whether the emulator saw the
app's bytes (tests/projection/test_live_view.py). A second kernel reads the same two
buffers a second later: their snapshots are then the first launch's, already written."""

from __future__ import annotations

import sys
import time

import numpy as np
import pyopencl as cl

N = 1 << 20
SOURCE = """
__kernel void gather(__global const int *idx, __global const float *t, __global float *out) {
  const int i = get_global_id(0);
  out[i] = t[idx[i]];
}
__kernel void gather_twice(__global const int *idx, __global const float *t,
                           __global float *out) {
  const int i = get_global_id(0);
  out[i] = 2.0f * t[idx[i]];
}
"""


def main() -> int:
    ctx = cl.create_some_context(interactive=False)
    queue = cl.CommandQueue(ctx)
    mf = cl.mem_flags
    idx = np.random.default_rng(7).permutation(N).astype(np.int32)
    t = np.arange(N, dtype=np.float32) + 1.0
    d_idx = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=idx)
    d_t = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=t)
    d_out = cl.Buffer(ctx, mf.WRITE_ONLY, t.nbytes)
    program = cl.Program(ctx, SOURCE).build()
    program.gather(queue, (N,), (64,), d_idx, d_t, d_out)
    out = np.empty_like(t)
    cl.enqueue_copy(queue, out, d_out)
    time.sleep(1.0)  # the first launch's record is written by then
    program.gather_twice(queue, (N,), (64,), d_idx, d_t, d_out)
    twice = np.empty_like(t)
    cl.enqueue_copy(queue, twice, d_out)
    return 0 if np.array_equal(out, t[idx]) and np.array_equal(twice, 2 * t[idx]) else 1


if __name__ == "__main__":
    sys.exit(main())
