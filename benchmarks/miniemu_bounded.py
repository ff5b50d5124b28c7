"""Bounded mini-emulation benchmark -> benchmarks/results/miniemu_bounded.md.

1. Agreement: bounded vs unbounded single-group emulation (instructions, global
   transactions summed over warp widths and segments), with the wall time of each.
2. Heavy kernels (10^6 iterations per work-item) at their default size: bounded profile
   time, method and confidence.
3. Launch reuse: every launch of lu_factor (default n=1024) through miniemu.reuse:
   emulations, reuses, drift checks, and the error of reused profiles vs direct emulation.

4. Project mode (``--project [--repeats N]``): lu_factor default under
   ``clproj run --mode project`` vs its plain run, interleaved, medians; snapshots,
   emulations (in the app / after it), reuses, post-run time; accuracy of reused launches
   (profile and projection) against direct emulation. Appended to the results file as a
   dated section.
5. Determinism (``--determinism [--before REV] [--repeats N]``): the same heavy launch
   records (heavy apps, nbody, and PolyBench gemver's matrix-vector kernels when the
   validation suite is there) emulated in bounded mode ``N`` times on the machine as it
   is and ``N`` times beside two busy loops, by the code at ``REV`` (checked out and its
   plugin built in a temporary folder) and by this tree, interleaved: distinct profiles
   (digest of every counter of ``total``), spread of the key counters, projected H100
   time, and the emulation cost (wall and CPU seconds of the emulating process and its
   workers) side by side. Appended to the results file as a dated section.

``python -m clproj.benchmarks.miniemu_bounded [--quick] [--project [--repeats N]]
[--determinism [--before REV] [--repeats N] [--polybench DIR]]``
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from clproj import miniemu
from clproj.benchmarks.apps import get_app
from clproj.benchmarks.miniemu_determinism import BEFORE_REV, REPO, determinism
from clproj.intercept.record import LocalArg, from_arrays
from clproj.miniemu.counters import key_metrics
from clproj.miniemu.reuse import ReuseCache

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
    return int(key_metrics(stats)["transactions"])


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
        si, bi = key_metrics(s.total)["instructions"], key_metrics(b.total)["instructions"]
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
            f"| {rec.kernel} | {plan.size} | {tb:.2f} | {e['method']} | {e['confidence']} | {e['emulator_runs']} | {key_metrics(b.total)['instructions']:.4g} |"
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
    n_l = len(plan.launches)
    for i in sorted({2, n_l // 2, int(n_l * 0.97), int(n_l * 0.99), n_l - 3, n_l - 4}):
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
                rel(key_metrics(p.total)["instructions"], key_metrics(d.total)["instructions"]),
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


def _loadavg() -> float:
    return os.getloadavg()[0]


def _timed(cmd: list[str], env: dict[str, str], tmp: str) -> tuple[float, float, float, str, str]:
    """(app wall and app CPU (user+sys, children included) from /usr/bin/time, wall of
    the whole command, stdout, stderr)."""
    out = os.path.join(tmp, "app_wall")
    start = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    total = time.perf_counter() - start
    if p.returncode != 0 or "PASS" not in p.stdout + p.stderr:
        raise RuntimeError(f"{cmd} failed: {p.stderr[-2000:]}")
    with open(out, encoding="utf-8") as fh:
        wall, user, system = map(float, fh.read().split()[-3:])
    return wall, user + system, total, p.stdout, p.stderr


def project_mode(repeats: int, size: str = "default") -> list[str]:
    """lu_factor plain vs ``clproj run --mode project``, interleaved (see the docstring)."""
    app_cmd = [sys.executable, "-m", "clproj.benchmarks.apps", "lu_factor", "--size", size]
    rows, last = [], None
    loads = [_loadavg()]
    for rep in range(repeats):
        with tempfile.TemporaryDirectory(prefix="clproj-bench-") as tmp:
            env = dict(os.environ, POCL_DEVICES="pthread", CLPROJ_CACHE=os.path.join(tmp, "c"))
            env.pop("CLPROJ_EMULATION_MODE", None)  # the default of project mode
            timer = ["/usr/bin/time", "-f", "%e %U %S", "-o", os.path.join(tmp, "app_wall")]
            plain, plain_cpu, _, _, _ = _timed([*timer, *app_cmd], env, tmp)
            rec = os.path.join(tmp, "rec")
            cli = [sys.executable, "-m", "clproj.cli", "run", "--mode", "project", "--json"]
            app, app_cpu, total, out, err = _timed(
                [*cli, "--record", rec, "--", *timer, *app_cmd], env, tmp
            )
            doc = json.loads(out[out.index("{") :])
            summary = re.search(
                r"(\d+)/(\d+) launches projected; (\d+) snapshotted and emulated "
                r"\((\d+) (?:in the app|while the app ran), (\d+) after it\), (\d+) reused; post-run ([\d.]+) s",
                err,
            )
            if summary is None:
                raise RuntimeError(f"no summary line in: {err[-2000:]}")
            projected, launches, snaps, in_app, after, reused = map(int, summary.groups()[:6])
            rows.append(
                {
                    "plain": plain,
                    "project": app,
                    "plain_cpu": plain_cpu,
                    "project_cpu": app_cpu,
                    "total": total,
                    "post": float(summary.group(7)),
                    "projected": projected,
                    "launches": launches,
                    "snapshots": snaps,
                    "in_app": in_app,
                    "after": after,
                    "reused": reused,
                    "records": len(os.listdir(os.path.join(rec, "records"))),
                }
            )
            loads.append(_loadavg())
            print(rows[-1], f"load {loads[-1]:.2f}", flush=True)
            if rep == repeats - 1:
                last = _reuse_accuracy(doc, rec, size)
    keys = ("plain", "project", "plain_cpu", "project_cpu", "total", "post")
    med = {k: statistics.median(r[k] for r in rows) for k in keys}
    out = [
        f"`python -m clproj.benchmarks.miniemu_bounded --project --repeats {repeats}`: "
        f"`python -m clproj.benchmarks.apps lu_factor --size {size}` (PoCL pthread, "
        "`POCL_DEVICES=pthread`) alone, then under `clproj run --mode project --json --record "
        "DIR` (default emulation mode: bounded; cold projection cache), interleaved. App wall "
        "= `/usr/bin/time` of the app process (its exit, which drains the record writer, "
        "included); app CPU = its user+sys time, children (in-app emulations) included, "
        "less sensitive to the other jobs than wall time; clproj total = the whole `clproj run`, post-run = `complete_run` "
        f"(emulations the app did not finish, reused launches). 1-min load average "
        f"{min(loads):.2f}-{max(loads):.2f} (other jobs share the 2 cores).",
        "",
        "| run | plain app s | project app s | ratio | app CPU s plain / project | clproj total s | post-run s | launches projected | snapshots (record files) | emulated in app / after | reused |",
        "|" + "---|" * 11,
    ]
    for i, r in enumerate(rows):
        out.append(
            f"| {i + 1} | {r['plain']:.2f} | {r['project']:.2f} | {r['project'] / r['plain']:.2f}x | "
            f"{r['plain_cpu']:.2f} / {r['project_cpu']:.2f} | {r['total']:.1f} | {r['post']:.1f} | {r['projected']}/{r['launches']} | "
            f"{r['snapshots']} ({r['records']}) | {r['in_app']} / {r['after']} | {r['reused']} |"
        )
    out.append(
        f"| **median** | **{med['plain']:.2f}** | **{med['project']:.2f}** | "
        f"**{med['project'] / med['plain']:.2f}x** | {med['plain_cpu']:.2f} / {med['project_cpu']:.2f} | "
        f"{med['total']:.1f} | {med['post']:.1f} | | | | |"
    )
    ratios = sorted(r["project"] / r["plain"] for r in rows)
    out += [
        "",
        f"Median of the per-run ratios (each project run beside its own plain run): "
        f"{statistics.median(ratios):.2f}x (range {ratios[0]:.2f}-{ratios[-1]:.2f}).",
    ]
    return [*out, "", *(last or [])]


def _reuse_accuracy(doc: dict, rec_dir: str, size: str) -> list[str]:
    """Reused launches of a project-mode run vs direct emulation of the same launch.

    The run's emulated profiles (in its JSON output) are seeded into a ReuseCache as
    complete_run does, sampled reused launches are answered by it, and compared with a
    direct bounded emulation (profile key metrics) and its projection (time per device).
    LU's counts do not depend on the matrix values, so the direct records use the plan's
    input matrix.
    """
    from clproj.intercept.record import list_records, load
    from clproj.miniemu.profile import KernelProfile
    from clproj.miniemu.reuse import ReuseCache
    from clproj.runtime.projection import device_set
    from clproj.runtime.projection.live import project_record

    plan = get_app("lu_factor").plan(size)
    by_sig = {d["signature"]: d for d in doc["projections"]}
    cache = ReuseCache(mode="bounded")
    records = sorted((load(p) for p in list_records(rec_dir)), key=lambda r: r.created)
    # The program text and options as the app built them (pyopencl may add options):
    # the signatures of the direct records must match the run's.
    plan.source, plan.options = records[0].source, records[0].options
    for r in records:
        prof = by_sig.get(r.signature, {}).get("profile")
        if prof:
            cache.seed(r, KernelProfile.from_dict(prof))
    devices = device_set.resolve("local")
    n = len(plan.launches)
    shown = {int(n * f) for f in (0.001, 0.1, 0.3, 0.5, 0.7, 0.85, 0.93, 0.97, 0.99, 0.998)}
    picks = sorted(shown | {round(j * (n - 1) / 39) for j in range(40)})  # + 40 evenly spread
    lines = [
        "| launch | kernel | global size | how | instructions vs direct | transactions vs direct | global bytes vs direct | projected time vs direct (max over devices) |",
        "|" + "---|" * 8,
    ]
    time_errs: list[float] = []
    for i in picks:
        launch = plan.launches[i]
        full = record_of(plan, i)
        got = by_sig.get(full.signature, {})
        if got.get("emulation", {}).get("method") != "reused":
            i += 1  # the pick was an anchor: take its neighbour, a reused launch
            if i >= n:
                continue
            launch, full = plan.launches[i], record_of(plan, i)
            got = by_sig.get(full.signature, {})
            if got.get("emulation", {}).get("method") != "reused":
                continue
        reused = cache.scaled(full)
        direct = miniemu.emulate(full, mode="bounded")
        km_r, km_d = key_metrics(reused.total), key_metrics(direct.total)
        gb = ("global load bytes", "global store bytes")
        d_proj = project_record(full, devices, "bounded", use_cache=False, profile=direct.to_dict())
        t_run = {p["device"]: p["time_s"] for p in got.get("projections", [])}
        t_dir = {p["device"]: p["time_s"] for p in d_proj["projections"]}
        dt = max(abs(t_run[k] - t_dir[k]) / t_dir[k] for k in t_dir if k in t_run)
        time_errs.append(dt)
        errs = (
            rel(km_r["instructions"], km_d["instructions"]),
            rel(km_r["transactions"], km_d["transactions"]),
            rel(sum(km_r[k] for k in gb), sum(km_d[k] for k in gb)),
        )
        if i in shown or i - 1 in shown:
            how = "interpolated" if "interpolated_from" in reused.emulation else "scaled"
            lines.append(
                f"| {i} | {launch.kernel} | {'x'.join(map(str, launch.global_size))} | {how} | "
                f"{errs[0]:.2%} | {errs[1]:.2%} | {errs[2]:.2%} | {dt:.2%} |"
            )
            print(lines[-1], flush=True)
    within = sum(1 for e in time_errs if e <= 0.05)
    return [
        "Accuracy of reused launches (last run): the run's emulated profiles answer reused "
        "launches as `complete_run` does; compared with a direct bounded emulation of the "
        f"same launch and its projection. Over {len(time_errs)} reused launches (40 evenly "
        f"spread + those below): projected time within 5% (the drift threshold) for "
        f"{within}/{len(time_errs)}; median difference "
        f"{statistics.median(time_errs):.2%}, worst {max(time_errs):.2%}.",
        "",
        *lines,
    ]


def append_section(section: list[str]) -> None:
    """Print one section of results and add it to the end of the results file."""
    print("\n".join(section))
    with open(OUT, "a", encoding="utf-8") as fh:
        fh.write("\n" + "\n".join(section))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--project", action="store_true", help="only the project-mode section")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--determinism", action="store_true", help="only the determinism section")
    ap.add_argument("--before", default=BEFORE_REV, help="commit to compare with (determinism)")
    ap.add_argument(
        "--polybench",
        default=os.path.join(REPO, "..", "shared", "validation", "polybench"),
        help="PolyBench validation suite (determinism; skipped when missing)",
    )
    args = ap.parse_args()
    if args.determinism:
        suite = os.path.abspath(args.polybench) if os.path.isdir(args.polybench) else None
        section = [
            f"## Determinism: counted budget vs wall-clock budget ({time.strftime('%Y-%m-%d')})",
            "",
            *determinism(args.before, args.repeats, suite),
            "",
        ]
        append_section(section)
        return
    if args.project:
        section = [
            f"## Launch-heavy app under `clproj run --mode project` ({time.strftime('%Y-%m-%d')})",
            "",
            *project_mode(args.repeats),
            "",
            "### Offline reuse (`ReuseCache.profile` launch by launch, as `runtime.evaluation.app_profiles` uses it)",
            "",
            *lu_reuse(1024),
            "",
        ]
        append_section(section)
        return
    rows = AGREEMENT[:3] if args.quick else AGREEMENT
    doc = [
        "# Bounded mini-emulation (miniemu bounded mode)",
        "",
        "Generated by `python -m clproj.benchmarks.miniemu_bounded` on the 2-core dev VM (shared, loaded).",
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
