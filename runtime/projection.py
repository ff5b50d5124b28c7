"""The three-component bound model (Panwar et al.), per device.

For one kernel profile (device-independent counts from mini-emulation) and one device
profile (spec sheet + measured curves):

* ``t_compute`` = sum over instruction classes of ``count / throughput(class)``, with the
  throughput derated when too few work-items are resident to keep the lanes busy;
* ``t_global`` = bytes the device's memory system moves (transactions counted with the
  device's own warp width and segment size) / global throughput at the kernel's
  occupancy, loads and stores separately;
* ``t_local`` = local-memory wavefronts (conflict degree counted for the device's bank
  count) x bytes per wavefront / local throughput at that occupancy;

and the projected time is ``max(t_compute, t_global, t_local)`` stretched by the tail
effect of the last wave, plus the device's launch overhead. The largest term names the
bottleneck: C, G or L. ``docs/projection.md`` explains each rule and the CPU variants.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from runtime.occupancy import Occupancy, profile_occupancy

WARP_KEYS = (8, 16, 32, 64)
SEGMENT_KEYS = (32, 64, 128)
BANK_KEYS = (16, 32)

# Classes executed by the memory pipeline: their cost is the memory terms, not compute.
MEMORY_CLASSES = {"memory_global", "memory_local", "memory_private"}
# IR bookkeeping that compiles to no ALU operation (phi, bitcast, vector element moves,
# unconditional jumps, work-item id builtins: registers or constants on every device).
# Barriers are priced only where their rate was measured (``throughput.barrier``: on
# PoCL CPUs each one restarts the work-item loop); elsewhere they cost no issue slot.
FREE_CLASSES = {"other"}

# A GPU compute unit issues from several schedulers (4 on every NVIDIA part since Maxwell
# and on AMD CDNA/GCN): with fewer resident warps than schedulers some issue slots stay
# empty, so compute throughput falls proportionally below this many warps.
GPU_WARPS_FOR_PEAK = 4


@dataclass
class Projection:
    """Projected time of one kernel on one device, with its breakdown."""

    device_key: str
    device_name: str
    device_kind: str
    t_compute: float
    t_global: float
    t_local: float
    t_launch: float
    time_s: float
    bound: str  # "C", "G" or "L"
    occupancy: Occupancy
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["occupancy"] = asdict(self.occupancy)
        return d


def _nearest_key(value: int, keys: tuple[int, ...]) -> str:
    """The contract's key closest to ``value`` (in log scale)."""
    return str(min(keys, key=lambda k: abs(math.log2(k) - math.log2(max(1, value)))))


# A kernel whose work-items execute at least this many conditional branches each is
# taken to loop per work-item (a bounds check or two stays below it).
LOOP_BRANCHES_PER_WORK_ITEM = 4.0


def kernel_loops(total: dict[str, Any]) -> bool:
    """Whether the work-items of a launch run loops (from the emulated branch counts)."""
    items = total.get("work_items") or 0
    return (
        bool(items)
        and total.get("branches", {}).get("total", 0) / items >= LOOP_BRANCHES_PER_WORK_ITEM
    )


def loop_slowdown(device: Any, cls: str) -> float:
    """How much slower ``cls`` runs on ``device`` when work-items loop (1 on GPUs).

    PoCL vectorises a work-group across SIMD lanes only when no loop stands inside the
    kernel; the microbenchmarks measure the same arithmetic both ways on CPUs
    (``detail.loop_throughput``). Floating-point classes take the fp32 ratio, integer,
    compare and branch classes the integer ratio, others the geometric mean.
    """
    detail = device.data.get("detail", {})
    looped = detail.get("loop_throughput")
    if device.kind == "GPU" or not looped:
        return 1.0

    def ratio(name: str) -> float | None:
        straight = device.data.get("throughput", {}).get(name)
        return straight / looped[name] if straight and looped.get(name) else None

    if cls.startswith(("fp32", "fp64")):
        r = ratio("fp32_fma") or ratio("fp32_add")
    elif cls.startswith("int") or cls in ("compare_select", "branch", "conversion"):
        r = ratio("int_add")
    else:
        r = None
    return max(1.0, r or float(detail.get("loop_factor", 1.0)))


def compute_time(
    total: dict[str, Any], device: Any, occ: Occupancy
) -> tuple[float, dict[str, float]]:
    """Seconds of ALU issue for the whole NDRange, and the per-class breakdown."""
    per_class: dict[str, float] = {}
    loops = kernel_loops(total)
    for cls, count in total.get("instructions", {}).items():
        if not count or cls in MEMORY_CLASSES or cls in FREE_CLASSES:
            continue
        if cls == "barrier" and "barrier" not in device.data.get("throughput", {}):
            continue
        if cls == "special" and total.get("special_functions"):
            per_class[cls] = special_time(total["special_functions"], device)
        else:
            per_class[cls] = count / device.throughput(cls)
        if loops and cls != "barrier":  # the barrier benchmark already runs in a loop
            per_class[cls] *= loop_slowdown(device, cls)
    utilisation = compute_utilisation(device, occ)
    t = sum(per_class.values()) / utilisation
    return t, per_class


def special_time(by_family: dict[str, int], device: Any) -> float:
    """Seconds of special functions, each family at its own measured throughput.

    Profiles measured by ``clproj profile-device`` keep per-function throughputs
    (``detail.special.special_<family>``); spec profiles and the ``other`` family use the
    profile's single ``special`` throughput.
    """
    measured = device.data.get("detail", {}).get("special", {})
    t = 0.0
    for family, count in by_family.items():
        if count:
            rate = measured.get(f"special_{family}") or device.throughput("special")
            t += count / rate
    return t


def device_launch_time(device: Any) -> float:
    """Device-side time of an (almost) empty kernel: the floor of every launch.

    Bench results and event-based measurements are device times, so the measured
    empty-kernel event duration is the right floor; the host wall-clock launch overhead
    (``launch_overhead_s``) is what routing adds on top, not part of device time.
    """
    launch = device.data.get("detail", {}).get("launch", {})
    return float(
        launch.get("event_b2b_s") or launch.get("event_s") or device.launch_overhead_s or 0.0
    )


def compute_utilisation(device: Any, occ: Occupancy) -> float:
    """Fraction of the device's peak ALU throughput a launch can reach.

    Compute units without work contribute nothing. On a GPU, a compute unit also needs
    ``GPU_WARPS_FOR_PEAK`` resident warps to hide pipeline latency. On a CPU a compute
    unit is a core that runs one work-group at a time, so one group per core suffices.
    """
    cu_fraction = occ.active_cus / max(1, device.compute_units)
    if device.kind != "GPU":
        return cu_fraction
    warps = occ.work_items_per_cu / max(1, device.warp_width)
    return cu_fraction * min(1.0, warps / GPU_WARPS_FOR_PEAK)


def access_granularity(device: Any) -> int:
    """Bytes the memory system really moves per scattered access, from measurement.

    The strided-read curve at stride 32 (every 4-byte word in its own 128-byte line)
    delivers ``peak / granularity x 4`` useful bytes/s, so ``4 x peak / strided(32)`` is
    the effective access size: about 64 B on the H100 (HBM bursts), although its
    sectors are 32 B. Never below the device's smallest segment; spec profiles without a
    measured curve keep their smallest segment.
    """
    smallest = min(device.segment_bytes) if device.segment_bytes else 64
    if device.source_kind == "spec":
        return smallest
    try:
        sparse = device.strided_read(32)
        peak = device.peak("global_read")
    except (KeyError, ValueError):
        return smallest
    measured = 4.0 * peak / sparse if sparse > 0 else smallest
    return int(min(128, max(smallest, int(_nearest_key(int(measured), SEGMENT_KEYS)))))


def dram_bytes(moved: float, footprint: float | None, cache_bytes: float | None) -> float:
    """Bytes that reach DRAM when ``moved`` bytes of transactions touch ``footprint`` bytes.

    Re-reads of data still in the last-level cache do not reach DRAM. A footprint that
    fits in the cache is fetched once; a larger one keeps the fraction that fits
    (``cache / footprint``) of the re-reads in the cache. Without a footprint or cache
    size every transaction is assumed to reach DRAM (the paper's model).
    """
    if not footprint or not cache_bytes or moved <= footprint:
        return moved
    reuse = moved - footprint
    hit = min(1.0, cache_bytes / footprint)
    return footprint + reuse * (1.0 - hit)


def global_time(
    total: dict[str, Any], device: Any, occ: Occupancy, footprint_bytes: float | None = None
) -> tuple[float, dict[str, float]]:
    """Seconds to move the kernel's global traffic at the kernel's occupancy.

    Transactions are counted with the device's warp width and its measured access
    granularity (:func:`access_granularity`). Without cache data (spec profiles, unknown
    footprint) every transaction is priced at the measured DRAM read/write rate at the
    kernel's occupancy: the paper's model. With a measured last-level-cache bandwidth
    and the launch's footprint, traffic is split over the hierarchy (docs/projection.md)
    and the global term is the slowest level.
    """
    g = total.get("global", {})
    warp = _nearest_key(device.warp_width, WARP_KEYS)
    seg = _nearest_key(access_granularity(device), SEGMENT_KEYS)
    tx = g.get("transactions", {})
    moved = {}
    for direction in ("load", "store"):
        count = tx.get(direction, {}).get(warp, {}).get(seg)
        if count is None:  # no transaction data: fall back to useful bytes
            count = g.get(f"{direction}_bytes", 0) / int(seg)
        moved[direction] = float(count) * int(seg)
    x = occ.work_items_per_cu
    cu_fraction = max(occ.active_cus / max(1, device.compute_units), 1e-9)
    # Bandwidth curves are measured with every compute unit busy; fewer busy units draw
    # proportionally less (a single group cannot saturate a memory system).
    read_bw = device.curve("global_read", x) * cu_fraction
    write_bw = device.curve("global_write", x) * cu_fraction
    memory = device.data.get("memory", {})
    cache_bytes = memory.get("cache_bytes")
    cache_bw = memory.get("cache_read_bytes_per_s")
    moved_total = moved["load"] + moved["store"]
    detail: dict[str, float] = {
        "load_bytes_moved": moved["load"],
        "store_bytes_moved": moved["store"],
        "read_bw": read_bw,
        "write_bw": write_bw,
    }
    if not (footprint_bytes and cache_bytes and cache_bw and moved_total):
        t_dram = moved["load"] / read_bw + moved["store"] / write_bw
        return t_dram, detail | {"t_dram": t_dram}
    # Cache hierarchy. A group's distinct sectors are what it brings into its compute
    # unit once (re-reads within the group hit the CU-local cache); they come from the
    # shared last-level cache, and DRAM sees only what that cache cannot keep.
    unique = g.get("unique_sector_bytes")
    l2_traffic = min(moved_total, float(unique)) if unique else moved_total
    dram_total = dram_bytes(l2_traffic, footprint_bytes, cache_bytes)
    share = {d: moved[d] / moved_total for d in moved}
    t_dram = dram_total * share["load"] / read_bw + dram_total * share["store"] / write_bw
    t_l2 = l2_traffic / (cache_bw * cu_fraction)
    t_l1 = 0.0
    if unique and device.kind == "GPU":
        # NVIDIA GPUs since Volta build L1 and local memory from one SRAM per SM: the
        # measured local-memory peak is the rate at which that SRAM serves loads.
        t_l1 = moved_total / (device.peak("local") * cu_fraction)
    return max(t_dram, t_l2, t_l1), detail | {
        "l2_bytes": l2_traffic,
        "dram_bytes": dram_total,
        "t_dram": t_dram,
        "t_l2": t_l2,
        "t_l1": t_l1,
    }


def local_time(
    total: dict[str, Any], device: Any, occ: Occupancy
) -> tuple[float, dict[str, float]]:
    """Seconds of local-memory traffic, conflicts included where the device has banks."""
    loc = total.get("local", {})
    useful = float(loc.get("load_bytes", 0) + loc.get("store_bytes", 0))
    if useful == 0:
        return 0.0, {}
    banks = int(device.local_banks or 0)
    bytes_moved = useful
    degree = 1.0
    if banks > 0:
        bank = loc.get("bank", {}).get(_nearest_key(banks, BANK_KEYS), {})
        requests, wavefronts = bank.get("requests", 0), bank.get("wavefronts", 0)
        if requests:
            degree = wavefronts / requests
            bytes_moved = useful * degree
    cu_fraction = occ.active_cus / max(1, device.compute_units)
    bw = device.curve("local", occ.work_items_per_cu) * max(cu_fraction, 1e-9)
    return bytes_moved / bw, {
        "local_bytes_moved": bytes_moved,
        "conflict_degree": degree,
        "local_bw": bw,
    }


def record_footprint(record: Any) -> int:
    """Bytes of global memory a launch can touch: the sizes of its buffer arguments."""
    return int(sum(a.size or 0 for a in record.args if a.kind == "buffer"))


def atomic_times(total: dict[str, Any], device: Any) -> tuple[float, float]:
    """Seconds the hottest atomic addresses need, global and local (0 without data).

    Atomics on one 64-byte line (global) or one word (local) are serialised by the memory
    system, whatever the compute units do meanwhile; the plugin counts each group's
    hottest line/word, summed over groups (global counters are shared by every group, so
    their serialisation adds up device-wide). The rates are the device's measured
    same-address atomic throughputs (``detail.atomics_same_address_per_s``).
    """
    atoms = total.get("atomics", {})
    rates = device.data.get("detail", {}).get("atomics_same_address_per_s", {})
    t_g = atoms.get("global_same_address_max", 0) / rates["global"] if rates.get("global") else 0.0
    t_l = atoms.get("local_same_address_max", 0) / rates["local"] if rates.get("local") else 0.0
    return t_g, t_l


def project(profile: Any, device: Any, footprint_bytes: float | None = None) -> Projection:
    """Project one launch described by a kernel profile onto one device profile.

    ``footprint_bytes`` (the launch's buffer sizes, :func:`record_footprint`) lets the
    global term credit cache hits; without it every transaction is priced at DRAM rate.
    """
    doc = profile.to_dict() if hasattr(profile, "to_dict") else profile
    total = doc["total"]
    occ = profile_occupancy(doc, device)
    t_c, by_class = compute_time(total, device, occ)
    t_g, g_detail = global_time(total, device, occ, footprint_bytes)
    t_l, l_detail = local_time(total, device, occ)
    t_atomic_g, t_atomic_l = atomic_times(total, device)
    t_g, t_l = max(t_g, t_atomic_g), max(t_l, t_atomic_l)
    terms = {"C": t_c, "G": t_g, "L": t_l}
    bound = max(terms, key=lambda k: terms[k])
    tail = 1.0 / occ.wave_efficiency
    t_launch = device_launch_time(device)
    return Projection(
        device_key=device.key,
        device_name=device.name,
        device_kind=device.kind,
        t_compute=t_c * tail,
        t_global=t_g * tail,
        t_local=t_l * tail,
        t_launch=t_launch,
        time_s=terms[bound] * tail + t_launch,
        bound=bound,
        occupancy=occ,
        details={
            "compute_by_class": by_class,
            **g_detail,
            **l_detail,
            "tail_factor": tail,
            "t_atomic_global": t_atomic_g,
            "t_atomic_local": t_atomic_l,
        },
    )


def rank(
    profile: Any, devices: list[Any], footprint_bytes: float | None = None
) -> list[Projection]:
    """Projections on every device, fastest first."""
    return sorted((project(profile, d, footprint_bytes) for d in devices), key=lambda p: p.time_s)
