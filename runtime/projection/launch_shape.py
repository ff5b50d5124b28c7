"""A kernel profile in the launch shape a given device runs it with.

A launch with an explicit local size runs with that size everywhere, and its profile is
used as it is. A launch the app left to the driver (NULL local size) runs with whatever
group size each device's driver picks (:mod:`devices.launch_rules`), so the same launch
has as many shapes as there are drivers: PoCL splits 52 million work-items into groups
of 4096, AMD's runtime into groups of 256. Mini-emulation runs one representative group
(:func:`miniemu.profile.emulated_local_size`); its counters are per work-item (the
scaling rule of docs/miniemu.md), and coalescing is counted per warp of every width, so
only the group structure changes with the device: the group size, the number of groups
(the launch floor, the tail wave) and the groups resident per compute unit (occupancy).
:func:`for_device` rebuilds exactly those fields; every model calls it before reading a
profile, so projections, placement and the partition advisor see the same shape.
"""

from __future__ import annotations

import math
from typing import Any

from clproj.miniemu.profile import scale_stats


def for_device(doc: dict[str, Any], device: Any) -> dict[str, Any]:
    """``doc`` (a kernel-profile document) regrouped for ``device``; unchanged when the
    launch named its local size or the device picks the emulated one."""
    launch = doc.get("launch") or {}
    if not launch.get("local_size_was_null"):
        return doc
    rule = getattr(device, "null_local_size", None)
    if rule is None:
        return doc
    global_size = [int(g) for g in launch["global_size"]]
    local = rule(global_size)
    if [int(x) for x in launch["local_size"]] == local:
        return doc
    per_dim = [-(-g // lo) for g, lo in zip(global_size, local, strict=True)]
    num_groups = math.prod(per_dim)
    shaped = dict(doc)
    shaped["launch"] = dict(
        launch,
        local_size=local,
        group_size=math.prod(local),
        num_groups=num_groups,
        num_groups_per_dim=per_dim,
        emulated_local_size=list(launch["local_size"]),
        local_size_rule=device.null_local_rule.rule,
    )
    shaped["per_group"] = scale_stats(doc["total"], 1.0 / num_groups)
    return shaped
