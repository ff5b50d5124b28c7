"""Same-address atomic throughput: the rate at which one memory word absorbs atomics.

Atomics on distinct addresses run at memory-pipeline rates; atomics on one address are
serialised by the memory system (a GPU's L2 slice, a CPU's cache-line ownership moving
between cores). Histograms, counters and reductions into a few bins are bound by this
rate, so the projection prices a kernel's hottest address with it.

Checks: the global counter must end at exactly the number of increments issued; each
group's local counter must end at its number of increments.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clproj.devices.microbench.common import Bench, GarbageResult

GLOBAL_SRC = """
__kernel void hot_global(__global volatile uint* c, uint reps) {
    for (uint r = 0; r < reps; ++r) atomic_inc(c);
}
"""

LOCAL_SRC = """
__kernel void hot_local(__global uint* out, uint reps) {
    __local volatile uint h;
    if (get_local_id(0) == 0) h = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint r = 0; r < reps; ++r) atomic_inc(&h);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) out[get_group_id(0)] = h;
}
"""


def same_address(bench: Bench) -> dict[str, float]:
    """``{"global": ops/s on one global word, "local": ops/s on one local word per group}``."""
    b = bench
    wg = min(256, b.max_wg)
    groups = b.cus * (4 if not b.is_cpu else 2)
    gsize = wg * groups
    reps = 4 if b.is_cpu else 16
    out: dict[str, float] = {}

    counter = b.buffer(4)
    kern = b.kernel(GLOBAL_SRC, "hot_global")

    def go_global() -> Any:
        return kern(b.queue, (gsize,), (wg,), counter, np.uint32(reps))

    b.cl.enqueue_fill_buffer(b.queue, counter, np.uint32(0), 0, 4).wait()
    go_global().wait()
    got = int(b.read(counter, np.empty(1, np.uint32))[0])
    if got != gsize * reps:
        raise GarbageResult("atomic same-address (global)", f"counter {got} != {gsize * reps}")
    out["global"] = b.rate(go_global, gsize * reps)

    res = b.buffer(groups * 4)
    lk = b.kernel(LOCAL_SRC, "hot_local")

    def go_local() -> Any:
        return lk(b.queue, (gsize,), (wg,), res, np.uint32(reps))

    out["local"] = b.rate(go_local, gsize * reps)
    vals = b.read(res, np.empty(groups, np.uint32))
    if not np.all(vals == wg * reps):
        raise GarbageResult(
            "atomic same-address (local)", f"group counters {vals[:4]} != {wg * reps}"
        )
    return out
