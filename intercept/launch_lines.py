"""A launch without its buffers, one JSON line (docs/formats.md, "Deferred launches").

Why a module of its own: a launch the reuse cache answers inside the app leaves only this
line behind (no snapshot, no record file); the projection after the app reads the lines
back. The line format and its tolerant reader are one job, apart from the record files
of intercept.record.
"""

from __future__ import annotations

import json
import os

from clproj.intercept import size_queries
from clproj.intercept.record import ArgRecord, LaunchRecord

LAUNCH_LINE_VERSION = 1


def launch_line(record: LaunchRecord) -> str:
    """``record`` without buffers or program text, as one JSON line: what a launch the
    reuse cache answers leaves behind in the app (its program is that of the recorded
    launch with the same hash). Written per launch, so it carries nothing the projection
    after the app does not need."""
    return (
        json.dumps(
            {
                "v": LAUNCH_LINE_VERSION,
                "kernel": record.kernel,
                "program_hash": record.program_hash,
                "work_dim": record.work_dim,
                "global_size": record.global_size,
                "local_size": record.local_size,
                "global_offset": record.global_offset,
                "args": [
                    {
                        "index": a.index,
                        "kind": a.kind,
                        "size": a.size,
                        "data": a.data.hex() if a.data else None,
                    }
                    for a in record.args
                ],
                # the launch-sizing answers the app had read (intercept.size_queries)
                **({"asked": record.asked} if record.asked else {}),
            }
        )
        + "\n"
    )


def read_launch_lines(
    path: str | None, programs: dict[str, tuple[str | None, str]]
) -> list[LaunchRecord]:
    """The buffer-less records of a file of :func:`launch_line` lines, each given the
    program (source, options) of ``programs[program_hash]``. The file was written by the
    app while it ran: a torn last line, a line of another version or one whose fields are
    not a launch's is skipped, and launches of a program not in ``programs`` too."""
    if not path or not os.path.exists(path):
        return []
    out: list[LaunchRecord] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                m = json.loads(line)
                if m.get("v") != LAUNCH_LINE_VERSION or m["program_hash"] not in programs:
                    continue
                source, options = programs[m["program_hash"]]
                args = [
                    ArgRecord(
                        int(a["index"]),
                        str(a["kind"]),
                        size=None if a["size"] is None else int(a["size"]),
                        data=bytes.fromhex(a["data"]) if a["data"] else None,
                    )
                    for a in m["args"]
                ]
                out.append(
                    LaunchRecord(
                        kernel=str(m["kernel"]),
                        source=source,
                        options=options,
                        args=args,
                        work_dim=int(m["work_dim"]),
                        global_size=[int(g) for g in m["global_size"]],
                        local_size=None
                        if m["local_size"] is None
                        else [int(x) for x in m["local_size"]],
                        global_offset=None
                        if m["global_offset"] is None
                        else [int(x) for x in m["global_offset"]],
                        asked=size_queries.check(m.get("asked"), ValueError),
                    )
                )
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
    return out
