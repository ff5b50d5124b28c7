"""Which device profiles a projection is made for.

``--devices`` accepts ``local`` (the OpenCL devices of this machine), ``measured``
(every committed profile measured on real hardware), ``all`` (measured and spec-sheet
profiles) or a comma list of profile keys / profile file paths. A local device without a
committed measured profile is measured once with the quick microbenchmarks and cached
under ``~/.cache/clproj/profiles`` (``CLPROJ_CACHE`` overrides the folder).
"""

from __future__ import annotations

import os
from typing import Any

from clproj import paths
from clproj.errors import ClprojError


def cache_dir() -> str:
    return paths.cache_dir("profiles")


def local_profiles(measure_missing: bool = True) -> list[Any]:
    """A profile for every local OpenCL device (committed, cached, or measured now)."""
    from devices.discovery import opencl_devices
    from devices.profile import load_profile, profile_for_device

    out = []
    for index, dev in enumerate(opencl_devices()):
        prof = profile_for_device(dev)
        if prof is None:
            cached = os.path.join(cache_dir(), _slug(dev) + ".json")
            if os.path.exists(cached):
                prof = load_profile(cached)
            elif measure_missing:
                prof = _measure_quick(index, cached)
        if prof is not None:
            out.append(prof)
    if not out:
        raise ClprojError(
            "no local device has a profile", "run `clproj profile-device --device N -o FILE`"
        )
    return out


def _slug(dev: Any) -> str:
    text = f"{dev.platform.name}-{dev.name}".lower()
    return "".join(c if c.isalnum() else "-" for c in text).strip("-")[:80]


def _measure_quick(index: int, path: str) -> Any:
    from clproj.console import stderr
    from devices.profile import load_profile
    from devices.profile_cli import measure_profile

    stderr.print(
        f"clproj: no measured profile for device {index}; measuring one (quick mode) into {path}"
    )
    measure_profile(index, quick=True, output=path)
    return load_profile(path)


def resolve(spec: str | None) -> list[Any]:
    """Device profiles named by a ``--devices`` value (see module docstring)."""
    from devices.profile import known_profiles, load_profile

    spec = spec or "local"
    if spec == "local":
        return local_profiles()
    if spec in ("all", "measured"):
        profiles = known_profiles()
        if spec == "measured":
            profiles = [p for p in profiles if p.data.get("source", {}).get("kind") != "spec"]
        return profiles
    return [load_profile(item.strip()) for item in spec.split(",") if item.strip()]
