"""Fitted and learned power side by side on measured windows: our apps leave-one-app-out,
a suite's unmodified apps with the learned model trained on all of our apps.

Why apart from :mod:`runtime.evaluation.energy_judge`: the fitted power needs no training
and is judged window by window; the learned power (:mod:`runtime.projection.models.
learned_power`) must never see the app it projects. On our apps each app's windows are
projected by a model trained on every other app's windows (leave-one-app-out); a suite's
apps are third-party code, so the model is trained on all our apps' windows and the whole
suite is held out. Both models use the bound model's projected time, so the energy rows of
the two differ only by their power. ``docs/energy.md``, ``docs/models.md``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from clproj.intercept.identity import ShapeKey, shape_key
from clproj.runtime.evaluation import energy_judge as J
from clproj.runtime.projection.models.learned_power import (
    LearnedPowerModel,
    PowerRow,
    power_features,
)

Variants = tuple[tuple[float, tuple[float, ...]], ...]


def launch_variants(
    launches: Sequence[tuple[float, dict[str, Any], float | None]], device: Any
) -> tuple[Variants, float]:
    """``(weight, features)`` of ``(weight, kernel profile, footprint)`` launches of one
    shape on ``device``, and their weight-averaged bound-model time (seconds)."""
    from clproj.runtime.projection.model import project

    total = sum(w for w, _, _ in launches)
    out, t = [], 0.0
    for weight, profile, footprint in launches:
        p = project(profile, device, footprint)
        out.append((weight, tuple(power_features(profile, p, device))))
        t += p.time_s * weight / total
    return tuple(out), t


def our_windows(
    docs: Sequence[Mapping[str, Any]], size: str = "paper", mode: str = "single"
) -> list[tuple[J.Window, PowerRow, float]]:
    """Every window of our apps in ``docs`` with its training row (features from the
    committed kernel profiles on the measured device) and projected seconds per launch;
    windows whose shape has no committed profile are left out (the fitted judge lists
    them as unmatched)."""
    cache: dict[str, Any] = {}
    out = []
    for doc in docs:
        device = J.measured_profile(doc)
        for w in J.windows(doc):
            if not J.ours(w):
                continue
            g = J.app_group(w, cache, size, mode)
            if g is None:
                continue
            launches = [
                (float(v["weight"]), v["profile"], g.get("footprint_bytes")) for v in g["variants"]
            ]
            variants, t = launch_variants(launches, device)
            power = float(w.figures["average_power_w"])
            out.append((w, PowerRow(w.app, device.key, variants, power), t))
    return out


class LeaveOneAppOut:
    """A :data:`energy_judge.Projector` of our apps' windows by the learned power, each
    app projected by a model trained on every other app's windows (``models[app]``)."""

    def __init__(self, windows: Sequence[tuple[J.Window, PowerRow, float]], seed: int = 0):
        self.windows = list(windows)
        self.seed = seed
        self.models: dict[str, LearnedPowerModel] = {}

    def __call__(self, w: J.Window) -> tuple[float, float, str] | None:
        # a shape's features are the same in every file: the first window of it serves
        found = next((x for x in self.windows if (x[0].app, x[0].key) == (w.app, w.key)), None)
        if found is None:
            return None
        _, row, t = found
        if w.app not in self.models:
            training = [r for o, r, _ in self.windows if o.app != w.app]
            self.models[w.app] = LearnedPowerModel(self.seed).fit(training)
        watts = self.models[w.app].predict_w(row.variants, row.device_key)
        return t, watts * t, "learned"


def trained_on_our_apps(
    windows: Sequence[tuple[J.Window, PowerRow, float]], seed: int = 0
) -> LearnedPowerModel:
    """The learned power model trained on every window of our apps (for suites)."""
    return LearnedPowerModel(seed).fit([r for _, r, _ in windows])


def suite_launches(
    runs: Sequence[Any],
) -> dict[tuple[str, ShapeKey], list[tuple[float, dict[str, Any], float | None]]]:
    """Each projected shape of a validation's runs (``Validation.runs``) with the kernel
    profiles of its signatures (reused launches' profiles rebuilt as ``validate --models``
    does), one weight each: the run averages a shape's signatures the same way."""
    from clproj.runtime.evaluation.validate_models import launch_profiles

    out: dict[tuple[str, ShapeKey], list[tuple[float, dict[str, Any], float | None]]] = {}
    for r in runs:
        if not r.ok or r.doc is None:
            continue
        pairs, _ = launch_profiles((r.doc or {}).get("projections") or [])
        for doc, profile in pairs:
            key = shape_key(doc["kernel"], doc["global_size"], doc.get("local_size"))
            out.setdefault((r.app, key), []).append((1.0, profile, doc.get("footprint_bytes")))
    return out


def suite_projector(
    model: LearnedPowerModel,
    launches: Mapping[tuple[str, ShapeKey], list[tuple[float, dict[str, Any], float | None]]],
    device: Any,
    times: Mapping[tuple[str, ShapeKey], float],
) -> J.Projector:
    """Projects a suite window by the learned power on ``device`` times the run's own
    projected seconds per launch of its shape (``times``, the fitted judge's time too)."""

    def one(w: J.Window) -> tuple[float, float, str] | None:
        got, t = launches.get((w.app, w.key)), times.get((w.app, w.key))
        if not got or not t:
            return None
        variants, _ = launch_variants(got, device)
        return t, model.predict_w(variants, device.key) * t, "learned"

    return one


def suite_times(runs: Sequence[Any], profile: str) -> dict[tuple[str, ShapeKey], float]:
    """The run's projected seconds per launch of each shape on the profile of that id
    (:func:`runtime.evaluation.validate_match.profile_id`)."""
    from clproj.runtime.evaluation.validate_match import project_shapes

    out = {}
    for r in runs:
        if not r.ok or r.doc is None:
            continue
        for key, sp in project_shapes((r.doc or {}).get("projections") or [])[0].items():
            if profile in sp.time_s:
                out[(r.app, key)] = sp.time_s[profile]
    return out


def side_by_side(
    docs: Sequence[Mapping[str, Any]],
    val: Any = None,
    seed: int = 0,
    which: Callable[[J.Window], bool] = J.ours,
    ours: bool = True,
) -> dict[str, Any]:
    """Fitted and learned judgements (:func:`energy_judge.to_doc`) of our apps' windows
    in ``docs`` that ``which`` selects (learned: leave-one-app-out; ``ours=False``: none)
    and, with a validation ``val`` of the suite the docs' suite windows come from, of
    those (learned: trained on all of our apps' windows)."""
    mine = our_windows(docs)
    out: dict[str, Any] = {
        "trained_on": {"apps": len({r.app for _, r, _ in mine}), "windows": len(mine)}
    }
    if ours:
        loao = LeaveOneAppOut(mine, seed)
        fitted = [J.judge(d, J.app_projector(J.measured_profile(d)), which) for d in docs]
        out["ours"] = {
            "fitted": J.to_doc(fitted),
            "learned": J.to_doc([J.judge(d, loao, which) for d in docs]),
        }
    if val is not None:
        from clproj.runtime.evaluation.validate_energy import judge_suite_energy

        model = trained_on_our_apps(mine, seed)
        launches = suite_launches(val.runs)
        judged = []
        for d in docs:
            times = suite_times(val.runs, val.profile_named(J.device_name(d)))
            project = suite_projector(model, launches, J.measured_profile(d), times)
            judged.append(J.judge(d, project, J.of_suite))
        out["suite"] = {"fitted": judge_suite_energy(val, docs), "learned": J.to_doc(judged)}
    return out


def print_side_by_side(out: Mapping[str, Any]) -> None:
    """One row per (windows, power model) of a :func:`side_by_side` result."""
    from clproj.console import print_table

    body = []
    for key, label in (("suite", "suite (held out)"), ("ours", "our apps (LOAO)")):
        for model in ("fitted", "learned") if key in out else ():
            f = figures(out[key][model])
            if f["windows"]:
                body.append(
                    [
                        label,
                        model,
                        str(f["windows"]),
                        f"{f['power_mape']:.1f}%",
                        f"{f['energy_mape']:.1f}%",
                        f"{f['time_mape']:.1f}%",
                        f"{f['power_within_10pct']:.0%}",
                    ]
                )
    t = out["trained_on"]
    print_table(
        ["windows", "power", "n", "power MAPE", "energy MAPE", "time MAPE", "P within 10%"],
        body,
        title=f"power models side by side (learned: {t['windows']} windows of {t['apps']} apps)",
    )


def figures(judged: Mapping[str, Any]) -> dict[str, float | int | None]:
    """Windows, power / energy / time MAPE and median power ratio of one to_doc result
    (all of its rows: one device here)."""
    rows = judged["rows"]
    if not rows:
        return {"windows": 0, "power_mape": None, "energy_mape": None, "time_mape": None}

    def mape(key: str) -> float:
        return 100.0 * statistics.fmean(abs(r[key] - 1.0) for r in rows)

    return {
        "windows": len(rows),
        "power_mape": mape("power_ratio"),
        "energy_mape": mape("energy_ratio"),
        "time_mape": mape("time_ratio"),
        "power_ratio_median": statistics.median(r["power_ratio"] for r in rows),
        "power_within_10pct": sum(abs(r["power_ratio"] - 1) <= 0.10 for r in rows) / len(rows),
    }
