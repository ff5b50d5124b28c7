"""What project mode costs an app's first run: its wall time under ``clproj run --mode
project`` over its plain wall time, per method, in mirrored rounds.

Why rounds, and mirrored: on the 2-core VM an app's plain time varies by a third from run
to run, and the run right after another pays for the pages that one freed (BabelStream at
400 MiB: the project run right after a plain one took 8.5-9.2 s, the others 6.2-8.1 s).
One run per method (benchmarks/first_projection.py) cannot tell a 1.8x from a 2.2x. Each
round runs plain, each method in order, each method in reverse order, and plain again
(A B C C B A), so every method sits as often right after plain as right before it. Every
project run starts from an empty projection cache with the device profile cached (one
warm-up run first), as ``clproj run --mode project`` runs for a user without ``--record``:
the records are the run's own. A run counts only if the app exits 0 and every recorded
launch is projected.

Apps: BabelStream (../shared/validation/babelstream) at 400 MiB arrays and 2 iterations,
the shortest run it allows, and ``--app NAME=FOLDER`` (repeatable): ``FOLDER/app`` run in
FOLDER (PolyBench-ACC's bicg at LARGE, as benchmarks/results/first_projection.md names
it). Methods: those of benchmarks/first_projection.py.

    POCL_DEVICES=pthread python -m clproj.benchmarks.project_overhead [--rounds 4] \\
        [--methods live,live-no-release] [--app NAME=FOLDER] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from clproj.benchmarks.first_projection import ALL_METHODS, build_babelstream, timed
from clproj.console import publish
from clproj.runtime.evaluation.validate_suite import parse_run_output

TARGET_RATIO = 2.0


def project_run(app: list[str], cwd: str, env: dict[str, str], cache: str, method: str) -> dict:
    """One ``clproj run --mode project`` of ``app``, its projection cache emptied first."""
    shutil.rmtree(os.path.join(cache, "projections"), ignore_errors=True)
    env = dict(env, CLPROJ_CACHE=cache, **ALL_METHODS[method])
    cmd = [sys.executable, "-m", "clproj.cli", "run", "--mode", "project"]
    cmd += ["--devices", "measured", "--json", "--", *app]
    wall, out, rc = timed(cmd, cwd, env)
    try:
        doc = parse_run_output(out)
    except ValueError:
        doc = {}
    docs = doc.get("projections") or []
    return {
        "wall_s": wall,
        "rc": rc,
        "launches": len(docs),
        "projected": sum(1 for d in docs if d.get("projections")),
        "dropped": sum(len(d.get("dropped_snapshots") or []) for d in docs),
    }


def rounds(
    name: str, app: list[str], cwd: str, methods: list[str], n: int, work: str
) -> dict[str, Any]:
    """``n`` mirrored rounds of one app: plain, methods, methods reversed, plain."""
    env = dict(os.environ)
    cache = tempfile.mkdtemp(prefix="cache-", dir=work)
    project_run(app, cwd, env, cache, methods[0])  # the device profile, measured once
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in ["plain", *methods]}
    for r in range(n):
        for step in ["plain", *methods, *reversed(methods), "plain"]:
            if step == "plain":
                wall, _, rc = timed(app, cwd, env)
                runs[step].append({"wall_s": wall, "rc": rc})
            else:
                runs[step].append(project_run(app, cwd, env, cache, step))
        walls = ", ".join(f"{m} {runs[m][-1]['wall_s']:.2f}" for m in runs)
        sys.stderr.write(f"{name}, round {r + 1}/{n}: {walls} s\n")
    shutil.rmtree(cache, ignore_errors=True)
    return {"app": name, "runs": runs}


def valid(run: dict[str, Any]) -> bool:
    return run["rc"] == 0 and ("launches" not in run or run["projected"] == run["launches"] > 0)


def report(rows: list[dict[str, Any]], methods: list[str], argv: list[str], n: int) -> str:
    load = os.getloadavg()
    lines = [
        "## Project mode's cost to an app's first run (mirrored rounds)",
        "",
        f"`POCL_DEVICES={os.environ.get('POCL_DEVICES', '')} python -m "
        f"clproj.benchmarks.project_overhead {shlex.join(argv)}` ({os.cpu_count()} cores, "
        f"load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        f"{n} rounds of plain, {', '.join(methods)}, the same reversed, plain; each project "
        "run from an empty projection cache, the device profile cached. Methods: "
        "benchmarks/first_projection.py. Ratio: median project wall time over median plain "
        f"wall time; target <= {TARGET_RATIO:g}x.",
        "",
        "| app | plain, median (range) s | "
        + " | ".join(f"{m}, median (range) s | {m} / plain" for m in methods)
        + " | snapshots dropped per run |",
        "|---|---|" + "---|---|" * len(methods) + "---|",
    ]
    for row in rows:
        cells = []
        plain = [r["wall_s"] for r in row["runs"]["plain"] if valid(r)]
        pm = statistics.median(plain) if plain else None
        cells.append(_span(plain))
        for m in methods:
            got = [r["wall_s"] for r in row["runs"][m] if valid(r)]
            bad = len(row["runs"][m]) - len(got)
            cell = _span(got) + (f", {bad} failed" if bad else "")
            ratio = statistics.median(got) / pm if got and pm else None
            verdict = "" if ratio is None else (" (met)" if ratio <= TARGET_RATIO else " (not met)")
            cells += [cell, "-" if ratio is None else f"{ratio:.2f}x{verdict}"]
        dropped = {m: sorted({r.get("dropped", 0) for r in row["runs"][m]}) for m in methods}
        cells.append("; ".join(f"{m}: {'/'.join(map(str, d))}" for m, d in dropped.items()))
        lines.append(f"| {row['app']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _span(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument(
        "--methods", default="live,live-no-release", help=f"of {', '.join(ALL_METHODS)}"
    )
    ap.add_argument("--app", action="append", default=[], metavar="NAME=FOLDER")
    ap.add_argument("--no-babelstream", action="store_true", help="only the --app apps")
    ap.add_argument("--out", help="also write the report (Markdown) here")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    methods = args.methods.split(",")
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown or args.rounds < 1:
        ap.error(f"unknown method {unknown[0]}" if unknown else "--rounds must be at least 1")
    extra = [tuple(a.split("=", 1)) for a in args.app]
    for a, e in zip(args.app, extra, strict=True):
        if len(e) != 2 or not os.path.isfile(os.path.join(e[1], "app")):
            ap.error(f"--app {a}: give NAME=FOLDER, a folder holding an executable named app")
    rows = []
    with tempfile.TemporaryDirectory(prefix="clproj-overhead-") as work:
        if not args.no_babelstream:
            exe = build_babelstream(work)
            app = [exe, "-s", "52428800", "-n", "2"]
            rows.append(rounds("BabelStream 400 MiB arrays", app, work, methods, args.rounds, work))
        for name, folder in extra:
            folder = os.path.abspath(folder)
            rows.append(rounds(name, ["./app"], folder, methods, args.rounds, work))
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return 0
    publish(report(rows, methods, argv, args.rounds), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
