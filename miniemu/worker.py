"""Subprocess entry point: ``python -m clproj.miniemu.worker RECORD [--parent-pid PID] [--nice N]``.

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
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m clproj.miniemu.worker")
    p.add_argument("record")
    p.add_argument("--parent-pid", type=int, default=0)
    p.add_argument("--nice", type=int, default=0)
    args = p.parse_args(argv)
    if args.parent_pid:
        from clproj.lifeline import die_with_starter

        die_with_starter(args.parent_pid)
    if args.nice:
        os.nice(args.nice)
    from clproj.intercept.record import load
    from clproj.intercept.replay import replay
    from clproj.miniemu.profile import emulated_local_size

    from clproj.errors import ClprojError

    try:
        record = load(args.record)
        if record.local_size is None:
            # The driver would choose; Oclgrind would choose one work-item. Emulate a
            # representative group instead; the projection regroups for each device.
            record.local_size = emulated_local_size(record.global_size)
        # Oclgrind's limits are nominal; the buffers are mapped, not read, and nothing is
        # read back: the statistics are the result.
        result = replay(record, device_limits=False, map_buffers=True, read_outputs=False)
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
