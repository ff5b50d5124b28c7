"""The units a device's memory system moves data in, read from its profile.

Why a module of its own: the global term (``model.global_time``) and the dependence
term (``latency.latency_time``) must price the same access unit, the same cache line and
the same cache-resident size; each reads them here, so neither depends on the other.
"""

from __future__ import annotations

from typing import Any

from clproj.runtime.projection.kernel_stats import SEGMENT_KEYS, nearest_key


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
    return int(min(128, max(smallest, int(nearest_key(int(measured), SEGMENT_KEYS)))))


def line_bytes(device: Any) -> int:
    """Bytes of one cache line of the device (the unit its CU-local cache serves per cycle)."""
    line = device.data.get("memory", {}).get("cache_line_bytes")
    return int(line) if line else max(device.segment_bytes or [64])


def cache_resident_bytes(device: Any) -> float:
    """Largest footprint measured to stay in the device's cache from launch to launch.

    The cache-bandwidth microbenchmark (``detail.cache``) re-reads a buffer of
    ``buffer_bytes`` pass after pass and is served at cache speed: a launch whose whole
    footprint is at most that large finds its data in the cache again when it is repeated,
    which is how device times are measured (each launch re-run, the median kept).
    0 when the profile has no such measurement.
    """
    return float(device.data.get("detail", {}).get("cache", {}).get("buffer_bytes") or 0.0)
