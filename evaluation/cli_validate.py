"""``clproj validate``: judge the projection model on a suite of third-party apps.

The command only parses arguments and prints; the matching and the metrics are in
:mod:`evaluation.validate` so that they can be tested without running an app.
"""

from __future__ import annotations

import argparse
import html
import math
import os
from typing import Any

from clproj.console import emit_json, print_table, stderr, track
from clproj.errors import ClprojError


def register_validate(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "validate",
        help="judge projections on a suite of unmodified apps against real-device truth",
        description="Build SUITE_DIR (its build.sh), run every app unmodified under "
        "`clproj run --mode project`, match the projected launches to the measured rows of "
        "the truth files by (kernel, global size, local size) and report per-kernel "
        "selection, relative error and per-device ratio metrics (docs/validation.md).",
    )
    p.add_argument("suite", metavar="SUITE_DIR", help="folder with build.sh (and src/)")
    p.add_argument(
        "--truth", required=True, metavar="DIR", help="folder of truth TSVs, one per device"
    )
    p.add_argument(
        "--devices",
        default="measured",
        help="profiles to project onto (default: measured); devices without a truth file "
        "are skipped",
    )
    p.add_argument("--apps", help="comma list of apps (default: every app with truth rows)")
    p.add_argument(
        "--build-dir",
        metavar="DIR",
        help="use (or build into) DIR; default: a folder in clproj's cache, rebuilt when "
        "the suite's sources change",
    )
    p.add_argument(
        "--timeout", type=float, default=1800.0, help="per-app time limit in seconds (1800)"
    )
    p.add_argument(
        "--models",
        metavar="NAMES",
        help="also judge these models side by side, e.g. bound,paper,roofline,mwp-cwp: each "
        "re-projects the run's kernel profiles onto the same devices (default: bound only; "
        "learned is not supported)",
    )
    p.add_argument("--report", metavar="DIR", help="write an HTML report with PNG plots into DIR")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_validate)


register = register_validate  # clproj/cli.py calls each command module's register()


def fmt_time(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"


def _pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.1%}"


def _ratio(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.3g}x"


def _methods(counts: dict[str, int]) -> str:
    return ", ".join(
        f"{m} x{n}" if n > 1 else m for m, n in sorted(counts.items(), key=lambda mn: -mn[1])
    )


def run_validate(args: argparse.Namespace) -> int:
    from evaluation.validate import check_model_names, validate

    apps = [a.strip() for a in args.apps.split(",") if a.strip()] if args.apps else None
    models = None
    if args.models is not None:  # checked before any app runs
        models = check_model_names([m.strip() for m in args.models.split(",") if m.strip()])
    if args.timeout <= 0:
        raise ClprojError("--timeout must be positive", "e.g. --timeout 1800")

    def on_app(run: Any) -> None:
        status = "ok" if run.ok else f"[red]FAILED[/]: {run.error}"
        stderr.print(f"{run.app}: {status} ({run.wall_s:.1f} s)", highlight=False)

    val = validate(
        os.path.abspath(args.suite),
        os.path.abspath(args.truth),
        devices=args.devices,
        apps=apps,
        build_dir=os.path.abspath(args.build_dir) if args.build_dir else None,
        timeout_s=args.timeout,
        progress=lambda items, desc: track(list(items), desc),
        on_app=on_app,
        models=models,
    )
    if args.report:
        path = write_report(val, args.report)
        stderr.print(f"report: {path}")
    if args.json:
        emit_json(val.to_dict())
    else:
        print_validation(val)
    if not val.kernels:
        raise ClprojError(
            "no kernel could be judged (every app failed or nothing matched the truth)",
            "see the apps' errors above; check --truth and --devices",
        )
    return 0


def _worst_rows(val: Any, with_confidence: bool) -> list[list[str]]:
    """The worst kernels, one row per (kernel, device): the table and the HTML report."""
    from evaluation.validate import worst_kernels

    return [
        [
            k.app,
            k.kernel,
            d,
            fmt_time(k.measured_s[d]),
            fmt_time(k.projected_s[d]),
            _ratio(k.ratio(d)),
            k.bound.get(d, ""),
            _methods(k.methods),
            *([_methods(k.confidence)] if with_confidence else []),
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
                    f"{_ratio(k.ratio(d))} {k.bound.get(d, '')}" if d in k.devices else "-"
                    for d in devs
                ],
                k.best_measured or "-",
                k.best_projected or "-",
                _pct(k.penalty),
                _pct(k.relative_error),
            )
            for k in val.kernels
        ],
        title="per kernel: projected / measured total time (bound letter of the dominant shape)",
    )
    for d in devs:
        print_table(
            ["app", "kernel", "measured", "projected", "ratio", "bound"],
            [
                (
                    k.app,
                    k.kernel,
                    fmt_time(k.measured_s[d]),
                    fmt_time(k.projected_s[d]),
                    _ratio(k.ratio(d)),
                    k.bound.get(d, ""),
                )
                for k in val.kernels
                if d in k.devices
            ],
            title=f"{d}: {val.device_names[d]}",
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
            (
                d,
                m["kernels"],
                _ratio(m["median_ratio"]),
                f"{m['within_25']}/{m['kernels']}",
                f"{m['within_2x']}/{m['kernels']}",
                _pct(m["mape"]),
                _ratio(m["max_off_factor"]),
                m["worst_kernel"] or "-",
            )
            for d, m in s["per_device"].items()
        ],
        title="per device",
    )
    print(
        f"best device chosen: {s['best_chosen']}/{s['kernels']} kernels "
        f"({_pct(s['best_chosen_share'])}); mean penalty {_pct(s['mean_penalty'])} "
        f"(max {_pct(s['max_penalty'])}); mean relative error {_pct(s['mean_relative_error'])} "
        f"(median {_pct(s['median_relative_error'])})"
    )
    print_table(
        ["device pair", "kernels", "order agrees", "share"],
        [
            (
                " vs ".join(p["devices"]) + (" (hard)" if p["hard"] else ""),
                p["kernels"],
                f"{p['agree']}/{p['kernels']}",
                _pct(p["share"]),
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
            "emulation",
            "confidence",
        ],
        _worst_rows(val, with_confidence=True),
        title="worst kernels (largest projected/measured off-factor, on their worst device)",
    )
    if val.models:
        print_models(val)
    for label, why in val.skipped_devices.items():
        print(f"not judged: {label}: {why}")
    for r in val.runs:
        if not r.ok and r.output_tail:
            print(
                f"{r.app} failed ({r.error}); last output:\n  "
                + r.output_tail.replace("\n", "\n  ")
            )
    print(f"validation took {val.wall_s:.1f} s")


def print_models(val: Any) -> None:
    """``--models``: one row per model over the same kernels and devices."""
    devs = val.devices
    rows = []
    for name, m in val.models.items():
        per = m["per_device"]
        rows.append(
            (
                name,
                f"{m['best_chosen']}/{m['kernels']}",
                _pct(m["mean_relative_error"]),
                *[_pct(per[d]["mape"]) if d in per else "-" for d in devs],
                *[_ratio(per[d]["median_ratio"]) if d in per else "-" for d in devs],
            )
        )
    print_table(
        [
            "model",
            "best chosen",
            "mean rel. err",
            *[f"{d} MAPE" for d in devs],
            *[f"{d} median proj/meas" for d in devs],
        ],
        rows,
        title="models side by side (bound: the run's projections; others: its kernel profiles "
        "re-projected, reused launches scaled from their anchor, no launch footprint)",
    )
    # The re-projected models share their inputs: one line says where they came from.
    src = next((m["signatures"] for n, m in val.models.items() if n != "bound"), None)
    if src:
        print(
            f"re-projected signatures: {src.get('emulated', 0)} with their own profile, "
            f"{src.get('scaled', 0)} scaled from an anchor, "
            f"{src.get('no profile', 0)} without a profile (left out)"
        )


def write_report(val: Any, directory: str) -> str:
    """``index.html`` with the summary tables and one log-log scatter PNG per device."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from evaluation.validate import BAND_2X, BAND_25

    os.makedirs(directory, exist_ok=True)
    s = val.summary()
    images = []
    for d in val.devices:
        ks = [k for k in val.kernels if d in k.devices]
        if not ks:
            continue
        xs = [k.measured_s[d] for k in ks]
        ys = [k.projected_s[d] for k in ks]
        fig, ax = plt.subplots(figsize=(5.5, 5))
        lo = min(*xs, *ys) / 3
        hi = max(*xs, *ys) * 3
        ax.fill_between(
            [lo, hi],
            [lo * BAND_2X[0], hi * BAND_2X[0]],
            [lo * BAND_2X[1], hi * BAND_2X[1]],
            color="#eee",
            label="0.5-2x",
        )
        ax.fill_between(
            [lo, hi],
            [lo * BAND_25[0], hi * BAND_25[0]],
            [lo * BAND_25[1], hi * BAND_25[1]],
            color="#cde",
            label="0.8-1.25x",
        )
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        colors = {"C": "#c44e52", "G": "#4c72b0", "L": "#55a868", "D": "#8172b2"}
        for k, x, y in zip(ks, xs, ys, strict=True):
            b = k.bound.get(d, "?")
            ax.scatter([x], [y], s=22, color=colors.get(b, "#777"))
            ax.annotate(
                f"{k.app}/{k.kernel}", (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points"
            )
        for b, c in colors.items():
            ax.scatter([], [], color=c, s=22, label=f"bound {b}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured kernel total (s)")
        ax.set_ylabel("projected kernel total (s)")
        m = s["per_device"][d]
        ax.set_title(
            f"{val.device_names[d]}\nmedian {_ratio(m['median_ratio'])}, MAPE {_pct(m['mape'])}",
            fontsize=9,
        )
        ax.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        name = f"scatter_{''.join(c if c.isalnum() else '_' for c in d)}.png"
        fig.savefig(os.path.join(directory, name), dpi=90)
        plt.close(fig)
        images.append(name)

    def table(header: list[str], rows: list[list[Any]]) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows
        )
        return f"<table><tr>{head}</tr>{body}</table>"

    dev_rows = [
        [
            d,
            val.device_names[d],
            m["kernels"],
            _ratio(m["median_ratio"]),
            f"{m['within_25']}/{m['kernels']}",
            f"{m['within_2x']}/{m['kernels']}",
            _pct(m["mape"]),
            _ratio(m["max_off_factor"]),
        ]
        for d, m in s["per_device"].items()
    ]
    kernel_rows = [
        [
            k.app,
            k.kernel,
            f"{k.launches_matched}/{k.launches_truth}",
            *[
                f"{_ratio(k.ratio(d))} {k.bound.get(d, '')}" if d in k.devices else "-"
                for d in val.devices
            ],
            k.best_measured or "-",
            k.best_projected or "-",
            _pct(k.penalty),
            _pct(k.relative_error),
        ]
        for k in val.kernels
    ]
    worst_rows = _worst_rows(val, with_confidence=False)
    app_rows = [
        [
            r.app,
            "ok" if r.ok else f"FAILED: {r.error}",
            f"{r.wall_s:.1f} s",
            "; ".join(val.notes.get(r.app, [])),
        ]
        for r in val.runs
    ]
    pair_rows = [
        [" vs ".join(p["devices"]), p["kernels"], f"{p['agree']}/{p['kernels']}"]
        for p in s["pairs"]
    ]
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>clproj validate</title>
<style>body{{font-family:sans-serif;margin:2em}} td,th{{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left}}</style></head>
<body><h1>clproj validation: {html.escape(val.suite)}</h1>
<p>Truth: {html.escape(val.truth_dir)}. Best device chosen for {s["best_chosen"]}/{s["kernels"]} kernels;
mean penalty {_pct(s["mean_penalty"])} (max {_pct(s["max_penalty"])}); mean relative error
{_pct(s["mean_relative_error"])}. Run took {val.wall_s:.0f} s.</p>
<h2>Per device</h2>{table(["label", "device", "kernels", "median proj/meas", "within 0.8-1.25x", "within 0.5-2x", "MAPE", "max off-factor"], dev_rows)}
<h2>Device order</h2>{table(["pair", "kernels", "order agrees"], pair_rows)}
<h2>Per kernel</h2>{table(["app", "kernel", "launches judged", *[f"{d} ratio" for d in val.devices], "best", "picked", "penalty", "rel. err"], kernel_rows)}
<h2>Worst kernels</h2>{table(["app", "kernel", "device", "measured", "projected", "ratio", "bound", "emulation"], worst_rows)}
<h2>Projected vs measured</h2>{"".join(f'<img src="{n}">' for n in images)}
<h2>Apps</h2>{table(["app", "status", "run", "notes"], app_rows)}
<p>Not judged: {html.escape(str(val.skipped_devices))}</p></body></html>"""
    path = os.path.join(directory, "index.html")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path
