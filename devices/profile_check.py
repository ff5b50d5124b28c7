"""Validation of a device profile read from disk (``clproj.device-profile`` v1).

A profile is untrusted input (a user's file, a cache, a node's announcement): every field
is typed, bounded and consistent before anything is computed from it, and the error names
the exact field, because a bad number in a profile silently corrupts every projection
made with it. The power section (version 1: a spec rule; version 2: fitted from the power
microbenchmarks) is checked here too.
"""

from __future__ import annotations

import math
import re
from typing import Any

from clproj.devices.launch_rules import validate_rule
from clproj.devices.profile import (
    FORMAT,
    INSTRUCTION_CLASSES,
    OPTIONAL_CURVES,
    REQUIRED_CURVES,
    VERSION,
)
from clproj.errors import ClprojError
from clproj.untrusted import BadField, field_at, short

_IDENTITY_KINDS = ("GPU", "CPU", "ACCELERATOR", "OTHER")
_SOURCE_KINDS = ("measured", "spec", "mixed")
# "low": a generic profile (devices/local.py) not measured on the device; outputs flag it.
_CONFIDENCE = ("normal", "low")
# A key names a table column, a cache file and a --devices item: no blank, no path
# separator (an untrusted "../../x" or "a\nb" printed as-is was accepted)
_KEY = re.compile(r"[^\s/\\]{1,128}")


# --------------------------------------------------------------------------- validation


def _fail(field: str, msg: str) -> None:
    raise ClprojError(
        f"device profile field {field}: {msg}",
        "fix the profile (see docs/formats.md section 3 and docs/devices.md)",
    )


def _get(doc: dict[str, Any], path: str) -> Any:
    try:
        return field_at(doc, path)
    except BadField as exc:
        _fail(exc.field, exc.what)


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
    "detail.raw_loop.reload_round_s",  # absent from profiles measured without it
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


def validate(doc: dict[str, Any]) -> None:  # noqa: C901
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
    if not _KEY.fullmatch(doc["key"]):
        _fail("key", f"expected 1-128 characters, no blank, '/' or '\\', got {short(doc['key'])}")
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
# Version 2: energies per local-memory and L2 byte (and optionally the extra energy of a
# DRAM byte read), and the ``fit`` record of a measured section (devices/power_fit.py). Spec-rule sections stay version 1.
# Version 3: the energy of a global load instruction (``energy_per_global_load_j``), fitted
# only from windows of several load widths; sections without it stay version 2.
# Version 4: the power of a busy compute unit (``power_per_active_unit_w``), fitted only
# from windows of one kernel at several densities; sections without it stay 2 or 3.
POWER_VERSION = 4
SPEC_POWER_VERSION = 1
_POWER_BYTE_FIELDS = (
    "energy_per_dram_byte_j",
    "energy_per_dram_read_byte_j",
    "energy_per_l2_byte_j",
    "energy_per_local_byte_j",
)
_POWER_LOAD_FIELD = "energy_per_global_load_j"
_POWER_UNIT_FIELD = "power_per_active_unit_w"
_POWER_RULES = ("spec", "measured")
MAX_POWER_W = 1e5  # no single device draws 100 kW; a larger value is a corrupt file


def _validate_power(doc: dict[str, Any]) -> None:  # noqa: C901
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
    if power.get(_POWER_LOAD_FIELD) is not None:
        if version < 3:
            _fail(f"power.{_POWER_LOAD_FIELD}", "needs power.version 3")
        _num(doc, f"power.{_POWER_LOAD_FIELD}", strict=False, maximum=1.0)
    if power.get(_POWER_UNIT_FIELD) is not None:
        if version < 4:
            _fail(f"power.{_POWER_UNIT_FIELD}", "needs power.version 4")
        _num(doc, f"power.{_POWER_UNIT_FIELD}", strict=False, maximum=tdp)
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
