"""Reuse at a constant NDRange whose work depends on a scalar step -> results/miniemu_reuse_axis.md.

Kernels whose active work-items shrink with a step argument through a branch, at an
NDRange that stays the same for many launches: Rodinia Gaussian elimination ``Fan1``
(1D, one group) and ``Fan2`` (2D; in 64x1 groups the emulated group's work falls
linearly with the step; in 16x16 groups it is constant until the step reaches the
group, t >= 48 of 63, then falls) and LU's ``lu_column``
(benchmarks/apps/heavy.cl; its NDRange is padded to 64, so it is constant for 64 steps
at a time). Every launch is emulated directly (bounded mode, Oclgrind); then the launch
sequence goes through :class:`miniemu.reuse.ReuseCache` with the size rule only
(``axis=False``, the behaviour before the scalar axis) and with it (default). The
caches' emulations return the direct profile of that very launch (memoised: emulation
is deterministic), so every anchor is a real profile and the count of calls is the
number of emulations. Errors are per launch, relative to the direct emulation, over the
launches the cache answered without emulating them.

``python -m clproj.benchmarks.miniemu_reuse_axis [--baseline OLD_REUSE_PY]`` (a copy of an older
``miniemu/reuse.py``, e.g. ``git show REV:miniemu/reuse.py > /tmp/old.py``, is run too
as a check that ``axis=False`` is the old behaviour).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from clproj import miniemu
from clproj.benchmarks.apps.base import load_source
from clproj.intercept.record import LaunchRecord, from_arrays
from clproj.miniemu.counters import key_metrics
from clproj.miniemu.reuse import ReuseCache

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "miniemu_reuse_axis.md")

GAUSS_SRC = load_source("gaussian.cl")


def fan1(size: int = 128) -> list[LaunchRecord]:
    """Fan1 over every step t of an elimination of order ``size`` (one group of ``size``)."""
    a = np.random.default_rng(1).random(size * size, dtype=np.float32) + 1
    m = np.zeros(size * size, np.float32)
    return [
        from_arrays(GAUSS_SRC, "Fan1", [m, a, np.int32(size), np.int32(t)], [size], [size])
        for t in range(size - 1)
    ]


def fan2(size: int = 64, local: tuple[int, int] = (16, 16)) -> list[LaunchRecord]:
    """Fan2 over every step t, NDRange (size, size) in ``local`` groups."""
    rng = np.random.default_rng(2)
    a, m = rng.random(size * size, dtype=np.float32), rng.random(size * size, dtype=np.float32)
    b = rng.random(size, dtype=np.float32)
    return [
        from_arrays(
            GAUSS_SRC, "Fan2", [m, a, b, np.int32(size), np.int32(t)], [size, size], list(local)
        )
        for t in range(size - 1)
    ]


def lu_column(n: int = 128) -> list[LaunchRecord]:
    """lu_column of the lu_factor app (NDRange n-k-1 padded to 64) for every pivot k."""
    a = np.random.default_rng(3).random(n * n, dtype=np.float32) + n * np.eye(n).reshape(-1)
    a = a.astype(np.float32)
    out = []
    for k in range(n - 1):
        gx = -(-(n - k - 1) // 64) * 64
        out.append(
            from_arrays(
                load_source("heavy.cl"), "lu_column", [a, np.int32(n), np.int32(k)], [gx], [64]
            )
        )
    return out


def metrics(p) -> dict[str, float]:
    m = key_metrics(p.total)
    return {
        "instructions": m["instructions"],
        "global bytes": m["global load bytes"] + m["global store bytes"],
        "transactions": m["transactions"],
    }


def replay(
    records: list[LaunchRecord], direct: dict[str, object], make: Callable[..., ReuseCache]
) -> tuple[int, list[dict[str, float]], list[str]]:
    """Emulations, per-launch relative errors of the reused launches, and their methods."""
    calls: list[str] = []

    def memo(record, **_kw):
        calls.append(record.signature)
        return copy.deepcopy(direct[record.signature])

    cache = make(mode="bounded", emulate=memo)
    errors, how = [], []
    for r in records:
        p = cache.profile(r)
        if p.emulation.get("method") != "reused":
            how.append("emulated")
            continue
        ax = p.emulation.get("axis")
        how.append("axis-extrapolated" if ax and ax["extrapolated"] else "axis" if ax else "size")
        got, ref = metrics(p), metrics(direct[r.signature])
        errors.append({k: abs(got[k] - ref[k]) / max(ref[k], 1.0) for k in ref})
    return len(calls), errors, how


def summary(errors: list[dict[str, float]], key: str) -> str:
    xs = [e[key] for e in errors] or [0.0]
    return f"{statistics.mean(xs):.1%} / {max(xs):.1%}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", help="an older miniemu/reuse.py to replay as well")
    args = ap.parse_args()
    variants: dict[str, Callable[..., ReuseCache]] = {
        "size only (axis=False)": lambda **kw: ReuseCache(axis=False, **kw),
        "scalar axis (default)": ReuseCache,
    }
    if args.baseline:
        spec = importlib.util.spec_from_file_location("reuse_baseline", args.baseline)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["reuse_baseline"] = mod  # dataclasses look their module up
        spec.loader.exec_module(mod)
        variants = {"baseline file": mod.ReuseCache, **variants}
    lines = [
        "# Reuse at a constant NDRange: scalar axis (`python -m clproj.benchmarks.miniemu_reuse_axis`)",
        "",
        f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, Oclgrind bounded mode. Errors:"
        " mean / max over the reused launches of |reused - direct| / direct.",
        "",
        "| kernel | launches | rule | emulations | instructions | global bytes | transactions |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, records in (
        ("Fan1 n=128, 128x1", fan1()),
        ("Fan2 n=64, 64x1 groups", fan2(local=(64, 1))),
        ("Fan2 n=64, 16x16 groups", fan2()),
        ("lu_column n=128", lu_column()),
    ):
        t0 = time.time()
        direct = {r.signature: miniemu.emulate(r, mode="bounded") for r in records}
        print(f"{name}: {len(records)} direct emulations in {time.time() - t0:.1f} s", flush=True)
        for label, make in variants.items():
            n, errors, how = replay(records, direct, make)
            counts = {h: how.count(h) for h in dict.fromkeys(how)}
            print(f"  {label}: {n} emulations, {counts}", flush=True)
            cells = " | ".join(
                summary(errors, k) for k in ("instructions", "global bytes", "transactions")
            )
            lines.append(f"| {name} | {len(records)} | {label} | {n} | {cells} |")
    lines.append("")
    text = "\n".join(lines)
    print(text)
    with open(OUT, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
