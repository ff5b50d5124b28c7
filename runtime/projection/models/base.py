"""The model interface: kernel profile + device profile -> projected time with a breakdown.

A model is anything with a ``name`` and ``predict(profile, device, footprint_bytes)``;
models that learn from measurements also have ``fit(rows)``. The evaluation harness
(:func:`runtime.evaluation.evaluate.evaluate`) calls ``fit`` with the launch groups of every app but
the one it then predicts (leave-one-app-out), so a learned model is never scored on the
kernels it was trained on. :func:`training_rows` turns committed ground truth (bench
results + cached kernel profiles) into those rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class ModelPrediction:
    """Projected seconds of one launch, the dominant term's letter and the model's terms."""

    time_s: float
    breakdown: dict[str, Any] = field(default_factory=dict)
    bound: str = "?"  # C/G/L for the bound model, a case name for MWP-CWP, "-" if none


@dataclass(frozen=True)
class TrainingRow:
    """One measured launch group: the per-launch device time of a kernel profile."""

    app: str
    group: str  # launch group key, e.g. ``nbody_step[32768/256]``
    device_key: str  # the bench results' device key
    variants: tuple[tuple[float, dict[str, Any]], ...]  # (weight, kernel profile)
    time_s: float  # measured median seconds of one launch
    footprint_bytes: float | None = None  # the launch's buffer bytes (cache modelling)


@runtime_checkable
class Model(Protocol):
    name: str

    def predict(
        self, profile: dict[str, Any], device: Any, footprint_bytes: float | None = None
    ) -> ModelPrediction: ...


def _group_key(kernel: str, glob: list[int], local: list[int] | None) -> tuple[Any, ...]:
    return (kernel, tuple(glob), tuple(local or ()))


def training_rows(
    measured: dict[str, dict[str, Any]],
    apps: list[str],
    docs: dict[str, dict[str, Any]],
    device_keys: dict[str, str] | None = None,
) -> list[TrainingRow]:
    """Rows for every (app, launch group, device) with a verified measurement and a profile.

    ``measured``: device key -> bench results document; ``docs``: app -> cached kernel
    profiles document (:func:`runtime.evaluation.app_profiles.load_cached`). Groups are matched to
    the measured kernels by kernel name, global and local size; the target is the
    measured median time of one launch (``median_ns``). ``device_keys`` maps a results
    file's device key to the key of its device profile (what ``predict`` receives).
    """
    device_keys = device_keys or {}
    rows: list[TrainingRow] = []
    for app in apps:
        doc = docs.get(app)
        if doc is None:
            continue
        for dev, res in measured.items():
            entry = res["apps"].get(app)
            if not entry or not entry.get("verified"):
                continue
            times = {
                _group_key(k["kernel"], k["global"], k.get("local")): k["median_ns"] * 1e-9
                for k in entry.get("kernels", [])
                if k.get("median_ns")
            }
            for g in doc["groups"]:
                t = times.get(_group_key(g["kernel"], g["global"], g.get("local")))
                if t is None or not g["variants"]:
                    continue
                variants = tuple((float(v["weight"]), v["profile"]) for v in g["variants"])
                key = device_keys.get(dev, dev)
                fp = g.get("footprint_bytes")
                rows.append(TrainingRow(app, g["key"], key, variants, t, fp))
    return rows
