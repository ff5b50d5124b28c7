"""Read-after-write rounds through memory in a per-work-item loop (CPUs).

Why: PolyBench-style kernels accumulate into a global element inside their loop
(``tmp[i] += A[i*n + j] * x[j]`` over j). A loop that stores nothing else keeps the
accumulator in a register (the compiler forwards the stored value to the next trip), so
such a chain costs one multiply-add a trip; but a loop that also stores elsewhere
(``tmp[i] += ...; y[i] += ...``) must reload the accumulator from memory every trip,
since the other store may alias it: each trip then waits for its store to be forwarded
from the store buffer and for the add, a chain as long as the loop, whatever the memory
bandwidth. On a GPU the model prices such chains with the memory latency
(``runtime/projection/latency.py``); a CPU core runs its work-items' chains one after
another (or a few side by side, where the compiler vectorises the loop across
work-items). This benchmark measures what one round of each form costs on the device
itself, in the form PoCL compiles it:

* ``raw``: ``acc[i] += a[j & 255] * s`` for j < n, one accumulator per work-item in global
  memory. Nothing else is stored in the loop, so the compiler forwards each stored value
  to the next trip in a register (measured on the EPYC: 1.19 ns, the same as ``fma``);
* ``reload``: two such accumulators in two buffers, ``acc[i] += ...; acc2[i] += ...``.
  Each store may alias the other accumulator (no ``restrict``), so the compiler must
  reload both every trip: each trip waits for its own store to be forwarded from the
  store buffer, then for the multiply-add (EPYC: 3.6 ns a trip). This is the round of a
  PolyBench ``gesummv`` trip (``tmp[i] += ...; y[i] += ...``); the plugin counts such
  links (``dependence.fp_reload_chain``). The two chains are independent, so a trip costs
  one round, not two;
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

from clproj.devices.microbench.common import Bench, GarbageResult

SRC = """
__kernel void raw_chain(__global float* acc, __global const float* a, uint n, float s) {
    uint i = get_global_id(0);
    for (uint j = 0; j < n; ++j) acc[i] += a[j & 255u] * s;
}
__kernel void reload_chain(__global float* acc, __global float* acc2, __global const float* a,
                           uint n, float s) {
    uint i = get_global_id(0);
    for (uint j = 0; j < n; ++j) {
        acc[i] += a[j & 255u] * s;
        acc2[i] += a[(j + 7u) & 255u] * s;
    }
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
    """Seconds per round (loop trip) per work-item on one compute unit, per chain form."""
    b = bench
    items = WG * 4 * max(1, b.cus)  # four groups per compute unit
    a_host = (np.arange(256) % 7).astype(np.float32)
    a = b.buffer(a_host.nbytes, a_host)
    acc, acc2 = b.buffer(items * 4), b.buffer(items * 4)
    out: dict[str, Any] = {"work_group_size": WG, "rounds_per_item": ROUNDS}
    trips = np.arange(ROUNDS)
    per_launch = float(a_host[trips & 255].sum())
    for name in ("raw", "reload", "fma", "add"):
        kern = b.kernel(SRC, f"{name}_chain")
        accs = (acc, acc2) if name == "reload" else (acc,)
        for buf in accs:
            b.cl.enqueue_fill_buffer(b.queue, buf, np.float32(0), 0, items * 4).wait()

        def go(kern: Any = kern, accs: tuple = accs) -> Any:
            return kern(b.queue, (items,), (WG,), *accs, a, np.uint32(ROUNDS), np.float32(1))

        rounds_per_s = b.rate(go, float(items * ROUNDS))
        got = b.read(acc, np.empty(items, np.float32))
        launches = got[0] / per_launch if per_launch else 0.0
        whole = launches >= 1 and launches == int(launches) and bool(np.all(got == got[0]))
        if whole and name == "reload":  # the second accumulator: as many launches' sums
            got2 = b.read(acc2, np.empty(items, np.float32))
            whole = bool(np.all(got2 == launches * float(a_host[(trips + 7) & 255].sum())))
        if not whole:
            raise GarbageResult(f"raw_loop {name}", f"accumulators {got[:4]} are not whole sums")
        out[f"{name}_round_s"] = b.cus / rounds_per_s
    return out
