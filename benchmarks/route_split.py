"""Route mode with ``--split`` vs without, on an unmodified app, two PoCL devices.

For each device pair and kernel, four configurations of the same ordinary pyopencl app
(benchmarks/route_split_app.py: WARMUP untimed launches, then ITERS timed launches and one
finish) run side by side in interleaved rounds (fresh random order per round):

* ``plain dev0`` / ``plain dev1``: the app alone on each device (no shim): which single
  device is best, and what it costs without route mode;
* ``route``: ``clproj run --mode route`` (embedded broker + local node; placement by the
  projection, nothing split);
* ``route --split``: the same with ``--split`` (``CLPROJ_SPLIT_WAIT_S`` lets the first
  launch wait for the decision, so every timed launch runs as decided).

Time = the app's own wall clock over the timed launches (route start-up, emulations and
the split decision fall in the untimed part); medians over the rounds. Outputs are
compared by sha256 (bit-identical or not). Device pairs, each a PoCL setting of all the
processes of its configurations:

* ``pthread+basic``: PoCL ``pthread`` (2 threads) and ``basic`` (1 thread) on this 2-core
  host: different speeds, sharing the two cores;
* ``pthread1+basic``: ``pthread`` limited to one thread and ``basic``: two one-core devices.

Writes benchmarks/results/route_split.md and .json.
Run: ``.venv/bin/python -m clproj.benchmarks.route_split [--kernels a,b] [--pairs p,q] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "benchmarks", "results")
APP = os.path.join(REPO, "benchmarks", "route_split_app.py")
# kernel -> (warm-up launches, timed launches). The warm-up covers PoCL's compile at the
# first enqueue, route mode's split decision and the split's measured check (3 split + 2
# whole launches, each waited for): the timed launches show the steady state
KERNELS = {
    "scramble": (6, 6),
    "matmul_gmem": (6, 8),
    "convolve2d": (6, 8),
    "vecadd": (6, 20),
}
PAIRS = {
    "pthread+basic": {"POCL_DEVICES": "pthread basic"},
    "pthread1+basic": {"POCL_DEVICES": "pthread basic", "POCL_MAX_PTHREAD_COUNT": "1"},
}
# "route --split": as shipped, with the measured check (runtime.partition.route_policy); "projection
# only": CLPROJ_SPLIT_CHECK=0, the split as the cold projection decided it
CONFIGS = ["plain dev0", "plain dev1", "route", "route --split", "route --split, projection only"]


def _env(pair: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYOPENCL_CTX")}
    env.pop("POCL_MAX_PTHREAD_COUNT", None)
    env.update(PAIRS[pair])
    env["PYOPENCL_NO_CACHE"] = "1"
    env["PYTHONPATH"] = REPO
    return env


def run_one(pair: str, kernel: str, config: str) -> dict[str, Any]:
    """One run of the app in ``config``: its JSON line, plus the route summary if any."""
    warm, iters = KERNELS[kernel]
    env = _env(pair)
    app = [sys.executable, APP, kernel, str(warm), str(iters)]
    if config.startswith("plain"):
        env["PYOPENCL_CTX"] = f"0:{config[-1]}"
        cmd = app
    else:
        env["PYOPENCL_CTX"] = "0"
        cmd = [sys.executable, "-m", "clproj.cli", "run", "--mode", "route", "--json"]
        if "--split" in config:
            cmd.append("--split")
            env["CLPROJ_SPLIT_WAIT_S"] = "120"
            if config.endswith("projection only"):
                env["CLPROJ_SPLIT_CHECK"] = "0"
        cmd += ["--", *app]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"{pair} {kernel} {config} failed: {proc.stderr[-2000:]}")
    # under `clproj run --json` the app's stdout goes to stderr, the summary alone to stdout
    lines = (proc.stdout if config.startswith("plain") else proc.stderr).splitlines()
    result = json.loads(next(ln for ln in lines if ln.startswith('{"kernel"')))
    if not config.startswith("plain"):
        summary = json.loads(proc.stdout)
        result["devices"] = sorted({r["device"] for r in summary["kernels"]})
        result["splits"] = summary.get("splits", [])
    return result


def measure(pair: str, kernel: str, rounds: int) -> dict[str, Any]:
    rng = random.Random(hash((pair, kernel)) & 0xFFFF)
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CONFIGS}
    load0 = os.getloadavg()[0]
    for _ in range(rounds):
        order = list(CONFIGS)
        rng.shuffle(order)
        for c in order:
            runs[c].append(run_one(pair, kernel, c))
    med = {c: statistics.median(r["wall_s"] for r in rs) for c, rs in runs.items()}
    hashes = {c: sorted({r["sha256"] for r in rs}) for c, rs in runs.items()}
    split = runs["route --split"][-1]
    # the last word on the kernel: a split the measured check revoked is listed twice
    decision = next((d for d in reversed(split.get("splits", [])) if d["kernel"] == kernel), None)
    cold = runs["route --split, projection only"][-1]
    cold_decision = next(
        (d for d in reversed(cold.get("splits", [])) if d["kernel"] == kernel), None
    )
    best_plain = min(("plain dev0", "plain dev1"), key=lambda c: med[c])
    return {
        "plain_devices": [runs[f"plain dev{i}"][0]["device"] for i in (0, 1)],
        "pair": pair,
        "kernel": kernel,
        "iters": KERNELS[kernel][1],
        "median_s": med,
        "walls_s": {c: [r["wall_s"] for r in rs] for c, rs in runs.items()},
        "hashes": hashes,
        "identical": len({h for hs in hashes.values() for h in hs}) == 1,
        "route_devices": runs["route"][-1].get("devices"),
        "split_devices": split.get("devices"),
        "decision": decision,
        "projection_decision": cold_decision,
        "projection_split_vs_route": med["route"] / med["route --split, projection only"],
        "best_plain": best_plain,
        "split_vs_route": med["route"] / med["route --split"],
        "split_vs_best_plain": med[best_plain] / med["route --split"],
        "load_start": load0,
        "load_end": os.getloadavg()[0],
    }


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f} ms"


def write(rows: list[dict[str, Any]], rounds: int) -> str:
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "route_split.json"), "w", encoding="utf-8") as fh:
        json.dump(rows, fh, indent=1)
    loads = [r["load_start"] for r in rows] + [r["load_end"] for r in rows]
    out = [
        "# Route mode: `--split` vs unsplit on an unmodified app",
        "",
        f"Generated by `.venv/bin/python -m clproj.benchmarks.route_split --rounds {rounds}` on this "
        f"2-core host (PoCL, no GPU), {datetime.date.today()}. 1-min load average "
        f"{min(loads):.2f}-{max(loads):.2f} during the run (per kernel in the .json).",
        "",
        "App: benchmarks/route_split_app.py (plain pyopencl; warm-up launches untimed, then "
        "the timed launches and one finish; host wall clock inside the app). Configurations "
        "run in interleaved rounds, fresh random order per round; medians. `plain devN`: the "
        "app alone on PoCL device N (driver named in the cell), no shim. `route`: `clproj run "
        "--mode route` (placement by projection). `route --split`: the same with `--split` "
        "as shipped, i.e. with the measured check (a split key's first 3 split and 2 whole "
        "launches timed, the split kept only if 5% faster); `projection only`: "
        "`CLPROJ_SPLIT_CHECK=0`, the split as the cold projection decided it. Ratios > 1 "
        "mean the split is faster. `identical`: every run of every configuration produced "
        "the same output bytes.",
        "",
        "| pair | kernel | launches | plain dev0 | plain dev1 | route (device) | route --split "
        "| split vs route | split vs best plain | projection only (vs route) | identical "
        "| decision (as shipped) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        m = r["median_s"]
        d = r["decision"] or {}
        if d.get("split"):
            what = "split " + ", ".join(f"{k} {v:.0%}" for k, v in d["fractions"].items())
            what += f" (projected {d['gain']:.2f}x)"
        else:
            what = d.get("reason", "no decision")
        route_dev = ", ".join(
            " ".join(x.split()[:2]).split("-")[0] for x in r["route_devices"] or []
        )
        names = [n.split("-")[0] for n in r["plain_devices"]]
        out.append(
            f"| {r['pair']} | {r['kernel']} | {r['iters']} | {_ms(m['plain dev0'])} ({names[0]}) | "
            f"{_ms(m['plain dev1'])} ({names[1]}) | {_ms(m['route'])} ({route_dev}) | "
            f"{_ms(m['route --split'])} | {r['split_vs_route']:.2f}x | "
            f"{r['split_vs_best_plain']:.2f}x | {_ms(m['route --split, projection only'])} "
            f"({r['projection_split_vs_route']:.2f}x) | {'yes' if r['identical'] else 'NO'} | "
            f"{what} |"
        )
    out += [
        "",
        "Per-run walls (seconds, in round order) are in benchmarks/results/route_split.json.",
        "",
    ]
    text = "\n".join(out)
    with open(os.path.join(RESULTS, "route_split.md"), "w", encoding="utf-8") as fh:
        fh.write(text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m clproj.benchmarks.route_split", description=__doc__
    )
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--pairs", default=",".join(PAIRS))
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    rows = []
    for pair in args.pairs.split(","):
        for kernel in args.kernels.split(","):
            row = measure(pair, kernel, args.rounds)
            print(
                f"{pair} {kernel}: "
                + ", ".join(f"{c} {_ms(s)}" for c, s in row["median_s"].items())
                + f"; split vs route {row['split_vs_route']:.2f}x",
                flush=True,
            )
            rows.append(row)
    print(write(rows, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
