"""Occupancy: how many work-groups of a kernel are resident on one compute unit at once.

The bound model reads every throughput curve at the kernel's occupancy (resident
work-items per compute unit), so this is where a launch configuration meets a device's
limits. Four limits apply, as on every GPU since the paper's Tesla/Evergreen parts:
work-items per CU, work-groups per CU, local memory per CU and registers per CU. Groups
are padded to whole warps (a 48-item group occupies two 32-wide warps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Occupancy:
    group_size: int  # work-items per group as launched
    padded_group_size: int  # rounded up to whole warps
    groups_per_cu: int  # resident groups per compute unit (>= 1)
    limiter: str  # which limit bound it: work-items, groups, local-memory, registers
    active_cus: int  # compute units that receive work
    waves: int  # rounds of resident groups needed for the whole NDRange
    work_items_per_cu: float  # resident work-items per active CU, averaged over the run
    wave_efficiency: float  # useful / provisioned group slots (tail effect), in (0, 1]


def compute_occupancy(
    num_groups: int,
    group_size: int,
    local_bytes_per_group: int,
    private_bytes_per_work_item: int,
    device: Any,
) -> Occupancy:
    """Occupancy of a launch of ``num_groups`` groups of ``group_size`` on ``device``.

    ``device`` is a :class:`devices.profile.DeviceProfile`. Registers are estimated from
    the kernel profile's private bytes per work-item (4 bytes a register).
    """
    warp = max(1, int(device.warp_width))
    padded = int(math.ceil(group_size / warp) * warp)
    limits: dict[str, float] = {
        "work-items": device.max_work_items_per_cu / max(padded, 1),
        "groups": device.max_groups_per_cu,
    }
    if local_bytes_per_group > 0 and device.local_bytes_per_cu:
        limits["local-memory"] = device.local_bytes_per_cu / local_bytes_per_group
    regs_per_wi = max(1, math.ceil(private_bytes_per_work_item / 4))
    if device.registers_per_cu and private_bytes_per_work_item > 0:
        limits["registers"] = device.registers_per_cu / (regs_per_wi * padded)
    limiter = min(limits, key=lambda k: limits[k])
    groups_per_cu = max(1, math.floor(limits[limiter]))

    cus = max(1, int(device.compute_units))
    active_cus = min(cus, max(1, num_groups))
    slots = groups_per_cu * cus
    waves = max(1, math.ceil(num_groups / slots))
    # Average residency: all slots full except in the last wave.
    groups_per_active_cu = min(groups_per_cu, math.ceil(num_groups / active_cus))
    wave_efficiency = num_groups / (waves * min(slots, max(num_groups, 1)))
    return Occupancy(
        group_size=group_size,
        padded_group_size=padded,
        groups_per_cu=groups_per_cu,
        limiter=limiter,
        active_cus=active_cus,
        waves=waves,
        work_items_per_cu=float(groups_per_active_cu * group_size),
        wave_efficiency=min(1.0, wave_efficiency),
    )


def profile_occupancy(profile: dict[str, Any], device: Any) -> Occupancy:
    """Occupancy of the launch a kernel profile (docs/formats.md §2) describes."""
    launch, per_group = profile["launch"], profile["per_group"]
    return compute_occupancy(
        num_groups=int(launch["num_groups"]),
        group_size=int(launch["group_size"]),
        local_bytes_per_group=int(per_group.get("local", {}).get("bytes_per_group", 0)),
        private_bytes_per_work_item=int(per_group.get("private_bytes_per_work_item", 0)),
        device=device,
    )
