"""What a node announces about each local device when it registers with the broker.

Why a module of its own: the broker places kernels and every client builds its virtual
devices from these descriptions, so they must be complete and valid even on a machine
that was never measured: a profile (from ``--profiles`` or the device's own resolution),
the device's real limits, and every capability a virtual device reports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clproj.runtime.cluster import introspect


def load_profile(dev: Any, profiles_dir: Path | None) -> dict[str, Any]:
    """A profile from ``profiles_dir`` whose identity.name matches the device, else the
    device's own resolution (devices.local: committed, cached, else generic low-confidence;
    a node never measures: ``clproj run`` or ``clproj devices --profiles`` does that first).
    Either way a valid profile: the broker and every client read it."""
    from clproj.devices.local import resolve_device
    from clproj.devices.profile import DeviceProfile

    if profiles_dir and profiles_dir.is_dir():
        for p in sorted(profiles_dir.glob("*.json")):
            try:
                prof = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            if (
                isinstance(prof, dict)
                and prof.get("format") == "clproj.device-profile"
                and (prof.get("identity") or {}).get("name") == dev.name.strip()
            ):
                return DeviceProfile(prof, str(p)).to_dict()
    return resolve_device(dev, -1, measure_missing=False).profile.to_dict()


def describe(dev: Any, profiles_dir: Path | None) -> dict[str, Any]:
    """The registration entry of one device: its name and profile, with its real limits
    (so a virtual device can report what every device accepts) and capabilities."""
    prof = dict(load_profile(dev, profiles_dir))
    prof["limits"] = {
        "max_work_group_size": int(dev.max_work_group_size),
        "local_mem_size": int(dev.local_mem_size),
        "global_mem_size": int(dev.global_mem_size),
        "max_mem_alloc_size": int(dev.max_mem_alloc_size),
    }
    # every capability a client's virtual device reports (runtime.cluster.introspect)
    prof["cl"] = introspect.device_caps(dev)
    return {"name": dev.name.strip(), "profile": prof}
