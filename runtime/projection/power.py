"""Average power and energy of a projected launch, from the device profile's ``power``
section (docs/formats.md section 3, docs/projection.md "Power and energy").

Why beside the bound model and not in it: time is projected from counts and rates;
power needs a second set of parameters (the device's floor and what an operation and a
byte cost) that most profiles only have as a spec-sheet rule. Keeping it a function of a
finished :class:`~runtime.projection.model.Projection` lets every model's time be turned
into energy the same way, and keeps the low confidence of the rule visible in one place.

    power = static_active + busy units x W/unit
          + (sum over classes of count x J/op
                             + local bytes x J/byte + L2 bytes x J/byte
                             + DRAM bytes x J/byte
                             [+ global load instructions x J/load]) / time,
                                                              at most the power limit
    energy = power x time

A measured section (fitted from the power microbenchmarks, devices/power_fit.py) gives
the energies per operation and per byte; a byte the section has no energy for costs
nothing beyond the floor (version 1 sections priced DRAM bytes only). A version 3 section
also prices each global load instruction (``energy_per_global_load_j``, fitted only from
reads of several load widths), counted as memory power: a kernel of narrow loads then
costs more than one moving the same bytes in float4s. Without that field the projection
is exactly the version 2 one. A version 4 section also prices each compute unit the
launch keeps busy (``power_per_active_unit_w`` x its work-groups, at most the device's
units, for the whole projected time): a latency-bound kernel on every unit draws that
power while doing little work. The spec rule (no power microbenchmarks) prices an
operation at the dynamic budget (TDP - static) over the device's rate for its class, and
a byte at that budget over the sheet bandwidth: the compute (memory) part is the budget x the share of the projected time the ALUs (DRAM)
would be busy at peak rate, the projected utilisation of each resource.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from clproj.runtime.projection.kernel_stats import issued_instructions
from clproj.runtime.projection.launch_shape import for_device

OBJECTIVES = ("time", "energy", "edp")


@dataclass(frozen=True)
class PowerProjection:
    """Projected average power (W) and energy (J) of one launch on one device, or why
    there is none (``reason``; power and energy ``None``: never a guess)."""

    power_w: float | None
    energy_j: float | None
    static_w: float = 0.0
    units_w: float = 0.0  # the busy compute units' own power (version 4 sections)
    compute_w: float = 0.0
    memory_w: float = 0.0
    limit_w: float | None = None
    limited: bool = False  # the sum reached the power limit and was held at it
    rule: str = "none"  # "spec", "measured" or "none"
    confidence: str = "low"
    source: str = ""
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def power_section(device: Any) -> tuple[dict[str, Any] | None, str]:
    """The device's power parameters and where they come from.

    A profile's own section first. A profile without one (the measured GPU profiles,
    files from before the section existed) gets the spec rule from the power limit NVML
    reported when it was measured (``nvml.power_limit_w``: this board's own limit, read,
    not a measured power), else from its device's sheet TDP; anything else (the CPUs
    here: no RAPL, no known TDP) has none."""
    section = device.data.get("power")
    if section:
        return section, f"profile {device.key}"
    from clproj.devices.specs import spec_for, spec_power

    limit = (device.data.get("nvml") or {}).get("power_limit_w")
    if isinstance(limit, (int, float)) and not isinstance(limit, bool) and 0 < limit <= 1e5:
        how = "read: NVML power limit when the profile was measured (nvml.power_limit_w)"
        return spec_power(float(limit), how), how
    spec = spec_for(device.name) if device.kind != "CPU" else None
    if spec is not None and spec.tdp_w:
        how = f"spec: {spec.key} sheet, matched by device name"
        return spec_power(spec.tdp_w, how), how
    return None, "no power section and no sheet TDP for this device"


def _dram_bytes(details: dict[str, Any]) -> float:
    """Bytes the projection sent to DRAM: the hierarchy's DRAM share where it split the
    traffic, else every byte moved (the paper's model prices all of it at DRAM)."""
    if "dram_bytes" in details:
        return float(details["dram_bytes"])
    return float(details.get("load_bytes_moved", 0.0)) + float(
        details.get("store_bytes_moved", 0.0)
    )


def active_units(projection: Any, kernel_profile: dict[str, Any], device: Any) -> float:
    """Compute units the launch keeps busy: its work-groups, at most the device's units.

    Why not the occupancy's ``active_cus``: the time model may pack a launch's groups
    onto fewer units (the same waves either way), while a GPU's block scheduler spreads
    them over its units first, each unit powered while it holds one; it is also the rule
    the power microbenchmarks' ``active_units`` follow, so the fitted W per unit prices
    the same units."""
    items = float((kernel_profile.get("launch") or {}).get("work_items") or 0)
    group = float(getattr(projection.occupancy, "group_size", 0) or 0)
    groups = math.ceil(items / group) if group > 0 else 0
    return float(min(int(device.compute_units), groups))


def global_loads(total: dict[str, Any]) -> float:
    """Global load instructions of the launch, per work-item as the plugin counts them
    (``global.load_accesses``: one per load whatever its width, constant memory included),
    the count the power fit priced in the width-varied reads."""
    return float((total.get("global") or {}).get("load_accesses", 0.0) or 0.0)


def project_power(projection: Any, kernel_profile: dict[str, Any], device: Any) -> PowerProjection:
    """Power and energy of ``projection`` (of ``kernel_profile`` on ``device``)."""
    section, source = power_section(device)
    if section is None:
        return PowerProjection(None, None, source=source, reason=source)
    t = float(projection.time_s)
    tdp = float(section["tdp_w"])
    static = float(section.get("static_active_w", section["idle_w"]))
    details = projection.details
    dram = _dram_bytes(details)
    per_op = section.get("energy_per_op_j")
    if per_op is not None:
        doc = for_device(kernel_profile, device)
        counts = issued_instructions(doc["total"], device)
        compute_j = sum(float(n) * float(per_op.get(cls, 0.0)) for cls, n in counts.items())
        # Local memory is on-chip SRAM beside the ALUs: counted with compute. On a GPU
        # whose L1 and local memory are one SRAM (the time model's ``l1_bytes``: the lines
        # it serves), global loads and stores cost that SRAM's energy per byte as well.
        sram = float(details.get("local_bytes_moved", 0.0)) + float(details.get("l1_bytes", 0.0))
        compute_j += sram * float(section.get("energy_per_local_byte_j") or 0.0)
        memory_j = (
            dram * float(section.get("energy_per_dram_byte_j") or 0.0)
            + float(details.get("dram_read_bytes", 0.0))
            * float(section.get("energy_per_dram_read_byte_j") or 0.0)
            + float(details.get("l2_bytes", 0.0))
            * float(section.get("energy_per_l2_byte_j") or 0.0)
        )
        per_load = section.get("energy_per_global_load_j")
        if per_load is not None:
            memory_j += global_loads(doc["total"]) * float(per_load)
        compute_w, memory_w = compute_j / t, memory_j / t
        per_unit = float(section.get("power_per_active_unit_w") or 0.0)
        units_w = active_units(projection, kernel_profile, device) * per_unit
    else:
        budget = max(0.0, tdp - static)
        busy_c = sum(float(s) for s in details.get("compute_by_class", {}).values())
        peak_bw = float(device.data["memory"]["peak_bandwidth_gbs"]) * 1e9
        compute_w = budget * min(1.0, busy_c / t)
        memory_w = budget * min(1.0, dram / peak_bw / t)
        units_w = 0.0
    raw = static + units_w + compute_w + memory_w
    power = min(raw, tdp)
    return PowerProjection(
        power_w=power,
        energy_j=power * t,
        static_w=static,
        units_w=units_w,
        compute_w=compute_w,
        memory_w=memory_w,
        limit_w=tdp,
        limited=raw > tdp,
        rule=str(section["rule"]),
        confidence=str(section["confidence"]),
        source=source,
    )


def objective_value(objective: str, time_s: float, power: PowerProjection) -> float | None:
    """The figure ``--objective`` ranks by (lower is better): seconds, joules, or
    joule-seconds (energy x delay); None where the device has no power projection."""
    if objective == "time":
        return time_s
    if power.energy_j is None:
        return None
    if objective == "energy":
        return power.energy_j
    if objective == "edp":
        return power.energy_j * time_s
    raise ValueError(f"unknown objective {objective!r}; one of {', '.join(OBJECTIVES)}")


def rank_by(
    objective: str, projections: list[Any], powers: dict[str, PowerProjection]
) -> list[Any]:
    """Projections ordered by ``objective``; devices without a power projection go last
    under energy and EDP (in time order), never placed by a made-up figure."""

    def key(p: Any) -> tuple[int, float, float]:
        v = objective_value(objective, p.time_s, powers[p.device_key])
        return (1, 0.0, p.time_s) if v is None else (0, v, p.time_s)

    return sorted(projections, key=key)


def pick(
    objective: str, rows: list[dict[str, Any]], deadline_s: float = 0.0, max_slowdown: float = 0.0
) -> str | None:
    """The device of ``rows`` (dicts with ``device``, ``time_s``, ``energy_j``) that
    ``objective`` picks under the constraints of ``clproj run --deadline/--max-slowdown``
    (the same rule as the broker's, :func:`runtime.cluster.placement.constrained`):
    among the allowed devices the least time, energy or EDP; devices without energy are
    no candidates under energy and EDP while another has one."""
    from clproj.runtime.cluster.placement import Objective, constrained

    times = {
        str(r["device"]): float(r["time_s"])
        for r in rows
        if isinstance(r.get("time_s"), (int, float))
    }
    allowed = constrained(times, Objective(objective, deadline_s, max_slowdown))
    if not allowed:
        return None
    by = {str(r["device"]): r for r in rows if str(r["device"]) in allowed}

    def value(d: str) -> float | None:
        e = by[d].get("energy_j")
        if objective == "time":
            return times[d]
        if e is None:
            return None
        return float(e) if objective == "energy" else float(e) * times[d]

    scored = {d: v for d in by if (v := value(d)) is not None}
    if not scored:  # no device has a power projection: by time
        scored = {d: times[d] for d in by}
    return min(scored, key=lambda d: (scored[d], times[d], d))
