"""Bounded emulation whose cost does not grow with the data or the loop length.

The loop axis: a 10^5-trip loop is extrapolated from probes without running the attempt
to its instruction budget (fork server, scout, speculative probes), and the profile is the
one the attempt-then-probes order gives; from 10^3 trips the probes replace an attempt
that would fit the budget, with the whole group's counts. The buffer axis: a 1 GiB snapshot costs the
pages the sampled work-items touch, read from a cold page cache.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from clproj import miniemu
from clproj.benchmarks.emulation_flat import COPY, ROWSUM, evict, resident_bytes
from clproj.benchmarks.flat_app import LOOPSUM, TABLE
from clproj.intercept.blobs import BlobStore, zeros_key
from clproj.intercept.record import from_arrays, load, save
from clproj.miniemu.bounded import Budget, emulate_bounded


def rowsum(tmp_path, trips: int, rows: int = 256):
    m = np.ones(rows * trips, dtype=np.float32)
    rec = from_arrays(
        ROWSUM, "rowsum", [m, np.zeros(rows, np.float32), np.int32(trips)], [rows], [64]
    )
    return load(save(rec, str(tmp_path / f"r{trips}")))


def test_long_loop_is_extrapolated_without_the_attempts_budget(tmp_path):
    """10^5 trips per work-item: the emulation counts a tenth of the instruction budget
    (before: the whole 2e6 budget in the attempt, then the probes), and the profile equals
    the attempt-then-probes one."""
    record = rowsum(tmp_path, 100_000)
    fast = emulate_bounded(record)
    slow = emulate_bounded(record, speculate=False)
    assert fast.emulation["method"] == slow.emulation["method"] == "loop-extrapolated"
    assert fast.total == slow.total
    assert fast.emulation["loop_extrapolation"] == slow.emulation["loop_extrapolation"]
    assert fast.emulation["budget"] == slow.emulation["budget"] == "instructions"
    assert fast.emulation["instructions_emulated"] < Budget().instructions / 10
    assert slow.emulation["instructions_emulated"] > Budget().instructions
    assert "not waited for" in fast.emulation["speculation"]["attempt"]


def test_short_loop_keeps_its_full_group(tmp_path):
    """300 trips: fewer than twice the probes' trips together (40 + 72 + 136), so no probe
    can be cheaper: no speculation, the whole group is the profile."""
    record = rowsum(tmp_path, 300)
    fast = emulate_bounded(record)
    slow = emulate_bounded(record, speculate=False)
    assert fast.emulation["method"] == slow.emulation["method"] == "full-group"
    assert fast.total == slow.total
    assert fast.emulation["speculation"]["scout"] == "no speculative probes"
    assert fast.emulation["emulator_runs"] == 2  # the scout and the attempt


def loopsum(tmp_path, trips: int):
    """benchmarks/flat_app.py's kernel: rows 64 floats apart that overlap past 64 trips."""
    arrays = [np.ones(TABLE, np.float32), np.zeros(256, np.float32), np.int32(trips)]
    rec = from_arrays(LOOPSUM, "loopsum", arrays, [256], [64])
    return load(save(rec, str(tmp_path / f"l{trips}")))


@pytest.mark.parametrize("make", [rowsum, loopsum], ids=["rowsum", "loopsum"])
@pytest.mark.parametrize("trips", [1000, 3000])
def test_cheaper_probes_replace_the_attempt_and_equal_the_whole_group(tmp_path, make, trips):
    """Under the budget (1000) and just over it (3000), the probes cost less than half
    the attempt: they replace it, in both orders of the runs, and every counter equals
    the whole group's (``single`` mode). Both kernels walk rows whose
    start is not line-aligned (n = 1000 and 3000 are 8 and 24 words past a multiple of
    32: the probes keep that residue); loopsum's rows overlap past 64 trips, so its
    footprint is fitted on the largest probes."""
    record = make(tmp_path, trips)
    whole = miniemu.emulate(record, mode="single", timeout_s=300)
    fast = emulate_bounded(record)
    slow = emulate_bounded(record, speculate=False)
    for prof in (fast, slow):
        assert prof.emulation["method"] == "loop-extrapolated"
        assert prof.total == whole.total
    # over the budget (3000), the attempt-then-probes order reaches the same probes by
    # running the attempt to its budget first
    assert slow.emulation["budget"] == ("probes" if trips == 1000 else "instructions")
    assert fast.emulation["budget"] == fast.emulation["stop_reason"] == "probes"
    assert fast.emulation["loop_extrapolation"]["instead_of_attempt"] is True
    assert fast.emulation["speculation"]["attempt"] == "not waited for (the probes are cheaper)"
    assert fast.emulation["instructions_emulated"] < Budget().instructions / 5


# Every 50th trip runs 100 more iterations of an inner loop: the instructions per trip
# differ between the probes (1, 2 and 3 such trips in probes of 38, 70 and 134 trips at
# n = 1350), so the fit checks > 2% off and is not preferred to the attempt for its cost.
LUMPY = """
__kernel void lumpy(__global const float *m, __global float *out, int n) {
  const int r = get_global_id(0);
  float acc = 0.0f;
  for (int j = 0; j < n; ++j) {
    acc += m[r * n + j];
    if (j % 50 == 0)
      for (int k = 0; k < 100; ++k) acc = acc * 0.5f + 1.0f;
  }
  out[r] = acc;
}
"""


def test_probes_that_do_not_check_wait_for_a_near_budget_attempt(tmp_path):
    """Between the budget and the 1.5x margin, probes whose fit is off by more than 2% on
    their check are not preferred for their cost: the attempt runs to its budget and then
    decides, with the same (speculative) probes, as in the attempt-then-probes order."""
    n = 1350  # the attempt: ~2.3e6 instructions, between the budget and 1.5x it
    m = np.ones(256 * n, dtype=np.float32)
    rec = from_arrays(LUMPY, "lumpy", [m, np.zeros(256, np.float32), np.int32(n)], [256], [64])
    record = load(save(rec, str(tmp_path / "lumpy")))
    fast = emulate_bounded(record)
    slow = emulate_bounded(record, speculate=False)
    assert fast.emulation["method"] == slow.emulation["method"] == "loop-extrapolated"
    assert fast.total == slow.total
    assert fast.emulation["loop_extrapolation"]["check_error"] > 0.02
    spec = fast.emulation["speculation"]
    assert spec["scout"] == "speculative probes"
    assert Budget().instructions <= spec["predicted_attempt_instructions"]
    assert spec["predicted_attempt_instructions"] < 1.5 * Budget().instructions
    assert spec["attempt"] == "waited for" and spec["probes"] == "used"
    assert fast.emulation["budget"] == slow.emulation["budget"] == "instructions"


def test_one_gib_snapshot_costs_the_touched_pages(tmp_path):
    """A copy over two 1 GiB snapshots, cold page cache: the emulation reads < 1 MiB of
    them (sparse blob files: nothing is written to the disk)."""
    size = 2**30
    sha = zeros_key(size)
    store = BlobStore(str(tmp_path))
    os.makedirs(store.path)
    blob = os.path.join(store.path, sha)
    with open(blob, "wb") as fh:
        fh.truncate(size)
    small = np.zeros(16, np.float64)
    rec = from_arrays(COPY, "copy", [small, small.copy()], [16], None)
    rec.blobs = {}
    for a in rec.args:
        a.blob, a.size = sha, size
    rec.global_size = [size // 8]
    rec.store_dir = str(tmp_path)
    record = load(save(rec, str(tmp_path)))
    evict(blob)
    prof = emulate_bounded(record)
    assert prof.emulation["method"] == "sampled-work-items"
    assert resident_bytes(blob) < 2**20


@pytest.mark.parametrize("speculate", [False, True])
def test_both_orders_run_under_the_same_budget_fields(tmp_path, speculate):
    record = rowsum(tmp_path, 100)
    prof = emulate_bounded(record, budget=Budget(instructions=50_000), speculate=speculate)
    assert prof.emulation["budget_limits"]["instructions"] == 50_000
    assert prof.emulation["method"] in ("loop-extrapolated", "budget-extrapolated")


def test_a_held_pyopencl_cache_lock_does_not_stall_the_runs(tmp_path, monkeypatch):
    """The runs of a bounded emulation are paused and killed by design; none may depend
    on pyopencl's compiler-cache lock, which a paused or killed run would hold (the others
    waited 60 s for it and failed). Here the lock is held from the start."""
    import sys
    import time

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    version = ".".join(str(i) for i in sys.version_info)
    lock_dir = tmp_path / "cache" / "pyopencl" / f"pyopencl-compiler-cache-v2-py{version}"
    lock_dir.mkdir(parents=True)
    (lock_dir / "lock").write_text("")
    record = rowsum(tmp_path, 10_000)
    start = time.perf_counter()
    prof = emulate_bounded(record)
    assert prof.emulation["method"] == "loop-extrapolated"
    assert time.perf_counter() - start < 30


def test_flat_app_runs_each_axis_and_checks_its_result():
    """benchmarks/flat_app.py (first_projection's suite ``flat``) computes the right sums
    and copies on the local device, and refuses a knob below 1."""
    import subprocess
    import sys

    app = [sys.executable, "-m", "clproj.benchmarks.flat_app"]
    for args in (["loopsum", "--trips", "300"], ["copy", "--mib", "2"]):
        done = subprocess.run([*app, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    bad = subprocess.run([*app, "copy", "--mib", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--mib" in bad.stderr


def test_flatness_is_the_largest_over_the_smallest_first_projection():
    """The suite's verdict: per axis, the largest first launch to projection over the
    smallest, against 2x; an unprojected point gives no ratio, never a pass."""
    from clproj.benchmarks.first_projection import flatness

    def row(axis, point, since):
        kernels = [{"kernel": "k", "since_launch_s": since, "emulation_s": 0.01}]
        return {"axis": axis, "point": point, "live": {"kernels": kernels}}

    rows = [row("loop trips", 100, 0.2), row("loop trips", 1000, 0.3)]
    rows += [row("MiB per buffer", 1, 0.1), row("MiB per buffer", 1024, 1.1)]
    lines = flatness(rows, "live")
    assert "| 1.50 | met |" in lines[0]
    assert "| 11.00 | not met |" in lines[1]
    rows.append(row("MiB per buffer", 64, None))
    assert flatness(rows, "live")[1].endswith("| - | - |")
    # runs of the same point: the median is the point's (one slow run moves nothing)
    rows = [row("loop trips", 100, s) for s in (0.1, 0.12, 0.5)]
    rows += [row("loop trips", 1000, s) for s in (0.2, 0.21, 0.19)]
    assert "100: 0.12, 1,000: 0.20 | 1.67 | met |" in flatness(rows, "live")[0]
