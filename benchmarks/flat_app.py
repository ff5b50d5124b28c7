"""A small pyopencl app with one knob: the loop length or the buffer size of its kernel.

``benchmarks/first_projection.py`` (suite ``flat``) runs it under ``clproj run --mode
project`` to time a kernel's first launch to its projection along the two axes the
projection's cost must not follow, one at a time: the trip count of a per-work-item loop
(``loopsum``: 256 work-items, groups of 64, each summing ``--trips`` floats of a 1 MiB
table, wrapping around it, so the buffers stay the same size) and the size of the buffers
(``copy``: two buffers of ``--mib`` MiB, NULL local size, as BabelStream launches it;
``benchmarks/emulation_flat.py``'s kernel, which times the emulation alone on saved
records). The app's launches come from a live process, so the time includes what project
mode pays around the emulation (snapshot, record, queue, projection).

    python -m clproj.benchmarks.flat_app loopsum --trips 1000
    python -m clproj.benchmarks.flat_app copy --mib 64
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from clproj.benchmarks.emulation_flat import COPY, ROWS

GROUP = 64
TABLE = 1 << 18  # floats: 1 MiB
LOOPSUM = """
__kernel void loopsum(__global const float *t, __global float *out, int n) {
  const int r = get_global_id(0);
  float acc = 0.0f;
  for (int j = 0; j < n; ++j) acc += t[(r * 64 + j) & (TABLE - 1)];
  out[r] = acc;
}
""".replace("TABLE", str(TABLE))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernel", choices=("loopsum", "copy"))
    ap.add_argument("--trips", type=int, default=1000, help="loopsum: loop trips per work-item")
    ap.add_argument("--mib", type=int, default=64, help="copy: MiB per buffer")
    ap.add_argument("--launches", type=int, default=2)
    args = ap.parse_args(argv)
    if args.trips < 1 or args.mib < 1 or args.launches < 1:
        ap.error("--trips, --mib and --launches must be >= 1")

    import pyopencl as cl

    ctx = cl.create_some_context(interactive=False)
    queue = cl.CommandQueue(ctx)
    mf = cl.mem_flags
    if args.kernel == "loopsum":
        m = np.ones(TABLE, dtype=np.float32)
        out = np.zeros(ROWS, dtype=np.float32)
        d_m = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=m)
        d_out = cl.Buffer(ctx, mf.WRITE_ONLY, out.nbytes)
        kernel = cl.Program(ctx, LOOPSUM).build().loopsum
        for _ in range(args.launches):
            kernel(queue, (ROWS,), (GROUP,), d_m, d_out, np.int32(args.trips))
        cl.enqueue_copy(queue, out, d_out)
        ok = bool(np.all(out == np.float32(args.trips)))
    else:
        n = args.mib * 2**20 // 8
        a = np.full(n, 0.5, dtype=np.float64)
        d_a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
        d_c = cl.Buffer(ctx, mf.WRITE_ONLY, a.nbytes)
        kernel = cl.Program(ctx, COPY).build().copy
        for _ in range(args.launches):
            kernel(queue, (n,), None, d_a, d_c)
        c = np.empty_like(a)
        cl.enqueue_copy(queue, c, d_c)
        ok = bool(np.all(c == 0.5))
    queue.finish()
    if not ok:
        sys.stderr.write(f"flat_app: {args.kernel} computed a wrong result\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
