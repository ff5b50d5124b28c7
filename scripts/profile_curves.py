"""Add measurements newer than a committed profile to it, without re-measuring the rest.

``clproj profile-device`` measures these on every new profile: the launch floor per group
count (``detail.launch.groups``, devices/microbench/overhead.py) and, on CPUs, the round
of a loop-carried accumulation (``detail.raw_loop``, devices/microbench/raw_loop.py).
Profiles committed before they existed get them here, their other fields unchanged (so
the other projections stay comparable):

* ``measure PROFILE.json --device SUBSTRING [--only launch|raw_loop]``: run both
  microbenchmarks (or one) on a local OpenCL device (the one the profile describes) and
  write them in, provenance ``measured``.
* ``derive PROFILE.json --bench RESULTS.json --kernel APP/KERNEL``: for a device that is
  not here (the 16-core Xeon), read the curve off committed bench results of a kernel whose
  work is negligible next to its launch floor and that was run at 1, 2, ... groups
  (lu_factor's ``lu_column``: one division per work-item, launched at 1..16 groups of 64).
  Those are per-launch medians, so the curve is, if anything, low; provenance says so.
* ``spec-rounds PROFILE.json``: for a CPU that is not here, ``detail.raw_loop`` from its
  core's published FMA and add latencies at the profile's clock
  (``devices.specs.cpu_rounds_from_spec``), provenance ``derived: ...``.

Run from the repository root, e.g.::

    POCL_DEVICES=pthread .venv/bin/python scripts/profile_curves.py measure \\
        devices/profiles/measured/pocl-pthread-amd-epyc.json --device pthread
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clproj.devices.microbench import overhead, raw_loop
from clproj.devices.profile_check import validate


def _write(path: Path, doc: dict, points: list[list[float]], wg: int, how: str) -> None:
    doc.setdefault("detail", {}).setdefault("launch", {})
    doc["detail"]["launch"]["groups"] = points
    doc["detail"]["launch"]["groups_wg"] = wg
    doc["provenance"]["detail.launch.groups"] = how
    validate(doc)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for g, t in points:
        print(f"{int(g):5d} groups  {t * 1e6:8.2f} us")


def measure(path: Path, device: str, mode: str, what: set[str]) -> None:
    import pyopencl as cl

    from clproj.devices.microbench.common import MODES, Bench

    devs = [d for p in cl.get_platforms() for d in p.get_devices() if device in d.name]
    if not devs:
        raise SystemExit(f"no OpenCL device whose name contains {device!r}")
    bench = Bench(devs[0], MODES[mode])
    doc = json.loads(path.read_text())
    if bench.is_cpu and "raw_loop" in what:
        doc.setdefault("detail", {})["raw_loop"] = raw_loop.measure(bench)
        doc["provenance"]["detail.raw_loop"] = "measured"
        for k, v in doc["detail"]["raw_loop"].items():
            print(f"raw_loop {k}: {v * 1e9:.3f} ns" if k.endswith("_s") else f"raw_loop {k}: {v}")
    if "launch" not in what:
        validate(doc)
        path.write_text(json.dumps(doc, indent=1) + "\n")
        return
    points = overhead.launch_groups(bench)
    _write(path, doc, points, overhead.GROUPS_WG, "measured")


def derive(path: Path, bench: Path, kernel: str) -> None:
    app, name = kernel.split("/")
    res = json.loads(bench.read_text())
    rows = [k for k in res["apps"][app]["kernels"] if k["kernel"] == name]
    by_groups: dict[int, float] = {}
    wg = 0
    for k in rows:
        wg = int(k["local"][0])
        groups = int(k["global"][0]) // wg
        by_groups[groups] = k["median_ns"] * 1e-9
    points = [[float(g), by_groups[g]] for g in sorted(by_groups)]
    how = (
        f"derived: {bench.as_posix()} {kernel} per-launch medians at 1..{max(by_groups)} "
        f"groups of {wg} (work negligible; medians, so if anything low); "
        "re-measure with `clproj profile-device` on the device"
    )
    _write(path, json.loads(path.read_text()), points, wg, how)


def spec_rounds(path: Path) -> None:
    from clproj.devices.specs import cpu_rounds_from_spec

    doc = json.loads(path.read_text())
    derived = cpu_rounds_from_spec(doc)
    if derived is None:
        raise SystemExit(f"{path}: no published latencies for this CPU (devices/specs.py)")
    rounds, how = derived
    doc.setdefault("detail", {})["raw_loop"] = rounds
    doc["provenance"]["detail.raw_loop"] = how
    validate(doc)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for k, v in rounds.items():
        print(f"raw_loop {k}: {v * 1e9:.3f} ns")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("profile", type=Path)
    m.add_argument("--device", required=True)
    m.add_argument("--mode", default="full", choices=["quick", "full"])
    m.add_argument(
        "--only",
        choices=["launch", "raw_loop"],
        help="measure only this one (default: both)",
    )
    d = sub.add_parser("derive")
    d.add_argument("profile", type=Path)
    d.add_argument("--bench", type=Path, required=True)
    d.add_argument("--kernel", required=True, help="APP/KERNEL in the bench results")
    r = sub.add_parser("spec-rounds")
    r.add_argument("profile", type=Path)
    a = ap.parse_args()
    if a.cmd == "measure":
        measure(a.profile, a.device, a.mode, {a.only} if a.only else {"launch", "raw_loop"})
    elif a.cmd == "spec-rounds":
        spec_rounds(a.profile)
    else:
        derive(a.profile, a.bench, a.kernel)


if __name__ == "__main__":
    main()
