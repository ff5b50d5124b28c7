"""A user's own device from its vendor sheet: ``clproj.device-sheet`` v1 (TOML) -> profile.

Why: a device nobody here can measure (a user's new GPU, a cluster node's card) should
not wait for a code change to ``devices/spec_sheets.py``. A small file of the numbers a
vendor publishes — compute units, clock, fp32 lanes, fp64 rate, memory bandwidth and
size, L2, local memory, wavefront — is built into a device profile by the same rules
as every shipped spec profile (:func:`devices.specs.build`), validated like every
profile, and accepted wherever a profile is (``--devices path/to/sheet.toml``,
``clproj devices --sheet``). What a sheet omits comes from a shipped entry of the same
vendor and family (``like``), named in the profile's provenance.

The file is untrusted input (it travels between machines): every failure is one
:class:`ClprojError` naming the field and the fix, never a traceback.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from clproj.errors import ClprojError
from clproj.untrusted import is_finite_number, is_int, read_toml_file

FORMAT = "clproj.device-sheet"
VERSION = 1
MAX_BYTES = 64 * 1024  # a sheet is a dozen lines
FIX = "fix the device sheet (docs/formats.md section 4, clproj.device-sheet)"
# The shipped entry whose family values fill what a sheet omits, by vendor; a sheet of
# another vendor names one with ``like``.
DEFAULT_LIKE = {"nvidia": "h100-sxm-spec", "amd": "mi300x-spec"}
_KEY = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")

# field -> (kind, lowest, highest, required). "int" and "number" are bounded inclusive;
# the bounds are far beyond any device and keep the model's arithmetic finite.
FIELDS: dict[str, tuple[str, float, float, bool]] = {
    "format": ("str", 0, 0, True),
    "version": ("int", 1, VERSION, True),
    "key": ("str", 0, 0, True),
    "name": ("str", 0, 0, True),
    "vendor": ("str", 0, 0, True),
    "compute_units": ("int", 1, 2**20, True),
    "clock_mhz": ("int", 1, 100_000, True),
    "fp32_lanes_per_cu": ("number", 1e-3, 65536, True),
    "memory_bandwidth_gbs": ("number", 1e-3, 1e6, True),
    "global_memory_gib": ("number", 1e-3, 1e6, True),
    "arch": ("str", 0, 0, False),
    "like": ("str", 0, 0, False),
    "fp64_ratio": ("number", 1e-6, 1.0, False),
    "wavefront": ("int", 1, 1024, False),
    "l2_kib": ("int", 0, 2**30, False),
    "local_kib_per_cu": ("int", 1, 2**20, False),
    "local_kib_per_group": ("int", 1, 2**20, False),
    "max_work_group_size": ("int", 1, 2**20, False),
    "max_work_items_per_cu": ("int", 1, 2**20, False),
    "max_groups_per_cu": ("int", 1, 2**16, False),
    "registers_per_cu": ("int", 1, 2**30, False),
    "pcie_gen": ("int", 2, 5, False),
    "tdp_w": ("number", 1, 100_000, False),
    "sources": ("strs", 0, 0, False),
    "notes": ("str", 0, 0, False),
}


def _fail(path: str, field: str, what: str) -> ClprojError:
    return ClprojError(f"device sheet {path} field {field}: {what}", FIX)


def read_sheet(path: str) -> dict[str, Any]:  # noqa: C901
    """The checked fields of the sheet at ``path`` (types, ranges, no unknown names)."""
    doc = read_toml_file(path, "device sheet", MAX_BYTES, FIX)
    for name in doc:
        if name not in FIELDS:
            raise _fail(path, name, f"unknown field (known: {', '.join(FIELDS)})")
    for name, (kind, low, high, required) in FIELDS.items():
        if name not in doc:
            if required:
                raise _fail(path, name, "missing")
            continue
        v = doc[name]
        if kind == "str":
            if not isinstance(v, str) or not v.strip() or len(v) > 500 or "\n" in v:
                raise _fail(path, name, f"expected a one-line string, got {v!r:.60}")
        elif kind == "strs":
            if not isinstance(v, list) or len(v) > 20 or not all(isinstance(s, str) for s in v):
                raise _fail(path, name, "expected a list of at most 20 strings")
        elif kind == "int" and not is_int(v):
            raise _fail(path, name, f"expected an integer, got {v!r:.60}")
        elif kind == "number" and not is_finite_number(v):
            raise _fail(path, name, f"expected a finite number, got {v!r:.60}")
        if kind in ("int", "number") and not low <= v <= high:
            raise _fail(path, name, f"expected {low:g} to {high:g}, got {v!r}")
    if doc["format"] != FORMAT:
        raise _fail(path, "format", f"expected {FORMAT!r}, got {doc['format']!r:.60}")
    if not _KEY.fullmatch(doc["key"]):
        raise _fail(path, "key", "expected lower-case letters, digits, '.', '_', '-' (64 at most)")
    wave = doc.get("wavefront")
    if wave is not None and wave & (wave - 1):  # warps and wavefronts are powers of two
        raise _fail(path, "wavefront", f"expected a power of two (32, 64, ...), got {wave}")
    return doc


def sheet_spec(doc: dict[str, Any], path: str) -> tuple[Any, dict[str, str]]:  # noqa: C901
    """The :class:`devices.spec_sheets.Spec` of a checked sheet, and the provenance of
    every value taken from the ``like`` entry rather than from the sheet."""
    from clproj.devices.spec_sheets import SPECS

    vendor = doc["vendor"]
    like_key = doc.get("like") or DEFAULT_LIKE.get(vendor.lower())
    if like_key is None:
        raise _fail(path, "like", f"required for vendor {vendor!r}: name a shipped spec key")
    like = next((s for s in SPECS if s.key == like_key), None)
    if like is None:
        keys = ", ".join(s.key for s in SPECS)
        raise _fail(path, "like", f"no shipped spec {like_key!r} (known: {keys})")
    if doc["key"] in {s.key for s in SPECS}:
        raise _fail(path, "key", f"{doc['key']!r} is a shipped profile's key; pick another")
    family = f"derived: as {like.key} ({like.arch}), the sheet's family entry"
    prov = {
        "memory.local_banks": family,
        "memory.segment_bytes": family,
        "memory.cache_line_bytes": family,
    }
    fp32 = float(doc["fp32_lanes_per_cu"])
    ref = like.per_cu["fp32_fma"]
    per_cu = {cls: fp32 * rate / ref for cls, rate in like.per_cu.items()}
    for cls in per_cu:
        if not cls.startswith("fp32"):
            prov[f"throughput.{cls}"] = f"derived: fp32 lanes x {like.key}'s {cls} / fp32 ratio"
    if "fp64_ratio" in doc:
        for cls in ("fp64_fma", "fp64_add", "fp64_mul"):
            per_cu[cls] = fp32 * float(doc["fp64_ratio"])
            prov[f"throughput.{cls}"] = "spec"
    optional = {
        "wavefront": ("warp", "warp_width"),
        "local_kib_per_cu": ("local_kib_per_cu", "memory.local_bytes_per_cu"),
        "local_kib_per_group": ("local_kib_per_group", "memory.local_bytes_per_group"),
        "max_work_group_size": ("max_wg", "occupancy.max_work_group_size"),
        "max_work_items_per_cu": ("max_items_per_cu", "occupancy.max_work_items_per_cu"),
        "max_groups_per_cu": ("max_groups_per_cu", "occupancy.max_groups_per_cu"),
        "registers_per_cu": ("regs_per_cu", "occupancy.registers_per_cu"),
        "pcie_gen": ("pcie_gen", "transfer"),
    }
    values: dict[str, Any] = {}
    for field, (attr, where) in optional.items():
        if field in doc:
            values[attr] = doc[field]
        elif where != "transfer":
            prov[where] = family
    local_cu = values.pop("local_kib_per_cu", like.local_kib_per_cu)
    local_group = values.pop("local_kib_per_group", min(like.local_kib_per_group, local_cu))
    if local_group > local_cu:
        raise _fail(path, "local_kib_per_group", f"{local_group} exceeds local_kib_per_cu")
    l2 = doc.get("l2_kib")
    notes = [doc.get("notes", ""), f"built from device sheet {Path(path).name}"]
    notes.append(f"unlisted values as {like.key}")
    if l2:
        notes.append(f"L2 {l2} KiB")
    spec = dataclasses.replace(
        like,
        key=doc["key"],
        name=doc["name"],
        vendor=vendor,
        arch=doc.get("arch", "unknown"),
        cus=doc["compute_units"],
        clock_mhz=doc["clock_mhz"],
        global_gb=float(doc["global_memory_gib"]),
        bandwidth_gbs=float(doc["memory_bandwidth_gbs"]),
        local_kib_per_cu=local_cu,
        local_kib_per_group=local_group,
        per_cu=per_cu,
        l2_bytes=(l2 or 0) * 1024,
        # Never the family entry's: another device's board power would be an estimate
        # posing as this one's; without it the profile has no power section.
        tdp_w=float(doc.get("tdp_w", 0.0)),
        notes="; ".join(n for n in notes if n),
        sources=tuple(doc.get("sources") or (f"device sheet {Path(path).name}",)),
        **values,
    )
    if "pcie_gen" not in doc:
        prov["transfer"] = f"derived: PCIe generation as {like.key}"
    prov["launch_overhead_s"] = f"derived: {like.launch_s:g} s as {like.key}"
    return spec, prov


def profile_from_sheet(path: str) -> dict[str, Any]:
    """The validated device-profile document of the sheet at ``path``."""
    from clproj.devices.profile_check import validate
    from clproj.devices.specs import build

    doc = read_sheet(path)
    spec, prov = sheet_spec(doc, path)
    try:
        profile = build(spec)
    except ClprojError as exc:  # each number in range, their product past any device
        raise ClprojError(
            f"device sheet {path} builds an invalid profile: {exc.cause}", FIX
        ) from None
    # build() says "spec" for every field of a Spec; the family defaults say where they
    # came from instead (the rules build() applies keep its own "derived: ..." entries).
    for where, how in prov.items():
        old = profile["provenance"].get(where, "spec")
        profile["provenance"][where] = how if old == "spec" else f"{old}; {how[9:]}"
    profile["source"]["tool"] = "devices/sheet.py"
    validate(profile)
    return profile
