"""The end-of-run summary of route mode: launches per (kernel, device) and their time.

Why: the user of ``clproj run --mode route`` sees where each kernel ran and how long it
took (stderr, or a file for ``clproj run`` to print); launches are folded in as they
complete, so a long run does not keep every request.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from clproj import settings
from clproj.atomic import write_atomic

HARVEST_EVERY = 4096  # launches kept before the completed ones are folded in
# In the run's folder (CLPROJ_RUN_DIR): how many node failures the app's client lived
# through, for `clproj run` to report beside the app's exit status.
RECOVERIES_FILE = "node-failures"


class LaunchStats:
    """Launches not yet summed, and the sums per (kernel, device)."""

    def __init__(self) -> None:
        self.launches: list[tuple[str, str, Any]] = []  # (kernel, device, req) not yet summed
        self.stats: dict[tuple[str, str], list[int]] = {}  # launches, timed, total_ns

    def add(self, kernel: str, dev: str, req: Any, dead: Any) -> None:
        """One launch (``req``: its request); ``dead``: the devices lost so far."""
        self.launches.append((kernel, dev, req))
        if len(self.launches) >= HARVEST_EVERY:
            self.harvest(dead)

    def harvest(self, dead: Any) -> None:
        """Fold completed launches into the per-(kernel, device) summary."""
        keep = []
        for name, dev, req in self.launches:
            if not req.done:
                keep.append((name, dev, req))
                continue
            if dev in dead and req.res is None:  # lost with its node, replayed
                dev = f"{dev} (lost: replayed on a survivor)"
            s = self.stats.setdefault((name, dev or "?"), [0, 0, 0])
            s[0] += 1
            t = (req.res or {}).get("t")
            if isinstance(t, (int, float)):
                s[1] += 1
                s[2] += int(t * 1e9)
        self.launches = keep

    def write_summary(self, p: Any, split: Any) -> None:
        """Print (or write to CLPROJ_SUMMARY_FILE) the summary; ``p``: the client,
        ``split``: the split policy or None."""
        path = settings.get("CLPROJ_SUMMARY_FILE")
        names = {d.id: f"{d.id} {d.name}" for d in p.devices.values()}
        rows = [(k, names.get(dev, dev), *v) for (k, dev), v in sorted(self.stats.items())]
        if path:
            with open(path, "w") as f:
                for k, dev, n, timed, total in rows:
                    f.write(f"{k}\t{dev}\t{n}\t{timed}\t{total}\n")
        elif settings.get("CLPROJ_SUMMARY"):
            for k, dev, n, timed, total in rows:
                mean = total / timed / 1e3 if timed else 0.0
                print(
                    f"clproj: route {k:32s} {n:10d} {total / 1e6:14.3f} {mean:12.3f}  {dev}",
                    file=sys.stderr,
                )
        if p.recoveries:
            # Whether the run recovered is the app's exit status to say, known only after
            # the app: `clproj run` says it (intercept.cli); alone, the count is the news.
            run_dir = settings.get("CLPROJ_RUN_DIR")
            if run_dir:
                write_atomic(os.path.join(run_dir, RECOVERIES_FILE), str(p.recoveries).encode())
            else:
                print(
                    f"clproj: route: {p.recoveries} node failure(s) during the run; their "
                    "launches were replayed on the devices left",
                    file=sys.stderr,
                )
        if split is not None and not settings.get("CLPROJ_SPLIT_FILE"):
            from clproj.runtime.partition.route_policy import (
                print_summary,  # else `clproj run` prints them
            )

            print_summary(split)
        # the observe-mode summary (C, runs after us) has nothing to say in route mode
        os.environ.pop("CLPROJ_SUMMARY_FILE", None)
        os.environ["CLPROJ_SUMMARY"] = "0"
