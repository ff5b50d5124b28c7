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

* ``t_latency`` = the work-items' longest chain of dependent global round trips (a load
  of a word the work-item stored, a load whose address came from a load; counted by the
  plugin) x the memory latency, for the work-items that cannot overlap their chains
  (GPU: one wave of resident warps overlaps; PoCL CPU: a core runs its work-items one
  after another);

and the projected time is ``max(t_compute, t_global, t_local)`` stretched by the tail
effect of the last wave, or ``t_latency`` when that is longer, plus the device's launch
overhead. The largest term names the bottleneck: C, G, L or D (dependence latency).
``docs/projection.md`` explains each rule and the CPU variants.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from clproj.runtime.projection.kernel_stats import (
    BANK_KEYS,
    FREE_CLASSES,
    MEMORY_CLASSES,
    SEGMENT_KEYS,
    WARP_KEYS,
    issued_instructions,
    kernel_loops,
    nearest_key,
)
from clproj.runtime.projection.latency import cold_latency, latency_time
from clproj.runtime.projection.launch_shape import for_device
from clproj.runtime.projection.memory_units import (
    access_granularity,
    cache_resident_bytes,
    line_bytes,
)
from clproj.runtime.projection.occupancy import Occupancy, profile_occupancy

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
    bound: str  # "C", "G", "L" or "D"
    occupancy: Occupancy
    details: dict[str, Any] = field(default_factory=dict)
    t_latency: float = 0.0  # dependence chains x memory latency (docs/projection.md)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["occupancy"] = asdict(self.occupancy)
        return d


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
    for cls, count in issued_instructions(total, device).items():
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


def device_launch_time(device: Any, num_groups: int | None = None) -> float:
    """Device-side time of an (almost) empty kernel: the floor of every launch.

    Bench results and event-based measurements are device times, so the measured
    empty-kernel event duration is the right floor; the host wall-clock launch overhead
    (``launch_overhead_s``) is what routing adds on top, not part of device time.

    Where the profile measured the floor per number of work-groups
    (``detail.launch.groups``), the launch's own group count reads it: on PoCL a launch
    over more groups wakes more worker threads and hands out more tasks, and its floor
    grows with them (2-core EPYC: 0.26 us for one group, 0.97 us for 32; the 16-core
    Xeon: 22 us for one, 45 us for 16). Otherwise the profile's one-group time, measured
    launched alone (``event_s``) and back to back (``event_b2b_s``); both measure the same
    floor and timing noise only adds to it, so the smaller is the estimate (H100: 5.23 /
    5.31 us, H200: 5.34 / 5.09 us).
    """
    if num_groups is not None:
        floor = device.launch_floor(num_groups)
        if floor is not None:
            return floor
    launch = device.data.get("detail", {}).get("launch", {})
    measured = [float(launch[k]) for k in ("event_b2b_s", "event_s") if launch.get(k)]
    if measured:
        return min(measured)
    return float(device.launch_overhead_s or 0.0)


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


def straight_bandwidth(device: Any, reads: float = 0.0, writes: float = 0.0) -> float:
    """Bytes/s (read + written) of loop-free streaming kernels, where measured (CPUs).

    The microbenchmark measures three forms (devices/microbench/stream.py): ``copy`` and
    ``scale`` read one stream and write one, ``add`` reads two and writes one. A kernel is
    priced at the form of its own useful read:write ratio (one to one: the better of copy
    and scale; two or more to one: add; in between, interpolated); without a ratio (or
    rates per form), the best of the three.
    """
    sb = device.data.get("detail", {}).get("straight_bandwidth") or {}
    rates = sb.get("rates") or {}
    one, two = max(rates.get("copy", 0.0), rates.get("scale", 0.0)), rates.get("add", 0.0)
    if not (reads and writes and one and two):
        return float(sb.get("global_copy") or 0.0)
    f = min(1.0, max(0.0, reads / writes - 1.0))  # 0 at one read per write, 1 at two
    return float(one + f * (two - one))


def cpu_loop_form(total: dict[str, Any], device: Any) -> bool:
    """Whether a CPU runs this kernel's work-items one after another, each to its end.

    PoCL vectorises a work-group across SIMD lanes only when no loop stands inside the
    kernel (``detail.loop_throughput``); a looping work-item runs its whole loop before
    the next one starts, so the cache sees each work-item's own access stream.
    """
    return device.kind != "GPU" and kernel_loops(total)


def l1_keeps_items(total: dict[str, Any], device: Any, moved_total: float) -> bool:
    """Whether a CPU core's first-level data cache keeps one looping work-item's lines for
    the next work-item of its group.

    A core runs a group's looping work-items one after another; each switch to another
    line fetches it from the shared cache, unless the line is still in the core's L1.
    It is when one work-item's lines fit in the L1 (``memory.l1_data_bytes``): the next
    work-item that walks the same lines (PolyBench doitgen: 256 work-items each walk the
    same 16 KiB column of a small matrix) finds them there, and the shared cache serves
    only the lines the group touches at all (its unique sectors). A work-item's lines are
    bounded by the bytes of its line switches (moved bytes per work-item).
    """
    l1 = device.data.get("memory", {}).get("l1_data_bytes")
    items = float(total.get("work_items") or 0)
    return bool(l1 and items and moved_total / items <= float(l1))


def global_time(  # noqa: C901
    total: dict[str, Any], device: Any, occ: Occupancy, footprint_bytes: float | None = None
) -> tuple[float, dict[str, float]]:
    """Seconds to move the kernel's global traffic at the kernel's occupancy.

    Transactions are counted with the device's warp width and its measured access
    granularity (:func:`access_granularity`); on a CPU whose work-items loop, with the
    plugin's per-work-item transactions instead (:func:`cpu_loop_form`: every access that
    leaves the line its instruction touched before fetches a line). Without cache data
    (spec profiles, unknown footprint) every transaction is priced at the measured DRAM
    read/write rate at the kernel's occupancy: the paper's model. With a measured
    last-level-cache bandwidth and the launch's footprint, traffic is split over the
    hierarchy (docs/projection.md) and the global term is the slowest level.
    """
    g = total.get("global", {})
    warp = nearest_key(device.warp_width, WARP_KEYS)
    seg = nearest_key(access_granularity(device), SEGMENT_KEYS)
    tx = g.get("transactions", {})
    item_tx = g.get("item_transactions", {})
    # Per-work-item lines matter when the data is not cache-resident: a footprint within
    # the measured resident size is served by the core's caches at core speed (measured:
    # heavy_gather's 1 MiB table, a new line and page per access, 1.1 ns per access).
    resident = bool(footprint_bytes) and footprint_bytes <= cache_resident_bytes(device)
    loop_form = cpu_loop_form(total, device) and bool(item_tx) and not resident
    if loop_form:
        # A line switch moves one cache line between the shared cache and the core.
        seg = nearest_key(line_bytes(device), SEGMENT_KEYS)
    moved = {}
    for direction in ("load", "store"):
        if loop_form:
            count = item_tx.get(direction, {}).get(seg)
        else:
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
    try:
        copy_bw = device.curve("global_copy", x) * cu_fraction
    except (KeyError, ValueError):
        copy_bw = 0.0
    straight = straight_bandwidth(device, g.get("load_bytes", 0), g.get("store_bytes", 0))
    straight_form = bool(straight) and device.kind != "GPU" and not cpu_loop_form(total, device)
    if straight_form:
        # A loop-free kernel streams at the rate of the loop-free benchmark of its form
        # (devices/microbench/stream.py), reads and writes alike.
        read_bw = write_bw = copy_bw = straight * cu_fraction

    def dram_time(reads: float, writes: float) -> float:
        """Reads and writes at once move at the measured copy rate (read + written bytes
        per second), never faster than either stream alone.

        On a GPU the whole mixed stream moves at the copy rate (DRAM turnarounds slow
        reads and writes alike: H100 copy 2.62 TB/s against 2.9-3.0 TB/s read or write;
        pricing only the paired bytes at it made 10 of the 32 GPU ratios of PolyBench
        worse). On a CPU the copy curve's deficit is a cost per stored line (the fill of
        a write-allocate cache, then the write-back): the copy benchmark stores one byte
        per byte read, so only as many bytes as the smaller stream pair up at its rate
        and the rest moves at its own rate. A row walk that reads 256 MiB and writes
        32 KiB is a read stream: PolyBench gemver kernel 3 was priced at the loop-form
        copy rate, half the loop-form read rate, on the EPYC (1.25x its measured time).
        """
        if not (reads and writes and copy_bw):
            return reads / read_bw + writes / write_bw
        if device.kind == "GPU":
            mixed = (reads + writes) / copy_bw
        else:
            paired = min(reads, writes)
            mixed = (
                2.0 * paired / copy_bw + (reads - paired) / read_bw + (writes - paired) / write_bw
            )
        return max(reads / read_bw, writes / write_bw, mixed)

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
    if loop_form:
        detail["cpu_loop_form"] = 1.0
    t_first = first_load_latency(device, footprint_bytes, resident) if moved["load"] else 0.0
    if t_first:
        detail["t_first_load"] = t_first
    if not (footprint_bytes and cache_bytes and cache_bw and moved_total):
        t_dram = dram_time(moved["load"], moved["store"])
        return t_dram + t_first, detail | {"t_dram": t_dram, "dram_read_bytes": moved["load"]}
    # Cache hierarchy. A group's distinct sectors are what it brings into its compute
    # unit once (re-reads within the group hit the CU-local cache); they come from the
    # shared last-level cache, and DRAM sees only what that cache cannot keep. A CPU core
    # running looping work-items one by one fetches every line switch of every work-item
    # from the shared cache, unless its L1 keeps one work-item's lines for the next
    # (:func:`l1_keeps_items`).
    unique = g.get("unique_sector_bytes")
    group_bytes = min(moved_total, float(unique)) if unique else moved_total
    l2_traffic = (
        moved_total if loop_form and not l1_keeps_items(total, device, moved_total) else group_bytes
    )
    if device.kind == "GPU" and unique:
        l2_traffic = group_bytes + gpu_write_through_bytes(total, warp)
    u_load, u_store = g.get("unique_load_sector_bytes"), g.get("unique_store_sector_bytes")
    if unique and u_load is not None and u_store is not None:
        # DRAM reads what the groups read (a CPU also reads the lines it only writes:
        # write-allocate) and takes back every sector written, once.
        # (The loop-free rate is measured in useful bytes of kernels that write, so the
        # write-allocate reads are already in it.)
        allocate = device.kind != "GPU" and not straight_form
        read_base = float(unique) if allocate else float(u_load)
        dram_read = 0.0 if resident else dram_bytes(read_base, footprint_bytes, cache_bytes)
        dram_write = 0.0 if resident else float(u_store)
        dram_total = dram_read + dram_write
        t_dram = dram_time(dram_read, dram_write)
    else:  # profiles from before the split: the sectors, shared by moved load/store bytes
        dram_total = 0.0 if resident else dram_bytes(group_bytes, footprint_bytes, cache_bytes)
        share = {d: moved[d] / moved_total for d in moved}
        dram_read = dram_total * share["load"]
        t_dram = dram_time(dram_read, dram_total * share["store"])
    t_l2 = l2_traffic / (cache_bw * cu_fraction)
    t_l1 = l1_bytes = 0.0
    if unique and device.kind == "GPU":
        # NVIDIA GPUs since Volta build L1 and local memory from one SRAM per SM, which
        # serves one cache line (a "wavefront") per cycle: the measured local-memory peak
        # is that rate, and a warp instruction costs one wavefront per distinct line it
        # touches (32 for a fully scattered one), whatever bytes it uses.
        line = nearest_key(line_bytes(device), SEGMENT_KEYS)
        wavefronts = sum(float(tx.get(d, {}).get(warp, {}).get(line, 0)) for d in moved)
        l1_bytes = wavefronts * int(line) if wavefronts else moved_total
        t_l1 = l1_bytes / (device.peak("local") * cu_fraction)
    return max(t_dram, t_l2, t_l1) + t_first, detail | {
        "l2_bytes": l2_traffic,
        "dram_bytes": dram_total,
        "dram_read_bytes": dram_read,
        "cache_warm": 1.0 if resident else 0.0,
        "t_dram": t_dram,
        "t_l2": t_l2,
        "t_l1": t_l1,
        "l1_bytes": l1_bytes,
    }


def first_load_latency(device: Any, footprint_bytes: float | None, warm: bool) -> float:
    """Seconds before a CPU kernel's first load returns: the fill of its memory pipeline.

    The bandwidth terms price a stream once it flows; the first line of it still takes a
    full round trip (Hockney's ``latency + bytes / bandwidth``). Large launches do not
    notice; a launch of a few microseconds does (PolyBench ``lu`` kernel 1: a 16 KiB row
    that the previous kernel left in DRAM, 4,095 launches of 1-5 us on the EPYC). A
    CPU's launch floor is measured with an empty kernel whose store retires into the
    core's cache, so it holds no such round trip. A GPU's floor does: its kernel ends
    only when the store is acknowledged by memory (the D term skips a chain's first
    round for the same reason), so GPUs add nothing here. Nor does a warm footprint: its
    first line comes from a cache in nanoseconds, below what the floor resolves (adding
    the 1 MiB chase's 11 ns made our ``tiny_launch`` 8% slower on the EPYC ``basic``
    device, whose 256 bytes sit in L1). Otherwise one :func:`cold_latency` of the
    footprint.
    """
    if device.kind == "GPU" or warm:
        return 0.0
    return cold_latency(device, footprint_bytes) or 0.0


def gpu_write_through_bytes(total: dict[str, Any], warp: str) -> float:
    """L2 traffic a GPU adds beyond each group's distinct sectors because of its stores.

    The L1 of NVIDIA GPUs is write-through for global memory and does not keep the lines
    an SM wrote: every store transaction (32-byte sectors) reaches L2, not only the first
    one to a sector, and a load that reads back a word the work-item stored
    (``dependence.raw_loads``) is served by L2 again. Read-backs are priced like the
    stores that wrote them (sector bytes per store access).
    """
    g = total.get("global", {})
    stores = float(g.get("transactions", {}).get("store", {}).get(warp, {}).get("32", 0) or 0)
    store_bytes = stores * 32.0
    accesses = float(g.get("store_accesses", 0) or 0)
    raw = float((total.get("dependence") or {}).get("raw_loads", 0) or 0)
    reread = raw * store_bytes / accesses if accesses else 0.0
    # The group's distinct sectors already count each written sector once.
    first = float(g.get("unique_store_sector_bytes", 0) or 0)
    return max(0.0, store_bytes - first) + reread


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
        bank = loc.get("bank", {}).get(nearest_key(banks, BANK_KEYS), {})
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
    doc = for_device(doc, device)  # a NULL local size: the device driver's groups
    total = doc["total"]
    occ = profile_occupancy(doc, device)
    t_c, by_class = compute_time(total, device, occ)
    t_g, g_detail = global_time(total, device, occ, footprint_bytes)
    t_l, l_detail = local_time(total, device, occ)
    t_d, d_detail = latency_time(total, device, occ, footprint_bytes)
    t_atomic_g, t_atomic_l = atomic_times(total, device)
    t_g, t_l = max(t_g, t_atomic_g), max(t_l, t_atomic_l)
    tail = 1.0 / occ.wave_efficiency
    # The latency term counts whole waves already: the tail does not stretch it again.
    terms = {"C": t_c * tail, "G": t_g * tail, "L": t_l * tail, "D": t_d}
    bound = max(terms, key=lambda k: terms[k])
    t_launch = device_launch_time(device, int(doc["launch"].get("num_groups") or 1))
    return Projection(
        device_key=device.key,
        device_name=device.name,
        device_kind=device.kind,
        t_compute=terms["C"],
        t_global=terms["G"],
        t_local=terms["L"],
        t_launch=t_launch,
        time_s=terms[bound] + t_launch,
        bound=bound,
        occupancy=occ,
        t_latency=t_d,
        details={
            "compute_by_class": by_class,
            **g_detail,
            **l_detail,
            **d_detail,
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
