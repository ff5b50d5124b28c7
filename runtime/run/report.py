"""What ``clproj run`` says after the app: the measured kernels, the projections, the
split decisions and the node failures route mode lived through. On stderr, beside the
app's own stdout and never in it; with ``--json`` the document alone on stdout."""

from __future__ import annotations

import argparse
import json
import os
import sys

from clproj.console import emit_json, print_table, stderr_tables
from clproj.errors import ClprojError


def read_splits(path: str | None) -> list[dict]:
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


def node_failures(run_dir: str) -> int:
    """How many node failures route mode's client lived through (0: none, or not route)."""
    from clproj.runtime.route.summary import RECOVERIES_FILE

    try:
        with open(os.path.join(run_dir, RECOVERIES_FILE)) as fh:
            return int(fh.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def report_run(
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
        from clproj.runtime.projection.table import print_projections

        print_projections(projections, rows, to=stderr_tables)
    if args.record:
        from clproj.intercept.record import list_records

        try:
            n = len(list_records(args.record))
        except ClprojError:
            n = 0
        print(f"clproj: {n} launch record(s) in {args.record}", file=sys.stderr)


def say_node_failures(failures: int, rc: int) -> None:
    """Route mode's node failures, said after the report, where the app's exit status is
    known: "recovered" only when the app succeeded."""
    if not failures:
        return
    outcome = (
        f"recovered from {failures} node failure(s)"
        if rc == 0
        else f"{failures} node failure(s) during the run, and the app failed (exit status {rc})"
    )
    print(f"clproj: route: {outcome}", file=sys.stderr)
