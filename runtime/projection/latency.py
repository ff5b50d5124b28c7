"""The dependence-latency term (D) of the bound model: chains of dependent global memory
round trips that no amount of bandwidth can hide.

A work-item that loads what it stored, or loads an address it loaded, waits a full memory
latency per link of the chain (counted per work-item by the plugin's dependence pass). The
device overlaps the chains of the work-items it keeps in flight (GPU: resident warps; PoCL
CPU: the work-items of a core run one after another, gathers overlap up to the measured
memory-level parallelism), so the term is chain x latency x the waves that cannot overlap.
On CPUs a loop's floating-point recurrence (an accumulator) is such a chain too, each link
one dependent operation (:func:`recurrence_time`).
Latencies come from the device profile's measured pointer chases (``detail.latency``),
else its spec sheet.
"""

from __future__ import annotations

import math
from typing import Any

from clproj.runtime.projection.kernel_stats import kernel_loops
from clproj.runtime.projection.memory_units import access_granularity
from clproj.runtime.projection.occupancy import Occupancy


def memory_latencies(device: Any) -> tuple[float, float, str] | None:
    """(DRAM latency, last-level-cache latency, source) of a device, in seconds.

    Measured profiles carry both (``detail.latency``: dependent pointer chases,
    ``devices/microbench/latency.py``); spec profiles take the sheet's memory latency
    (``devices/specs.py``) for both. None when neither exists.
    """
    lat = device.data.get("detail", {}).get("latency") or {}
    if lat.get("global_latency_s"):
        glob = float(lat["global_latency_s"])
        return glob, float(lat.get("cache_latency_s") or glob), "measured"
    from clproj.devices.specs import spec_for

    spec = spec_for(device.name) if device.kind == "GPU" else None
    if spec is not None:
        return spec.mem_latency_ns * 1e-9, spec.mem_latency_ns * 1e-9, "spec"
    return None


def l1_hit_latency(device: Any) -> float:
    """Seconds of a load served by a GPU compute unit's own L1 (a *warm* round).

    Not measured by our microbenchmarks; the spec rule of ``devices/specs.py``
    (``LOCAL_LATENCY_CYCLES`` at the device clock) prices local memory, which is the same
    SRAM as L1 on NVIDIA GPUs since Volta.
    """
    from clproj.devices.specs import LOCAL_LATENCY_CYCLES

    return LOCAL_LATENCY_CYCLES / (max(1.0, float(device.clock_mhz or 1000)) * 1e6)


def cold_latency(device: Any, footprint_bytes: float | None) -> float | None:
    """Seconds of a load that fetches new data from a footprint of ``footprint_bytes``.

    The latency microbenchmark chases pointers through two buffers
    (``detail.latency.cache_buffer_bytes``, 1 MiB: ``cache_latency_s``;
    ``global_buffer_bytes``, 256 MiB: ``global_latency_s``); between them the latency is
    interpolated in log2 of the footprint (the share of accesses that miss a level of
    cache or TLB grows with the footprint), outside them it is clamped. Without a
    footprint, the DRAM latency; spec profiles, the sheet's memory latency.
    """
    lats = memory_latencies(device)
    if lats is None:
        return None
    mem_lat, cache_lat, _ = lats
    lat = device.data.get("detail", {}).get("latency") or {}
    small, big = lat.get("cache_buffer_bytes"), lat.get("global_buffer_bytes")
    if not footprint_bytes or not small or not big or big <= small:
        return mem_lat
    f = (math.log2(max(footprint_bytes, 1.0)) - math.log2(small)) / (
        math.log2(big) - math.log2(small)
    )
    f = min(1.0, max(0.0, f))
    return cache_lat + f * (mem_lat - cache_lat)


def memory_level_parallelism(device: Any) -> float:
    """Independent memory requests one compute unit keeps in flight (Little's law).

    ``global_latency_s / departure_delay_s`` from the latency microbenchmark (Hong &
    Kim's ``MWP`` without the bandwidth limit); 1 when not measured.
    """
    lat = device.data.get("detail", {}).get("latency") or {}
    if lat.get("global_latency_s") and lat.get("departure_delay_s"):
        return max(1.0, float(lat["global_latency_s"]) / float(lat["departure_delay_s"]))
    return 1.0


def recurrence_time(
    total: dict[str, Any], device: Any, occ: Occupancy
) -> tuple[float, dict[str, float]]:
    """Seconds a CPU needs for its work-items' loop-carried floating-point chains.

    A loop that accumulates (``sum += a[k] * b[k]``, or ``tmp[i] += ...`` in global
    memory) runs no faster than one dependent operation per trip, however many units are
    free: the plugin counts each work-item's longest chain of dependent floating-point
    operations (``dependence.fp_chain``, through registers and stored words) and the fused
    multiply-adds on it (``fma_chain``). PoCL runs a work-item's loop to its end before
    the next work-item, so a core spends ``chain x round`` per work-item, one work-item
    after another; the rounds are measured on the device in that very form
    (``detail.raw_loop``, devices/microbench/raw_loop.py; 2-core EPYC: 1.16 ns a
    multiply-add, 0.87 ns an add).

    A link through a stored word costs a multiply-add only while the compiler can forward
    the stored value in a register, i.e. while the loop stores nothing else (measured:
    1.19 ns a trip). A loop that also stores elsewhere (``tmp[i] += ...; y[i] += ...``)
    must reload the accumulator every trip, since that store may alias it: the link then
    waits for the store buffer too (``reload_round_s``, EPYC: 3.66 ns a trip). The plugin
    counts those links (``fp_reload_chain``); each adds ``reload_round_s - fma_round_s``.
    Only kernels whose work-items loop, and have no work-group barrier: a loop-free
    kernel's short chains overlap across the work-items a core interleaves, and so do the
    loops of a kernel with barriers, which PoCL runs trip by trip across the group. 0
    without the measurement (GPUs hide the chain behind other warps; profiles measured
    before it).
    """
    rounds = device.data.get("detail", {}).get("raw_loop") or {}
    items = float(total.get("work_items") or 0)
    dep = total.get("dependence") or {}
    fp = float(dep.get("fp_chain", 0) or 0) / items if items else 0.0
    if device.kind == "GPU" or not rounds or not fp or not kernel_loops(total):
        return 0.0, {}
    if total.get("barriers"):
        # PoCL adds implicit barriers to the uniform inner loops of a kernel that has
        # work-group barriers (its ImplicitLoopBarriers pass): the work-items then run
        # each trip side by side, and their chains overlap (measured on the EPYC: a
        # 256-trip add chain after a barrier at 0.44 ns a trip, 0.72 ns without it).
        return 0.0, {}
    fma = min(fp, float(dep.get("fma_chain", 0) or 0) / items)
    reloads = min(fp, float(dep.get("fp_reload_chain", 0) or 0) / items)
    fma_round, add_round = float(rounds["fma_round_s"]), float(rounds["add_round_s"])
    # Profiles measured before the reload form have no reload round: no such term.
    reload_extra = max(0.0, float(rounds.get("reload_round_s") or fma_round) - fma_round)
    per_item = fma * fma_round + (fp - fma) * add_round + reloads * reload_extra
    serial = occ.waves * occ.group_size  # work-items on the busiest core, one by one
    return per_item * serial, {
        "fp_chain_per_item": fp,
        "fma_chain_per_item": fma,
        "reload_chain_per_item": reloads,
        "t_recurrence": per_item * serial,
    }


def latency_time(
    total: dict[str, Any], device: Any, occ: Occupancy, footprint_bytes: float | None = None
) -> tuple[float, dict[str, float]]:
    """Seconds the work-items' dependence chains need, however much bandwidth is left.

    The plugin counts per work-item its longest chain of global loads that each wait for
    an earlier memory operation of the same work-item (``dependence``, docs/formats.md
    section 2), and how many of those rounds streamed in new data (*cold*). Little's law
    with one request in flight per chain: a round costs one memory latency, and only
    chains of different work-items overlap.

    * GPU: every resident warp of every compute unit overlaps its chain with the others,
      so a wave of resident groups takes one chain, times the occupancy's waves. A cold
      round that enters a new unit of the device's access granularity costs the latency
      of a cold access into the launch's footprint (:func:`cold_latency`); a cold round
      within a unit already fetched (a row walk's second 32-byte sector, 64-byte units on
      the H100) and a warm read-after-write round the measured cache (L2) latency, since
      written lines are re-read from L2; another warm round an L1 hit
      (:func:`l1_hit_latency`).
    * CPU (PoCL): a core runs the work-items of its groups one after another, so their
      chains add up; only pointer-chasing rounds count (a read-after-write round is
      forwarded from the store buffer in a few cycles, and an out-of-order core lets
      later loads pass stores to other addresses), each at :func:`cold_latency`. The
      pointer loads of one round are independent of each other (a CSR row's gathers):
      they overlap up to the core's memory-level parallelism. A loop-free kernel runs
      ``warp_width`` work-items side by side in SIMD lanes.
    """
    dep = total.get("dependence") or {}
    items = float(total.get("work_items") or 0)
    if not dep or not items:
        return 0.0, {}
    lats = memory_latencies(device)
    l_cold = cold_latency(device, footprint_bytes)
    if lats is None or l_cold is None:
        return 0.0, {}
    _, cache_lat, source = lats
    # Rounds after the first: the launch floor (an empty kernel that stores one word)
    # already contains one memory round trip per launch.
    chain = max(0.0, float(dep.get("chain", 0)) / items - 1.0)
    cold = min(chain, max(0.0, float(dep.get("cold_chain", 0)) / items - 1.0))
    detail = {"chain_per_item": chain, "cold_rounds_per_item": cold, "latency_cold_s": l_cold}
    if device.kind == "GPU":
        # A cold round waits for DRAM only when it enters a new unit of the memory's
        # access granularity (H100/H200: 64 B, measured): the second 32-byte sector of a
        # row walk arrived in L2 with the first. Those rounds, and warm read-backs of a
        # stored word (the L1 does not keep written lines, :func:`gpu_write_through_bytes`),
        # cost the L2 latency; other warm rounds hit the L1.
        unit = str(access_granularity(device))
        by_size = dep.get("cold_chain_by_segment") or {}
        dram = cold
        if unit in by_size:
            dram = min(cold, max(0.0, float(by_size[unit]) / items - 1.0))
        warm = chain - cold
        warm_raw = min(warm, float(dep.get("raw_chain", 0)) / items)
        l_l1 = l1_hit_latency(device)
        l2_rounds = (cold - dram) + warm_raw
        per_chain = dram * l_cold + l2_rounds * cache_lat + (warm - warm_raw) * l_l1
        t = per_chain * occ.waves
        detail |= {
            "latency_l1_s": l_l1,
            "warm_raw_rounds_per_item": warm_raw,
            "dram_rounds_per_item": dram,
        }
        detail["chain_waves"] = float(occ.waves)
    else:
        pointer = float(dep.get("pointer_chain", 0)) / items
        loads = float(dep.get("pointer_loads", 0)) / items
        # Pointer loads per round that do not wait on each other, capped by the MLP.
        overlap = (
            min(memory_level_parallelism(device), max(1.0, loads / pointer)) if pointer else 1.0
        )
        per_chain = pointer * l_cold
        serial = occ.waves * occ.group_size  # work-items on the busiest core
        if not kernel_loops(total):
            serial /= max(1, int(device.warp_width))
        t = per_chain * serial / overlap
        t_rec, rec_detail = recurrence_time(total, device, occ)
        t = max(t, t_rec)
        detail |= {
            "pointer_rounds_per_item": pointer,
            "pointer_overlap": overlap,
            "serial_items_per_core": float(serial),
        } | rec_detail
    return t, detail | {"latency_source_measured": 1.0 if source == "measured" else 0.0}
