"""Loop-free streaming bandwidth on CPUs: what a kernel PoCL vectorises can move.

Why: the global-memory curves (``gmem.py``) walk the buffer with a grid-stride loop inside
the kernel, the form a GPU needs to saturate its memory system. PoCL keeps a kernel with a
loop scalar (``detail.loop_throughput`` measures the same effect on arithmetic), so on a
CPU those curves are the loop-form rate. A loop-free kernel (one element per work-item,
like a stencil sweep or a vector update) is vectorised across the work-group and streams
faster. This benchmark measures that form: ``copy`` (``b[i] = a[i]``), ``add``
(``c[i] = a[i] + b[i]``) and ``scale`` (``b[i] = s * a[i]``), one float per work-item,
groups of 256, over buffers of the mode's CPU size (larger than the last-level cache),
each verified on the host. The profile keeps the best bytes/s (reads + writes) of the
three as ``detail.straight_bandwidth.global_copy`` with the per-kernel rates; the
projection prices the traffic of loop-free kernels on CPUs with it
(``docs/projection.md``).

Run on its own to add the field to a committed profile without re-measuring the rest:
``python -m clproj.devices.microbench.stream --profile devices/profiles/measured/X.json``
(the device is chosen like ``clproj profile-device``: ``POCL_DEVICES`` / ``--device``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any

import numpy as np

from clproj.devices.microbench.common import MODES, Bench, GarbageResult

WG = 256
SRC = """
__kernel void copy(__global const float* a, __global float* b) {
    uint i = get_global_id(0); b[i] = a[i];
}
__kernel void add(__global const float* a, __global const float* b, __global float* c) {
    uint i = get_global_id(0); c[i] = a[i] + b[i];
}
__kernel void scale(__global const float* a, __global float* b, float s) {
    uint i = get_global_id(0); b[i] = s * a[i];
}
"""


def straight_bandwidth(bench: Bench) -> dict[str, Any]:
    """Bytes/s (read + written) of the three loop-free kernels; the best is ``global_copy``."""
    b = bench
    n = (b.mode.cpu_bytes // 4) // WG * WG
    host = (np.arange(n, dtype=np.uint32) % 1021).astype(np.float32)
    a = b.buffer(n * 4, host)
    x = b.buffer(n * 4, host[::-1].copy())
    out = b.buffer(n * 4)
    copy, add, scale = (b.kernel(SRC, k) for k in ("copy", "add", "scale"))
    rates = {
        "copy": b.rate(lambda: copy(b.queue, (n,), (WG,), a, out), 8.0 * n),
        "add": b.rate(lambda: add(b.queue, (n,), (WG,), a, x, out), 12.0 * n),
        "scale": b.rate(lambda: scale(b.queue, (n,), (WG,), a, out, np.float32(3)), 8.0 * n),
    }
    got = b.read(out, np.empty(n, np.float32))
    sample = np.linspace(0, n - 1, 64).astype(np.int64)
    if not np.array_equal(got[sample], np.float32(3) * host[sample]):
        raise GarbageResult("straight_bandwidth", "scale wrote wrong values")
    return {
        "global_copy": max(rates.values()),
        "rates": rates,
        "buffer_bytes": n * 4,
        "work_group_size": WG,
        "axis": "bytes read + written per second, loop-free kernels, one float per work-item",
    }


def main(argv: list[str] | None = None) -> int:
    """Measure and write ``detail.straight_bandwidth`` into an existing profile."""
    from clproj.devices.profile_check import validate

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", required=True, help="device profile JSON to update")
    ap.add_argument("--device", type=int, default=0, help="index among all OpenCL devices")
    ap.add_argument("--mode", default="full", choices=sorted(MODES))
    ap.add_argument("--rounds", type=int, default=3, help="measure this often, keep the best")
    args = ap.parse_args(argv)
    import pyopencl as cl

    devices = [d for p in cl.get_platforms() for d in p.get_devices()]
    dev = devices[args.device]
    with open(args.profile, encoding="utf-8") as fh:
        doc = json.load(fh)
    if doc.get("identity", {}).get("name", "").strip() != dev.name.strip():
        print(f"{args.profile} is {doc.get('identity', {}).get('name')!r}, not {dev.name!r}")
        return 2
    bench = Bench(dev, MODES[args.mode])
    best: dict[str, Any] | None = None
    for _ in range(max(1, args.rounds)):  # a shared machine: keep the least disturbed round
        res = straight_bandwidth(bench)
        if best is None or res["global_copy"] > best["global_copy"]:
            best = res
    assert best is not None
    best["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    doc.setdefault("detail", {})["straight_bandwidth"] = best
    doc.setdefault("provenance", {})["detail.straight_bandwidth"] = "measured"
    validate(doc)
    with open(args.profile, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    print(f"{dev.name.strip()}: straight global_copy {best['global_copy'] / 1e9:.1f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
