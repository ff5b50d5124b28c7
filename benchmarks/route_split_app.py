"""An ordinary pyopencl program for the route-split benchmark (benchmarks/route_split.py).

``python benchmarks/route_split_app.py KERNEL WARMUP ITERS``: builds one of the kernels
below with fixed inputs, launches it WARMUP times (not timed: PoCL compiles at the first
enqueue, and route mode decides about a split at the first launch), then ITERS times back
to back with one ``finish`` at the end (timed, host wall clock), reads the output and
prints one JSON line: the kernel, the timed seconds and a sha256 of the output bytes.
It imports nothing of clproj: ``clproj run`` preloads the shim into it like into any app.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

import numpy as np
import pyopencl as cl

APPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "apps")

SCRAMBLE = """
__kernel void scramble(__global const uint *a, __global uint *o, uint rounds) {
  uint i = get_global_id(0), x = a[i] ^ i;
  for (uint k = 0; k < rounds; ++k) { x ^= x << 13; x ^= x >> 17; x ^= x << 5; x *= 0x9E3779B1u; }
  o[i] = x;
}
"""


def _source(name: str) -> str:
    with open(os.path.join(APPS, name), encoding="utf-8") as fh:
        return fh.read()


_keep: list[cl.Buffer] = []


def setup(ctx: cl.Context, kernel: str) -> tuple[cl.Kernel, tuple, tuple, cl.Buffer, np.ndarray]:
    """Kernel with its arguments set, global and local size, output buffer and host array."""
    mf = cl.mem_flags
    rng = np.random.default_rng(11)

    def buf(a: np.ndarray) -> cl.Buffer:
        b = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
        _keep.append(b)  # a kernel argument does not keep its buffer alive in pyopencl
        return b

    if kernel == "scramble":
        n = 1 << 18
        a = np.arange(n, dtype=np.uint32) * np.uint32(2654435761)
        out = np.empty(n, np.uint32)
        k = cl.Program(ctx, SCRAMBLE).build().scramble
        dout = cl.Buffer(ctx, mf.WRITE_ONLY, out.nbytes)
        k.set_args(buf(a), dout, np.uint32(200))
        return k, (n,), (64,), dout, out
    if kernel == "matmul_gmem":
        n = 384
        a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
        out = np.empty((n, n), np.float32)
        k = cl.Program(ctx, _source("matmul_gmem.cl")).build().matmul_gmem
        dout = cl.Buffer(ctx, mf.WRITE_ONLY, out.nbytes)
        k.set_args(buf(a), buf(b), dout, np.uint32(n))
        return k, (n, n), (16, 16), dout, out
    if kernel == "convolve2d":
        w = h = 1024
        img = rng.random((h, w), dtype=np.float32)
        filt = rng.random(49, dtype=np.float32)
        out = np.empty((h, w), np.float32)
        k = cl.Program(ctx, _source("convolution2d.cl")).build().convolve2d
        dout = cl.Buffer(ctx, mf.WRITE_ONLY, out.nbytes)
        k.set_args(buf(img), buf(filt), dout, np.uint32(w), np.uint32(h))
        return k, (w, h), (16, 16), dout, out
    if kernel == "vecadd":
        n = 1 << 22
        a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
        out = np.empty(n, np.float32)
        k = cl.Program(ctx, _source("vecadd.cl")).build().vecadd
        dout = cl.Buffer(ctx, mf.WRITE_ONLY, out.nbytes)
        k.set_args(buf(a), buf(b), dout)
        return k, (n,), (256,), dout, out
    raise SystemExit(f"unknown kernel {kernel}")


def main() -> None:
    kernel, warmup, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ctx = cl.create_some_context(interactive=False)
    q = cl.CommandQueue(ctx)
    k, gsize, lsize, dout, out = setup(ctx, kernel)
    for _ in range(warmup):
        cl.enqueue_nd_range_kernel(q, k, gsize, lsize)
    q.finish()
    start = time.perf_counter()
    for _ in range(iters):
        cl.enqueue_nd_range_kernel(q, k, gsize, lsize)
    q.finish()
    wall = time.perf_counter() - start
    cl.enqueue_copy(q, out, dout)
    digest = hashlib.sha256(out.tobytes()).hexdigest()[:16]
    device = ctx.devices[0].name.strip()
    print(
        json.dumps(
            {"kernel": kernel, "wall_s": wall, "iters": iters, "sha256": digest, "device": device}
        )
    )


if __name__ == "__main__":
    main()
