"""``clproj devices``: the OpenCL devices this machine sees, with NVML data for NVIDIA GPUs."""

from __future__ import annotations

import argparse

from clproj.console import emit_json, print_table
from devices import nvml
from devices.discovery import list_devices


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "devices",
        help="list OpenCL devices (and NVML data for NVIDIA GPUs)",
        description="List every OpenCL platform/device visible; the index is what --device N means.",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
