"""Matching a run's projections to truth rows, kernel by kernel (``clproj validate``).

Project mode reports one projection per distinct launch *signature*, while a truth file has
one row per (app, kernel, global size, local size) *shape* with its launch count.
Signatures that share a shape (lu's step index scalar changes every launch) are averaged;
a kernel's total is the sum over its shapes of ``launches x per-launch time``, on both the
projected and the measured side, over the shapes present on both sides only.

Kept apart from running apps so that the matching can be unit-tested on hand-made
launch-projection docs and truth rows.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clproj.intercept.identity import ShapeKey, shape_key
from clproj.runtime.evaluation import metrics
from clproj.runtime.evaluation.validate_truth import TruthDevice, fmt_dims


@dataclass
class ShapeProjection:
    """The projected per-launch time of one shape on each device (mean over signatures).

    Devices are told apart by :func:`profile_id` (the profile key), not by name: a
    spec-sheet profile and a measured one may name the same device, and averaging the two
    would judge neither."""

    time_s: dict[str, float]  # profile id -> mean projected seconds per launch
    bound: dict[str, str]  # profile id -> most common bound letter
    signatures: int
    methods: Counter = field(default_factory=Counter)  # emulation method -> signatures
    confidence: Counter = field(default_factory=Counter)
    # profile id -> mean projected joules per launch (absent: a signature had no power)
    energy_j: dict[str, float] = field(default_factory=dict)
    # arithmetic operations per launch (the plugin's counts; None: a signature's profile
    # was reused and not in the doc), for GOPS/W
    ops: float | None = None
    power_low: set[str] = field(default_factory=set)  # profile ids with spec-rule power


def profile_id(projection: Mapping[str, Any]) -> str:
    """What one projection of a launch-projection doc is grouped by: the key of the
    profile it was made on (``device``; its device ``name`` in docs without one)."""
    return str(projection.get("device") or projection["name"])


def profiles_named(docs: Iterable[Mapping[str, Any]], name: str) -> list[str]:
    """The ids (:func:`profile_id`) of the profiles named ``name`` that ``docs`` (a run's
    launch-projection docs) projected onto, in the order first seen."""
    out: dict[str, None] = {}
    for doc in docs:
        for p in doc.get("projections") or []:
            if p.get("name") == name:
                out[profile_id(p)] = None
    return list(out)


def arithmetic_ops(doc: Mapping[str, Any]) -> float | None:
    """Arithmetic operations of one launch: the plugin's fp, int, special and conversion
    counts in the doc's kernel profile (None where the doc carries no profile)."""
    from clproj.devices.power_fit import CLASS_FEATURE

    total = ((doc.get("profile") or {}).get("total") or {}).get("instructions")
    if not isinstance(total, Mapping):
        return None
    return float(
        sum(float(v or 0) for c, v in total.items() if c in CLASS_FEATURE and c != "atomic")
    )


def project_shapes(
    docs: Iterable[Mapping[str, Any]],
) -> tuple[dict[ShapeKey, ShapeProjection], Counter]:
    """Group launch-projection docs by shape and average each device's time.

    Docs with an ``error`` (not emulatable, emulation failed) carry no time and are counted
    by their first line in the second return value instead, so that a kernel whose every
    signature failed shows as unmatched (with the reason) rather than as fast.
    """
    times: dict[ShapeKey, dict[str, list[float]]] = {}
    bounds: dict[ShapeKey, dict[str, Counter]] = {}
    sigs: Counter = Counter()
    methods: dict[ShapeKey, Counter] = {}
    conf: dict[ShapeKey, Counter] = {}
    errors: Counter = Counter()
    joules: dict[ShapeKey, dict[str, list[float | None]]] = {}
    ops: dict[ShapeKey, list[float | None]] = {}
    low: dict[ShapeKey, set[str]] = {}
    for doc in docs:
        projs = doc.get("projections") or []
        if doc.get("error") or not projs:
            why = str(doc.get("error") or "no projection").strip().splitlines()
            errors[f"{doc.get('kernel', '?')}: {why[0] if why else 'no projection'}"] += 1
            continue
        key = shape_key(doc["kernel"], doc["global_size"], doc.get("local_size"))
        sigs[key] += 1
        emu = doc.get("emulation") or {}
        methods.setdefault(key, Counter())[str(emu.get("method", "?"))] += 1
        conf.setdefault(key, Counter())[str(emu.get("confidence", "?"))] += 1
        ops.setdefault(key, []).append(arithmetic_ops(doc))
        for p in projs:
            pid = profile_id(p)
            times.setdefault(key, {}).setdefault(pid, []).append(float(p["time_s"]))
            e = p.get("energy_j")
            if e is not None and p.get("power_confidence") == "low":
                low.setdefault(key, set()).add(pid)
            joules.setdefault(key, {}).setdefault(pid, []).append(None if e is None else float(e))
            bounds.setdefault(key, {}).setdefault(pid, Counter())[str(p.get("bound", "?"))] += 1
    out = {
        key: ShapeProjection(
            time_s={name: statistics.fmean(ts) for name, ts in per_dev.items()},
            bound={name: c.most_common(1)[0][0] for name, c in bounds[key].items()},
            signatures=sigs[key],
            methods=methods[key],
            confidence=conf[key],
            energy_j={
                name: statistics.fmean(es)  # type: ignore[arg-type]
                for name, es in joules.get(key, {}).items()
                if es and all(e is not None for e in es)
            },
            ops=_mean_known(ops.get(key, [])),
            power_low=low.get(key, set()),
        )
        for key, per_dev in times.items()
    }
    return out, errors


def _mean_known(values: list[float | None]) -> float | None:
    """The mean of the values that are known (a reused signature has the same counts)."""
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


# ---------------------------------------------------------------------------------------
# per-kernel judgement


@dataclass
class KernelResult:
    """One kernel of one app: all its launches summed, measured and projected per device."""

    app: str
    kernel: str
    measured_s: dict[str, float]  # device label -> seconds (matched shapes only)
    projected_s: dict[str, float]
    bound: dict[str, str]  # device label -> bound of the shape with the largest projection
    launches_truth: int
    launches_matched: int
    shapes_truth: int
    shapes_matched: int
    signatures: int = 0
    launches_run: int | None = None  # the run's own count (its per-kernel summary)
    run_measured_s: float | None = None  # this machine's device time in the run
    methods: dict[str, int] = field(default_factory=dict)
    confidence: dict[str, int] = field(default_factory=dict)
    # device label -> projected joules over the matched shapes (absent: no power projection)
    projected_j: dict[str, float] = field(default_factory=dict)
    ops: float | None = None  # arithmetic operations over the matched launches
    power_low: set[str] = field(default_factory=set)  # labels whose power is a spec rule

    def power_w(self, device: str) -> float | None:
        """Projected average power over the kernel's launches: joules / seconds."""
        j, t = self.projected_j.get(device), self.projected_s.get(device)
        return j / t if j is not None and t else None

    @property
    def devices(self) -> list[str]:
        return [d for d in self.measured_s if d in self.projected_s and self.measured_s[d] > 0]

    @property
    def coverage(self) -> float:
        """Share of the kernel's launches (truth count) that have a projected shape."""
        return self.launches_matched / self.launches_truth if self.launches_truth else 0.0

    def ratio(self, device: str) -> float:
        return self.projected_s[device] / self.measured_s[device]

    def off_factor(self, device: str) -> float:
        r = self.ratio(device)
        return max(r, 1 / r) if r > 0 else math.inf

    @property
    def best_measured(self) -> str | None:
        devs = self.devices
        return min(devs, key=lambda d: self.measured_s[d]) if devs else None

    @property
    def best_projected(self) -> str | None:
        devs = self.devices
        return min(devs, key=lambda d: self.projected_s[d]) if devs else None

    @property
    def penalty(self) -> float | None:
        """``t_measured[chosen] / t_measured[best] - 1`` over the judged devices."""
        devs = self.devices
        if len(devs) < 2:
            return None
        return metrics.selection_penalty(
            {d: self.measured_s[d] for d in devs}, {d: self.projected_s[d] for d in devs}
        )

    @property
    def relative_error(self) -> float | None:
        devs = self.devices
        if len(devs) < 2:
            return None
        return metrics.relative_error(
            {d: self.measured_s[d] for d in devs}, {d: self.projected_s[d] for d in devs}
        )

    def to_dict(self) -> dict[str, Any]:
        devs = self.devices
        return {
            "app": self.app,
            "kernel": self.kernel,
            "launches_truth": self.launches_truth,
            "launches_matched": self.launches_matched,
            "launches_run": self.launches_run,
            "shapes_truth": self.shapes_truth,
            "shapes_matched": self.shapes_matched,
            "signatures": self.signatures,
            "coverage": self.coverage,
            "measured_s": self.measured_s,
            "projected_s": self.projected_s,
            "projected_j": self.projected_j,
            "projected_w": {d: self.power_w(d) for d in self.projected_j},
            "ops": self.ops,
            "power_confidence": {
                d: "low" if d in self.power_low else "normal" for d in self.projected_j
            },
            "ratio": {d: self.ratio(d) for d in devs},
            "bound": self.bound,
            "best_measured": self.best_measured,
            "best_projected": self.best_projected,
            "penalty": self.penalty,
            "relative_error": self.relative_error,
            "emulation_methods": self.methods,
            "emulation_confidence": self.confidence,
            "run_measured_s": self.run_measured_s,
        }


def judge_app(  # noqa: C901
    app: str,
    run_doc: Mapping[str, Any],
    truth: Sequence[TruthDevice],
    shapes: Mapping[ShapeKey, ShapeProjection] | None = None,
) -> tuple[list[KernelResult], list[str]]:
    """Per-kernel results of one app's project-mode run against every truth device.

    Returns the kernels (those in the truth files) and notes: truth kernels never seen in
    the run, projected shapes without a truth row, launch counts that differ from the run.
    A device is judged on the profile it was assigned (``TruthDevice.profile``), else on
    the profile of the truth file's device name that the run projected onto (the first,
    where several have that name).
    ``shapes``: another model's per-shape times (:func:`model_shapes`) instead of the run's.
    """
    docs = run_doc.get("projections") or []
    run_shapes, errors = project_shapes(docs)
    on = {d.label: d.profile or next(iter(profiles_named(docs, d.name)), d.name) for d in truth}
    if shapes is None:
        shapes = run_shapes
    notes: list[str] = []
    for why, n in sorted(errors.items()):
        notes.append(f"{n} signature(s) not projected: {why}")
    # launches shaped by the device's answers (intercept.size_queries): once per kernel
    shaped = {str(d["kernel"]): str(d["note"]) for d in docs if d.get("note")}
    notes.extend(f"{kernel}: {note}" for kernel, note in sorted(shaped.items()))
    run_rows: dict[str, dict[str, float]] = {}
    for r in run_doc.get("kernels") or []:
        agg = run_rows.setdefault(r["kernel"], {"launches": 0, "total_ns": 0.0})
        agg["launches"] += int(r.get("launches") or 0)
        agg["total_ns"] += float(r.get("total_ns") or 0)

    # The truth devices' shapes of this app, by kernel (union over devices).
    kernels: dict[str, set[ShapeKey]] = {}
    for dev in truth:
        for key in dev.app_rows(app):
            kernels.setdefault(key[0], set()).add(key)
    results: list[KernelResult] = []
    for kernel in sorted(kernels):
        keys = sorted(kernels[kernel], key=lambda k: (k[1], k[2] or (0, 0, 0)))
        # Launch counts come from the truth files (the first device that has the shape).
        launches = {
            k: next(d.app_rows(app)[k].launches for d in truth if k in d.app_rows(app))
            for k in keys
        }
        matched = [k for k in keys if k in shapes]
        measured: dict[str, float] = {}
        projected: dict[str, float] = {}
        bound: dict[str, str] = {}
        energy: dict[str, float] = {}
        low_power: set[str] = set()
        for dev in truth:
            rows = dev.app_rows(app)
            pid = on[dev.label]
            both = [k for k in matched if k in rows and pid in shapes[k].time_s]
            if not both:
                continue
            measured[dev.label] = sum(rows[k].total_s for k in both)
            contrib = {k: rows[k].launches * shapes[k].time_s[pid] for k in both}
            projected[dev.label] = sum(contrib.values())
            top = max(contrib, key=lambda k: contrib[k])
            bound[dev.label] = shapes[top].bound.get(pid, "?")
            if all(pid in shapes[k].energy_j for k in both):
                energy[dev.label] = sum(rows[k].launches * shapes[k].energy_j[pid] for k in both)
                if any(pid in shapes[k].power_low for k in both):
                    low_power.add(dev.label)
        methods: Counter = Counter()
        conf: Counter = Counter()
        for k in matched:
            methods.update(shapes[k].methods)
            conf.update(shapes[k].confidence)
        run = run_rows.get(kernel)
        res = KernelResult(
            app=app,
            kernel=kernel,
            measured_s=measured,
            projected_s=projected,
            bound=bound,
            launches_truth=sum(launches.values()),
            launches_matched=sum(launches[k] for k in matched),
            shapes_truth=len(keys),
            shapes_matched=len(matched),
            signatures=sum(shapes[k].signatures for k in matched),
            launches_run=int(run["launches"]) if run else None,
            run_measured_s=run["total_ns"] * 1e-9 if run else None,
            methods=dict(methods),
            confidence=dict(conf),
            projected_j=energy,
            power_low=low_power,
            ops=sum(launches[k] * shapes[k].ops for k in matched)  # type: ignore[misc]
            if matched and all(shapes[k].ops is not None for k in matched)
            else None,
        )
        if run is None:
            notes.append(f"{kernel}: in the truth files but never launched in this run")
        elif res.launches_run != res.launches_truth:
            notes.append(
                f"{kernel}: {res.launches_run} launches in this run, {res.launches_truth} in the truth"
            )
        if run is not None and res.shapes_matched < res.shapes_truth:
            notes.append(
                f"{kernel}: {res.shapes_truth - res.shapes_matched} of {res.shapes_truth} shapes "
                f"have no projection ({res.coverage:.0%} of launches judged)"
            )
        results.append(res)
    extra = sorted({k for k in shapes if k[0] not in kernels or k not in kernels[k[0]]})
    if extra:
        notes.append(
            f"{len(extra)} projected shape(s) without a truth row, e.g. "
            f"{extra[0][0]} {fmt_dims(extra[0][1])} / {fmt_dims(extra[0][2])}"
        )
    return results, notes
