"""Judge the projection model on third-party apps with real-device ground truth.

``clproj validate SUITE --truth DIR`` (docs/validation.md) builds a suite of unmodified
OpenCL apps, runs each one under ``clproj run --mode project`` and compares the projected
per-kernel device times with times measured on real devices (``truth/<device>.tsv``). The
apps are code nobody on this project wrote or tuned for, so the comparison shows where the
model is wrong by principle rather than where it was fitted.

This module is the whole validation: it ties the parts together and holds its result
(:class:`Validation`, also read back from ``--json``). The parts: truth files and shapes
(:mod:`runtime.evaluation.validate_truth`), building and running the suite
(:mod:`runtime.evaluation.validate_suite`), matching projections to truth rows
(:mod:`runtime.evaluation.validate_match`), the scores (:mod:`runtime.evaluation.validate_scores`) and
``--models`` (:mod:`runtime.evaluation.validate_models`). The command line and its output are in
runtime/evaluation/cli_validate.py, runtime/evaluation/validate_tables.py and runtime/evaluation/validate_html.py.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from clproj.errors import ClprojError
from clproj.runtime.evaluation.validate_devices import Assignment, assign, run_devices
from clproj.runtime.evaluation.validate_match import (
    KernelResult,
    judge_app,
    profile_id,
    profiles_named,
)
from clproj.runtime.evaluation.validate_models import (
    check_model_names,
    fit_on_our_apps,
    launch_profiles,
    model_shapes,
    model_summary,
)
from clproj.runtime.evaluation.validate_scores import summarize, worst_kernels
from clproj.runtime.evaluation.validate_suite import AppRun, app_dirs, ensure_built, run_app
from clproj.runtime.evaluation.validate_truth import TruthDevice, load_truth

FORMAT = "clproj.validation"
VERSION = 1


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
    # judged label -> key of the profile it was judged on
    device_profiles: dict[str, str] = field(default_factory=dict)
    # judged label -> why its profile was added beside --devices (validate_devices.SPEC or
    # MEASURED): a stand-in, the tables say so
    stand_ins: dict[str, str] = field(default_factory=dict)

    def profile_named(self, name: str) -> str:
        """The id of the profile the runs projected the device ``name`` on (the projections'
        :func:`~runtime.evaluation.validate_match.profile_id`): a judged truth device's,
        else the first the runs projected onto under that name, else ``name`` itself."""
        for label in self.devices:
            if self.device_names[label] == name and label in self.device_profiles:
                return self.device_profiles[label]
        for r in self.runs:
            found = profiles_named((r.doc or {}).get("projections") or [], name)
            if found:
                return found[0]
        return name

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
            "devices": [
                {
                    "label": d,
                    "name": self.device_names[d],
                    "profile": self.device_profiles.get(d),
                    "stand_in": self.stand_ins.get(d),
                }
                for d in self.devices
            ],
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
            "summary": finite(self.summary()),
            "worst": [
                {"app": k.app, "kernel": k.kernel, "device": d, "ratio": k.ratio(d)}
                for k, d in worst_kernels(self.kernels)
            ],
            "wall_s": self.wall_s,
            **({"models": finite(self.models)} if self.models else {}),
        }


def finite(obj: Any) -> Any:
    """NaN and infinity become None: JSON has no such numbers."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [finite(v) for v in obj]
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
    from clproj.devices.profile import known_profiles
    from clproj.runtime.projection import device_set

    # Every truth device is judged on a profile where one can stand in for it: the apps
    # run with the stand-ins beside --devices (runtime/evaluation/validate_devices.py).
    assigned, unassigned = assign(truth, device_set.resolve(devices), known_profiles())
    devices_spec, devices = devices, run_devices(devices, assigned)
    truth = [
        replace(d, profile=assigned[d.label].profile) if d.label in assigned else d for d in truth
    ]
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
    chosen_models: dict[str, Any] = {}
    trained: dict[str, dict[str, Any]] = {}
    profiles: list[Any] = []
    if names:
        from clproj.runtime.projection.models import get_model

        chosen_models = {n: None if n == "bound" else get_model(n) for n in names}
        # Learned models train on our own apps before any app runs (a missing training
        # set is an error worth knowing before minutes of runs).
        trained = {n: fit_on_our_apps(m) for n, m in chosen_models.items() if hasattr(m, "fit")}
        if any(m is not None for m in chosen_models.values()):
            profiles = device_set.resolve(devices)
    runs: list[AppRun] = []
    iterator: Iterable[str] = (
        progress(chosen, "running apps (project mode)") if progress else chosen
    )
    for app in iterator:
        run = run_app(where, app, devices, timeout_s)
        runs.append(run)
        if on_app:
            on_app(run)
    val = judge_runs(
        runs,
        truth,
        suite,
        truth_dir,
        where,
        how,
        devices_spec,
        time.perf_counter() - start,
        models=chosen_models,
        device_profiles=profiles,
        assigned=assigned,
        unassigned=unassigned,
    )
    for name, what in trained.items():
        val.models[name]["trained_on"] = what
    return val


def judge_runs(  # noqa: C901
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
    assigned: Mapping[str, Assignment] | None = None,
    unassigned: Mapping[str, str] | None = None,
) -> Validation:
    """Judge finished runs: which truth devices were projected onto, then every kernel.

    A truth device is judged when some run projected onto the profile it was assigned
    (``assigned``, :func:`runtime.evaluation.validate_devices.assign`; ``unassigned``
    says why the others have none), or, unassigned, onto a profile of its name;
    profiles without a truth file (pocl-basic) are listed as skipped, not judged.
    ``models``: name -> model (``runtime.projection.models``) to re-project every signature's kernel
    profile with onto ``device_profiles`` (:func:`model_shapes`), or None for the run's
    own projections (the bound model); each gets a :func:`model_summary`.
    """
    assigned = assigned or {}
    projected: dict[str, str] = {}  # profile key -> name
    for r in runs:
        for doc in (r.doc or {}).get("projections") or []:
            for p in doc.get("projections") or []:
                projected.setdefault(profile_id(p), p["name"])
    first_of: dict[str, str] = {}  # name -> the first profile key of that name projected onto
    for key, name in projected.items():
        first_of.setdefault(name, key)
    truth = [
        d if d.profile or d.name not in first_of else replace(d, profile=first_of[d.name])
        for d in truth
    ]
    judged = [d for d in truth if d.profile in projected]
    skipped = {
        d.label: (unassigned or {}).get(d.label)
        or f"no profile {d.profile or d.name!r} was projected onto"
        for d in truth
        if d not in judged
    }
    on = {d.profile for d in judged}
    for key, name in projected.items():
        if key not in on:
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
    reprojects = any(m is not None for m in (models or {}).values())
    profiled = [
        launch_profiles(r.doc.get("projections") or [])
        if reprojects and r.ok and r.doc is not None
        else None
        for r in runs
    ]
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
        for r, launches in zip(runs, profiled, strict=True):
            if launches is None or r.doc is None:
                continue
            shapes, how = model_shapes(launches, model, device_profiles)
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
        device_profiles={d.label: d.profile for d in judged},
        stand_ins={
            d.label: assigned[d.label].source
            for d in judged
            if d.label in assigned and assigned[d.label].stand_in
        },
    )


def load_validation(doc: Mapping[str, Any]) -> Validation:
    """A :class:`Validation` back from its ``to_dict`` JSON (to re-print a saved run's tables)."""
    if doc.get("format") != FORMAT:
        raise ClprojError("not a clproj validation document", "pass the output of --json")
    fields = KernelResult.__dataclass_fields__
    kernels = [
        KernelResult(
            **{
                k: v
                for k, v in kd.items()
                if k in fields and k not in ("methods", "confidence", "power_low")
            },
            methods=kd.get("emulation_methods") or {},
            confidence=kd.get("emulation_confidence") or {},
            power_low={d for d, c in (kd.get("power_confidence") or {}).items() if c == "low"},
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
        device_profiles={d["label"]: d["profile"] for d in doc["devices"] if d.get("profile")},
        stand_ins={d["label"]: d["stand_in"] for d in doc["devices"] if d.get("stand_in")},
    )
