"""Partition advisor: store ranges from the plugin, the split safety rule, the solver, and
real split runs on the two local PoCL devices (results checked against one device)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from intercept.record import LocalArg, from_arrays, save
from runtime import advisor, partition_safety
from runtime.partition_exec import SplitRunner

APPS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks", "apps")

SRC_BAD = {
    "fixed_slot": "__kernel void fixed_slot(__global float *o) "
    "{ o[get_global_id(0) % 64] = (float)get_global_id(0); }",
    "by_group": """
__kernel void by_group(__global const float *a, __global float *o, __local float *l) {
  int lid = get_local_id(0);
  l[lid] = a[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) { float s = 0; for (int i = 0; i < 64; ++i) s += l[i]; o[get_group_id(0)] = s; }
}""",
    "hist": "__kernel void hist(__global const uint *a, __global uint *h) "
    "{ atomic_inc(&h[a[get_global_id(0)] % 8]); }",
    "stride_loop": """
__kernel void stride_loop(__global float *o, uint n) {
  for (uint i = get_global_id(0); i < n; i += get_global_size(0)) o[i] = 1.0f;
}""",
    "reversed": """
__kernel void reversed(__global const float *a, __global float *o, uint n) {
  uint i = get_global_id(0); o[n - 1 - i] = 2.0f * a[i];
}""",
}


def _src(name: str) -> str:
    with open(os.path.join(APPS, name), encoding="utf-8") as fh:
        return fh.read()


def _vecadd(n: int = 4096):
    rng = np.random.default_rng(1)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    return from_arrays(_src("vecadd.cl"), "vecadd", [a, b, np.zeros(n, np.float32)], [n], [64])


def _matmul(n: int = 64):
    rng = np.random.default_rng(2)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    args = [a, b, np.zeros((n, n), np.float32), np.uint32(n)]
    return from_arrays(_src("matmul_gmem.cl"), "matmul_gmem", args, [n, n], [16, 16]), a, b


def _local_pair():
    from devices.discovery import opencl_devices

    by = {d.name.strip().split("-")[0]: d for d in opencl_devices()}
    if "pthread" not in by or "basic" not in by:
        pytest.skip("needs POCL_DEVICES='pthread basic'")
    devs = [by["pthread"], by["basic"]]
    profs = [advisor.profile_for_live_device(d) for d in devs]
    if None in profs:
        pytest.skip("no measured profile for the local PoCL devices")
    return devs, profs


def test_plugin_reports_store_ranges_per_group(tmp_path):
    """Quick mode, vecadd of 4096 floats in groups of 64: group 0 writes bytes [0, 256) of
    argument 2 and loads 256 bytes from 0 and 1; the last group writes the last 256 bytes."""
    groups = partition_safety.emulate_store_ranges(_vecadd())
    assert len(groups) >= 2
    by_index = {g["group_index"]: g["store_ranges"] for g in groups}
    first, last = by_index[0], by_index[63]
    out = {r["arg"]: r for r in first}
    assert out[2]["lo"] == 0 and out[2]["hi"] == 256 and out[2]["store_bytes"] == 256
    assert out[0]["load_bytes"] == 256 and out[0]["hi"] == 0  # read, never written
    assert {r["arg"]: r for r in last}[2]["lo"] == 4096 * 4 - 256


def test_plugin_store_ranges_off_by_default(tmp_path):
    """Without CLPROJ_STORE_RANGES the plugin output has no store_ranges (no cost, no change)."""
    from miniemu.oclgrind import OclgrindBackend

    path = save(_vecadd(256), str(tmp_path))
    out, log = str(tmp_path / "s.jsonl"), str(tmp_path / "l.log")
    env = OclgrindBackend().environment("quick", out, log)
    subprocess.run([sys.executable, "-m", "miniemu.worker", path], env=env, check=True)
    with open(out, encoding="utf-8") as fh:
        lines = [json.loads(line) for line in fh if line.strip()]
    assert lines and all("store_ranges" not in g for g in lines)


def test_safety_accepts_1d_and_2d_row_slabs():
    s = partition_safety.check(_vecadd())
    assert s.ok, s.reason
    assert (s.dim, s.slabs, s.groups_per_slab) == (0, 64, 1)
    (w,) = s.written
    assert (w.arg, w.lo0, w.hi0, w.stride, w.dense, w.read) == (2, 0, 256, 256, True, False)
    assert w.region(10, 5, 16384) == (2560, 3840)
    rec, _, _ = _matmul()
    s = partition_safety.check(rec)
    assert s.ok, s.reason
    # 64x64 floats, 16x16 groups: a slab is one row of 4 groups = 16 rows of 256 bytes.
    assert (s.dim, s.slabs, s.groups_per_slab) == (1, 4, 4)
    assert (s.written[0].stride, s.written[0].hi0, s.written[0].dense) == (4096, 4096, True)
    assert s.read_args == [0, 1]


@pytest.mark.parametrize(
    ("kernel", "make_args", "size", "local", "why"),
    [
        ("fixed_slot", lambda: [np.zeros(64, np.float32)], 1024, 64, "moves with the slab"),
        (
            "by_group",
            lambda: [np.ones(1024, np.float32), np.zeros(16, np.float32), LocalArg(256)],
            1024,
            64,
            "moves with the slab",  # get_group_id restarts at 0 in every sub-launch
        ),
        (
            "hist",
            lambda: [np.arange(1024, dtype=np.uint32), np.zeros(8, np.uint32)],
            1024,
            64,
            "(atomics)",
        ),
        (
            "stride_loop",
            lambda: [np.zeros(4096, np.float32), np.uint32(4096)],
            1024,
            64,
            "sub-size",
        ),
    ],
)
def test_safety_refuses_overlapping_or_group_relative_writes(kernel, make_args, size, local, why):
    rec = from_arrays(SRC_BAD[kernel], kernel, make_args(), [size], [local])
    s = partition_safety.check(rec)
    assert not s.ok
    assert why in s.reason


def test_safety_accepts_negative_stride():
    n = 1024
    args = [np.arange(n, dtype=np.float32), np.zeros(n, np.float32), np.uint32(n)]
    s = partition_safety.check(from_arrays(SRC_BAD["reversed"], "reversed", args, [n], [64]))
    assert s.ok, s.reason
    assert s.written[0].stride == -256
    assert s.written[0].region(0, 2, n * 4) == (n * 4 - 512, n * 4)


def test_share_profile_scales_with_slabs():
    import miniemu

    rec = _vecadd()
    prof = miniemu.emulate(rec, "single").to_dict()
    safety = partition_safety.check(rec)
    sub = advisor.share_profile(prof, safety, 16)
    assert sub["launch"]["num_groups"] == 16
    assert sub["launch"]["global_size"] == [1024]
    assert sub["total"]["global"]["store_bytes"] == prof["total"]["global"]["store_bytes"] // 4


def test_solver_balances_and_core_sharing():
    """Synthetic costs: device A twice as fast as B -> about 2/3 of the slabs on A."""

    class Lin:
        def __init__(self, per_slab: float, fixed: float) -> None:
            self.per, self.fixed = per_slab, fixed

        def time(self, n: int) -> float:
            return 0.0 if n == 0 else self.fixed + self.per * n

        max_slabs = advisor._ShareCost.max_slabs

    counts = advisor.solve([Lin(1.0, 0.0), Lin(2.0, 0.0)], 300)
    assert counts == [200, 100]
    # A large fixed cost (transfers) on B: everything goes to A.
    assert advisor.solve([Lin(1.0, 0.0), Lin(2.0, 1000.0)], 300) == [300, 0]


def test_core_sharing_of_colocated_cpu_devices():
    _, profs = _local_pair()
    slow = advisor.core_sharing(profs)
    pool = max(p.data.get("detail", {}).get("host_cores") or p.compute_units for p in profs)
    demand = sum(p.compute_units for p in profs)
    assert slow == [max(1.0, demand / pool)] * 2


def test_advise_and_execute_split_matmul_matches_single_device():
    devs, profs = _local_pair()
    rec, a, b = _matmul(64)
    adv = advisor.advise(rec, profs)
    assert adv.safety.ok
    assert sum(adv.slab_counts) == 4 and adv.split_s is not None
    assert adv.best_single in adv.single_s and adv.explanation
    # Whatever the advice, run an uneven split for real: 3 slabs on pthread, 1 on basic.
    runner = SplitRunner(rec, adv.safety, adv.upload_args, devs)
    res = runner.execute([3, 1], repeat=1, warmup=0)
    assert res.matches and res.reference_wall_s is not None
    c = np.frombuffer(res.outputs[2], dtype=np.float32).reshape(64, 64)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)
    # And the advised one through the public API.
    res2 = advisor.execute_split(rec, adv, devs, repeat=1, warmup=0)
    assert res2.matches and sum(res2.counts) == 4


def test_execute_split_vecadd_write_only_output_not_uploaded():
    devs, profs = _local_pair()
    rec = _vecadd()
    adv = advisor.advise(rec, profs)
    assert adv.upload_args == [0, 1]  # c is written densely and never read
    res = SplitRunner(rec, adv.safety, adv.upload_args, devs).execute([40, 24], repeat=1, warmup=0)
    assert res.identical
    a = np.frombuffer(rec.buffer_bytes(0), np.float32)
    b = np.frombuffer(rec.buffer_bytes(1), np.float32)
    np.testing.assert_array_equal(np.frombuffer(res.outputs[2], np.float32), a + b)


def test_cli_refuses_unsafe_split_with_reason(tmp_path):
    from clproj.cli import main

    rec = from_arrays(SRC_BAD["fixed_slot"], "fixed_slot", [np.zeros(64, np.float32)], [1024], [64])
    path = save(rec, str(tmp_path))
    assert main(["advise-partition", path, "--devices", "pocl-pthread-amd-epyc"]) == 0
    _local_pair()
    assert main(["advise-partition", path, "--execute"]) == 2
