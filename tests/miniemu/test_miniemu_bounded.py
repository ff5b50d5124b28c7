"""Bounded mini-emulation: work-item sampling, SCEV loop extrapolation, budget fallback, reuse."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from clproj import miniemu
from clproj.intercept.record import from_arrays
from clproj.miniemu.bounded import Budget
from clproj.miniemu.extrapolate import KNOB_MODULUS, congruent
from clproj.miniemu.reuse import ReuseCache
from clproj.miniemu.scev import eval_scev

SRC = """
__kernel void heavy(__global const float *x, __global float *y, int n, float a) {
  int i = get_global_id(0);
  float acc = x[i];
  for (int k = 0; k < n; ++k) acc = acc * a + x[(i + k) & 4095];
  y[i] = acc;
}
__kernel void spin(__global const uint *x, __global uint *y) {
  uint v = x[get_global_id(0)], k = 0;
  while (v != 7u) { v = v * 1664525u + 1013904223u; ++k; }
  y[get_global_id(0)] = k;
}
"""
X = np.arange(4096, dtype=np.float32)


def rec(n: int, gsize: int = 4096):
    return from_arrays(SRC, "heavy", [X, X.copy(), np.int32(n), np.float32(0.5)], [gsize], [256])


def instr(p) -> int:
    return sum(p.total["instructions"].values())


def tx(p) -> int:
    t = p.total["global"]["transactions"]
    return sum(c for d in t.values() for w in d.values() for c in w.values())


def test_eval_scev_signed_and_unsigned():
    e = {"op": "smax", "bits": 32, "ops": [{"c": 0, "bits": 32}, {"arg": 2, "bits": 32}]}
    assert eval_scev(e, {2: 1000}) == 1000
    assert eval_scev(e, {2: (-5) & 0xFFFFFFFF}) == 0
    assert Budget.parse("wall=2,instructions=1e6").instructions == 1_000_000


def test_sampled_and_loop_extrapolated_agree_with_single():
    small = miniemu.emulate(rec(20), mode="bounded")
    assert small.emulation["method"] == "sampled-work-items"
    assert small.emulation["work_items_emulated"] == 128
    ref = miniemu.emulate(rec(20), mode="single")
    assert abs(instr(small) - instr(ref)) <= 0.01 * instr(ref)
    assert abs(tx(small) - tx(ref)) <= 0.01 * tx(ref)
    big = miniemu.emulate(rec(2000), mode="bounded", budget="instructions=300000")
    assert big.emulation["method"] == "loop-extrapolated"
    assert big.emulation["loop_extrapolation"]["knob_argument"] == 2
    ref = miniemu.emulate(rec(2000), mode="single")
    assert abs(instr(big) - instr(ref)) <= 0.02 * instr(ref)
    assert abs(tx(big) - tx(ref)) <= 0.02 * tx(ref)


def test_data_dependent_loop_falls_back_with_low_confidence():
    seeds = np.full(256, 8, np.uint32)  # never reaches 7 quickly: budget stops it
    r = from_arrays(SRC, "spin", [seeds, np.zeros(256, np.uint32)], [256], [256])
    p = miniemu.emulate(r, mode="bounded", budget="wall=2,instructions=200000")
    assert p.emulation["method"] == "budget-extrapolated"
    assert p.emulation["confidence"] == "low"
    assert p.emulation["wall_s"] < 10


def test_reuse_scales_and_counts_emulations():
    calls = []

    def counting(record, **kw):
        calls.append(record.global_size[0])
        return miniemu.emulate(record, **kw)

    cache = ReuseCache(mode="bounded", emulate=counting)
    sizes = [4096, 4096, 3840, 3584, 3328, 2048, 1024]
    profiles = [cache.profile(rec(20, g)) for g in sizes]
    assert profiles[1].emulation["method"] == "reused"
    assert profiles[1].total["work_items"] == 4096
    assert profiles[2].total["work_items"] == 3840
    assert cache.stats()["launches"] == len(sizes)
    assert len(calls) < len(sizes)
    assert profiles[-1].emulation["method"] != "reused" or len(calls) >= 2
    # a different loop bound is its own entry
    cache.profile(rec(40))
    assert cache.stats()["entries"] == 2


LU_SRC = """
__kernel void upd(__global float *a, int n, int k) {
  int j = k + 1 + get_global_id(0), i = k + 1 + get_global_id(1);
  if (j < n) a[i * n + j] -= a[i * n + k] * a[k * n + j];
}
"""


def lu_meta(n: int, k: int, local: bool = True):
    """A buffer-less launch record of LU's update step at pivot k (as the shim sees it)."""
    from clproj.intercept.record import ArgRecord, LaunchRecord

    m = n - k - 1
    gx = -(-m // 64) * 64
    args = [
        ArgRecord(0, "buffer", size=4 * n * n),
        ArgRecord(1, "scalar", data=np.int32(n).tobytes()),
        ArgRecord(2, "scalar", data=np.int32(k).tobytes()),
    ]
    return LaunchRecord("upd", LU_SRC, "", args, 2, [gx, m], [64, 1] if local else None)


def test_plan_snapshots_a_shrinking_ndrange_a_logarithmic_number_of_times():
    """1023 launches of 1023 shapes: the first, one per 2x of size, sampled checks."""
    for local in (True, False):  # a NULL local size is one family too, not one per size
        cache = ReuseCache()
        plans = [cache.plan(lu_meta(1024, k, local)) for k in range(1023)]
        recorded = [k for k, p in enumerate(plans) if p == "record"]
        # size range 65472 / 64 = 2^10: <= 11 size anchors + checks at reuses 2, 8, 32,
        # 128, 512 + the first launch
        assert recorded[0] == 0 and 10 <= len(recorded) <= 17, recorded
        st = cache.stats()
        assert st["families"] == 1 and st["launches"] == 1023
        assert st["reuses"] + len(recorded) == 1023


def test_reused_launches_are_interpolated_between_anchors():
    """Padded rows make per-work-item work linear in the size: anchors at m=31 and m=7
    answer m=15 exactly, where scaling one anchor is off by half."""
    x = np.ones(64 * 64, np.float32)

    def full(k):
        meta = lu_meta(64, k)
        return from_arrays(LU_SRC, "upd", [x, np.int32(64), np.int32(k)], meta.global_size, [64, 1])

    cache = ReuseCache(mode="bounded")
    cache.seed(full(32), miniemu.emulate(full(32), mode="bounded"))  # m = 31
    cache.seed(full(56), miniemu.emulate(full(56), mode="bounded"))  # m = 7
    direct = miniemu.emulate(full(48), mode="bounded")  # m = 15
    reused = cache.scaled(lu_meta(64, 48))
    assert reused.emulation["method"] == "reused" and "interpolated_from" in reused.emulation
    assert abs(instr(reused) - instr(direct)) <= 0.02 * instr(direct)
    one = ReuseCache(mode="bounded")
    one.seed(full(32), miniemu.emulate(full(32), mode="bounded"))
    assert abs(instr(one.scaled(lu_meta(64, 48))) - instr(direct)) > 0.2 * instr(direct)


GATED_SRC = """
__kernel void gated(__global const float *a, __global float *x, __global const float *y, int n) {
  int i = get_global_id(0);
  if (i < n)
    for (int j = 0; j < n; j++) x[i] += a[j * n + i] * y[j];
}
"""


def test_counted_budget_gives_the_same_profile_on_any_machine():
    """The plugin stops at the instruction budget, counted: two runs give one profile, and
    a wall-clock backstop that does not fire changes nothing (a wall budget would stop the
    run at a load-dependent point)."""
    seeds = np.full(256, 8, np.uint32)
    r = from_arrays(SRC, "spin", [seeds, np.zeros(256, np.uint32)], [256], [256])
    a = miniemu.emulate(r, mode="bounded", budget="instructions=200000")
    b = miniemu.emulate(r, mode="bounded", budget="wall=45,instructions=200000")
    assert a.emulation["budget"] == b.emulation["budget"] == "instructions"
    assert a.total == b.total
    scout = a.emulation.get("speculation", {}).get("scout_instructions", 0)
    assert 200_000 <= a.emulation["instructions_emulated"] - scout < 200_000 + 4096 * 2
    assert a.emulation["budget_limits"]["instructions"] == 200_000


def test_wall_backstop_marks_the_profile_and_is_not_cached(tmp_path, monkeypatch):
    seeds = np.full(256, 8, np.uint32)
    r = from_arrays(SRC, "spin", [seeds, np.zeros(256, np.uint32)], [256], [256])
    p = miniemu.emulate(r, mode="bounded", budget="wall=0.05,instructions=1e12")
    assert p.emulation["budget"] == "wall" and p.emulation["stop_reason"] == "time-budget"
    assert p.emulation["confidence"] == "low"
    assert any("wall-clock backstop" in f for f in p.emulation["flags"])

    from clproj.devices.profile import known_profiles
    from clproj.runtime.projection import live

    monkeypatch.setenv("CLPROJ_CACHE", str(tmp_path))
    devices = [d for d in known_profiles() if d.source_kind != "spec"][:1]
    doc = live.project_record(r, devices, "bounded", profile=p.to_dict())
    assert doc["projections"] and doc["profile"]["emulation"]["budget"] == "wall"
    assert not os.listdir(live.cache_dir())  # a load-dependent profile is not cached


def test_probes_that_change_the_active_work_items_are_rejected():
    """`if (i < n) for (j < n)`: probing n = 16..48 also runs the loop in only 16..48 of
    the sampled work-items; the counted loop entries differ, so the probes are not used
    (their fit gave 0.37x the instructions of PolyBench gemver_kernel2)."""
    n = 1500
    a = np.ones(n * n, np.float32)
    r = from_arrays(
        GATED_SRC,
        "gated",
        [a, np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)],
        [256],
        [256],
    )
    p = miniemu.emulate(r, mode="bounded", budget="instructions=300000")
    assert p.emulation["method"] == "budget-extrapolated"
    assert any("how many work-items reach loop" in f for f in p.emulation["flags"])
    ref = miniemu.emulate(r, mode="single", timeout_s=300)
    assert abs(instr(p) - instr(ref)) <= 0.02 * instr(ref)
    again = miniemu.emulate(r, mode="bounded", budget="instructions=300000")
    assert again.total == p.total


STRIDED_SRC = """
__kernel void rows(__global const float *a, __global const float *x, __global float *t,
                   int nx, int ny) {
  int i = get_global_id(0);
  if (i < nx)
    for (int j = 0; j < ny; j++) t[i] += a[i * ny + j] * x[j];
}
"""


def test_probes_keep_a_row_stride_knob_coalescing_like_the_launch():
    """PolyBench atax_kernel1: the knob ny is also the row stride of the warp's accesses.
    Probes >= 32 trips keep rows >= 128 B apart, so the transactions agree with the whole
    group; probed at 16..48 the 128-byte ones came out 1.41x (atax at 8192)."""
    nx, ny = 64, 3000
    a, x, t = np.ones(nx * ny, np.float32), np.ones(ny, np.float32), np.zeros(nx, np.float32)
    r = from_arrays(STRIDED_SRC, "rows", [a, x, t, np.int32(nx), np.int32(ny)], [nx], [32])
    p = miniemu.emulate(r, mode="bounded", budget="instructions=300000")
    assert p.emulation["method"] == "loop-extrapolated"
    assert min(p.emulation["loop_extrapolation"]["probe_trips"]) >= 32
    ref = miniemu.emulate(r, mode="single", timeout_s=300)
    got, want = p.total["global"]["transactions"], ref.total["global"]["transactions"]
    for d in want:
        for w in want[d]:
            for s in want[d][w]:
                assert abs(got[d][w][s] - want[d][w][s]) <= 0.02 * want[d][w][s], (d, w, s)


def test_probe_values_keep_the_launchs_residue_modulo_a_line():
    """Knob values move to the launch's residue modulo 32 elements, each >= 32, and stay
    as planned where that would merge two of them or pass the launch's own value."""
    assert congruent([42, 84, 127], 1000) == [40, 72, 136]
    assert congruent([42, 84, 127], 4096) == [32, 96, 128]
    assert congruent([42, 84, 127], 3007) == [63, 95, 127]
    assert congruent([5, 6, 7], 1000) == [5, 6, 7]
    assert congruent([42, 84, 127], 100) == [42, 84, 127]
    assert all(v % KNOB_MODULUS == 3000 % KNOB_MODULUS for v in congruent([40, 80, 120], 3000))


TRIANGLE = """
__kernel void covar(__global float *sym, __global const float *data, int m, int n) {
  int j1 = get_global_id(0);
  if (j1 < m) {
    for (int j2 = j1; j2 < m; j2++) {
      sym[j1 * m + j2] = 0.0f;
      for (int i = 0; i < n; i++) sym[j1 * m + j2] += data[i * m + j1] * data[i * m + j2];
      sym[j2 * m + j1] = sym[j1 * m + j2];
    }
  }
}
"""


def test_trip_counts_that_read_the_work_item_id_are_averaged_over_the_launch():
    """PolyBench covariance's nest: the outer trip count is m - j1 with j1 the global id.
    The emulated work-items (group 0) have the longest trips, and before the plugin named
    get_global_id the count was not derivable: the profile was the budget's (134x short on
    the real app). Now the nest is averaged over the launch's ids."""
    from clproj.miniemu.scev import mean_nest_trips, scev_ids

    outer = {
        "exact": {
            "op": "add",
            "bits": 32,
            "ops": [
                {"op": "mul", "bits": 32, "ops": [{"c": -1, "bits": 32}, {"gid": 0, "bits": 32}]},
                {"op": "smax", "bits": 32, "ops": [{"gid": 0, "bits": 32}, {"arg": 2, "bits": 32}]},
            ],
        }
    }
    inner = {
        "exact": {"op": "smax", "bits": 32, "ops": [{"c": 0, "bits": 32}, {"arg": 3, "bits": 32}]}
    }
    assert scev_ids(outer["exact"]) == {0} and not scev_ids(inner["exact"])
    assert eval_scev(outer["exact"], {2: 100}, {0: 30}) == 70
    m, n = 4096, 300
    exact = sum((m - j + 1) * (n + 1) for j in range(m)) / m
    got = mean_nest_trips([inner, outer], {2: m, 3: n}, "exact", [m])
    assert abs(got - exact) <= 1e-3 * exact
    assert mean_nest_trips([inner], {3: n}, "exact", [m]) == n + 1  # no id: the plain product


def test_an_unrotated_ancestor_enters_its_child_once_per_trip_not_per_header():
    """A loop whose header tests the exit (``header_exits``, the plugin's loops.cpp) runs
    its body, and the loop nested in it, once less per entry than its header executes."""
    from clproj.miniemu.scev import mean_nest_trips

    inner = {"exact": {"c": 256, "bits": 32}}  # 257 header executions per entry
    outer = {"exact": {"c": 4, "bits": 32}, "header_exits": True}  # 5 headers, 4 bodies
    assert mean_nest_trips([inner, outer], {}, "exact", [64]) == 257 * 4
    rotated = {"exact": {"c": 3, "bits": 32}, "header_exits": False}  # 4 headers, 4 bodies
    assert mean_nest_trips([inner, rotated], {}, "exact", [64]) == 257 * 4
    assert mean_nest_trips([outer], {}, "exact", [64]) == 5  # the loop itself: its headers


FUSED = """
#define ITERS 3000
__kernel void fused(__global float *g, float seed) {
    int idx = get_global_id(0);
    for (int k = 0; k < 4; k++) {
        float t = g[idx + k * get_global_size(0)];
        for (int i = 0; i < ITERS; i++)
            t = t * t + seed;
        if (t == -1.0f)
            g[idx] = t;
    }
}
"""


def test_a_nest_in_a_constant_outer_loop_is_extrapolated_to_its_exact_count():
    """mixbench's fused kernel: a compute loop of a constant trip count (no argument sets it,
    so no probes) inside a loop of 4. The budget stops inside the first work-items and the
    statistics are scaled by the nest's trips per work-item: 4 x 3,001 header executions of
    the compute loop, not 5 x 3,001 (its parent's header runs once more than its body),
    which would count every multiply-add 25 % too often (the V100 1.2x slow on mixbench)."""
    g = np.random.default_rng(2).random(4 * 1024, dtype=np.float32)
    r = from_arrays(FUSED, "fused", [g, np.float32(0.5)], [1024], [256])
    p = miniemu.emulate(r, mode="bounded", budget="instructions=400000")
    assert p.emulation["method"] == "budget-extrapolated"
    exact = 1024 * 4 * 3000
    fmas = p.total["instructions"]["fp32_fma"] + p.total["instructions"].get("fp32_mul", 0)
    assert abs(fmas - exact) <= 0.02 * exact, (fmas, exact)


def test_triangular_nest_is_budget_extrapolated_to_the_whole_launch():
    m, n = 512, 128
    data = np.random.default_rng(1).random((n, m), dtype=np.float32)
    sym = np.zeros((m, m), np.float32)
    r = from_arrays(TRIANGLE, "covar", [sym, data, np.int32(m), np.int32(n)], [m], [256])
    p = miniemu.emulate(r, mode="bounded", budget="instructions=400000")
    assert p.emulation["method"] == "budget-extrapolated"
    assert any("mean over the launch's work-item ids" in f for f in p.emulation["flags"])
    fmas = p.total["instructions"]["fp32_fma"] + p.total["instructions"].get("fp32_mul", 0)
    exact = n * m * (m + 1) // 2  # one multiply-add per inner trip
    assert 0.8 * exact <= fmas <= 1.25 * exact, (fmas, exact)


def test_emulations_in_a_shared_server_block_fork_from_one_server_and_match():
    """``clproj run`` holds one fork server for all its emulations (miniemu.oclgrind.
    shared_server): emulations from two threads at once fork from it, each ends its own
    scout and probes, the profiles are those of a server of their own, and the server
    ends with the block."""
    from concurrent.futures import ThreadPoolExecutor

    from clproj.miniemu.oclgrind import shared_server
    from tests.conftest import emulators_of, running

    def bounded(n: int):
        return miniemu.emulate(rec(n), mode="bounded", budget="instructions=300000")

    alone = [bounded(n) for n in (20, 2000)]
    # another test's server may live on in this process (an app hook's thread holds one
    # for as long as the process): it is not this block's
    before = set(emulators_of(os.getpid()))
    with shared_server():
        (server,) = set(emulators_of(os.getpid())) - before
        with ThreadPoolExecutor(2) as pool:
            shared = list(pool.map(bounded, (20, 2000)))
        assert set(emulators_of(os.getpid())) - before == {server}  # no server of their own
        # no scout or probe left running: killed as their emulation returned, gone soon
        deadline = time.monotonic() + 5.0
        while emulators_of(server) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not emulators_of(server)  # its forks
    assert not running(server)
    for a, b in zip(alone, shared, strict=True):
        assert a.emulation["method"] == b.emulation["method"]
        assert a.total == b.total


@pytest.mark.parametrize("how", ["thread at nice 19", "runs_at_nice(19)"])
def test_a_shared_servers_run_yields_as_the_thread_that_asked_for_it(how: str) -> None:
    """Live emulation beside an app asks for nice-19 runs (runtime.projection.live_run,
    through ``runs_at_nice``, its own thread staying at its priority); a thread at nice 19
    gets them too. The shared server was started at the caller's priority, so the run
    lowers its own."""
    import threading

    from clproj.miniemu.oclgrind import runs_at_nice, shared_server
    from tests.conftest import emulators_of

    seeds = np.full(256, 8, np.uint32)  # spins until the 2 s wall backstop
    r = from_arrays(SRC, "spin", [seeds, np.zeros(256, np.uint32)], [256], [256])
    asker: list[int] = []
    base = os.getpriority(os.PRIO_PROCESS, 0)  # the suite may itself run niced

    def low_priority() -> None:
        me = threading.get_native_id()
        if how == "thread at nice 19":
            os.setpriority(os.PRIO_PROCESS, me, 19)
            miniemu.emulate(r, mode="bounded", budget="wall=2,instructions=1e12")
        else:
            with runs_at_nice(19):
                miniemu.emulate(r, mode="bounded", budget="wall=2,instructions=1e12")
        asker.append(os.getpriority(os.PRIO_PROCESS, me))

    before = set(emulators_of(os.getpid()))  # other tests' workers, if any are left
    with shared_server():
        (server,) = set(emulators_of(os.getpid())) - before
        thread = threading.Thread(target=low_priority)
        thread.start()
        last: dict[int, int] = {}  # each run's nice when last seen
        while thread.is_alive():
            for pid in emulators_of(server):
                try:
                    with open(f"/proc/{pid}/stat") as fh:
                        last[pid] = int(fh.read().rsplit(")", 1)[1].split()[16])
                except OSError:
                    pass  # it ended meanwhile
            time.sleep(0.05)
        thread.join()
    # a run lowers its priority first thing after the fork: seen later, it is at 19
    assert last and set(last.values()) == {19}, last
    assert asker == [19 if how == "thread at nice 19" else base]


STRIDE = """
__kernel void grid_sum(__global const float *x, __global float *out, long n) {
  size_t i = get_global_id(0);
  float acc = 0.0f;
  for (; i < n; i += get_global_size(0)) acc += x[i];
  out[get_global_id(0)] = acc;
}
__kernel void step_sum(__global const float *x, __global float *out, int n, int step) {
  int i = get_global_id(0);
  float acc = 0.0f;
  for (; i < n; i += step) acc += x[i];
  out[get_global_id(0)] = acc;
}
"""


@pytest.mark.parametrize("kernel", ["grid_sum", "step_sum"])
def test_grid_stride_loops_are_loop_extrapolated(kernel: str) -> None:
    """A loop whose step is the launch's size (a reduction's grid-stride loop) or an
    argument: ScalarEvolution has no trip count for it (the step is a call inside the
    loop, or not provably positive), and the profile was a budget's worth of iterations,
    a lower bound (BabelStream's dot over 400 MiB: 470x too fast). The plugin derives
    ceil((n - gid) / step) ("derived": "stride"), and the loop is extrapolated from probes
    on n: every element is loaded and added exactly once."""
    n = 1 << 20
    x, out = np.ones(n, np.float32), np.zeros(64, np.float32)
    args = [x, out, np.int64(n)] if kernel == "grid_sum" else [x, out, np.int32(n), np.int32(64)]
    p = miniemu.emulate(
        from_arrays(STRIDE, kernel, args, [64], [32]), mode="bounded", budget="instructions=300000"
    )
    e = p.emulation
    assert e["method"] == "loop-extrapolated", e["flags"]
    assert [lp.get("derived") for lp in e["loops"]] == ["stride"]
    assert e["loop_extrapolation"]["actual_trips"] == n // 64 + 1
    assert abs(p.total["global"]["load_accesses"] - n) <= 0.01 * n
    assert abs(p.total["instructions"]["fp32_add"] - n) <= 0.01 * n
    assert e["instructions_emulated"] < 1_000_000  # a few dozen trips per probe, not 16k


def _stride_loop(step: dict) -> dict:
    """The count loops.cpp derives for `for (i = gid; i < n; i += STEP)`, n argument 2."""
    w = 64

    def op(name: str, *ops: dict) -> dict:
        return {"op": name, "bits": w, "ops": list(ops)}

    c = lambda v: {"c": v, "bits": w}  # noqa: E731
    left = op("add", {"arg": 2, "bits": w}, op("mul", c(-1), {"gid": 0, "bits": w}))
    count = op("udiv", op("add", op("smax", left, c(0)), step, c(-1)), step)
    return {"id": 0, "exact": count, "max": None, "derived": "stride", "step": step}


def test_a_derived_stride_count_is_evaluated_with_the_launch_and_a_positive_step() -> None:
    from clproj.miniemu.scev import Launch, NotEvaluable, trip_count, uniform_trips

    launch = Launch((32,), (16,))
    lp = _stride_loop({"gsize": 0, "bits": 64})
    assert trip_count(lp, {2: 100}, ids={0: 3}, launch=launch) == 4 + 1  # 3, 35, 67, 99
    assert trip_count(lp, {2: 100}, ids={0: 5}, launch=launch) == 3 + 1
    assert trip_count(lp, {2: 4}, ids={0: 5}, launch=launch) == 0 + 1  # past the end
    with pytest.raises(NotEvaluable):  # the launch's size, but no launch given
        trip_count(lp, {2: 100}, ids={0: 3})
    assert abs(uniform_trips(lp, {2: 1 << 20}, launch) - ((1 << 20) // 32 + 1)) < 1
    with pytest.raises(NotEvaluable, match="differs between work-items"):
        uniform_trips(lp, {2: 40}, launch)  # 2 trips for gid < 8, 1 for the others
    by_arg = _stride_loop({"arg": 3, "bits": 64})
    assert trip_count(by_arg, {2: 100, 3: 50}, ids={0: 0}) == 2 + 1
    for bad in (0, -50):
        with pytest.raises(NotEvaluable, match="not positive"):
            trip_count(by_arg, {2: 100, 3: bad & (2**64 - 1)}, ids={0: 0})


def test_a_trip_count_of_unknown_shape_is_not_evaluable() -> None:
    from clproj.miniemu.scev import NotEvaluable

    for expr in ({"shape": 1}, {"op": "add"}, {"gsize": 3, "bits": 64}, "text"):
        with pytest.raises(NotEvaluable):
            eval_scev(expr, {}, launch=None)  # type: ignore[arg-type]


def test_clproj_project_emulates_a_record_bounded_as_project_mode_does(tmp_path) -> None:
    """`clproj project RECORD` emulated one whole work-group (single) and nothing else: a
    reduction over 16 M elements ran into its time limit. ``--mode bounded`` is project
    mode's emulation."""
    import json
    import subprocess
    import sys

    from clproj.intercept.record import save

    n = 1 << 24
    x, out = np.ones(n, np.float32), np.zeros(64, np.float32)
    path = save(from_arrays(STRIDE, "grid_sum", [x, out, np.int64(n)], [64], [32]), str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "clproj.cli", "project", path, "--mode", "bounded", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # single mode: 64 x 262,144 trips, minutes in Oclgrind
    assert doc["kernel"] == "grid_sum" and doc["recommended"]
    assert doc["projections"] and all(p["time_s"] > 0 for p in doc["projections"])


def test_a_servers_later_runs_of_a_source_load_its_program_and_count_the_same(tmp_path):
    """A fork server's first run of a source saves the program it built; later runs load it
    (intercept.built_programs) and count exactly what a build from source counts. The
    swap proves they load it: given another kernel's binary, a run counts that kernel."""
    import glob

    from clproj.intercept.record import save
    from clproj.miniemu.oclgrind import OclgrindBackend, WorkerServer

    heavy = save(rec(40), str(tmp_path / "heavy"))
    double = rec(40)
    double.source = SRC.replace("acc * a +", "acc * a * a +")
    double = save(double, str(tmp_path / "double"))
    limits = {"CLPROJ_STATS_MAX_WORK_ITEMS": "64"}

    def run(server: WorkerServer, path: str):
        raw = server.result(server.submit(path, limits), 120)
        return [g.stats for g in raw.groups], raw.instructions_executed

    with WorkerServer(OclgrindBackend(), "bounded") as server:
        programs = os.path.join(server.tmp, "programs")
        from_source = run(server, heavy)
        (heavy_bin,) = glob.glob(os.path.join(programs, "*.bin"))
        assert run(server, heavy) == from_source
        double_counts = run(server, double)
        assert double_counts != from_source
        (double_bin,) = set(glob.glob(os.path.join(programs, "*.bin"))) - {heavy_bin}
        with open(heavy_bin, "rb") as src, open(double_bin, "wb") as dst:
            dst.write(src.read())
        assert run(server, double) == from_source


def test_a_server_started_by_a_thread_that_blocks_signals_hears_its_runs_end(tmp_path):
    """The fork server learns of a run's end from SIGCHLD (miniemu.worker). A signal mask
    is inherited through fork and exec, and clproj's threads block every signal an app may
    wait for (clproj.background_thread): a server a route-mode app's thread started never
    heard its runs end, and their emulations waited for their time-out. It unblocks
    SIGCHLD itself."""
    from clproj.background_thread import background_thread
    from clproj.intercept.record import save
    from clproj.miniemu.oclgrind import OclgrindBackend, WorkerServer

    started: list[WorkerServer] = []
    thread = background_thread(
        lambda: started.append(WorkerServer(OclgrindBackend(), "bounded")), "test-starter"
    )
    thread.start()
    thread.join()
    (server,) = started
    with server:
        path = save(rec(40), str(tmp_path / "heavy"))
        raw = server.result(server.submit(path, {"CLPROJ_STATS_MAX_WORK_ITEMS": "64"}), 120)
        assert raw.instructions_executed > 0
        with open(f"/proc/{server.proc.pid}/status") as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
        # the server's own thread: SIGCHLD neither blocked nor ignored, and caught
        bit = 1 << (int(signal.SIGCHLD) - 1)
        assert not int(fields["SigBlk"], 16) & bit, fields["SigBlk"]
        assert int(fields["SigCgt"], 16) & bit, fields["SigCgt"]
