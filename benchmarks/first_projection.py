"""Time from a kernel's first launch to its projection, and what project mode costs an app.

Routing can only use a projection that exists: a short app finishes before the
projections of its kernels do and never benefits. This benchmark runs unmodified apps
natively and under ``clproj run --mode project --devices measured --json`` from an empty
cache, and reports per app the two wall times and, over its kernels, the time from each
kernel's first launch (when its record was made) to its projection (``since_launch_s`` of
the launch projection), and the emulation-and-projection time alone (``elapsed_s``):

* BabelStream (``../shared/validation/babelstream``) at 1 MiB to 400 MiB arrays: the
  data-size axis;
* the shared PolyBench eight (``../shared/validation/polybench``, built by ``clproj
  validate``'s builder).

    POCL_DEVICES=pthread python -m clproj.benchmarks.first_projection [--suites babelstream,polybench] \\
        [--out benchmarks/results/first_projection.md]
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
from typing import Any

from clproj.runtime.evaluation.validate_suite import ensure_built, parse_run_output

SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared")
BABELSTREAM_SIZES = (1 << 17, 1 << 20, 1 << 23, 52_428_800)  # doubles per array: 1-400 MiB


def timed(cmd: list[str], cwd: str, env: dict[str, str]) -> tuple[float, str, int]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    return time.perf_counter() - start, proc.stdout, proc.returncode


def measure(name: str, app: list[str], cwd: str, env: dict[str, str]) -> dict[str, Any]:
    """Plain and project-mode wall time of one app, and its projections' latencies."""
    plain, _, rc = timed(app, cwd, env)
    clproj = [sys.executable, "-m", "clproj.cli", "run", "--mode", "project"]
    clproj += ["--devices", "measured", "--json", "--", *app]
    wall, out, rc2 = timed(clproj, cwd, env)
    row: dict[str, Any] = {"app": name, "plain_s": plain, "project_s": wall, "rc": (rc, rc2)}
    try:
        docs = parse_run_output(out).get("projections") or []
    except ValueError:
        docs = []
    since = [d["since_launch_s"] for d in docs if d.get("since_launch_s") is not None]
    spent = [d["elapsed_s"] for d in docs if d.get("elapsed_s") is not None]
    row |= {
        "kernels": len(docs),
        "since_median_s": statistics.median(since) if since else None,
        "since_max_s": max(since) if since else None,
        "emulation_median_s": statistics.median(spent) if spent else None,
    }
    return row


def babelstream(work: str, env: dict[str, str]) -> list[dict[str, Any]]:
    src = os.path.join(SHARED, "validation", "babelstream", "src")
    exe = os.path.join(work, "babelstream-ocl")
    defs = ["-DOCL", "-DCL_TARGET_OPENCL_VERSION=120", "-DCL_HPP_TARGET_OPENCL_VERSION=120"]
    defs.append("-DCL_HPP_MINIMUM_OPENCL_VERSION=120")
    subprocess.run(
        ["g++", "-O2", "-std=c++20", *defs, f"-I{src}", f"-I{src}/ocl",
         f"{src}/main.cpp", f"{src}/ocl/OCLStream.cpp", "-lOpenCL", "-o", exe],
        check=True, capture_output=True,
    )  # fmt: skip
    rows = []
    for n in BABELSTREAM_SIZES:
        name = f"BabelStream {n * 8 / 2**20:g} MiB arrays"
        rows.append(measure(name, [exe, "-s", str(n), "-n", "2"], work, env))
        sys.stderr.write(f"{rows[-1]}\n")
    return rows


def polybench(env: dict[str, str]) -> list[dict[str, Any]]:
    suite = os.path.join(SHARED, "validation", "polybench")
    where, _ = ensure_built(suite, None)
    rows = []
    for app in sorted(os.listdir(where)):
        folder = os.path.join(where, app)
        if os.path.isfile(os.path.join(folder, "app")):
            rows.append(measure(f"PolyBench {app}", ["./app"], folder, env))
            sys.stderr.write(f"{rows[-1]}\n")
    return rows


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suites", default="babelstream,polybench")
    ap.add_argument("--out", help="also write the table (Markdown) here")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="clproj-first-") as work:
        # an empty cache: every kernel is new (the device profiles are the committed ones)
        env = dict(os.environ, CLPROJ_CACHE=os.path.join(work, "cache"))
        if "babelstream" in args.suites:
            rows += babelstream(work, env)
        if "polybench" in args.suites:
            rows += polybench(env)
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return 0
    lines = [
        "## Time from a kernel's first launch to its projection (project mode, empty cache)",
        "",
        "`POCL_DEVICES=pthread python -m clproj.benchmarks.first_projection --out "
        f"benchmarks/results/first_projection.md` ({os.cpu_count()} cores)",
        "",
        "| app | plain (s) | project mode (s) | ratio | kernels | first launch to projection, "
        "median / max (s) | emulation + projection, median (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = r["project_s"] / r["plain_s"] if r["plain_s"] else float("nan")
        lines.append(
            f"| {r['app']} | {r['plain_s']:.2f} | {r['project_s']:.2f} | {ratio:.1f}x | "
            f"{r['kernels']} | {fmt(r['since_median_s'])} / {fmt(r['since_max_s'])} | "
            f"{fmt(r['emulation_median_s'])} |"
        )
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
