"""Power and energy projections against measured windows, one power section beside
another, in one run: the spec rule (no microbenchmarks), a fit of one set of power
microbenchmark readings, a fit of another.

Why: a change to the microbenchmarks or to the fit is judged on apps it was never fitted
to, side by side with what it replaces. The windows are our apps' (committed energy
results); the kernel profiles are the committed ones; nothing runs on a GPU here.

    python -m clproj.benchmarks.energy_accuracy \\
        --windows benchmarks/results/energy/h200-20261127/energy-apps-run*.json \\
        --fits benchmarks/results/energy/h200-20261127/power-microbench-settling.json \\
               benchmarks/results/energy/h200-20261127/power-microbench.json \\
        --out benchmarks/results/energy_fits.md
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from typing import Any

from clproj.console import publish
from clproj.devices.energy import read_results
from clproj.errors import ClprojError


def variants(base: Any, fits: list[str]) -> list[tuple[str, Any]]:
    """(label, profile): ``base`` on the spec rule, then with each fitted section."""
    from clproj.devices.power_fit import power_section
    from clproj.devices.profile import DeviceProfile

    data = copy.deepcopy(base.data)
    data.pop("power", None)
    out = [("spec rule (no microbenchmarks)", DeviceProfile(data))]
    for path in fits:
        doc = read_results(path)
        fitted = copy.deepcopy(base.data)
        fitted["power"] = power_section(doc, os.path.basename(path))
        out.append((f"fit of {os.path.basename(path)}", DeviceProfile(fitted)))
    return out


def run(windows: list[str], fits: list[str]) -> list[dict[str, Any]]:
    """One summary per power section, over every window of our apps in ``windows``."""
    from clproj.runtime.evaluation import energy_judge as J

    docs = [read_results(p) for p in windows]
    base = J.measured_profile(docs[0])
    out = []
    for label, profile in variants(base, fits):
        judged = [J.judge(d, J.app_projector(profile)) for d in docs]
        summary = J.to_doc(judged)["summary"]
        out.append({"section": label} | next(iter(summary.values())))
    return out


def markdown(rows: list[dict[str, Any]], argv: list[str]) -> str:
    lines = [
        "## Power sections side by side: our 32 apps' windows on the NVIDIA H200",
        "",
        f"`python -m clproj.benchmarks.energy_accuracy {' '.join(argv)}`",
        "",
        "| power section | windows | power MAPE | energy MAPE | power, median proj/meas "
        "| power within 10% | energy within 15% |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['section']} | {r['windows']} | {r['power_mape']:.1f}% | "
            f"{r['energy_mape']:.1f}% | {r['power_ratio_median']:.2f}x | "
            f"{r['power_within_10pct']:.0%} | {r['energy_within_15pct']:.0%} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m clproj.benchmarks.energy_accuracy")
    p.add_argument("--windows", nargs="+", required=True, help="clproj.energy-results files")
    p.add_argument("--fits", nargs="*", default=[], help="power microbenchmark results")
    p.add_argument("--out", help="write the table here (markdown)")
    args = p.parse_args(argv)
    try:
        rows = run(args.windows, args.fits)
    except ClprojError as exc:
        sys.stderr.write(f"error: {exc.cause}\n  fix: {exc.fix}\n")
        return 2
    text = markdown(rows, argv)
    publish(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
