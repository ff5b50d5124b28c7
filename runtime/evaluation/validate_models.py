"""``clproj validate --models``: judge other projection models on the same run.

The run's JSON carries the kernel profile of every emulated signature. Re-projecting those
profiles with another model (roofline, paper, mwp-cwp, learned) onto the same device profiles
gives a side-by-side comparison without running the apps again; this module rebuilds the
profiles (scaling a reused launch's anchor), re-projects them and summarizes each model.
The learned model is first trained on our own apps (:func:`fit_on_our_apps`), so it is
judged on code it never saw, like the others.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from clproj.errors import ClprojError
from clproj.intercept.identity import ShapeKey, shape_key
from clproj.runtime.evaluation.validate_match import KernelResult, ShapeProjection
from clproj.runtime.evaluation.validate_scores import summarize
from clproj.runtime.evaluation.validate_truth import pad_dims


def check_model_names(names: Sequence[str]) -> list[str]:
    """``--models`` names, checked before any app runs."""
    from clproj.runtime.projection.models import MODEL_NAMES

    out: list[str] = []
    for name in names:
        if name not in MODEL_NAMES:
            raise ClprojError(f"unknown model {name!r}", f"use one of {', '.join(MODEL_NAMES)}")
        if name not in out:
            out.append(name)
    return out or ["bound"]


def fit_on_our_apps(model: Any, results_paths: list[str] | None = None) -> dict[str, Any]:
    """Train a learned model on every launch group of our own benchmark apps.

    Why all of them: the suite being validated is third-party code that none of the
    training rows come from, so the whole validation is held out from fitting (the
    leave-one-app-out of ``clproj evaluate`` is only needed when model and judge share
    apps). The rows are the committed bench results (``benchmarks/results/bench-*.json``,
    per-launch medians) with the committed kernel profiles of those apps. Returns what the
    model was trained on (apps and rows per device key), for the report.
    """
    from clproj.runtime.evaluation.evaluate import bench_training_rows, load_measured

    measured, profiles, _ = load_measured(results_paths)
    rows = bench_training_rows(measured, profiles)
    if not rows:
        raise ClprojError(
            "the learned model has no training rows (no bench results with kernel profiles)",
            "commit bench results and kernel profiles (`clproj bench`, `clproj evaluate "
            "--emulate`) or leave learned out of --models",
        )
    model.fit(rows)
    per_device: Counter = Counter(r.device_key for r in rows)
    return {"apps": len({r.app for r in rows}), "rows": dict(sorted(per_device.items()))}


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

    from clproj.miniemu.profile import KernelProfile
    from clproj.miniemu.reuse import scale_profile

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


def launch_profiles(
    docs: Sequence[Mapping[str, Any]],
) -> tuple[list[tuple[Mapping[str, Any], dict[str, Any]]], Counter]:
    """Each projected doc of a run with the kernel profile it was projected from.

    Why a step of its own: rebuilding a reused launch's profile (:func:`signature_profile`)
    costs far more than a model's prediction, and it does not depend on the model, so a
    validation builds them once per run and hands them to every model (:func:`model_shapes`).
    The counter says how many signatures were ``emulated``, ``scaled`` or had ``no profile``
    (those are left out).
    """
    by_signature = {str(d.get("signature", "")): d for d in docs if d.get("signature")}
    pairs: list[tuple[Mapping[str, Any], dict[str, Any]]] = []
    how: Counter = Counter()
    for doc in docs:
        if doc.get("error") or not doc.get("projections"):
            continue
        profile, source = signature_profile(doc, by_signature)
        how[source] += 1
        if profile is not None:
            pairs.append((doc, profile))
    return pairs, how


def model_shapes(
    launches: tuple[list[tuple[Mapping[str, Any], dict[str, Any]]], Counter],
    model: Any,
    devices: Sequence[Any],
) -> tuple[dict[ShapeKey, ShapeProjection], Counter]:
    """Per-shape times of ``model`` on ``devices``, from a run's :func:`launch_profiles`.

    Each signature's profile is projected onto each device the run projected it onto
    (matched by profile key), with the launch footprint the run recorded (runs from before
    it was recorded: none); signatures of one shape are averaged as in
    :func:`project_shapes`. The counter is :func:`launch_profiles`' plus how many
    predictions a model could not make for want of ``training data`` on a device.
    """
    pairs, built = launches
    by_key = {d.key: d for d in devices}
    jobs: dict[str, list[tuple[ShapeKey, dict[str, Any], float | None]]] = {}
    sigs: Counter = Counter()
    how: Counter = Counter(built)
    for doc, profile in pairs:
        key = shape_key(doc["kernel"], doc["global_size"], doc.get("local_size"))
        sigs[key] += 1
        for p in doc["projections"]:
            if p.get("device") in by_key:
                jobs.setdefault(p["device"], []).append((key, profile, doc.get("footprint_bytes")))
    times: dict[ShapeKey, dict[str, list[float]]] = {}
    bounds: dict[ShapeKey, dict[str, Counter]] = {}
    for dev_key, work in jobs.items():
        try:
            preds = predict_all(model, [(prof, fp) for _, prof, fp in work], by_key[dev_key])
        except ClprojError:  # a learned model without training data for this device
            how[f"no training data for {dev_key}"] += len(work)
            continue
        for (key, _, _), pred in zip(work, preds, strict=True):
            times.setdefault(key, {}).setdefault(dev_key, []).append(float(pred.time_s))
            bounds.setdefault(key, {}).setdefault(dev_key, Counter())[str(pred.bound)] += 1
    out = {
        key: ShapeProjection(
            time_s={pid: statistics.fmean(ts) for pid, ts in per_dev.items()},
            bound={pid: c.most_common(1)[0][0] for pid, c in bounds[key].items()},
            signatures=sigs[key],
        )
        for key, per_dev in times.items()
    }
    return out, how


def predict_all(
    model: Any, launches: Sequence[tuple[dict[str, Any], float | None]], device: Any
) -> list[Any]:
    """``model``'s predictions of (profile, footprint) launches on one device, in order.

    Why: a validation re-projects thousands of reused launches; a model that predicts
    many rows in one call (``predict_many``: the learned model, whose trees cost far more
    per call than per row) gets them in one batch, others one by one.
    """
    many = getattr(model, "predict_many", None)
    if many is not None:
        return list(many([p for p, _ in launches], device, [fp for _, fp in launches]))
    return [model.predict(p, device, fp) for p, fp in launches]


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
            d: {k: m[k] for k in ("kernels", "mape", "median_ratio", "within_25", "max_off_factor")}
            for d, m in s["per_device"].items()
        },
        "signatures": dict(sources),
    }
