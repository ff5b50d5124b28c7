"""``clproj validate``: judge the projection model on a suite of third-party apps.

The command only parses arguments and hands over: the validation itself is
:mod:`runtime.evaluation.validate` (so that the matching and the metrics can be tested without
running an app), the tables :mod:`runtime.evaluation.validate_tables`, the HTML report
:mod:`runtime.evaluation.validate_html`. They are imported when the command runs, not when
``clproj`` starts.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from clproj.argtypes import positive_seconds
from clproj.console import emit_json, stderr, track
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
        help="profiles to project onto (default: measured); a truth file's device that none "
        "of them is named after is projected on a stand-in: its shipped measured profile, "
        "else its spec sheet; profiles without a truth file are skipped",
    )
    p.add_argument("--apps", help="comma list of apps (default: every app with truth rows)")
    p.add_argument(
        "--build-dir",
        metavar="DIR",
        help="use (or build into) DIR; default: a folder in clproj's cache, rebuilt when "
        "the suite's sources change",
    )
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=1800.0,
        help="per-app time limit in seconds (1800)",
    )
    p.add_argument(
        "--models",
        metavar="NAMES",
        help="also judge these models side by side, e.g. bound,paper,roofline,mwp-cwp,learned: "
        "each re-projects the run's kernel profiles onto the same devices; learned is first "
        "trained on our own apps' committed bench results (default: bound only); with "
        "--energy, learned also puts the learned power model beside the fitted power, "
        "trained on our apps' windows in the --energy files",
    )
    p.add_argument("--report", metavar="DIR", help="write an HTML report with PNG plots into DIR")
    p.add_argument(
        "--energy",
        nargs="+",
        metavar="RESULTS",
        help="also judge projected power and energy per launch against the suite's measured "
        "windows in these clproj.energy-results files (scripts/gpu/energy.sh; docs/energy.md)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_validate)


register = register_validate  # clproj/cli.py calls each command module's register()


def _output(val: Any, energy_docs: list[Any], as_json: bool, learned: bool = False) -> None:
    """The validation's tables or JSON, with the energy judgement where files were given
    and, where ``--models`` names ``learned``, the learned power model beside it."""
    from clproj.runtime.evaluation import energy_judge
    from clproj.runtime.evaluation.validate_energy import judge_suite_energy
    from clproj.runtime.evaluation.validate_tables import print_validation

    energy = judge_suite_energy(val, energy_docs) if energy_docs else None
    both = None
    if energy_docs and learned:
        from clproj.runtime.evaluation.energy_models import side_by_side

        both = side_by_side(energy_docs, val, ours=False)
    if as_json:
        extra = {"energy": energy} if energy is not None else {}
        if both is not None:
            extra["energy_learned"] = both["suite"]["learned"]
        emit_json(val.to_dict() | extra)
        return
    print_validation(val)
    if energy is not None:
        energy_judge.print_rows_and_summary(energy)
    if both is not None:
        from clproj.runtime.evaluation.energy_models import print_side_by_side

        print_side_by_side(both)


def run_validate(args: argparse.Namespace) -> int:
    from clproj.runtime.evaluation.validate import validate
    from clproj.runtime.evaluation.validate_models import check_model_names

    apps = [a.strip() for a in args.apps.split(",") if a.strip()] if args.apps else None
    models = None
    if args.models is not None:  # checked before any app runs
        models = check_model_names([m.strip() for m in args.models.split(",") if m.strip()])
    if args.timeout <= 0:
        raise ClprojError("--timeout must be positive", "e.g. --timeout 1800")
    if args.report:  # a folder that cannot be made fails now, not after minutes of apps
        os.makedirs(args.report, exist_ok=True)
    energy_docs = []
    if args.energy:  # read and checked before any app runs
        from clproj.devices.energy import read_results

        energy_docs = [read_results(p) for p in args.energy]

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
        from clproj.runtime.evaluation.validate_html import write_report

        path = write_report(val, args.report)
        stderr.print(f"report: {path}")
    _output(val, energy_docs, args.json, learned="learned" in (models or []))
    if not val.kernels:
        raise ClprojError(
            "no kernel could be judged (every app failed or nothing matched the truth)",
            "see the apps' errors above; check --truth and --devices",
        )
    return 0
