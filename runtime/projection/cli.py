"""``clproj project``: projected time, energy, bound and rank of one kernel on every device."""

from __future__ import annotations

import argparse
import os
from typing import Any

from clproj.argtypes import positive_seconds
from clproj.console import emit_json, fmt_time, print_table, stderr
from clproj.errors import ClprojError
from clproj.miniemu.backend import MODES


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "project",
        help="project a kernel (launch record or kernel profile) onto devices and rank them",
        description="Mini-emulate a launch record (or read a kernel profile JSON) and project its "
        "time on each device with the compute/global/local bound model.",
    )
    p.add_argument(
        "target", metavar="RECORD|PROFILE", help="a .clrec launch record or a kernel-profile .json"
    )
    p.add_argument(
        "--devices",
        default=None,
        help="local, measured, all, or a comma list of profile keys/paths (default: "
        "CLPROJ_DEVICES, else local)",
    )
    p.add_argument(
        "--mode",
        default="single",
        choices=list(MODES),
        help="emulation mode when TARGET is a record (default: single; bounded: within an "
        "instruction budget, as project mode emulates)",
    )
    p.add_argument(
        "--timeout", type=positive_seconds, default=120.0, help="emulation time budget in seconds"
    )
    p.add_argument(
        "--objective",
        default="time",
        choices=["time", "energy", "edp"],
        help="rank by projected time (default), energy, or energy x delay; energy and "
        "power come from each profile's power section or its sheet's TDP (low confidence)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_project)


def load_kernel_profile(
    target: str, mode: str = "single", timeout_s: float = 120.0
) -> tuple[dict[str, Any], str | None]:
    """A kernel-profile dict from a record (emulated now) or a profile file, and what the
    record says of the launch's shape (:func:`intercept.size_queries.note`; None: nothing,
    or a profile file)."""
    if not os.path.exists(target):
        raise ClprojError(
            f"{target}: no such file",
            "pass a .clrec record (see `clproj records DIR`) or a profile .json",
        )
    if target.endswith(".json"):
        return read_kernel_profile(target), None
    from clproj import miniemu
    from clproj.intercept.record import load
    from clproj.intercept.size_queries import record_note

    record = load(target)
    from clproj.runtime.projection.model import record_footprint

    with stderr.status(f"mini-emulating {record.kernel} ({mode}) in Oclgrind..."):
        profile = miniemu.emulate(record, mode=mode, timeout_s=timeout_s).to_dict()
    profile["launch"]["footprint_bytes"] = record_footprint(record)
    return profile, record_note(record)


MAX_PROFILE_BYTES = 64 << 20


def read_kernel_profile(path: str) -> dict[str, Any]:
    """A kernel-profile JSON file, validated (miniemu.profile.validate_profile).

    Profiles are files users copy between machines: the read is bounded (a FIFO or
    /dev/zero named ``x.json`` is refused, not waited on), bad JSON and every bad field
    become one ClprojError naming the field."""
    from clproj.miniemu.profile import validate_profile
    from clproj.untrusted import read_json_file

    fix = "pass a kernel profile written by `clproj emulate --json`"
    doc = read_json_file(path, "kernel profile", MAX_PROFILE_BYTES, fix)
    try:
        return validate_profile(doc)
    except ClprojError as exc:
        raise ClprojError(f"{path}: {exc.cause}", exc.fix) from None


def _fmt_joules(j: float | None) -> str:
    if j is None:
        return "-"
    for unit, scale in (("J", 1.0), ("mJ", 1e-3), ("uJ", 1e-6)):
        if j >= scale:
            return f"{j / scale:.3g} {unit}"
    return f"{j / 1e-9:.3g} nJ"


def _fmt_power(pw: Any) -> str:
    if pw.power_w is None:
        return "-"
    return f"{pw.power_w:.0f} W" + (" (low)" if pw.confidence == "low" else "")


def run_project(args: argparse.Namespace) -> int:
    from clproj.runtime.projection import device_set
    from clproj.runtime.projection.model import rank
    from clproj.runtime.projection.power import project_power, rank_by

    profile, shape_note = load_kernel_profile(args.target, args.mode, args.timeout)
    if args.devices is None:  # the setting --devices mirrors (docs/settings.md)
        from clproj import settings

        args.devices = settings.get("CLPROJ_DEVICES")
    devices = device_set.resolve(args.devices)
    low = {d.key for d in devices if d.low_confidence}
    by_key = {d.key: d for d in devices}
    projected = rank(profile, devices, profile["launch"].get("footprint_bytes"))
    powers = {p.device_key: project_power(p, profile, by_key[p.device_key]) for p in projected}
    ranked = rank_by(args.objective, projected, powers)
    # rank_by puts devices without power last: if the first has none, none has.
    if args.objective != "time" and powers[ranked[0].device_key].energy_j is None:
        raise ClprojError(
            f"no device of {args.devices!r} has a power projection for --objective {args.objective}",
            "add a device with a power section or a sheet TDP (docs/projection.md "
            '"Power and energy"), or rank by time',
        )
    if args.json:
        emit_json(
            {
                "kernel": profile.get("kernel"),
                "objective": args.objective,
                "recommended": ranked[0].device_key,
                **({"note": shape_note} if shape_note else {}),
                "projections": [
                    p.to_dict()
                    | {
                        "energy_j": powers[p.device_key].energy_j,
                        "power_w": powers[p.device_key].power_w,
                        "power": powers[p.device_key].to_dict(),
                    }
                    | ({"low_confidence": True} if p.device_key in low else {})
                    for p in ranked
                ],
            }
        )
        return 0
    best = min(p.time_s for p in ranked)
    print_table(
        [
            "rank",
            "device",
            "kind",
            "projected",
            "x fastest",
            "energy",
            "power",
            "bound",
            "compute",
            "global",
            "local",
            "occupancy",
        ],
        [
            (
                i + 1,
                p.device_key
                + (" (LOW confidence: generic profile)" if p.device_key in low else ""),
                p.device_kind,
                fmt_time(p.time_s),
                round(p.time_s / best, 2),
                _fmt_joules(powers[p.device_key].energy_j),
                _fmt_power(powers[p.device_key]),
                p.bound,
                fmt_time(p.t_compute),
                fmt_time(p.t_global),
                fmt_time(p.t_local),
                f"{p.occupancy.groups_per_cu} grp/CU ({p.occupancy.limiter})",
            )
            for i, p in enumerate(ranked)
        ],
        title=f"projection of {profile.get('kernel')} (ranked by {args.objective})",
    )
    if any(pw.power_w is not None and pw.confidence == "low" for pw in powers.values()):
        print("power (low): the spec rule from the sheet's TDP, not a measurement")
    if shape_note:
        print(f"note: {shape_note}")
    print(f"recommended device: {ranked[0].device_key} ({ranked[0].device_name})")
    return 0
