"""Determinism of bounded emulation: the same launches, repeated, quiet and beside two busy
loops, at this tree and at the last revision whose budget was wall-clock
(``python -m clproj.benchmarks.miniemu_bounded --determinism`` appends the section to
benchmarks/results/miniemu_bounded.md)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

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
    from clproj.benchmarks.apps import get_app
    from clproj.benchmarks.miniemu_bounded import record_of
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
                            loads[condition].append(os.getloadavg()[0])
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
