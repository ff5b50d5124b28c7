"""Child process of ``clproj replay``: ``python -m clproj.intercept.replay_worker RECORD --out FILE``.

Started by :func:`intercept.replay.replay_isolated`, which kills it after the time budget:
keeping the OpenCL driver in a separate process is what turns a driver crash or an endless
kernel into a one-line error instead of a dead or hung CLI. The result (or the
``ClprojError`` that stopped the replay) is written as JSON to ``--out``: the driver may
print anything on stdout, so stdout is not the channel.
"""

from __future__ import annotations

import argparse
import json
import sys

from clproj.atomic import write_atomic


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m clproj.intercept.replay_worker")
    p.add_argument("record")
    p.add_argument("--out", required=True)
    p.add_argument("--device", default=None)
    p.add_argument("--verify", action="store_true")
    args = p.parse_args(argv)

    from clproj.errors import ClprojError
    from clproj.intercept.record import load
    from clproj.intercept.replay import MAX_WORK_ITEMS, replay

    try:
        device = None
        if args.device is not None:
            from clproj.devices.discovery import select_device

            device = select_device(args.device)
        res = replay(
            load(args.record),
            device,
            check_outputs=args.verify,
            max_work_items=MAX_WORK_ITEMS,
        )
        doc = {
            "ok": True,
            "device": res.device,
            "time_ns": res.time_ns,
            "matches": res.matches,
            "mismatched": res.mismatched,
        }
    except ClprojError as exc:
        doc = {"ok": False, "cause": exc.cause, "fix": exc.fix}
    write_atomic(args.out, json.dumps(doc).encode())  # a killed worker leaves no torn result
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
