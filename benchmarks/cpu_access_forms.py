"""What a PoCL CPU device's generated code costs per access form: the evidence for the
next CPU terms of the projection model (docs/projection.md, "What the CPU model lacks").

Why: on PolyBench the remaining CPU misses trace to three things the bound model does not
see, each measured here side by side on the local CPU device, in one run, interleaved
(every form once per round, ``--rounds`` rounds; the spread across rounds is reported
because this 2-core VM is noisy):

1. **In-place updates skip the write-allocate fill.** ``upd`` (``a[i] = a[i] + b[i]``)
   reads two streams and writes one back in place; ``add`` (``c[i] = a[i] + b[i]``) writes
   a third buffer, whose lines the cache first reads. Same useful bytes, fewer line
   transfers: the model prices both at the ``add`` rate.
2. **Accesses LLVM cannot prove consecutive become gathers.** ``gcopy``
   (``b[i] = a[(i * s) & m]``, ``s = 1`` at run time) reads the same addresses as
   ``copy`` (``b[i] = a[i]``), but PoCL's vectoriser emits a gather for it.
3. **A per-work-item column walk costs a line switch per access**, whose price depends on
   the walk's span (caches, TLB reach). ``colwalk``: each work-item sums one column of a
   row-major matrix (the loop form of PolyBench's 2mm / atax kernel 2); ``rowwalk``: each
   sums one row. The model prices a line switch at 64 bytes of the measured shared-cache
   streaming rate (``detail.cache``).

Run: ``POCL_DEVICES=pthread .venv/bin/python benchmarks/cpu_access_forms.py [--rounds 5]``
(writes ``benchmarks/results/cpu_access_forms.md``; about a minute). Times are OpenCL
profiling-event durations (END - START) of each launch, after one untimed launch.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SRC = """
__kernel void copy(__global const float* a, __global float* b) {
    uint i = get_global_id(0); b[i] = a[i];
}
__kernel void gcopy(__global const float* a, __global float* b, uint s, uint m) {
    uint i = get_global_id(0); b[i] = a[(i * s) & m];
}
__kernel void add(__global const float* a, __global const float* b, __global float* c) {
    uint i = get_global_id(0); c[i] = a[i] + b[i];
}
__kernel void upd(__global float* a, __global const float* b) {
    uint i = get_global_id(0); a[i] = a[i] + b[i];
}
__kernel void colwalk(__global const float* m, __global float* out, int n, int rows) {
    int j = get_global_id(0); float acc = 0.0f;
    for (int k = 0; k < rows; k++) acc += m[k * n + j];
    out[j] = acc;
}
__kernel void rowwalk(__global const float* m, __global float* out, int n, int rows) {
    int j = get_global_id(0); float acc = 0.0f;
    for (int k = 0; k < rows; k++) acc += m[j * rows + k];
    out[j] = acc;
}
"""
WG = 256
STREAM_KIB = (64, 1024, 16384, 131072)  # per buffer: L2, L2/LLC, LLC/DRAM, DRAM
# (row length n, rows, work-items): column strides of 8 and 32 KiB, spans 8 MiB - 256 MiB
WALKS = ((2048, 1024, 2048), (2048, 2048, 2048), (8192, 2048, 2048), (8192, 8192, 1024))
WALK_WG = 32


def event_s(launch: Any) -> float:
    ev = launch()
    ev.wait()
    return (ev.profile.end - ev.profile.start) * 1e-9


def measure(rounds: int) -> dict[str, Any]:
    """Seconds per launch of every form, ``rounds`` interleaved samples each."""
    import pyopencl as cl

    ctx = cl.create_some_context(interactive=False)
    dev = ctx.devices[0]
    if not dev.type & cl.device_type.CPU:
        raise SystemExit(f"cpu_access_forms: {dev.name} is not a CPU device; set POCL_DEVICES")
    q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    prg = cl.Program(ctx, SRC).build()
    k = {n: cl.Kernel(prg, n) for n in ("copy", "gcopy", "add", "upd", "colwalk", "rowwalk")}
    mf = cl.mem_flags
    cases: dict[str, tuple[Any, float]] = {}  # name -> (launch, accesses or items)
    for kib in STREAM_KIB:
        n = kib * 1024 // 4
        host = np.ones(n, np.float32)
        a, b, c = (cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=host) for _ in "abc")
        mask = np.uint32(n - 1)
        cases[f"copy {kib} KiB"] = (lambda n=n, a=a, b=b: k["copy"](q, (n,), (WG,), a, b), n)
        cases[f"gcopy {kib} KiB"] = (
            lambda n=n, a=a, b=b, m=mask: k["gcopy"](q, (n,), (WG,), a, b, np.uint32(1), m),
            n,
        )
        cases[f"add {kib} KiB"] = (lambda n=n, a=a, b=b, c=c: k["add"](q, (n,), (WG,), a, b, c), n)
        cases[f"upd {kib} KiB"] = (lambda n=n, a=a, b=b: k["upd"](q, (n,), (WG,), a, b), n)
    for n, rows, items in WALKS:
        m = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=np.ones(n * rows, np.float32))
        out = cl.Buffer(ctx, mf.WRITE_ONLY, items * 4)
        span = n * rows * 4 >> 20
        for name in ("colwalk", "rowwalk"):
            cases[f"{name} {span} MiB, stride {n * 4 >> 10} KiB"] = (
                lambda name=name, m=m, out=out, n=n, rows=rows, items=items: k[name](
                    q, (items,), (WALK_WG,), m, out, np.int32(n), np.int32(rows)
                ),
                float(items * rows),
            )
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for launch, _ in cases.values():
        event_s(launch)  # untimed: compile for this local size, touch the pages
    for _ in range(rounds):
        for name, (launch, _) in cases.items():
            samples[name].append(event_s(launch))
    return {
        "device": dev.name,
        "driver": dev.driver_version,
        "units": {name: per for name, (_, per) in cases.items()},
        "samples": samples,
    }


def report(res: dict[str, Any], rounds: int) -> str:
    def row(name: str) -> tuple[float, float, float]:
        per = res["units"][name]
        ns = [t / per * 1e9 for t in res["samples"][name]]
        return statistics.median(ns), min(ns), max(ns)

    lines = [
        "# What PoCL's generated code costs per access form (local CPU device)",
        "",
        f"Device: {res['device']} (driver {res['driver']}), host {platform.node()}, "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {rounds} "
        "interleaved rounds. Command: `POCL_DEVICES=pthread .venv/bin/python "
        f"benchmarks/cpu_access_forms.py --rounds {rounds}`. What each form is and why it "
        "matters: the module docstring.",
        "",
        "## Loop-free streams: ns per work-item, median (min-max)",
        "",
        "| buffer | copy | gcopy (gathered) | gcopy / copy | add | upd (in place) | add / upd |",
        "|---|---|---|---|---|---|---|",
    ]
    for kib in STREAM_KIB:
        c, g, a, u = (row(f"{f} {kib} KiB") for f in ("copy", "gcopy", "add", "upd"))
        lines.append(
            f"| {kib} KiB | {c[0]:.3f} ({c[1]:.3f}-{c[2]:.3f}) | {g[0]:.3f} ({g[1]:.3f}-{g[2]:.3f})"
            f" | {g[0] / c[0]:.2f}x | {a[0]:.3f} ({a[1]:.3f}-{a[2]:.3f}) | "
            f"{u[0]:.3f} ({u[1]:.3f}-{u[2]:.3f}) | {a[0] / u[0]:.2f}x |"
        )
    lines += [
        "",
        "## Per-work-item walks (loop form): ns per access, device-wide, median (min-max)",
        "",
        "| matrix | column walk (new line each access) | row walk | column / row |",
        "|---|---|---|---|",
    ]
    for name in res["units"]:
        if not name.startswith("colwalk"):
            continue
        shape = name.removeprefix("colwalk ")
        c, r = row(name), row(f"rowwalk {shape}")
        lines.append(
            f"| {shape} | {c[0]:.2f} ({c[1]:.2f}-{c[2]:.2f}) | {r[0]:.2f} ({r[1]:.2f}-{r[2]:.2f})"
            f" | {c[0] / r[0]:.1f}x |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved samples per form (5)")
    ap.add_argument(
        "-o",
        "--output",
        default=os.path.join(REPO, "benchmarks", "results", "cpu_access_forms.md"),
        help="markdown report (default benchmarks/results/cpu_access_forms.md)",
    )
    args = ap.parse_args(argv)
    text = report(measure(max(1, args.rounds)), max(1, args.rounds))
    Path(args.output).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
