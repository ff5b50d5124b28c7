"""Time from a kernel's first launch to its projection, and what project mode costs an app.

Routing can only use a projection that exists: a short app finishes before the
projections of its kernels do and never benefits. This benchmark runs unmodified apps
natively and under ``clproj run --mode project --devices measured --json`` once per method
from an empty projection cache, interleaved so they share the machine's load:

* ``live``: the default, ``clproj run`` emulating and projecting each record while the app
  runs, its emulator runs at nice 19 (``CLPROJ_LIVE_EMULATION=1``,
  runtime/projection/live_run.py), every emulation forking its runs from one server held
  for the whole run (``CLPROJ_EMULATOR_SERVER=run``, miniemu.oclgrind.shared_server);
* ``live-own-server``: the same, each emulation starting a server of its own
  (``CLPROJ_EMULATOR_SERVER=emulation``);
* ``live-writer-hash``: the same as ``live``, each large snapshot hashed by the app's
  record writer after it was copied (``CLPROJ_SNAPSHOT_HASH=writer``), not while it is
  copied (intercept.snapshot_hash);
* ``live-read-all``: the same as ``live``, every buffer read into the staging buffer
  (``CLPROJ_SNAPSHOT_READS=all``), none left unread or mapped (intercept.shim_runtime);
* ``live-no-view``: the same as ``live``, each launch emulated once its record is whole
  (``CLPROJ_SNAPSHOT_VIEW=off``), not from its live record while the app copies its large
  snapshots (intercept.live_view);
* ``live-no-release``: the same as ``live``, every copy of a live record whole
  (``CLPROJ_SNAPSHOT_VIEW=live``), not stopped once the launch is projected
  (intercept.live_view.release; every method here runs with ``--record`` and
  ``CLPROJ_SNAPSHOT_VIEW=release`` set, as project mode without ``--record`` behaves);
* ``post-app``: every emulation after the app (``CLPROJ_LIVE_EMULATION=0``);
* ``live-idle`` (``--methods``): while the app runs, only on an idle core
  (``CLPROJ_LIVE_EMULATION=auto``).

Per kernel (the first recorded launch of each kernel name of each app): the time from that
launch to its projection (``since_launch_s``), the emulation + projection wall time
(``elapsed_s``), and the bytes of buffer snapshots recorded for it (the emulator maps them
and reads only the pages its work-items touch). Per app: the wall times. Suites: our 32
apps (``benchmarks/apps``, one process running all of them), the shared PolyBench eight
(``../shared/validation/polybench``) and BabelStream (``../shared/validation/babelstream``)
at 1 MiB to 400 MiB arrays and 2 iterations, and as shipped (its defaults: 256 MiB arrays,
100 iterations; suite ``babelstream-shipped`` alone), and ``flat``: benchmarks/flat_app.py
at 10^2-10^5 loop trips per work-item and 1 MiB-1 GiB buffers, the axes along which the
first projection must stay flat (within 2x). ``--quick``: the paper's eight apps,
three PolyBench apps and BabelStream at 1 and 400 MiB. ``--app NAME=FOLDER`` (repeatable):
also an app of no suite here, ``FOLDER/app`` run in FOLDER (``--suites ''``: that alone).

    POCL_DEVICES=pthread python -m clproj.benchmarks.first_projection [--quick] \\
        [--suites apps,polybench,babelstream,babelstream-shipped,flat] [--out benchmarks/results/first_projection.md]
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

from clproj.console import publish
from clproj.runtime.evaluation.validate_suite import ensure_built, parse_run_output

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(REPO, "..", "shared")
BABELSTREAM_SIZES = (1 << 17, 1 << 20, 1 << 23, 52_428_800)  # doubles per array: 1-400 MiB
QUICK_BABELSTREAM = (1 << 17, 52_428_800)
QUICK_POLYBENCH = ("atax", "gemver", "jacobi-1d-imper")
# Suite "flat" (benchmarks/flat_app.py): the axes, 10^2-10^5 loop trips per
# work-item (in half decades: the attempt's cost peaked between the decades, at 3,000,
# where it ran to its budget before the probes) and 1 MiB-1 GiB buffers, one kernel per
# run; the target is max/min <= 2x.
FLAT_TRIPS = (100, 300, 1_000, 3_000, 10_000, 30_000, 100_000)
FLAT_MIBS = (1, 16, 256, 1024)
TARGET_FLAT = 2.0
# The settings of each method; "live-idle" (`--methods`): beside the app only while a whole
# core is idle, what "live" does at nice 19 whatever the load; "live-own-server": live, with
# a fork server started by each emulation (CLPROJ_EMULATOR_SERVER=emulation) instead of one
# for the whole run; "live-writer-hash": live, large snapshots hashed by the record writer
# after their copy (CLPROJ_SNAPSHOT_HASH=writer) instead of while they are copied;
# "live-no-prestart": live, a C app's shim starting Python at its first recorded launch
# (CLPROJ_PYTHON_PRESTART=0) instead of on a thread at its first OpenCL call;
# "live-no-template": live, every emulator run forked whole from the server
# (CLPROJ_EMULATOR_TEMPLATES=0) instead of from its emulation's template (miniemu.fork_server);
# "live-no-release": live, every live copy whole (CLPROJ_SNAPSHOT_VIEW=live) instead of
# stopped once the launch is projected (intercept.live_view.release)
ALL_METHODS = {
    "live": {"CLPROJ_LIVE_EMULATION": "1"},
    "live-own-server": {"CLPROJ_LIVE_EMULATION": "1", "CLPROJ_EMULATOR_SERVER": "emulation"},
    "live-writer-hash": {"CLPROJ_LIVE_EMULATION": "1", "CLPROJ_SNAPSHOT_HASH": "writer"},
    "live-read-all": {"CLPROJ_LIVE_EMULATION": "1", "CLPROJ_SNAPSHOT_READS": "all"},
    "live-no-view": {"CLPROJ_LIVE_EMULATION": "1", "CLPROJ_SNAPSHOT_VIEW": "off"},
    "live-no-prestart": {"CLPROJ_LIVE_EMULATION": "1", "CLPROJ_PYTHON_PRESTART": "0"},
    "live-no-template": {"CLPROJ_LIVE_EMULATION": "1", "CLPROJ_EMULATOR_TEMPLATES": "0"},
    "live-no-release": {"CLPROJ_LIVE_EMULATION": "1", "CLPROJ_SNAPSHOT_VIEW": "live"},
    "post-app": {"CLPROJ_LIVE_EMULATION": "0"},
    "live-idle": {"CLPROJ_LIVE_EMULATION": "auto"},
}
METHODS: dict[str, dict[str, str]] = {}
TARGET_MEDIAN_S, TARGET_MAX_S, TARGET_RATIO = 1.0, 5.0, 2.0


def timed(cmd: list[str], cwd: str, env: dict[str, str]) -> tuple[float, str, int]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    return time.perf_counter() - start, proc.stdout, proc.returncode


def kernels_of(record_dir: str, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per kernel name: its first recorded launch's projection and snapshot bytes."""
    from clproj.intercept.record import list_records, load

    by_sig = {d["signature"]: d for d in docs if d.get("signature")}
    first: dict[str, Any] = {}
    try:
        paths = list_records(record_dir)
    except Exception:
        paths = []
    for rec in (load(p) for p in paths):
        if rec.kernel not in first or rec.created < first[rec.kernel].created:
            first[rec.kernel] = rec
    rows = []
    for name, rec in sorted(first.items()):
        doc = by_sig.get(rec.signature, {})
        rows.append(
            {
                "kernel": name,
                "since_launch_s": doc.get("since_launch_s") if doc.get("projections") else None,
                "emulation_s": doc.get("elapsed_s"),
                "when": doc.get("live", "after app"),
                "recorded_bytes": sum(a.size or 0 for a in rec.args if a.kind == "buffer"),
            }
        )
    return rows


def project(app: list[str], cwd: str, env: dict[str, str], work: str, method: str) -> dict:
    """One project-mode run of ``app`` from an empty projection cache."""
    run = tempfile.mkdtemp(prefix=f"{method}-", dir=work)
    # --record (to read each kernel's first record) keeps every copy whole unless the view
    # is asked to release them, as project mode without --record does by default
    env = dict(env, CLPROJ_CACHE=os.path.join(run, "cache"), CLPROJ_SNAPSHOT_VIEW="release")
    env.update(METHODS[method])
    cmd = [sys.executable, "-m", "clproj.cli", "run", "--mode", "project", "--devices"]
    cmd += ["measured", "--json", "--record", os.path.join(run, "rec"), "--", *app]
    wall, out, rc = timed(cmd, cwd, env)
    try:
        docs = parse_run_output(out).get("projections") or []
    except ValueError:
        docs = []
    kernels = kernels_of(os.path.join(run, "rec"), docs)
    subprocess.run(["rm", "-rf", run], check=False)
    return {"wall_s": wall, "rc": rc, "kernels": kernels}


def measure(name: str, app: list[str], cwd: str, env: dict[str, str], work: str) -> dict:
    """Plain, live and post-app runs of one app, back to back."""
    plain, _, rc = timed(app, cwd, env)
    row: dict[str, Any] = {"app": name, "plain_s": plain, "rc": rc}
    for method in METHODS:
        row[method] = project(app, cwd, env, work, method)
    walls = ", ".join(f"{m} {row[m]['wall_s']:.2f} s" for m in METHODS)
    sys.stderr.write(f"{name}: plain {plain:.2f} s, {walls}\n")
    return row


def our_apps(work: str, env: dict[str, str], quick: bool) -> list[dict[str, Any]]:
    from clproj.benchmarks.apps import APPS
    from clproj.benchmarks.apps.paper import PAPER_APPS

    names = [a.name for a in PAPER_APPS] if quick else sorted(APPS)
    app = [sys.executable, "-m", "clproj.benchmarks.apps", *names, "--size", "small"]
    return [measure(f"our {len(names)} apps (one process, small)", app, REPO, env, work)]


def build_babelstream(work: str) -> str:
    """BabelStream's OpenCL build (../shared/validation/babelstream) in ``work``: its path."""
    src = os.path.join(SHARED, "validation", "babelstream", "src")
    exe = os.path.join(work, "babelstream-ocl")
    defs = ["-DOCL", "-DCL_TARGET_OPENCL_VERSION=120", "-DCL_HPP_TARGET_OPENCL_VERSION=120"]
    defs.append("-DCL_HPP_MINIMUM_OPENCL_VERSION=120")
    subprocess.run(
        ["g++", "-O2", "-std=c++20", *defs, f"-I{src}", f"-I{src}/ocl",
         f"{src}/main.cpp", f"{src}/ocl/OCLStream.cpp", "-lOpenCL", "-o", exe],
        check=True, capture_output=True,
    )  # fmt: skip
    return exe


def babelstream(
    work: str, env: dict[str, str], quick: bool, sweep: bool = True, shipped: bool = False
) -> list[dict[str, Any]]:
    """BabelStream at 1-400 MiB arrays and 2 iterations (``sweep``: the shortest run it
    allows, where project mode's fixed costs weigh most), and as its users run it
    (``shipped``: its defaults, 256 MiB arrays and 100 iterations, about 45 s plain on the
    2-core VM)."""
    exe = build_babelstream(work)
    rows = []
    for n in (QUICK_BABELSTREAM if quick else BABELSTREAM_SIZES) if sweep else ():
        name = f"BabelStream {n * 8 / 2**20:g} MiB arrays"
        rows.append(measure(name, [exe, "-s", str(n), "-n", "2"], work, env, work))
    if shipped:
        name = "BabelStream as shipped (256 MiB arrays, 100 iterations)"
        rows.append(measure(name, [exe], work, env, work))
    return rows


def polybench(work: str, env: dict[str, str], quick: bool) -> list[dict[str, Any]]:
    suite = os.path.join(SHARED, "validation", "polybench")
    where, _ = ensure_built(suite, None)
    rows = []
    for app in sorted(os.listdir(where)):
        folder = os.path.join(where, app)
        if quick and app not in QUICK_POLYBENCH:
            continue
        if os.path.isfile(os.path.join(folder, "app")):
            rows.append(measure(f"PolyBench {app}", ["./app"], folder, env, work))
    return rows


def flat(work: str, env: dict[str, str], quick: bool, repeat: int = 1) -> list[dict[str, Any]]:
    """benchmarks/flat_app.py along both axes (``--quick``: the ends of each), every point
    ``repeat`` times, a round of the axis's points at a time."""
    app = [sys.executable, "-m", "clproj.benchmarks.flat_app"]
    rows = []
    for axis, kernel, flag, points in (
        ("loop trips", "loopsum", "--trips", FLAT_TRIPS),
        ("MiB per buffer", "copy", "--mib", FLAT_MIBS),
    ):
        for r in range(repeat):
            for p in (points[0], points[-1]) if quick else points:
                name = f"flat: {kernel}, {p:,} {axis}" + (f", run {r + 1}" if repeat > 1 else "")
                row = measure(name, [*app, kernel, flag, str(p)], REPO, env, work)
                rows.append(dict(row, axis=axis, point=p))
    return rows


def flatness(rows: list[dict[str, Any]], method: str) -> list[str]:
    """Table lines: per axis of suite ``flat``, the first launch to projection at each point
    (the median of its runs; a run without a projection leaves the point without one) and
    the largest over the smallest. Why medians: a point's first projection is 0.1-0.3 s
    and the app beside it moves it by as much on 2 cores."""
    lines = []
    for axis in dict.fromkeys(r["axis"] for r in rows if "axis" in r):
        pts = [r for r in rows if r.get("axis") == axis]
        runs: dict[int, list[float | None]] = {}
        for r in pts:
            runs.setdefault(r["point"], []).append(
                min((k["since_launch_s"] for k in r[method]["kernels"] if k["since_launch_s"]),
                    default=None)
            )  # fmt: skip
        since = {
            p: None if None in got else statistics.median(got)  # type: ignore[type-var]
            for p, got in runs.items()
        }
        got = [s for s in since.values() if s is not None]
        ratio = max(got) / min(got) if len(got) == len(since) and got else None
        cells = ", ".join(f"{p:,}: {fmt(s)}" for p, s in since.items())
        verdict = "-" if ratio is None else "met" if ratio <= TARGET_FLAT else "not met"
        lines.append(f"| {axis} | {method} | {cells} | {fmt(ratio)} | {verdict} |")
    return lines


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def summary(rows: list[dict[str, Any]], method: str) -> dict[str, Any]:
    since = [k["since_launch_s"] for r in rows for k in r[method]["kernels"]]
    got = [s for s in since if s is not None]
    return {
        "kernels": len(since),
        "projected": len(got),
        "median_s": statistics.median(got) if got else None,
        "max_s": max(got) if got else None,
        "during_app": sum(
            1 for r in rows for k in r[method]["kernels"] if k["when"] == "during app"
        ),
    }


def report(rows: list[dict[str, Any]], argv: list[str]) -> str:
    load = os.getloadavg()
    lines = [
        "## Time from a kernel's first launch to its projection (project mode, empty cache)",
        "",
        f"`POCL_DEVICES={os.environ.get('POCL_DEVICES', '')} python -m clproj.benchmarks.first_projection "
        f"{' '.join(argv)}` ({os.cpu_count()} cores, load average at the end "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        "*live*: emulated and projected by `clproj run` while the app runs, its emulator "
        "runs at nice 19 (`CLPROJ_LIVE_EMULATION=1`, the default), every emulation forking "
        "its runs from one server for the whole run (`CLPROJ_EMULATOR_SERVER=run`, the default); "
        "*live-own-server*: the same with a server started by each emulation "
        "(`CLPROJ_EMULATOR_SERVER=emulation`); *live-writer-hash*: as *live*, each large "
        "snapshot hashed after its copy by the record writer (`CLPROJ_SNAPSHOT_HASH=writer`) "
        "instead of while it is copied; *live-read-all*: as *live*, every buffer read into "
        "the staging buffer (`CLPROJ_SNAPSHOT_READS=all`) instead of leaving unread those "
        "no command wrote and mapping the others on a device whose memory is the host's; "
        "*live-no-view*: as *live*, each launch emulated once its record is whole "
        "(`CLPROJ_SNAPSHOT_VIEW=off`) instead of from its live record while the app copies "
        "its large snapshots; *live-no-prestart*: as *live*, a C app's shim starting its "
        "Python side at the first recorded launch (`CLPROJ_PYTHON_PRESTART=0`) instead of "
        "on a thread of its own at the app's first OpenCL call; *live-no-template*: as "
        "*live*, every emulator run forked whole from the server (`CLPROJ_EMULATOR_TEMPLATES=0`) "
        "instead of from a template that prepared its emulation's launch once; "
        "*live-no-release*: as *live*, every copy of a live record whole "
        "(`CLPROJ_SNAPSHOT_VIEW=live`) instead of stopped once the launch is projected; "
        "*post-app*: every emulation after the "
        "app (`CLPROJ_LIVE_EMULATION=0`); *live-idle*: while the app runs, only on an idle "
        "core (`CLPROJ_LIVE_EMULATION=auto`). Interleaved per app (plain, then each method).",
        "",
        "| method | kernels | projected | first launch to projection, median / max (s) | "
        f"target <= {TARGET_MEDIAN_S:g} / {TARGET_MAX_S:g} s | projected while the app ran |",
        "|---|---|---|---|---|---|",
    ]
    for method in METHODS:
        s = summary(rows, method)
        met = (
            s["median_s"] is not None
            and s["median_s"] <= TARGET_MEDIAN_S
            and s["max_s"] <= TARGET_MAX_S
            and s["projected"] == s["kernels"]
        )
        lines.append(
            f"| {method} | {s['kernels']} | {s['projected']} | {fmt(s['median_s'])} / "
            f"{fmt(s['max_s'])} | {'met' if met else 'not met'} | {s['during_app']} |"
        )
    methods = list(METHODS)
    first = methods[0]
    flat_lines = [line for m in methods for line in flatness(rows, m)]
    if flat_lines:
        lines += [
            "",
            "Suite *flat* (`benchmarks/flat_app.py`, one kernel per run, its first launch to "
            f"its projection, s; the median of each point's runs): flat means largest / "
            f"smallest <= {TARGET_FLAT:g}.",
            "",
            "| axis | method | first launch to projection at each point (s) | largest / "
            f"smallest | target <= {TARGET_FLAT:g}x |",
            "|---|---|---|---|---|",
            *flat_lines,
        ]
    lines += [
        "",
        "| app | plain (s) | "
        + " | ".join(f"{m} (s, x plain)" for m in methods)
        + " | kernels | "
        + " | ".join(f"first launch to projection, {m}: median / max (s)" for m in methods)
        + f" | emulation, {first} median (s) | recorded MiB |",
        "|---|---|" + "---|" * (2 * len(methods) + 3),
    ]
    for r in rows:
        walls, cells = [], []
        for method in methods:
            walls.append(f"{r[method]['wall_s']:.2f} ({r[method]['wall_s'] / r['plain_s']:.1f}x)")
            since = [k["since_launch_s"] for k in r[method]["kernels"]]
            got = [s for s in since if s is not None]
            cells.append(
                f"{fmt(statistics.median(got) if got else None)} / {fmt(max(got) if got else None)}"
                + (f" ({len(since) - len(got)} unprojected)" if len(got) < len(since) else "")
            )
        emu = [k["emulation_s"] for k in r[first]["kernels"] if k["emulation_s"] is not None]
        mib = sum(k["recorded_bytes"] for k in r[first]["kernels"]) / 2**20
        lines.append(
            f"| {r['app']} | {r['plain_s']:.2f} | {' | '.join(walls)} | "
            f"{len(r[first]['kernels'])} | {' | '.join(cells)} | "
            f"{fmt(statistics.median(emu) if emu else None)} | {mib:.0f} |"
        )
    lines += [
        "",
        "Per kernel (first launch to projection, s, and when it was projected; emulation, s):",
        "",
        "| app | kernel | " + " | ".join(methods) + f" | emulation ({first}) | recorded MiB |",
        "|---|---|" + "---|" * (len(methods) + 2),
    ]
    for r in rows:
        others = {m: {k["kernel"]: k for k in r[m]["kernels"]} for m in methods}
        for k in r[first]["kernels"]:
            cells = []
            for m in methods:
                o = others[m].get(k["kernel"], {})
                cells.append(f"{fmt(o.get('since_launch_s'))} ({o.get('when', '-')})")
            lines.append(
                f"| {r['app']} | {k['kernel']} | {' | '.join(cells)} | "
                f"{fmt(k['emulation_s'])} | {k['recorded_bytes'] / 2**20:.1f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suites", default="apps,polybench,babelstream,flat")
    ap.add_argument("--quick", action="store_true", help="a subset of each suite")
    ap.add_argument("--out", help="also write the report (Markdown) here")
    ap.add_argument(
        "--methods",
        default="live,live-own-server,live-writer-hash,post-app",
        help=f"of {', '.join(ALL_METHODS)}",
    )
    ap.add_argument(
        "--app",
        action="append",
        default=[],
        metavar="NAME=FOLDER",
        help="also an app outside the suites: FOLDER/app, run in FOLDER (as PolyBench's are)",
    )
    ap.add_argument(
        "--flat-repeat",
        type=int,
        default=3,
        metavar="N",
        help="runs per point of suite flat, their median the point's (default 3)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.flat_repeat < 1:
        ap.error("--flat-repeat must be at least 1")
    extra = [tuple(a.split("=", 1)) for a in args.app]
    bad = [
        a
        for a, e in zip(args.app, extra, strict=True)
        if len(e) != 2 or not os.path.isfile(os.path.join(e[1], "app"))
    ]
    if bad:
        ap.error(f"--app {bad[0]}: give NAME=FOLDER, a folder holding an executable named app")
    METHODS.clear()
    METHODS.update({m: ALL_METHODS[m] for m in args.methods.split(",")})
    suites = set(args.suites.split(","))
    unknown = suites - {"apps", "polybench", "babelstream", "babelstream-shipped", "flat", ""}
    if unknown:
        ap.error(f"unknown suite(s) {', '.join(sorted(unknown))}")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="clproj-first-") as work:
        env = dict(os.environ)
        if "apps" in suites:
            rows += our_apps(work, env, args.quick)
        if "polybench" in suites:
            rows += polybench(work, env, args.quick)
        if suites & {"babelstream", "babelstream-shipped"}:
            sweep = "babelstream" in suites
            shipped = "babelstream-shipped" in suites or (sweep and not args.quick)
            rows += babelstream(work, env, args.quick, sweep, shipped)
        if "flat" in suites:
            rows += flat(work, env, args.quick, args.flat_repeat)
        for name, folder in extra:
            rows.append(measure(name, ["./app"], os.path.abspath(folder), env, work))
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return 0
    text = report(rows, argv)
    publish(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
