"""Projection accuracy against measured ground truth (``clproj evaluate``).

For every app measured on at least two devices (``benchmarks/results/bench-*.json``) and
every device with a measured profile, the app's projected time is the sum over its
launch groups of ``n_launches x projected time of the group's first launch`` (profiles
from ``runtime.evaluation.app_profiles``); the actual time is the measured device time of one run.
The paper's metrics are computed per app across devices, MAPE per device.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from clproj.benchmarks.harness import RESULTS_DIR
from clproj.errors import ClprojError
from clproj.runtime.evaluation import metrics
from clproj.runtime.evaluation.app_profiles import PROFILES_DIR, load_cached
from clproj.runtime.projection.model import project


@dataclass
class AppEvaluation:
    app: str
    actual_s: dict[str, float]  # device key -> measured seconds
    projected_s: dict[str, float]
    bound: dict[str, str]  # device key -> bound letter of the dominant group
    penalty: float
    relative_error: float
    # device key -> projected joules of one run (absent: no power projection); the
    # arithmetic operations of one run; device key -> power confidence (low: spec rule)
    projected_j: dict[str, float] = field(default_factory=dict)
    ops: float | None = None
    power_confidence: dict[str, str] = field(default_factory=dict)

    @property
    def best_actual(self) -> str:
        return min(self.actual_s, key=lambda d: self.actual_s[d])

    @property
    def best_projected(self) -> str:
        return min(self.projected_s, key=lambda d: self.projected_s[d])


@dataclass
class Evaluation:
    devices: list[str]
    device_names: dict[str, str]
    apps: list[AppEvaluation]
    skipped: dict[str, str] = field(default_factory=dict)  # app -> why

    def summary(self) -> dict[str, Any]:
        n = len(self.apps)
        chosen = sum(1 for a in self.apps if a.penalty == 0.0)
        per_device = {}
        for d in self.devices:
            pairs = [(a.actual_s[d], a.projected_s[d]) for a in self.apps if d in a.actual_s]
            per_device[d] = {"mape": metrics.mape(pairs), "apps": len(pairs)}
        return {
            "apps": n,
            "best_chosen": chosen,
            "best_chosen_fraction": chosen / n if n else float("nan"),
            "mean_penalty": sum(a.penalty for a in self.apps) / n if n else float("nan"),
            "max_penalty": max((a.penalty for a in self.apps), default=float("nan")),
            "mean_relative_error": sum(a.relative_error for a in self.apps) / n
            if n
            else float("nan"),
            "per_device": per_device,
        }

    def subset(self, devices: list[str]) -> Evaluation:
        """The same projections judged on a subset of the devices (e.g. one pair)."""
        apps = []
        for a in self.apps:
            act = {d: a.actual_s[d] for d in devices}
            prj = {d: a.projected_s[d] for d in devices}
            apps.append(
                AppEvaluation(
                    app=a.app,
                    actual_s=act,
                    projected_s=prj,
                    bound={d: a.bound[d] for d in devices},
                    penalty=metrics.selection_penalty(act, prj),
                    relative_error=metrics.relative_error(act, prj),
                    projected_j={d: j for d, j in a.projected_j.items() if d in devices},
                    ops=a.ops,
                    power_confidence={d: c for d, c in a.power_confidence.items() if d in devices},
                )
            )
        return Evaluation(
            devices=list(devices),
            device_names={d: self.device_names[d] for d in devices},
            apps=apps,
            skipped=self.skipped,
        )

    def pairs(self) -> list[dict[str, Any]]:
        """Summary metrics for every pair of devices: how well each choice is made."""
        out = []
        for i, a in enumerate(self.devices):
            for b in self.devices[i + 1 :]:
                s = self.subset([a, b]).summary()
                out.append(
                    {
                        "devices": [a, b],
                        **{
                            k: s[k]
                            for k in (
                                "apps",
                                "best_chosen",
                                "best_chosen_fraction",
                                "mean_penalty",
                                "max_penalty",
                                "mean_relative_error",
                            )
                        },
                    }
                )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "devices": self.devices,
            "device_names": self.device_names,
            "summary": self.summary(),
            "apps": [
                vars(a) | {"best_actual": a.best_actual, "best_projected": a.best_projected}
                for a in self.apps
            ],
            "skipped": self.skipped,
            "pairs": self.pairs(),
        }


def default_results(size: str = "paper") -> list[str]:
    return sorted(glob.glob(os.path.join(RESULTS_DIR, f"bench-*-{size}.json")))


def device_profile_for(bench_device: dict[str, Any]) -> Any:
    """The measured device profile of the device a results file was measured on.

    A committed one, else the one measured on this machine (``clproj devices --profiles``
    or a first ``clproj run``): a user who benchmarks a device nobody committed a profile
    for judges the projections for it with the profile clproj uses for it. None when
    neither exists.
    """
    from clproj.devices.local import cached_profile
    from clproj.devices.profile import profile_for_device

    dev = SimpleNamespace(
        name=bench_device["name"],
        platform=SimpleNamespace(name=bench_device.get("platform", "")),
        driver_version=bench_device.get("driver", ""),
    )
    return profile_for_device(dev) or cached_profile(dev)


def project_app(doc: dict[str, Any], device: Any, model: Any = None) -> tuple[float, str]:
    """Projected seconds of one run of an app, and the bound of its most expensive group.

    ``model`` (``runtime.projection.models``): its ``predict`` replaces the bound model's ``project``.
    """
    total, worst, bound = 0.0, -1.0, "?"
    for g in doc["groups"]:
        if not g["variants"]:
            raise ClprojError(
                f"{doc['app']}: no kernel profile for {g['key']} ({g['error']})",
                "re-emulate with `clproj evaluate --emulate`",
            )
        t, dominant = 0.0, None
        for v in g["variants"]:
            fp = g.get("footprint_bytes")
            p = (
                model.predict(v["profile"], device, fp)
                if model
                else project(v["profile"], device, fp)
            )
            t += p.time_s * v["weight"]
            if dominant is None or p.time_s > dominant.time_s:
                dominant = p
        total += t
        if t > worst:
            worst, bound = t, dominant.bound
    return total, bound


def app_energy(doc: dict[str, Any], device: Any) -> tuple[float | None, float | None, str]:
    """Projected joules of one run of an app on ``device`` (None: the device has no power
    projection), its arithmetic operations (the plugin's counts) and the power's
    confidence, weighted over each group's variants as :func:`project_app` weights time."""
    from clproj.runtime.evaluation.validate_match import arithmetic_ops
    from clproj.runtime.projection.power import project_power

    joules: float | None = 0.0
    ops: float | None = 0.0
    confidence = "normal"
    for g in doc["groups"]:
        for v in g["variants"]:
            p = project(v["profile"], device, g.get("footprint_bytes"))
            pw = project_power(p, v["profile"], device)
            if pw.energy_j is None or joules is None:
                joules = None
            else:
                joules += pw.energy_j * v["weight"]
            if pw.confidence == "low":
                confidence = "low"
            n = arithmetic_ops({"profile": v["profile"]})
            ops = None if n is None or ops is None else ops + n * v["weight"]
    return joules, ops, confidence


def load_measured(
    results_paths: list[str] | None = None, skipped: dict[str, str] | None = None
) -> tuple[dict[str, dict[str, Any]], dict[str, Any], dict[str, str]]:
    """The ground truth: results key -> bench results, measured device profile and device
    name, for every results file whose device has a measured profile (the others go into
    ``skipped``, keyed ``device <key>``, with the reason)."""
    from clproj.benchmarks.harness import distinct_key, load_results

    paths = results_paths or default_results()
    if not paths:
        raise ClprojError("no bench results found", "run `clproj bench` or pass --results FILES")
    measured: dict[str, dict[str, Any]] = {}
    profiles: dict[str, Any] = {}
    names: dict[str, str] = {}
    for path in paths:
        res = load_results(path)
        dev = res["device"]
        prof = device_profile_for(dev)
        if prof is None:
            if skipped is not None:
                skipped[f"device {dev['key']}"] = (
                    f"no measured profile of {dev['name']!r} ({path}): run `clproj devices "
                    "--profiles` on the machine that has it (measures and caches one)"
                )
            continue
        key = dev["key"]
        if key in names and names[key] != dev["name"]:
            # Two hosts of one CPU family and core count (results written apart, e.g. on
            # two machines): both are judged, under distinct keys.
            key = distinct_key(key, dev["name"])
        measured[key] = res
        profiles[key] = prof
        names[key] = dev["name"]
    return measured, profiles, names


def bench_training_rows(
    measured: dict[str, dict[str, Any]],
    profiles: dict[str, Any],
    mode: str = "single",
    profiles_dir: str = PROFILES_DIR,
) -> list[Any]:
    """Training rows of a learned model: every launch group of every app measured on all
    ``measured`` devices, with its committed kernel profiles (keyed by device profile)."""
    from clproj.runtime.projection.models.base import training_rows

    if not measured:
        return []
    every = sorted(set.intersection(*(set(r["apps"]) for r in measured.values())))
    size0 = measured[min(measured)]["size"]
    docs = {a: d for a in every if (d := load_cached(a, size0, mode, profiles_dir))}
    return training_rows(measured, every, docs, {k: p.key for k, p in profiles.items()})


def evaluate(
    results_paths: list[str] | None = None,
    mode: str = "single",
    apps: list[str] | None = None,
    profiles_dir: str = PROFILES_DIR,
    model: Any = None,
) -> Evaluation:
    """``model``: a ``runtime.projection.models`` model instead of the bound model. A model with
    ``fit`` is evaluated leave-one-app-out: before predicting an app it is trained on the
    measured launch groups of every other app (all measured apps, not only ``apps``)."""
    skipped: dict[str, str] = {}
    measured, profiles, names = load_measured(results_paths, skipped)
    if len(measured) < 2:
        raise ClprojError(
            f"need results on at least two devices with measured profiles, have {sorted(measured)}"
            + "".join(f"; {k}: {why}" for k, why in skipped.items()),
            "measure profiles with `clproj profile-device` for the devices in the results files",
        )
    devices = sorted(measured)
    app_names = sorted(set.intersection(*(set(r["apps"]) for r in measured.values())))
    if apps:
        app_names = [a for a in app_names if a in apps]
    out: list[AppEvaluation] = []
    rows: list[Any] = []
    if model is not None and hasattr(model, "fit"):
        rows = bench_training_rows(measured, profiles, mode, profiles_dir)
    for app in app_names:
        entries = {d: measured[d]["apps"][app] for d in devices}
        bad = [d for d, e in entries.items() if not e.get("verified") or not e.get("total_ns")]
        if bad:
            skipped[app] = f"not verified/measured on {', '.join(bad)}"
            continue
        size = measured[devices[0]]["size"]
        doc = load_cached(app, size, mode, profiles_dir)
        if doc is None:
            skipped[app] = f"no cached kernel profiles ({mode})"
            continue
        if rows:
            model.fit([r for r in rows if r.app != app])  # leave-one-app-out
        try:
            proj = {d: project_app(doc, profiles[d], model) for d in devices}
        except ClprojError as exc:
            skipped[app] = exc.cause
            continue
        actual = {d: entries[d]["total_ns"] * 1e-9 for d in devices}
        projected = {d: proj[d][0] for d in devices}
        energy = {d: app_energy(doc, profiles[d]) for d in devices} if model is None else {}
        out.append(
            AppEvaluation(
                app=app,
                actual_s=actual,
                projected_s=projected,
                bound={d: proj[d][1] for d in devices},
                penalty=metrics.selection_penalty(actual, projected),
                relative_error=metrics.relative_error(actual, projected),
                projected_j={d: e[0] for d, e in energy.items() if e[0] is not None},
                ops=next((e[1] for e in energy.values()), None),
                power_confidence={d: e[2] for d, e in energy.items() if e[0] is not None},
            )
        )
    return Evaluation(devices=devices, device_names=names, apps=out, skipped=skipped)
