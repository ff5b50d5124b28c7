"""Read-after-write rounds through memory in a per-work-item loop (CPUs).

Why: PolyBench-style kernels accumulate into a global element inside their loop
(``tmp[i] += A[i*n + j] * x[j]`` over j). Without ``restrict`` the compiler must reload
``tmp[i]`` after every store, so each iteration waits for the previous one's store to
reach the load (store-to-load forwarding) and for the add: a chain as long as the loop,
whatever the memory bandwidth. On a GPU the model prices such a chain with the memory
latency (``runtime/projection/latency.py``); a CPU forwards the store from its store buffer
in a few cycles, but a core still runs its work-items' chains one after another (or a few
side by side, where the compiler vectorises the loop across work-items). This benchmark
measures what one such round costs on the device itself, in the form PoCL compiles it:

* ``raw``: ``acc[i] += a[j & 255] * s`` for j < n, one accumulator per work-item in global
  memory (the chain goes through memory; the compiler fuses the multiply-add);
* ``fma``: the same sum in a private variable, stored once (no chain through memory);
* ``add``: ``t += a[j & 255]`` in a private variable: a chain of plain adds, whose latency
  is shorter than a fused multiply-add's (3 vs 4 cycles on recent x86 cores).

The result is seconds per round per work-item on one compute unit (device time x compute
units / (work-items x n)), so whatever the compiler does across work-items (running them
one by one, or in SIMD lanes) is part of the number. ``a`` holds small integers and
``s = 1``, so every partial sum is an exact integer in float32 and the host checks every
accumulator exactly (:class:`GarbageResult` otherwise).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from devices.microbench.common import Bench, GarbageResult

SRC = """
__kernel void raw_chain(__global float* acc, __global const float* a, uint n, float s) {
    uint i = get_global_id(0);
    for (uint j = 0; j < n; ++j) acc[i] += a[j & 255u] * s;
}
__kernel void fma_chain(__global float* acc, __global const float* a, uint n, float s) {
    uint i = get_global_id(0);
    float t = acc[i];
    for (uint j = 0; j < n; ++j) t += a[j & 255u] * s;
    acc[i] = t;
}
__kernel void add_chain(__global float* acc, __global const float* a, uint n, float s) {
    uint i = get_global_id(0);
    float t = acc[i];
    for (uint j = 0; j < n; ++j) t += a[j & 255u];
    acc[i] = t;
}
"""

WG = 64
ROUNDS = 2048  # loop trips per work-item and launch


def measure(bench: Bench) -> dict[str, Any]:
    """Seconds per read-after-write round per work-item on one compute unit."""
    b = bench
    items = WG * 4 * max(1, b.cus)  # four groups per compute unit
    a_host = (np.arange(256) % 7).astype(np.float32)
    a = b.buffer(a_host.nbytes, a_host)
    acc = b.buffer(items * 4)
    out: dict[str, Any] = {"work_group_size": WG, "rounds_per_item": ROUNDS}
    per_launch = float(a_host[np.arange(ROUNDS) & 255].sum())
    for name in ("raw", "fma", "add"):
        kern = b.kernel(SRC, f"{name}_chain")
        b.cl.enqueue_fill_buffer(b.queue, acc, np.float32(0), 0, items * 4).wait()

        def go(kern: Any = kern) -> Any:
            return kern(b.queue, (items,), (WG,), acc, a, np.uint32(ROUNDS), np.float32(1))

        rounds_per_s = b.rate(go, float(items * ROUNDS))
        got = b.read(acc, np.empty(items, np.float32))
        launches = got[0] / per_launch if per_launch else 0.0
        if launches < 1 or launches != int(launches) or not np.all(got == got[0]):
            raise GarbageResult(f"raw_loop {name}", f"accumulators {got[:4]} are not whole sums")
        out[f"{name}_round_s"] = b.cus / rounds_per_s
    return out
