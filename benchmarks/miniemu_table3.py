"""Table III of Panwar et al. at the paper's input sizes: full-emulation cost / one-group cost.

For each of the eight paper applications at its Table II size, the largest launch is
emulated in Oclgrind with our plugin, on one emulator thread:

* ``single``: one work-group (the mini-emulation clproj does), measured;
* ``full``: every work-group (the reference the paper compares against), measured directly
  when it fits the ``--direct-budget``; otherwise measured on two prefixes of the NDRange
  (the first K1 and K2 groups, same buffers and arguments) and extrapolated linearly in the
  number of groups, ``t(K) = a + b K``. These kernels give every group the same work (matmul,
  nbody: a loop over the matrix side / all bodies), so the per-group cost is constant; the
  method is validated on apps that are measured both ways (column ``extrapolation check``).

Costs are **CPU seconds** of the emulator subprocess (user + system, from ``getrusage`` of
the waited-for children), not wall seconds: the emulator runs on one thread, so on an idle
machine the two agree, and CPU seconds do not inflate when other work shares the 2 cores
(the runs of one app are minutes apart). Wall seconds are reported beside them.

Writes ``benchmarks/results/miniemu_table3.{md,json,png}``.
Run: ``.venv/bin/python -m clproj.benchmarks.miniemu_table3 [--apps a,b] [--direct-budget S]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from clproj import miniemu
from clproj.intercept.record import LaunchRecord, LocalArg, from_arrays

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

# Table III as printed (C2050, the paper's inputs): full emulation time / mini-emulation time.
PAPER_RATIOS = {
    "fastwalsh": 2772.7,
    "floydwarshall": 182.6,
    "matmul_gmem": 337.4,
    "nbody": 4.1,
    "aes": 784.0,
    "reduction": 1709.0,
    "matmul_lmem": 196.6,
    "transpose_lmem": 556.1,
}


@dataclass
class Cost:
    """One emulator run: CPU seconds of the subprocess tree and wall seconds."""

    cpu_s: float
    wall_s: float
    groups: int


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def measure(record: LaunchRecord, mode: str, timeout_s: float) -> Cost:
    """Emulate ``record`` once on one Oclgrind thread and charge it in CPU and wall seconds."""
    cpu0, wall0 = _children_cpu(), time.perf_counter()
    prof = miniemu.emulate(record, mode=mode, timeout_s=timeout_s, threads=1)
    return Cost(_children_cpu() - cpu0, time.perf_counter() - wall0, prof.launch["num_groups"])


def largest_launch_record(app: Any, size: str) -> tuple[LaunchRecord, Any, Any]:
    """The record of the app's largest launch (the one the paper's table is about)."""
    plan = app.plan(size)
    launch = max(plan.launches, key=lambda la: int(np.prod(la.global_size)))
    args = [
        plan.buffers[v] if kind == "buf" else LocalArg(int(v)) if kind == "local" else v
        for kind, v in launch.args
    ]
    rec = from_arrays(
        plan.source,
        launch.kernel,
        args,
        list(launch.global_size),
        list(launch.local_size),
        options=plan.options,
    )
    return rec, plan, (launch, args)


def prefix_record(plan: Any, launch_args: tuple[Any, Any], groups: int) -> LaunchRecord:
    """The same launch restricted to its first ``groups`` work-groups (row-major order).

    Buffers and scalar arguments are unchanged and every prefix is a whole number of rows
    of groups (or part of the first row), so each emulated work-item has the same ids, and
    does exactly the work, it has in the whole launch; only the number of groups shrinks.
    """
    launch, args = launch_args
    local = list(launch.local_size)
    glob = list(launch.global_size)
    per_row = glob[0] // local[0]
    if groups <= per_row:
        glob = [groups * local[0], *local[1:]]
    else:
        assert groups % per_row == 0 and len(glob) == 2, "prefix must be whole rows of a 2-D range"
        glob = [glob[0], (groups // per_row) * local[1]]
    return from_arrays(plan.source, launch.kernel, args, glob, local, options=plan.options)


def _valid_prefix(k: int, per_row: int) -> int:
    """Round ``k`` to a prefix :func:`prefix_record` can build (part of a row or whole rows)."""
    return k if k <= per_row else (k // per_row) * per_row


def run_app(app: Any, direct_budget_s: float, timeout_s: float, check: bool) -> dict[str, Any]:
    rec, plan, launch_args = largest_launch_record(app, "paper")
    groups = math.prod(
        g // lo for g, lo in zip(launch_args[0].global_size, launch_args[0].local_size, strict=True)
    )
    row: dict[str, Any] = {
        "app": app.name,
        "size": str(plan.size),
        "kernel": rec.kernel,
        "global": list(rec.global_size),
        "local": list(rec.local_size),
        "groups": groups,
    }
    single = measure(rec, "single", timeout_s)
    row["single_cpu_s"], row["single_wall_s"] = single.cpu_s, single.wall_s
    # Two prefixes give the fixed cost (process start, build, buffers) and the per-group
    # cost. The second grows until the groups' own cost dominates its run (>= 3 CPU s and
    # as much again as the one-group run) or it reaches half the launch; each step is
    # capped so that no prefix run exceeds about a minute.
    per_row = launch_args[0].global_size[0] // launch_args[0].local_size[0]
    k1 = 1
    p1 = measure(prefix_record(plan, launch_args, k1), "full", timeout_s)
    k2, p2 = k1, p1
    while k2 < groups // 2 and (p2.cpu_s - p1.cpu_s < 3.0 or p2.cpu_s < 2 * p1.cpu_s):
        nxt = min(groups // 2, k2 * 8)
        if p2.cpu_s * nxt / k2 > 60.0:
            nxt = max(k2 + 1, int(k2 * 60.0 / p2.cpu_s))
        nxt = _valid_prefix(nxt, per_row)
        if nxt <= k2:  # past the first row the step is a whole row
            nxt = per_row if k2 < per_row else k2 + per_row
        k2 = nxt
        p2 = measure(prefix_record(plan, launch_args, k2), "full", timeout_s)
    b = (p2.cpu_s - p1.cpu_s) / (k2 - k1)
    a = p1.cpu_s - b * k1
    bw = (p2.wall_s - p1.wall_s) / (k2 - k1)
    aw = p1.wall_s - bw * k1
    extrapolated = a + b * groups
    row.update(
        prefix_groups=[k1, k2],
        prefix_cpu_s=[p1.cpu_s, p2.cpu_s],
        fixed_cpu_s=a,
        per_group_cpu_s=b,
        extrapolated_full_cpu_s=extrapolated,
        extrapolated_full_wall_s=aw + bw * groups,
    )
    if extrapolated <= direct_budget_s or (check and extrapolated <= 3 * direct_budget_s):
        full = measure(rec, "full", max(timeout_s, 4 * extrapolated))
        row["full_cpu_s"], row["full_wall_s"] = full.cpu_s, full.wall_s
        row["full_method"] = "measured"
        row["extrapolation_error"] = extrapolated / full.cpu_s - 1.0
    else:
        row["full_cpu_s"], row["full_wall_s"] = extrapolated, row["extrapolated_full_wall_s"]
        row["full_method"] = f"extrapolated from {k1} and {k2} groups"
    row["ratio"] = row["full_cpu_s"] / row["single_cpu_s"]
    row["paper_ratio"] = PAPER_RATIOS.get(app.name)
    return row


def _fmt_s(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    return f"{s / 60:.1f} min" if s >= 120 else f"{s:.1f} s"


def write(rows: list[dict[str, Any]], elapsed: float, load: tuple[float, float, float]) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "miniemu_table3.json"), "w", encoding="utf-8") as fh:
        json.dump(
            {"version": 1, "rows": rows, "elapsed_s": elapsed, "load": list(load)}, fh, indent=1
        )
    lines = [
        "# Table III at the paper's input sizes: full emulation / one work-group",
        "",
        f"Generated by `benchmarks/miniemu_table3.py` in {elapsed / 60:.0f} min on "
        f"{os.cpu_count()} cores (load average at the end {load[0]:.1f} / {load[1]:.1f} / "
        f"{load[2]:.1f}); Oclgrind 21.10 with the clproj plugin, one emulator thread.",
        "Costs are CPU seconds of the emulator subprocess (see the module docstring); the "
        "largest launch of each app at its Table II size.",
        "",
        "| app | size | kernel | groups | single (CPU s) | full (CPU s) | how full was obtained "
        "| full / single | paper (C2050) | extrapolation check |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['app']} | | error: {r['error']} | | | | | | | |")
            continue
        check = (
            f"extrapolated {_fmt_s(r['extrapolated_full_cpu_s'])}: "
            f"{100 * r['extrapolation_error']:+.1f}%"
            if "extrapolation_error" in r
            else ""
        )
        paper = f"{r['paper_ratio']:.1f}" if r.get("paper_ratio") else ""
        lines.append(
            f"| {r['app']} | {r['size']} | {r['kernel']} | {r['groups']} | "
            f"{r['single_cpu_s']:.2f} | {_fmt_s(r['full_cpu_s'])} | {r['full_method']} | "
            f"{r['ratio']:.0f} | {paper} | {check} |"
        )
    ok = [r for r in rows if "ratio" in r and r.get("paper_ratio")]
    if ok:
        lines += [
            "",
            "Per-group emulation cost (CPU s, from the two prefixes) and the fixed cost of one "
            "emulator run (process start, program build, buffer upload):",
            "",
            "| app | per group | fixed | single / (fixed + 1 group) |",
            "|---|---:|---:|---:|",
        ]
        for r in ok:
            one = r["fixed_cpu_s"] + r["per_group_cpu_s"]
            lines.append(
                f"| {r['app']} | {r['per_group_cpu_s']:.3f} | {r['fixed_cpu_s']:.2f} | "
                f"{r['single_cpu_s'] / one:.2f} |"
            )
    lines += [
        "",
        "Reading: a one-group emulation costs a fixed ~0.3 CPU s (Python worker start, program "
        "build, buffer upload) plus one group. Where a group is light (FloydWarshall, FastWalsh, "
        "Reduction, Transpose: 1-5 ms of emulation per group in Oclgrind) the fixed part "
        "dominates and full emulation of even the paper's inputs takes seconds, so the ratio "
        "stays small (2-90); where a group is heavy (MatMul 1024: ~0.9 s per group, NBody "
        "32768: ~50 s per group) the ratio approaches the number of groups (4096, 128) and "
        "full emulation takes about an hour or two. The paper's ratios come from its own "
        "emulator and machine; NBody's 4.1 there is not comparable (its mini-emulation must "
        "have covered many groups). The extrapolation check (apps measured both ways) bounds "
        "the error of the extrapolated rows: within +-17% here.",
    ]
    with open(os.path.join(RESULTS, "miniemu_table3.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    if ok:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names = [r["app"] for r in ok]
        x = np.arange(len(names))
        fig, ax = plt.subplots(figsize=(9, 4))
        ax.bar(x - 0.2, [r["ratio"] for r in ok], 0.4, label="clproj (Oclgrind, 1 thread)")
        ax.bar(x + 0.2, [r["paper_ratio"] for r in ok], 0.4, label="paper (C2050 setup)")
        ax.set_yscale("log")
        ax.set_xticks(x, names, rotation=30, ha="right")
        ax.set_ylabel("full / single emulation time")
        ax.set_title("Table III at the paper's input sizes")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(RESULTS, "miniemu_table3.png"), dpi=100)


def main() -> int:
    from clproj.benchmarks.apps.paper import PAPER_APPS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--apps", help="comma-separated app names (default: all eight)")
    ap.add_argument(
        "--direct-budget",
        type=float,
        default=240.0,
        help="measure full emulation directly when its extrapolated cost is below this (CPU s)",
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="also measure full directly up to 3x the budget, to check the extrapolation",
    )
    ap.add_argument("--timeout", type=float, default=600.0, help="per emulator run, seconds")
    ap.add_argument("--rewrite", action="store_true", help="only regenerate .md/.png from .json")
    args = ap.parse_args()
    if args.rewrite:
        return rewrite()
    wanted = set(args.apps.split(",")) if args.apps else None
    start = time.perf_counter()
    rows = []
    for app in PAPER_APPS:
        if wanted and app.name not in wanted:
            continue
        try:
            rows.append(run_app(app, args.direct_budget, args.timeout, args.check))
        except Exception as exc:  # report and keep going: one app must not lose the table
            rows.append({"app": app.name, "error": str(exc)[:200]})
        print(json.dumps(rows[-1]), flush=True)
    write(rows, time.perf_counter() - start, os.getloadavg())
    return 0


def rewrite() -> int:
    """Regenerate the .md/.png from the committed .json (after editing the text only)."""
    with open(os.path.join(RESULTS, "miniemu_table3.json"), encoding="utf-8") as fh:
        data = json.load(fh)
    write(data["rows"], data.get("elapsed_s", 0.0), tuple(data.get("load", (0.0, 0.0, 0.0))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
