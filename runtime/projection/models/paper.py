"""Panwar et al.'s three-term bound model as published, without this project's additions.

The reference for what the additions of :mod:`runtime.projection.model` buy: the same kernel
profile and device profile, priced the way the paper does it,

* ``t_compute`` = sum over instruction classes of ``count / throughput(class)`` (special
  functions at the single ``special`` rate), divided by the fraction of compute units
  that receive work;
* ``t_global`` = transactions at the device's warp width and smallest segment (the
  paper's coalescing rule) x segment bytes / the measured global read/write throughput at
  the kernel's occupancy, scaled by the fraction of busy compute units;
* ``t_local`` = local bytes x bank-conflict degree / local throughput at the occupancy
  (as in :func:`runtime.projection.model.local_time`);

``time = max(t_compute, t_global, t_local) x tail`` (waves of resident groups, the
occupancy calculation the paper shares). Left out on purpose, because they are ours: the
launch floor, the cache hierarchy and footprint, the measured access granularity, the
GPU warps-per-scheduler utilisation, barrier pricing, per-family special functions, the
CPU loop-form rates and per-work-item transactions, same-address atomics, and the
dependence-latency term (docs/models.md).
"""

from __future__ import annotations

from typing import Any

from clproj.runtime.projection.kernel_stats import (
    FREE_CLASSES,
    MEMORY_CLASSES,
    SEGMENT_KEYS,
    WARP_KEYS,
    nearest_key,
)
from clproj.runtime.projection.launch_shape import for_device
from clproj.runtime.projection.model import local_time
from clproj.runtime.projection.models.base import ModelPrediction
from clproj.runtime.projection.occupancy import profile_occupancy


def paper_compute(total: dict[str, Any], device: Any, active_fraction: float) -> float:
    """Seconds of ALU issue: every executed class at its throughput, nothing else."""
    t = 0.0
    for cls, count in total.get("instructions", {}).items():
        if not count or cls in MEMORY_CLASSES or cls in FREE_CLASSES or cls == "barrier":
            continue
        t += float(count) / device.throughput(cls)
    return t / max(active_fraction, 1e-9)


def paper_global(total: dict[str, Any], device: Any, x: float, active_fraction: float) -> float:
    """Seconds of global traffic: coalesced transactions at the smallest segment size."""
    g = total.get("global", {})
    warp = nearest_key(device.warp_width, WARP_KEYS)
    seg = nearest_key(min(device.segment_bytes or [64]), SEGMENT_KEYS)
    tx = g.get("transactions", {})
    frac = max(active_fraction, 1e-9)
    t = 0.0
    for direction, curve in (("load", "global_read"), ("store", "global_write")):
        count = tx.get(direction, {}).get(warp, {}).get(seg)
        if count is None:
            count = float(g.get(f"{direction}_bytes", 0) or 0) / int(seg)
        t += float(count) * int(seg) / (device.curve(curve, x) * frac)
    return t


class PaperModel:
    """The three-term model of Panwar et al. (see the module docstring)."""

    name = "paper"

    def predict(
        self, profile: dict[str, Any], device: Any, footprint_bytes: float | None = None
    ) -> ModelPrediction:
        profile = for_device(profile, device)  # a NULL local size: the driver's groups
        total = profile["total"]
        occ = profile_occupancy(profile, device)
        frac = occ.active_cus / max(1, device.compute_units)
        t_c = paper_compute(total, device, frac)
        t_g = paper_global(total, device, occ.work_items_per_cu, frac)
        t_l, _ = local_time(total, device, occ)
        tail = 1.0 / occ.wave_efficiency
        terms = {"C": t_c, "G": t_g, "L": t_l}
        bound = max(terms, key=lambda k: terms[k])
        return ModelPrediction(
            time_s=max(terms[bound] * tail, 1e-12),
            bound=bound,
            breakdown={"t_compute": t_c, "t_global": t_g, "t_local": t_l, "tail_factor": tail},
        )
