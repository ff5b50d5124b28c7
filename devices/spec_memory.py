"""The memory hierarchy of a spec-sheet GPU: last-level cache and latencies, by rule.

A sheet gives the L2 size and (some sheets, or the family's entry) the DRAM latency, but
not what the bound model needs to credit re-reads: the L2's read bandwidth, which
footprint stays resident from launch to launch, and the L2's latency. Without them a
spec profile prices every transaction at DRAM rate, and kernels that re-read rows or
tiles (PolyBench 2mm, syrk, atax, gemver) came out 2-18x slower on the H100 and H200
spec profiles than on the measured ones. The rules take the missing numbers from our
own measured GPUs that have a sheet (``devices.specs.EFFICIENCY_FROM``), as ratios that
carry to other devices:

* L2 read bandwidth = measured bytes per clock per compute unit x CUs x clock;
* resident footprint = measured resident buffer / measured cache size x sheet L2;
* DRAM latency (no sheet prints one) = the measured mean, in seconds: the family values
  the sheet entries carry (``Spec.mem_latency_ns``, 450-750 ns) are kept only for when no
  measured GPU is at hand; the H100 and H200 measure 349 and 339 ns;
* L2 latency = measured cache latency / measured DRAM latency x that DRAM latency.

The figures are the mean over those GPUs (both Hopper). ``benchmarks/spec_vs_measured.py``
builds the H100's spec profile from the H200's measurement only and the other way round,
so that check is not answered by the device's own numbers.
"""

from __future__ import annotations

import functools
from typing import Any

from clproj.devices.profile import PROFILES_DIR, load_profile

# The pointer-chase buffers of the latency microbenchmark (devices/microbench/latency.py):
# the derived latencies stand for the same two footprints.
CACHE_CHASE_BYTES = 1 << 20
GLOBAL_CHASE_BYTES = 256 << 20


@functools.cache
def measured_hierarchy(sources: tuple[tuple[str, str], ...]) -> tuple[dict[str, float], str]:
    """Mean ratios over the measured profiles in ``sources`` ((file, spec key) pairs)."""
    names = ("l2_bytes_per_clock_per_cu", "resident_fraction", "cache_latency_ratio", "dram_s")
    values: dict[str, list[float]] = {n: [] for n in names}
    parts = []
    for filename, _ in sources:
        prof = load_profile(str(PROFILES_DIR / "measured" / filename))
        mem, detail = prof.data["memory"], prof.data.get("detail", {})
        cache, lat = detail.get("cache", {}), detail.get("latency", {})
        if not (mem.get("cache_read_bytes_per_s") and cache.get("buffer_bytes")):
            continue
        if not (lat.get("global_latency_s") and lat.get("cache_latency_s")):
            continue
        clock = prof.clock_mhz * 1e6
        mine = {
            names[0]: mem["cache_read_bytes_per_s"] / (prof.compute_units * clock),
            names[1]: cache["buffer_bytes"] / mem["cache_bytes"],
            names[2]: lat["cache_latency_s"] / lat["global_latency_s"],
            names[3]: lat["global_latency_s"],
        }
        for n, v in mine.items():
            values[n].append(v)
        parts.append(
            f"{filename}: {mine[names[0]]:.1f} B/clk/CU, resident {mine[names[1]]:.3f} of L2, "
            f"L2/DRAM latency {mine[names[2]]:.2f}, DRAM {mine[names[3]] * 1e9:.0f} ns"
        )
    if not parts:
        return {}, ""
    return {n: sum(v) / len(v) for n, v in values.items()}, "; ".join(parts)


def dram_latency_s(spec: Any, sources: tuple[tuple[str, str], ...]) -> float:
    """A spec GPU's DRAM latency: the measured GPUs' mean, else its family's value."""
    rules, _ = measured_hierarchy(sources)
    if spec.kind == "GPU" and rules:
        return rules["dram_s"]
    return spec.mem_latency_ns * 1e-9


def hierarchy(
    spec: Any, sources: tuple[tuple[str, str], ...]
) -> tuple[dict[str, Any], dict[str, str]]:
    """``memory`` additions, ``detail`` sections and provenance of one spec GPU, or empty
    when the sheet names no L2 or no measured GPU gives the ratios."""
    rules, evidence = measured_hierarchy(sources)
    if spec.kind != "GPU" or not spec.l2_bytes or not rules:
        return {}, {}
    clock = spec.clock_mhz * 1e6
    rate = rules["l2_bytes_per_clock_per_cu"] * spec.cus * clock
    resident = int(rules["resident_fraction"] * spec.l2_bytes)
    dram_latency = dram_latency_s(spec, sources)
    out = {
        "memory": {"cache_bytes": int(spec.l2_bytes), "cache_read_bytes_per_s": rate},
        "cache": {
            "buffer_bytes": resident,
            "device_cache_bytes": int(spec.l2_bytes),
            "read_bytes_per_s": rate,
        },
        "latency": {
            "global_latency_s": dram_latency,
            "cache_latency_s": rules["cache_latency_ratio"] * dram_latency,
            "cache_buffer_bytes": CACHE_CHASE_BYTES,
            "global_buffer_bytes": GLOBAL_CHASE_BYTES,
        },
    }
    why = f"derived from measured: {evidence}"
    prov = {
        "memory.cache_bytes": "spec",
        "memory.cache_read_bytes_per_s": f"derived: bytes/clock/CU x CUs x clock; {why}",
        "detail.cache": f"derived: resident = measured fraction x sheet L2; {why}",
        "detail.latency": f"derived: DRAM = measured mean; L2 = measured L2/DRAM ratio x it; {why}",
    }
    return out, prov
