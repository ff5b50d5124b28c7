"""``clproj run``: an unmodified app under the shim, in observe, project or route mode.

The orchestration sits here, above everything it drives: the shim's environment
(intercept.environment), the app as a foreground job (intercept.app_process), project
mode's live emulation and projections (runtime.projection), route mode's cluster and
``--split`` (runtime.route, runtime.partition), and the report (runtime.run.report).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import signal
import sys
from dataclasses import dataclass

from clproj import settings
from clproj.background_thread import background_thread
from clproj.errors import ClprojError
from clproj.intercept.environment import MODES, read_summary, shim_environment
from clproj.intercept.identity import run_tag
from clproj.lifeline import unwinding_on
from clproj.paths import temp_directory
from clproj.runtime.projection import objective as objectives
from clproj.runtime.run.prepare import pin_profiles, split_environment


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
    objectives.add_arguments(p, "project mode: recommend, route mode: place each kernel")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")
    p.set_defaults(func=run_cmd)


def _sweep_after_app() -> None:
    """Remove the shared-memory files of route-mode clients that died (a crashed app)."""
    from clproj.runtime.cluster.client.shm import sweep_orphan_shm

    sweep_orphan_shm()


def _command(args: argparse.Namespace) -> list[str]:
    """The app's command line, once every option is checked against the mode."""
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ClprojError("no command given", "usage: clproj run [--mode observe] -- CMD ARGS...")
    if args.broker and args.mode != "route":
        raise ClprojError("--broker is for --mode route", "add --mode route")
    if getattr(args, "split", False) and args.mode != "route":
        raise ClprojError("--split is for --mode route", "add --mode route")
    if args.devices and args.mode not in ("project", "route"):
        raise ClprojError("--devices is for --mode project or route", "add --mode project")
    if objectives.given(args) and args.mode not in ("project", "route"):
        raise ClprojError(
            "--objective/--deadline/--max-slowdown choose devices",
            "add --mode project or --mode route",
        )
    if args.record:
        _check_link(args.record)
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
    return cmd


def _check_link(path: str) -> None:
    """A --record path that is a symbolic link leading nowhere: one line naming that, not
    the "File exists" that making the folder would answer."""
    if not os.path.islink(path):
        return
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ClprojError(
                f"--record {path} is a symbolic-link loop",
                "point the link at a folder, or name another folder",
            ) from None
        raise ClprojError(
            f"--record {path} is a symbolic link to {os.readlink(path)}, which does not exist",
            "make that folder first, or name another folder",
        ) from None


@dataclass
class Run:
    """One run's folder and what the app is handed: its environment, where its records,
    summary and split decisions go, and the devices its kernels are projected onto."""

    tmp: str
    env: dict[str, str]
    summary: str
    record_dir: str | None
    objective: objectives.Objective
    devices_spec: str | None = None
    split_file: str | None = None


def _prepare(args: argparse.Namespace, tmp: str) -> Run:
    """Everything settled before the app starts (devices are resolved here: inside the
    app nothing is measured, runtime.run.prepare says why)."""
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
    # in route mode the objective reaches the broker with every placement request
    run = Run(tmp, env, summary, record_dir, objectives.from_args(args, env))
    if args.mode in ("project", "route"):
        spec = args.devices or settings.get("CLPROJ_DEVICES")
        if args.mode == "route" and not args.devices and not settings.is_set("CLPROJ_DEVICES"):
            spec = "cluster"
        run.devices_spec = pin_profiles(env, tmp, spec, args.mode)
    if getattr(args, "split", False):
        run.split_file = split_environment(env, tmp)
    if args.mode == "project":
        env["CLPROJ_DEFERRED_FILE"] = os.path.join(tmp, "deferred.jsonl")
        env.setdefault("CLPROJ_EMULATION_NICE", "10")
        view = settings.get("CLPROJ_SNAPSHOT_VIEW")
        if view in ("release", "live"):
            from clproj.intercept.live_pages import unavailable

            if unavailable(tmp):  # the emulator could not read them: they would only delay
                env["CLPROJ_SNAPSHOT_VIEW"] = "off"
            elif view == "release" and args.record and not settings.is_set("CLPROJ_SNAPSHOT_VIEW"):
                env["CLPROJ_SNAPSHOT_VIEW"] = "live"  # records asked for are kept whole
    # everything the app's clproj parts create lives here, removed however the app ends
    env["CLPROJ_RUN_DIR"] = tmp
    return run


def _after_app(
    args: argparse.Namespace, run: Run, live: object
) -> tuple[list[dict], list[dict], list[dict]]:
    """The measured kernels, split decisions and projections, once the app has exited.
    A failure here costs clproj's report, never the app's exit status or its kernels."""
    from clproj.runtime.run.report import read_splits

    try:
        rows = read_summary(run.summary)
        splits = read_splits(run.split_file)
        projections: list[dict] = []
        if args.mode == "project":
            from clproj.runtime.projection.live import complete_run

            projections = complete_run(
                run.record_dir,
                run.env["CLPROJ_DEFERRED_FILE"],
                devices_spec=run.devices_spec or "local",
                objective=run.objective.name,
                live=live,
                run_tag=run_tag(run.tmp),
            )
            objectives.constrain(projections, run.objective)
        return rows, splits, projections
    except ClprojError as exc:
        print(f"clproj: after the app: {exc.cause}", file=sys.stderr)
        return read_summary(run.summary), [], []


def run_cmd(args: argparse.Namespace) -> int:
    # a SIGTERM or SIGHUP for clproj run before the app starts or after it ends removes the
    # run's folders and helpers first (while the app runs, both are forwarded to it)
    with unwinding_on(signal.SIGTERM, signal.SIGHUP):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from clproj.intercept.app_process import end_like, run_app

    cmd = _command(args)
    with temp_directory("clproj-run-") as tmp, contextlib.ExitStack() as hold:
        run = _prepare(args, tmp)
        # the report's modules (its console: 0.08 s of imports on the 2-core VM) load
        # while the app runs, not before it starts or after it ends
        background_thread(
            importlib.import_module, "clproj-warm", ("clproj.runtime.run.report",)
        ).start()
        live = None
        if args.mode == "project":
            from clproj.miniemu.oclgrind import shared_server
            from clproj.runtime.projection.live import emulation_mode
            from clproj.runtime.projection.live_run import maybe_start

            # one emulator fork server for every projection of the run, started now: its
            # imports overlap the app's start instead of delaying each kernel's projection
            hold.enter_context(shared_server())
            # emulates and projects each record as soon as it is written (at nice 19)
            live = maybe_start(
                run.record_dir, run.devices_spec or "local", emulation_mode(), run_tag(tmp)
            )
        # --json: the document alone on stdout; the app's own output goes to stderr
        app = run_app(cmd, run.env, stdout=sys.stderr.fileno() if args.json else None)
        rc = app.status
        _sweep_after_app()
        rows, splits, projections = _after_app(args, run, live)
        from clproj.runtime.run.report import node_failures

        failures = node_failures(tmp)
    # clproj's own report; a stream that cannot take it drops it (clproj.streams), and
    # the exit status stays the app's
    from clproj.runtime.run.report import report_run, say_node_failures

    report_run(args, cmd, rc, rows, splits, run.split_file, projections)
    say_node_failures(failures, rc)
    end_like(app)  # an app killed by a signal: clproj run ends by it too
    return rc
