"""Side-by-side evaluation of several models (``clproj evaluate --models a,b,c``).

Every model is scored by :func:`runtime.evaluation.evaluate.evaluate` on the same apps and devices:
the bound and MWP-CWP models fit nothing (their parameters are device measurements), the
learned model is trained leave-one-app-out, so every score is on apps held out from any
fitting. The learned model's prediction latency (one ``predict`` call: features + trees)
and total fitting time are reported too.
"""

from __future__ import annotations

import time
from typing import Any

from clproj.runtime.projection.models import get_model


def compare(
    names: list[str],
    results_paths: list[str] | None = None,
    mode: str = "single",
    apps: list[str] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Summary per model: selection accuracy, penalties, relative error, MAPE per device."""
    from clproj.runtime.evaluation.evaluate import evaluate

    out: dict[str, Any] = {"models": {}}
    for name in names:
        model = get_model(name, seed=seed) if name == "learned" else get_model(name)
        t0 = time.perf_counter()
        ev = evaluate(results_paths, mode=mode, apps=apps, model=model)
        entry = {"summary": ev.summary(), "wall_s": time.perf_counter() - t0}
        entry["apps"] = {
            a.app: {
                "projected_s": a.projected_s,
                "relative_error": a.relative_error,
                "penalty": a.penalty,
            }
            for a in ev.apps
        }
        lat = sorted(getattr(model, "predict_s", []))
        if lat:
            entry["predict_latency_s"] = {
                "median": lat[len(lat) // 2],
                "max": lat[-1],
                "calls": len(lat),
            }
        out["models"][name] = entry
        out["devices"] = ev.devices
        out["actual_s"] = {a.app: a.actual_s for a in ev.apps}
        out["skipped"] = ev.skipped
    return out


def rows(doc: dict[str, Any]) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Header and rows of the comparison table (one row per model)."""
    devs = doc["devices"]
    header = ["model", "apps", "best chosen", "mean penalty", "max penalty", "mean rel. err"]
    header += [f"MAPE {d}" for d in devs]
    out = []
    for name, e in doc["models"].items():
        s = e["summary"]
        out.append(
            (
                name,
                s["apps"],
                f"{s['best_chosen']}/{s['apps']} ({s['best_chosen_fraction']:.0%})",
                f"{s['mean_penalty']:.1%}",
                f"{s['max_penalty']:.1%}",
                f"{s['mean_relative_error']:.1%}",
                *(f"{s['per_device'][d]['mape']:.1%}" for d in devs),
            )
        )
    return header, out
