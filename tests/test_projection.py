"""The bound model, occupancy and the paper's metrics, checked against hand computations."""

from __future__ import annotations

import copy
import math

import pytest

from devices.profile import load_profile
from runtime import metrics
from runtime.occupancy import compute_occupancy
from runtime.projection import dram_bytes, project, rank


def stats(**over):
    """A statistics structure (docs/formats.md §2) with everything zero except ``over``."""
    s = {
        "work_items": 0,
        "instructions": {},
        "global": {"load_bytes": 0, "store_bytes": 0, "transactions": {"load": {}, "store": {}}},
        "local": {"load_bytes": 0, "store_bytes": 0, "bank": {}, "bytes_per_group": 0},
        "branches": {"total": 0, "divergent": {}},
        "private_bytes_per_work_item": 0,
    }
    s.update(over)
    return s


def kernel(num_groups=1024, group_size=256, total=None, per_group=None):
    return {
        "format": "clproj.kernel-profile",
        "version": 1,
        "kernel": "k",
        "launch": {"num_groups": num_groups, "group_size": group_size},
        "per_group": per_group or stats(),
        "total": total or stats(),
    }


@pytest.fixture(scope="module")
def h100():
    return load_profile("h100-sxm-spec")


def test_occupancy_limited_by_work_items(h100):
    occ = compute_occupancy(
        num_groups=10_000,
        group_size=256,
        local_bytes_per_group=0,
        private_bytes_per_work_item=0,
        device=h100,
    )
    assert occ.groups_per_cu == h100.max_work_items_per_cu // 256
    assert occ.limiter == "work-items"
    assert occ.work_items_per_cu == occ.groups_per_cu * 256


def test_occupancy_limited_by_local_memory(h100):
    per_group = h100.local_bytes_per_cu // 3 + 1  # only two groups fit
    occ = compute_occupancy(10_000, 64, per_group, 0, h100)
    assert (occ.groups_per_cu, occ.limiter) == (2, "local-memory")


def test_occupancy_limited_by_registers(h100):
    # 128 registers (512 B) per work-item x 256 work-items = 32768 registers per group.
    occ = compute_occupancy(10_000, 256, 0, 512, h100)
    assert occ.groups_per_cu == h100.registers_per_cu // (128 * 256)
    assert occ.limiter == "registers"


def test_occupancy_pads_groups_to_whole_warps(h100):
    occ = compute_occupancy(10_000, 48, 0, 0, h100)
    assert occ.padded_group_size == 64


def test_waves_and_tail_effect(h100):
    occ = compute_occupancy(
        num_groups=h100.compute_units * 8 + 1,
        group_size=256,
        local_bytes_per_group=0,
        private_bytes_per_work_item=0,
        device=h100,
    )
    assert occ.waves == 2
    assert occ.wave_efficiency == pytest.approx(
        (h100.compute_units * 8 + 1) / (2 * h100.compute_units * 8)
    )


def test_compute_bound_kernel_time_is_count_over_throughput(h100):
    n_fma = 1e12
    prof = kernel(num_groups=h100.compute_units * 8, total=stats(instructions={"fp32_fma": n_fma}))
    p = project(prof, h100)
    assert p.bound == "C"
    assert p.t_compute == pytest.approx(n_fma / h100.throughput("fp32_fma"))
    assert p.t_global == 0 and p.t_local == 0


def test_bookkeeping_and_barriers_cost_no_issue_slots(h100):
    base = kernel(total=stats(instructions={"fp32_add": 1e9}))
    more = copy.deepcopy(base)
    more["total"]["instructions"].update(other=5e9, barrier=1e6)
    assert project(more, h100).t_compute == pytest.approx(project(base, h100).t_compute)


def test_uncoalesced_access_costs_more_global_time(h100):
    def with_tx(tx):
        total = stats(
            **{
                "global": {
                    "load_bytes": 2**26,
                    "store_bytes": 0,
                    "transactions": {"load": {"32": {"32": tx}}, "store": {}},
                }
            }
        )
        return project(kernel(total=total), h100)

    coalesced, strided = with_tx(2**21), with_tx(2**24)
    assert strided.bound == coalesced.bound == "G"
    assert strided.t_global == pytest.approx(8 * coalesced.t_global)


def test_bank_conflicts_scale_local_time(h100):
    def with_degree(wavefronts):
        total = stats(
            local={
                "load_bytes": 2**28,
                "store_bytes": 0,
                "bank": {"32": {"requests": 1000, "wavefronts": wavefronts}},
                "bytes_per_group": 0,
            }
        )
        return project(kernel(total=total), h100)

    free, conflicted = with_degree(1000), with_degree(32000)
    assert conflicted.bound == "L"
    assert conflicted.t_local == pytest.approx(32 * free.t_local)
    assert conflicted.details["conflict_degree"] == 32


def test_cache_resident_footprint_reaches_dram_once():
    assert dram_bytes(moved=10e6, footprint=1e6, cache_bytes=50e6) == 1e6
    assert dram_bytes(moved=10e6, footprint=1e6, cache_bytes=None) == 10e6
    # Footprint twice the cache: half of the 9e6 re-read bytes still miss.
    assert dram_bytes(moved=10e6, footprint=1e6, cache_bytes=0.5e6) == pytest.approx(
        1e6 + 9e6 * 0.5
    )
    # Streaming (no re-reads): nothing to credit.
    assert dram_bytes(moved=1e6, footprint=4e6, cache_bytes=50e6) == 1e6


def test_rank_orders_fastest_first(h100):
    c2050 = load_profile("c2050-spec")
    prof = kernel(total=stats(instructions={"fp32_fma": 1e11}))
    ranked = rank(prof, [c2050, h100])
    assert [p.device_key for p in ranked] == [h100.key, c2050.key]


def test_selection_penalty_and_relative_error_by_hand():
    actual = {"a": 1.0, "b": 2.0}
    assert metrics.selection_penalty(actual, {"a": 5.0, "b": 10.0}) == 0.0
    assert metrics.selection_penalty(actual, {"a": 3.0, "b": 1.0}) == pytest.approx(1.0)
    # Same proportions: zero error whatever the scale.
    assert metrics.relative_error(actual, {"a": 7.0, "b": 14.0}) == pytest.approx(0.0)
    # Orthogonal unit vectors are sqrt(2) apart: error 1.
    assert metrics.relative_error({"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 1.0}) == pytest.approx(1.0)
    a = [1 / math.sqrt(5), 2 / math.sqrt(5)]
    p = [1.0, 0.0]
    expect = math.dist(a, p) / math.sqrt(2)
    assert metrics.relative_error(actual, {"a": 1.0, "b": 0.0}) == pytest.approx(expect)
    assert metrics.mape([(1.0, 1.5), (2.0, 1.0)]) == pytest.approx(0.5)
