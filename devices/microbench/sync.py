"""Work-group barrier throughput: work-item barriers per second, device-wide.

On GPUs a barrier is a cheap hardware instruction. On CPUs PoCL compiles a work-group
into loops over its work-items and splits them at every barrier, so each barrier costs
a loop restart per work-item and breaks vectorisation: kernels with barriers in loops
(tiled matrix products, tree reductions, transposes) are dominated by it. The projection
prices the profile's ``barrier`` count at this rate when it was measured.

Check: every work-item increments its local slot once per trip; after the loop the slot
must hold the trip count, written to global memory and compared on the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clproj.devices.microbench.common import Bench, GarbageResult

SRC = """
__kernel void barriers(__global uint* out, uint trips) {
    __local uint slot[256];
    uint lid = get_local_id(0);
    slot[lid] = 0;
    for (uint t = 0; t < trips; ++t) {
        slot[lid] += 1;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    out[get_global_id(0)] = slot[lid];
}
"""


def barrier_rate(bench: Bench) -> float:
    """Work-item barriers per second with 256-item groups, several groups per compute unit."""
    b = bench
    wg = min(256, b.max_wg)
    groups = b.cus * 4
    gsize = wg * groups
    trips = 64 if b.is_cpu else 1024
    kern = b.kernel(SRC, "barriers")
    out = b.buffer(gsize * 4)

    def go() -> Any:
        return kern(b.queue, (gsize,), (wg,), out, np.uint32(trips))

    rate = b.rate(go, gsize * trips)
    got = b.read(out, np.empty(gsize, np.uint32))
    if not np.all(got == trips):
        raise GarbageResult("barrier", f"slots {got[:4]} != {trips}")
    return rate
