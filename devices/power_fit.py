"""Static-active power and energy per operation of a device, fitted from its power
microbenchmarks (:mod:`devices.microbench.power`), and the profile's measured ``power``
section built from the fit (docs/formats.md section 3, docs/devices.md "Power fit").

Why a linear model solved by non-negative least squares: Hong & Kim's IPP splits a GPU's
power into a floor paid while the device is busy and a cost per unit of work of each kind;
over launches whose counts are known exactly (a microbenchmark does a fixed number of
operations of one class), the energy of a launch is then linear in (time, counts):

    E = static_active_w x t + sum over features of count x J/unit

A negative energy per operation or a floor below zero means nothing physical, and an
unconstrained solve returns them whenever two features move together; NNLS keeps every
parameter >= 0 and leaves the ones the data cannot support at 0. Each microbenchmark runs
at full occupancy and on a fraction of the compute units, so the time and the counts vary
apart and the floor is identifiable. Only microbenchmarks enter the fit, never apps: the
apps judge the fit.

Why numpy-only (a Lawson-Hanson solver here, not scipy's): the fit runs wherever the
readings are, the GPU machine included, where only numpy, pyopencl, rich and msgpack are
installed (docs/CONTRIBUTING.md).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

from clproj.errors import ClprojError
from clproj.untrusted import is_int, short


def _is_count(v: Any) -> bool:
    """A whole number of compute units: 1 .. 2^20 (an untrusted results file)."""
    return is_int(v) and 0 < v <= 1 << 20


SECTION_VERSION = 2
# A section that prices global load instructions (``energy_per_global_load_j``) is version
# 3: a reader of version 2 would ignore the field and project those kernels too low, so it
# must refuse the section instead. Sections without the field stay version 2.
LOAD_SECTION_VERSION = 3
# Features of the energy model: the busy floor (per second) and one energy per unit of
# each kind the microbenchmarks exercise.
OP_FEATURES = ("fp32", "fp64", "int", "special", "conversion", "atomic")
# ``dram_byte`` prices every byte DRAM moves; ``dram_read_byte`` what a byte read costs on
# top (reads and writes of the same rate draw different power: an H200 streams reads at
# 577 W and writes at 473 W).
BYTE_FEATURES = ("local_byte", "l2_byte", "dram_byte", "dram_read_byte")
FEATURES = ("static_s", *OP_FEATURES, *BYTE_FEATURES)
# The plugin's instruction classes priced by each feature (docs/formats.md, section 2).
# Loop control and selects are integer ALU work; barriers and memory instructions are
# priced through the bytes they move, not per instruction (global loads also per
# instruction where the windows allow it: :data:`LOAD_FEATURE`).
CLASS_FEATURE = {
    "fp32_add": "fp32",
    "fp32_mul": "fp32",
    "fp32_fma": "fp32",
    "fp32_div": "fp32",
    "fp64_add": "fp64",
    "fp64_mul": "fp64",
    "fp64_fma": "fp64",
    "fp64_div": "fp64",
    "int_add": "int",
    "int_mul": "int",
    "int_div": "int",
    "compare_select": "int",
    "branch": "int",
    "special": "special",
    "conversion": "conversion",
    "atomic": "atomic",
}
BYTE_FIELDS = {
    "local_byte": "energy_per_local_byte_j",
    "l2_byte": "energy_per_l2_byte_j",
    "dram_byte": "energy_per_dram_byte_j",
    "dram_read_byte": "energy_per_dram_read_byte_j",
}
MIN_ROWS = len(FEATURES) + 2
# The energy of a global load instruction beyond the bytes it moves (its issue, address
# arithmetic in the load unit, the L1 tag lookups). Whenever every measured read loads 16
# bytes an instruction it is a fixed multiple of the read bytes, and the fit could split
# one cost between the two at will: it enters the fit only where the windows hold reads
# of different widths (the DRAM stream with float, float2 and float4 loads,
# devices/microbench/power.py), and is otherwise left out without a word (not
# ``unsupported``: results from before the width-varied reads lack the count entirely,
# and their fit stays what it was).
LOAD_FEATURE = "global_load"
LOAD_FIELD = "energy_per_global_load_j"
# Bytes moved per load instruction must differ by this factor between two windows for
# the load feature to be fitted (float2 against float4 reads differ by 2x, float by 4x;
# float4 reads of different working sets differ by well under 1%: their store bytes).
MIN_WIDTH_RATIO = 1.5
# The power a busy compute unit draws whatever it runs (Hong and Kim's per-active-core
# power: its clocks, schedulers and register files), in W per unit: a launch keeping
# ``u`` units busy for ``t`` seconds costs ``u x t`` of this feature. A microbenchmark on
# more units does proportionally more operations (_full against _part), so the feature
# moves with the operation counts; only windows of one kernel whose operations per busy
# unit-second differ by :data:`MIN_UNIT_RATIO` (``pw_fp32_sparse``: one work-item a unit)
# tell the two apart, and only then is it fitted. Results without ``active_units`` (from
# before the count) fit as before.
UNIT_FEATURE = "unit_s"
UNIT_FIELD = "power_per_active_unit_w"
UNIT_SECTION_VERSION = 4
MIN_UNIT_RATIO = 8.0


def nnls(a: list[list[float]], b: list[float], max_iter: int = 0) -> list[float]:
    """x >= 0 minimising ||a x - b|| (Lawson and Hanson, 1974, chapter 23).

    Columns are scaled to unit norm first (a floor in W and energies in pJ differ by
    twelve orders of magnitude; the active-set test compares gradients across columns)."""
    import numpy as np

    A = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if A.ndim != 2 or y.shape != (A.shape[0],):
        raise ValueError(f"nnls: shapes {A.shape} and {y.shape} do not match")
    if not (np.isfinite(A).all() and np.isfinite(y).all()):
        raise ValueError("nnls: non-finite input")
    m, n = A.shape
    norms = np.linalg.norm(A, axis=0)
    norms[norms == 0] = 1.0
    S = A / norms
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tol = 10 * np.finfo(float).eps * max(m, n) * max(1.0, float(np.abs(S).max(initial=0.0)))
    w = S.T @ (y - S @ x)
    for _ in range(max_iter or 3 * n + 30):
        if passive.all() or (w[~passive] <= tol).all():
            break
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(S[:, passive], y, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            alpha = float(np.min(x[neg] / (x[neg] - z[neg])))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
        w = S.T @ (y - S @ x)
    return [float(v) for v in x / norms]


@dataclass(frozen=True)
class Row:
    """One measured microbenchmark launch: time and energy per launch (from the counter
    window, :func:`devices.energy.window_figures`) and its exact counts per launch."""

    name: str
    time_s: float
    energy_j: float
    counts: dict[str, float]
    units: float = 0.0  # compute units the launch kept busy (0: not recorded)

    def feature(self, name: str) -> float:
        """The row's value of a feature: busy unit-seconds, or a count."""
        return (
            self.units * self.time_s if name == UNIT_FEATURE else float(self.counts.get(name, 0.0))
        )


def _kernel_of(name: str) -> str:
    """A microbenchmark's kernel: its name without the ``_full``/``_part``/``_sparse`` tag."""
    return name.rsplit("_", 1)[0]


def separates_units(rows: list[Row]) -> bool:
    """Whether ``rows`` hold windows of one kernel whose operations per busy unit-second
    differ by at least :data:`MIN_UNIT_RATIO` (every row must record its busy units):
    only then can the fit tell a busy unit's power from its operations' energy."""
    if not rows or any(r.units <= 0 for r in rows):
        return False
    density: dict[str, list[float]] = {}
    for r in rows:
        ops = sum(float(r.counts.get(f, 0.0)) for f in OP_FEATURES)
        if ops > 0:
            density.setdefault(_kernel_of(r.name), []).append(ops / (r.units * r.time_s))
    return any(len(d) > 1 and max(d) >= MIN_UNIT_RATIO * min(d) for d in density.values())


def separates_loads(rows: list[Row]) -> bool:
    """Whether ``rows`` hold reads whose bytes per load instruction differ by at least
    :data:`MIN_WIDTH_RATIO`: only then can the fit tell a load's energy from its bytes'."""
    widths = [
        float(r.counts.get("l2_byte", 0.0)) / float(r.counts[LOAD_FEATURE])
        for r in rows
        if float(r.counts.get(LOAD_FEATURE, 0.0)) > 0 and float(r.counts.get("l2_byte", 0.0)) > 0
    ]
    return bool(widths) and max(widths) >= MIN_WIDTH_RATIO * min(widths)


@dataclass(frozen=True)
class Fit:
    """The fitted parameters and how well they reproduce the microbenchmarks."""

    static_active_w: float
    per_unit_j: dict[str, float]  # feature -> J per operation or byte
    rows: list[dict[str, Any]]  # name, measured_j, fitted_j per microbenchmark
    rms_relative_error: float
    unsupported: list[str]  # features no microbenchmark exercised: left out, not 0

    def energy_j(self, time_s: float, counts: dict[str, float], units: float = 0.0) -> float:
        row = Row("", time_s, 0.0, counts, units)
        return self.static_active_w * time_s + sum(
            row.feature(f) * j for f, j in self.per_unit_j.items()
        )


def fit(rows: list[Row], floor_w: float = 0.0) -> Fit:
    """NNLS over ``rows`` (microbenchmarks only), or ClprojError saying what is missing.

    ``floor_w`` (the measured idle power) bounds the busy floor from below: the fit solves
    for the floor's excess over it, so a busy device never draws less than an idle one.
    A feature no row exercises is reported as unsupported and left out of the section
    (pricing it at 0 would pose as a measurement)."""
    fix = "measure the power microbenchmarks again (clproj profile-device --power)"
    good = [
        r
        for r in rows
        if math.isfinite(r.time_s) and r.time_s > 0 and math.isfinite(r.energy_j) and r.energy_j > 0
    ]
    if len(good) < MIN_ROWS:
        raise ClprojError(
            f"power fit: {len(good)} usable microbenchmark windows, fewer than {MIN_ROWS}", fix
        )
    used = [f for f in FEATURES[1:] if any(r.counts.get(f, 0) for r in good)]
    unsupported = [f for f in FEATURES[1:] if f not in used]
    if separates_loads(good):
        used.append(LOAD_FEATURE)
    if separates_units(good):
        used.append(UNIT_FEATURE)
    cols = ["static_s", *used]
    a = [[r.time_s] + [r.feature(f) for f in used] for r in good]
    # Each row weighted by 1/measured energy: the fit minimises relative error, so a 5 mJ
    # launch counts as much as a 5 J one.
    aw = [[v / r.energy_j for v in row] for row, r in zip(a, good, strict=True)]
    x = nnls(aw, [1.0 - floor_w * r.time_s / r.energy_j for r in good])
    params = dict(zip(cols, x, strict=True))
    params["static_s"] += floor_w
    per_unit = {f: params[f] for f in used}
    out_rows = []
    sq = 0.0
    for r in good:
        e = params["static_s"] * r.time_s + sum(r.feature(f) * per_unit[f] for f in used)
        out_rows.append({"name": r.name, "measured_j": r.energy_j, "fitted_j": e})
        sq += ((e - r.energy_j) / r.energy_j) ** 2
    return Fit(params["static_s"], per_unit, out_rows, math.sqrt(sq / len(good)), unsupported)


def rows_from_results(doc: dict[str, Any]) -> list[Row]:
    """The microbenchmark windows of a ``clproj.energy-results`` document (entries with
    ``microbenchmark`` and ``counts`` labels and figures); app windows are ignored."""
    rows = []
    for i, k in enumerate(doc.get("kernels", [])):
        f = k.get("figures")
        if not k.get("microbenchmark") or not isinstance(f, dict):
            continue
        counts = k.get("counts")
        if not isinstance(counts, dict):
            continue
        feats = {str(c): float(v) for c, v in counts.items() if c in FEATURES or c == LOAD_FEATURE}
        if "dram_read_byte" not in feats:  # results written before the feature existed
            from clproj.devices.microbench.power import dram_read_bytes

            feats["dram_read_byte"] = dram_read_bytes(str(k["microbenchmark"]), feats, k)
        units = k.get("active_units")
        if units is not None and not _is_count(units):
            raise ClprojError(
                f"energy results field kernels[{i}].active_units: expected a whole number of "
                f"compute units (1 .. 2^20), got {short(units, 40)}",
                "pass a file written by clproj profile-device --power",
            )
        rows.append(
            Row(
                str(k["microbenchmark"]),
                float(f["time_per_launch_s"]),
                float(f["energy_per_launch_j"]),
                feats,
                float(units or 0),
            )
        )
    return rows


def idle_w(doc: dict[str, Any]) -> float | None:
    """Median of the windows' idle-power figures (each read with the device quiet)."""
    vals = sorted(
        float(k["figures"]["idle_power_w"])
        for k in doc.get("kernels", [])
        if isinstance(k.get("figures"), dict) and k["figures"].get("idle_power_w") is not None
    )
    return vals[len(vals) // 2] if vals else None


def power_section(doc: dict[str, Any], results_name: str) -> dict[str, Any]:
    """The measured ``power`` section fitted from a microbenchmark results document, with
    provenance naming the file, the device and the fit's error: version 2, or
    :data:`LOAD_SECTION_VERSION` where the windows let the fit price load instructions,
    :data:`UNIT_SECTION_VERSION` where they let it price a busy compute unit."""
    from clproj.devices.energy import validate_results

    validate_results(doc)
    idle = idle_w(doc)
    limit = (doc.get("device") or {}).get("power_limit_w")
    if idle is None or not isinstance(limit, (int, float)) or limit <= 0:
        raise ClprojError(
            "power fit: the results hold no idle power or no power limit",
            "measure with clproj profile-device --power on a device with a power reader",
        )
    f = fit(rows_from_results(doc), floor_w=idle)
    static = f.static_active_w
    source = f"measured: {results_name} ({(doc.get('host') or {}).get('date', '?')})"
    per_op = {
        cls: f.per_unit_j[feat] for cls, feat in CLASS_FEATURE.items() if feat in f.per_unit_j
    }
    section: dict[str, Any] = {
        "version": SECTION_VERSION,
        "rule": "measured",
        "confidence": "normal",
        "tdp_w": float(limit),
        "idle_w": float(idle),
        "static_active_w": static,
        "energy_per_op_j": per_op,
        "fit": {
            "method": "nnls, relative error, microbenchmarks only",
            "results": results_name,
            "microbenchmarks": f.rows,
            "rms_relative_error": f.rms_relative_error,
            "unsupported": f.unsupported,
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        },
        "provenance": {
            "tdp_w": "read: NVML power limit (device.power_limit_w)",
            "idle_w": f"{source}: median idle power before the windows",
            "static_active_w": f"{source}: NNLS floor (at least idle_w)",
            "energy_per_op_j": f"{source}: NNLS per class group",
        },
    }
    for feat, field in BYTE_FIELDS.items():
        if feat in f.per_unit_j:
            section[field] = f.per_unit_j[feat]
            section["provenance"][field] = f"{source}: NNLS"
    if LOAD_FEATURE in f.per_unit_j:
        section["version"] = LOAD_SECTION_VERSION
        section[LOAD_FIELD] = f.per_unit_j[LOAD_FEATURE]
        section["provenance"][LOAD_FIELD] = f"{source}: NNLS, reads of several load widths"
    if UNIT_FEATURE in f.per_unit_j:
        section["version"] = UNIT_SECTION_VERSION
        section[UNIT_FIELD] = f.per_unit_j[UNIT_FEATURE]
        section["provenance"][UNIT_FIELD] = (
            f"{source}: NNLS, windows of one kernel at several densities"
        )
    return section


def features_of(
    instructions: dict[str, float],
    local_bytes: float,
    l2_bytes: float,
    dram_bytes: float,
    dram_read_bytes: float = 0.0,
    global_loads: float = 0.0,
) -> dict[str, float]:
    """The fit's features of a launch from its counts per instruction class, its bytes
    and its global load instructions (the plugin's ``global.load_accesses``): what
    :func:`fit` prices, and what the power projection prices a kernel by."""
    out: dict[str, float] = dict.fromkeys((*FEATURES[1:], LOAD_FEATURE), 0.0)
    for cls, n in instructions.items():
        feat = CLASS_FEATURE.get(cls)
        if feat is not None:
            out[feat] += float(n)
    out["local_byte"] = float(local_bytes)
    out["l2_byte"] = float(l2_bytes)
    out["dram_byte"] = float(dram_bytes)
    out["dram_read_byte"] = float(dram_read_bytes)
    out[LOAD_FEATURE] = float(global_loads)
    return out
