"""Projected against measured power and energy, window by window (``clproj evaluate
--energy`` for our apps, ``clproj validate --energy`` for a suite's unmodified apps).

Why apart from the time judgement: a ``clproj.energy-results`` file measures launch
*shapes* one at a time on one device (repeated for >= 2 s under the counter), not every
launch of a run, so it is matched shape by shape: (app, kernel, global size, local size)
on the device it names. Each row carries time, power and energy on both sides, so an
energy error can be told apart into its time part and its power part (energy = power x
time, on both sides).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from clproj.intercept.identity import ShapeKey, shape_key


@dataclass(frozen=True)
class EnergyRow:
    """One measured window and its projection, per launch."""

    app: str
    kernel: str
    global_size: list[int]
    local_size: list[int] | None
    device: str  # the measured device's name (NVML / OpenCL)
    measured_s: float
    measured_w: float
    measured_j: float
    projected_s: float
    projected_w: float
    projected_j: float
    confidence: str  # the power projection's: "normal" (measured section) or "low"

    @property
    def power_ratio(self) -> float:
        return self.projected_w / self.measured_w

    @property
    def energy_ratio(self) -> float:
        return self.projected_j / self.measured_j

    @property
    def time_ratio(self) -> float:
        return self.projected_s / self.measured_s

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            power_ratio=self.power_ratio,
            energy_ratio=self.energy_ratio,
            time_ratio=self.time_ratio,
        )
        return d


@dataclass(frozen=True)
class Window:
    """The measured side of a row: a ``kernels[]`` entry of an energy-results file."""

    app: str
    kernel: str
    key: ShapeKey
    global_size: list[int]
    local_size: list[int] | None
    suite: str | None
    figures: Mapping[str, Any]


def device_name(doc: Mapping[str, Any]) -> str:
    """The OpenCL name of the device an energy-results file was measured on (NVML's name
    in files that do not record it): the name projections carry for that device."""
    dev = doc.get("device") or {}
    return str(dev.get("opencl_name") or dev.get("name") or "")


def measured_profile(doc: Mapping[str, Any]) -> Any:
    """The committed measured profile of the device an energy-results file was measured
    on (by name, and platform where the file records it), or ClprojError."""
    from types import SimpleNamespace

    from clproj.devices.profile import profile_for_device
    from clproj.errors import ClprojError

    dev = doc.get("device") or {}
    name = device_name(doc)
    found = profile_for_device(
        SimpleNamespace(
            name=name,
            platform=SimpleNamespace(name=str(dev.get("platform") or "")),
            driver_version=str(dev.get("driver") or ""),
        )
    )
    if found is None:
        raise ClprojError(
            f"no committed measured profile of {name!r}, the device the energy was measured on",
            "measure its profile first (clproj profile-device) and commit it",
        )
    return found


def windows(doc: Mapping[str, Any]) -> list[Window]:
    """The measured windows of a (validated) energy-results document; refused windows
    and apps that failed before any window are left out (they carry no figure)."""
    out = []
    for k in doc.get("kernels") or []:
        f = k.get("figures")
        if not f or "kernel" not in k:
            continue
        local = k.get("local_size")
        out.append(
            Window(
                app=str(k.get("app")),
                kernel=str(k["kernel"]),
                key=shape_key(k["kernel"], k["global_size"], local),
                global_size=list(k["global_size"]),
                local_size=None if local is None else list(local),
                suite=k.get("suite"),
                figures=f,
            )
        )
    return out


Projector = Callable[[Window], "tuple[float, float, str] | None"]
"""(projected seconds per launch, projected joules per launch, power confidence) of a
window's shape on the measured device, or None where nothing projects it."""


def ours(w: Window) -> bool:
    """Windows of our apps (measured through pyopencl, no suite)."""
    return w.suite is None


def of_suite(w: Window) -> bool:
    """Windows of a suite's unmodified apps (measured under the preload library)."""
    return w.suite is not None


def judge(
    doc: Mapping[str, Any], project: Projector, which: Callable[[Window], bool] = ours
) -> dict[str, Any]:
    """Rows (matched windows) and the windows no projection matched, for the windows of
    ``doc`` that ``which`` selects."""
    device = str((doc.get("device") or {}).get("name") or "?")
    rows: list[EnergyRow] = []
    unmatched: list[str] = []
    for w in windows(doc):
        if not which(w):
            continue
        got = project(w)
        if got is None or got[0] <= 0:
            unmatched.append(f"{w.app}/{w.kernel} {w.global_size}")
            continue
        t, joules, confidence = got
        f = w.figures
        rows.append(
            EnergyRow(
                app=w.app,
                kernel=w.kernel,
                global_size=w.global_size,
                local_size=w.local_size,
                device=device,
                measured_s=float(f["time_per_launch_s"]),
                measured_w=float(f["average_power_w"]),
                measured_j=float(f["energy_per_launch_j"]),
                projected_s=t,
                projected_w=joules / t,
                projected_j=joules,
                confidence=confidence,
            )
        )
    return {"device": device, "rows": rows, "unmatched": unmatched}


def _mape(ratios: Sequence[float]) -> float | None:
    return 100.0 * statistics.fmean(abs(r - 1.0) for r in ratios) if ratios else None


def summary(rows: Iterable[EnergyRow]) -> dict[str, dict[str, Any]]:
    """Per device: windows, MAPE of power, energy and time, median ratios, and the share
    of windows whose power is within 10% and energy within 15% (the issue's targets)."""
    by: dict[str, list[EnergyRow]] = {}
    for r in rows:
        by.setdefault(r.device, []).append(r)
    out = {}
    for device, rs in by.items():
        p = [r.power_ratio for r in rs]
        e = [r.energy_ratio for r in rs]
        t = [r.time_ratio for r in rs]
        out[device] = {
            "windows": len(rs),
            "power_mape": _mape(p),
            "energy_mape": _mape(e),
            "time_mape": _mape(t),
            "power_ratio_median": statistics.median(p),
            "energy_ratio_median": statistics.median(e),
            "power_within_10pct": sum(abs(x - 1) <= 0.10 for x in p) / len(p),
            "energy_within_15pct": sum(abs(x - 1) <= 0.15 for x in e) / len(e),
            "low_confidence": sum(r.confidence == "low" for r in rs),
        }
    return out


def to_doc(judged: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The JSON form of one or more :func:`judge` results: rows, unmatched, summary."""
    rows = [r for j in judged for r in j["rows"]]
    return {
        "rows": [r.to_dict() for r in rows],
        "unmatched": [u for j in judged for u in j["unmatched"]],
        "summary": summary(rows),
    }


def print_rows_and_summary(doc: Mapping[str, Any]) -> None:
    """The rows of a :func:`to_doc` document as a table, then its summary."""
    from clproj.console import print_table

    body = []
    for r in doc["rows"]:
        body.append(
            [
                r["app"],
                r["kernel"],
                f"{r['measured_s'] * 1e6:.1f} / {r['projected_s'] * 1e6:.1f}",
                f"{r['measured_w']:.0f} / {r['projected_w']:.0f} "
                f"({(r['power_ratio'] - 1) * 100:+.0f}%)",
                f"{r['measured_j'] * 1e3:.3g} / {r['projected_j'] * 1e3:.3g} "
                f"({(r['energy_ratio'] - 1) * 100:+.0f}%)",
            ]
        )
    print_table(TABLE_HEADER, body, title="per launch")
    print_summary(doc)


def print_summary(doc: Mapping[str, Any]) -> None:
    """The per-device summary of :func:`to_doc` as a table, and what did not match."""
    from clproj.console import print_table, stderr

    body = []
    for device, s in doc["summary"].items():
        body.append(
            [
                device,
                str(s["windows"]),
                f"{s['power_mape']:.1f}%",
                f"{s['energy_mape']:.1f}%",
                f"{s['time_mape']:.1f}%",
                f"{s['power_within_10pct']:.0%}",
                f"{s['energy_within_15pct']:.0%}",
            ]
        )
    print_table(
        [
            "device",
            "windows",
            "power MAPE",
            "energy MAPE",
            "time MAPE",
            "P within 10%",
            "E within 15%",
        ],
        body,
        title="projected against measured, per launch",
    )
    if doc["unmatched"]:
        stderr.print(f"no projection for {len(doc['unmatched'])}: " + ", ".join(doc["unmatched"]))


TABLE_HEADER = [
    "app",
    "kernel",
    "us measured / projected",
    "W measured / projected",
    "mJ measured / projected",
]


def app_group(
    w: Window, docs: dict[str, Any], size: str = "paper", mode: str = "single"
) -> dict[str, Any] | None:
    """The launch group of one of our apps' committed kernel profiles
    (``benchmarks/results/kernel-profiles``) with a window's shape, or None; ``docs``
    caches the profile files by app."""
    from clproj.runtime.evaluation.app_profiles import load_cached

    if w.app not in docs:
        docs[w.app] = load_cached(w.app, size, mode)
    for g in (docs[w.app] or {}).get("groups") or []:
        if g["kernel"] != w.kernel or not g["variants"]:
            continue
        if shape_key(g["kernel"], g["global"], g.get("local")) == w.key:
            return dict(g)
    return None


def app_projector(device: Any, size: str = "paper", mode: str = "single") -> Projector:
    """Projects a window of one of our apps from its committed kernel profiles onto
    ``device``: the group of the window's shape (:func:`app_group`), time and energy
    weighted over its variants as ``clproj evaluate`` weights time (a shape's launches
    differ in their scalars; the window repeated the first of them)."""
    from clproj.runtime.projection.model import project
    from clproj.runtime.projection.power import project_power

    docs: dict[str, Any] = {}

    def one(w: Window) -> tuple[float, float, str] | None:
        g = app_group(w, docs, size, mode)
        if g is None:
            return None
        weight = sum(float(v["weight"]) for v in g["variants"])
        t = joules = 0.0
        confidence = "normal"
        for v in g["variants"]:
            p = project(v["profile"], device, g.get("footprint_bytes"))
            pw = project_power(p, v["profile"], device)
            if pw.energy_j is None:
                return None
            share = float(v["weight"]) / weight
            t += p.time_s * share
            joules += pw.energy_j * share
            if pw.confidence == "low":
                confidence = "low"
        return t, joules, confidence

    return one


def shape_projector(shapes: Mapping[ShapeKey, Any], profile: str) -> Projector:
    """Projects a window of a suite app from that app's run in project mode
    (:func:`runtime.evaluation.validate_match.project_shapes`), on the profile of that id
    (:func:`runtime.evaluation.validate_match.profile_id`)."""

    def one(w: Window) -> tuple[float, float, str] | None:
        sp = shapes.get(w.key)
        if sp is None or profile not in sp.time_s or profile not in sp.energy_j:
            return None
        confidence = "low" if profile in sp.power_low else "normal"
        return sp.time_s[profile], sp.energy_j[profile], confidence

    return one
