"""``clproj evaluate``: projections of our benchmark apps against their measured device times
(the paper's metrics, per app and per device pair; ``--models`` side by side)."""

from __future__ import annotations

import argparse
import os

from clproj.console import emit_json, fmt_time, print_table, stderr
from clproj.miniemu.backend import GROUP_MODES


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "evaluate",
        help="compare projections with measured benchmark times (paper's metrics, HTML report)",
        description="Project every benchmark app onto each device that has measured results and a "
        "measured profile; print selection accuracy, penalty, relative error and MAPE.",
    )
    p.add_argument(
        "--results",
        nargs="*",
        help="bench results files (default: benchmarks/results/bench-*-paper.json)",
    )
    p.add_argument("--apps", help="comma list of apps (default: all measured)")
    p.add_argument(
        "--mode",
        default="single",
        choices=list(GROUP_MODES),
        help="emulation mode of the profiles",
    )
    p.add_argument(
        "--emulate", action="store_true", help="(re)compute the apps' kernel profiles first"
    )
    p.add_argument("--report", metavar="DIR", help="write an HTML report with PNG plots into DIR")
    p.add_argument(
        "--models",
        help="compare models side by side, e.g. bound,mwp-cwp,learned (docs/models.md); "
        "the learned model is scored leave-one-app-out; with --energy, learned adds the "
        "learned power model beside the fitted one (docs/energy.md)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed of the learned model")
    p.add_argument(
        "--energy",
        nargs="+",
        metavar="RESULTS",
        help="judge projected power and energy per launch against these measured windows "
        "(clproj.energy-results files, e.g. benchmarks/results/energy/*/energy-apps-*.json; "
        "docs/energy.md) instead of times",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_evaluate)


def _run_models(args: argparse.Namespace, apps: list[str] | None) -> int:
    """``evaluate --models``: one row per model (runtime/evaluation/compare.py)."""
    from clproj.runtime.evaluation.compare import compare, rows

    names = [m.strip() for m in args.models.split(",") if m.strip()]
    with stderr.status(f"evaluating {', '.join(names)} (learned: leave-one-app-out)..."):
        doc = compare(names, args.results, args.mode, apps, seed=args.seed)
    if args.json:
        emit_json(doc)
        return 0
    header, body = rows(doc)
    print_table(header, body, title="models on held-out apps")
    for name, e in doc["models"].items():
        lat = e.get("predict_latency_s")
        if lat:
            print(
                f"{name}: prediction latency median {lat['median'] * 1e3:.2f} ms "
                f"(max {lat['max'] * 1e3:.2f} ms, {lat['calls']} calls); "
                f"evaluation incl. fitting {e['wall_s']:.1f} s"
            )
    for app, why in doc.get("skipped", {}).items():
        print(f"skipped {app}: {why}")
    return 0


def _run_energy(args: argparse.Namespace, apps: list[str] | None) -> int:
    """``evaluate --energy``: our apps' measured windows against their projections on the
    measured device's committed profile (runtime/evaluation/energy_judge.py); with
    ``--models`` naming ``learned``, the learned power model leave-one-app-out beside the
    fitted power (runtime/evaluation/energy_models.py)."""
    from clproj.devices.energy import read_results
    from clproj.runtime.evaluation import energy_judge

    def keep(w: energy_judge.Window) -> bool:
        return energy_judge.ours(w) and (apps is None or w.app in apps)

    docs = [read_results(path) for path in args.energy]
    names = [m.strip() for m in (args.models or "").split(",") if m.strip()]
    if "learned" in names:
        from clproj.runtime.evaluation.energy_models import print_side_by_side, side_by_side

        with stderr.status("learned power, leave-one-app-out..."):
            both = side_by_side(docs, seed=args.seed, which=keep)
        if args.json:
            emit_json(both)
            return 0
        print_side_by_side(both)
        return 0
    judged = []
    for doc in docs:
        device = energy_judge.measured_profile(doc)
        judged.append(
            energy_judge.judge(doc, energy_judge.app_projector(device, mode=args.mode), keep)
        )
    out = energy_judge.to_doc(judged)
    if args.json:
        emit_json(out)
        return 0
    energy_judge.print_rows_and_summary(out)
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    from clproj.console import track
    from clproj.runtime.evaluation.app_profiles import emulate_app
    from clproj.runtime.evaluation.evaluate import evaluate

    apps = [a.strip() for a in args.apps.split(",")] if args.apps else None
    if args.report:  # a folder that cannot be made fails now, not after the evaluation
        os.makedirs(args.report, exist_ok=True)
    if args.emulate:
        from clproj.benchmarks.apps import APPS

        for name in track(apps or list(APPS), "mini-emulating apps"):
            emulate_app(name, "paper", args.mode)
    if args.energy:
        return _run_energy(args, apps)
    if args.models:
        return _run_models(args, apps)
    ev = evaluate(args.results, mode=args.mode, apps=apps)
    if args.report:
        from clproj.runtime.evaluation.report import write_report

        path = write_report(ev, args.report)
        stderr.print(f"report: {path}")
    if args.json:
        emit_json(ev.to_dict())
        return 0
    devs = ev.devices
    print_table(
        ["app", *[f"{d} actual/proj" for d in devs], "best", "picked", "penalty", "rel. err"],
        [
            (
                a.app,
                *[
                    f"{fmt_time(a.actual_s[d])} / {fmt_time(a.projected_s[d])} {a.bound[d]}"
                    for d in devs
                ],
                a.best_actual,
                a.best_projected,
                f"{a.penalty:.1%}",
                f"{a.relative_error:.1%}",
            )
            for a in ev.apps
        ],
        title="projection vs measurement",
    )
    s = ev.summary()
    print_table(
        ["device", "apps", "MAPE"],
        [(d, s["per_device"][d]["apps"], f"{s['per_device'][d]['mape']:.1%}") for d in devs],
    )
    print(
        f"best device chosen: {s['best_chosen']}/{s['apps']} ({s['best_chosen_fraction']:.0%}); "
        f"mean penalty {s['mean_penalty']:.1%} (max {s['max_penalty']:.1%}); "
        f"mean relative error {s['mean_relative_error']:.1%}"
    )
    print_table(
        ["device pair", "apps", "best chosen", "mean penalty", "max penalty", "mean rel. err"],
        [
            (
                " vs ".join(p["devices"]),
                p["apps"],
                f"{p['best_chosen']}/{p['apps']}",
                f"{p['mean_penalty']:.1%}",
                f"{p['max_penalty']:.1%}",
                f"{p['mean_relative_error']:.1%}",
            )
            for p in ev.pairs()
        ],
        title="every pair of devices",
    )
    for app, why in ev.skipped.items():
        print(f"skipped {app}: {why}")
    return 0
