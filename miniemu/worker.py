"""Subprocess entry point: ``python -m miniemu.worker RECORD``.

Run by :class:`miniemu.oclgrind.OclgrindBackend` with ``LD_PRELOAD=liboclgrind-rt.so`` and
``OCLGRIND_PLUGINS=<our plugin>``: the preloaded runtime's ``cl*`` symbols win over
pyopencl's bundled ICD loader, so the replay runs inside Oclgrind and the plugin writes
its statistics to ``$CLPROJ_STATS_OUT``. Keeping this in a separate process is what lets
the caller kill a slow or crashing emulation without harming the app or the broker.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m miniemu.worker RECORD\n")
        return 2
    from clproj.errors import ClprojError
    from intercept.record import load
    from intercept.replay import replay

    try:
        result = replay(load(argv[0]), device_limits=False)  # Oclgrind's are nominal
    except ClprojError as exc:
        sys.stderr.write(f"clproj-worker-error: {exc}\n")
        return 3
    # Oclgrind's profiling event spans the emulation of the kernel alone (benchmarks use it).
    sys.stdout.write(json.dumps({"kernel_time_ns": result.time_ns}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
