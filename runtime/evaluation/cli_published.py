"""``clproj validate-published``: projections of BabelStream / mixbench vs published times.

A subcommand of its own rather than a ``--published`` mode of ``clproj validate``: that
command's suites are a ``build.sh`` plus per-device TSV truth of launches measured here,
run under project mode app by app, and most of its options (``--apps``, ``--models``,
``--build-dir``) have no meaning for a published suite, whose truth is the suite's own
published output format, whose devices are spec profiles chosen by a file-name table and
whose app must be recorded once per published configuration. The two share the metrics
(:mod:`runtime.evaluation.validate_scores`) and the per-kernel result type. The command
only parses arguments and hands over to :mod:`runtime.evaluation.published`.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from clproj.argtypes import positive_seconds
from clproj.console import emit_json, stderr, track
from clproj.errors import ClprojError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "validate-published",
        help="judge spec-profile projections of BabelStream or mixbench against published times",
        description="Build the suite's app from its sources, record its launches once per "
        "published configuration under `clproj run --record` (cached in --work), project "
        "every recorded launch onto the device profiles the published result files map to, "
        "and compare with the published times (docs/validation.md).",
    )
    p.add_argument(
        "suite", metavar="SUITE_DIR", help="BabelStream folder (src/ocl/) or mixbench folder"
    )
    p.add_argument(
        "--truth",
        metavar="DIR",
        help="published results folder (default: the suite's results/v1.0/opencl or truth/)",
    )
    p.add_argument(
        "--devices",
        default="truth",
        help="truth (default: the profile each results file is identified with: "
        "docs/validation.md), "
        "or a comma list of profile keys, local, measured, all, truth; profiles without a "
        "results file are listed as projected only",
    )
    p.add_argument(
        "--work",
        metavar="DIR",
        help="build and record here (default: a folder in clproj's cache); a rerun reuses "
        "its records",
    )
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=3600.0,
        help="per-run time limit in seconds (3600)",
    )
    p.add_argument("--report", metavar="DIR", help="write an HTML report with PNG plots into DIR")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_published)


def run_published(args: argparse.Namespace) -> int:
    from clproj.runtime.evaluation.published import validate_published
    from clproj.runtime.evaluation.published_tables import print_published

    if args.timeout <= 0:
        raise ClprojError("--timeout must be positive", "e.g. --timeout 3600")
    if args.report:  # a folder that cannot be made fails now, not after the runs
        os.makedirs(args.report, exist_ok=True)

    def on_run(run: Any) -> None:
        how = "cached" if run.cached else f"{run.wall_s:.1f} s"
        status = f"{len(run.records)} records ({how})" if run.ok else f"FAILED: {run.error}"
        stderr.print(f"run {run.tag}: {status}", highlight=False)

    def on_start(tag: str, command: list[str]) -> None:
        stderr.print(f"run {tag}: recording `{' '.join(command)}`...", highlight=False)

    val = validate_published(
        os.path.abspath(args.suite),
        os.path.abspath(args.truth) if args.truth else None,
        devices=args.devices,
        work_dir=os.path.abspath(args.work) if args.work else None,
        timeout_s=args.timeout,
        progress=lambda items, desc: track(list(items), desc),
        on_run=on_run,
        on_start=on_start,
    )
    if args.report:
        from clproj.runtime.evaluation.published_html import write_report

        stderr.print(f"report: {write_report(val, args.report)}")
    if args.json:
        emit_json(val.to_dict())
    else:
        print_published(val)
    if not val.kernels:
        raise ClprojError(
            "no published result could be judged (no profile, or the runs failed)",
            "see the table above; check --devices and that the device profiles exist",
        )
    return 0
