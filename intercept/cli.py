"""``clproj records``, ``clproj replay``: the intercept package's commands (``clproj run``
is runtime.run.cli: it drives the layers above this one)."""

from __future__ import annotations

import argparse
import os

from clproj.console import emit_json, print_table
from clproj.errors import ERROR_STATUS, ClprojError


def register(subparsers: argparse._SubParsersAction) -> None:
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


def records_cmd(args: argparse.Namespace) -> int:
    from clproj.intercept.record import list_records, load

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
                "asked": r.asked,  # the launch-sizing answers the app had read (size_queries)
            }
        )
    # a folder with an unreadable file is not a clean listing: the error status says so to
    # a script, and every readable record is still listed
    unreadable = sum("error" in r for r in rows)
    status = ERROR_STATUS if unreadable else 0
    if args.json:
        emit_json({"records": rows})
        return status
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
        title=f"{len(rows) - unreadable} launch record(s) in {args.dir}"
        + (f", {unreadable} unreadable" if unreadable else ""),
    )
    return status


def replay_cmd(args: argparse.Namespace) -> int:
    """Validate the record here, then replay it in a time-boxed child process: a driver
    crash or an endless kernel becomes a one-line error, not a dead or hung CLI."""
    from clproj.intercept.record import load
    from clproj.intercept.replay import check_ndrange, check_replayable, replay_isolated

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
