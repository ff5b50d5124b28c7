"""``clproj profile-device``: measure a device profile, or compare two profiles side by side.

Runs with only pyopencl, numpy and rich importable (the GPU machine):
``PYTHONPATH=$PWD python3 -m clproj.cli profile-device --device 0 -o x.json``.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from clproj.console import emit_json, print_table, stderr, track
from clproj.errors import ClprojError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "profile-device",
        help="measure a device profile with OpenCL microbenchmarks, or --compare two profiles",
        description="Run the microbenchmark suite (global/local memory vs occupancy, instruction "
        "throughput per class, launch overhead, transfers) on one OpenCL device and write a "
        "clproj.device-profile JSON. Full mode takes a few minutes on a GPU, --quick under one.",
    )
    p.add_argument("--device", default=None, help="device index or name substring (clproj devices)")
    p.add_argument("--quick", action="store_true", help="fewer configurations, shorter timings")
    p.add_argument("--mode", choices=["tiny", "quick", "full"], help=argparse.SUPPRESS)
    p.add_argument("-o", "--output", help="write the profile here (JSON)")
    p.add_argument("--key", help="profile key (default: derived from device and platform)")
    p.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        help="print two profiles (paths or keys) side by side",
    )
    p.add_argument(
        "--power",
        action="store_true",
        help="run the power microbenchmarks (NVML on NVIDIA GPUs, RAPL on CPUs) and write "
        "every raw reading to -o (clproj.energy-results); no reader: a one-line refusal",
    )
    p.add_argument(
        "--power-fit",
        metavar="RESULTS",
        help="fit static-active power and energy per operation from a --power results file "
        'into --profile\'s power section, written to -o (docs/devices.md "Power fit")',
    )
    p.add_argument("--profile", help="with --power-fit: the profile (path or key) to extend")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _fmt(v: float | None, unit: float = 1.0) -> float | None:
    return None if v is None else v / unit


def summary_rows(prof: Any) -> list[tuple[str, Any, str]]:
    """(field, value, provenance) rows that describe a profile at a glance."""
    from clproj.devices.profile import INSTRUCTION_CLASSES

    rows: list[tuple[str, Any, str]] = [
        ("name", prof.name, prof.provenance("identity")),
        ("kind", prof.kind, prof.provenance("identity")),
        ("source", prof.source_kind, str(prof.data["source"].get("date") or "sheet")),
        ("compute units", prof.compute_units, prof.provenance("compute_units")),
        ("clock MHz", prof.clock_mhz, prof.provenance("clock_mhz")),
        ("warp width", prof.warp_width, prof.provenance("warp_width")),
        ("max work-items/CU", prof.max_work_items_per_cu, prof.provenance("occupancy")),
    ]
    for name in ("global_read", "global_write", "global_copy", "local"):
        rows.append((f"{name} peak GB/s", prof.peak(name) / 1e9, prof.provenance(f"curves.{name}")))
    rows.append(
        ("strided_read(8) GB/s", prof.strided_read(8) / 1e9, prof.provenance("curves.strided_read"))
    )
    tp = prof.data["throughput"]
    for cls in INSTRUCTION_CLASSES:
        if cls in tp:
            rows.append((f"{cls} Gop/s", tp[cls] / 1e9, prof.provenance(f"throughput.{cls}")))
    rows.append(
        ("launch overhead us", prof.launch_overhead_s * 1e6, prof.provenance("launch_overhead_s"))
    )
    rows.append(("h2d GB/s", prof.h2d_bytes_per_s / 1e9, prof.provenance("transfer")))
    rows.append(("d2h GB/s", prof.d2h_bytes_per_s / 1e9, prof.provenance("transfer")))
    return rows


def _short(prov: str) -> str:
    return "derived" if prov.startswith("derived") else prov


def compare(a: str, b: str, as_json: bool) -> int:
    from clproj.devices.profile import load_profile

    pa, pb = load_profile(a), load_profile(b)
    ra, rb = summary_rows(pa), summary_rows(pb)
    db = {r[0]: r for r in rb}
    fields = [r[0] for r in ra] + [r[0] for r in rb if r[0] not in {x[0] for x in ra}]
    da = {r[0]: r for r in ra}
    rows = []
    for f in fields:
        va, vb = da.get(f, (f, None, ""))[1], db.get(f, (f, None, ""))[1]
        ratio = (
            vb / va
            if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va
            else None
        )
        rows.append(
            (
                f,
                va,
                _short(da.get(f, ("", "", ""))[2]),
                vb,
                _short(db.get(f, ("", "", ""))[2]),
                ratio,
            )
        )
    if as_json:
        emit_json(
            {
                "a": pa.key,
                "b": pb.key,
                "rows": [
                    dict(
                        zip(("field", "a", "a_source", "b", "b_source", "b_over_a"), r, strict=True)
                    )
                    for r in rows
                ],
            }
        )
        return 0
    print_table(["field", pa.key, "how", pb.key, "how", "B/A"], rows, title="device profiles")
    return 0


def _check_writable(path: str) -> None:
    """Fail now if ``path`` cannot be written (a measurement takes minutes)."""
    existed = os.path.exists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise ClprojError(
            f"cannot write the profile to {path}: {exc.strerror}", "pass -o a writable file path"
        ) from None
    if not existed:
        os.unlink(path)


def run(args: argparse.Namespace) -> int:  # noqa: C901
    if args.compare:
        return compare(args.compare[0], args.compare[1], args.json)
    if args.power or args.power_fit:
        return power(args)
    from clproj.devices import nvml
    from clproj.devices.discovery import select_device
    from clproj.devices.microbench.runner import profile_device
    from clproj.devices.profile import DeviceProfile

    mode = args.mode or ("quick" if args.quick else "full")
    if args.output:
        _check_writable(args.output)  # before minutes of measuring, not after
    dev = select_device(args.device)
    nv = None
    if "NVIDIA" in dev.vendor.upper():
        from clproj.devices.discovery import pci_bus_id

        nv = nvml.match(dev.name.strip(), pci_bus_id(dev))
    stderr.print(f"profiling [bold]{dev.name.strip()}[/] ({mode} mode)", highlight=False)
    t0 = time.perf_counter()

    def progress(steps: list[Any]) -> Any:
        return track(steps, "microbenchmarks")

    doc = profile_device(dev, mode, key=args.key, progress=progress, nvml_info=nv)
    prof = DeviceProfile(doc)
    if args.output:
        try:
            prof.save(args.output)
        except OSError as exc:  # e.g. the disk filled up meanwhile: keep the measurement
            from clproj import paths

            kept = os.path.join(paths.cache_dir("profiles"), f"unsaved-{prof.key}.json")
            prof.save(kept)
            raise ClprojError(
                f"cannot write {args.output}: {exc.strerror}; the profile is kept in {kept}",
                f"copy {kept} where you want it",
            ) from None
    if args.json:
        emit_json(doc)
    else:
        print_table(
            ["field", "value", "how"],
            [(f, v, _short(p)) for f, v, p in summary_rows(prof)],
            title=f"{prof.key} ({time.perf_counter() - t0:.0f} s)",
        )
        rej = doc["source"]["rejected"]
        if rej:
            stderr.print(f"[yellow]rejected (wrong results, not reported):[/] {'; '.join(rej)}")
        if args.output:
            stderr.print(f"wrote {args.output}")
    if not args.output and not args.json:
        raise ClprojError("profile measured but not saved", "pass -o PROFILE.json")
    return 0


def _fit_figures(section: dict[str, Any]) -> str:
    """The fitted energy of a global load instruction and power of a busy compute unit, for
    the fit's title: the figures the width-varied reads and the sparse launch were run for
    (docs/energy.md), absent where they were not."""
    joules = section.get("energy_per_global_load_j")
    watts = section.get("power_per_active_unit_w")
    return ("" if joules is None else f", {joules * 1e12:.2f} pJ a global load (per work-item)") + (
        "" if watts is None else f", {watts:.2f} W a busy compute unit"
    )


def power(args: argparse.Namespace) -> int:
    """``--power`` (measure) or ``--power-fit`` (fit into a profile)."""
    if not args.output:
        raise ClprojError("no output file", "pass -o FILE.json")
    if args.power_fit:
        from clproj.devices.power_cli import fit_into_profile

        if not args.profile:
            raise ClprojError("--power-fit needs the profile to extend", "pass --profile KEY")
        section = fit_into_profile(args.power_fit, args.profile, args.output)
        if args.json:
            emit_json(section)
            return 0
        fit = section["fit"]
        print_table(
            ["microbenchmark", "measured J", "fitted J", "error %"],
            [
                (
                    r["name"],
                    r["measured_j"],
                    r["fitted_j"],
                    100 * (r["fitted_j"] - r["measured_j"]) / r["measured_j"],
                )
                for r in fit["microbenchmarks"]
            ],
            title=f"power fit: static-active {section['static_active_w']:.1f} W, "
            f"idle {section['idle_w']:.1f} W, rms error {100 * fit['rms_relative_error']:.1f}%"
            + _fit_figures(section),
        )
        stderr.print(f"wrote {args.output}")
        return 0
    from clproj.devices.discovery import select_device
    from clproj.devices.power_cli import measure_power

    _check_writable(args.output)
    dev = select_device(args.device)
    doc = measure_power(dev, args.output, args.quick)
    if args.json:
        emit_json(doc)
        return 0
    rows = []
    for k in doc["kernels"]:
        f = k.get("figures") or {}
        rows.append(
            (
                k.get("microbenchmark"),
                f.get("time_per_launch_s"),
                f.get("average_power_w"),
                f.get("energy_per_launch_j"),
                k.get("error") or "",
            )
        )
    print_table(["microbenchmark", "s/launch", "W", "J/launch", "refused"], rows, title="power")
    stderr.print(f"wrote {args.output}")
    return 0
