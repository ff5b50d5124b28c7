"""Scores of a validation over judged kernels: ratio bands, MAPE, selection, device order.

``clproj validate`` reports, per truth device, how far projected kernel totals are from
measured ones, and over all devices whether the projection picks the fastest device and
orders device pairs as the measurement does. The per-kernel pieces are in
:mod:`runtime.evaluation.validate_match`; this module only aggregates them, so the same summary
serves the run's own projections and every ``--models`` model.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from clproj.runtime.evaluation import metrics
from clproj.runtime.evaluation.validate_match import KernelResult

# Ratio bands of the README: "within 25 %" is the symmetric band 0.8-1.25x (a factor of
# 1.25 either way), "within 2x" the band 0.5-2x.
BAND_25 = (0.8, 1.25)
BAND_2X = (0.5, 2.0)

# Device pairs that are hard to order (same architecture, close specs); judged when both
# truth files are present. Named by truth-file stem; every other pair is judged too.
HARD_PAIRS = (("h100", "h200"), ("xeon16", "epyc2"))


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
