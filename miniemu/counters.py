"""Arithmetic on the plugin's statistics: flattened to numbered counters and rebuilt, the
few that summarise a profile, and the error between two of them."""

from __future__ import annotations

import copy
from typing import Any

from clproj.miniemu.profile import instructions_total

# counters that describe a group, not a count to be scaled or fitted
_NOT_SCALED = ("bytes_per_group", "private_bytes_per_work_item")


def flatten_stats(stats: dict[str, Any], prefix: tuple = ()) -> dict[tuple, float]:
    out: dict[tuple, float] = {}
    for k, v in stats.items():
        if k in _NOT_SCALED:
            continue
        if isinstance(v, dict):
            out.update(flatten_stats(v, (*prefix, k)))
        elif isinstance(v, (int, float)):
            out[(*prefix, k)] = float(v)
    return out


def rebuild_stats(template: dict[str, Any], values: dict[tuple, float], prefix: tuple = ()) -> dict:
    out: dict[str, Any] = {}
    for k, v in template.items():
        if isinstance(v, dict) and k not in _NOT_SCALED:
            out[k] = rebuild_stats(v, values, (*prefix, k))
        elif (*prefix, k) in values:
            out[k] = max(0, round(values[(*prefix, k)]))
        else:
            out[k] = copy.deepcopy(v)
    return out


def key_metrics(stats: dict[str, Any]) -> dict[str, float]:
    g = stats.get("global", {})
    tx = sum(c for d in g.get("transactions", {}).values() for w in d.values() for c in w.values())
    return {
        "instructions": instructions_total(stats),
        "global load bytes": g.get("load_bytes", 0),
        "global store bytes": g.get("store_bytes", 0),
        "transactions": tx,
        "local accesses": stats.get("local", {}).get("accesses", 0),
        "branches": stats.get("branches", {}).get("total", 0),
    }


def relative_error(pred: dict[str, Any], ref: dict[str, Any]) -> tuple[float, str]:
    """Largest relative difference of the key metrics (instructions, bytes, transactions)."""
    mp, mr = key_metrics(pred), key_metrics(ref)
    worst, what = 0.0, "instructions"
    for k in mr:
        hi = max(abs(mp[k]), abs(mr[k]))
        if hi > 0:
            d = abs(mp[k] - mr[k]) / hi
            if d > worst:
                worst, what = d, k
    return worst, what


def lower_confidence(conf: str, other: str) -> str:
    """The lower of two confidences: a profile is as trustworthy as its weakest step."""
    order = ["low", "medium", "high"]
    return order[min(order.index(conf), order.index(other))]
