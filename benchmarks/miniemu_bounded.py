"""Bounded mini-emulation benchmark -> benchmarks/results/miniemu_bounded.md.

1. Agreement: bounded vs unbounded single-group emulation (instructions, global
   transactions summed over warp widths and segments), with the wall time of each.
2. Heavy kernels (10^6 iterations per work-item) at their default size: bounded profile
   time, method and confidence.
3. Launch reuse: every launch of lu_factor (default n=1024) through miniemu.reuse:
   emulations, reuses, drift checks, and the error of reused profiles vs direct emulation.

``python -m benchmarks.miniemu_bounded [--quick]``
"""

from __future__ import annotations

import argparse
import copy
import os
import time

import numpy as np

import miniemu
from benchmarks.apps import get_app
from intercept.record import LocalArg, from_arrays
from miniemu.bounded import _key_metrics
from miniemu.reuse import ReuseCache

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "miniemu_bounded.md")

# (app, size): sizes where a full single-group emulation is still feasible.
AGREEMENT = [
    ("vecadd", "small"),
    ("matmul_gmem", "small"),
    ("matmul_lmem", "small"),
    ("reduction", "small"),
    ("nbody", "small"),
    ("spmv_csr", "small"),
    ("blackscholes", "small"),
    ("heavy_lcg", (512, 3000)),
    ("heavy_gather", (256, 3000)),
    ("heavy_fma", (512, 3000)),
    ("heavy_special", (256, 1000)),
    ("heavy_lmem", (512, 1000)),
]
HEAVY = ["heavy_lcg", "heavy_gather", "heavy_fma", "heavy_special", "heavy_lmem"]


def record_of(plan, index: int = 0):
    launch = plan.launches[index]
    args = []
    for kind, v in launch.args:
        if kind == "buf":
            args.append(plan.buffers[v])
        elif kind == "local":
            args.append(LocalArg(v))
        else:
            args.append(v)
    return from_arrays(
        plan.source,
        launch.kernel,
        args,
        launch.global_size,
        launch.local_size,
        options=plan.options,
    )


def tx(stats) -> int:
    return int(_key_metrics(stats)["transactions"])


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1.0)


def agreement(rows: list) -> list[str]:
    out = [
        "| kernel | size | method | instr. single | instr. bounded | diff | transactions single | bounded | diff | single s | bounded s | cost reduction |",
        "|" + "---|" * 12,
    ]
    for name, size in rows:
        rec = record_of(get_app(name).plan(size))
        t = time.perf_counter()
        s = miniemu.emulate(rec, mode="single", timeout_s=600)
        ts = time.perf_counter() - t
        t = time.perf_counter()
        b = miniemu.emulate(rec, mode="bounded")
        tb = time.perf_counter() - t
        si, bi = _key_metrics(s.total)["instructions"], _key_metrics(b.total)["instructions"]
        out.append(
            f"| {rec.kernel} | {size} | {b.emulation['method']} | {si:.4g} | {bi:.4g} | {rel(bi, si):.2%} | "
            f"{tx(s.total):.4g} | {tx(b.total):.4g} | {rel(tx(b.total), tx(s.total)):.2%} | {ts:.2f} | {tb:.2f} | {ts / tb:.1f}x |"
        )
        print(out[-1], flush=True)
    return out


def heavy() -> list[str]:
    out = [
        "| kernel | size (work-items, iterations) | bounded s | method | confidence | runs | instructions (total) |",
        "|" + "---|" * 7,
    ]
    for name in HEAVY:
        app = get_app(name)
        plan = app.plan("default")
        rec = record_of(plan)
        t = time.perf_counter()
        b = miniemu.emulate(rec, mode="bounded")
        tb = time.perf_counter() - t
        e = b.emulation
        out.append(
            f"| {rec.kernel} | {plan.size} | {tb:.2f} | {e['method']} | {e['confidence']} | {e['emulator_runs']} | {_key_metrics(b.total)['instructions']:.4g} |"
        )
        print(out[-1], flush=True)
    return out


def lu_reuse(n: int) -> list[str]:
    plan = get_app("lu_factor").plan(n)
    base = {k: record_of(plan, k) for k in (0, 1)}  # lu_column, lu_update
    cache = ReuseCache(mode="bounded")
    t = time.perf_counter()
    profiles = []
    for i, launch in enumerate(plan.launches):
        rec = copy.copy(base[i % 2])
        rec.args = [copy.copy(a) for a in rec.args]
        rec.args[2].data = np.int32(launch.args[2][1]).tobytes()
        rec.global_size = list(launch.global_size)
        rec.path = None
        profiles.append(cache.profile(rec))
    wall = time.perf_counter() - t
    st = cache.stats()
    # Error of reused profiles vs direct emulation at a few launches.
    errs = []
    for i in (2, len(plan.launches) // 2, len(plan.launches) - 3):
        launch = plan.launches[i]
        rec = copy.copy(base[i % 2])
        rec.args = [copy.copy(a) for a in rec.args]
        rec.args[2].data = np.int32(launch.args[2][1]).tobytes()
        rec.global_size = list(launch.global_size)
        rec.path = None
        d = miniemu.emulate(rec, mode="bounded")
        p = profiles[i]
        errs.append(
            (
                i,
                launch.kernel,
                p.emulation["method"],
                rel(_key_metrics(p.total)["instructions"], _key_metrics(d.total)["instructions"]),
                rel(tx(p.total), tx(d.total)),
            )
        )
    shapes = len({(la.kernel, la.global_size) for la in plan.launches})
    out = [
        f"lu_factor n={n}: {len(plan.launches)} launches, {shapes} distinct shapes; every launch got a profile "
        f"({len(profiles)}) with {st['emulations']} emulations ({st['drift_checks']} of them drift checks, "
        f"{st['invalidations']} invalidations), {st['reuses']} reuses; {wall:.1f} s in all.",
        "",
        "| launch | kernel | method | instructions vs direct | transactions vs direct |",
        "|---|---|---|---|---|",
    ]
    out += [f"| {i} | {k} | {m} | {a:.2%} | {b:.2%} |" for i, k, m, a, b in errs]
    print("\n".join(out), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rows = AGREEMENT[:3] if args.quick else AGREEMENT
    doc = [
        "# Bounded mini-emulation (miniemu bounded mode)",
        "",
        "Generated by `python -m benchmarks.miniemu_bounded` on the 2-core dev VM (shared, loaded).",
        "",
    ]
    doc += ["## Agreement with unbounded single-group emulation", "", *agreement(rows), ""]
    doc += ["## Heavy kernels (10^6 iterations per work-item), default sizes", "", *heavy(), ""]
    doc += ["## Launch reuse (miniemu.reuse)", "", *lu_reuse(128 if args.quick else 1024), ""]
    if not args.quick:
        with open(OUT, "w", encoding="utf-8") as fh:
            fh.write("\n".join(doc) + "\n")


if __name__ == "__main__":
    main()
