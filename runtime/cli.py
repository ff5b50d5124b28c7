"""``clproj project``: projected time, bound and rank of one kernel on every device."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from clproj.argtypes import positive_seconds
from clproj.console import emit_json, print_table, stderr
from clproj.errors import ClprojError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "project",
        help="project a kernel (launch record or kernel profile) onto devices and rank them",
        description="Mini-emulate a launch record (or read a kernel profile JSON) and project its "
        "time on each device with the compute/global/local bound model.",
    )
    p.add_argument(
        "target", metavar="RECORD|PROFILE", help="a .clrec launch record or a kernel-profile .json"
    )
    p.add_argument(
        "--devices",
        default="local",
        help="local (default), measured, all, or a comma list of profile keys/paths",
    )
    p.add_argument(
        "--mode",
        default="single",
        choices=["single", "quick", "full"],
        help="emulation mode when TARGET is a record (default: single)",
    )
    p.add_argument(
        "--timeout", type=positive_seconds, default=120.0, help="emulation time budget in seconds"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_project)
    register_evaluate(subparsers)


def load_kernel_profile(
    target: str, mode: str = "single", timeout_s: float = 120.0
) -> dict[str, Any]:
    """A kernel-profile dict from a record (emulated now) or a profile file."""
    if not os.path.exists(target):
        raise ClprojError(
            f"{target}: no such file",
            "pass a .clrec record (see `clproj records DIR`) or a profile .json",
        )
    if target.endswith(".json"):
        return read_kernel_profile(target)
    import miniemu
    from intercept.record import load

    record = load(target)
    from runtime.projection import record_footprint

    with stderr.status(f"mini-emulating {record.kernel} ({mode}) in Oclgrind..."):
        profile = miniemu.emulate(record, mode=mode, timeout_s=timeout_s).to_dict()
    profile["launch"]["footprint_bytes"] = record_footprint(record)
    return profile


MAX_PROFILE_BYTES = 64 << 20


def read_kernel_profile(path: str) -> dict[str, Any]:
    """A kernel-profile JSON file, validated (miniemu.profile.validate_profile).

    Profiles are files users copy between machines: the read is bounded (a FIFO or
    /dev/zero named ``x.json`` is refused, not waited on), bad JSON and every bad field
    become one ClprojError naming the field."""
    from clproj.untrusted import read_regular_file
    from miniemu.profile import validate_profile

    fix = "pass a kernel profile written by `clproj emulate --json`"
    raw = read_regular_file(path, "kernel profile", MAX_PROFILE_BYTES, fix)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ClprojError(f"{path} is not UTF-8 text ({exc.reason})", fix) from None
    except json.JSONDecodeError as exc:
        raise ClprojError(
            f"{path} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", fix
        ) from None
    except RecursionError:
        raise ClprojError(f"{path} nests JSON too deeply for a kernel profile", fix) from None
    try:
        return validate_profile(doc)
    except ClprojError as exc:
        raise ClprojError(f"{path}: {exc.cause}", exc.fix) from None


def run_project(args: argparse.Namespace) -> int:
    from runtime import device_set
    from runtime.projection import rank

    profile = load_kernel_profile(args.target, args.mode, args.timeout)
    devices = device_set.resolve(args.devices)
    low = {d.key for d in devices if d.low_confidence}
    ranked = rank(profile, devices, profile["launch"].get("footprint_bytes"))
    if args.json:
        emit_json(
            {
                "kernel": profile.get("kernel"),
                "recommended": ranked[0].device_key,
                "projections": [
                    p.to_dict() | ({"low_confidence": True} if p.device_key in low else {})
                    for p in ranked
                ],
            }
        )
        return 0
    best = ranked[0].time_s
    print_table(
        [
            "rank",
            "device",
            "kind",
            "projected",
            "x best",
            "bound",
            "compute",
            "global",
            "local",
            "occupancy",
        ],
        [
            (
                i + 1,
                p.device_key
                + (" (LOW confidence: generic profile)" if p.device_key in low else ""),
                p.device_kind,
                _fmt_time(p.time_s),
                round(p.time_s / best, 2),
                p.bound,
                _fmt_time(p.t_compute),
                _fmt_time(p.t_global),
                _fmt_time(p.t_local),
                f"{p.occupancy.groups_per_cu} grp/CU ({p.occupancy.limiter})",
            )
            for i, p in enumerate(ranked)
        ],
        title=f"projection of {profile.get('kernel')}",
    )
    print(f"recommended device: {ranked[0].device_key} ({ranked[0].device_name})")
    return 0


def _fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"


def register_evaluate(subparsers: argparse._SubParsersAction) -> None:
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
        choices=["single", "quick", "full"],
        help="emulation mode of the profiles",
    )
    p.add_argument(
        "--emulate", action="store_true", help="(re)compute the apps' kernel profiles first"
    )
    p.add_argument("--report", metavar="DIR", help="write an HTML report with PNG plots into DIR")
    p.add_argument(
        "--models",
        help="compare models side by side, e.g. bound,mwp-cwp,learned (docs/models.md); "
        "the learned model is scored leave-one-app-out",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed of the learned model")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_evaluate)


def _run_models(args: argparse.Namespace, apps: list[str] | None) -> int:
    """``evaluate --models``: one row per model (runtime/models/compare.py)."""
    from runtime.models.compare import compare, rows

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


def run_evaluate(args: argparse.Namespace) -> int:
    from clproj.console import track
    from runtime.app_profiles import emulate_app
    from runtime.evaluate import evaluate

    apps = [a.strip() for a in args.apps.split(",")] if args.apps else None
    if args.emulate:
        from benchmarks.apps import APPS

        for name in track(apps or list(APPS), "mini-emulating apps"):
            emulate_app(name, "paper", args.mode)
    if args.models:
        return _run_models(args, apps)
    ev = evaluate(args.results, mode=args.mode, apps=apps)
    if args.report:
        from runtime.report import write_report

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
                    f"{_fmt_time(a.actual_s[d])} / {_fmt_time(a.projected_s[d])} {a.bound[d]}"
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
