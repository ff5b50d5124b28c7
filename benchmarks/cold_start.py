"""How accurate clproj is, out of the box, for a CPU nobody committed a profile for (not a
timed test).

Why: the committed measured profiles describe the machines this project was developed on.
A user's CPU matches none of them: its profile is the one a first ``clproj run`` measures
(the quick microbenchmarks, cached). This runs, on this machine's OpenCL device 0, what
such a user would run, each step a clproj command:

1. ``clproj devices --profiles`` with an empty ``CLPROJ_CACHE`` and
   ``CLPROJ_FOREIGN_MACHINE=1``: the cold-start profile (quick mode);
2. ``clproj bench --devices 0``: our apps' measured device times on it (ground truth);
3. ``clproj evaluate --results <that> <the committed results>``: every app projected onto
   this device and the committed ones with the committed kernel profiles, against
   measurement: per device median projected/measured, share within 0.8-1.25x, MAPE,
   worst, and over all devices the best-device choices and relative error.

``--full`` also measures a full-mode profile (``clproj profile-device``), puts it where
the cold-start one was cached and evaluates again: what the quick microbenchmarks cost in
accuracy, side by side on the same measured times.

    POCL_DEVICES=pthread .venv/bin/python -m clproj.benchmarks.cold_start [--repeat 3] [--full]

Writes benchmarks/results/cold_start.md (the commands, the device, the tables) and keeps
the bench results and profiles beside it in benchmarks/results/cold-start/.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CLPROJ = [sys.executable, "-m", "clproj.cli"]
OUT = REPO / "benchmarks" / "results" / "cold-start"
REPORT = REPO / "benchmarks" / "results" / "cold_start.md"


def clproj(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """One clproj command; a failure stops the benchmark with its own message."""
    out = subprocess.run([*CLPROJ, *args], cwd=REPO, env=env, capture_output=True, text=True)
    if out.returncode not in (0, 1):  # bench exits 1 when an app failed verification
        sys.exit(f"clproj {' '.join(args)} failed ({out.returncode}): {out.stderr.strip()}")
    return out


def committed_results() -> list[str]:
    return sorted(glob.glob(str(REPO / "benchmarks" / "results" / "bench-*-paper.json")))


def device_scores(doc: dict[str, Any], key: str) -> dict[str, Any]:
    """Ratio metrics of one device in an ``evaluate --json`` document."""
    ratios = {
        a["app"]: a["projected_s"][key] / a["actual_s"][key]
        for a in doc["apps"]
        if a["actual_s"].get(key) and a["projected_s"].get(key)
    }
    off = {app: max(r, 1 / r) for app, r in ratios.items()}
    worst_app = max(off, key=lambda app: off[app])
    return {
        "apps": len(ratios),
        "median": statistics.median(ratios.values()),
        "within_25": sum(1 for r in ratios.values() if 0.8 <= r <= 1.25),
        "within_2x": sum(1 for r in ratios.values() if 0.5 <= r <= 2.0),
        "mape": 100 * statistics.mean(abs(r - 1) for r in ratios.values()),
        "worst": off[worst_app],
        "worst_app": worst_app,
    }


def evaluate(results: list[str], env: dict[str, str]) -> dict[str, Any]:
    out = clproj("evaluate", "--json", "--results", *results, env=env)
    if out.returncode != 0:
        sys.exit(f"clproj evaluate failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per app (median)")
    ap.add_argument("--full", action="store_true", help="also evaluate a full-mode profile")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.json"):
        old.unlink()
    cache = tempfile.mkdtemp(prefix="clproj-cold-")
    env = dict(os.environ, CLPROJ_CACHE=cache, CLPROJ_FOREIGN_MACHINE="1")
    try:
        t0 = time.time()
        dev = json.loads(clproj("devices", "--profiles", "--json", env=env).stdout)
        t_profile = time.time() - t0
        local = dev["local"][0]
        if local["how"] != "measured":
            sys.exit(f"device 0 was not measured cold ({local['how']}): {local['note']}")
        prof_paths = glob.glob(os.path.join(cache, "profiles", "*.json"))
        if len(prof_paths) != 1:
            sys.exit(f"expected one cold-start profile in {cache}/profiles, have {prof_paths}")
        quick_path = prof_paths[0]
        quick = json.loads(Path(quick_path).read_text())
        name = quick["identity"]["name"]
        shutil.copy(quick_path, OUT / "profile-quick.json")

        t0 = time.time()
        clproj(
            "bench",
            "--devices",
            "0",
            "--repeat",
            str(args.repeat),
            "-o",
            str(OUT / "bench-{key}-paper.json"),
            env=env,
        )
        t_bench = time.time() - t0
        mine = sorted(glob.glob(str(OUT / "bench-*-paper.json")))
        # The committed results first: a committed device keeps its key, and this CPU's
        # (which may share it, e.g. two 2-core EPYCs) is told apart by a digest.
        results = [*committed_results(), *mine]
        runs = {"quick": evaluate(results, env)}
        if args.full:
            full_path = OUT / "profile-full.json"
            clproj("profile-device", "--device", "0", "-o", str(full_path), env=env)
            full = json.loads(full_path.read_text())
            full["identity"]["name"] = name  # the same device; the cache file is checked by name
            Path(quick_path).write_text(json.dumps(full))
            runs["full"] = evaluate(results, env)
    finally:
        shutil.rmtree(cache, ignore_errors=True)

    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Accuracy out of the box on a CPU nobody profiled",
        "",
        f"Run {date} on `{name}` ({quick['compute_units']} compute units, "
        f"{quick['clock_mhz']} MHz, {quick['identity'].get('driver')}), device 0 of this machine, "
        "with no committed profile matching it. Command:",
        "",
        "```",
        "POCL_DEVICES=pthread .venv/bin/python -m clproj.benchmarks.cold_start"
        + (f" --repeat {args.repeat}" if args.repeat != 3 else "")
        + (" --full" if args.full else ""),
        "```",
        "",
        f"Cold-start profile (quick microbenchmarks): {t_profile:.0f} s; our apps measured "
        f"(`clproj bench`, median of {args.repeat}): {t_bench:.0f} s. Bench results and "
        "profiles: `benchmarks/results/cold-start/`.",
        "",
        "| profile | device | apps | median proj/meas | within 0.8-1.25x | within 0.5-2x "
        "| MAPE | worst |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode, doc in runs.items():
        for key in doc["devices"]:
            s = device_scores(doc, key)
            label = f"**{key}** (this CPU)" if doc["device_names"][key] == name else key
            lines.append(
                f"| {mode} | {label} | {s['apps']} | {s['median']:.2f} | {s['within_25']} "
                f"| {s['within_2x']} | {s['mape']:.1f}% | {s['worst']:.2f}x {s['worst_app']} |"
            )
    lines += [
        "",
        "| profile | best device chosen | mean relative error | devices |",
        "|---|---|---|---|",
    ]
    for mode, doc in runs.items():
        s = doc["summary"]
        lines.append(
            f"| {mode} | {s['best_chosen']}/{s['apps']} | {100 * s['mean_relative_error']:.1f}% "
            f"| {len(doc['devices'])} |"
        )
    if local["note"]:
        lines += ["", f"Note from the cold-start measurement: {local['note']}"]
    REPORT.write_text("\n".join(lines) + "\n")
    (OUT / "evaluate.json").write_text(json.dumps(runs, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
