"""The text tables of ``clproj validate-published``, and their rows for the HTML report.

The rows are built here once (:func:`device_rows`, :func:`kernel_rows`, ...) so that the
terminal tables and :mod:`runtime.evaluation.published_html` show the same columns; the
per-device metric cells are ``clproj validate``'s (:func:`validate_tables.device_metrics`).
"""

from __future__ import annotations

from typing import Any

from clproj.console import fmt_time, print_table, stdout
from clproj.runtime.evaluation.published import PublishedValidation, per_device
from clproj.runtime.evaluation.validate_tables import device_metrics, pct, ratio_text

DEVICE_HEADER = ["label", "vendor", "profile", "found by", "status", "device", "size / config"]
METRIC_HEADER = [
    "label",
    "vendor",
    "kernels",
    "median proj/pub",
    "within 0.8-1.25x",
    "within 0.5-2x",
    "MAPE",
    "max off-factor",
]


def device_rows(val: PublishedValidation) -> list[list[Any]]:
    return [
        [
            d.label,
            d.vendor,
            d.profile or "-",
            d.matched_by or "-",
            d.status,
            d.device_name or "-",
            d.config,
        ]
        for d in val.devices
    ]


def metric_rows(val: PublishedValidation, app: str) -> list[list[Any]]:
    vendor = {d.label: d.vendor for d in val.devices}
    return [[d, vendor.get(d, ""), *device_metrics(m)] for d, m in per_device(val, app).items()]


def kernel_rows(val: PublishedValidation, app: str) -> list[list[Any]]:
    """One row per (device, kernel): published, projected, ratio, bound."""
    rows = []
    for label in val.judged:
        for k in val.kernels:
            if k.app != app or label not in k.measured_s:
                continue
            has = label in k.devices
            rows.append(
                [
                    label,
                    k.kernel.strip(),
                    fmt_time(k.measured_s[label]),
                    fmt_time(k.projected_s[label]) if has else "no projection",
                    ratio_text(k.ratio(label)) if has else "-",
                    k.bound.get(label, "") if has else "",
                ]
            )
    return rows


def summary_line(val: PublishedValidation, app: str) -> str:
    s = val.summary()[app]
    p = s["pooled"]
    return (
        f"{app}: {p['pairs']} (kernel, device) pairs: median projected/published "
        f"{ratio_text(p['median_ratio'])}, within 25% {p['within_25']}/{p['pairs']}, "
        f"MAPE {pct(p['mape'])}; fastest device picked for {s['best_chosen']}/{s['kernels']} "
        f"kernels (mean penalty {pct(s['mean_penalty'])}), mean relative error "
        f"{pct(s['mean_relative_error'])}"
    )


def crossover_rows(val: PublishedValidation) -> list[list[Any]]:
    rows = []
    for label, per in val.crossovers().items():
        for prec, c in per.items():

            def cell(level: int | None, fpb: float | None) -> str:
                return "none" if level is None else f"level {level} ({fpb:g} flops/byte)"

            rows.append(
                [
                    label,
                    prec,
                    cell(c["published"], c["published_flops_per_byte"]),
                    cell(c["projected"], c["projected_flops_per_byte"]),
                ]
            )
    return rows


def projected_only_rows(val: PublishedValidation) -> list[list[Any]]:
    return [
        [p["device"], p["config"], p["kernel"], fmt_time(p["projected_s"]), p["bound"]]
        for p in val.projected_only
    ]


def print_published(val: PublishedValidation) -> None:
    """Every table of the validation, on stdout."""
    print_table(DEVICE_HEADER, device_rows(val), title=f"{val.kind}: published results")
    for app in val.apps():
        print_table(
            ["label", "kernel", "published", "projected", "ratio", "bound"],
            kernel_rows(val, app),
            title=f"{app}: projected vs published, per device and kernel",
        )
        print_table(METRIC_HEADER, metric_rows(val, app), title=f"{app}: per device")
        stdout.print(summary_line(val, app), highlight=False)
    if val.curves:
        print_table(
            ["label", "precision", "published crossover", "projected crossover"],
            crossover_rows(val),
            title="crossover: first level above 1.1x the level-0 time",
        )
    if val.projected_only:
        print_table(
            ["device", "configuration", "kernel", "projected", "bound"],
            projected_only_rows(val),
            title="projected only (no published result for these devices)",
        )
    for run in val.runs:
        if not run.ok:
            stdout.print(f"run {run.tag} FAILED: {run.error}\n{run.output_tail}", highlight=False)
    for err in val.errors:
        stdout.print(f"not read: {err}", highlight=False)
