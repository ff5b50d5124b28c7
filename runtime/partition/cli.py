"""``clproj advise-partition``: how to split a data-parallel launch across devices, and run it."""

from __future__ import annotations

import argparse
from typing import Any

from clproj.argtypes import count_at_least_1, positive_seconds
from clproj.console import emit_json, print_table, stderr
from clproj.errors import ClprojError
from clproj.miniemu.backend import GROUP_MODES


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "advise-partition",
        help="fractions of a launch's NDRange per device so that they finish together",
        description="Project each device's share of a data-parallel launch (work-group "
        "granular, transfers included), check from emulated store addresses that work-groups "
        "write disjoint regions, and recommend a split or the single best device (the "
        "projection: cold advice). With --calibrate, measure instead: trial runs of the split "
        "on the local devices, rebalanced until the shares finish together, compared with "
        "each device alone (calibrated advice). With --execute, calibrate, run the split for "
        "real and check it against a single-device run.",
    )
    p.add_argument("record", metavar="RECORD", help="a .clrec launch record")
    p.add_argument(
        "--devices",
        default="local",
        help="local (default: this machine's OpenCL devices) or a comma list of profile keys/paths",
    )
    p.add_argument(
        "--execute",
        action="store_true",
        help="run the advised split on the local devices and compare with one device",
    )
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="measure the advice on the local devices (trial runs under concurrency)",
    )
    p.add_argument(
        "--cold",
        action="store_true",
        help="with --execute: run the projection's split as is, without calibrating",
    )
    p.add_argument(
        "--repeat",
        type=count_at_least_1,
        default=5,
        help="interleaved timed rounds for calibration and --execute (median; default 5)",
    )
    p.add_argument(
        "--mode",
        default="single",
        choices=list(GROUP_MODES),
        help="emulation mode of the kernel profile (default: single)",
    )
    p.add_argument(
        "--timeout", type=positive_seconds, default=120.0, help="emulation time budget (s)"
    )
    from clproj.runtime.projection.objective import add_arguments

    add_arguments(p, "choose the single device and the split")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_advise)


def local_devices(spec: str) -> tuple[list[Any], list[Any]]:
    """(pyopencl devices, their profiles) for ``--devices`` when the split must run here."""
    from clproj.devices.discovery import opencl_devices
    from clproj.runtime.partition.advisor import profile_for_live_device

    cl_devs = opencl_devices()
    pairs = [(d, profile_for_live_device(d, measure_missing=True)) for d in cl_devs]
    if spec != "local":
        wanted = [k.strip() for k in spec.split(",") if k.strip()]
        chosen = []
        for key in wanted:
            hit = [(d, p) for d, p in pairs if key in (p.key, p.key.split("@")[0])]
            if not hit:
                raise ClprojError(
                    f"device {key!r} is not a local OpenCL device",
                    "--execute and --calibrate run on this machine: `clproj devices --profiles` lists its keys",
                )
            chosen.append(hit[0])
        pairs = chosen
    return [d for d, _ in pairs], [p for _, p in pairs]


def run_advise(args: argparse.Namespace) -> int:
    from clproj.intercept.record import load
    from clproj.runtime.partition.advisor import advise, calibrate, execute_split
    from clproj.runtime.projection import device_set

    record = load(args.record)
    measure = (args.execute and not args.cold) or args.calibrate
    cl_devs: list[Any] = []
    if args.execute or args.calibrate or args.devices == "local":
        cl_devs, profiles = local_devices(args.devices)
    else:
        profiles = device_set.resolve(args.devices)
    with stderr.status(f"emulating {record.kernel}: kernel profile and store ranges..."):
        from clproj.runtime.projection.objective import from_args

        obj = from_args(args)
        advice = advise(
            record,
            profiles,
            mode=args.mode,
            timeout_s=args.timeout,
            objective=obj.name,
            deadline_s=obj.deadline_s,
            max_slowdown=obj.max_slowdown,
        )
    if (args.execute or args.calibrate) and not advice.safety.ok:
        raise ClprojError(
            f"{record.kernel} may not be split: {advice.safety.reason}",
            f"run it on one device ({advice.best_single})",
        )
    result = cal = runner = None
    if measure or args.execute:
        from clproj.runtime.partition.execution import SplitRunner

        runner = SplitRunner(record, advice.safety, advice.upload_args, cl_devs)
    if measure:
        with stderr.status("calibrating: trial runs of the split and of each device alone..."):
            cal = calibrate(record, advice, cl_devs, repeat=args.repeat, runner=runner)
    if args.execute:
        # The balanced split is run (and checked) even when calibration prefers one device:
        # --execute asks whether the split is correct and what it costs.
        counts = cal.split_counts if cal is not None else None
        with stderr.status("running the split and the single-device reference..."):
            result = execute_split(
                record, advice, cl_devs, counts=counts, repeat=args.repeat, runner=runner
            )
    if args.json:
        emit_json(
            {
                "advice": advice.to_dict(),
                "calibration": cal and cal.to_dict(),
                "execution": result and result.to_dict(),
            }
        )
        return 0 if result is None or result.matches else 1
    _print(advice, result, cal)
    return 0 if result is None or result.matches else 1


def _print(advice: Any, result: Any, cal: Any = None) -> None:
    from clproj.console import fmt_time

    s = advice.safety
    print(
        f"{advice.kernel}: {s.slabs} slabs along dimension {s.dim} "
        f"({s.groups_per_slab} work-group(s) each); split safe: {'yes' if s.ok else 'no'} "
        f"- {s.reason}"
    )

    def joules(v: float | None) -> str:
        return "-" if v is None else f"{v:.3g} J"

    rows = []
    for i, key in enumerate(advice.devices):
        sh = advice.shares[i] if advice.shares else None
        one_j = advice.single_j.get(key)
        rows.append(
            (
                key,
                fmt_time(advice.single_s[key]),
                joules(one_j),
                "-" if one_j is None else f"{one_j / advice.single_s[key]:.3g} W",
                f"{sh.fraction:.1%}" if sh else "-",
                f"{sh.slabs}" if sh else "-",
                fmt_time(sh.kernel_s) if sh and sh.slabs else "-",
                fmt_time(sh.h2d_s + sh.d2h_s) if sh and sh.slabs else "-",
                fmt_time(sh.total_s) if sh and sh.slabs else "-",
                joules(sh.energy_j) if sh and sh.slabs else "-",
                f"{sh.power_w:.3g} W" if sh and sh.slabs and sh.power_w is not None else "-",
                sh.bound if sh else "-",
            )
        )
    print_table(
        [
            "device",
            "alone",
            "alone energy",
            "alone power",
            "share",
            "slabs",
            "kernel",
            "transfers",
            "share total",
            "share energy",
            "share power",
            "bound",
        ],
        rows,
        title=f"projected partition (cold advice, by {advice.objective}; energy: kernels "
        "only, transfers not priced)",
    )
    if advice.explanation_note:
        print(f"note: {advice.explanation_note}")
    print(advice.explanation)
    if cal is not None:
        rows = [
            (
                key,
                fmt_time(cal.single_s[i]),
                f"{cal.split_counts[i] / max(1, cal.slabs):.1%}",
                str(cal.split_counts[i]),
                (
                    f"{cal.trials[-1].counts[i]} slabs: {cal.trials[-1].finish_s[i] * 1e3:.1f} ms"
                    if cal.trials
                    else "-"
                ),
                f"{cal.fractions[i]:.1%}",
            )
            for i, key in enumerate(cal.devices)
        ]
        print_table(
            ["device", "alone (median)", "balanced share", "slabs", "last trial", "chosen"],
            rows,
            title="calibrated partition (measured)",
        )
        print(cal.explanation)
    if result is not None:
        print(
            f"measured: split {result.wall_s * 1e3:.1f} ms "
            f"({', '.join(f'{f:.1%}' for f in result.fractions)}), "
            f"{result.reference_device} alone {result.reference_wall_s * 1e3:.1f} ms; "
            f"outputs {'identical to' if result.identical else ('match' if result.matches else 'DIFFER from')} "
            f"the single-device run"
            + ("" if result.identical else f" (max rel. diff {result.max_rel_diff:.2e})")
        )
