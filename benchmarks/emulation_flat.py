"""Emulation cost against buffer size and loop length: is the first projection flat?

The paper's promise is a projection whose cost "stays relatively constant with the input
data size". This benchmark times what project mode pays per new kernel, the bounded
emulation of a saved launch record (`miniemu.emulate(record, mode="bounded")`, worker
process included), over two axes:

* buffer size: a streaming copy over 1 MiB to 1 GiB per buffer (NULL local size, as
  BabelStream launches it);
* loop length: 256 work-items each summing a row of 10^2 to 10^5 elements.

Beside each emulation it times reading and hashing the launch's snapshots
(``LaunchRecord.buffer_bytes``), which is what the emulation paid per run before it
mapped them (docs/miniemu.md "Running Oclgrind"), so the two columns come from one run.

    python -m clproj.benchmarks.emulation_flat [--max-mib 1024] [--out benchmarks/results/emulation_flat.md]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
from clproj.intercept.record import from_arrays, load, save

from clproj import miniemu

COPY = """
__kernel void copy(__global const double *a, __global double *c) {
  const size_t i = get_global_id(0);
  c[i] = a[i];
}
"""
ROWSUM = """
__kernel void rowsum(__global const float *m, __global float *out, int n) {
  const int r = get_global_id(0);
  float acc = 0.0f;
  for (int j = 0; j < n; ++j) acc += m[r * n + j];
  out[r] = acc;
}
"""
ROWS = 256


def timed_emulation(rec_args: tuple, tmp: str) -> dict[str, float]:
    """Seconds of a bounded emulation of the saved record, and of reading its snapshots."""
    src, name, arrays, gsz, lsz = rec_args
    path = save(from_arrays(src, name, arrays, gsz, lsz), tmp)
    record = load(path)
    t0 = time.perf_counter()
    for a in record.args:
        if a.kind == "buffer":
            record.buffer_bytes(a.index)
    t_read = time.perf_counter() - t0
    t0 = time.perf_counter()
    profile = miniemu.emulate(record, mode="bounded")
    t_emulate = time.perf_counter() - t0
    return {
        "emulate_s": t_emulate,
        "emulator_wall_s": float(profile.emulation["wall_s"]),
        "read_snapshots_s": t_read,
        "method": profile.emulation.get("method", profile.emulation["mode"]),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-mib", type=int, default=1024, help="largest buffer (MiB)")
    ap.add_argument("--out", help="also write the tables (Markdown) here")
    args = ap.parse_args(argv)
    lines = [
        "## Emulation cost vs buffer size and loop length (bounded mode, one run)",
        "",
        "`python -m clproj.benchmarks.emulation_flat --out benchmarks/results/emulation_flat.md` "
        f"({os.cpu_count()}-core machine, Oclgrind 21.10)",
        "",
        "| launch | size | emulation (s, worker incl.) | reading its snapshots (s) | method |",
        "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="clproj-flat-") as tmp:
        mib = 1
        while mib <= args.max_mib:
            n = mib * 2**20 // 8
            a = np.arange(n, dtype=np.float64)
            r = timed_emulation(
                (COPY, "copy", [a, np.zeros_like(a)], [n], None), os.path.join(tmp, f"c{mib}")
            )
            lines.append(
                f"| copy, NULL local | 2 x {mib} MiB | {r['emulate_s']:.2f} | "
                f"{r['read_snapshots_s']:.2f} | {r['method']} |"
            )
            sys.stderr.write(lines[-1] + "\n")
            del a
            mib *= 8 if mib < 64 else 4
        for trips in (100, 1000, 10_000, 100_000):
            m = np.ones(ROWS * trips, dtype=np.float32)
            arrays = [m, np.zeros(ROWS, np.float32), np.int32(trips)]
            r = timed_emulation(
                (ROWSUM, "rowsum", arrays, [ROWS], [64]), os.path.join(tmp, f"r{trips}")
            )
            lines.append(
                f"| rowsum, {ROWS} rows | {trips} trips | {r['emulate_s']:.2f} | "
                f"{r['read_snapshots_s']:.2f} | {r['method']} |"
            )
            sys.stderr.write(lines[-1] + "\n")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
