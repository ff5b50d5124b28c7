"""Judge the projection model on third-party apps with real-device ground truth.

``clproj validate SUITE --truth DIR`` (docs/validation.md) builds a suite of unmodified
OpenCL apps, runs each one under ``clproj run --mode project`` and compares the projected
per-kernel device times with times measured on real devices (``truth/<device>.tsv``). The
apps are code nobody on this project wrote or tuned for, so the comparison shows where the
model is wrong by principle rather than where it was fitted.

The logic lives here, apart from the command line (evaluation/cli_validate.py), so that the
matching of projections to truth rows and every metric can be unit-tested on hand-made
inputs without running an app.

Matching: project mode reports one projection per distinct launch *signature*, while a truth
file has one row per (app, kernel, global size, local size) *shape* with its launch count.
Signatures that share a shape (lu's step index scalar changes every launch) are averaged;
a kernel's total is the sum over its shapes of ``launches x per-launch time``, on both the
projected and the measured side, over the shapes present on both sides only.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clproj.errors import ClprojError
from evaluation import metrics

FORMAT = "clproj.validation"
VERSION = 1

TRUTH_COLUMNS = ("app", "device", "kernel", "global", "local", "launches", "mean_ns")

# Ratio bands of the README: "within 25 %" is the symmetric band 0.8-1.25x (a factor of
# 1.25 either way), "within 2x" the band 0.5-2x.
BAND_25 = (0.8, 1.25)
BAND_2X = (0.5, 2.0)

# Device pairs that are hard to order (same architecture, close specs); judged when both
# truth files are present. Named by truth-file stem; every other pair is judged too.
HARD_PAIRS = (("h100", "h200"), ("xeon16", "epyc2"))

Dims = tuple[int, int, int]
ShapeKey = tuple[str, Dims, Dims | None]  # (kernel, global, local or None for NULL)


# ---------------------------------------------------------------------------------------
# shapes and truth files


def pad_dims(values: Sequence[int] | str | None) -> Dims | None:
    """Three-entry NDRange, padded with 1s; None for a NULL / all-zero local size.

    Truth files write ``2048,2048,1`` whatever the launch's work_dim, projections a list of
    work_dim entries: padding both to three makes ``[2048, 2048]`` and ``2048,2048,1`` equal.
    """
    if values is None:
        return None
    if isinstance(values, str):
        text = values.strip()
        if not text or text.upper() in ("NULL", "NONE", "-"):
            return None
        values = [int(v) for v in text.split(",") if v.strip()]
    dims = [int(v) for v in values]
    if not dims or all(v == 0 for v in dims):
        return None
    if len(dims) > 3:
        raise ValueError(f"an NDRange has at most 3 dimensions, got {dims}")
    return (*dims, *([1] * (3 - len(dims))))  # type: ignore[return-value]


def shape_key(kernel: str, global_size: Any, local_size: Any) -> ShapeKey:
    glob = pad_dims(global_size)
    if glob is None:
        raise ValueError(f"{kernel}: empty global size")
    return (kernel, glob, pad_dims(local_size))


def fmt_dims(dims: Dims | None) -> str:
    return "NULL" if dims is None else ",".join(str(v) for v in dims)


@dataclass
class TruthRow:
    """All launches of one shape of one kernel of one app, measured on one device."""

    app: str
    device: str  # the device name (a profile's identity.name)
    kernel: str
    global_size: Dims
    local_size: Dims | None
    launches: int
    mean_ns: float  # per launch, so launches x mean_ns is the shape's total

    @property
    def key(self) -> ShapeKey:
        return (self.kernel, self.global_size, self.local_size)

    @property
    def total_s(self) -> float:
        return self.launches * self.mean_ns * 1e-9


@dataclass
class TruthDevice:
    """One truth file: a device's name and its rows by app, then by shape."""

    label: str  # the file's stem, e.g. h100
    name: str
    path: str
    rows: dict[str, dict[ShapeKey, TruthRow]] = field(default_factory=dict)

    def app_rows(self, app: str) -> dict[ShapeKey, TruthRow]:
        return self.rows.get(app, {})


def read_truth_file(path: str, label: str | None = None) -> TruthDevice:
    """Parse one ``truth/<device>.tsv``; rows of a repeated shape are merged launch-weighted."""
    label = label or os.path.splitext(os.path.basename(path))[0]
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            text = fh.read()
    except OSError as exc:
        raise ClprojError(
            f"cannot read truth file {path}: {exc.strerror}", "check --truth DIR"
        ) from None
    reader = csv.DictReader(io.StringIO(text), delimiter="\t")
    missing = [c for c in TRUTH_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise ClprojError(
            f"truth file {path} lacks column(s) {', '.join(missing)}",
            f"a truth file is a TSV with the columns {', '.join(TRUTH_COLUMNS)}",
        )
    dev: TruthDevice | None = None
    for lineno, rec in enumerate(reader, start=2):
        try:
            row = TruthRow(
                app=rec["app"],
                device=rec["device"],
                kernel=rec["kernel"],
                global_size=pad_dims(rec["global"]) or (0, 0, 0),
                local_size=pad_dims(rec["local"]),
                launches=int(rec["launches"]),
                mean_ns=float(rec["mean_ns"]),
            )
        except (TypeError, ValueError) as exc:
            raise ClprojError(
                f"{path}:{lineno}: unreadable truth row ({exc})", "fix or remove the row"
            ) from None
        if dev is None:
            dev = TruthDevice(label=label, name=row.device, path=path)
        elif row.device != dev.name:
            raise ClprojError(
                f"{path}:{lineno}: device {row.device!r}, but the file began with {dev.name!r}",
                "keep one device per truth file",
            )
        shapes = dev.rows.setdefault(row.app, {})
        old = shapes.get(row.key)
        if old is not None:
            n = old.launches + row.launches
            old.mean_ns = (old.mean_ns * old.launches + row.mean_ns * row.launches) / max(n, 1)
            old.launches = n
        else:
            shapes[row.key] = row
    if dev is None:
        raise ClprojError(f"truth file {path} has no rows", "measure the device first")
    return dev


def load_truth(truth_dir: str) -> list[TruthDevice]:
    """Every ``*.tsv`` in ``truth_dir``, sorted by file name."""
    if not os.path.isdir(truth_dir):
        raise ClprojError(
            f"truth folder {truth_dir} does not exist", "pass --truth DIR with the suite's *.tsv"
        )
    files = sorted(f for f in os.listdir(truth_dir) if f.endswith(".tsv"))
    if not files:
        raise ClprojError(f"no *.tsv truth file in {truth_dir}", "pass the suite's truth folder")
    return [read_truth_file(os.path.join(truth_dir, f)) for f in files]


# ---------------------------------------------------------------------------------------
# projections


@dataclass
class ShapeProjection:
    """The projected per-launch time of one shape on each device (mean over signatures)."""

    time_s: dict[str, float]  # device name -> mean projected seconds per launch
    bound: dict[str, str]  # device name -> most common bound letter
    signatures: int
    methods: Counter = field(default_factory=Counter)  # emulation method -> signatures
    confidence: Counter = field(default_factory=Counter)


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
        for p in projs:
            times.setdefault(key, {}).setdefault(p["name"], []).append(float(p["time_s"]))
            bounds.setdefault(key, {}).setdefault(p["name"], Counter())[
                str(p.get("bound", "?"))
            ] += 1
    out = {
        key: ShapeProjection(
            time_s={name: statistics.fmean(ts) for name, ts in per_dev.items()},
            bound={name: c.most_common(1)[0][0] for name, c in bounds[key].items()},
            signatures=sigs[key],
            methods=methods[key],
            confidence=conf[key],
        )
        for key, per_dev in times.items()
    }
    return out, errors


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


def judge_app(
    app: str,
    run_doc: Mapping[str, Any],
    truth: Sequence[TruthDevice],
    shapes: Mapping[ShapeKey, ShapeProjection] | None = None,
) -> tuple[list[KernelResult], list[str]]:
    """Per-kernel results of one app's project-mode run against every truth device.

    Returns the kernels (those in the truth files) and notes: truth kernels never seen in
    the run, projected shapes without a truth row, launch counts that differ from the run.
    A device is judged when the run projected onto a profile of the truth file's name.
    ``shapes``: another model's per-shape times (:func:`model_shapes`) instead of the run's.
    """
    run_shapes, errors = project_shapes(run_doc.get("projections") or [])
    if shapes is None:
        shapes = run_shapes
    notes: list[str] = []
    for why, n in sorted(errors.items()):
        notes.append(f"{n} signature(s) not projected: {why}")
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
        for dev in truth:
            rows = dev.app_rows(app)
            both = [k for k in matched if k in rows and dev.name in shapes[k].time_s]
            if not both:
                continue
            measured[dev.label] = sum(rows[k].total_s for k in both)
            contrib = {k: rows[k].launches * shapes[k].time_s[dev.name] for k in both}
            projected[dev.label] = sum(contrib.values())
            top = max(contrib, key=lambda k: contrib[k])
            bound[dev.label] = shapes[top].bound.get(dev.name, "?")
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


# ---------------------------------------------------------------------------------------
# metrics over kernels


def _share(values: Sequence[float], lo: float, hi: float) -> float:
    return sum(1 for v in values if lo <= v <= hi) / len(values) if values else math.nan


def device_metrics(kernels: Sequence[KernelResult], device: str) -> dict[str, Any]:
    """Projected / measured ratio statistics and MAPE of one device over the kernels."""
    judged = [k for k in kernels if device in k.devices]
    ratios = [k.ratio(device) for k in judged]
    n = len(ratios)
    return {
        "kernels": n,
        "median_ratio": statistics.median(ratios) if ratios else math.nan,
        "within_25": sum(1 for r in ratios if BAND_25[0] <= r <= BAND_25[1]),
        "within_25_share": _share(ratios, *BAND_25),
        "within_2x": sum(1 for r in ratios if BAND_2X[0] <= r <= BAND_2X[1]),
        "within_2x_share": _share(ratios, *BAND_2X),
        "mape": metrics.mape([(k.measured_s[device], k.projected_s[device]) for k in judged]),
        "max_off_factor": max((k.off_factor(device) for k in judged), default=math.nan),
        "worst_kernel": max(judged, key=lambda k: k.off_factor(device)).kernel if judged else None,
    }


def pair_order(kernels: Sequence[KernelResult], a: str, b: str) -> dict[str, Any]:
    """How often the projection orders devices ``a`` and ``b`` as the measurement does.

    A measured tie (equal times) counts as agreeing with any projected order: there is no
    wrong answer to get.
    """
    judged = [k for k in kernels if a in k.devices and b in k.devices]
    agree = 0
    for k in judged:
        m = k.measured_s[a] - k.measured_s[b]
        p = k.projected_s[a] - k.projected_s[b]
        agree += m == 0 or (m > 0) == (p > 0)
    return {
        "devices": [a, b],
        "kernels": len(judged),
        "agree": agree,
        "share": agree / len(judged) if judged else math.nan,
        "hard": (a, b) in HARD_PAIRS or (b, a) in HARD_PAIRS,
    }


def summarize(kernels: Sequence[KernelResult], devices: Sequence[str]) -> dict[str, Any]:
    """Selection and relative-performance metrics over kernels judged on every device.

    Only kernels with a time on all ``devices`` enter (a best device chosen from fewer
    devices would be an easier question); per-device metrics use every kernel that device has.
    """
    full = [k for k in kernels if set(devices) <= set(k.devices)]
    n = len(full)
    pens = [k.penalty for k in full if k.penalty is not None]
    errs = [k.relative_error for k in full if k.relative_error is not None]
    chosen = sum(1 for k in full if k.best_projected == k.best_measured)
    pairs = [pair_order(kernels, a, b) for i, a in enumerate(devices) for b in devices[i + 1 :]]
    pairs.sort(key=lambda p: not p["hard"])
    return {
        "kernels": n,
        "best_chosen": chosen,
        "best_chosen_share": chosen / n if n else math.nan,
        "mean_penalty": statistics.fmean(pens) if pens else math.nan,
        "max_penalty": max(pens, default=math.nan),
        "mean_relative_error": statistics.fmean(errs) if errs else math.nan,
        "median_relative_error": statistics.median(errs) if errs else math.nan,
        "per_device": {d: device_metrics(kernels, d) for d in devices},
        "pairs": pairs,
    }


def worst_kernels(
    kernels: Sequence[KernelResult], limit: int = 10
) -> list[tuple[KernelResult, str]]:
    """(kernel, device) with the largest off-factors, one entry per kernel (its worst device)."""
    out = []
    for k in kernels:
        if k.devices:
            out.append((k, max(k.devices, key=k.off_factor)))
    out.sort(key=lambda kd: -kd[0].off_factor(kd[1]))
    return out[:limit]


# ---------------------------------------------------------------------------------------
# other models (--models): re-project each signature's kernel profile


def check_model_names(names: Sequence[str]) -> list[str]:
    """``--models`` names, checked before any app runs; ``learned`` is refused (it needs
    training data, which third-party apps without our bench results do not have)."""
    from runtime.projection.models import MODEL_NAMES

    out: list[str] = []
    for name in names:
        if name == "learned":
            raise ClprojError(
                "the learned model is not supported by validate (it has no training data here)",
                "compare it with `clproj evaluate --models learned`; validate takes "
                + ", ".join(m for m in MODEL_NAMES if m != "learned"),
            )
        if name not in MODEL_NAMES:
            raise ClprojError(
                f"unknown model {name!r}",
                f"use one of {', '.join(m for m in MODEL_NAMES if m != 'learned')}",
            )
        if name not in out:
            out.append(name)
    return out or ["bound"]


def _log_distance(a: float, b: float) -> float:
    return abs(math.log(max(a, 1.0)) - math.log(max(b, 1.0)))


def signature_profile(
    doc: Mapping[str, Any], by_signature: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, Any] | None, str]:
    """The kernel profile a launch-projection doc was projected from, and how it was got.

    ``emulated``: the doc carries it. A reused launch's doc carries none (the run scaled
    an emulated anchor's profile in memory): ``scaled`` rebuilds it by scaling the anchor
    named in ``emulation.reused_from`` (else the profiled signature of the same kernel and
    local size nearest in work-items) per work-item to the launch's NDRange
    (:func:`miniemu.reuse.scale_profile`; the run may have interpolated instead).
    ``None, "no profile"`` when no anchor is in the run.
    """
    if doc.get("profile"):
        return dict(doc["profile"]), "emulated"
    from types import SimpleNamespace

    from miniemu.profile import KernelProfile
    from miniemu.reuse import scale_profile

    anchor = by_signature.get(str((doc.get("emulation") or {}).get("reused_from", "")))
    if not (anchor and anchor.get("profile")):
        local = pad_dims(doc.get("local_size"))
        size = math.prod(pad_dims(doc["global_size"]) or (1, 1, 1))
        same = [
            d
            for d in by_signature.values()
            if d.get("profile")
            and d.get("kernel") == doc.get("kernel")
            and pad_dims(d["profile"]["launch"].get("local_size")) == local
        ]
        if not same:
            return None, "no profile"
        anchor = min(same, key=lambda d: _log_distance(d["profile"]["launch"]["work_items"], size))
    record = SimpleNamespace(
        kernel=doc["kernel"], signature=doc.get("signature", ""), global_size=doc["global_size"]
    )
    base = KernelProfile.from_dict(anchor["profile"])
    return scale_profile(base, record, "validate --models re-projection").to_dict(), "scaled"


def model_shapes(
    docs: Sequence[Mapping[str, Any]], model: Any, devices: Sequence[Any]
) -> tuple[dict[ShapeKey, ShapeProjection], Counter]:
    """Per-shape times of ``model`` on ``devices``, from the docs' kernel profiles.

    Each signature's profile (:func:`signature_profile`) is projected onto each device
    the run projected it onto (matched by profile key), without a launch footprint (the
    run's JSON does not carry one); signatures of one shape are averaged as in
    :func:`project_shapes`. The counter says how many signatures were ``emulated``,
    ``scaled`` or had ``no profile`` (those are left out).
    """
    by_key = {d.key: d for d in devices}
    by_signature = {str(d.get("signature", "")): d for d in docs if d.get("signature")}
    times: dict[ShapeKey, dict[str, list[float]]] = {}
    bounds: dict[ShapeKey, dict[str, Counter]] = {}
    sigs: Counter = Counter()
    how: Counter = Counter()
    for doc in docs:
        if doc.get("error") or not doc.get("projections"):
            continue
        profile, source = signature_profile(doc, by_signature)
        how[source] += 1
        if profile is None:
            continue
        key = shape_key(doc["kernel"], doc["global_size"], doc.get("local_size"))
        sigs[key] += 1
        for p in doc["projections"]:
            dev = by_key.get(p.get("device"))
            if dev is None:
                continue
            pred = model.predict(profile, dev, None)
            times.setdefault(key, {}).setdefault(p["name"], []).append(float(pred.time_s))
            bounds.setdefault(key, {}).setdefault(p["name"], Counter())[str(pred.bound)] += 1
    out = {
        key: ShapeProjection(
            time_s={name: statistics.fmean(ts) for name, ts in per_dev.items()},
            bound={name: c.most_common(1)[0][0] for name, c in bounds[key].items()},
            signatures=sigs[key],
        )
        for key, per_dev in times.items()
    }
    return out, how


def model_summary(
    kernels: Sequence[KernelResult], devices: Sequence[str], sources: Mapping[str, int]
) -> dict[str, Any]:
    """The side-by-side row of one model: selection, relative error, per-device accuracy."""
    s = summarize(kernels, devices)
    return {
        "kernels": s["kernels"],
        "best_chosen": s["best_chosen"],
        "best_chosen_share": s["best_chosen_share"],
        "mean_penalty": s["mean_penalty"],
        "mean_relative_error": s["mean_relative_error"],
        "per_device": {
            d: {k: m[k] for k in ("kernels", "mape", "median_ratio")}
            for d, m in s["per_device"].items()
        },
        "signatures": dict(sources),
    }


# ---------------------------------------------------------------------------------------
# building and running the suite


def suite_fingerprint(suite: str) -> str:
    """A hash of the suite's build inputs (build.sh and src/): a changed source rebuilds."""
    h = hashlib.sha256()
    roots = [os.path.join(suite, "build.sh"), os.path.join(suite, "src")]
    for root in roots:
        if os.path.isfile(root):
            walk: Iterable[tuple[str, list[str], list[str]]] = [
                (os.path.dirname(root), [], [os.path.basename(root)])
            ]
        else:
            walk = os.walk(root)
        for dirpath, dirnames, filenames in walk:
            dirnames.sort()
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                st = os.stat(path)
                h.update(
                    f"{os.path.relpath(path, suite)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode()
                )
    return h.hexdigest()[:16]


def default_build_dir(suite: str) -> str:
    from clproj import paths

    real = os.path.realpath(suite)
    tag = hashlib.sha256(real.encode()).hexdigest()[:8]
    return os.path.join(paths.cache_dir("validate"), f"{os.path.basename(real)}-{tag}")


def app_dirs(build_dir: str) -> list[str]:
    """Names of the build folder's app folders (each holds ``app`` if it built)."""
    if not os.path.isdir(build_dir):
        return []
    return sorted(
        d
        for d in os.listdir(build_dir)
        if os.path.isdir(os.path.join(build_dir, d)) and not d.startswith(".")
    )


def _built(build_dir: str, app: str) -> bool:
    path = os.path.join(build_dir, app, "app")
    return os.path.isfile(path) and os.access(path, os.X_OK)


STAMP = ".clproj-build-stamp"


def ensure_built(suite: str, build_dir: str | None) -> tuple[str, str]:
    """The build folder and what was done: ``given``, ``up to date`` or ``built``.

    A ``--build-dir`` that already holds built apps is used as is (the user built it); the
    default folder (in clproj's cache) is rebuilt whenever the suite's sources change.
    """
    script = os.path.join(suite, "build.sh")
    if build_dir and any(_built(build_dir, a) for a in app_dirs(build_dir)):
        return build_dir, "given"
    build_dir = build_dir or default_build_dir(suite)
    stamp = os.path.join(build_dir, STAMP)
    fingerprint = suite_fingerprint(suite)
    try:
        with open(stamp, encoding="utf-8") as fh:
            if fh.read().strip() == fingerprint and any(
                _built(build_dir, a) for a in app_dirs(build_dir)
            ):
                return build_dir, "up to date"
    except OSError:
        pass
    if not os.path.isfile(script):
        raise ClprojError(
            f"{suite} has no build.sh", "a suite folder holds build.sh OUTDIR (or pass --build-dir)"
        )
    os.makedirs(build_dir, exist_ok=True)
    proc = subprocess.run(
        ["bash", os.path.abspath(script), os.path.abspath(build_dir)],
        cwd=suite,
        capture_output=True,
        text=True,
    )
    if not any(_built(build_dir, a) for a in app_dirs(build_dir)):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ClprojError(
            f"building the suite built no app (build.sh exit {proc.returncode}: {tail[0]})",
            f"run `bash {script} DIR` by hand to see why",
        )
    if proc.returncode == 0:
        with open(stamp, "w", encoding="utf-8") as fh:
            fh.write(fingerprint + "\n")
    return build_dir, "built"


@dataclass
class AppRun:
    """One app's project-mode run: its JSON document or why there is none."""

    app: str
    ok: bool
    wall_s: float = 0.0
    error: str | None = None
    doc: dict[str, Any] | None = None
    output_tail: str = ""


def parse_run_output(stdout: str) -> dict[str, Any]:
    """The JSON document of ``clproj run --json``: from the first line that is exactly ``{``.

    The app's own output may precede it on stdout, and that output may contain braces, so
    the document is found by its first line rather than by the first ``{`` character.
    """
    lines = stdout.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.rstrip("\r\n") == "{":
            return json.loads("".join(lines[i:]))
    raise ValueError("no JSON document in the output")


def _tail(text: str, n: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def run_app(
    build_dir: str, app: str, devices: str, timeout_s: float, env: Mapping[str, str] | None = None
) -> AppRun:
    """Run ``build_dir/app/app`` unmodified under ``clproj run --mode project --json``.

    The app runs in its own folder (the apps open their ``.cl`` from the working directory)
    and in its own session, so that a timeout ends the app and the shim's helpers with it.
    """
    folder = os.path.join(build_dir, app)
    if not _built(build_dir, app):
        return AppRun(app, ok=False, error="build failed (no app binary)")
    cmd = [sys.executable, "-m", "clproj.cli", "run", "--mode", "project", "--devices", devices]
    cmd += ["--json", "--", "./app"]
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env) if env is not None else None,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        return AppRun(
            app,
            ok=False,
            wall_s=time.perf_counter() - start,
            error=f"timed out after {timeout_s:.0f} s",
            output_tail=_tail(err),
        )
    wall = time.perf_counter() - start
    try:
        doc = parse_run_output(out)
    except ValueError as exc:
        why = f"clproj run exit {proc.returncode}, {exc}"
        return AppRun(app, ok=False, wall_s=wall, error=why, output_tail=_tail(err or out))
    rc = doc.get("exit_code", proc.returncode)
    if rc != 0:
        return AppRun(
            app, ok=False, wall_s=wall, error=f"app exit code {rc}", doc=doc, output_tail=_tail(err)
        )
    if not doc.get("projections"):
        return AppRun(
            app,
            ok=False,
            wall_s=wall,
            error="no launch was projected",
            doc=doc,
            output_tail=_tail(err),
        )
    return AppRun(app, ok=True, wall_s=wall, doc=doc, output_tail=_tail(err))


def _kill_group(proc: subprocess.Popen) -> None:
    """End the run's process group (ours: started with start_new_session)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


# ---------------------------------------------------------------------------------------
# the whole validation


@dataclass
class Validation:
    suite: str
    truth_dir: str
    build_dir: str
    build: str
    devices_spec: str
    devices: list[str]  # judged device labels
    device_names: dict[str, str]
    kernels: list[KernelResult]
    runs: list[AppRun]
    notes: dict[str, list[str]]  # app -> notes
    skipped_devices: dict[str, str]  # label or profile name -> why
    wall_s: float = 0.0
    # --models: model name -> :func:`model_summary` (empty: only the run's bound model)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return summarize(self.kernels, self.devices)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "suite": self.suite,
            "truth": self.truth_dir,
            "build_dir": self.build_dir,
            "build": self.build,
            "devices_spec": self.devices_spec,
            "devices": [{"label": d, "name": self.device_names[d]} for d in self.devices],
            "skipped_devices": self.skipped_devices,
            "apps": [
                {
                    "app": r.app,
                    "ok": r.ok,
                    "error": r.error,
                    "wall_s": r.wall_s,
                    "notes": self.notes.get(r.app, []),
                    **({"output_tail": r.output_tail} if not r.ok else {}),
                }
                for r in self.runs
            ],
            "kernels": [k.to_dict() for k in self.kernels],
            "summary": _finite(self.summary()),
            "worst": [
                {"app": k.app, "kernel": k.kernel, "device": d, "ratio": k.ratio(d)}
                for k, d in worst_kernels(self.kernels)
            ],
            "wall_s": self.wall_s,
            **({"models": _finite(self.models)} if self.models else {}),
        }


def _finite(obj: Any) -> Any:
    """NaN and infinity become None: JSON has no such numbers."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def validate(
    suite: str,
    truth_dir: str,
    devices: str = "measured",
    apps: Sequence[str] | None = None,
    build_dir: str | None = None,
    timeout_s: float = 1800.0,
    progress: Callable[[Iterable[str], str], Iterable[str]] | None = None,
    on_app: Callable[[AppRun], None] | None = None,
    models: Sequence[str] | None = None,
) -> Validation:
    """Build the suite, run every app under project mode and judge it against the truth.

    ``models`` (``--models``): also judge these models side by side (:attr:`Validation.models`);
    ``bound`` is the run's own projections, the others re-project its kernel profiles onto
    the ``devices`` profiles. None: the bound model only, no side-by-side table.
    """
    start = time.perf_counter()
    names = check_model_names(models) if models is not None else []
    if not os.path.isdir(suite):
        raise ClprojError(
            f"suite folder {suite} does not exist", "pass the folder holding build.sh"
        )
    truth = load_truth(truth_dir)
    where, how = ensure_built(suite, build_dir)
    # The apps to judge are those with truth rows; one that did not build is reported as
    # failed rather than left out, so that a broken build cannot improve the scores.
    truth_apps = sorted({a for d in truth for a in d.rows})
    known = sorted(set(truth_apps) | set(app_dirs(where)))
    if apps:
        unknown = [a for a in apps if a not in known]
        if unknown:
            raise ClprojError(
                f"no app {', '.join(unknown)} in {where} or the truth files",
                f"--apps takes names among: {', '.join(known)}",
            )
        chosen = list(apps)
    else:
        chosen = truth_apps
    runs: list[AppRun] = []
    iterator: Iterable[str] = (
        progress(chosen, "running apps (project mode)") if progress else chosen
    )
    for app in iterator:
        run = run_app(where, app, devices, timeout_s)
        runs.append(run)
        if on_app:
            on_app(run)
    chosen_models: dict[str, Any] = {}
    profiles: list[Any] = []
    if names:
        from runtime.projection import device_set
        from runtime.projection.models import get_model

        chosen_models = {n: None if n == "bound" else get_model(n) for n in names}
        if any(m is not None for m in chosen_models.values()):
            profiles = device_set.resolve(devices)
    return judge_runs(
        runs,
        truth,
        suite,
        truth_dir,
        where,
        how,
        devices,
        time.perf_counter() - start,
        models=chosen_models,
        device_profiles=profiles,
    )


def judge_runs(
    runs: Sequence[AppRun],
    truth: Sequence[TruthDevice],
    suite: str = "",
    truth_dir: str = "",
    build_dir: str = "",
    build: str = "",
    devices_spec: str = "measured",
    wall_s: float = 0.0,
    models: Mapping[str, Any] | None = None,
    device_profiles: Sequence[Any] = (),
) -> Validation:
    """Judge finished runs: which truth devices were projected onto, then every kernel.

    A truth device is judged only when some run projected onto a profile of its name;
    profiles without a truth file (pocl-basic) are listed as skipped, not judged.
    ``models``: name -> model (``runtime.projection.models``) to re-project every signature's kernel
    profile with onto ``device_profiles`` (:func:`model_shapes`), or None for the run's
    own projections (the bound model); each gets a :func:`model_summary`.
    """
    projected_names: dict[str, str] = {}  # name -> profile key
    for r in runs:
        for doc in (r.doc or {}).get("projections") or []:
            for p in doc.get("projections") or []:
                projected_names.setdefault(p["name"], p["device"])
    judged = [d for d in truth if d.name in projected_names]
    skipped = {
        d.label: f"no profile named {d.name!r} was projected onto" for d in truth if d not in judged
    }
    truth_names = {d.name for d in truth}
    for name, key in projected_names.items():
        if name not in truth_names:
            skipped[key] = f"no truth file for {name!r}"
    kernels: list[KernelResult] = []
    notes: dict[str, list[str]] = {}
    for r in runs:
        if not r.ok or r.doc is None:
            continue
        res, app_notes = judge_app(r.app, r.doc, judged)
        kernels.extend(res)
        if app_notes:
            notes[r.app] = app_notes
    labels = [d.label for d in judged]
    summaries: dict[str, dict[str, Any]] = {}
    for name, model in (models or {}).items():
        if model is None:
            summaries[name] = model_summary(
                kernels,
                labels,
                {"run": sum(len((r.doc or {}).get("projections") or []) for r in runs if r.ok)},
            )
            continue
        mk: list[KernelResult] = []
        sources: Counter = Counter()
        for r in runs:
            if not r.ok or r.doc is None:
                continue
            docs = r.doc.get("projections") or []
            shapes, how = model_shapes(docs, model, device_profiles)
            sources.update(how)
            mk.extend(judge_app(r.app, r.doc, judged, shapes)[0])
        summaries[name] = model_summary(mk, labels, sources)
    return Validation(
        suite=suite,
        truth_dir=truth_dir,
        build_dir=build_dir,
        build=build,
        devices_spec=devices_spec,
        devices=[d.label for d in judged],
        device_names={d.label: d.name for d in judged},
        kernels=kernels,
        runs=list(runs),
        notes=notes,
        skipped_devices=skipped,
        wall_s=wall_s,
        models=summaries,
    )


def load_validation(doc: Mapping[str, Any]) -> Validation:
    """A :class:`Validation` back from its ``to_dict`` JSON (to re-print a saved run's tables)."""
    if doc.get("format") != FORMAT:
        raise ClprojError("not a clproj validation document", "pass the output of --json")
    fields = KernelResult.__dataclass_fields__
    kernels = [
        KernelResult(
            **{k: v for k, v in kd.items() if k in fields and k not in ("methods", "confidence")},
            methods=kd.get("emulation_methods") or {},
            confidence=kd.get("emulation_confidence") or {},
        )
        for kd in doc["kernels"]
    ]
    runs = [
        AppRun(a["app"], a["ok"], a["wall_s"], a.get("error"), None, a.get("output_tail", ""))
        for a in doc["apps"]
    ]
    return Validation(
        suite=doc["suite"],
        truth_dir=doc["truth"],
        build_dir=doc["build_dir"],
        build=doc["build"],
        devices_spec=doc["devices_spec"],
        devices=[d["label"] for d in doc["devices"]],
        device_names={d["label"]: d["name"] for d in doc["devices"]},
        kernels=kernels,
        runs=runs,
        notes={a["app"]: a["notes"] for a in doc["apps"] if a.get("notes")},
        skipped_devices=doc["skipped_devices"],
        wall_s=doc["wall_s"],
        models=doc.get("models") or {},
    )
