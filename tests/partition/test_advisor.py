"""Partition advisor: store ranges from the plugin, the split safety rule, the solver, and
real split runs on the two local PoCL devices (results checked against one device)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from clproj.intercept.record import LocalArg, from_arrays, save
from clproj.runtime.partition import advisor
from clproj.runtime.partition import safety as partition_safety
from clproj.runtime.partition.execution import SplitRunner

APPS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "benchmarks",
    "apps",
)

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
    from clproj.devices.discovery import opencl_devices

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
    from clproj.miniemu.oclgrind import OclgrindBackend

    path = save(_vecadd(256), str(tmp_path))
    out, log = str(tmp_path / "s.jsonl"), str(tmp_path / "l.log")
    env = OclgrindBackend().environment("quick", out, log)
    subprocess.run([sys.executable, "-m", "clproj.miniemu.worker", path], env=env, check=True)
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
    from clproj import miniemu

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

        max_slabs = advisor.ShareCost.max_slabs

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


# --- calibration (runtime/partition/calibration.py) ------------------------------------------

SRC_MIX = """
__kernel void xorshift_mix(__global const uint *a, __global uint *o, uint rounds) {
  uint i = get_global_id(0), x = a[i] ^ i;
  for (uint k = 0; k < rounds; ++k) { x ^= x << 13; x ^= x >> 17; x ^= x << 5; x *= 0x9E3779B1u; }
  o[i] = x;
}"""


def _mix(n: int = 64 * 256, rounds: int = 600):
    """Integer compute-bound kernel: 64 slabs, bit-identical on any device, little transfer."""
    a = np.arange(n, dtype=np.uint32) * np.uint32(2654435761)
    args = [a, np.zeros(n, np.uint32), np.uint32(rounds)]
    return from_arrays(SRC_MIX, "xorshift_mix", args, [n], [256]), a, rounds


def _mix_reference(a: np.ndarray, rounds: int) -> np.ndarray:
    x = a ^ np.arange(a.size, dtype=np.uint32)
    for _ in range(rounds):
        x ^= x << np.uint32(13)
        x ^= x >> np.uint32(17)
        x ^= x << np.uint32(5)
        x *= np.uint32(0x9E3779B1)
    return x


def test_balance_fit_and_rebalance_by_hand():
    from clproj.runtime.partition.calibration import Trial, balance, fit_line, rebalance

    # Rates 1 and 1/2 slab per unit: 2/3 and 1/3.
    assert balance([(0.0, 1.0), (0.0, 2.0)], 300) == [200, 100]
    # A fixed cost of 10 on the first device: (T - 10) + T = 100 -> T = 55.
    assert balance([(10.0, 1.0), (0.0, 1.0)], 100) == [45, 55]
    # A fixed cost larger than the other device's whole time: it gets nothing.
    assert balance([(0.0, 1.0), (200.0, 1.0)], 100) == [100, 0]
    # A device never measured keeps nothing.
    assert balance([(0.0, 1.0), None], 7) == [7, 0]
    assert fit_line([(10, 20.0), (20, 30.0)]) == (10.0, 1.0)
    # Negative slope (noise): proportional to the latest point.
    assert fit_line([(10, 30.0), (20, 20.0)]) == (0.0, 1.0)
    # One trial, the first share done at 1.0 s, the second at 2.0 s: proportional rates.
    assert rebalance([Trial([10, 10], 2.0, [1.0, 2.0])], 20) == [13, 7]
    # Two trials: the second device's line has a fixed cost of 1 s (t = 1 + 0.1 n).
    trials = [Trial([10, 10], 2.0, [1.0, 2.0]), Trial([13, 7], 1.7, [1.3, 1.7])]
    assert rebalance(trials, 20) == [15, 5]
    assert Trial([3, 0], 1.0, [1.0, 0.0]).imbalance == 0.0
    assert Trial([3, 1], 2.0, [1.0, 2.0]).imbalance == 0.5


def test_thread_limited_device_measured_here_keeps_the_core_pool(tmp_path):
    """Profiled for the first time under ``POCL_MAX_PTHREAD_COUNT=1`` (a fresh cache), the
    one-thread pthread device records the machine's cores as its pool: beside the one-core
    ``basic`` device it shares no cores on a machine of two or more (one or the other
    alone would be 2x slow, and a split would never be advised)."""
    script = (
        "import json\n"
        "from clproj.devices.discovery import opencl_devices\n"
        "from clproj.load import host_cores\n"
        "from clproj.runtime.partition import advisor\n"
        "profs = [advisor.profile_for_live_device(d, measure_missing=True)"
        " for d in opencl_devices()]\n"
        "print(json.dumps({'host': host_cores(), 'cus': [p.compute_units for p in profs],"
        " 'pools': [p.data['detail'].get('host_cores') for p in profs],"
        " 'slow': advisor.core_sharing(profs)}))\n"
    )
    env = dict(os.environ, POCL_DEVICES="pthread basic", POCL_MAX_PTHREAD_COUNT="1")
    env["CLPROJ_CACHE"] = str(tmp_path / "cache")
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["cus"] == [1, 1], got
    if got["host"] < 2:
        pytest.skip("a one-core machine: the two devices do share its core")
    assert got["pools"][0] == got["host"], got  # measured with one thread, pool recorded
    assert got["slow"] == [1.0, 1.0], got


def test_core_sharing_counts_the_host_thread_of_a_gpu():
    """A 16-core CPU device beside a GPU: the GPU's driving thread takes a core (17/16)."""
    from clproj.runtime.projection import device_set

    profs = device_set.resolve("nvidia-h100-80gb-hbm3-nvidia,pocl-cpu-intel-r-xeon-r-processor")
    assert advisor.core_sharing(profs) == [
        1.0,
        (profs[1].compute_units + 1) / profs[1].compute_units,
    ]


def test_calibrate_pthread_basic_chooses_consistently_and_output_is_identical():
    """In this process (pthread 2 threads + basic): whatever the machine's load, the choice
    follows the measurements, and the balanced split's merged output is the single run's."""
    devs, profs = _local_pair()
    rec, a, rounds = _mix()
    adv = advisor.advise(rec, profs)
    assert adv.safety.ok and adv.safety.slabs == 64
    cal = advisor.calibrate(rec, adv, devs, repeat=2, max_rounds=2, trial_runs=1)
    assert sum(cal.counts) == 64 and sum(cal.split_counts) == 64
    assert cal.prior_counts == advisor.prior_counts(adv) and min(cal.prior_counts) >= 1
    assert 1 <= len(cal.trials) <= 2 and cal.runs == 1 + len(cal.trials) + 2 * (
        len(devs) + (cal.split_s is not None)
    )
    for t in cal.trials:
        assert all(f > 0 for f, n in zip(t.finish_s, t.counts, strict=True) if n)
    best = min(range(2), key=lambda i: cal.single_s[i])
    assert cal.best_single == best
    if cal.split:
        assert cal.gain >= 1.03 and cal.counts == cal.split_counts
    else:
        assert cal.counts == [64 if i == best else 0 for i in range(2)]
    res = advisor.execute_split(rec, adv, devs, counts=cal.split_counts, repeat=1, warmup=0)
    assert res.identical
    np.testing.assert_array_equal(
        np.frombuffer(res.outputs[1], np.uint32), _mix_reference(a, rounds)
    )


CAL_PTHREAD1 = """
import json, sys
import numpy as np
sys.path.insert(0, {root!r})
from tests.partition.test_advisor import _local_pair, _mix
from clproj.runtime.partition import advisor
devs, profs = _local_pair()
rec, a, rounds = _mix()
adv = advisor.advise(rec, profs)
cal = advisor.calibrate(rec, adv, devs, repeat=1)
res = advisor.execute_split(rec, adv, devs, counts=cal.split_counts, repeat=1, warmup=0)
print(json.dumps({{"cus": [d.max_compute_units for d in devs], "cal": cal.to_dict(),
                   "identical": res.identical}}))
"""


def test_calibrate_pthread1_basic_converges_between_the_extremes(tmp_path):
    """pthread limited to one thread + basic: two one-core devices on a two-core host, so the
    balanced split gives each a real share (neither 0 % nor 100 %), the shares' finish times
    converge, and the merged output is bit-identical to the single-device run."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "POCL_DEVICES": "pthread basic", "POCL_MAX_PTHREAD_COUNT": "1"}
    script = tmp_path / "cal.py"
    script.write_text(CAL_PTHREAD1.format(root=root))
    out = subprocess.run(
        [sys.executable, str(script)], env=env, cwd=root, capture_output=True, text=True
    )
    if "needs POCL_DEVICES" in out.stderr or "no measured profile" in out.stderr:
        pytest.skip("needs the two local PoCL devices with measured profiles")
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["cus"] == [1, 1]
    cal = got["cal"]
    n0 = cal["split_counts"][0]
    assert 0 < n0 < 64, cal
    assert got["identical"]
    last = cal["trials"][-1]
    assert last["finish_s"][0] > 0 and last["finish_s"][1] > 0
