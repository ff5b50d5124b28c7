"""A learned power model after Braun et al.: extremely randomised trees per device on
measured average power, beside the power fitted from microbenchmarks (power.py).

Why it exists: the product's power (runtime/projection/power.py) takes its parameters from
power microbenchmarks only, never from an app. Braun et al. ("A simple model for portable
and fast prediction of execution time and power consumption of GPU kernels") learn power
instead: device-independent features of the kernel (its instruction mix and data
movement per unit of time), one regressor per device trained on measured power of a
benchmark set. This module is that model, trained on our own apps' measured windows only,
so that ``python -m clproj.benchmarks.power_models`` can judge it leave-one-app-out on our
apps and on third-party suites it never saw, side by side with the fitted power.

Features (the same for training and prediction) of one launch on one device, from its
kernel profile and its bound-model projection on that device:

* each instruction class's dynamic count per projected second (``log1p``);
* bytes per projected second at each level the time model splits traffic into (useful
  global bytes, local memory, L1 lines, L2, DRAM, DRAM reads);
* work-items per second and the launch shape (log2 work-items and group size, share of the
  device's compute units busy, waves, wave efficiency) and log projected seconds.

Power = the regressor's prediction (watts, a tree ensemble never leaves the measured
range); energy = learned power x the bound model's projected time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from clproj.devices.profile import INSTRUCTION_CLASSES
from clproj.errors import ClprojError
from clproj.runtime.projection.models.learned import select_by_app_folds

# Small grid and few trees: the training sets are tens of windows (docs/models.md).
GRID = tuple({"max_features": f, "min_samples_leaf": m} for f in (0.5, 1.0) for m in (1, 3))
N_ESTIMATORS = 64
INNER_FOLDS = 4
LEVELS = ("local_bytes_moved", "l1_bytes", "l2_bytes", "dram_bytes", "dram_read_bytes")


def _rate(count: Any, seconds: float) -> float:
    return math.log1p(max(0.0, float(count or 0)) / seconds)


def power_features(profile: dict[str, Any], projection: Any, device: Any) -> list[float]:
    """Feature vector of one launch (``profile``) projected (``projection``) on ``device``."""
    t = max(float(projection.time_s), 1e-12)
    total, launch = profile["total"], profile["launch"]
    ins = total.get("instructions", {})
    g = total.get("global", {})
    d = projection.details
    occ = projection.occupancy
    items = max(1.0, float(total.get("work_items") or launch.get("work_items") or 1))
    cus = max(1, int(device.compute_units or occ.active_cus or 1))
    useful = float(g.get("load_bytes", 0) or 0) + float(g.get("store_bytes", 0) or 0)
    return [
        *(_rate(ins.get(c, 0), t) for c in INSTRUCTION_CLASSES),
        _rate(useful, t),
        *(_rate(d.get(k, 0.0), t) for k in LEVELS),
        _rate(items, t),
        math.log2(items),
        math.log2(max(1, int(launch.get("group_size", 1)))),
        min(1.0, float(occ.active_cus) / cus),
        math.log2(max(1.0, float(occ.waves))),
        float(occ.wave_efficiency),
        math.log(t),
    ]


@dataclass(frozen=True)
class PowerRow:
    """One measured window as training or test input: the launch shape's variants
    ``(weight, features)`` on the measured device and its measured average power."""

    app: str
    device_key: str
    variants: tuple[tuple[float, tuple[float, ...]], ...]
    power_w: float

    def features(self) -> list[float]:
        """Weight-averaged features of the shape's variants (as the time model does)."""
        return weighted(self.variants)


def weighted(variants: Sequence[tuple[float, Sequence[float]]]) -> list[float]:
    """The weight-averaged feature vector of ``(weight, features)`` pairs."""
    w = np.array([wt for wt, _ in variants], float)
    x = np.array([list(f) for _, f in variants], float)
    return list((w[:, None] * x).sum(0) / w.sum())


class LearnedPowerModel:
    """One ExtraTreesRegressor per device key on watts; hyper-parameters by grouped CV."""

    name = "learned"

    def __init__(self, seed: int = 0, n_estimators: int = N_ESTIMATORS) -> None:
        self.seed = seed
        self.n_estimators = n_estimators
        self.models: dict[str, Any] = {}
        self.chosen: dict[str, dict[str, Any]] = {}
        self.trained_apps: set[str] = set()

    def _regressor(self, params: dict[str, Any]) -> Any:
        from sklearn.ensemble import ExtraTreesRegressor

        return ExtraTreesRegressor(
            n_estimators=self.n_estimators, random_state=self.seed, n_jobs=1, **params
        )

    def _select(self, x: np.ndarray, y: np.ndarray, groups: np.ndarray) -> dict[str, Any]:
        """Inner CV over apps: the grid point with the lowest squared relative error."""
        return select_by_app_folds(
            self._regressor, GRID, INNER_FOLDS, x, y, groups, lambda p, a: ((p - a) / a) ** 2
        )

    def fit(self, rows: Sequence[PowerRow]) -> LearnedPowerModel:
        """Train one regressor per device on ``rows`` (replacing any earlier training)."""
        self.models, self.chosen = {}, {}
        self.trained_apps = {r.app for r in rows}
        by_dev: dict[str, list[PowerRow]] = {}
        for r in rows:
            by_dev.setdefault(r.device_key, []).append(r)
        for dev, rs in sorted(by_dev.items()):
            rs = sorted(rs, key=lambda r: (r.app, r.features()))  # order-independent
            x = np.array([r.features() for r in rs])
            y = np.array([r.power_w for r in rs])
            groups = np.array([r.app for r in rs])
            params = self._select(x, y, groups)
            self.models[dev] = self._regressor(params).fit(x, y)
            self.chosen[dev] = params | {"windows": len(rs), "apps": len(set(groups))}
        return self

    def predict_w(
        self, variants: Sequence[tuple[float, Sequence[float]]], device_key: str
    ) -> float:
        """Average power (W) of a launch shape from its variants' ``(weight, features)``."""
        model = self.models.get(device_key)
        if model is None:
            raise ClprojError(
                f"learned power model has no training windows for device {device_key}",
                "measure our apps' energy on that device (scripts/gpu/energy.sh) and train on it",
            )
        return float(model.predict(np.array([weighted(variants)]))[0])
