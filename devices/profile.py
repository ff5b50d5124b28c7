"""Device profiles (``clproj.device-profile`` v1): load, validate, query.

A device profile is everything the projection model needs to know about one device:
instruction throughputs, memory-throughput-vs-occupancy curves, occupancy limits, launch
overhead and transfer bandwidth. Profiles come from spec sheets (``devices/specs.py``
writes ``devices/profiles/spec/*.json``) or from our microbenchmarks
(``clproj profile-device`` writes ``devices/profiles/measured/*.json``).

The validator is strict and names the exact field that is wrong, because a bad number in
a profile silently corrupts every projection made with it. Queries never raise
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

from clproj.devices.launch_rules import NullLocalRule, rule_for, validate_rule
from clproj.errors import ClprojError

FORMAT = "clproj.device-profile"
VERSION = 1
PROFILES_DIR = Path(__file__).resolve().parent / "profiles"

INSTRUCTION_CLASSES = (
    "fp32_add",
    "fp32_mul",
    "fp32_fma",
    "fp32_div",
    "fp64_add",
    "fp64_mul",
    "fp64_fma",
    "fp64_div",
    "int_add",
    "int_mul",
    "int_div",
    "special",
    "conversion",
    "compare_select",
    "branch",
    "barrier",
    "atomic",
    "memory_global",
    "memory_local",
    "memory_private",
    "other",
)
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

_IDENTITY_KINDS = ("GPU", "CPU", "ACCELERATOR", "OTHER")
_SOURCE_KINDS = ("measured", "spec", "mixed")
# "low": a generic profile (devices/local.py) not measured on the device; outputs flag it.
_CONFIDENCE = ("normal", "low")


# --------------------------------------------------------------------------- validation


def _fail(field: str, msg: str) -> None:
    raise ClprojError(
        f"device profile field {field}: {msg}",
        "fix the profile (see docs/formats.md section 3 and docs/devices.md)",
    )


def _get(doc: dict[str, Any], path: str) -> Any:
    cur: Any = doc
    walked = []
    for part in path.split("."):
        walked.append(part)
        if not isinstance(cur, dict):
            _fail(".".join(walked[:-1]), f"expected an object, got {type(cur).__name__}")
        if part not in cur:
            _fail(".".join(walked), "missing")
        cur = cur[part]
    return cur


# No rate, size or time of a device comes near this (1e18 ops/s, bytes or bytes/s); a value
# above it is a corrupt file, and it would overflow the model's arithmetic (a curve point
# of 1e308 ended in "cannot convert float infinity to integer").
PLAUSIBLE_MAX = 1e18


def _num(
    doc: dict[str, Any],
    path: str,
    *,
    integer: bool = False,
    minimum: float = 0.0,
    strict: bool = True,
    maximum: float = PLAUSIBLE_MAX,
) -> float:
    value = _get(doc, path)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(path, f"expected a number, got {value!r}")
    if integer and not isinstance(value, int):
        _fail(path, f"expected an integer, got {value!r}")
    if not math.isfinite(value):
        _fail(path, f"expected a finite number, got {value!r}")
    if (strict and value <= minimum) or (not strict and value < minimum):
        _fail(path, f"expected a number {'>' if strict else '>='} {minimum:g}, got {value!r}")
    if value > maximum:
        _fail(path, f"expected at most {maximum:g}, got {value!r}")
    return value


def _str(doc: dict[str, Any], path: str, choices: tuple[str, ...] | None = None) -> str:
    value = _get(doc, path)
    if not isinstance(value, str) or not value:
        _fail(path, f"expected a non-empty string, got {value!r}")
    if choices and value not in choices:
        _fail(path, f"expected one of {', '.join(choices)}, got {value!r}")
    return value


def _points(field: str, value: Any) -> None:
    if not isinstance(value, list) or not value:
        _fail(field, "expected a non-empty list of [x, y] points")
    last = -math.inf
    for i, pt in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(pt, list) or len(pt) != 2:
            _fail(where, f"expected an [x, y] pair, got {pt!r}")
        for v in pt:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                _fail(where, f"expected finite numbers, got {pt!r}")
        x, y = pt
        if x <= 0 or y <= 0:
            _fail(where, f"expected positive x and y, got {pt!r}")
        if x > PLAUSIBLE_MAX or y > PLAUSIBLE_MAX:
            _fail(where, f"expected values at most {PLAUSIBLE_MAX:g}, got {pt!r}")
        if x <= last:
            _fail(where, f"x values must be strictly ascending ({x!r} after {last!r})")
        last = x


# Optional measured values the projection reads (each a positive, finite number where
# present): single fields, and objects whose every value is one.
_OPTIONAL_NUMBERS = (
    "memory.cache_bytes",
    "memory.cache_read_bytes_per_s",
    "detail.loop_factor",
    "detail.host_cores",
    "detail.launch.event_s",
    "detail.launch.event_b2b_s",
    "detail.latency.global_latency_s",
    "detail.latency.cache_latency_s",
    "detail.latency.departure_delay_s",
    "detail.latency.global_buffer_bytes",
    "detail.latency.cache_buffer_bytes",
    "detail.cache.read_bytes_per_s",
    "detail.cache.buffer_bytes",
    "detail.straight_bandwidth.global_copy",
    "detail.raw_loop.reload_round_s",  # measured since 2026-11-25
)
_OPTIONAL_NUMBER_MAPS = (
    "detail.loop_throughput",
    "detail.special",
    "detail.atomics_same_address_per_s",
    "detail.straight_bandwidth.rates",
)


def _optional(doc: dict[str, Any], path: str) -> Any:
    """The value at a dotted path, or None where it (or a parent) is absent; like
    :func:`_get`, a parent that is there but not an object is an error."""
    cur: Any = doc
    walked = []
    for part in path.split("."):
        walked.append(part)
        if cur is None:
            return None
        if not isinstance(cur, dict):
            _fail(".".join(walked[:-1]), f"expected an object, got {type(cur).__name__}")
        cur = cur.get(part)
    return cur


def _optional_numbers(doc: dict[str, Any]) -> None:
    """The optional measured values: a profile copied from another machine may carry any
    of them broken (a list, a string, NaN), and the model divides by them."""
    for path in _OPTIONAL_NUMBERS:
        if _optional(doc, path) is not None:
            _num(doc, path)
    for path in _OPTIONAL_NUMBER_MAPS:
        value = _optional(doc, path)
        if value is None:
            continue
        if not isinstance(value, dict):
            _fail(path, f"expected an object of name -> number, got {type(value).__name__}")
        for name in value:
            _num(doc, f"{path}.{name}")


def validate(doc: dict[str, Any]) -> None:
    """Raise ``ClprojError("device profile field X: ...")`` at the first invalid field."""
    if not isinstance(doc, dict):
        _fail("(document)", f"expected a JSON object, got {type(doc).__name__}")
    if _get(doc, "format") != FORMAT:
        _fail("format", f"expected {FORMAT!r}, got {doc['format']!r}")
    version = _get(doc, "version")
    if not isinstance(version, int) or isinstance(version, bool):
        _fail("version", f"expected an integer, got {version!r}")
    if version > VERSION:
        _fail("version", f"version {version} is newer than this clproj reads ({VERSION})")
    if version < 1:
        _fail("version", f"expected >= 1, got {version!r}")
    _str(doc, "key")
    for f in ("name", "vendor"):
        _str(doc, f"identity.{f}")
    _str(doc, "identity.kind", _IDENTITY_KINDS)
    _str(doc, "source.kind", _SOURCE_KINDS)
    conf = doc["source"].get("confidence", "normal")  # a dict: source.kind was read from it
    if conf not in _CONFIDENCE:
        _fail("source.confidence", f"expected one of {', '.join(_CONFIDENCE)}, got {conf!r}")
    # Upper bounds far beyond any device (a profile is a file from elsewhere: 10**30
    # compute units validated, and projected a launch at 1e22 s).
    for f, most in (("compute_units", 2**20), ("clock_mhz", 100_000), ("warp_width", 1024)):
        _num(doc, f, integer=True, maximum=most)
    for f in ("global_bytes", "local_bytes_per_cu", "bank_width_bytes", "cache_line_bytes"):
        _num(doc, f"memory.{f}", integer=True)
    _num(doc, "memory.peak_bandwidth_gbs")
    if _get(doc, "memory").get("l1_data_bytes") is not None:  # optional: CPU profiles
        _num(doc, "memory.l1_data_bytes", integer=True)
    _num(doc, "memory.local_banks", integer=True, strict=False)  # 0: no banks (CPUs)
    segs = _get(doc, "memory.segment_bytes")
    if (
        not isinstance(segs, list)
        or not segs
        or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in segs)
    ):
        _fail("memory.segment_bytes", f"expected a non-empty list of positive ints, got {segs!r}")
    for f in (
        "max_work_items_per_cu",
        "max_groups_per_cu",
        "local_bytes_per_cu",
        "registers_per_cu",
        "max_work_group_size",
    ):
        _num(doc, f"occupancy.{f}", integer=True)
    tp = _get(doc, "throughput")
    if not isinstance(tp, dict):
        _fail("throughput", "expected an object of instruction class -> ops/s")
    for cls in tp:
        if cls not in INSTRUCTION_CLASSES:
            _fail(f"throughput.{cls}", "unknown instruction class (docs/formats.md)")
        _num(doc, f"throughput.{cls}")
    for cls in ("fp32_fma", "int_add"):
        _num(doc, f"throughput.{cls}")
    curves = _get(doc, "curves")
    if not isinstance(curves, dict):
        _fail("curves", "expected an object of curve name -> points")
    for name in REQUIRED_CURVES:
        _points(f"curves.{name}", _get(doc, f"curves.{name}"))
    for name, pts in curves.items():
        if name not in REQUIRED_CURVES + OPTIONAL_CURVES:
            _fail(f"curves.{name}", "unknown curve name")
        _points(f"curves.{name}", pts)
    _num(doc, "launch_overhead_s")
    _num(doc, "transfer.h2d_bytes_per_s")
    _num(doc, "transfer.d2h_bytes_per_s")
    prov = _get(doc, "provenance")
    if not isinstance(prov, dict):
        _fail("provenance", "expected an object of field path -> measured/spec/derived: rule")
    for path, how in prov.items():
        if not isinstance(how, str) or not (
            how in ("measured", "spec") or how.startswith("derived: ")
        ):
            _fail(
                f"provenance.{path}", f"expected measured, spec or 'derived: <rule>', got {how!r}"
            )
    detail = doc.get("detail")
    if detail is not None and not isinstance(detail, dict):
        _fail("detail", f"expected an object, got {type(detail).__name__}")
    launch = (detail or {}).get("launch")
    if launch is not None and not isinstance(launch, dict):
        _fail("detail.launch", f"expected an object, got {type(launch).__name__}")
    if launch and "groups" in launch:
        _points("detail.launch.groups", launch["groups"])
    rounds = (detail or {}).get("raw_loop")
    if rounds is not None:
        if not isinstance(rounds, dict):
            _fail("detail.raw_loop", f"expected an object, got {type(rounds).__name__}")
        for f in ("raw_round_s", "fma_round_s", "add_round_s"):
            _num(doc, f"detail.raw_loop.{f}")
    _optional_numbers(doc)
    driver = doc.get("driver")
    if driver is not None:
        if not isinstance(driver, dict):
            _fail("driver", f"expected an object, got {type(driver).__name__}")
        if driver.get("null_local") is not None:
            why = validate_rule(driver["null_local"])
            if why:
                _fail("driver.null_local", why)
    _validate_power(doc)
    nv = doc.get("nvml")
    if nv is not None and not isinstance(nv, dict):
        _fail("nvml", f"expected an object or null, got {type(nv).__name__}")


# The optional ``power`` section (docs/formats.md section 3): its own version, because
# measured power parameters add fields that old readers must refuse, not misread.
# Version 2: energies per local-memory and L2 byte, and the ``fit`` record of a measured
# section (devices/power_fit.py). Spec-rule sections stay version 1.
POWER_VERSION = 2
SPEC_POWER_VERSION = 1
_POWER_BYTE_FIELDS = ("energy_per_dram_byte_j", "energy_per_l2_byte_j", "energy_per_local_byte_j")
_POWER_RULES = ("spec", "measured")
MAX_POWER_W = 1e5  # no single device draws 100 kW; a larger value is a corrupt file


def _validate_power(doc: dict[str, Any]) -> None:
    """The power section: board power, idle and busy floor in watts (idle <= floor <=
    TDP), optional measured energies per operation and per DRAM byte, and a spec rule
    never claiming more than low confidence (a sheet's TDP is not a measurement)."""
    power = doc.get("power")
    if power is None:
        return
    if not isinstance(power, dict):
        _fail("power", f"expected an object, got {type(power).__name__}")
    version = _get(doc, "power.version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        _fail("power.version", f"expected an integer >= 1, got {version!r}")
    if version > POWER_VERSION:
        _fail("power.version", f"version {version} is newer than this clproj reads")
    rule = _str(doc, "power.rule", _POWER_RULES)
    conf = _str(doc, "power.confidence", _CONFIDENCE)
    if rule == "spec" and conf != "low":
        _fail("power.confidence", "a spec rule's power is low confidence, got 'normal'")
    tdp = _num(doc, "power.tdp_w", maximum=MAX_POWER_W)
    idle = _num(doc, "power.idle_w", strict=False, maximum=tdp)
    if "static_active_w" in power:
        floor = _num(doc, "power.static_active_w", strict=False, maximum=tdp)
        if floor < idle:
            _fail("power.static_active_w", f"below idle_w ({floor!r} < {idle!r})")
    per_op = power.get("energy_per_op_j")
    if per_op is not None:
        if not isinstance(per_op, dict):
            _fail("power.energy_per_op_j", "expected an object of instruction class -> J")
        for cls in per_op:
            if cls not in INSTRUCTION_CLASSES:
                _fail(f"power.energy_per_op_j.{cls}", "unknown instruction class")
            _num(doc, f"power.energy_per_op_j.{cls}", strict=False, maximum=1.0)
    for field in _POWER_BYTE_FIELDS:
        if power.get(field) is not None:
            if field != "energy_per_dram_byte_j" and version < 2:
                _fail(f"power.{field}", "needs power.version 2")
            _num(doc, f"power.{field}", strict=False, maximum=1.0)
    if "fit" in power:
        _validate_power_fit(doc, power["fit"])
    if rule == "measured" and per_op is None:
        _fail("power.energy_per_op_j", "missing: a measured power section gives them")
    prov = power.get("provenance")
    if not isinstance(prov, dict) or not all(isinstance(v, str) for v in prov.values()):
        _fail("power.provenance", "expected an object of field -> how it was obtained")


def _validate_power_fit(doc: dict[str, Any], fit: Any) -> None:
    """A measured section's fit record: method, results file, per-microbenchmark
    measured and fitted energies, and its error (shown by ``clproj profile-device``)."""
    if not isinstance(fit, dict):
        _fail("power.fit", f"expected an object, got {type(fit).__name__}")
    for name in ("method", "results"):
        if not isinstance(fit.get(name), str) or len(fit[name]) > 500:
            _fail(f"power.fit.{name}", "expected a string")
    _num(doc, "power.fit.rms_relative_error", strict=False, maximum=1e6)
    rows = fit.get("microbenchmarks")
    if not isinstance(rows, list) or not 1 <= len(rows) <= 1000:
        _fail("power.fit.microbenchmarks", "expected a list of 1..1000 rows")
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or not isinstance(r.get("name"), str):
            _fail(f"power.fit.microbenchmarks[{i}]", "expected {name, measured_j, fitted_j}")
        for k in ("measured_j", "fitted_j"):
            v = r.get(k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1e9:
                _fail(f"power.fit.microbenchmarks[{i}].{k}", f"expected 0..1e9 J, got {v!r}")


# --------------------------------------------------------------------------- the profile


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
        validate(self.data)
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.data, indent=1) + "\n")

    def __repr__(self) -> str:
        return f"DeviceProfile({self.key!r}, {self.source_kind})"


# --------------------------------------------------------------------------- lookup


def _read(path: Path) -> DeviceProfile:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # unreadable, not UTF-8, not JSON
        raise ClprojError(
            f"cannot read device profile {path}: {exc}", "pass a valid profile JSON file"
        ) from exc
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
    if p.suffix == ".json" or p.exists():
        if not p.exists():
            raise ClprojError(f"no device profile file {p}", "check the path")
        return _read(p)
    for path in profile_paths():
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
        if ident.get("platform") and _norm(ident["platform"]) != platform:
            continue
        same_driver = int(_norm(ident.get("driver")) == driver)
        matches.append((same_driver, str(prof.data["source"].get("date", "")), prof))
    if not matches:
        return None
    matches.sort(key=lambda m: (m[0], m[1]))
    return matches[-1][2]
