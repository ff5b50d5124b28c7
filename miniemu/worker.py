"""Subprocess entry point: ``python -m clproj.miniemu.worker RECORD [--parent-pid PID] [--nice N]``,
or ``python -m clproj.miniemu.worker --serve ...``: the fork server of bounded emulation.

Run by :class:`miniemu.oclgrind.OclgrindBackend` with ``LD_PRELOAD=liboclgrind-rt.so`` and
``OCLGRIND_PLUGINS=<our plugin>``: the preloaded runtime's ``cl*`` symbols win over
pyopencl's bundled ICD loader, so the replay runs inside Oclgrind and the plugin writes
its statistics to ``$CLPROJ_STATS_OUT``. Keeping this in a separate process is what lets
the caller kill a slow or crashing emulation without harming the app or the broker.

``--parent-pid``: die with the thread that started the worker (``clproj.lifeline.
die_with_starter``); ``--nice``: lower its own priority (inside an app the emulator must
not take the app's cores). The worker does both itself, after its exec: a ``preexec_fn``
would make the caller fork, and a fork inside an app runs the app's ``pthread_atfork``
handlers (OpenBLAS hangs, see clproj.lifeline).

``--serve``: the fork server of bounded emulation (miniemu.fork_server).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m clproj.miniemu.worker")
    p.add_argument("record", nargs="?")
    p.add_argument("--parent-pid", type=int, default=0)
    p.add_argument("--nice", type=int, default=0)
    p.add_argument("--serve", action="store_true", help="fork server (module docstring)")
    p.add_argument("--binaries", help="--serve: the folder of its runs' built programs")
    args = p.parse_args(argv)
    if args.parent_pid:
        from clproj.lifeline import die_with_starter

        die_with_starter(args.parent_pid)
    if args.nice:
        os.nice(args.nice)
    if args.serve:
        from clproj.miniemu.fork_server import serve

        return serve(args.binaries)
    if not args.record:
        p.error("RECORD is required without --serve")
    return run_record(args.record)


def run_record(
    path: str, binaries: str | None = None, before_launch: Callable[[Any], None] | None = None
) -> int:
    """Replay the record at ``path`` inside Oclgrind; 0, or 3 after a reported error.
    ``binaries``: programs built by earlier runs (``intercept.built_programs``);
    ``before_launch``: as ``intercept.replay.replay``'s (the fork server's templates)."""
    from clproj.errors import ClprojError
    from clproj.intercept.record import load
    from clproj.intercept.replay import replay
    from clproj.miniemu.profile import emulated_local_size

    try:
        record = load(path)
        if record.local_size is None:
            # The driver would choose; Oclgrind would choose one work-item. Emulate a
            # representative group instead; the projection regroups for each device.
            record.local_size = emulated_local_size(record.global_size)
        # Oclgrind's limits are nominal; the buffers are mapped, not read, and nothing is
        # read back: the statistics are the result.
        result = replay(
            record,
            device_limits=False,
            map_buffers=True,
            read_outputs=False,
            binaries=binaries,
            before_launch=before_launch,
        )
    except ClprojError as exc:
        # one marked line each, found by the parent among the emulator's own output
        sys.stderr.write(f"{ERROR_MARK}{' '.join(exc.cause.split())}\n")
        if exc.fix:
            sys.stderr.write(f"{FIX_MARK}{' '.join(exc.fix.split())}\n")
        return 3
    # Oclgrind's profiling event spans the emulation of the kernel alone (benchmarks use it).
    sys.stdout.write(json.dumps({"kernel_time_ns": result.time_ns}) + "\n")
    return 0


ERROR_MARK = "clproj-worker-error: "
FIX_MARK = "clproj-worker-fix: "


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
