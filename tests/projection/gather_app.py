"""A pyopencl app whose one kernel reads a table where a large index buffer says:
``out[i] = t[idx[i]]``, 4 MiB of shuffled indices into a 4 MiB table. What the emulated
work-items touch depends on the indices, so its profile shows whether the emulator saw the
app's bytes (tests/projection/test_live_view.py)."""

from __future__ import annotations

import sys

import numpy as np
import pyopencl as cl

N = 1 << 20
SOURCE = """
__kernel void gather(__global const int *idx, __global const float *t, __global float *out) {
  const int i = get_global_id(0);
  out[i] = t[idx[i]];
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
    cl.Program(ctx, SOURCE).build().gather(queue, (N,), (64,), d_idx, d_t, d_out)
    out = np.empty_like(t)
    cl.enqueue_copy(queue, out, d_out)
    return 0 if np.array_equal(out, t[idx]) else 1


if __name__ == "__main__":
    sys.exit(main())
