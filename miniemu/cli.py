"""``clproj emulate RECORD``: mini-emulate a launch record and print its kernel profile."""

from __future__ import annotations

import argparse

from clproj.argtypes import positive_seconds
from clproj.console import emit_json, print_table, stdout
from clproj.miniemu.backend import MODES

WARPS = ("8", "16", "32", "64")
SEGMENTS = ("32", "64", "128")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "emulate",
        help="mini-emulate a launch record in Oclgrind and print its kernel profile",
        description="Run part (single/quick) or all (full) of a recorded launch in Oclgrind, in a "
        "time-boxed subprocess, and print device-independent statistics scaled to the NDRange.",
    )
    p.add_argument("record", metavar="RECORD", help="a .clrec launch record")
    p.add_argument(
        "--mode", choices=MODES, default="single", help="work-groups to emulate (default single)"
    )
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=60.0,
        metavar="S",
        help="time budget in seconds (default 60)",
    )
    p.add_argument(
        "--budget",
        default=None,
        metavar="B",
        help="bounded mode: backstop seconds, or wall=S,instructions=N,work_items=N,probe_trips=N "
        "(default instructions=2e6,work_items=128,probe_trips=128; wall=30 is only a backstop)",
    )
    p.add_argument(
        "--json", action="store_true", help="print the kernel profile (docs/formats.md section 2)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from clproj import miniemu
    from clproj.console import stderr

    with stderr.status(f"mini-emulating ({args.mode}) in Oclgrind..."):
        profile = miniemu.emulate(
            args.record, mode=args.mode, timeout_s=args.timeout, budget=args.budget
        )
    if args.json:
        emit_json(profile.to_dict())
        return 0
    show(profile)
    return 0


def show(profile) -> None:
    """Readable tables: launch/emulation summary, instructions, memory, control flow."""
    la, em, pg, tot = profile.launch, profile.emulation, profile.per_group, profile.total
    print_table(
        ["field", "value"],
        [
            ("kernel", profile.kernel),
            (
                "NDRange",
                f"{la['global_size']} / local {la['local_size']}"
                + (" (chosen by emulator)" if la["local_size_was_null"] else ""),
            ),
            ("groups", la["num_groups"]),
            (
                "mode",
                f"{em['mode']} ({em['groups_emulated']} groups emulated, {em['wall_s']:.2f} s)",
            ),
            ("confidence", em["confidence"]),
            *(
                [("method (stopped by)", f"{em['method']} ({em.get('budget', '-')})")]
                if em.get("method")
                else []
            ),
            ("local bytes / group", pg["local"]["bytes_per_group"]),
            ("private bytes / work-item (est.)", pg["private_bytes_per_work_item"]),
        ],
        title="Kernel profile",
    )
    for flag in em["flags"]:
        stdout.print(f"  [yellow]flag:[/] {flag}", highlight=False)
    rows = [
        (k, pg["instructions"][k], tot["instructions"][k])
        for k in pg["instructions"]
        if tot["instructions"][k]
    ]
    print_table(["instruction class", "per group", "total"], rows, title="Dynamic instructions")
    g, loc = tot["global"], tot["local"]
    mem = [
        ("global load bytes", g["load_bytes"]),
        ("global store bytes", g["store_bytes"]),
        ("global atomics", g["atomic_accesses"]),
        ("local load+store bytes", loc["load_bytes"] + loc["store_bytes"]),
        ("barriers", tot["barriers"]),
        ("conditional branches", tot["branches"]["total"]),
    ]
    print_table(["total", "value"], mem, title="Memory and control")
    tx_rows = []
    for direction in ("load", "store"):
        for w in WARPS:
            tx_rows.append((direction, w, *[g["transactions"][direction][w][s] for s in SEGMENTS]))
    print_table(
        ["dir", "warp", *[f"{s} B seg" for s in SEGMENTS]],
        tx_rows,
        title="Global transactions (total)",
    )
    ctl = []
    for w in WARPS:
        ctl.append((w, tot["branches"]["warp_level"][w], tot["branches"]["divergent"][w]))
    print_table(["warp", "warp branches", "divergent"], ctl, title="Branch divergence (total)")
    banks = [
        (
            b,
            v["requests"],
            v["wavefronts"],
            round(v["wavefronts"] / v["requests"], 3) if v["requests"] else 0.0,
        )
        for b, v in loc["bank"].items()
    ]
    print_table(
        ["banks", "requests", "wavefronts", "degree"], banks, title="Local memory banks (total)"
    )
