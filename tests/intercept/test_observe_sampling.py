"""Sampled launch timing in observe mode (docs/intercept.md, "Sampled timing").

The shim counts every launch but times only the first ``CLPROJ_TIMING_FIRST`` launches of
each kernel and then the launches whose ticket hashes below 1/``CLPROJ_TIMING_EVERY``; the
summary scales the timed launches up. The hash is reproduced here, so the number of timed
launches is checked exactly, also with several threads racing for tickets.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest

from clproj.intercept.environment import read_summary, shim_environment

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
M64 = (1 << 64) - 1
FIRST, EVERY = 100, 128  # the shim's defaults (CLPROJ_TIMING_FIRST, CLPROJ_TIMING_EVERY)


def mix64(x: int) -> int:
    """The shim's splitmix64 finaliser (track.c), which picks the timed launches."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def expected_timed(launches: int, first: int, every: int) -> int:
    """Launches the shim times: tickets below `first`, then hashes below 1/every."""
    below = M64 // every
    return min(launches, first) + sum(1 for t in range(first, launches) if mix64(t) <= below)


@pytest.fixture(scope="module")
def apps(tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("sampling")
    exes = {}
    for name in ("app_many", "app_basic"):
        exes[name] = str(out / name)
        subprocess.run(
            [
                *("gcc", "-O1", "-Wall", "-o", exes[name]),
                *(os.path.join(REPO, "tests", "c_apps", name + ".c"), "-lOpenCL", "-lpthread"),
            ],
            check=True,
        )
    return exes


def observe(cmd: list[str], tmp_path, extra: dict[str, str] | None = None, **kw) -> dict:
    """Run cmd under observe mode; the summary rows by kernel name."""
    summary = str(tmp_path / "summary.tsv")
    env = shim_environment(summary_file=summary, **kw)
    env.setdefault("POCL_DEVICES", "pthread basic")
    env.update(extra or {})
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return {r["kernel"]: r for r in read_summary(summary)}


def test_hash_sampling_is_spread_and_near_the_rate():
    """The reproduction above is the shim's rule: about 1 in EVERY, no long gaps."""
    picked = [t for t in range(FIRST, FIRST + 1000 * EVERY) if mix64(t) <= M64 // EVERY]
    assert 900 < len(picked) < 1100
    assert max(b - a for a, b in itertools.pairwise(picked)) < EVERY * 12


def test_counts_exact_and_timed_launches_sampled(apps, tmp_path):
    by = observe([apps["app_many"], "3000"], tmp_path)
    inc = by["inc"]
    assert inc["launches"] == 3000  # every launch is counted
    assert inc["timed"] == expected_timed(3000, FIRST, EVERY) < 3000
    assert inc["sampled"] and inc["measured_ns"] > 0
    # the estimate covers all launches, so it exceeds the sum over the timed ones
    assert inc["total_ns"] > inc["measured_ns"]
    assert inc["mean_ns"] == pytest.approx(inc["total_ns"] / 3000)


def test_sampled_total_is_scaled(apps, tmp_path):
    """Without a first stratum the estimate is measured * launches / timed exactly."""
    by = observe(
        [apps["app_many"], "2000"],
        tmp_path,
        {"CLPROJ_TIMING_FIRST": "0", "CLPROJ_TIMING_EVERY": "8"},
    )
    inc = by["inc"]
    assert inc["launches"] == 2000 and inc["timed"] == expected_timed(2000, 0, 8)
    assert abs(inc["total_ns"] - inc["measured_ns"] * 2000 / inc["timed"]) <= 1


def test_time_all_times_every_launch(apps, tmp_path):
    by = observe([apps["app_many"], "1500"], tmp_path, time_all=True)
    inc = by["inc"]
    assert inc["launches"] == inc["timed"] == 1500 and not inc["sampled"]
    assert inc["total_ns"] == inc["measured_ns"] > 0


def test_threads_counts_exact_under_sampling(apps, tmp_path):
    """Three threads launch one kernel concurrently: exact counts, the same timed set."""
    by = observe(
        [apps["app_basic"], "300", "3"],
        tmp_path,
        {"CLPROJ_TIMING_FIRST": "20", "CLPROJ_TIMING_EVERY": "16"},
    )
    assert by["scale"]["launches"] == 900
    assert by["scale"]["timed"] == expected_timed(900, 20, 16)
    for k in ("rev", "one", "twice"):
        assert by[k]["launches"] == by[k]["timed"] == 1


PYAPP = r"""
import sys, numpy as np, pyopencl as cl
ctx = cl.Context([cl.get_platforms()[0].get_devices()[0]]); q = cl.CommandQueue(ctx)
k = cl.Program(ctx, "__kernel void inc(__global int *x, int a) { x[get_global_id(0)] += a; }").build().inc
b = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 256)
cl.enqueue_fill_buffer(q, b, np.int32(0), 0, 256)
evs = [k(q, (64,), None, b, np.int32(1)) for _ in range(int(sys.argv[1]))]
cl.wait_for_events(evs[-5:])
out = np.empty(64, np.int32); cl.enqueue_copy(q, out, b)
print(out[0], evs[-1].command_execution_status)
"""


def test_pyopencl_own_events_sampled(tmp_path):
    """pyopencl passes an event to every launch: only the sampled ones are retained by the
    shim, and the app's own events keep working."""
    script = tmp_path / "app.py"
    script.write_text(PYAPP)
    by = observe(
        [sys.executable, str(script), "400"],
        tmp_path,
        {"CLPROJ_TIMING_FIRST": "10", "CLPROJ_TIMING_EVERY": "8"},
    )
    assert by["inc"]["launches"] == 400
    assert by["inc"]["timed"] == expected_timed(400, 10, 8)


def test_cli_reports_sampling(apps, tmp_path):
    env = dict(os.environ, POCL_DEVICES="pthread basic")
    base = [sys.executable, "-m", "clproj.cli", "run", "--json"]
    for extra, sampled in (([], True), (["--time-all"], False)):
        p = subprocess.run(
            [*base, *extra, "--", apps["app_many"], "600"],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, p.stderr
        row = json.loads(p.stdout[p.stdout.index("{") :])["kernels"][0]
        assert row["launches"] == 600 and row["sampled"] is sampled
        assert row["timed"] == (expected_timed(600, FIRST, EVERY) if sampled else 600)


def test_shim_does_not_link_libpython():
    """Loading libpython cost every C app 1.5-3 ms: the shim loads it only when needed.
    No DT_NEEDED on it, and every reference into it is a weak function reference
    (native/shim/lazy_python.h lists them; add a new one there when this fails)."""
    from clproj.native import shim_library

    lib = shim_library()
    dyn = subprocess.run(["readelf", "-dW", lib], capture_output=True, text=True).stdout
    assert "libpython" not in dyn
    undef = subprocess.run(
        ["nm", "-D", "--undefined-only", lib], capture_output=True, text=True
    ).stdout.split("\n")
    py = [line.split() for line in undef if " Py" in line or " _Py" in line]
    assert py and all(kind == "w" for kind, _ in py), [n for k, n in py if k != "w"]
    relocs = subprocess.run(["readelf", "-rW", lib], capture_output=True, text=True).stdout
    assert not [r for r in relocs.splitlines() if "GLOB_DAT" in r and " Py" in r]


def test_bind_now_c_app_runs_without_recording(apps, tmp_path):
    """LD_BIND_NOW=1 in a C app: Python cannot be bound late, so recording is refused with
    one message; the app still runs and is observed."""
    rec = tmp_path / "rec"
    by = observe([apps["app_many"], "200"], tmp_path, {"LD_BIND_NOW": "1"}, record=str(rec))
    assert by["inc"]["launches"] == 200
    assert not rec.exists() or not list(rec.rglob("*.clrec"))


@pytest.mark.parametrize(
    "extra",
    [{"CLPROJ_TIMING_FIRST": "0", "CLPROJ_TIMING_EVERY": "2"}, {"CLPROJ_TIMING": "all"}],
    ids=["half-timed", "all-timed"],
)
def test_timed_launches_keep_order_and_event_semantics(tmp_path, extra):
    """Timed launches run on the profiling twin queue: a non-commutative chain with copies
    in between gives the same checksums as without the shim, the app's events report its
    queue and no profiling, and a queue the app created with profiling keeps it."""
    exe = str(tmp_path / "app_order")
    subprocess.run(
        [
            "gcc",
            "-O1",
            "-Wall",
            "-o",
            exe,
            os.path.join(REPO, "tests", "c_apps", "app_order.c"),
            "-lOpenCL",
        ],
        check=True,
    )
    env = dict(os.environ, POCL_DEVICES="pthread basic")
    plain = subprocess.run([exe, "400"], env=env, capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0 and plain.stdout.startswith("x "), plain.stdout
    summary = str(tmp_path / "s.tsv")
    env = shim_environment(summary_file=summary)
    env.update(extra, POCL_DEVICES="pthread basic")
    p = subprocess.run([exe, "400"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout == plain.stdout
    chain = {r["kernel"]: r for r in read_summary(summary)}["chain"]
    every_one = extra.get("CLPROJ_TIMING") == "all"
    assert chain["launches"] == 420
    assert chain["timed"] == (420 if every_one else expected_timed(420, 0, 2))
