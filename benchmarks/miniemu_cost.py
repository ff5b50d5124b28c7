"""Cost of mini-emulation: plugin overhead, and emulation time vs input size.

1. Plugin overhead: the same launch in Oclgrind quick mode with and without our plugin
   (one worker thread each). Reported both as the kernel's emulation time (Oclgrind's
   profiling event) and as the whole subprocess wall time (Python + compile + kernel).
2. ``single``-mode time vs input size for a reduction (the group does the same work at any
   size: flat) and a naive matmul (a group's work grows with the matrix side: linear).
3. Full/single time ratios of the paper's apps (Table III analogue) at the apps' "small"
   sizes, when benchmarks/apps exists (full emulation at the paper's sizes takes hours).

``--baseline-plugin PATH`` adds another build of the plugin (e.g. the previous commit's)
to part 1, run interleaved with ours on the same launches: the change a plugin edit makes.

Writes benchmarks/results/miniemu_cost.md and miniemu_cost.png.
Run: ``.venv/bin/python -m clproj.benchmarks.miniemu_cost [--quick-run]
[--baseline-plugin PATH] [--overhead-only]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from clproj import miniemu
from clproj.intercept.record import LocalArg, from_arrays, save
from clproj.miniemu.oclgrind import OclgrindBackend

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

SRC = """
__kernel void reduce(__global const float *a, __global float *out, __local float *l) {
  int lid = get_local_id(0);
  l[lid] = a[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
    if (lid < s) l[lid] += l[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) out[get_group_id(0)] = l[0];
}
__kernel void matmul(__global const float *a, __global const float *b, __global float *c, int n) {
  int row = get_global_id(1), col = get_global_id(0);
  float acc = 0.0f;
  for (int k = 0; k < n; ++k) acc += a[row * n + k] * b[k * n + col];
  c[row * n + col] = acc;
}
__kernel void transpose(__global const float *a, __global float *b, int n) {
  int x = get_global_id(0), y = get_global_id(1);
  b[x * n + y] = a[y * n + x];
}
__kernel void rowwalk(__global const float *a, __global const float *p, __global float *q, int n) {
  int i = get_global_id(0);
  float acc = 0.0f;
  for (int j = 0; j < n; ++j) acc += a[i * n + j] * p[j];
  q[i] = acc;
}
__kernel void saxpy(__global const float *x, __global float *y, float a) {
  int i = get_global_id(0);
  y[i] = a * x[i] + y[i];
}
"""


def reduction(n: int):
    return from_arrays(
        SRC,
        "reduce",
        [np.ones(n, np.float32), np.zeros(n // 256, np.float32), LocalArg(1024)],
        [n],
        [256],
    )


def matmul(n: int):
    m = np.ones(n * n, np.float32)
    return from_arrays(
        SRC, "matmul", [m, m.copy(), np.zeros(n * n, np.float32), np.int32(n)], [n, n], [16, 16]
    )


def transpose(n: int):
    m = np.ones(n * n, np.float32)
    return from_arrays(SRC, "transpose", [m, m.copy(), np.int32(n)], [n, n], [16, 16])


def rowwalk(n: int):
    """PolyBench bicg's first kernel: each work-item walks a row (lanes n floats apart)."""
    m = np.ones(n * n, np.float32)
    v = np.ones(n, np.float32)
    return from_arrays(SRC, "rowwalk", [m, v, np.zeros(n, np.float32), np.int32(n)], [n], [256])


def saxpy(n: int):
    x = np.ones(n, np.float32)
    return from_arrays(SRC, "saxpy", [x, x.copy(), np.float32(2)], [n], [256])


def run_worker(path: str, plugin: bool | str, tmp: str, mode: str = "quick") -> tuple[float, float]:
    """(kernel emulation seconds, subprocess wall seconds) of one run on 1 worker thread;
    ``plugin``: ours (True), none (False) or the path of another build."""
    env = OclgrindBackend().environment(
        mode, os.path.join(tmp, "s.jsonl"), os.path.join(tmp, "log"), threads=1
    )
    env["OPENBLAS_NUM_THREADS"] = "1"  # no idle BLAS threads beside the one emulating
    if plugin is False:
        env.pop("OCLGRIND_PLUGINS")
    elif isinstance(plugin, str):
        env["OCLGRIND_PLUGINS"] = plugin
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "clproj.miniemu.worker", path],
        env=env,
        capture_output=True,
        check=True,
        timeout=600,
    )
    wall = time.perf_counter() - start
    kernel_ns = json.loads(out.stdout.decode().strip().splitlines()[-1])["kernel_time_ns"]
    return kernel_ns / 1e9, wall


def overhead(repeats: int, baseline: str | None = None) -> list[dict]:
    """Quick mode where a group carries real work (matmul); full mode (all groups, one
    thread) for the light kernels, whose two quick-mode groups take only milliseconds and
    drown in timer noise on a shared machine. Minimum over ``repeats`` runs, the variants
    interleaved run by run (a load change then touches all of them alike)."""
    cases = [
        ("matmul 512", matmul(512), "quick"),
        ("matmul 1024", matmul(1024), "quick"),
        ("row walk 1024", rowwalk(1024), "quick"),
        ("reduction 2^16", reduction(1 << 16), "full"),
        ("transpose 256", transpose(256), "full"),
        ("saxpy 2^16", saxpy(1 << 16), "full"),
    ]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, rec, mode in cases:
            path = save(rec, tmp)
            variants: list[bool | str] = [False, True] + ([baseline] if baseline else [])
            runs: dict[int, list[tuple[float, float]]] = {i: [] for i in range(len(variants))}
            for _ in range(repeats):
                for i, plugin in enumerate(variants):
                    runs[i].append(run_worker(path, plugin, tmp, mode))
            pk, ok = min(p[0] for p in runs[0]), min(o[0] for o in runs[1])
            pw, ow = min(p[1] for p in runs[0]), min(o[1] for o in runs[1])
            row = {
                "case": f"{name} ({mode})",
                "plain_kernel_s": pk,
                "plugin_kernel_s": ok,
                "kernel_ratio": ok / pk,
                "plain_wall_s": pw,
                "plugin_wall_s": ow,
                "wall_ratio": ow / pw,
            }
            if baseline:
                bk = min(b[0] for b in runs[2])
                row.update(baseline_kernel_s=bk, baseline_ratio=bk / pk, vs_baseline=ok / bk)
            rows.append(row)
            print(rows[-1], flush=True)
    return rows


def scaling(
    sizes_red: list[int], sizes_mm: list[int], repeats: int
) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {"reduction": [], "matmul": []}
    for n in sizes_red:
        rec = reduction(n)
        t = statistics.median(
            miniemu.emulate(rec, mode="single", timeout_s=300).emulation["wall_s"]
            for _ in range(repeats)
        )
        out["reduction"].append((n, t))
        print("reduction", n, t, flush=True)
    for n in sizes_mm:
        rec = matmul(n)
        t = statistics.median(
            miniemu.emulate(rec, mode="single", timeout_s=300).emulation["wall_s"]
            for _ in range(repeats)
        )
        out["matmul"].append((n, t))
        print("matmul", n, t, flush=True)
    return out


def paper_ratios(budget_s: float) -> list[dict]:
    try:
        from clproj.benchmarks.apps.paper import PAPER_APPS
    except Exception as exc:  # the apps are another engineer's package
        print("paper apps unavailable:", exc)
        return []
    rows = []
    for app in PAPER_APPS:
        try:
            plan = app.plan("small")
            launch = max(plan.launches, key=lambda la: int(np.prod(la.global_size)))
            args = []
            for kind, v in launch.args:
                args.append(
                    plan.buffers[v] if kind == "buf" else LocalArg(int(v)) if kind == "local" else v
                )
            rec = from_arrays(
                plan.source,
                launch.kernel,
                args,
                list(launch.global_size),
                None if launch.local_size is None else list(launch.local_size),
                options=plan.options,
            )
            single = miniemu.emulate(rec, mode="single", timeout_s=budget_s)
            full = miniemu.emulate(rec, mode="full", timeout_s=budget_s, threads=1)
            rows.append(
                {
                    "app": app.name,
                    "size": str(plan.size),
                    "kernel": launch.kernel,
                    "groups": full.launch["num_groups"],
                    "single_s": single.emulation["wall_s"],
                    "full_s": full.emulation["wall_s"],
                    "ratio": full.emulation["wall_s"] / single.emulation["wall_s"],
                }
            )
        except Exception as exc:  # report, keep going
            rows.append({"app": app.name, "error": str(exc)[:160]})
        print(rows[-1], flush=True)
    return rows


def write(over, scal, paper, elapsed: float, command: str, baseline: str | None, out: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    lines = [
        "# Mini-emulation cost",
        "",
        f"Machine: {os.cpu_count()} cores; Oclgrind 21.10; `{command}`, {elapsed:.0f} s.",
        "",
        "## Plugin overhead vs plain Oclgrind (1 worker thread, minimum of repeats)",
        "",
        "Kernel = Oclgrind's profiling-event time of the emulated kernel; wall = whole worker "
        "subprocess (Python start, program build, buffers, kernel). Target: <= 2x.",
        "",
    ]
    if baseline:
        lines += [
            f"Baseline: another build of the plugin (`{os.path.basename(baseline)}`), run "
            "interleaved with ours on the same launches.",
            "",
            "| case | plain kernel s | baseline kernel s | ratio | plugin kernel s | ratio | "
            "plugin / baseline | plain wall s | plugin wall s | ratio |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
    else:
        lines += [
            "| case | plain kernel s | plugin kernel s | ratio | plain wall s | plugin wall s | ratio |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
    for r in over:
        base = (
            f"{r['baseline_kernel_s']:.3f} | {r['baseline_ratio']:.2f} | "
            if "baseline_kernel_s" in r
            else ""
        )
        vs = f" {r['vs_baseline']:.2f} |" if "vs_baseline" in r else ""
        lines.append(
            f"| {r['case']} | {r['plain_kernel_s']:.3f} | {base}{r['plugin_kernel_s']:.3f} | "
            f"{r['kernel_ratio']:.2f} |{vs} {r['plain_wall_s']:.2f} | {r['plugin_wall_s']:.2f} | "
            f"{r['wall_ratio']:.2f} |"
        )
    if scal:
        lines += [
            "",
            "## `single` mode time vs input size (wall s of `miniemu.emulate`, median)",
            "",
            "| kernel | size | wall s |",
            "|---|---:|---:|",
        ]
    for k, pts in scal.items():
        for n, t in pts:
            lines.append(f"| {k} | {n} | {t:.3f} |")
    if paper:
        lines += [
            "",
            "## Full / single emulation time, paper apps at their `small` size (Table III analogue)",
            "",
            "The largest launch of each app; full mode on 1 worker thread. The paper's ratios (C2050, "
            "paper sizes) are far larger because their inputs have 10-1000x more groups.",
            "",
            "| app | size | kernel | groups | single s | full s | full/single |",
            "|---|---|---|---:|---:|---:|---:|",
        ]
        for r in paper:
            if "error" in r:
                lines.append(f"| {r['app']} | | error: {r['error']} | | | | |")
            else:
                lines.append(
                    f"| {r['app']} | {r['size']} | {r['kernel']} | {r['groups']} | {r['single_s']:.2f} | "
                    f"{r['full_s']:.2f} | {r['ratio']:.1f} |"
                )
    with open(out, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    if not all(scal.get(k) for k in ("reduction", "matmul")):
        return  # --overhead-only: no curves to plot
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    n, t = zip(*scal["reduction"], strict=True)
    axes[0].plot(n, t, "o-")
    axes[0].set_xscale("log", base=2)
    axes[0].set_ylim(0, max(t) * 1.5)
    axes[0].set(title="reduction, single mode", xlabel="elements", ylabel="wall s")
    n, t = zip(*scal["matmul"], strict=True)
    axes[1].plot(n, t, "o-")
    axes[1].set_ylim(0, max(t) * 1.1)
    axes[1].set(title="naive matmul, single mode", xlabel="matrix side", ylabel="wall s")
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "miniemu_cost.png"), dpi=100)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick-run", action="store_true", help="fewer sizes and repeats")
    ap.add_argument("--no-paper", action="store_true", help="skip the paper apps")
    ap.add_argument("--baseline-plugin", metavar="PATH", help="another build of the plugin")
    ap.add_argument("--overhead-only", action="store_true", help="part 1 only")
    ap.add_argument("--out", default=os.path.join(RESULTS, "miniemu_cost.md"))
    args = ap.parse_args()
    start = time.perf_counter()
    reps = 1 if args.quick_run else 5
    over = overhead(reps, args.baseline_plugin)
    red = [1 << k for k in (14, 16, 18, 20, 22)]
    mm = [64, 128, 256, 512, 1024] if not args.quick_run else [64, 256]
    scal: dict[str, list[tuple[int, float]]] = {}
    paper: list[dict] = []
    if not args.overhead_only:
        scal = scaling(red, mm, 1 if args.quick_run else 2)
        paper = [] if args.no_paper else paper_ratios(300.0)
    command = "python -m clproj.benchmarks.miniemu_cost " + " ".join(
        os.path.basename(a) if a == args.baseline_plugin else a for a in sys.argv[1:]
    )
    write(
        over,
        scal,
        paper,
        time.perf_counter() - start,
        command.strip(),
        args.baseline_plugin,
        args.out,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
