"""``clproj project``: projected time, bound and rank of one kernel on every device."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from clproj.console import emit_json, print_table, stderr
from clproj.errors import ClprojError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "project",
        help="project a kernel (launch record or kernel profile) onto devices and rank them",
        description="Mini-emulate a launch record (or read a kernel profile JSON) and project its "
        "time on each device with the compute/global/local bound model.",
    )
    p.add_argument("target", metavar="RECORD|PROFILE", help="a .clrec launch record or a kernel-profile .json")
    p.add_argument("--devices", default="local",
                   help="local (default), measured, all, or a comma list of profile keys/paths")
    p.add_argument("--mode", default="single", choices=["single", "quick", "full"],
                   help="emulation mode when TARGET is a record (default: single)")
    p.add_argument("--timeout", type=float, default=120.0, help="emulation time budget in seconds")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_project)


def load_kernel_profile(target: str, mode: str = "single", timeout_s: float = 120.0) -> dict[str, Any]:
    """A kernel-profile dict from a record (emulated now) or a profile file."""
    if not os.path.exists(target):
        raise ClprojError(f"{target}: no such file", "pass a .clrec record (see `clproj records DIR`) or a profile .json")
    if target.endswith(".json"):
        with open(target, encoding="utf-8") as fh:
            doc = json.load(fh)
        if doc.get("format") != "clproj.kernel-profile":
            raise ClprojError(f"{target}: field format is {doc.get('format')!r}, not 'clproj.kernel-profile'",
                              "pass a kernel profile written by `clproj emulate --json`")
        return doc
    import miniemu
    from intercept.record import load

    record = load(target)
    with stderr.status(f"mini-emulating {record.kernel} ({mode}) in Oclgrind..."):
        profile = miniemu.emulate(record, mode=mode, timeout_s=timeout_s)
    return profile.to_dict()


def run_project(args: argparse.Namespace) -> int:
    from runtime import device_set
    from runtime.projection import rank

    profile = load_kernel_profile(args.target, args.mode, args.timeout)
    ranked = rank(profile, device_set.resolve(args.devices))
    if args.json:
        emit_json({"kernel": profile.get("kernel"), "recommended": ranked[0].device_key,
                   "projections": [p.to_dict() for p in ranked]})
        return 0
    best = ranked[0].time_s
    print_table(
        ["rank", "device", "kind", "projected", "x best", "bound", "compute", "global", "local", "occupancy"],
        [
            (i + 1, p.device_key, p.device_kind, _fmt_time(p.time_s), round(p.time_s / best, 2), p.bound,
             _fmt_time(p.t_compute), _fmt_time(p.t_global), _fmt_time(p.t_local),
             f"{p.occupancy.groups_per_cu} grp/CU ({p.occupancy.limiter})")
            for i, p in enumerate(ranked)
        ],
        title=f"projection of {profile.get('kernel')}",
    )
    print(f"recommended device: {ranked[0].device_key} ({ranked[0].device_name})")
    return 0


def _fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"
