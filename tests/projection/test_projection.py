"""The bound model, occupancy and the paper's metrics, checked against hand computations."""

from __future__ import annotations

import copy
import math

import pytest

from clproj.devices.profile import DeviceProfile, load_profile
from clproj.runtime.evaluation import metrics
from clproj.runtime.projection.model import dram_bytes, project, rank
from clproj.runtime.projection.occupancy import compute_occupancy


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


# -- dependence latency, write-through L2, CPU loop form (docs/projection.md) ---------


def measured(name: str):
    return load_profile(f"devices/profiles/measured/{name}.json")


def dep_kernel(items: int, group: int, chain: float, cold: float, raw: float = 0.0, ptr=0.0):
    """A launch whose work-items each run a chain of dependent loads and nothing else."""
    total = stats(
        work_items=items,
        dependence={
            "chain": chain * items,
            "cold_chain": cold * items,
            "raw_chain": raw * items,
            "pointer_chain": ptr * items,
            "raw_loads": raw * items,
            "pointer_loads": ptr * items,
        },
    )
    return kernel(num_groups=items // group, group_size=group, total=total)


def test_gpu_dependence_chain_costs_latency_per_round_in_one_wave():
    h100 = measured("nvidia-h100-opencl")
    lat = h100.data["detail"]["latency"]["global_latency_s"]
    # atax kernel 2: 8192 work-items, each 8192 cold read-after-write rounds, one wave.
    p = project(dep_kernel(8192, 32, chain=8192, cold=8192, raw=8191), h100)
    assert p.bound == "D"
    assert p.occupancy.waves == 1
    # the first round is in the launch floor (an empty kernel's one store)
    assert p.t_latency == pytest.approx(8191 * lat)
    assert p.time_s == pytest.approx(p.t_latency + p.t_launch)


def test_gpu_chain_waves_do_not_overlap_and_warm_rounds_are_cheaper():
    h100 = measured("nvidia-h100-opencl")
    one = project(dep_kernel(8192, 256, chain=100, cold=100), h100)
    many = project(dep_kernel(8192 * 64, 256, chain=100, cold=100), h100)
    assert many.occupancy.waves > 1
    assert many.t_latency == pytest.approx(one.t_latency * many.occupancy.waves)
    warm = project(dep_kernel(8192, 256, chain=100, cold=10), h100)
    assert warm.t_latency < one.t_latency / 5
    # Independent loads only: one round, already in the launch floor.
    assert project(dep_kernel(8192, 256, chain=1, cold=1), h100).t_latency == 0.0


def test_gpu_cold_rounds_within_a_fetched_unit_cost_the_l2_latency():
    """A row walk enters a new 32-byte sector every 8 trips but a new 64-byte unit (the
    H100's measured access granularity) every 16: half its cold rounds find their sector
    in L2 already."""
    h100 = measured("nvidia-h100-opencl")
    lat = h100.data["detail"]["latency"]
    chain, cold32, cold64 = 1025, 129, 65
    walk = dep_kernel(8192, 32, chain=chain, cold=cold32, raw=chain - 1)
    walk["total"]["dependence"]["cold_chain_by_segment"] = {
        "32": cold32 * 8192,
        "64": cold64 * 8192,
        "128": 33 * 8192,
    }
    p = project(walk, h100)
    dram, l2 = cold64 - 1, (cold32 - cold64) + (chain - cold32)
    assert p.details["dram_rounds_per_item"] == pytest.approx(dram)
    expect = dram * lat["global_latency_s"] + l2 * lat["cache_latency_s"]
    assert p.t_latency == pytest.approx(expect)
    # A profile from before the per-size counts: every cold round goes to DRAM.
    del walk["total"]["dependence"]["cold_chain_by_segment"]
    assert project(walk, h100).t_latency > p.t_latency


def test_cpu_counts_pointer_rounds_serially_and_forwards_stores():
    epyc = measured("pocl-pthread-amd-epyc")
    lat = epyc.data["detail"]["latency"]["global_latency_s"]
    items, group = 1024, 64
    chase = dep_kernel(items, group, chain=50, cold=50, ptr=49)
    chase["total"]["branches"] = {"total": 50 * items, "divergent": {}}  # it loops
    p = project(chase, epyc)
    per_core = math.ceil(items / group / epyc.compute_units) * group
    assert p.t_latency == pytest.approx(per_core * 49 * lat)
    # A read-after-write chain is store-to-load forwarding on a CPU: no latency term.
    rmw = dep_kernel(items, group, chain=50, cold=50, raw=49)
    assert project(rmw, epyc).t_latency == 0.0


def test_without_dependence_data_nothing_changes():
    h100 = measured("nvidia-h100-opencl")
    p = project(kernel(total=stats(instructions={"fp32_fma": 1e9})), h100)
    assert p.t_latency == 0.0 and p.bound == "C"


def gmem_kernel(items, group, loads, stores, **g):
    total = stats(
        work_items=items,
        **{
            "global": {
                "load_bytes": 4 * loads,
                "store_bytes": 4 * stores,
                "load_accesses": loads,
                "store_accesses": stores,
                "transactions": g.pop("transactions", {"load": {}, "store": {}}),
                **g,
            }
        },
    )
    return kernel(num_groups=items // group, group_size=group, total=total)


def test_cpu_loop_form_prices_per_work_item_lines_at_cache_bandwidth():
    epyc = measured("pocl-pthread-amd-epyc")
    items, n = 4096, 1000  # each work-item walks a column: a new line per access
    prof = gmem_kernel(
        items,
        256,
        loads=items * n,
        stores=items,
        transactions={
            "load": {"16": {"64": items * n // 16}},
            "store": {"16": {"64": items // 16}},
        },
        item_transactions={"load": {"64": items * n}, "store": {"64": items}},
        unique_sector_bytes=4 * items * n,
    )
    prof["total"]["branches"] = {"total": items * n, "divergent": {}}
    p = project(prof, epyc, footprint_bytes=1 << 30)
    assert p.details["cpu_loop_form"] == 1.0
    expect = 64 * (items * n + items) / epyc.data["memory"]["cache_read_bytes_per_s"]
    assert p.details["t_l2"] == pytest.approx(expect)
    # The same counts without a loop: vectorised across work-items, warp-level lines.
    prof["total"]["branches"] = {"total": 0, "divergent": {}}
    vector = project(prof, epyc, footprint_bytes=1 << 30)
    assert "cpu_loop_form" not in vector.details
    assert vector.details["l2_bytes"] == pytest.approx(4 * items * n)
    # A cache-resident footprint is served by the core's caches: no loop-form pricing.
    prof["total"]["branches"] = {"total": items * n, "divergent": {}}
    assert "cpu_loop_form" not in project(prof, epyc, footprint_bytes=1 << 20).details


def test_cpu_looping_items_reuse_each_others_lines_from_the_l1():
    """doitgen's shape: every work-item of a group walks the same short column. The lines
    one work-item touches fit in the core's L1, so the next one finds them there and the
    shared cache serves only the group's unique lines; without an L1 size in the profile,
    or with a walk longer than the L1, every line switch goes to the shared cache."""
    epyc = measured("pocl-pthread-amd-epyc")
    l1 = epyc.data["memory"]["l1_data_bytes"]
    assert l1 == 32 << 10
    items, group = 4096, 256
    n = l1 // 64 // 2  # lines walked per work-item: half the L1
    unique = 64 * n * (items // group)  # one column per group, shared by its items

    def walk(lines: int) -> dict:
        prof = gmem_kernel(
            items,
            group,
            loads=items * lines,
            stores=items,
            item_transactions={"load": {"64": items * lines}, "store": {"64": 0}},
            unique_sector_bytes=unique,
        )
        prof["total"]["branches"] = {"total": items * lines, "divergent": {}}
        return prof

    cache_bw = epyc.data["memory"]["cache_read_bytes_per_s"]
    kept = project(walk(n), epyc, footprint_bytes=1 << 30)
    assert kept.details["cpu_loop_form"] == 1.0
    assert kept.details["t_l2"] == pytest.approx(unique / cache_bw)
    no_l1 = DeviceProfile(copy.deepcopy(epyc.data))
    del no_l1.data["memory"]["l1_data_bytes"]
    every = project(walk(n), no_l1, footprint_bytes=1 << 30)
    assert every.details["t_l2"] == pytest.approx(64 * items * n / cache_bw)
    longer = project(walk(4 * n), epyc, footprint_bytes=1 << 30)  # twice the L1 per item
    assert longer.details["t_l2"] == pytest.approx(64 * items * 4 * n / cache_bw)


def test_cpu_loop_free_kernels_stream_at_the_straight_rate_of_their_form():
    """A copy-like kernel (one read per write) streams at the measured copy/scale rate, an
    add-like one (two reads per write) at the add rate; the rate is useful bytes of a
    kernel that writes, so the lines a CPU reads before writing them are not added."""
    epyc = measured("pocl-pthread-amd-epyc")
    rates = epyc.data["detail"]["straight_bandwidth"]["rates"]
    one, two = max(rates["copy"], rates["scale"]), rates["add"]
    items = 1 << 22
    tx = {"load": {"16": {"64": items // 16}}, "store": {"16": {"64": items // 16}}}
    prof = gmem_kernel(items, 256, loads=items, stores=items, transactions=tx)
    p = project(prof, epyc)  # no footprint: every transaction goes to DRAM
    first = p.details["t_first_load"]  # one cold round trip before the stream flows
    assert p.t_global == pytest.approx(2 * 4 * items / one + first)
    tx2 = {"load": {"16": {"64": items // 8}}, "store": {"16": {"64": items // 16}}}
    add = gmem_kernel(items, 256, loads=2 * items, stores=items, transactions=tx2)
    assert project(add, epyc).t_global == pytest.approx(3 * 4 * items / two + first)
    sectors = dict(
        unique_sector_bytes=8 * items,
        unique_load_sector_bytes=4 * items,
        unique_store_sector_bytes=4 * items,
    )
    copy = gmem_kernel(items, 256, loads=items, stores=items, transactions=tx, **sectors)
    p = project(copy, epyc, footprint_bytes=1 << 30)
    assert p.details["dram_bytes"] == pytest.approx(8 * items)  # no write-allocate added
    assert p.details["t_dram"] == pytest.approx(8 * items / one)


def test_cpu_first_load_waits_one_cold_round_trip():
    """A CPU launch that reads data the cache does not hold waits one memory latency
    before its stream flows (its launch floor was measured without a load); a warm
    footprint and a GPU (whose floor holds a round trip) add nothing."""
    from clproj.runtime.projection.latency import cold_latency

    epyc, h100 = measured("pocl-pthread-amd-epyc"), measured("nvidia-h100-opencl")
    items = 4096
    tx = {"load": {"16": {"64": items // 16}}, "store": {"16": {"64": items // 16}}}
    prof = gmem_kernel(items, 256, loads=items, stores=items, transactions=tx)
    cold = project(prof, epyc, footprint_bytes=64 << 20)
    assert cold.details["t_first_load"] == pytest.approx(cold_latency(epyc, 64 << 20))
    assert cold.details["t_first_load"] > 1e-7  # a DRAM round trip, not a cache hit
    assert "t_first_load" not in project(prof, epyc, footprint_bytes=64 << 10).details
    assert "t_first_load" not in project(prof, h100, footprint_bytes=64 << 20).details
    stores_only = gmem_kernel(items, 256, loads=0, stores=items, transactions=tx)
    assert "t_first_load" not in project(stores_only, epyc, footprint_bytes=64 << 20).details


def test_cpu_read_stream_with_few_writes_is_not_priced_as_a_copy():
    """On a CPU only as many bytes as the smaller stream pair up at the copy rate; a row
    walk that reads much and writes little moves at the read rate. A GPU keeps the copy
    rate for the whole mixed stream."""
    epyc, h100 = measured("pocl-pthread-amd-epyc"), measured("nvidia-h100-opencl")
    items, n = 4096, 1000  # each work-item reads a row of n words and writes one
    kw = dict(
        transactions={
            "load": {"16": {"64": items * n // 16}, "32": {"32": items * n // 8}},
            "store": {"16": {"64": items // 16}, "32": {"32": items // 8}},
        },
        item_transactions={"load": {"64": items * n // 16}, "store": {"64": items}},
        unique_sector_bytes=4 * items * (n + 1),
        unique_load_sector_bytes=4 * items * n,
        unique_store_sector_bytes=4 * items,
    )
    prof = gmem_kernel(items, 256, loads=items * n, stores=items, **kw)
    prof["total"]["branches"] = {"total": items * n, "divergent": {}}  # it loops
    p = project(prof, epyc, footprint_bytes=1 << 30)
    reads, writes = p.details["dram_bytes"] - 4 * items, 4 * items
    copy_bw = epyc.curve("global_copy", p.occupancy.work_items_per_cu)
    paired = 2 * writes / copy_bw + (reads - writes) / p.details["read_bw"]
    assert p.details["t_dram"] == pytest.approx(max(paired, writes / p.details["write_bw"]))
    assert p.details["t_dram"] < (reads + writes) / copy_bw  # not the whole stream as a copy
    g = project(prof, h100, footprint_bytes=1 << 30)
    gpu_copy = h100.curve("global_copy", g.occupancy.work_items_per_cu) * (
        g.occupancy.active_cus / h100.compute_units
    )
    assert g.details["t_dram"] >= g.details["dram_bytes"] / gpu_copy * (1 - 1e-9)


def test_gpu_stores_and_read_backs_reach_l2():
    h100 = measured("nvidia-h100-opencl")
    items = 1 << 20
    base = dict(
        transactions={
            "load": {"32": {"32": items // 8, "64": items // 16, "128": items // 32}},
            "store": {"32": {"32": items * 8, "64": items * 4, "128": items * 2}},
        },
        unique_sector_bytes=8 * items,
        unique_load_sector_bytes=4 * items,
        unique_store_sector_bytes=4 * items,
    )
    prof = gmem_kernel(items, 256, loads=items, stores=items * 64, **base)
    p = project(prof, h100, footprint_bytes=1 << 30)
    # 64 stores per work-item, coalesced: 8 sectors per warp each; only the first reaches
    # L2 in the group's distinct sectors, the others are written through.
    written = 32 * items * 8 - 4 * items
    assert p.details["l2_bytes"] == pytest.approx(8 * items + written)


def test_repeated_small_footprint_stays_in_cache():
    epyc = measured("pocl-pthread-amd-epyc")
    prof = gmem_kernel(
        8192,
        256,
        loads=8192,
        stores=8192,
        transactions={"load": {"16": {"64": 512}}, "store": {"16": {"64": 512}}},
        unique_sector_bytes=65536,
        unique_load_sector_bytes=32768,
        unique_store_sector_bytes=32768,
    )
    small = project(prof, epyc, footprint_bytes=65536)
    big = project(prof, epyc, footprint_bytes=1 << 30)
    assert small.details["cache_warm"] == 1.0 and small.details["dram_bytes"] == 0.0
    assert big.details["dram_bytes"] > 0 and big.details["t_dram"] > 0
    assert big.t_global >= small.t_global


def test_l1_counts_one_wavefront_per_line():
    h100 = measured("nvidia-h100-opencl")
    items = 1 << 20
    # A fully scattered warp load: 32 lines per warp instruction whatever the segment.
    tx = {"load": {"32": {"32": items, "64": items, "128": items}}, "store": {}}
    prof = gmem_kernel(items, 256, loads=items, stores=0, transactions=tx, unique_sector_bytes=32)
    p = project(prof, h100, footprint_bytes=1 << 20)
    assert p.details["t_l1"] == pytest.approx(128 * items / h100.peak("local"))


def test_cpu_launch_floor_follows_the_launch_group_count():
    """A launch over more groups wakes more PoCL worker threads: its floor is the
    profile's measured floor at its own group count; profiles without the curve keep the
    one-group empty-kernel time."""
    epyc = measured("pocl-pthread-amd-epyc")
    curve = epyc.data["detail"]["launch"]["groups"]
    one = project(kernel(num_groups=1, group_size=64), epyc)
    many = project(kernel(num_groups=int(curve[-1][0]), group_size=64), epyc)
    assert one.t_launch == pytest.approx(curve[0][1])
    assert many.t_launch == pytest.approx(curve[-1][1]) and many.t_launch > one.t_launch
    h100 = measured("nvidia-h100-opencl")  # measured before the curve existed
    launch = h100.data["detail"]["launch"]
    floor = min(launch["event_s"], launch["event_b2b_s"])
    assert project(kernel(num_groups=5000), h100).t_launch == pytest.approx(floor)


def test_cpu_loop_recurrence_costs_one_measured_round_per_link():
    """atax kernel 1 on the 2-core EPYC: each of 8192 work-items runs an 8192-trip loop
    whose accumulator is one dependent multiply-add per trip (stored every trip, but
    nothing else is stored: the compiler forwards it in a register); a core runs its
    4096 work-items one after another, each link one measured round. gesummv's loop
    stores a second accumulator, so every link also waits for its reload: the measured
    reload round."""
    epyc = measured("pocl-pthread-amd-epyc")
    rounds = epyc.data["detail"]["raw_loop"]
    items, trips = 8192, 8192
    prof = dep_kernel(items, 32, chain=trips, cold=trips / 16, raw=trips - 1)
    total = prof["total"]
    total["dependence"]["fp_chain"] = trips * items
    total["dependence"]["fma_chain"] = trips * items  # tmp[i] += A[i][j] * x[j]: fused
    total["branches"]["total"] = trips * items  # the loop's back edge: the work-items loop
    p = project(prof, epyc)
    per_item = trips * rounds["fma_round_s"]
    assert p.details["t_recurrence"] == pytest.approx(per_item * items / 2)
    assert p.bound == "D" and p.t_latency == pytest.approx(p.details["t_recurrence"])
    total["dependence"]["fp_reload_chain"] = (trips - 1) * items  # gesummv's two sums
    reloaded = project(prof, epyc)
    per_item += (trips - 1) * (rounds["reload_round_s"] - rounds["fma_round_s"])
    assert reloaded.details["t_recurrence"] == pytest.approx(per_item * items / 2)
    assert rounds["reload_round_s"] > 2 * rounds["fma_round_s"]  # measured: 3.7 vs 1.2 ns
    # a profile measured before the reload round prices reloads as multiply-adds
    old = measured("pocl-pthread-amd-epyc")
    del old.data["detail"]["raw_loop"]["reload_round_s"]
    assert project(prof, old).details["t_recurrence"] == pytest.approx(p.details["t_recurrence"])
    total["dependence"]["fp_reload_chain"] = 0
    # a GPU hides the chain behind other warps; a loop-free kernel's chains overlap
    assert "t_recurrence" not in project(prof, measured("nvidia-h100-opencl")).details
    total["barriers"] = 4 * items  # with barriers PoCL runs the loop trip by trip
    assert "t_recurrence" not in project(prof, epyc).details
    total["barriers"] = 0
    total["branches"]["total"] = 0
    assert "t_recurrence" not in project(prof, epyc).details
