"""Device profiles (``clproj.device-profile`` v1): load, validate, query.

A device profile is everything the projection model needs to know about one device:
instruction throughputs, memory-throughput-vs-occupancy curves, occupancy limits, launch
overhead and transfer bandwidth. Profiles come from spec sheets (``devices/specs.py``
writes ``devices/profiles/spec/*.json``) or from our microbenchmarks
(``clproj profile-device`` writes ``devices/profiles/measured/*.json``).

Every profile is validated on load (devices/profile_check.py) and names the exact field
that is wrong. Queries never raise
``KeyError``: a class or curve a profile lacks falls back along the documented rules
(``docs/devices.md``), since spec sheets never list every instruction class.
"""

from __future__ import annotations

import bisect
import json
import math
import os
from pathlib import Path
from typing import Any

from clproj.devices.launch_rules import NullLocalRule, rule_for
from clproj.errors import ClprojError
from clproj.stats_table import INSTRUCTION_CLASSES
from clproj.untrusted import read_json_file

FORMAT = "clproj.device-profile"
VERSION = 1
PROFILES_DIR = Path(__file__).resolve().parent / "profiles"

# The plugin's instruction classes (clproj/stats_table.py): one definition for C++ and Python.
# Curves over occupancy (x = resident work-items per compute unit).
OCCUPANCY_CURVES = ("global_read", "global_write", "global_copy", "local")
REQUIRED_CURVES = (*OCCUPANCY_CURVES, "strided_read")
# Optional curves: x = conflict degree (ways), 1 = conflict-free.
OPTIONAL_CURVES = ("local_conflict",)

# Fallbacks for classes a profile lacks: (source class, factor). Applied repeatedly, so
# a chain ends at a class every valid profile has (fp32_fma / int_add are required).
FALLBACKS: dict[str, tuple[str, float]] = {
    "fp32_add": ("fp32_fma", 1.0),
    "fp32_mul": ("fp32_fma", 1.0),
    "fp32_div": ("special", 0.5),  # reciprocal on the special unit + refinement
    "fp64_add": ("fp64_fma", 1.0),
    "fp64_mul": ("fp64_fma", 1.0),
    "fp64_fma": ("fp32_fma", 1.0 / 32.0),  # consumer parts: 1/32 rate
    "fp64_div": ("fp64_fma", 1.0 / 8.0),  # Newton-Raphson, ~8 dependent fma
    "int_add": ("fp32_add", 1.0),
    "int_mul": ("int_add", 0.25),
    "int_div": ("int_mul", 1.0 / 20.0),  # no hardware divider: ~20-instruction sequence
    "special": ("fp32_fma", 0.125),
    "conversion": ("special", 1.0),
    "compare_select": ("int_add", 1.0),
    "branch": ("int_add", 1.0),
    "barrier": ("int_add", 0.25),
    "atomic": ("int_add", 1.0 / 32.0),
    "memory_global": ("int_add", 1.0),  # issue cost only; bytes go to the memory bound
    "memory_local": ("int_add", 1.0),
    "memory_private": ("int_add", 1.0),
    "other": ("int_add", 1.0),
}


def _interp_loglinear(points: list[list[float]], x: float) -> float:
    """y at ``x`` by linear interpolation in log2(x); clamped at both ends."""
    xs = [p[0] for p in points]
    if x <= xs[0]:
        return float(points[0][1])
    if x >= xs[-1]:
        return float(points[-1][1])
    i = bisect.bisect_right(xs, x)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    t = (math.log2(x) - math.log2(x0)) / (math.log2(x1) - math.log2(x0))
    return float(y0 + t * (y1 - y0))


class DeviceProfile:
    """A validated device profile with the queries the projection model needs."""

    def __init__(self, data: dict[str, Any], path: str | None = None) -> None:
        from clproj.devices.profile_check import validate

        validate(data)
        self.data = data
        self.path = path
        ident = data["identity"]
        occ = data["occupancy"]
        mem = data["memory"]
        self.key: str = data["key"]
        self.kind: str = ident["kind"]
        self.name: str = ident["name"]
        self.compute_units: int = data["compute_units"]
        self.clock_mhz: int = data["clock_mhz"]
        self.warp_width: int = data["warp_width"]
        self.max_work_items_per_cu: int = occ["max_work_items_per_cu"]
        self.max_groups_per_cu: int = occ["max_groups_per_cu"]
        self.local_bytes_per_cu: int = occ["local_bytes_per_cu"]
        self.registers_per_cu: int = occ["registers_per_cu"]
        self.max_work_group_size: int = occ["max_work_group_size"]
        self.segment_bytes: list[int] = list(mem["segment_bytes"])
        self.local_banks: int = mem["local_banks"]
        self.launch_overhead_s: float = float(data["launch_overhead_s"])
        self.h2d_bytes_per_s: float = float(data["transfer"]["h2d_bytes_per_s"])
        self.d2h_bytes_per_s: float = float(data["transfer"]["d2h_bytes_per_s"])

    # -- queries
    @property
    def source_kind(self) -> str:
        return self.data["source"]["kind"]

    @property
    def low_confidence(self) -> bool:
        """A generic stand-in, not measured on the device nor from its own sheet."""
        return self.data["source"].get("confidence") == "low"

    @property
    def has_bank_conflicts(self) -> bool:
        """False for devices whose local memory is ordinary cache (``local_banks == 0``)."""
        return self.local_banks > 0

    def throughput(self, cls: str) -> float:
        """Device-wide ops/s of an instruction class, with the documented fallbacks.

        Unknown class names are treated as ``other``; never raises ``KeyError``.
        """
        tp = self.data["throughput"]
        factor = 1.0
        name = cls if cls in INSTRUCTION_CLASSES else "other"
        seen: set[str] = set()
        while name not in tp:
            if name in seen or name not in FALLBACKS:  # cannot happen for a valid profile
                return float(tp["int_add"]) * factor
            seen.add(name)
            name, f = FALLBACKS[name]
            factor *= f
        return float(tp[name]) * factor

    def curve(self, name: str, work_items_per_cu: float) -> float:
        """Bytes/s of curve ``name`` at this occupancy (log-linear interpolation, clamped).

        ``local_conflict`` (x = conflict ways) falls back to ``local / ways`` when the
        profile lacks it; any other unknown name raises ``ClprojError``.
        """
        curves = self.data["curves"]
        if name in curves:
            return _interp_loglinear(curves[name], max(work_items_per_cu, 1e-9))
        if name == "local_conflict":
            return self.local_conflict(work_items_per_cu)
        raise ClprojError(
            f"device profile {self.key} has no curve {name!r}",
            f"use one of {', '.join(sorted(curves))}",
        )

    def peak(self, name: str) -> float:
        """The highest point of a curve (bytes/s)."""
        return max(y for _, y in self.data["curves"][name])

    def strided_read(self, stride: int) -> float:
        """Useful bytes/s of a read with this stride (in 4-byte words); clamped at 1..max."""
        return _interp_loglinear(self.data["curves"]["strided_read"], max(1, stride))

    def local_conflict(self, ways: float) -> float:
        """Local-memory bytes/s at an n-way bank conflict (1 = conflict-free)."""
        ways = max(1.0, ways)
        pts = self.data["curves"].get("local_conflict")
        if pts:
            return _interp_loglinear(pts, ways)
        return self.peak("local") / (ways if self.has_bank_conflicts else 1.0)

    def launch_floor(self, groups: int) -> float | None:
        """Measured device time of an empty launch of ``groups`` work-groups, or None.

        From ``detail.launch.groups`` (devices/microbench/overhead.py), interpolated in
        log2(groups) and clamped at both ends: past the largest count measured, more groups
        are work, which the bandwidth and throughput curves (measured with many groups)
        already price. None when the profile has no such curve (spec sheets, GPU profiles
        measured before it existed).
        """
        pts = (self.data.get("detail") or {}).get("launch", {}).get("groups")
        if not pts:
            return None
        return _interp_loglinear(pts, max(1.0, float(groups)))

    @property
    def null_local_rule(self) -> NullLocalRule:
        """How this device's driver picks a work-group size for a NULL local size."""
        return rule_for(self.data)

    def null_local_size(self, global_size: list[int]) -> list[int]:
        """The local size this device's driver runs a NULL-local launch of ``global_size``
        with (:mod:`devices.launch_rules`)."""
        return self.null_local_rule.choose(global_size)

    def provenance(self, path: str) -> str:
        """How a field was obtained; a path not listed inherits from its parent, else source.kind."""
        prov = self.data["provenance"]
        parts = path.split(".")
        while parts:
            p = ".".join(parts)
            if p in prov:
                return prov[p]
            parts.pop()
        return self.source_kind

    # -- output
    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.data))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the profile to ``path`` whole or not at all (a full disk leaves no empty
        file; a FIFO or a link to a device at the path is replaced, not written into)."""
        from clproj.atomic import write_atomic
        from clproj.devices.profile_check import validate

        validate(self.data)
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(str(p), (json.dumps(self.data, indent=1) + "\n").encode())

    def __repr__(self) -> str:
        return f"DeviceProfile({self.key!r}, {self.source_kind})"


# --------------------------------------------------------------------------- lookup


# A device profile is tens of KiB (the measured H200's: 49 KiB); past this it is not one.
MAX_PROFILE_BYTES = 16 << 20
PROFILE_FIX = "pass a device profile JSON file (clproj profile-device, or a shipped one)"


def _read(path: Path) -> DeviceProfile:
    doc = read_json_file(str(path), "device profile", MAX_PROFILE_BYTES, PROFILE_FIX)
    try:
        return DeviceProfile(doc, str(path))
    except ClprojError as exc:
        raise ClprojError(f"{path}: {exc.cause}", exc.fix) from exc


def profile_paths() -> list[Path]:
    """Every shipped profile file: spec sheets first, then measured ones."""
    return sorted((PROFILES_DIR / "spec").glob("*.json")) + sorted(
        (PROFILES_DIR / "measured").glob("*.json")
    )


def known_profiles() -> list[DeviceProfile]:
    """All shipped profiles (spec + measured), each validated."""
    return [_read(p) for p in profile_paths()]


def load_profile(path_or_key: str) -> DeviceProfile:
    """A profile from a JSON file path, a device sheet (``.toml``, built by
    :mod:`devices.sheet`), or a shipped profile by its ``key``."""
    p = Path(path_or_key)
    if p.suffix == ".toml":
        from clproj.devices.sheet import profile_from_sheet

        return DeviceProfile(profile_from_sheet(str(p)), str(p))
    if p.suffix == ".json" or os.path.lexists(p):
        if not os.path.lexists(p):  # a link that leads nowhere is there: _read says why
            raise ClprojError(f"no device profile file {p}", "check the path")
        return _read(p)
    for path in profile_paths():  # the project's own files: only their keys read here
        try:
            key = json.loads(path.read_text()).get("key")
        except (OSError, json.JSONDecodeError):
            continue
        if key == path_or_key:
            return _read(path)
    keys = ", ".join(json.loads(q.read_text()).get("key", q.stem) for q in profile_paths())
    raise ClprojError(f"no device profile with key {path_or_key!r}", f"known keys: {keys}")


def _norm(s: str | None) -> str:
    return " ".join((s or "").split()).lower()


def profile_for_device(cl_device: Any) -> DeviceProfile | None:
    """The committed measured profile of this OpenCL device (same name and platform), else None.

    A device known by name alone (an energy-results file names the GPU as NVML does, with
    no OpenCL platform) matches a profile of that name on any platform.

    Among several matches the one with the same driver version wins, then the newest.
    """
    try:
        name = _norm(cl_device.name)
        platform = _norm(cl_device.platform.name)
        driver = _norm(cl_device.driver_version)
    except Exception:
        return None
    matches: list[tuple[int, str, DeviceProfile]] = []
    for path in sorted((PROFILES_DIR / "measured").glob("*.json")):
        try:
            prof = _read(path)
        except ClprojError:
            continue
        ident = prof.data["identity"]
        if _norm(ident.get("name")) != name:
            continue
        if ident.get("platform") and platform and _norm(ident["platform"]) != platform:
            continue
        same_driver = int(_norm(ident.get("driver")) == driver)
        matches.append((same_driver, str(prof.data["source"].get("date", "")), prof))
    if not matches:
        return None
    matches.sort(key=lambda m: (m[0], m[1]))
    return matches[-1][2]
