"""What a launch-heavy app costs project mode after it exits: its reused launches.

An app that launches a kernel in thousands of shapes (PolyBench lu: 2 kernels x 4,095
NDRanges) is snapshotted and emulated a bounded number of times; every other launch is
answered by the reuse cache after the app, scaled from its family's anchors and projected
on every device (runtime.projection.live, ``project_reused``), and the run's table then
shows them. This benchmark builds that situation from LU's update step (``--n`` rows: n - 2
launches, each its own NDRange), seeds a reuse cache with real emulations of two of them,
and times, round by round:

* projecting the reused launches in one process (``workers=1``), and in one forked process
  per core (the default once each gets 200 launches); the documents are compared;
* laying out the projection table with one row per launch, and with a kernel of many
  shapes in one row (runtime.projection.table, what ``clproj run`` prints).

    python -m clproj.benchmarks.reused_projection [--n 4096] [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

from clproj.console import publish

SRC = """
__kernel void upd(__global float *a, int n, int k) {
  int j = k + 1 + get_global_id(0), i = k + 1 + get_global_id(1);
  if (j < n) a[i * n + j] -= a[i * n + k] * a[k * n + j];
}
"""


def meta(n: int, k: int) -> Any:
    """A buffer-less record of LU's update step at pivot k, as the shim leaves it."""
    from clproj.intercept.record import ArgRecord, LaunchRecord

    m = n - k - 1
    args = [
        ArgRecord(0, "buffer", size=4 * n * n),
        ArgRecord(1, "scalar", data=np.int32(n).tobytes()),
        ArgRecord(2, "scalar", data=np.int32(k).tobytes()),
    ]
    return LaunchRecord("upd", SRC, "", args, 2, [-(-m // 64) * 64, m], [64, 1])


def seeded_cache(n: int) -> Any:
    """A reuse cache with two emulated anchors (pivots 0 and n/2): the launches between are
    interpolated, those past n/2 scaled, as in the run."""
    from clproj import miniemu
    from clproj.intercept.record import from_arrays
    from clproj.miniemu.reuse import ReuseCache

    x = np.ones(n * n, np.float32)
    cache = ReuseCache(mode="bounded")
    for k in (0, n // 2):
        full = from_arrays(
            SRC, "upd", [x, np.int32(n), np.int32(k)], meta(n, k).global_size, [64, 1]
        )
        cache.seed(full, miniemu.emulate(full, mode="bounded"))
    return cache


def table_seconds(docs: list[dict[str, Any]], grouped: bool) -> float:
    from rich.console import Console

    from clproj.runtime.projection.table import SHAPES_PER_ROW, print_projections

    most = SHAPES_PER_ROW if grouped else len(docs)
    t0 = time.perf_counter()
    print_projections(docs, [], to=Console(file=io.StringIO(), width=200), shapes_per_row=most)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    from clproj.runtime.projection import device_set
    from clproj.runtime.projection.live import project_reused

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4096, help="LU rows: n - 2 reused launches")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="also write the report (Markdown) here")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    cache = seeded_cache(args.n)
    devices = device_set.resolve("measured")
    deferred = [meta(args.n, k) for k in range(1, args.n - 1) if k != args.n // 2]
    cores = os.cpu_count() or 1
    times: dict[str, list[float]] = {"one process": [], f"{cores} processes": []}
    tables: dict[str, list[float]] = {"a row per launch": [], "a row per kernel": []}
    same = True
    for _ in range(args.rounds):
        docs = {}
        for name, workers in (("one process", 1), (f"{cores} processes", cores)):
            t0 = time.perf_counter()
            docs[name] = list(project_reused(deferred, cache, devices, "bounded", workers))
            times[name].append(time.perf_counter() - t0)
        for d in [*docs["one process"], *docs[f"{cores} processes"]]:
            d.pop("elapsed_s", None)
        same = same and docs["one process"] == docs[f"{cores} processes"]
        tables["a row per launch"].append(table_seconds(docs["one process"], False))
        tables["a row per kernel"].append(table_seconds(docs["one process"], True))
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    lines = [
        f"## Reused launches after the app: {len(deferred)} launches of LU's update step",
        "",
        f"`python -m clproj.benchmarks.reused_projection --n {args.n} --rounds {args.rounds}`"
        f" ({cores} cores, load average at the end {load}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}); "
        f"{len(devices)} device profiles (`--devices measured`); every round runs each way "
        "once, in this order.",
        "",
        "| what | median (s) | range (s) | per launch (ms) |",
        "|---|---|---|---|",
    ]
    for label, got in [
        *(("projection, " + k, v) for k, v in times.items()),
        *(("table, " + k, v) for k, v in tables.items()),
    ]:
        lines.append(
            f"| {label} | {statistics.median(got):.2f} | {min(got):.2f}-{max(got):.2f} | "
            f"{1e3 * statistics.median(got) / len(deferred):.3f} |"
        )
    lines += [
        "",
        f"Documents of one process and of {cores} identical (but `elapsed_s`): {'yes' if same else 'NO'}.",
        "",
    ]
    publish("\n".join(lines), args.out)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
