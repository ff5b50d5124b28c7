"""Overhead of the interception shim (not a timed test).

A launch-heavy C app (tests/c_apps/app_many.c, N tiny launches, 3 intercepted calls each:
two clSetKernelArg and one clEnqueueNDRangeKernel) and a pyopencl app run side by side
without the shim, with ``observe``, and with recording of first launches only. Each
configuration runs REPS times interleaved; the median wall time is reported. Per-call
overhead = (median wall with shim - without) / intercepted calls.

    .venv/bin/python -m benchmarks.intercept_overhead [--launches 20000] [--reps 5]

Writes benchmarks/results/intercept_overhead.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

PYAPP = r"""
import sys, numpy as np, pyopencl as cl
ctx = cl.Context([cl.get_platforms()[0].get_devices()[0]]); q = cl.CommandQueue(ctx)
k = cl.Program(ctx, "__kernel void inc(__global int *x, int a) { x[get_global_id(0)] += a; }").build().inc
b = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 256)
for i in range(int(sys.argv[1])):
    k(q, (64,), None, b, np.int32(1))
    if i % 100 == 99: q.finish()
q.finish()
"""


def main() -> int:
    from intercept.cli import shim_environment

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="clproj-bench-")
    exe = os.path.join(tmp, "app_many")
    subprocess.run(
        ["gcc", "-O2", "-o", exe, os.path.join(REPO, "tests/c_apps/app_many.c"), "-lOpenCL"],
        check=True,
    )
    pyapp = os.path.join(tmp, "app.py")
    with open(pyapp, "w") as f:
        f.write(PYAPP)
    apps = {
        "C app (system ICD loader)": ([exe, str(args.launches)], 3),
        "pyopencl app": ([sys.executable, pyapp, str(args.launches)], 3),
    }
    configs = {
        "no shim": None,
        "observe": {},
        "record first launches": {"record": os.path.join(tmp, "rec")},
    }
    rows = []
    for app, (cmd, calls_per_launch) in apps.items():
        times: dict[str, list[float]] = {c: [] for c in configs}
        for _ in range(args.reps):
            for name, kw in configs.items():
                if kw is None:
                    env = dict(os.environ)
                else:
                    env = shim_environment(**kw)
                    env["CLPROJ_SUMMARY"] = "0"
                t0 = time.perf_counter()
                subprocess.run(cmd, env=env, check=True, capture_output=True)
                times[name].append(time.perf_counter() - t0)
        base = statistics.median(times["no shim"])
        calls = args.launches * calls_per_launch
        for name in configs:
            med = statistics.median(times[name])
            rows.append(
                (
                    app,
                    name,
                    med,
                    med / base,
                    (med - base) / calls * 1e6 if name != "no shim" else 0.0,
                )
            )
    lines = [
        "# Interception overhead",
        "",
        f"{args.launches} launches per app (3 intercepted calls each), median of {args.reps} "
        "interleaved runs, device: PoCL (first device), "
        f"host: {os.cpu_count()} cores (shared). Produced by `benchmarks/intercept_overhead.py`.",
        "",
        "| app | configuration | wall s | ratio | overhead us / intercepted call |",
        "|---|---|---:|---:|---:|",
    ]
    lines += [f"| {a} | {c} | {w:.3f} | {r:.3f} | {o:.2f} |" for a, c, w, r, o in rows]
    text = "\n".join(lines) + "\n"
    out = os.path.join(REPO, "benchmarks", "results", "intercept_overhead.md")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
