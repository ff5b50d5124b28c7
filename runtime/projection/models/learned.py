"""A learned portable model after Braun et al.: extremely randomised trees per device.

Features are hardware-independent and come from the kernel profile alone (instruction
counts per class, bytes and accesses per memory space, coalescing and bank-conflict
ratios, divergence, barriers, atomics, launch configuration, footprint); the device enters
only through the choice of model: one regressor per device key, trained on that device's
measured launch-group times. The target is ``log(seconds per launch)``: times span six
orders of magnitude and errors are relative.

Hyper-parameters are chosen by an inner cross-validation grouped by app (so the inner
validation never shares an app with its training folds either); the outer loop is the
evaluation harness's leave-one-app-out (:func:`runtime.evaluation.evaluate.evaluate` calls
:meth:`LearnedModel.fit` without the app it then predicts). ``docs/models.md``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from clproj.devices.profile import INSTRUCTION_CLASSES
from clproj.errors import ClprojError
from clproj.runtime.projection.models.base import ModelPrediction, TrainingRow

CLASSES = INSTRUCTION_CLASSES
# Small grid: the training sets are tens of launch groups (docs/models.md).
GRID = tuple({"max_features": f, "min_samples_leaf": m} for f in (0.5, 1.0) for m in (1, 3))
N_ESTIMATORS = 64
INNER_FOLDS = 4


def _l(x: Any) -> float:
    return math.log1p(max(0.0, float(x or 0)))


def features(profile: dict[str, Any], footprint_bytes: float | None = None) -> list[float]:
    """Hardware-independent feature vector of one launch (log-scaled counts and ratios)."""
    t, launch = profile["total"], profile["launch"]
    ins = t.get("instructions", {})
    g, loc, br = t.get("global", {}), t.get("local", {}), t.get("branches", {})
    items = max(1.0, float(t.get("work_items") or launch.get("work_items") or 1))
    useful = float(g.get("load_bytes", 0) + g.get("store_bytes", 0))
    tx = g.get("transactions", {})
    tx32 = sum(float(tx.get(d, {}).get("32", {}).get("32", 0) or 0) for d in tx) * 32
    tx128 = sum(float(tx.get(d, {}).get("32", {}).get("128", 0) or 0) for d in tx) * 128
    bank = loc.get("bank", {}).get("32", {})
    conflict = bank["wavefronts"] / bank["requests"] if bank.get("requests") else 1.0
    wl = float(br.get("warp_level", {}).get("32", 0) or 0)
    div = float(br.get("divergent", {}).get("32", 0) or 0) / wl if wl else 0.0
    compute_ops = sum(float(ins.get(c, 0) or 0) for c in CLASSES if not c.startswith("memory"))
    mem_bytes = useful + float(loc.get("load_bytes", 0) + loc.get("store_bytes", 0))
    return [
        *(_l(ins.get(c, 0)) for c in CLASSES),
        _l(g.get("load_bytes")),
        _l(g.get("store_bytes")),
        _l(g.get("load_accesses")),
        _l(g.get("store_accesses")),
        _l(g.get("atomic_accesses")),
        _l(tx32),
        _l(tx128),
        tx32 / useful if useful else 0.0,  # sector coalescing: bytes moved per useful byte
        tx128 / useful if useful else 0.0,
        _l(loc.get("load_bytes")),
        _l(loc.get("store_bytes")),
        _l(loc.get("accesses")),
        conflict,
        _l(br.get("total")),
        div,
        _l(t.get("barriers")),
        _l(t.get("atomics", {}).get("global")),
        _l(t.get("atomics", {}).get("local")),
        math.log2(items),
        math.log2(max(1, int(launch.get("group_size", 1)))),
        math.log2(max(1, int(launch.get("num_groups", 1)))),
        float(launch.get("work_dim", 1)),
        _l(t.get("private_bytes_per_work_item")),
        _l(t.get("local", {}).get("bytes_per_group")),
        _l(footprint_bytes),
        _l(compute_ops / items),  # arithmetic work per work-item
        _l(mem_bytes / items),
        math.log1p(compute_ops / mem_bytes) if mem_bytes else 0.0,  # arithmetic intensity
    ]


def row_features(row: TrainingRow, footprint_bytes: float | None = None) -> list[float]:
    """Features of a launch group: weight-averaged over its variants (one launch each)."""
    w = np.array([wt for wt, _ in row.variants], float)
    x = np.array([features(p, footprint_bytes) for _, p in row.variants])
    return list((w[:, None] * x).sum(0) / w.sum())


def select_by_app_folds(
    make: Any,
    grid: Sequence[dict[str, Any]],
    folds: int,
    x: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray,
    error: Any,
) -> dict[str, Any]:
    """The point of ``grid`` whose regressor (``make(params)``), trained without each inner
    fold's apps (``groups``), sums the least ``error(predicted, actual)`` over the apps it
    did not see; the first point with fewer than 3 apps or a single point. One piece for
    the learned time and power models, which differ only in their error."""
    from sklearn.model_selection import GroupKFold

    n_groups = len(set(groups))
    if n_groups < 3 or len(grid) == 1:
        return dict(grid[0])
    splits = list(GroupKFold(n_splits=min(folds, n_groups)).split(x, y, groups))
    best, best_err = grid[0], math.inf
    for params in grid:
        err = 0.0
        for tr, va in splits:
            m = make(params).fit(x[tr], y[tr])
            err += float(error(m.predict(x[va]), y[va]).sum())
        if err < best_err:
            best, best_err = params, err
    return dict(best)


class LearnedModel:
    """One ExtraTreesRegressor per device key on log time; hyper-parameters by grouped CV."""

    name = "learned"

    def __init__(
        self,
        seed: int = 0,
        n_estimators: int = N_ESTIMATORS,
        inner_folds: int = INNER_FOLDS,
        grid: tuple[dict[str, Any], ...] | None = None,
    ) -> None:
        self.seed = seed
        self.n_estimators = n_estimators
        self.inner_folds = inner_folds
        self.grid = tuple(grid) if grid is not None else tuple(GRID)
        self.models: dict[str, Any] = {}
        self.chosen: dict[str, dict[str, Any]] = {}
        self.trained_apps: set[str] = set()
        self.predict_s: list[float] = []  # wall seconds of each predict call (latency)

    def _regressor(self, params: dict[str, Any]) -> Any:
        from sklearn.ensemble import ExtraTreesRegressor

        return ExtraTreesRegressor(
            n_estimators=self.n_estimators, random_state=self.seed, n_jobs=1, **params
        )

    def _select(self, x: np.ndarray, y: np.ndarray, groups: np.ndarray) -> dict[str, Any]:
        """Inner CV over apps: the grid point with the lowest mean squared log error."""
        return select_by_app_folds(
            self._regressor, self.grid, self.inner_folds, x, y, groups, lambda p, a: (p - a) ** 2
        )

    def fit(self, rows: list[TrainingRow]) -> LearnedModel:
        """Train one model per device on ``rows`` (replacing any earlier training)."""
        self.models, self.chosen = {}, {}
        self.trained_apps = {r.app for r in rows}
        by_dev: dict[str, list[TrainingRow]] = {}
        for r in rows:
            by_dev.setdefault(r.device_key, []).append(r)
        for dev, rs in sorted(by_dev.items()):
            rs = sorted(rs, key=lambda r: (r.app, r.group))  # order-independent results
            x = np.array([row_features(r, r.footprint_bytes) for r in rs])
            y = np.log(np.array([r.time_s for r in rs]))
            groups = np.array([r.app for r in rs])
            params = self._select(x, y, groups)
            self.models[dev] = self._regressor(params).fit(x, y)
            self.chosen[dev] = params | {"rows": len(rs), "apps": len(set(groups))}
        return self

    def _trained(self, device: Any) -> Any:
        model = self.models.get(device.key)
        if model is None:
            raise ClprojError(
                f"learned model has no training data for device {device.key}",
                "fit it on bench results of that device (clproj evaluate --models learned)",
            )
        return model

    def _prediction(self, log_t: float, device: Any) -> ModelPrediction:
        return ModelPrediction(
            time_s=math.exp(log_t),
            bound="-",
            breakdown={"log_time": log_t, "params": self.chosen.get(device.key, {})},
        )

    def predict(
        self, profile: dict[str, Any], device: Any, footprint_bytes: float | None = None
    ) -> ModelPrediction:
        model = self._trained(device)
        t0 = time.perf_counter()
        x = np.array([features(profile, footprint_bytes)])
        log_t = float(model.predict(x)[0])
        self.predict_s.append(time.perf_counter() - t0)
        return self._prediction(log_t, device)

    def predict_many(
        self,
        profiles: list[dict[str, Any]],
        device: Any,
        footprints: list[float | None] | None = None,
    ) -> list[ModelPrediction]:
        """:meth:`predict` of many launches on one device in one pass over the trees
        (the same numbers; a validation re-projects thousands of launches)."""
        model = self._trained(device)
        if not profiles:
            return []
        fps = footprints if footprints is not None else [None] * len(profiles)
        x = np.array([features(p, fp) for p, fp in zip(profiles, fps, strict=True)])
        return [self._prediction(float(v), device) for v in model.predict(x)]
