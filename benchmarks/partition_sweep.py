"""Partition sweep: measured split time for ratios 0..100 % beside the advisor's ratio.

For each benchmark app (one launch each) and each device pair, the launch is split between
the two devices with 0, 5, ..., 100 % of the slabs on the first (faster) device, run
concurrently with :class:`runtime.partition_exec.SplitRunner` (wall time including buffer
uploads and downloads, best of ``--repeat`` after one warm-up), and compared with the
advised split (:func:`runtime.advisor.advise`, run at its exact slab counts).

Device pairs (each measured in its own process, PoCL reads its settings at start-up):

* ``pthread+basic``: PoCL ``pthread`` (2 threads) and ``basic`` (1 thread) on this 2-core
  host: different speeds, but they share the two cores.
* ``pthread1+basic``: ``pthread`` limited to one thread (``POCL_MAX_PTHREAD_COUNT=1``) and
  ``basic``: two one-core devices, so a split can use both cores.

Writes benchmarks/results/partition_sweep.md, .png and .json.
Run: ``.venv/bin/python -m benchmarks.partition_sweep [--apps a,b] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
# Sizes chosen so one split run takes 10-500 ms here (the sweep runs each ratio 4 times).
APPS: dict[str, Any] = {
    "vecadd": 1 << 22,
    "blackscholes": 1 << 20,
    "matmul_gmem": 512,
    "nbody": 8192,
    "convolution2d": (1024, 1024),
    "special_functions": 1 << 17,
}
PAIRS = {
    "pthread+basic": {"POCL_DEVICES": "pthread basic"},
    "pthread1+basic": {"POCL_DEVICES": "pthread basic", "POCL_MAX_PTHREAD_COUNT": "1"},
}
RATIOS = [i * 5 for i in range(21)]


def _devices() -> list[Any]:
    """[pthread, basic] pyopencl devices."""
    from devices.discovery import opencl_devices

    by = {}
    for d in opencl_devices():
        by[d.name.strip().split("-")[0]] = d
    return [by["pthread"], by["basic"]]


def _record(app_name: str, size: Any, device: Any) -> Any:
    import pyopencl as cl

    from benchmarks.apps import get_app
    from runtime.app_records import launch_groups

    plan = get_app(app_name).plan(size)
    queue = cl.CommandQueue(cl.Context([device]), device)
    return launch_groups(plan, queue)[0].record


def sweep_pair(pair: str, apps: list[str], repeat: int) -> list[dict[str, Any]]:
    """Measure every app on the current process's device pair."""
    from runtime import advisor
    from runtime.partition_exec import SplitRunner, compare

    devs = _devices()
    profs = [advisor.profile_for_live_device(d) for d in devs]
    rows = []
    for name in apps:
        rec = _record(name, APPS[name], devs[0])
        t0 = time.perf_counter()
        adv = advisor.advise(rec, profs)
        advise_s = time.perf_counter() - t0
        row: dict[str, Any] = {
            "pair": pair,
            "app": name,
            "size": APPS[name],
            "devices": [p.key for p in profs],
            "advise_s": advise_s,
            "safe": adv.safety.ok,
            "reason": adv.safety.reason,
            "explanation": adv.explanation,
            "projected_single_s": adv.single_s,
        }
        if not adv.safety.ok:
            rows.append(row)
            continue
        slabs = adv.safety.slabs
        runner = SplitRunner(rec, adv.safety, adv.upload_args, devs)
        sweep = []
        ref_out = None
        for r in RATIOS:
            n0 = round(r / 100 * slabs)
            res = runner.timed([n0, slabs - n0], repeat=repeat, warmup=1)
            if n0 == slabs:
                ref_out = res.outputs
            sweep.append({"ratio": r, "counts": [n0, slabs - n0], "time_s": min(res.walls_s)})
        advised = runner.timed(adv.slab_counts, repeat=repeat, warmup=1)
        matches, identical, diff = compare(advised.outputs, ref_out)
        best = min(sweep, key=lambda s: s["time_s"])
        singles = {"first": sweep[-1]["time_s"], "second": sweep[0]["time_s"]}
        best_single = min(singles.values())
        adv_t = min(advised.walls_s)
        row.update(
            {
                "slabs": slabs,
                "advised_counts": adv.slab_counts,
                "advised_ratio": 100 * adv.slab_counts[0] / slabs,
                "advised_time_s": adv_t,
                "projected_split_s": adv.split_s,
                "recommend_split": adv.split,
                "sweep": sweep,
                "best_ratio": best["ratio"],
                "best_time_s": best["time_s"],
                "single_first_s": singles["first"],
                "single_second_s": singles["second"],
                "advised_vs_best": adv_t / best["time_s"] - 1,
                "split_gain_best": best_single / best["time_s"],
                "split_gain_advised": best_single / adv_t,
                "recommended_time_s": adv_t
                if adv.split
                else (singles["first"] if adv.best_single == profs[0].key else singles["second"]),
                "matches": matches,
                "identical": identical,
                "max_rel_diff": diff,
            }
        )
        rows.append(row)
        print(
            f"{pair} {name}: advised {row['advised_ratio']:.0f}% {adv_t * 1e3:.1f} ms, best "
            f"{best['ratio']}% {best['time_s'] * 1e3:.1f} ms, singles "
            f"{singles['first'] * 1e3:.1f}/{singles['second'] * 1e3:.1f} ms",
            file=sys.stderr,
        )
    return rows


def write_report(rows: list[dict[str, Any]], path_md: str, path_png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = [
        "# Partition sweep: measured split time vs the advised ratio",
        "",
        "Generated by `benchmarks/partition_sweep.py` on this 2-core host (PoCL 3.1). Ratio = "
        "share of the NDRange's slabs on the first device. Times: host wall clock of the "
        "whole split (buffer creation, uploads, concurrent kernels, downloads of each share's "
        "written region), best of the repeats after a warm-up. `advised vs best` = advised "
        "time / best swept time - 1; `gain` = best single device / time. The machine is "
        "shared with other work, so single points can be noisy.",
        "",
        "| pair | app | slabs | advised ratio | advised time | best ratio | best time | "
        "advised vs best | first alone | second alone | gain (best split) | gain (advised) | "
        "advisor says | outputs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r["safe"]:
            lines.append(
                f"| {r['pair']} | {r['app']} | - | refused | | | | | | | | | {r['reason']} | |"
            )
            continue
        ms = lambda t: f"{t * 1e3:.1f} ms"  # noqa: E731
        lines.append(
            f"| {r['pair']} | {r['app']} | {r['slabs']} | {r['advised_ratio']:.1f}% | "
            f"{ms(r['advised_time_s'])} | {r['best_ratio']}% | {ms(r['best_time_s'])} | "
            f"{r['advised_vs_best']:+.1%} | {ms(r['single_first_s'])} | "
            f"{ms(r['single_second_s'])} | {r['split_gain_best']:.2f}x | "
            f"{r['split_gain_advised']:.2f}x | "
            f"{'split' if r['recommend_split'] else 'single'} | "
            f"{'identical' if r['identical'] else ('match' if r['matches'] else 'MISMATCH')} |"
        )
    ok = [r for r in rows if r["safe"]]
    for pair in PAIRS:
        sub = [r for r in ok if r["pair"] == pair]
        if sub:
            within = sum(1 for r in sub if r["advised_vs_best"] <= 0.10)
            lines.append("")
            lines.append(
                f"**{pair}**: advised split within 10% of the best swept ratio for {within} of "
                f"{len(sub)} kernels."
            )
    lines += ["", "Device keys and advisor explanations:", ""]
    for r in rows:
        lines.append(f"- {r['pair']} / {r['app']} ({', '.join(r['devices'])}): {r['explanation']}")
    lines += ["", "![sweep](partition_sweep.png)", ""]
    with open(path_md, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines))

    n = len(ok)
    cols = min(4, max(1, n))
    nrows = max(1, -(-n // cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3.2 * nrows), squeeze=False)
    for ax, r in zip(axes.flat, ok, strict=False):
        xs = [s["ratio"] for s in r["sweep"]]
        ys = [s["time_s"] * 1e3 for s in r["sweep"]]
        ax.plot(xs, ys, "o-", ms=3, label="measured")
        ax.axvline(r["advised_ratio"], color="tab:red", ls="--", label="advised")
        ax.plot([r["advised_ratio"]], [r["advised_time_s"] * 1e3], "r*", ms=10)
        ax.set_title(f"{r['app']} ({r['pair']})", fontsize=9)
        ax.set_xlabel(f"% of slabs on {r['devices'][0]}", fontsize=7)
        ax.set_ylabel("wall ms", fontsize=8)
        ax.set_ylim(bottom=0)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path_png, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--apps", default=",".join(APPS))
    ap.add_argument("--pairs", default=",".join(PAIRS))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args(argv)
    apps = [a for a in args.apps.split(",") if a]
    if args.worker:
        rows = sweep_pair(args.worker, apps, args.repeat)
        json.dump(rows, sys.stdout)
        return 0
    rows = []
    for pair in args.pairs.split(","):
        env = {**os.environ, **PAIRS[pair]}
        if "POCL_MAX_PTHREAD_COUNT" not in PAIRS[pair]:
            env.pop("POCL_MAX_PTHREAD_COUNT", None)
        cmd = [sys.executable, "-m", "benchmarks.partition_sweep", "--worker", pair]
        cmd += ["--apps", ",".join(apps), "--repeat", str(args.repeat)]
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, check=True)
        rows += json.loads(proc.stdout)
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, "partition_sweep")
    with open(base + ".json", "w", encoding="utf-8") as fh:
        json.dump(rows, fh, indent=1)
    write_report(rows, base + ".md", base + ".png")
    print(f"wrote {base}.md, .png, .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
