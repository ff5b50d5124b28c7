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


# ------------------------------------------------------------------ determinism

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The last commit whose bounded emulation stopped on a wall-clock budget (3 s).
BEFORE_REV = "a13f2c1"
DETERMINISM_APPS = [
    ("heavy_lcg", "default"),
    ("heavy_gather", "default"),
    ("heavy_lmem", "default"),
    ("nbody", "small"),
]
POLYBENCH_KERNELS = ("gemver_kernel2", "gemver_kernel3")

# Run in a subprocess with PYTHONPATH=<tree>: one bounded emulation, what came of it.
_EMULATE_ONE = r"""
import hashlib, json, resource, sys, time
from clproj import miniemu

from clproj.intercept.record import load
from clproj.miniemu.counters import key_metrics
from clproj.runtime.projection import device_set
from clproj.runtime.projection.model import rank, record_footprint
rec = load(sys.argv[1])
t = time.perf_counter()
p = miniemu.emulate(rec, mode="bounded")
wall = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
me = resource.getrusage(resource.RUSAGE_SELF)
em = p.emulation
h100 = [d for d in device_set.resolve("measured") if d.key.startswith("nvidia-h100")]
ranked = rank(p.to_dict(), h100, record_footprint(rec)) if h100 else []
print(json.dumps({
    "wall": wall,
    "cpu": ru.ru_utime + ru.ru_stime + me.ru_utime + me.ru_stime,
    "method": em.get("method"),
    "stop": em.get("stop_reason"),
    "budget": em.get("budget") if isinstance(em.get("budget"), str) else "-",
    "confidence": em["confidence"],
    "runs": em.get("emulator_runs"),
    "work_items": em.get("work_items_emulated"),
    "metrics": key_metrics(p.total),
    "chain": p.total.get("dependence", {}).get("chain"),
    "h100_s": ranked[0].time_s if ranked else None,
    "digest": hashlib.sha256(json.dumps(p.total, sort_keys=True).encode()).hexdigest()[:12],
}))
"""


def _checkout(rev: str, dest: str) -> str:
    """``rev`` of this repository in ``dest`` with its Oclgrind plugin built there."""
    os.makedirs(dest, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", REPO, "archive", rev], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    build = (
        "import build_plugin; build_plugin.build("
        + repr(os.path.join(dest, "miniemu", ""))
        + " + build_plugin.PLUGIN_FILENAME)"
    )
    env = dict(os.environ, PYTHONPATH=os.path.join(dest, "native"))
    subprocess.run([sys.executable, "-c", build], env=env, check=True, capture_output=True)
    return dest


def _polybench_records(suite: str, tmp: str) -> list[tuple[str, str]]:
    """Build the suite's gemver and record its matrix-vector launches with this tree."""
    out = os.path.join(tmp, "pb")
    subprocess.run(["bash", os.path.join(suite, "build.sh"), out], check=True, capture_output=True)
    rec_dir = os.path.join(tmp, "pb-records")
    env = dict(os.environ, POCL_DEVICES="pthread", PYTHONPATH=REPO)
    kernels = [a for k in POLYBENCH_KERNELS for a in ("--kernel", k)]
    subprocess.run(
        [sys.executable, "-m", "clproj.cli", "run", "--record", rec_dir, *kernels, "--", "./app"],
        cwd=os.path.join(out, "gemver"),
        env=env,
        check=True,
        capture_output=True,
    )
    from clproj.intercept.record import list_records, load

    got = {load(p).kernel: p for p in list_records(rec_dir)}
    return [(f"{k} (PolyBench gemver, LARGE)", got[k]) for k in POLYBENCH_KERNELS if k in got]


def _truth_h100(suite: str | None) -> dict[str, float]:
    """Measured H100 seconds per gemver kernel (the suite's truth file)."""
    path = os.path.join(suite or "", "truth", "h100.tsv")
    if not suite or not os.path.exists(path):
        return {}
    out = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            f = line.rstrip("\n").split("\t")
            if f[0] == "gemver":
                out[f[2]] = float(f[8]) * 1e-9
    return out


def _emulate_in(tree: str, record_path: str) -> dict:
    env = dict(os.environ, PYTHONPATH=tree)
    for k in ("CLPROJ_EMULATION_MODE", "CLPROJ_EMULATION_NICE"):
        env.pop(k, None)
    p = subprocess.run(
        [sys.executable, "-c", _EMULATE_ONE, record_path],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def _busy_loops(n: int) -> list[subprocess.Popen]:
    """``n`` shell busy loops (each ends by itself after 30 min; killed by pid before)."""
    loop = "while :; do :; done"
    return [
        subprocess.Popen(["timeout", "1800", "sh", "-c", loop], start_new_session=True)
        for _ in range(n)
    ]


def determinism(before: str, repeats: int, suite: str | None) -> list[str]:
    from clproj.intercept.record import save

    tmp = tempfile.mkdtemp(prefix="clproj-determinism-")
    try:
        trees = {"before": _checkout(before, os.path.join(tmp, "before")), "after": REPO}
        records: list[tuple[str, str]] = []
        for name, size in DETERMINISM_APPS:
            rec = record_of(get_app(name).plan(size))
            label = f"{rec.kernel} ({name}, {size})" if rec.kernel != name else f"{name} ({size})"
            records.append((label, save(rec, os.path.join(tmp, "records"))))
        if suite and os.path.exists(os.path.join(suite, "build.sh")):
            records += _polybench_records(suite, tmp)
        truth = _truth_h100(suite)
        runs: dict[tuple[str, str, str], list[dict]] = {}
        loads: dict[str, list[float]] = {"as is": [], "2 busy loops": []}
        for condition in loads:
            busy = _busy_loops(2) if condition != "as is" else []
            try:
                time.sleep(3 if busy else 0)
                for rep in range(repeats):
                    for version in ("before", "after"):
                        for label, path in records:
                            r = _emulate_in(trees[version], path)
                            runs.setdefault((label, version, condition), []).append(r)
                            loads[condition].append(_loadavg())
                            print(condition, rep, version, label, json.dumps(r), flush=True)
            finally:
                for b in busy:
                    os.killpg(b.pid, 9)
                    b.wait()
    finally:
        subprocess.run(["rm", "-rf", tmp], check=False)
    return _determinism_report(before, repeats, records, runs, loads, truth)


def _spread(values: list[float]) -> float:
    hi = max(values)
    return (hi - min(values)) / hi if hi else 0.0


def _determinism_report(before, repeats, records, runs, loads, truth) -> list[str]:
    out = [
        f"`python -m clproj.benchmarks.miniemu_bounded --determinism --before {before} --repeats "
        f"{repeats}`: each record emulated in bounded mode (default `Budget()`) {repeats} "
        "times on the machine as it is (shared 2-core VM, other engineers' jobs running) "
        "and {0} times beside two `sh -c 'while :; do :; done'` busy loops, by the code at "
        f"`{before}` (wall-clock budget 3 s) and by this tree (counted budget, 30 s wall "
        "backstop), interleaved run by run. 1-min load average: as is "
        f"{min(loads['as is']):.1f}-{max(loads['as is']):.1f}, with the busy loops "
        f"{min(loads['2 busy loops']):.1f}-{max(loads['2 busy loops']):.1f}.".replace(
            "{0}", str(repeats)
        ),
        "",
        "Distinct = distinct profiles (digest of every counter of `total`) among all "
        f"{2 * repeats} runs; spread = (max - min) / max over them; H100 = projected time on "
        "the measured H100 profile (/ measured, for the PolyBench kernels); cost = median "
        "wall / CPU seconds of one bounded emulation (the process that emulates, its "
        "Oclgrind workers included), as is / busy.",
        "",
        "| kernel | code | distinct | methods (stopped by) | instructions | spread | transactions spread | dependence chain spread | H100 ms | cost wall s | cost CPU s |",
        "|" + "---|" * 11,
    ]
    for label, _ in records:
        for version in ("before", "after"):
            rs = [r for c in loads for r in runs.get((label, version, c), []) if "error" not in r]
            errors = [
                r["error"] for c in loads for r in runs.get((label, version, c), []) if "error" in r
            ]
            if not rs:
                out.append(f"| {label} | {version} | errors: {errors[:1]} |" + " |" * 8)
                continue
            methods: dict[str, int] = {}
            for r in rs:
                key = f"{r['method']} ({r['budget'] if r['budget'] != '-' else r['stop']})"
                methods[key] = methods.get(key, 0) + 1
            ins = [r["metrics"]["instructions"] for r in rs]
            txs = [r["metrics"]["transactions"] for r in rs]
            chains = [r["chain"] or 0 for r in rs]
            h = [r["h100_s"] for r in rs if r.get("h100_s")]
            kernel = label.split(" ")[0]
            if h and kernel in truth:
                hs = (
                    f"{min(h) * 1e3:.3g}-{max(h) * 1e3:.3g} "
                    f"({min(h) / truth[kernel]:.2f}-{max(h) / truth[kernel]:.2f}x)"
                )
            elif h:
                hs = f"{min(h) * 1e3:.3g}-{max(h) * 1e3:.3g}"
            else:
                hs = "-"
            cost = []
            for key in ("wall", "cpu"):
                cost.append(
                    " / ".join(
                        f"{statistics.median(r[key] for r in runs[(label, version, c)] if key in r):.1f}"
                        for c in loads
                    )
                )
            out.append(
                f"| {label} | {version} | {len({r['digest'] for r in rs})} | "
                + ", ".join(f"{k} x{v}" for k, v in sorted(methods.items()))
                + f" | {min(ins):.4g}-{max(ins):.4g} | {_spread(ins):.1%} | {_spread(txs):.1%} | "
                f"{_spread(chains):.1%} | {hs} | {cost[0]} | {cost[1]} |"
                + (f" errors: {len(errors)}" if errors else "")
            )
    return out


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
