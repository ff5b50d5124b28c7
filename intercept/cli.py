"""``clproj run``, ``clproj records``, ``clproj replay``: the intercept package's commands."""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import sysconfig
import tempfile

from clproj import settings
from clproj.console import emit_json, print_table, stderr_tables
from clproj.errors import ClprojError

MODES = ("observe", "project", "route")


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
    from runtime.projection.objective import add_arguments

    add_arguments(p, "project mode: recommend, route mode: place each kernel")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")
    p.set_defaults(func=run_cmd)

    p = subparsers.add_parser("records", help="list the launch records in DIR")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=records_cmd)

    from clproj.argtypes import positive_seconds

    p = subparsers.add_parser(
        "replay",
        help="replay a launch record on an OpenCL device",
        description="Run the recorded launch again on any OpenCL device; with --verify, check "
        "that its output buffers equal the outputs observed when recording.",
    )
    p.add_argument("record", metavar="RECORD", help="a .clrec file")
    p.add_argument(
        "--device", default=None, metavar="N", help="device index or name (clproj devices)"
    )
    p.add_argument("--verify", action="store_true", help="compare outputs with the recorded ones")
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=60.0,
        metavar="S",
        help="time budget in seconds (default 60): the replay runs in a child process, "
        "killed after S seconds",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=replay_cmd)


def shim_environment(
    mode: str = "observe",
    record: str | None = None,
    which: str = "first",
    kernels: list[str] | None = None,
    verify: bool = False,
    summary_file: str | None = None,
    broker: str | None = None,
    time_all: bool = False,
) -> dict[str, str]:
    """Environment that preloads the shim into a child process (also used by tests).

    ``time_all`` times every launch; by default observe mode times a sample of them
    (``CLPROJ_TIMING_FIRST`` / ``CLPROJ_TIMING_EVERY`` in the environment tune it)."""
    from clproj.native import shim_library

    env = dict(os.environ)
    # The shim and the Oclgrind plugin read settings from the environment only (C, C++):
    # the config file's values travel there, below what the environment says.
    for name, text in settings.from_config_file().items():
        env.setdefault(name, text)
    lib = shim_library()
    env["LD_PRELOAD"] = lib + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    # The embedded interpreter of a C app knows neither the repo nor the venv.
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [repo, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["CLPROJ_MODE"] = mode
    for key in (
        "CLPROJ_RECORD_DIR",
        "CLPROJ_RECORD_KERNELS",
        "CLPROJ_VERIFY",
        "CLPROJ_SUMMARY_FILE",
        "CLPROJ_BROKER",
    ):
        env.pop(key, None)
    if record:
        env["CLPROJ_RECORD_DIR"] = os.path.abspath(record)
    env["CLPROJ_RECORD_WHICH"] = which
    if kernels:
        env["CLPROJ_RECORD_KERNELS"] = ",".join(kernels)
    if verify:
        env["CLPROJ_VERIFY"] = "1"
    if summary_file:
        env["CLPROJ_SUMMARY_FILE"] = summary_file
    if broker:
        env["CLPROJ_BROKER"] = broker
    if time_all:
        env["CLPROJ_TIMING"] = "all"
    if mode in ("project", "route"):  # route mode migrates kernels by these projections
        env["CLPROJ_HOOKS"] = ",".join([*settings.get("CLPROJ_HOOKS"), PROJECT_HOOK])
    return env


# The projection package plugs in here (intercept.hooks): called with each new record.
PROJECT_HOOK = "runtime.projection.app_hook:on_record"


def read_summary(path: str) -> list[dict]:
    """Per-kernel rows of the summary TSV the shim (or route mode) writes at exit.

    The C shim writes six columns: kernel, device, launches, timed launches, estimated
    total ns of all launches and measured ns of the timed ones. Observe mode times a sample
    of the launches (docs/intercept.md, "Sampled timing"), so ``total_ns`` and ``mean_ns``
    are estimates whenever ``timed < launches`` (``sampled`` is then true); launch counts
    are always exact. Route mode writes five columns (its total is over the timed launches).
    """
    rows: dict[tuple[str, str], dict] = {}
    if not os.path.exists(path):
        return []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            route = len(parts) == 5  # route mode: its total is over the timed launches
            if route:
                parts.append(parts[4])
            if len(parts) != 6:
                continue
            name, device, launches, timed, total, measured = parts
            row = rows.setdefault(
                (name, device),
                {
                    "kernel": name,
                    "device": device,
                    "launches": 0,
                    "timed": 0,
                    "total_ns": 0,
                    "measured_ns": 0,
                    "_route": route,
                },
            )
            row["launches"] += int(launches)
            row["timed"] += int(timed)
            row["total_ns"] += int(total)
            row["measured_ns"] += int(measured)
    out = sorted(rows.values(), key=lambda r: -r["total_ns"])
    for r in out:
        r["sampled"] = r["timed"] < r["launches"]
        if not r["timed"]:
            r["mean_ns"] = None
        elif r.pop("_route"):
            r["mean_ns"] = r["measured_ns"] / r["timed"]
        else:  # the stratified estimate over all launches (the C summary's mean)
            r["mean_ns"] = r["total_ns"] / r["launches"]
        r.pop("_route", None)
    return out


def _pin_profiles(env: dict[str, str], tmp: str, spec: str, mode: str) -> str:
    """Resolve ``--devices`` here, before the app starts, and hand the app the profile files.

    Returns the spec that names the same profiles after the app exits (the files), so
    the projections made in the app and after it are onto the same devices. Why here:
    local devices without a profile are measured now (a progress bar, once per machine);
    inside the app nothing is measured, and its projection thread must not query OpenCL
    either (a daemon thread still inside a pyopencl call when the interpreter finalises
    aborts the app). ``cluster`` (route mode) is resolved inside the app from the nodes'
    profiles; the local devices are resolved here anyway, so the embedded node finds them.
    """
    from runtime.projection import device_set

    if spec == "cluster":
        if mode != "route":
            raise ClprojError("--devices cluster is for --mode route", "use local or measured")
        if not env.get("CLPROJ_BROKER"):
            device_set.local_profiles(measure_missing=True)
        env["CLPROJ_DEVICES"] = "cluster"
        return "cluster"
    profiles = device_set.resolve(spec, measure_missing=True)
    files = []
    for i, prof in enumerate(profiles):
        path = os.path.join(tmp, f"device-profile-{i}.json")
        prof.save(path)
        files.append(path)
    env["CLPROJ_DEVICES"] = ",".join(files)
    low = [p.key for p in profiles if p.low_confidence]
    if low:
        print(
            f"clproj: low-confidence (generic, not measured) profiles: {', '.join(low)}",
            file=sys.stderr,
        )
    return env["CLPROJ_DEVICES"]


def _split_environment(env: dict[str, str], tmp: str) -> str:
    """``--split``: turn it on in the app, pin live-adjusted profiles of the local devices
    (a thread-limited PoCL device priced with its live compute units; resolved here
    because the app must not query OpenCL itself, see _pin_profiles) and name the
    file the app appends its decisions to. Returns that file."""
    env["CLPROJ_SPLIT"] = "1"
    out = os.path.join(tmp, "splits.jsonl")
    env["CLPROJ_SPLIT_FILE"] = out
    if not env.get("CLPROJ_SPLIT_DEVICES"):
        try:
            from devices.discovery import opencl_devices
            from runtime.partition.advisor import profile_for_live_device

            files = []
            for i, dev in enumerate(opencl_devices()):
                prof = profile_for_live_device(dev, measure_missing=True)
                files.append(os.path.join(tmp, f"split-profile-{i}.json"))
                prof.save(files[-1])
            env["CLPROJ_SPLIT_DEVICES"] = ",".join(files)
        except Exception as exc:  # the nodes' own profiles are used instead
            print(f"clproj: live device profiles for --split not resolved: {exc}", file=sys.stderr)
    return out


def _read_splits(path: str | None) -> list[dict]:
    """The app's split decisions (JSON lines; a torn last line is skipped)."""
    if not path or not os.path.exists(path):
        return []
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def _print_splits(splits: list[dict]) -> None:
    if not splits:
        print("clproj: split: no kernel decided while the app ran", file=sys.stderr)
    for d in sorted(splits, key=lambda d: (not d["split"], d["kernel"])):
        print(f"clproj: split: {d['kernel']}: {d['reason']}", file=sys.stderr)


def _sweep_after_app() -> None:
    """Remove the shared-memory files of route-mode clients that died (a crashed app)."""
    from runtime.cluster.client.platform import sweep_orphan_shm

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
            devices_spec = _pin_profiles(env, tmp, spec, args.mode)
        elif args.devices:
            raise ClprojError("--devices is for --mode project or route", "add --mode project")
        split_file = None
        if getattr(args, "split", False):
            split_file = _split_environment(env, tmp)
        from runtime.projection import objective as objectives

        if objectives.given(args) and args.mode not in ("project", "route"):
            raise ClprojError(
                "--objective/--deadline/--max-slowdown choose devices",
                "add --mode project or --mode route",
            )
        objective = objectives.from_args(args, env)
        if args.mode == "project":
            env["CLPROJ_DEFERRED_FILE"] = os.path.join(tmp, "deferred.jsonl")
            env.setdefault("CLPROJ_EMULATION_NICE", "10")
        # everything the app's clproj parts create lives here, removed however the app ends
        env["CLPROJ_RUN_DIR"] = tmp
        from intercept.app_process import run_app

        live = None
        if args.mode == "project":
            from runtime.projection.live import emulation_mode
            from runtime.projection.live_run import maybe_start

            # emulates and projects each record as soon as it is written (idle cores)
            live = maybe_start(record_dir, devices_spec or "local", emulation_mode())
        # --json: the document alone on stdout; the app's own output goes to stderr
        rc = run_app(cmd, env, stdout=sys.stderr.fileno() if args.json else None)
        _sweep_after_app()
        try:
            rows = read_summary(summary)
            splits = _read_splits(split_file)
            if args.mode == "project":
                from runtime.projection.live import complete_run

                projections = complete_run(
                    record_dir,
                    env["CLPROJ_DEFERRED_FILE"],
                    devices_spec=devices_spec or "local",
                    objective=objective.name,
                    live=live,
                )
                objectives.constrain(projections, objective)
        except ClprojError as exc:  # the app's exit code and its measured kernels stay
            print(f"clproj: after the app: {exc.cause}", file=sys.stderr)
            rows = read_summary(summary)
            splits = []
        failures = _node_failures(tmp)
    # clproj's own report; a stream that cannot take it drops it (clproj.streams), and
    # the exit status stays the app's
    _report_run(args, cmd, rc, rows, splits, split_file, projections)
    if failures:  # said here, where the app's exit status is known
        outcome = (
            f"recovered from {failures} node failure(s)"
            if rc == 0
            else f"{failures} node failure(s) during the run, and the app failed (exit status {rc})"
        )
        print(f"clproj: route: {outcome}", file=sys.stderr)
    return rc


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


def _node_failures(run_dir: str) -> int:
    """How many node failures route mode's client lived through (0: none, or not route)."""
    from intercept.route.summary import RECOVERIES_FILE

    try:
        with open(os.path.join(run_dir, RECOVERIES_FILE)) as fh:
            return int(fh.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def _report_run(
    args: argparse.Namespace,
    cmd: list[str],
    rc: int,
    rows: list[dict],
    splits: list[dict],
    split_file: str | None,
    projections: list[dict],
) -> None:
    """What ``clproj run`` measured and projected: on stderr (beside the app's own stdout,
    never in it), or with ``--json`` the document alone on stdout."""
    if args.json:
        emit_json(
            {
                "exit_code": rc,
                "kernels": rows,
                "record_dir": args.record,
                "projections": projections,
                **({"splits": splits} if split_file else {}),
            }
        )
        return
    sys.stdout.flush()
    if rows:
        print_table(
            ["kernel", "launches", "timed", "total ms", "mean us", "device"],
            [
                (
                    r["kernel"],
                    r["launches"],
                    r["timed"],
                    r["total_ns"] / 1e6,
                    None if r["mean_ns"] is None else r["mean_ns"] / 1e3,
                    r["device"],
                )
                for r in rows
            ],
            title=f"clproj {args.mode}: kernels of {os.path.basename(cmd[0])}",
            to=stderr_tables,
        )
        if any(r["sampled"] for r in rows):
            print(
                "clproj: total and mean are estimated from the timed launches "
                "(--time-all times every launch)",
                file=sys.stderr,
            )
    else:
        print("clproj: no kernel launches seen", file=sys.stderr)
    if split_file:
        _print_splits(splits)
    if projections:
        from runtime.projection.live import print_projections

        print_projections(projections, rows, to=stderr_tables)
    if args.record:
        from intercept.record import list_records

        try:
            n = len(list_records(args.record))
        except ClprojError:
            n = 0
        print(f"clproj: {n} launch record(s) in {args.record}", file=sys.stderr)


def records_cmd(args: argparse.Namespace) -> int:
    from intercept.record import list_records, load

    rows = []
    for path in list_records(args.dir):
        try:
            r = load(path)
        except ClprojError as exc:
            rows.append({"path": path, "error": exc.cause})
            continue
        rows.append(
            {
                "path": path,
                "id": r.id,
                "kernel": r.kernel,
                "global_size": r.global_size,
                "local_size": r.local_size,
                "args": len(r.args),
                "device": r.device.get("name", ""),
                "measured_time_ns": r.measured_time_ns,
                "emulatable": r.emulatable,
                "reason": r.not_emulatable_reason,
                "verify": r.outputs is not None,
                "signature": r.signature[:12],
            }
        )
    if args.json:
        emit_json({"records": rows})
        return 0
    print_table(
        ["record", "kernel", "global", "local", "time us", "emulatable", "verify", "device"],
        [
            (
                os.path.basename(r["path"]),
                r.get("kernel", r.get("error")),
                "x".join(map(str, r["global_size"])) if "global_size" in r else "",
                "x".join(map(str, r["local_size"])) if r.get("local_size") else "NULL",
                None if r.get("measured_time_ns") is None else r["measured_time_ns"] / 1e3,
                "yes" if r.get("emulatable") else (r.get("reason") or "no"),
                "yes" if r.get("verify") else "",
                r.get("device", ""),
            )
            for r in rows
        ],
        title=f"{len(rows)} launch record(s) in {args.dir}",
    )
    return 0


def replay_cmd(args: argparse.Namespace) -> int:
    """Validate the record here, then replay it in a time-boxed child process: a driver
    crash or an endless kernel becomes a one-line error, not a dead or hung CLI."""
    from intercept.record import load
    from intercept.replay import check_ndrange, check_replayable, replay_isolated

    rec = load(args.record)
    check_replayable(rec)
    check_ndrange(rec)  # before a process starts: the device limits are checked in it
    if args.verify and not rec.outputs:
        raise ClprojError(
            f"launch {rec.id or rec.kernel} has no recorded outputs to compare",
            "record with `clproj run --record DIR --verify -- ...`",
        )
    res = replay_isolated(
        args.record,
        args.device,
        check_outputs=args.verify,
        timeout_s=args.timeout,
        label=rec.id or rec.kernel,
    )
    out = {
        "record": args.record,
        "kernel": rec.kernel,
        "device": res.device,
        "time_ns": res.time_ns,
        "recorded_time_ns": rec.measured_time_ns,
        "matches": res.matches,
        "mismatched_args": res.mismatched,
    }
    if args.json:
        emit_json(out)
    else:
        print_table(
            ["kernel", "device", "replay us", "recorded us", "outputs"],
            [
                (
                    rec.kernel,
                    res.device,
                    None if res.time_ns is None else res.time_ns / 1e3,
                    None if rec.measured_time_ns is None else rec.measured_time_ns / 1e3,
                    {True: "match", False: f"DIFFER (args {res.mismatched})", None: "not checked"}[
                        res.matches
                    ],
                )
            ],
        )
    return 0 if res.matches is not False else 1
