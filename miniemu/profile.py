"""Kernel profiles (docs/formats.md section 2) and the scaling from emulated groups to the NDRange.

Scaling rule (docs/miniemu.md): every counter is extensive in work-items, so

    total     = sum(emulated groups) * total_work_items / emulated_work_items
    per_group = total / num_groups

In ``full`` mode the factor is 1 and ``total`` is exact. Partial groups (global size not a
multiple of the local size) are weighted by their work-items, never counted as full groups.
``local.bytes_per_group`` and ``private_bytes_per_work_item`` are properties of a group and
a work-item: they are copied into both structures, not scaled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from clproj.devices.launch_rules import divisor_local_size
from clproj.errors import ClprojError
from clproj.miniemu.backend import RawEmulation
from clproj.untrusted import is_finite_number, is_int, short

FORMAT = "clproj.kernel-profile"
VERSION = 1
# Relative first-vs-last difference (per work-item) above which a launch is data-dependent.
DATA_DEPENDENT_THRESHOLD = 0.05
_NOT_SCALED = ("bytes_per_group", "private_bytes_per_work_item")
# The group a NULL-local launch is emulated with: AMD's driver rule at 256 work-items
# (devices/launch_rules.py), full warps of every width the plugin counts (8-64) wherever
# the global size allows. Statistics are per work-item, so the projection regroups them
# to the size each device's own driver picks (runtime/projection/launch_shape.py).
EMULATED_NULL_LOCAL_LIMIT = 256


def emulated_local_size(global_size: list[int]) -> list[int]:
    """The local size a launch the app left to the driver (NULL) is emulated with."""
    return divisor_local_size([int(g) for g in global_size], EMULATED_NULL_LOCAL_LIMIT)


def _map(stats: Any, fn) -> Any:
    if isinstance(stats, dict):
        return {k: (v if k in _NOT_SCALED else _map(v, fn)) for k, v in stats.items()}
    if isinstance(stats, (int, float)):
        return fn(stats)
    return stats


def add_stats(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Element-wise sum of two statistics structures (missing keys count as 0)."""
    out: dict[str, Any] = {}
    for k in list(a) + [k for k in b if k not in a]:  # keep the plugin's key order
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) or isinstance(vb, dict):
            out[k] = add_stats(va or {}, vb or {})
        else:
            out[k] = (va or 0) + (vb or 0)
    return out


def scale_stats(stats: dict[str, Any], factor: float) -> dict[str, Any]:
    """Multiply every counter by ``factor``, rounding to whole counts."""
    return _map(stats, lambda v: round(v * factor))


def instructions_total(stats: dict[str, Any]) -> int:
    return int(sum(stats.get("instructions", {}).values()))


def _metrics(stats: dict[str, Any]) -> dict[str, float]:
    """Per-work-item quantities compared between groups to detect data dependence."""
    wi = max(1, int(stats.get("work_items", 1)))
    g, loc = stats.get("global", {}), stats.get("local", {})
    return {
        "instructions": instructions_total(stats) / wi,
        "global load bytes": g.get("load_bytes", 0) / wi,
        "global store bytes": g.get("store_bytes", 0) / wi,
        "local accesses": loc.get("accesses", 0) / wi,
        "branches": stats.get("branches", {}).get("total", 0) / wi,
        "atomics": sum(stats.get("atomics", {}).values()) / wi,
    }


def group_difference(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, str]:
    """Largest relative per-work-item difference between two groups, and in what."""
    ma, mb = _metrics(a), _metrics(b)
    worst, what = 0.0, "instructions"
    for k in ma:
        hi = max(ma[k], mb[k])
        if hi > 0:
            d = abs(ma[k] - mb[k]) / hi
            if d > worst:
                worst, what = d, k
    return worst, what


@dataclass
class KernelProfile:
    """Device-independent statistics of one launch (format ``clproj.kernel-profile`` v1)."""

    kernel: str
    signature: str
    launch: dict[str, Any]
    emulation: dict[str, Any]
    per_group: dict[str, Any]
    total: dict[str, Any]
    groups: list[dict[str, Any]] = field(default_factory=list, repr=False)  # raw, not serialised

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "kernel": self.kernel,
            "signature": self.signature,
            "launch": self.launch,
            "emulation": self.emulation,
            "per_group": self.per_group,
            "total": self.total,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KernelProfile:
        if d.get("format") != FORMAT:
            raise ClprojError(
                f"field format is {d.get('format')!r}, not {FORMAT!r}",
                "pass a kernel profile written by `clproj emulate --json`",
            )
        if not isinstance(d.get("version"), int) or d["version"] > VERSION:
            raise ClprojError(
                f"field version is {d.get('version')!r}; this clproj reads kernel profiles up to version {VERSION}",
                "upgrade clproj or re-emulate the record",
            )
        for key in ("kernel", "launch", "emulation", "per_group", "total"):
            if key not in d:
                raise ClprojError(f"kernel profile lacks field {key!r}", "re-emulate the record")
        return cls(
            kernel=d["kernel"],
            signature=d.get("signature", ""),
            launch=d["launch"],
            emulation=d["emulation"],
            per_group=d["per_group"],
            total=d["total"],
        )


CONFIDENCES = ("high", "medium", "low")
# Top-level keys of the statistics structure (docs/formats.md section 2).
STATS_KEYS = (
    "work_items",
    "instructions",
    "global",
    "local",
    "branches",
    "barriers",
    "atomics",
    "private_bytes_per_work_item",
)
_MAX_STATS_DEPTH = 6  # the structure nests 4 deep (global.transactions.load.<warp>.<seg>)
_PROFILE_FIX = (
    "pass a kernel profile written by `clproj emulate --json` (docs/formats.md section 2)"
)


def _bad_field(path: str, what: str) -> ClprojError:
    return ClprojError(f"kernel profile field {path}: {what}", _PROFILE_FIX)


def _get(d: dict[str, Any], path: str, key: str) -> Any:
    if key not in d:
        raise _bad_field(f"{path}.{key}" if path else key, "missing")
    return d[key]


def _positive_int(path: str, v: Any) -> int:
    if not is_int(v) or not 1 <= v <= 2**64:
        raise _bad_field(path, f"must be a positive integer, got {short(v)}")
    return v


def _count(path: str, v: Any) -> float:
    """A counter or size: a finite number >= 0 (never NaN, infinity, a string or a bool)."""
    if not is_finite_number(v):
        raise _bad_field(path, f"must be a finite number, got {short(v)}")
    if v < 0:
        raise _bad_field(path, f"must not be negative, got {short(v)}")
    return v


def _check_stats(path: str, stats: Any, depth: int = 0) -> None:
    """Every leaf of a statistics structure is a finite count >= 0; maps all the way down."""
    if depth > _MAX_STATS_DEPTH:
        raise _bad_field(path, "nested too deeply for a statistics structure")
    if not isinstance(stats, dict):
        raise _bad_field(path, f"must be an object, got {type(stats).__name__}")
    for k, v in stats.items():
        sub = f"{path}.{k}"
        if isinstance(v, dict):
            _check_stats(sub, v, depth + 1)
        else:
            _count(sub, v)


def _dims(path: str, v: Any, work_dim: int) -> list[int]:
    if not isinstance(v, list) or len(v) != work_dim:
        raise _bad_field(path, f"must list {work_dim} sizes (work_dim), got {short(v)}")
    return [_positive_int(f"{path}[{d}]", x) for d, x in enumerate(v)]


def validate_profile(doc: Any) -> dict[str, Any]:  # noqa: C901
    """Check a kernel-profile document read from a file; returns it unchanged.

    Why: a profile is a file users pass around, and the projection divides by its group
    counts and sums its counters, so a missing key, a string, NaN, infinity or a negative
    count would surface as a traceback or as a silently wrong "recommended device". Every
    failure names the field's dotted path (``total.instructions.fp32_fma``), as
    ``devices.profile`` does for device profiles. Rules: docs/formats.md section 2.
    """
    if not isinstance(doc, dict):
        raise ClprojError(
            f"a kernel profile is a JSON object, this is a {type(doc).__name__}", _PROFILE_FIX
        )
    if doc.get("format") != FORMAT:
        raise _bad_field("format", f"is {short(doc.get('format'))}, not {FORMAT!r}")
    version = doc.get("version")
    if not is_int(version) or not 1 <= version <= VERSION:
        raise ClprojError(
            f"kernel profile field version: {short(version)}; this clproj reads kernel "
            f"profiles up to version {VERSION}",
            "upgrade clproj or re-emulate the record",
        )
    kernel = _get(doc, "", "kernel")
    if not isinstance(kernel, str) or not kernel:
        raise _bad_field("kernel", f"must be a kernel name, got {short(kernel)}")
    if not isinstance(doc.get("signature", ""), str):
        raise _bad_field("signature", "must be a string")
    launch = _get(doc, "", "launch")
    if not isinstance(launch, dict):
        raise _bad_field("launch", "must be an object")
    work_dim = _get(launch, "launch", "work_dim")
    if not is_int(work_dim) or not 1 <= work_dim <= 3:
        raise _bad_field("launch.work_dim", f"must be 1, 2 or 3, got {short(work_dim)}")
    gsz = _dims("launch.global_size", _get(launch, "launch", "global_size"), work_dim)
    lsz = _dims("launch.local_size", _get(launch, "launch", "local_size"), work_dim)
    num_groups = _positive_int("launch.num_groups", _get(launch, "launch", "num_groups"))
    group_size = _positive_int("launch.group_size", _get(launch, "launch", "group_size"))
    expect_groups = math.prod(-(-g // lo) for g, lo in zip(gsz, lsz, strict=True))
    if num_groups != expect_groups:
        raise _bad_field(
            "launch.num_groups",
            f"{num_groups} disagrees with global_size {gsz} / local_size {lsz} ({expect_groups})",
        )
    if group_size != math.prod(lsz):
        raise _bad_field(
            "launch.group_size", f"{group_size} disagrees with local_size {lsz} ({math.prod(lsz)})"
        )
    if "num_groups_per_dim" in launch:
        _dims("launch.num_groups_per_dim", launch["num_groups_per_dim"], work_dim)
    if "work_items" in launch and _positive_int("launch.work_items", launch["work_items"]) != (
        math.prod(gsz)
    ):
        raise _bad_field("launch.work_items", f"disagrees with global_size {gsz}")
    if "local_size_was_null" in launch and not isinstance(launch["local_size_was_null"], bool):
        raise _bad_field("launch.local_size_was_null", "must be true or false")
    if launch.get("footprint_bytes") is not None:
        _count("launch.footprint_bytes", launch["footprint_bytes"])
    em = _get(doc, "", "emulation")
    if not isinstance(em, dict):
        raise _bad_field("emulation", "must be an object")
    for key in ("mode", "emulator"):
        if not isinstance(_get(em, "emulation", key), str):
            raise _bad_field(f"emulation.{key}", "must be a string")
    if _get(em, "emulation", "confidence") not in CONFIDENCES:
        raise _bad_field("emulation.confidence", f"must be one of {', '.join(CONFIDENCES)}")
    flags = _get(em, "emulation", "flags")
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise _bad_field("emulation.flags", "must be a list of strings")
    for key in ("groups_emulated", "work_items_emulated"):
        v = _get(em, "emulation", key)
        if not is_int(v) or v < 0:
            raise _bad_field(f"emulation.{key}", f"must be an integer >= 0, got {short(v)}")
    _count("emulation.wall_s", _get(em, "emulation", "wall_s"))
    for part in ("per_group", "total"):
        stats = _get(doc, "", part)
        _check_stats(part, stats)
        for key in STATS_KEYS:
            _get(stats, part, key)
        if _count(f"{part}.work_items", stats["work_items"]) <= 0:
            raise _bad_field(f"{part}.work_items", "must be positive")
        if not isinstance(stats["instructions"], dict):
            raise _bad_field(f"{part}.instructions", "must be an object")
    return doc


def build_profile(  # noqa: C901
    raw: RawEmulation, kernel: str, signature: str, local_size_was_null: bool
) -> KernelProfile:
    """Scale the emulated groups of ``raw`` to the whole NDRange and attach flags."""
    if not raw.groups:
        raise ClprojError(
            f"the emulator ran no work-group of {kernel}", "check the NDRange of the record"
        )
    num_groups = math.prod(raw.num_groups)
    group_size = math.prod(raw.local_size)
    total_wi = math.prod(raw.global_size)
    summed: dict[str, Any] = {}
    for g in raw.groups:
        summed = add_stats(summed, g.stats)
    emulated_wi = sum(g.work_items for g in raw.groups)
    total = scale_stats(summed, total_wi / emulated_wi)
    per_group = scale_stats(total, 1.0 / num_groups)
    for s in (total, per_group):
        s.setdefault("local", {})["bytes_per_group"] = raw.local_bytes_per_group
        s["private_bytes_per_work_item"] = raw.private_bytes_per_work_item

    flags: list[str] = []
    confidence = "high"
    partial = any(gs % ls for gs, ls in zip(raw.global_size, raw.local_size, strict=True))
    if local_size_was_null:
        flags.append(
            f"local size was NULL: emulated with groups of {raw.local_size}, "
            "regrouped for each device by its driver's rule"
        )
    if partial:
        flags.append("partial work-groups: scaled per work-item")
    if len(raw.groups) >= 2:
        diff, what = group_difference(raw.groups[0].stats, raw.groups[-1].stats)
        if diff > DATA_DEPENDENT_THRESHOLD:
            flags.append(
                f"data-dependent: first and last group differ by {diff:.0%} in {what} per work-item"
            )
            if raw.mode != "full":
                confidence = "low" if diff > 0.2 else "medium"
    elif raw.mode in ("single", "bounded") and num_groups > 1:
        flags.append("single work-group: data dependence not checked (use --mode quick)")
        confidence = "medium"
    errors = [line for line in raw.log.splitlines() if line.strip()]
    if errors:
        flags.append(f"emulator reported: {errors[0].strip()[:200]}")
        confidence = "low"

    launch = {
        "work_dim": raw.work_dim,
        "global_size": raw.global_size,
        "local_size": raw.local_size,
        "local_size_was_null": local_size_was_null,
        "num_groups": num_groups,
        "num_groups_per_dim": raw.num_groups,
        "group_size": group_size,
        "work_items": total_wi,
    }
    emulation = {
        "mode": raw.mode,
        "emulator": raw.emulator,
        "groups_emulated": len(raw.groups),
        "work_items_emulated": emulated_wi,
        "wall_s": round(raw.wall_s, 4),
        "confidence": confidence,
        "flags": flags,
        "emulated_group_ids": [g.group_id[: raw.work_dim] for g in raw.groups][:16],
        "private_estimate": raw.private_detail,
    }
    groups = [
        {"group_id": g.group_id, "work_items": g.work_items, "stats": g.stats} for g in raw.groups
    ]
    return KernelProfile(kernel, signature, launch, emulation, per_group, total, groups)
