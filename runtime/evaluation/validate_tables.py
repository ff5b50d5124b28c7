"""The human-readable tables of ``clproj validate`` and the formatting they share.

The command prints a :class:`runtime.evaluation.validate.Validation` as tables (apps, per kernel,
per device, device order, worst kernels, ``--models`` side by side); the HTML report
(:mod:`runtime.evaluation.validate_html`) reuses the formatters and the worst-kernel rows so that
both show the same numbers the same way.
"""

from __future__ import annotations

import math
from typing import Any

from clproj.console import fmt_time, print_table
from clproj.runtime.evaluation.validate_scores import worst_kernels


def pct(x: float | None) -> str:
    """A share as a percentage; ``-`` for none or not finite."""
    return "-" if x is None or not math.isfinite(x) else f"{x:.1%}"


def ratio_text(x: float | None) -> str:
    """A ratio as ``1.23x``; ``-`` for none or not finite."""
    return "-" if x is None or not math.isfinite(x) else f"{x:.3g}x"


def methods_text(counts: dict[str, int]) -> str:
    """Emulation methods (or confidences) with their counts, most common first."""
    return ", ".join(
        f"{m} x{n}" if n > 1 else m for m, n in sorted(counts.items(), key=lambda mn: -mn[1])
    )


def device_metrics(m: dict[str, Any]) -> list[Any]:
    """One device's metrics as table cells (kernels, median ratio, within 25% and 2x, MAPE,
    max off-factor): the same columns in the text table and the HTML report."""
    return [
        m["kernels"],
        ratio_text(m["median_ratio"]),
        f"{m['within_25']}/{m['kernels']}",
        f"{m['within_2x']}/{m['kernels']}",
        pct(m["mape"]),
        ratio_text(m["max_off_factor"]),
    ]


def kernel_device_cells(k: Any, d: str) -> list[str]:
    """One kernel on one device: measured, projected, their ratio, the projected bound,
    and the projected energy (J) and average power (W) beside the time (``-``: the
    device has no power projection)."""
    j, w = k.projected_j.get(d), k.power_w(d)
    return [
        fmt_time(k.measured_s[d]),
        fmt_time(k.projected_s[d]),
        ratio_text(k.ratio(d)),
        k.bound.get(d, ""),
        "-" if j is None else f"{j:.3g} J",
        "-" if w is None else f"{w:.3g} W" + (" (low)" if d in k.power_low else ""),
    ]


ENERGY_HEADERS = ["proj. energy", "proj. power"]


def worst_rows(val: Any, with_confidence: bool) -> list[list[str]]:
    """The worst kernels, one row per (kernel, device): the table and the HTML report."""
    return [
        [
            k.app,
            k.kernel,
            d,
            *kernel_device_cells(k, d),
            methods_text(k.methods),
            *([methods_text(k.confidence)] if with_confidence else []),
        ]
        for k, d in worst_kernels(val.kernels)
    ]


def print_validation(val: Any) -> None:
    """Every table of the human-readable output, in reading order."""

    devs = val.devices
    print_table(
        ["app", "status", "kernels", "run s", "notes"],
        [
            (
                r.app,
                "ok" if r.ok else f"FAILED: {r.error}",
                sum(1 for k in val.kernels if k.app == r.app),
                round(r.wall_s, 1),
                "; ".join(val.notes.get(r.app, [])),
            )
            for r in val.runs
        ],
        title="apps",
    )
    print(f"suite {val.suite}; truth {val.truth_dir}; build {val.build_dir} ({val.build})")
    print_table(
        [
            "app",
            "kernel",
            "launches",
            *[f"{d} ratio" for d in devs],
            "best",
            "picked",
            "penalty",
            "rel. err",
        ],
        [
            (
                k.app,
                k.kernel,
                k.launches_matched
                if k.launches_matched == k.launches_truth
                else f"{k.launches_matched}/{k.launches_truth}",
                *[
                    f"{ratio_text(k.ratio(d))} {k.bound.get(d, '')}" if d in k.devices else "-"
                    for d in devs
                ],
                k.best_measured or "-",
                k.best_projected or "-",
                pct(k.penalty),
                pct(k.relative_error),
            )
            for k in val.kernels
        ],
        title="per kernel: projected / measured total time (bound letter of the dominant shape)",
    )
    for d in devs:
        print_table(
            ["app", "kernel", "measured", "projected", "ratio", "bound", *ENERGY_HEADERS],
            [(k.app, k.kernel, *kernel_device_cells(k, d)) for k in val.kernels if d in k.devices],
            title=f"{d}: {val.device_names[d]}{judged_on(val, d)}",
        )
    s = val.summary()
    print_table(
        [
            "device",
            "kernels",
            "median proj/meas",
            "within 0.8-1.25x",
            "within 0.5-2x",
            "MAPE",
            "max off-factor",
            "worst kernel",
        ],
        [
            (device_cell(val, d), *device_metrics(m), m["worst_kernel"] or "-")
            for d, m in s["per_device"].items()
        ],
        title="per device",
    )
    print(
        f"best device chosen: {s['best_chosen']}/{s['kernels']} kernels "
        f"({pct(s['best_chosen_share'])}); mean penalty {pct(s['mean_penalty'])} "
        f"(max {pct(s['max_penalty'])}); mean relative error {pct(s['mean_relative_error'])} "
        f"(median {pct(s['median_relative_error'])})"
    )
    print_table(
        ["device pair", "kernels", "order agrees", "share"],
        [
            (
                " vs ".join(p["devices"]) + (" (hard)" if p["hard"] else ""),
                p["kernels"],
                f"{p['agree']}/{p['kernels']}",
                pct(p["share"]),
            )
            for p in s["pairs"]
        ],
        title="device order agreement (projected faster = measured faster)",
    )
    print_table(
        [
            "app",
            "kernel",
            "device",
            "measured",
            "projected",
            "ratio",
            "bound",
            *ENERGY_HEADERS,
            "emulation",
            "confidence",
        ],
        worst_rows(val, with_confidence=True),
        title="worst kernels (largest projected/measured off-factor, on their worst device)",
    )
    if val.models:
        print_models(val)
    for label, how in val.stand_ins.items():
        print(
            f"judged on a stand-in: {label}: no chosen profile is named "
            f"{val.device_names[label]!r}; projected on the {how} {val.device_profiles[label]}"
        )
    for label, why in val.skipped_devices.items():
        print(f"not judged: {label}: {why}")
    for r in val.runs:
        if not r.ok and r.output_tail:
            print(
                f"{r.app} failed ({r.error}); last output:\n  "
                + r.output_tail.replace("\n", "\n  ")
            )
    print(f"validation took {val.wall_s:.1f} s")


def device_cell(val: Any, label: str) -> str:
    """A device's label, with ``(spec sheet)`` where a stand-in profile was judged."""
    how = val.stand_ins.get(label)
    return f"{label} ({how})" if how else label


def judged_on(val: Any, label: str) -> str:
    """`` (on the spec sheet KEY)`` after a device judged on a stand-in profile."""
    how = val.stand_ins.get(label)
    return f" (on the {how} {val.device_profiles[label]})" if how else ""


def model_rows(val: Any) -> tuple[list[str], list[list[str]], list[str]]:
    """``--models`` side by side: header, one row per model over the same kernels and
    devices (per device one cell with the issue's four per-device figures: median ratio,
    kernels within 25%, MAPE, worst off-factor), and lines saying what each trained model
    was trained on and what it could not predict for want of training data. Shared by the
    text tables and the HTML report."""
    devs = val.devices

    def cell(per: dict[str, Any], d: str) -> str:
        if d not in per:
            return "-"
        m = per[d]
        within = f"{m['within_25']}/{m['kernels']}" if "within_25" in m else "?"
        worst = ratio_text(m["max_off_factor"]) if "max_off_factor" in m else "?"
        return f"{ratio_text(m['median_ratio'])} · {within} · {pct(m['mape'])} · {worst}"

    header = [
        "model",
        "best chosen",
        "mean rel. err",
        *[f"{d}: median · in 25% · MAPE · worst" for d in devs],
    ]
    rows = [
        [
            name,
            f"{m['best_chosen']}/{m['kernels']}",
            pct(m["mean_relative_error"]),
            *[cell(m["per_device"], d) for d in devs],
        ]
        for name, m in val.models.items()
    ]
    trained = [
        f"{name}: trained on {m['trained_on']['apps']} of our own apps' measured launch groups "
        f"({', '.join(f'{k} {n}' for k, n in m['trained_on']['rows'].items())} rows); "
        "none of this suite's code"
        for name, m in val.models.items()
        if m.get("trained_on")
    ]
    trained += [
        f"{name}: {n} prediction(s) left out, {why}"
        for name, m in val.models.items()
        for why, n in sorted((m.get("signatures") or {}).items())
        if why.startswith("no training data")
    ]
    return header, rows, trained


def print_models(val: Any) -> None:
    """``--models``: the side-by-side table (:func:`model_rows`)."""
    header, rows, trained = model_rows(val)
    print_table(
        header,
        rows,
        title="models side by side (bound: the run's projections; others: its kernel profiles "
        "re-projected, reused launches scaled from their anchor)",
    )
    for line in trained:
        print(line)
    # The re-projected models share their inputs: one line says where they came from.
    src = next((m["signatures"] for n, m in val.models.items() if n != "bound"), None)
    if src:
        print(
            f"re-projected signatures: {src.get('emulated', 0)} with their own profile, "
            f"{src.get('scaled', 0)} scaled from an anchor, "
            f"{src.get('no profile', 0)} without a profile (left out)"
        )
