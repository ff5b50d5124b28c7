"""``clproj bench``: measure the ground-truth device time of every app on every device."""

from __future__ import annotations

import argparse
from typing import Any

from clproj.errors import ClprojError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bench",
        help="measure every benchmark app's kernel times on every OpenCL device (ground truth)",
        description="Run the benchmark apps (benchmarks/apps) on each OpenCL device, verify their "
        "outputs against numpy, and write one versioned results file per device "
        "(format clproj.bench-results, docs/benchmarks.md).",
    )
    p.add_argument(
        "--devices", help="comma-separated device indices or name substrings (default: all)"
    )
    p.add_argument("--apps", help="comma-separated app names (default: all; see --list)")
    p.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="timed runs per app; the median is reported (default 5)",
    )
    p.add_argument("--warmup", type=int, default=1, help="untimed runs before timing (default 1)")
    p.add_argument(
        "--size", default="paper", choices=["paper", "small"], help="input sizes (default: paper)"
    )
    p.add_argument(
        "-o",
        "--output",
        default=None,
        help="results file; {key} and {size} are replaced (default benchmarks/results/bench-{key}-{size}.json). "
        "With several devices the name must contain {key}.",
    )
    p.add_argument("--list", action="store_true", help="list the apps and exit")
    p.add_argument(
        "--energy",
        action="store_true",
        help="measure energy per launch instead of times: each launch shape repeated for "
        ">= 2 s under the NVIDIA GPU's energy counter (clproj.energy-results, every raw "
        "reading kept; docs/energy.md); -o is then the results file "
        "(default benchmarks/results/energy-{size}.json)",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    p.set_defaults(func=run)


def _run_energy(args: argparse.Namespace) -> int:
    """``clproj bench --energy``: the apps' energy windows (benchmarks/energy_run.py)."""
    from clproj.benchmarks import energy_run

    argv = ["--size", args.size, "-o", args.output or f"benchmarks/results/energy-{args.size}.json"]
    if args.apps:
        argv += ["--apps", args.apps]
    if args.devices:
        argv += ["--device", args.devices]
    return energy_run.main(argv)


def _select_apps(spec: str | None) -> list[Any]:
    from clproj.benchmarks.apps import APPS

    if not spec:
        return list(APPS.values())
    out = []
    for name in [s.strip() for s in spec.split(",") if s.strip()]:
        if name not in APPS:
            raise ClprojError(f"unknown app {name!r}", f"choose from: {', '.join(APPS)}")
        out.append(APPS[name])
    return out


def _select_devices(spec: str | None) -> list[Any]:
    from clproj.devices.discovery import opencl_devices, select_device

    if not spec:
        return opencl_devices()
    return [select_device(s.strip()) for s in spec.split(",") if s.strip()]


def run(args: argparse.Namespace) -> int:
    from clproj.console import emit_json, print_table, stderr, track

    apps = _select_apps(args.apps)
    if args.energy and not args.list:
        return _run_energy(args)
    if args.list:
        rows = [
            (
                a.name,
                "yes" if a.paper else "",
                str(a.sizes.get("paper", a.sizes.get("default"))),
                a.stresses,
            )
            for a in apps
        ]
        if args.json:
            emit_json(
                [
                    {
                        "name": a.name,
                        "paper": a.paper,
                        "sizes": a.sizes,
                        "stresses": a.stresses,
                        "description": a.description,
                    }
                    for a in apps
                ]
            )
        else:
            print_table(["app", "paper", "size", "stresses"], rows, title="benchmark apps")
        return 0
    if args.repeat < 1 or args.warmup < 0:
        raise ClprojError("--repeat must be >= 1 and --warmup >= 0", "e.g. --repeat 5 --warmup 1")
    from clproj.benchmarks import harness

    devices = _select_devices(args.devices)
    template = args.output or harness.DEFAULT_OUTPUT
    if len(devices) > 1 and "{key}" not in template:
        raise ClprojError(
            f"{len(devices)} devices but one output file {template!r}",
            "put {key} in the name (e.g. -o out/bench-{key}.json) or pick one device with --devices",
        )
    references: dict = {}
    results = []
    failed = 0
    for dev in devices:
        key, path = harness.results_target(dev, template, args.size)  # before the apps run
        res = _bench_with_bar(harness, dev, apps, args, references, track, key)
        harness.write_results(res, path)
        results.append(res)
        failed += sum(1 for a in res["apps"].values() if not a["verified"] and not a["skipped"])
        stderr.print(f"wrote {path}", highlight=False)
    if args.json:
        emit_json(results)
    else:
        for res in results:
            rows = []
            for name, a in res["apps"].items():
                status = "ok" if a["verified"] else ("skipped" if a["skipped"] else "FAIL")
                ks = a["kernels"]
                rows.append(
                    (
                        name,
                        status,
                        sum(k["n_launches"] for k in ks),
                        None if a["total_ns"] is None else a["total_ns"] / 1e6,
                        max((k["spread"] for k in ks), default=None),
                        a["skipped"] or (a["error"] or "")[:80],
                    )
                )
            print_table(
                ["app", "verified", "launches", "device ms", "max spread", "note"],
                rows,
                title=f"{res['device']['key']}: {res['device']['name']} ({res['size']} sizes, median of {res['repeat']})",
            )
    return 1 if failed else 0


def _bench_with_bar(
    harness: Any,
    dev: Any,
    apps: list[Any],
    args: argparse.Namespace,
    references: dict,
    track: Any,
    key: str,
) -> dict:
    """One device, with a per-app progress bar."""
    it = iter(track(apps, f"  {key}"))
    done = {"n": 0}

    def on_app(_name: str) -> None:
        next(it, None)
        done["n"] += 1

    res = harness.bench_device(
        dev, apps, args.size, args.repeat, args.warmup, references, on_app=on_app, key=key
    )
    for _ in it:  # finish the bar
        pass
    return res
