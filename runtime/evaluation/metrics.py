"""The paper's accuracy metrics, plus absolute-time error.

* Selection penalty: how much slower the device we picked is than the truly fastest one,
  ``(t_actual[picked] - t_actual[best]) / t_actual[best]`` (0 when we picked the best).
* Relative-performance error: actual and projected times over the same devices, each
  normalised to a unit vector, compared by Euclidean distance divided by sqrt(2), so it
  lies in [0, 1] and ignores a common scale factor (Panwar et al., Sec. V).
* MAPE: mean absolute percentage error of absolute times, per device.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def selection_penalty(actual: Mapping[str, float], projected: Mapping[str, float]) -> float:
    devices = [d for d in actual if d in projected]
    if not devices:
        raise ValueError("no device has both an actual and a projected time")
    picked = min(devices, key=lambda d: projected[d])
    best = min(devices, key=lambda d: actual[d])
    return (actual[picked] - actual[best]) / actual[best]


def relative_error(actual: Mapping[str, float], projected: Mapping[str, float]) -> float:
    devices = [d for d in actual if d in projected]
    a = [actual[d] for d in devices]
    p = [projected[d] for d in devices]
    na, np_ = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(x * x for x in p))
    if na == 0 or np_ == 0:
        raise ValueError("relative error needs non-zero times")
    return math.sqrt(sum((x / na - y / np_) ** 2 for x, y in zip(a, p, strict=True))) / math.sqrt(2)


def ape(actual: float, projected: float) -> float:
    """Absolute percentage error of one time, as a fraction."""
    return abs(projected - actual) / actual


def mape(pairs: Sequence[tuple[float, float]]) -> float:
    """Mean absolute percentage error over (actual, projected) pairs, as a fraction."""
    if not pairs:
        return float("nan")
    return sum(ape(a, p) for a, p in pairs) / len(pairs)
