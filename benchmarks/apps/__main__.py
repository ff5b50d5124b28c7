"""pyopencl host for the benchmark apps: ``python -m clproj.benchmarks.apps APP [APP...]``.

Runs each app's plan on one OpenCL device, verifies it against numpy and prints PASS or
FAIL, like the C hosts do. It is an ordinary OpenCL program: ``clproj run`` can preload
the shim into it exactly as into any unmodified application.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from clproj.benchmarks.apps import APPS, get_app
    from clproj.benchmarks.apps.execute import execute

    parser = argparse.ArgumentParser(prog="python -m clproj.benchmarks.apps", description=__doc__)
    parser.add_argument("apps", nargs="+", help=f"app names: {', '.join(sorted(APPS))}")
    parser.add_argument(
        "--size", default="small", help="size label (small, paper/default) or an integer"
    )
    parser.add_argument(
        "--device", default=None, help="device index or name (clproj devices order)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs of each app")
    args = parser.parse_args(argv)

    import pyopencl as cl

    from clproj.devices.discovery import select_device

    device = select_device(args.device)
    queue = cl.CommandQueue(cl.Context([device]))
    size = int(args.size) if args.size.isdigit() else args.size
    failed = 0
    for name in args.apps:
        app = get_app(name)
        plan = app.plan(size)
        result = execute(plan, queue, repeat=args.repeat)
        try:
            app.check(plan, result.outputs)
            status = "PASS"
        except AssertionError as exc:
            status, failed = f"FAIL: {exc}", failed + 1
        ms = sum(result.launch_times_ns) / 1e6
        print(
            f"{name}: {len(plan.launches)} launches, {ms:.3f} ms device time on {device.name.strip()}: {status}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
