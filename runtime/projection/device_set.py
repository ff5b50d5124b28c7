"""Which device profiles a projection is made for: the meaning of ``--devices SPEC``.

``local`` (default): the OpenCL devices of this machine, each resolved by
:mod:`devices.local` (committed measured profile, cached, measured now, or a generic
low-confidence one). ``measured``: every committed profile measured on real hardware.
``all``: measured and spec-sheet profiles. Anything else: a comma list of profile keys,
profile file paths (a device-profile JSON, or a device sheet ``.toml`` built into a
profile by :mod:`devices.sheet`), and ``local`` itself (``local,nvidia-h100-80gb-hbm3-nvidia``: this
machine's devices beside a cluster GPU). The same spec means the same profiles in the app and
after it exits: ``clproj run`` resolves it once and hands the app the profile files.
"""

from __future__ import annotations

from typing import Any

from clproj.errors import ClprojError


def local_profiles(measure_missing: bool = True) -> list[Any]:
    """A profile for every local OpenCL device (see :mod:`devices.local`)."""
    from clproj.devices.local import resolve_all

    out = [lp.profile for lp in resolve_all(measure_missing)]
    if not out:
        raise ClprojError("this machine has no OpenCL device", "run `clproj doctor`")
    return out


def resolve(spec: str | None, measure_missing: bool = True) -> list[Any]:
    """Device profiles named by a ``--devices`` value (see module docstring)."""
    from clproj.devices.profile import known_profiles, load_profile

    spec = ("local" if spec is None else spec).strip()  # "" names nothing: an error below
    if spec in ("all", "measured"):
        profiles = known_profiles()
        if spec == "measured":
            profiles = [p for p in profiles if p.source_kind != "spec"]
        return profiles
    items = [item.strip() for item in spec.split(",") if item.strip()]
    if not items:
        raise ClprojError(
            f"--devices {spec!r} names no device",
            "use local, measured, all, or a comma list of profile keys, profile JSON files or "
            "device sheets (.toml)",
        )
    out: list[Any] = []
    for item in items:
        if item == "local":
            out.extend(local_profiles(measure_missing))
        elif item in ("all", "measured"):
            out.extend(resolve(item))
        else:
            out.append(load_profile(item))
    # A profile named twice is kept once; two different profiles under one key would be
    # one column of every table and one choice, the second silently gone.
    first: dict[str, Any] = {}
    for p in out:
        other = first.setdefault(p.key, p)
        if other is not p and other.data != p.data:
            raise ClprojError(
                f"--devices {spec!r}: two different profiles have the key {p.key!r} "
                f"({other.path or 'shipped'} and {p.path or 'shipped'})",
                'give one of them another key (its "key" field)',
            )
    return list(first.values())
