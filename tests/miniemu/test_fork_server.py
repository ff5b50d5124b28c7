"""The emulator's fork server (miniemu.fork_server): runs forked from a template (the launch
prepared once) count exactly what whole runs count, fail with the template's error where
it cannot prepare the launch, keep an Oclgrind log of their own, and end with it."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from clproj.errors import ClprojError
from clproj.intercept.record import from_arrays, save
from clproj.miniemu.extrapolate import scalar_changes, with_scalar
from clproj.miniemu.oclgrind import OclgrindBackend, WorkerServer

SRC = """
__kernel void rowsum(__global const float *x, __global float *y, int n) {
  int i = get_global_id(0);
  float acc = 0.0f;
  for (int k = 0; k < n; ++k) acc += x[(i * 64 + k) & 4095];
  y[i] = acc;
}
__kernel void spin(__global const uint *x, __global uint *y) {
  uint v = x[get_global_id(0)], k = 0;
  while (v != 7u) { v = v * 1664525u + 1013904223u; ++k; }
  y[get_global_id(0)] = k;
}
__kernel void past_the_end(__global const float *x, __global float *y) {
  int i = get_global_id(0);
  y[i] = x[i + 256];
}
"""
X = np.random.default_rng(3).random(4096, dtype=np.float32)


def limits(instructions: int, wall_s: float = 30.0) -> dict[str, str]:
    return {
        "CLPROJ_STATS_MAX_WORK_ITEMS": "128",
        "CLPROJ_STATS_MAX_INSTRUCTIONS": str(instructions),
        "CLPROJ_STATS_BUDGET_S": str(wall_s),
    }


def counts(raw) -> tuple:
    return [g.stats for g in raw.groups], raw.instructions_executed, raw.stop_reason


def descendants(pid: int) -> list[int]:
    """Live processes below ``pid`` (children, grandchildren, ...)."""
    parent = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parent[int(entry)] = int(fields[1])
    out, frontier = [], {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier}
        out += sorted(frontier)
    return out


def test_runs_forked_from_a_template_count_what_whole_runs_count(tmp_path):
    """An attempt, a scout (a smaller instruction budget) and loop probes (the knob, a
    scalar argument, set anew): from the template as from the record itself."""
    base = from_arrays(SRC, "rowsum", [X, np.zeros(256, np.float32), np.int32(3000)], [256], [64])
    variants = [(base, 2_000_000), (base, 16384)] + [
        (with_scalar(base, 2, n), 2_000_000) for n in (33, 65, 97)
    ]
    with WorkerServer(OclgrindBackend(), "bounded") as server:
        template = server.template(save(base, str(tmp_path / "base")))
        for i, (rec, budget) in enumerate(variants):
            whole = server.result(
                server.submit(save(rec, str(tmp_path / f"v{i}")), limits(budget)), 120
            )
            changes = scalar_changes(base, rec)
            assert changes is not None
            forked = server.result(server.submit_from(template, changes, limits(budget)), 120)
            assert counts(forked) == counts(whole), (i, budget)
        assert {r.stop_reason for r in (whole, forked)} == {""}  # the probes end within it


def test_scalar_changes_name_only_what_a_template_can_set():
    base = from_arrays(SRC, "rowsum", [X, np.zeros(256, np.float32), np.int32(3000)], [256], [64])
    assert scalar_changes(base, base) == {}
    assert scalar_changes(base, with_scalar(base, 2, 40)) == {2: np.int32(40).tobytes()}
    other = from_arrays(SRC, "rowsum", [X, np.zeros(256, np.float32), np.int32(3000)], [512], [64])
    assert scalar_changes(base, other) is None  # another NDRange
    more = from_arrays(
        SRC, "rowsum", [X * 2, np.zeros(256, np.float32), np.int32(3000)], [256], [64]
    )
    assert scalar_changes(base, more) is None  # another buffer


def test_a_template_that_cannot_prepare_the_launch_fails_its_runs_with_its_error(tmp_path):
    rec = from_arrays(SRC, "rowsum", [X, np.zeros(256, np.float32), np.int32(30)], [256], [64])
    rec.source = SRC.replace("acc += x", "acc += undeclared + x")
    with WorkerServer(OclgrindBackend(), "bounded") as server:
        template = server.template(save(rec, str(tmp_path / "bad")))
        runs = [server.submit_from(template, {}, limits(16384)) for _ in range(2)]
        for run in runs:
            with pytest.raises(ClprojError, match=r"building rowsum .* failed"):
                server.result(run, 120)


def test_a_run_from_a_template_keeps_its_own_log(tmp_path):
    """Oclgrind opens its log when the template makes the context; each run's file holds
    what that run logged (a read past a buffer's end) and not another run's."""
    rec = from_arrays(SRC, "past_the_end", [X[:256].copy(), np.zeros(256, np.float32)], [256], [64])
    with WorkerServer(OclgrindBackend(), "bounded") as server:
        template = server.template(save(rec, str(tmp_path / "oob")))
        first = server.result(server.submit_from(template, {}, limits(16384)), 120)
        second = server.result(server.submit_from(template, {}, limits(16384)), 120)
    assert "Invalid read" in first.log
    assert first.log.count("Invalid read") == second.log.count("Invalid read")


def test_a_killed_template_ends_its_runs(tmp_path):
    seeds = np.full(256, 8, np.uint32)  # spins until its wall budget, far away
    rec = from_arrays(SRC, "spin", [seeds, np.zeros(256, np.uint32)], [256], [256])
    with WorkerServer(OclgrindBackend(), "bounded") as server:
        template = server.template(save(rec, str(tmp_path / "spin")))
        run = server.submit_from(template, {}, limits(10**12, wall_s=300))
        deadline = time.monotonic() + 60
        while len(descendants(server.proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # the template, then its run
        assert len(descendants(server.proc.pid)) >= 2
        server.cancel(template)
        assert server.wait_any([run], 30) is run and run.status is not None and run.status < 0
        deadline = time.monotonic() + 10
        while descendants(server.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not descendants(server.proc.pid)


def test_a_run_asked_of_a_dead_template_fails_and_the_server_goes_on(tmp_path):
    rec = from_arrays(SRC, "rowsum", [X, np.zeros(256, np.float32), np.int32(30)], [256], [64])
    path = save(rec, str(tmp_path / "r"))
    with WorkerServer(OclgrindBackend(), "bounded") as server:
        template = server.template(path)
        server.result(server.submit_from(template, {}, limits(16384)), 120)
        server.cancel(template)
        assert server.wait_any([template], 30) is template
        with pytest.raises(ClprojError, match="signal 9"):
            server.result(server.submit_from(template, {}, limits(16384)), 120)
        assert server.result(server.submit(path, limits(16384)), 120).instructions_executed > 0
