"""The fitted and the learned power model side by side, in one run: our apps' measured
windows leave-one-app-out, and a suite's unmodified apps (learned model trained on all of
our apps, the suite held out entirely).

Why a benchmark and not a flag of ``clproj evaluate``/``validate``: the product's power is
the fitted one (microbenchmarks only, never an app); the learned model (after Braun et
al., runtime/projection/models/learned_power.py) is a comparison, trained on measured
app windows, and this command is where it is judged. Nothing runs on a GPU here; the
suite's apps run once in project mode (as ``clproj validate`` runs them) for their
kernel profiles and projected times.

    python -m clproj.benchmarks.power_models \\
        --windows benchmarks/results/energy/h200-20261127/energy-apps-run*.json \\
        --suite ../shared/validation/polybench --truth ../shared/validation/polybench/truth \\
        --out benchmarks/results/power_models.md
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from clproj.console import publish
from clproj.devices.energy import read_results
from clproj.errors import ClprojError


def run(windows: list[str], suite: str | None, truth: str | None, seed: int = 0) -> dict[str, Any]:
    """:func:`runtime.evaluation.energy_models.side_by_side` of the windows in
    ``windows``, with the suite's apps run first where ``suite`` is given."""
    from clproj.runtime.evaluation import energy_judge as J
    from clproj.runtime.evaluation.energy_models import side_by_side

    docs = [read_results(p) for p in windows]
    val = None
    if suite:
        from clproj.runtime.evaluation.validate import validate

        apps = sorted({w.app for d in docs for w in J.windows(d) if J.of_suite(w)})
        if not apps:
            raise ClprojError(
                "no suite windows in the files given",
                "pass energy results measured with `energy_run --suite`, or leave --suite out",
            )
        val = validate(suite, truth or f"{suite}/truth", apps=apps)
    return side_by_side(docs, val, seed)


def _line(label: str, model: str, judged: Mapping[str, Any]) -> str:
    from clproj.runtime.evaluation.energy_models import figures

    f = figures(judged)
    if not f["windows"]:
        return f"| {label} | {model} | 0 | - | - | - | - | - |"
    return (
        f"| {label} | {model} | {f['windows']} | {f['power_mape']:.1f}% | "
        f"{f['energy_mape']:.1f}% | {f['time_mape']:.1f}% | {f['power_ratio_median']:.2f}x | "
        f"{f['power_within_10pct']:.0%} |"
    )


def markdown(out: Mapping[str, Any], argv: list[str]) -> str:
    """The side-by-side table and, per window, both models' power."""
    t = out["trained_on"]
    lines = [
        "## Fitted and learned power side by side (NVIDIA H200 windows)",
        "",
        f"`python -m clproj.benchmarks.power_models {' '.join(argv)}`",
        "",
        "fitted: the profile's power section (power microbenchmarks only); learned: extra "
        f"trees on our apps' measured windows ({t['windows']} windows of {t['apps']} apps), "
        "leave-one-app-out on our apps, trained on all of them for the suite. Both x the "
        "bound model's projected time.",
        "",
        "| windows of | power model | windows | power MAPE | energy MAPE | time MAPE "
        "| power, median proj/meas | power within 10% |",
        "|---|---|---|---|---|---|---|---|",
    ]
    parts = [("suite", "suite apps (held out)"), ("ours", "our apps (leave-one-app-out)")]
    for key, label in parts:
        if key in out:
            for model in ("fitted", "learned"):
                lines.append(_line(label, model, out[key][model]))
    for key, label in parts:
        if key not in out:
            continue
        lines += [
            "",
            f"### {label}: W measured / fitted / learned",
            "",
            "| app | kernel | µs measured / projected | W measured | fitted | learned |",
            "|---|---|---|---|---|---|",
        ]
        learned = {
            (r["app"], r["kernel"], str(r["global_size"]), r["measured_w"]): r
            for r in out[key]["learned"]["rows"]
        }
        for r in out[key]["fitted"]["rows"]:
            lr = learned.get((r["app"], r["kernel"], str(r["global_size"]), r["measured_w"]))
            lw = f"{lr['projected_w']:.0f} ({(lr['power_ratio'] - 1) * 100:+.0f}%)" if lr else "-"
            lines.append(
                f"| {r['app']} | {r['kernel']} | {r['measured_s'] * 1e6:.1f} / "
                f"{r['projected_s'] * 1e6:.1f} | {r['measured_w']:.0f} | "
                f"{r['projected_w']:.0f} ({(r['power_ratio'] - 1) * 100:+.0f}%) | {lw} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m clproj.benchmarks.power_models")
    p.add_argument("--windows", nargs="+", required=True, help="clproj.energy-results files")
    p.add_argument("--suite", help="the suite folder whose windows to judge (runs its apps)")
    p.add_argument("--truth", help="the suite's truth folder (default SUITE/truth)")
    p.add_argument("--seed", type=int, default=0, help="the trees' random seed")
    p.add_argument("--out", help="write the table here (markdown)")
    args = p.parse_args(argv)
    try:
        out = run(args.windows, args.suite, args.truth, args.seed)
    except ClprojError as exc:
        sys.stderr.write(f"error: {exc.cause}\n  fix: {exc.fix}\n")
        return 2
    publish(markdown(out, argv), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
