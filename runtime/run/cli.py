"""``clproj run``: an unmodified app under the shim, in observe, project or route mode.

The orchestration sits here, above everything it drives: the shim's environment
(intercept.environment), the app as a foreground job (intercept.app_process), project
mode's live emulation and projections (runtime.projection), route mode's cluster and
``--split`` (runtime.route, runtime.partition), and the report (runtime.run.report).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from clproj.intercept.environment import MODES, read_summary, shim_environment
from clproj.runtime.run.prepare import pin_profiles, split_environment
from clproj.runtime.run.report import node_failures, read_splits, report_run

from clproj import settings
from clproj.errors import ClprojError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="run an unmodified OpenCL app with the interception shim",
        description="Launch CMD with the clproj shim preloaded; print a per-kernel summary "
        "(launches, device time, device) on stderr when it exits. The app's output and exit "
        "status are unchanged.",
    )
    p.add_argument(
        "--mode", choices=MODES, default="observe", help="observe (default), project, route"
    )
    p.add_argument("--record", metavar="DIR", help="write launch records (msgpack + blobs) to DIR")
    p.add_argument(
        "--which",
        choices=("first", "all"),
        default="first",
        help="record the first launch of each distinct signature (default) or every launch",
    )
    p.add_argument(
        "--kernel", action="append", metavar="NAME", help="record only these kernels (repeatable)"
    )
    p.add_argument(
        "--verify", action="store_true", help="also store post-launch buffers (for replay --verify)"
    )
    p.add_argument(
        "--time-all",
        action="store_true",
        help="time every launch (default: the first 100 of each kernel, then about 1 in 128; "
        "totals and means are scaled from the timed launches)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="summary as JSON alone on stdout (the app's stdout goes to stderr)",
    )
    p.add_argument(
        "--broker",
        metavar="ADDR",
        help="route mode: the cluster's broker (default: an embedded broker + local node)",
    )
    p.add_argument(
        "--split",
        action="store_true",
        help="route mode: split launches that qualify across devices at once (partition "
        "safety + advisor, decided once per kernel; docs/advisor.md)",
    )
    p.add_argument(
        "--devices",
        metavar="SPEC",
        default=None,
        help="project and route modes: the devices kernels are projected onto: local "
        "(project mode's default), measured, all, profile keys or files, comma-separated; "
        "route mode's default is cluster (the devices the broker's nodes announce)",
    )
    p.add_argument(
        "--objective",
        choices=("time", "energy", "edp"),
        default="time",
        help="project mode: recommend per kernel by projected time (default), energy or "
        "energy x delay (docs/projection.md)",
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")
    p.set_defaults(func=run_cmd)


def _sweep_after_app() -> None:
    """Remove the shared-memory files of route-mode clients that died (a crashed app)."""
    from clproj.runtime.cluster.client.platform import sweep_orphan_shm

    sweep_orphan_shm()


def run_cmd(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ClprojError("no command given", "usage: clproj run [--mode observe] -- CMD ARGS...")
    if args.broker and args.mode != "route":
        raise ClprojError("--broker is for --mode route", "add --mode route")
    if getattr(args, "split", False) and args.mode != "route":
        raise ClprojError("--split is for --mode route", "add --mode route")
    if args.record:
        if os.path.exists(args.record) and not os.path.isdir(args.record):
            raise ClprojError(
                f"--record {args.record} is a file, not a folder", "name a folder (new or existing)"
            )
        os.makedirs(args.record, exist_ok=True)
        if not os.access(args.record, os.W_OK):
            print(
                f"clproj: warning: {args.record} is not writable; no records will be written",
                file=sys.stderr,
            )
    projections: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="clproj-run-") as tmp:
        summary = os.path.join(tmp, "summary.tsv")
        # Project mode needs records; without --record they live in the temporary folder.
        # Route mode snapshots launches too: never into a folder left behind in /tmp.
        record_dir = args.record or (
            os.path.join(tmp, "records") if args.mode in ("project", "route") else None
        )
        env = shim_environment(
            args.mode,
            record_dir,
            args.which,
            args.kernel,
            args.verify,
            summary,
            args.broker,
            time_all=args.time_all,
        )
        devices_spec = None
        if args.mode in ("project", "route"):
            spec = args.devices or settings.get("CLPROJ_DEVICES")
            if args.mode == "route" and not args.devices and not settings.is_set("CLPROJ_DEVICES"):
                spec = "cluster"
            devices_spec = pin_profiles(env, tmp, spec, args.mode)
        elif args.devices:
            raise ClprojError("--devices is for --mode project or route", "add --mode project")
        split_file = None
        if getattr(args, "split", False):
            split_file = split_environment(env, tmp)
        if args.mode == "project":
            env["CLPROJ_DEFERRED_FILE"] = os.path.join(tmp, "deferred.jsonl")
            env.setdefault("CLPROJ_EMULATION_NICE", "10")
        # everything the app's clproj parts create lives here, removed however the app ends
        env["CLPROJ_RUN_DIR"] = tmp
        from clproj.intercept.app_process import run_app

        live = None
        if args.mode == "project":
            from clproj.runtime.projection.live import emulation_mode
            from clproj.runtime.projection.live_run import maybe_start

            # emulates and projects each record as soon as it is written (idle cores)
            live = maybe_start(record_dir, devices_spec or "local", emulation_mode())
        # --json: the document alone on stdout; the app's own output goes to stderr
        rc = run_app(cmd, env, stdout=sys.stderr.fileno() if args.json else None)
        _sweep_after_app()
        try:
            rows = read_summary(summary)
            splits = read_splits(split_file)
            if args.mode == "project":
                from clproj.runtime.projection.live import complete_run

                projections = complete_run(
                    record_dir,
                    env["CLPROJ_DEFERRED_FILE"],
                    devices_spec=devices_spec or "local",
                    objective=args.objective,
                    live=live,
                )
        except ClprojError as exc:  # the app's exit code and its measured kernels stay
            print(f"clproj: after the app: {exc.cause}", file=sys.stderr)
            rows = read_summary(summary)
            splits = []
        failures = node_failures(tmp)
    # clproj's own report; a stream that cannot take it drops it (clproj.streams), and
    # the exit status stays the app's
    report_run(args, cmd, rc, rows, splits, split_file, projections)
    if failures:  # said here, where the app's exit status is known
        outcome = (
            f"recovered from {failures} node failure(s)"
            if rc == 0
            else f"{failures} node failure(s) during the run, and the app failed (exit status {rc})"
        )
        print(f"clproj: route: {outcome}", file=sys.stderr)
    return rc
