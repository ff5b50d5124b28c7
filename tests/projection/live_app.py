"""A pyopencl app that runs on long after its kernel's first launch (tests of live projection).

``live_app.py wait``: one launch over 2 MiB buffers (snapshotted through the blob store's
scratch files), then it waits until a projection appears in ``$CLPROJ_CACHE/projections``
(at most 60 s) and prints whether it saw one; ``live_app.py once``: that launch alone.
``live_app.py loop N``: one launch of a kernel
whose single work-item loops N times (long to emulate), then it sleeps 120 s;
``live_app.py long N``: one launch of a chain of N dependent steps in one work-item (long
to run on a CPU, a loop of one argument to emulate), and it exits.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import pyopencl as cl

SOURCE = """
__kernel void scale(__global const float *a, __global float *b) {
    size_t i = get_global_id(0);
    b[i] = 2.0f * a[i];
}
__kernel void spin(__global int *a, int n) {
    int s = 0;
    for (int i = 0; i < n; i++) s += i ^ a[0];
    a[1] = s;
}
__kernel void chain(__global uint *a, int n) {
    uint s = a[0];
    for (int i = 0; i < n; i++) s = s * 1664525u + ((uint)i ^ 1013904223u);
    a[1] = s;
}
"""


def main() -> int:
    ctx = cl.create_some_context(interactive=False)
    queue = cl.CommandQueue(ctx)
    prog = cl.Program(ctx, SOURCE).build()
    mf = cl.mem_flags
    if sys.argv[1] in ("wait", "once"):
        host = np.arange(1 << 19, dtype=np.float32)  # 2 MiB
        a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=host)
        b = cl.Buffer(ctx, mf.WRITE_ONLY, host.nbytes)
        prog.scale(queue, host.shape, None, a, b)
        out = np.empty_like(host)
        cl.enqueue_copy(queue, out, b)
        assert np.array_equal(out, 2 * host)
        if sys.argv[1] == "once":
            return 0
        folder = os.path.join(os.environ["CLPROJ_CACHE"], "projections")
        start = time.monotonic()
        while time.monotonic() - start < 60:
            if os.path.isdir(folder) and any(n.endswith(".json") for n in os.listdir(folder)):
                print(f"projection seen while running after {time.monotonic() - start:.2f} s")
                return 0
            time.sleep(0.05)
        print("no projection while running")
        return 0
    a = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.zeros(2, np.int32))
    if sys.argv[1] == "long":  # one work-item's chain of N dependent steps: seconds on a CPU
        start = time.monotonic()
        prog.chain(queue, (1,), (1,), a, np.int32(int(sys.argv[2])))
        queue.finish()
        print(f"launch ran {time.monotonic() - start:.2f} s", flush=True)
        return 0
    prog.spin(queue, (1,), (1,), a, np.int32(int(sys.argv[2])))
    queue.finish()
    print("launched", flush=True)
    time.sleep(120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
