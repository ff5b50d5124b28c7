"""What a GPU known only from its sheet loses: spec profiles judged where measured ones exist.

Every AMD GPU and most NVIDIA GPUs clproj projects onto are spec-sheet profiles
(``devices/specs.py``); the H100 and the H200 are the two devices that have both a spec
profile and a measured one, and real times. This benchmark projects the same kernel
profiles onto both and judges each against the same truth, side by side in one run:

* the shared PolyBench eight: each app run once under project mode by ``clproj
  validate``'s runner (the runs are kept, ``--runs``), every signature's kernel profile
  projected with the bound model onto both profiles, judged against the suite's truth;
* our 32 apps: their committed kernel profiles, judged against the committed bench
  results of each GPU (``clproj evaluate``'s inputs).

The spec profile stands in for the measured one: it is given the measured profile's key
and name, so the matching of projections to truth rows is the validation's own. The
numbers no sheet gives are taken from the other measured GPU (leave-one-device-out, see
:func:`stand_in`). Nothing is fitted; the gap between the two columns is what projecting
from a sheet costs.

    POCL_DEVICES=pthread python -m clproj.benchmarks.spec_vs_measured \\
        --out benchmarks/results/spec_vs_measured.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from clproj import paths
from clproj.console import publish
from clproj.devices.profile import DeviceProfile, load_profile
from clproj.devices.spec_sheets import SPECS
from clproj.devices.specs import EFFICIENCY_FROM, build
from clproj.runtime.evaluation import metrics
from clproj.runtime.evaluation.app_profiles import RESULTS_DIR, load_cached
from clproj.runtime.evaluation.evaluate import load_measured, project_app
from clproj.runtime.evaluation.validate_match import judge_app
from clproj.runtime.evaluation.validate_models import launch_profiles, model_shapes
from clproj.runtime.evaluation.validate_scores import summarize
from clproj.runtime.evaluation.validate_truth import load_truth
from clproj.runtime.projection.models import get_model

# (measured profile key, spec profile key, bench results key, validation truth label)
PAIRS = (
    ("nvidia-h100-80gb-hbm3-nvidia", "h100-sxm-spec", "nvidia-h100", "h100"),
    ("nvidia-h200-nvidia", "h200-spec", "nvidia-h200", "h200"),
)
SUITE = os.path.join(os.path.dirname(RESULTS_DIR), "..", "..", "shared", "validation", "polybench")


def stand_in(spec_key: str, measured: DeviceProfile) -> DeviceProfile:
    """The spec profile under the measured profile's key and name, built with the numbers
    no sheet gives (bandwidth efficiency, L2 rate, latencies) from the *other* measured
    GPUs only: the device's own measurement never answers its own check."""
    spec = next(s for s in SPECS if s.key == spec_key)
    others = tuple(src for src in EFFICIENCY_FROM if src[1] != spec_key)
    doc = build(spec, others)
    doc["key"] = measured.key
    doc["identity"] = dict(doc["identity"], name=measured.name)
    return DeviceProfile(doc)


def polybench_runs(suite: str, truth_dir: str, runs_path: str) -> list[tuple[str, dict]]:
    """(app, project-mode JSON) of every PolyBench app: read from ``runs_path`` when it
    exists, else run by ``clproj validate``'s own runner (minutes) and saved there."""
    if os.path.exists(runs_path):
        with open(runs_path, encoding="utf-8") as fh:
            return [(a, d) for a, d in json.load(fh)]
    from clproj.runtime.evaluation.validate import validate

    val = validate(suite, truth_dir, devices="measured")
    runs = [(r.app, r.doc) for r in val.runs if r.ok and r.doc is not None]
    os.makedirs(os.path.dirname(os.path.abspath(runs_path)), exist_ok=True)
    with open(runs_path, "w", encoding="utf-8") as fh:
        json.dump(runs, fh)
    return runs


def polybench(runs: list[tuple[str, dict]], truth_dir: str) -> dict[str, dict[str, Any]]:
    """Per GPU and profile source: MAPE, median ratio, within 25%, over PolyBench kernels."""
    truth = [d for d in load_truth(truth_dir) if d.label in {p[3] for p in PAIRS}]
    model = get_model("bound")
    measured = [load_profile(m) for m, *_ in PAIRS]
    sources = {
        "measured": measured,
        "spec": [stand_in(s, m) for (_, s, *_), m in zip(PAIRS, measured, strict=True)],
    }
    out: dict[str, dict[str, Any]] = {}
    for source, devices in sources.items():
        kernels = []
        for app, doc in runs:
            shapes, _ = model_shapes(launch_profiles(doc.get("projections") or []), model, devices)
            kernels.extend(judge_app(app, doc, truth, shapes)[0])
        summary = summarize(kernels, [d.label for d in truth])
        for label, m in summary["per_device"].items():
            out.setdefault(label, {})[source] = {
                k: m[k] for k in ("kernels", "mape", "median_ratio", "within_25", "max_off_factor")
            }
    return out


def our_apps() -> dict[str, dict[str, Any]]:
    """Per GPU and profile source: MAPE and median ratio over our apps' whole-app times."""
    measured, _, _ = load_measured()
    out: dict[str, dict[str, Any]] = {}
    for measured_key, spec_key, bench_key, label in PAIRS:
        res = measured.get(bench_key)
        if res is None:
            continue
        real = load_profile(measured_key)
        for source, device in (("measured", real), ("spec", stand_in(spec_key, real))):
            pairs: list[tuple[float, float]] = []
            for app, entry in sorted(res["apps"].items()):
                doc = load_cached(app, res["size"], "single")
                if doc is None or not entry.get("verified") or not entry.get("total_ns"):
                    continue
                projected, _ = project_app(doc, device)
                pairs.append((entry["total_ns"] * 1e-9, projected))
            ratios = sorted(p / a for a, p in pairs)
            out.setdefault(label, {})[source] = {
                "apps": len(pairs),
                "mape": metrics.mape(pairs),
                "median_ratio": ratios[len(ratios) // 2] if ratios else None,
                "within_25": sum(0.75 <= r <= 1.25 for r in ratios),
            }
    return out


def table(title: str, rows: dict[str, dict[str, Any]], count: str) -> list[str]:
    lines = [
        f"### {title}",
        "",
        f"| GPU | profile | {count} | MAPE | median ratio | within 25% | spec MAPE / measured |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, by_source in rows.items():
        base = by_source.get("measured", {}).get("mape")
        for source, m in by_source.items():
            gap = f"{m['mape'] / base:.2f}x" if source == "spec" and base else ""
            lines.append(
                f"| {label} | {source} | {m[count]} | {m['mape']:.1%} | {m['median_ratio']:.2f} "
                f"| {m['within_25']} | {gap} |"
            )
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default=SUITE, help="the PolyBench suite folder")
    ap.add_argument("--truth", help="its truth folder (default: SUITE/truth)")
    ap.add_argument(
        "--runs",
        default=os.path.join(paths.cache_dir("validate"), "spec_vs_measured-runs.json"),
        help="the apps' project-mode runs: read when present, else run and saved here",
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", help="also write the tables (Markdown) here")
    args = ap.parse_args(argv)
    truth_dir = args.truth or os.path.join(args.suite, "truth")
    runs = polybench_runs(args.suite, truth_dir, args.runs)
    result = {"polybench": polybench(runs, truth_dir), "our_apps": our_apps()}
    if args.json:
        sys.stdout.write(json.dumps(result, indent=1) + "\n")
        return 0
    text = "\n".join(
        [
            "## Spec-sheet profiles against measured ones (bound model, one run)",
            "",
            "`POCL_DEVICES=pthread python -m clproj.benchmarks.spec_vs_measured --out "
            "benchmarks/results/spec_vs_measured.md` (2-core Xeon VM, PoCL 3.1: the PolyBench "
            "apps run once under project mode, each signature's kernel profile projected "
            "onto both profiles; each spec profile built from the other GPU's measurement)",
            "",
            *table(
                "Shared PolyBench eight (per kernel, vs the suite's truth)",
                result["polybench"],
                "kernels",
            ),
            *table("Our 32 apps (per app, vs committed bench results)", result["our_apps"], "apps"),
        ]
    )
    publish(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
