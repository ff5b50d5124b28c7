"""An app that ends abruptly while clproj's parts inside it are still at work.

``python abrupt_app.py HOW SECONDS TRIPS``: one launch of a looping kernel (TRIPS trips a
work-item, which keeps the in-app emulation busy), a pause, then SIGKILL to itself
(``kill``) or ``os._exit(0)`` (``exit``): no cleanup of the process runs.
"""

import os
import signal
import sys
import time

import numpy as np
import pyopencl as cl

how, pause, trips = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
ctx = cl.create_some_context(interactive=False)
queue = cl.CommandQueue(ctx)
src = """__kernel void k(__global float *x, int n) {
  int i = get_global_id(0); float a = x[i];
  for (int j = 0; j < n; j++) a = a * a * 0.5f + 0.25f;
  x[i] = a;
}"""
prg = cl.Program(ctx, src).build()
x = np.ones(1 << 14, np.float32)
buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
prg.k(queue, (1 << 14,), (64,), buf, np.int32(trips))
queue.finish()
print("launched", flush=True)
time.sleep(pause)
if how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
os._exit(0)
