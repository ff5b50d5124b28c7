"""Kernel launch overhead and host<->device transfer bandwidth.

Launch overhead is measured three ways (all kept in the profile's ``detail.launch``):
``event_s`` (device-side duration of an empty kernel from profiling events), ``event_b2b_s``
(the same for launches enqueued back to back), ``wall_s``
(host wall clock per launch of many back-to-back launches, i.e. the cost one more kernel
adds to a stream) and ``sync_s`` (enqueue + wait of a single launch, the latency of a
kernel the host waits on). The model's ``launch_overhead_s`` is ``wall_s``: kernels of an
application run back to back, and that is what each one adds.

``groups`` is the device-side floor as a function of the number of work-groups: the same
empty kernel launched with 1, 2, 4, ... groups of ``GROUPS_WG`` work-items, each launch
waited for alone (as applications that wait on their kernels, and the validation truth,
run them). On PoCL every group is a task handed to a worker thread, and a launch that
spreads over more cores first wakes more sleeping threads: the floor of an 8192-item
launch is several times that of a one-group launch (measured on the 2-core EPYC: 0.26 us
for one group, about 1 us for 32), which a single empty-kernel time cannot express.
Each point keeps the lowest mean over nine batches: the mean, because an
application's time is the sum of its launches, tail included; the lowest batch, so that
another process on the machine does not inflate it.

Transfers copy pageable numpy arrays (what applications usually do) with blocking
``enqueue_copy``; the device-to-host copy is compared with the data sent.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from clproj.devices.microbench.common import Bench, GarbageResult

EMPTY_SRC = """
__kernel void empty(__global uint* p, uint v) { if (get_global_id(0) == 0) p[0] = v; }
"""


def launch(bench: Bench) -> dict[str, float]:
    b = bench
    kern = b.kernel(EMPTY_SRC, "empty")
    buf = b.buffer(4)
    wg = 1

    def go(v: int = 7) -> Any:
        return kern(b.queue, (wg,), (wg,), buf, np.uint32(v))

    go().wait()
    n = 200 if b.mode.name == "full" else 50
    durs = []
    for _ in range(n):
        e = go()
        e.wait()
        durs.append((e.profile.end - e.profile.start) * 1e-9)
    t0 = time.perf_counter()
    for _ in range(n):
        go().wait()
    sync_s = (time.perf_counter() - t0) / n
    b.queue.finish()
    t0 = time.perf_counter()
    b2b = [go(i) for i in range(n)]
    b.queue.finish()
    wall_s = (time.perf_counter() - t0) / n
    # Device time of launches enqueued back to back, as applications (and `clproj bench`)
    # issue them: on GPUs shorter than a launch waited for alone.
    event_b2b_s = float(np.median([(e.profile.end - e.profile.start) * 1e-9 for e in b2b]))
    got = b.read(buf, np.empty(1, np.uint32))
    if int(got[0]) != n - 1:
        raise GarbageResult("launch", f"empty kernel wrote {int(got[0])}, expected {n - 1}")
    return {
        "event_s": float(np.median(durs)),
        "event_b2b_s": event_b2b_s,
        "wall_s": wall_s,
        "sync_s": sync_s,
    }


# Work-items per group of the group-count sweep: small enough that the empty work-items'
# own loop is negligible next to the dispatch cost being measured.
GROUPS_WG = 64


def group_counts(cus: int) -> list[int]:
    """1, 2, 4, ... up to twice the compute units (at least 32), plus the CU count itself."""
    top = max(32, 2 * cus)
    counts = {1 << i for i in range(top.bit_length()) if 1 << i <= top}
    return sorted(counts | {max(1, cus), top})


def launch_groups(bench: Bench) -> list[list[float]]:
    """Mean device time of an empty kernel waited for alone, per number of work-groups."""
    b = bench
    kern = b.kernel(EMPTY_SRC, "empty")
    buf = b.buffer(4)
    wg = max(1, min(GROUPS_WG, b.max_wg))
    n = 60 if b.mode.name == "full" else 20
    counts = group_counts(b.cus)
    best = dict.fromkeys(counts, float("inf"))
    v = 0
    # Sweeps interleave the group counts, so a burst of other load on the machine inflates
    # one batch of each count at most, and the lowest batch mean survives it.
    # Nine sweeps in full mode: on a shared VM whole sweeps come out 2x slow now and then.
    for _ in range(9 if b.mode.name == "full" else 3):
        for groups in counts:
            for _ in range(3):  # warm-up: JIT for this size, threads in their steady state
                kern(b.queue, (groups * wg,), (wg,), buf, np.uint32(v)).wait()
            durs = []
            for _ in range(n):
                v += 1
                e = kern(b.queue, (groups * wg,), (wg,), buf, np.uint32(v))
                e.wait()
                durs.append((e.profile.end - e.profile.start) * 1e-9)
            best[groups] = min(best[groups], float(np.mean(durs)))
    got = b.read(buf, np.empty(1, np.uint32))
    if int(got[0]) != v:
        raise GarbageResult("launch groups", f"empty kernel wrote {int(got[0])}, expected {v}")
    return [[float(g), best[g]] for g in counts]


def transfer(bench: Bench) -> dict[str, float]:
    b = bench
    nbytes = b.mode.transfer_bytes
    host = np.random.default_rng(7).integers(0, 2**32, nbytes // 4, dtype=np.uint32)
    back = np.empty_like(host)
    buf = b.buffer(nbytes)
    cl = b.cl
    cl.enqueue_copy(b.queue, buf, host).wait()  # first touch / allocation
    reps = max(2, b.mode.reps + 1)
    h2d = d2h = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        cl.enqueue_copy(b.queue, buf, host, is_blocking=True)
        h2d = min(h2d, time.perf_counter() - t0)
        t0 = time.perf_counter()
        cl.enqueue_copy(b.queue, back, buf, is_blocking=True)
        d2h = min(d2h, time.perf_counter() - t0)
    if not np.array_equal(host, back):
        raise GarbageResult("transfer", "data read back differs from data written")
    return {"h2d_bytes_per_s": nbytes / h2d, "d2h_bytes_per_s": nbytes / d2h, "bytes": nbytes}
