"""Overhead of the interception shim (not a timed test).

A launch-heavy C app (tests/c_apps/app_many.c, N tiny launches, 3 intercepted calls each:
two clSetKernelArg and one clEnqueueNDRangeKernel) and a pyopencl app run side by side
without the shim, with ``observe`` (sampled launch timing, the default), with ``observe``
timing every launch (``--time-all``), and with recording of first launches only. Every
configuration and launch count runs REPS times, interleaved; the median wall time is
reported, and the median of the per-repetition differences to the run without the shim
made right before or after it (*paired*: robust to load that drifts on a shared machine),
and the fastest run's ratio (*min*: other work only ever adds time, so the minimum
approaches the uncontended cost).
Per-call overhead = (median wall with shim - without) / intercepted calls. The
observe rows also give the kernel's mean device time from the shim's summary (median over
the runs), to show what sampling changes in the measurement itself.

    .venv/bin/python -m clproj.benchmarks.intercept_overhead [--launches 20000 100000] [--reps 7]
        [--compare-shim OTHER_SHIM.so | --compare-tree OTHER_CHECKOUT]
        [--compare-label "observe, shim of <commit>"]

``--compare-shim`` adds an observe configuration preloading another build of the shim (for
example one built from an earlier commit), interleaved with the others: before/after
comparisons then share the machine's load.

Writes benchmarks/results/intercept_overhead.md; anything below the line
``<!-- earlier results -->`` in that file is kept.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
OUT = os.path.join(REPO, "benchmarks", "results", "intercept_overhead.md")
HISTORY = "<!-- earlier results -->"

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

CONFIGS: dict[str, dict | None] = {
    "no shim": None,
    "observe (sampled timing)": {},
    "observe, time every launch": {"time_all": True},
    "record first launches": {"record": True},
}


def run_once(cmd: list[str], kw: dict | None, tmp: str) -> tuple[float, float | None]:
    """Wall seconds of one run and, under the shim, the summary's mean kernel time (ns)."""
    from clproj.intercept.environment import read_summary, shim_environment

    summary = os.path.join(tmp, "summary.tsv")
    if kw is None:
        env = dict(os.environ)
    else:
        kw = dict(kw)
        if kw.pop("record", False):
            kw["record"] = os.path.join(tmp, "rec")
        other = kw.pop("shim", None)
        tree = kw.pop("tree", None)
        env = shim_environment(summary_file=summary, **kw)
        if other:
            env["LD_PRELOAD"] = other
        if tree:  # that checkout's Python side too: its shim imports its own modules
            env["PYTHONPATH"] = tree
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    if kw is None:
        return wall, None
    rows = read_summary(summary)
    os.unlink(summary)
    return wall, rows[0]["mean_ns"] if rows else None


def main() -> int:  # noqa: C901
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, nargs="+", default=[20000, 100000])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--compare-shim", metavar="SO", help="another shim build to run in observe")
    ap.add_argument(
        "--compare-tree",
        metavar="DIR",
        help="another checkout with its native parts built (e.g. a git worktree of an earlier "
        "commit): observe with its shim and its Python modules",
    )
    ap.add_argument("--compare-label", default="observe, other shim build")
    args = ap.parse_args()
    configs = dict(CONFIGS)
    if args.compare_shim:
        configs[args.compare_label] = {"shim": os.path.abspath(args.compare_shim)}
    if args.compare_tree:
        tree = os.path.abspath(args.compare_tree)
        shim = next(iter(sorted(glob.glob(os.path.join(tree, "intercept", "_shim*.so")))), None)
        if shim is None:
            ap.error(f"{tree}/intercept has no built shim (build it there first)")
        configs[args.compare_label] = {"shim": shim, "tree": tree}
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
        "C app (system ICD loader)": lambda n: [exe, str(n)],
        "pyopencl app": lambda n: [sys.executable, pyapp, str(n)],
    }
    load_before = os.getloadavg()
    times: dict[tuple[str, int, str], list[float]] = {}
    means: dict[tuple[str, int, str], list[float]] = {}
    for app, cmd in apps.items():
        for rep in range(args.reps):
            for n in args.launches:
                order = list(configs.items())
                if rep % 2:  # alternate the order: no configuration always runs first
                    order.reverse()
                for name, kw in order:
                    wall, mean = run_once(cmd(n), kw, tmp)
                    times.setdefault((app, n, name), []).append(wall)
                    if mean is not None:
                        means.setdefault((app, n, name), []).append(mean)
    load_after = os.getloadavg()
    lines = [
        "# Interception overhead",
        "",
        f"Median of {args.reps} interleaved runs per configuration (launch counts interleaved "
        "too), 3 intercepted calls per launch, device: PoCL (first device, "
        f"POCL_DEVICES={os.environ.get('POCL_DEVICES', 'unset')!r}), "
        f"host: {os.cpu_count()} cores (shared with other work). Load average (1/5/15 min) "
        f"before: {'/'.join(f'{v:.2f}' for v in load_before)}, after: "
        f"{'/'.join(f'{v:.2f}' for v in load_after)}. "
        "Produced by `benchmarks/intercept_overhead.py`. *kernel mean* is the mean device "
        "time per launch in the shim's summary (median over the runs): sampled timing "
        "estimates it from the first 100 launches and about 1 in 128 of the rest.",
    ]
    for n in args.launches:
        lines += [
            "",
            f"## {n:,} launches per app",
            "",
            "| app | configuration | wall s | ratio | paired overhead | min ratio | "
            "overhead us / intercepted call | kernel mean us |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for app in apps:
            base = statistics.median(times[(app, n, "no shim")])
            for name in configs:
                med = statistics.median(times[(app, n, name)])
                per_call = (med - base) / (n * 3) * 1e6 if name != "no shim" else 0.0
                m = means.get((app, n, name))
                mean = f"{statistics.median(m) / 1e3:.3f}" if m else ""
                paired = statistics.median(
                    t - b
                    for t, b in zip(times[(app, n, name)], times[(app, n, "no shim")], strict=True)
                )
                fastest = min(times[(app, n, name)]) / min(times[(app, n, "no shim")])
                lines.append(
                    f"| {app} | {name} | {med:.3f} | {med / base:.3f} | "
                    f"{paired / base * 100:+.1f}% | {fastest:.3f} | {per_call:.2f} | {mean} |"
                )
    text = "\n".join(lines) + "\n"
    history = ""
    if os.path.exists(OUT):
        with open(OUT) as f:
            old = f.read()
        if HISTORY in old:
            history = old[old.index(HISTORY) :]
    with open(OUT, "w") as f:
        f.write(text + ("\n" + history if history else ""))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
