"""A pyopencl app whose four threads launch at the same moment (own queues, one context).

The first recorded launch starts the shim's Python side; four threads arriving there
together once deadlocked (one inside cffi's start-up waiting for the GIL, the others
holding it). Prints each thread's checksum and exits 3, so a test sees both unchanged.
"""

import sys
import threading

import numpy as np
import pyopencl as cl

THREADS = 4
ctx = cl.Context([cl.get_platforms()[0].get_devices()[0]])
prg = cl.Program(
    ctx,
    "__kernel void scale(__global float *a, float f) {"
    " int i = get_global_id(0); a[i] = a[i] * f + (float)i; }",
).build()
together = threading.Barrier(THREADS)
sums = [0.0] * THREADS


def work(t: int) -> None:
    q = cl.CommandQueue(ctx)
    a = np.arange(256, dtype=np.float32)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
    k = cl.Kernel(prg, "scale")
    together.wait()
    for _ in range(20):
        k(q, (256,), None, buf, np.float32(1.0 + t))
    cl.enqueue_copy(q, a, buf)
    q.finish()
    sums[t] = float(a.sum())


threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
for th in threads:
    th.start()
for th in threads:
    th.join()
print(" ".join(f"{s:.6g}" for s in sums))
sys.exit(3)
