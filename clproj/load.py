"""This machine's cores and how busy they are right now (shared by live emulation in project
mode, profile measuring and the partition advisor's core-sharing rule)."""

from __future__ import annotations

import os
import time


def idle_cores(window_s: float = 0.25) -> float:
    """Cores idle right now: idle time over a short window of /proc/stat, in cores.

    The 1-minute load average lags by tens of seconds, so an app that has just started
    keeping every core busy still looks idle through it (and one that just stopped still
    looks busy); the idle counters do not lag. Returns the load-average estimate where
    /proc/stat is unavailable.
    """

    def sample() -> tuple[float, float]:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = [float(x) for x in fh.readline().split()[1:]]
        return fields[3] + (fields[4] if len(fields) > 4 else 0.0), sum(fields)

    try:
        idle0, total0 = sample()
        time.sleep(window_s)
        idle1, total1 = sample()
    except (OSError, ValueError, IndexError):
        try:
            return (os.cpu_count() or 1) - os.getloadavg()[0]
        except OSError:
            return 0.0
    if total1 <= total0:
        return 0.0
    return (os.cpu_count() or 1) * (idle1 - idle0) / (total1 - total0)


def host_cores() -> int:
    """The cores this process may run on (its affinity mask): the pool a CPU device of this
    machine draws from, whatever compute units its driver was limited to
    (``POCL_MAX_PTHREAD_COUNT``)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
