"""``clproj devices``: the OpenCL devices this machine sees, with NVML data for NVIDIA GPUs."""

from __future__ import annotations

import argparse
import os

from clproj.console import emit_json, print_table
from clproj.devices import nvml
from clproj.devices.discovery import list_devices
from clproj.errors import ClprojError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "devices",
        help="list OpenCL devices (and NVML data for NVIDIA GPUs)",
        description="List every OpenCL platform/device visible; the index is what --device N means.",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--profiles",
        action="store_true",
        help="list every known device profile (spec sheets and measured) and which one each "
        "local device resolves to (measuring a device that has none, once)",
    )
    p.add_argument(
        "--remeasure",
        action="store_true",
        help="with --profiles: measure the local devices that have no committed profile "
        "again, replacing their cached profiles",
    )
    p.add_argument(
        "--no-measure",
        action="store_true",
        help="with --profiles: never measure; an unprofiled device shows its generic profile",
    )
    p.add_argument(
        "--sheet",
        metavar="FILE",
        help="build the device profile of a device sheet (clproj.device-sheet TOML, "
        "docs/formats.md section 4) and print it; usable as --devices FILE elsewhere",
    )
    p.add_argument(
        "-o", "--output", metavar="PROFILE.json", help="with --sheet: write the profile here"
    )
    p.set_defaults(func=run)


def show_sheet(path: str, output: str | None, as_json: bool) -> int:
    """The profile a device sheet builds into: its headline numbers (or the whole document
    with ``--json``), written to ``output`` when given, so a user sees what the projection
    will assume before using the sheet in ``--devices``."""
    from clproj.devices.profile import DeviceProfile
    from clproj.devices.sheet import profile_from_sheet

    prof = DeviceProfile(profile_from_sheet(path), path)
    if output:
        # a folder (existing, or named with a trailing /) gets <key>.json inside it
        if output.endswith(os.sep) or os.path.isdir(output):
            output = os.path.join(output, f"{prof.key}.json")
        try:
            prof.save(output)
        except OSError as exc:
            raise ClprojError(
                f"cannot write the profile to {output}: {exc.strerror or exc}",
                "pass -o a path you may write (a folder gets KEY.json inside it)",
            ) from None
    if as_json:
        emit_json(prof.to_dict())
        return 0
    mem = prof.data["memory"]
    print_table(
        [
            "key",
            "device",
            "kind",
            "CUs",
            "MHz",
            "fp32 Gflop/s",
            "fp64 Gflop/s",
            "sheet GB/s",
            "read GB/s",
            "copy GB/s",
        ],
        [
            (
                prof.key,
                prof.name,
                prof.kind,
                prof.compute_units,
                prof.clock_mhz,
                2 * prof.throughput("fp32_fma") / 1e9,
                2 * prof.throughput("fp64_fma") / 1e9,
                mem["peak_bandwidth_gbs"],
                prof.peak("global_read") / 1e9,
                prof.peak("global_copy") / 1e9,
            )
        ],
        title=f"device profile built from {path}" + (f" (written to {output})" if output else ""),
    )
    return 0


def list_profiles(as_json: bool, measure: bool = True, remeasure: bool = False) -> int:
    """Every shipped profile, whether its numbers were measured (where, when) or are spec,
    and the profile each local device resolves to (devices.local)."""
    from clproj.devices.local import resolve_all
    from clproj.devices.profile import known_profiles

    local = [lp.to_dict() for lp in resolve_all(measure_missing=measure, remeasure=remeasure)]
    rows = []
    for prof in known_profiles():
        src = prof.data["source"]
        prov = prof.data["provenance"].values()
        rows.append(
            {
                "key": prof.key,
                "name": prof.name,
                "kind": prof.kind,
                "source": prof.source_kind,
                "host": src.get("host"),
                "date": src.get("date"),
                "mode": src.get("mode"),
                "measured_fields": sum(1 for v in prov if v == "measured"),
                "spec_fields": sum(1 for v in prov if v == "spec"),
                "derived_fields": sum(1 for v in prov if v.startswith("derived")),
                "fp32_fma_gops": prof.throughput("fp32_fma") / 1e9,
                "read_peak_gbs": prof.peak("global_read") / 1e9,
                "path": prof.path,
            }
        )
    if as_json:
        emit_json({"profiles": rows, "local": local})
        return 0
    _print_profiles(rows)
    print_table(
        ["#", "device", "profile", "resolved from", "confidence", "file"],
        [
            (
                lp["index"],
                lp["device"],
                lp["key"],
                lp["how"],
                "LOW (generic: " + lp["note"] + ")" if lp["low_confidence"] else "normal",
                lp["path"] or "",
            )
            for lp in local
        ],
        title="local devices: committed measured > cached > measured now > generic",
    )
    return 0


def _print_profiles(rows: list[dict]) -> None:
    print_table(
        [
            "key",
            "device",
            "kind",
            "numbers",
            "where / when",
            "meas/spec/derived",
            "fma Gop/s",
            "read GB/s",
        ],
        [
            (
                r["key"],
                r["name"],
                r["kind"],
                r["source"],
                f"{r['host']} {r['date']} ({r['mode']})" if r["host"] else "vendor sheets",
                f"{r['measured_fields']}/{r['spec_fields']}/{r['derived_fields']}",
                r["fp32_fma_gops"],
                r["read_peak_gbs"],
            )
            for r in rows
        ],
        title="device profiles",
    )


def run(args: argparse.Namespace) -> int:
    if args.output and not args.sheet:
        raise ClprojError("-o/--output is for --sheet", "add --sheet FILE or drop -o")
    if args.sheet:
        return show_sheet(args.sheet, args.output, args.json)
    if args.profiles:
        if args.remeasure and args.no_measure:
            raise ClprojError("--remeasure and --no-measure contradict", "pick one")
        return list_profiles(args.json, measure=not args.no_measure, remeasure=args.remeasure)
    devices = list_devices()
    records = []
    for d in devices:
        rec = d.to_dict()
        if d.type == "GPU" and "NVIDIA" in d.vendor.upper():
            rec["nvml"] = nvml.match(d.name, d.pci_bus_id)
        records.append(rec)
    if args.json:
        emit_json({"devices": records})
        return 0
    print_table(
        ["#", "device", "platform", "type", "CUs", "MHz", "global MiB", "local KiB", "max WG"],
        [
            (
                d.index,
                d.name,
                d.platform,
                d.type,
                d.compute_units,
                d.clock_mhz,
                d.global_mem_bytes // 2**20,
                d.local_mem_bytes // 1024,
                d.max_work_group_size,
            )
            for d in devices
        ],
        title="OpenCL devices",
    )
    nv_rows = [
        (
            r["index"],
            r["name"],
            n.get("sm_clock_mhz"),
            n.get("max_sm_clock_mhz"),
            n.get("max_mem_clock_mhz"),
            n.get("memory_bus_width_bits"),
            n.get("power_limit_w"),
            f"gen{n.get('pcie_gen')} x{n.get('pcie_width')}",
        )
        for r in records
        if (n := r.get("nvml"))
    ]
    if nv_rows:
        print_table(
            ["#", "device", "SM MHz", "max SM MHz", "max mem MHz", "bus bits", "power W", "PCIe"],
            nv_rows,
            title="NVML",
        )
    return 0
