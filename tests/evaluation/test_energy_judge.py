"""Projected against measured power and energy (``clproj evaluate --energy``, ``clproj
validate --energy``) on the committed H200 windows and our apps' committed kernel
profiles: every window is matched to its launch shape, and the figures are the file's."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from clproj.devices.energy import read_results
from clproj.errors import ClprojError
from clproj.runtime.evaluation import energy_judge as J
from clproj.runtime.evaluation.validate_match import project_shapes

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "benchmarks" / "results" / "energy" / "h200-20261127"
FILES = [RUN / "energy-apps-run1.json", RUN / "energy-apps-run2.json"]


@pytest.fixture(scope="module")
def judged() -> list[dict]:
    out = []
    for path in FILES:
        doc = read_results(str(path))
        out.append(J.judge(doc, J.app_projector(J.measured_profile(doc))))
    return out


def test_every_window_of_our_apps_is_matched_with_the_files_figures(judged) -> None:
    rows = [r for j in judged for r in j["rows"]]
    assert not [u for j in judged for u in j["unmatched"]]
    measured = {}
    for path in FILES:
        for k in json.loads(path.read_text())["kernels"]:
            if k.get("figures") and not k.get("suite"):
                measured.setdefault((k["app"], k["kernel"]), []).append(k["figures"])
    assert len(rows) == sum(len(v) for v in measured.values()) == 36
    for r in rows:
        assert r.device == "NVIDIA H200" and r.confidence == "normal"  # measured section
        assert any(
            f["average_power_w"] == r.measured_w and f["energy_per_launch_j"] == r.measured_j
            for f in measured[(r.app, r.kernel)]
        )
        assert r.projected_w == pytest.approx(r.projected_j / r.projected_s)
        # power projected from a measured section stays between the floor and the limit
        assert 100.0 < r.projected_w <= 700.0


def test_summary_is_the_rows_arithmetic(judged) -> None:
    doc = J.to_doc(judged)
    s = doc["summary"]["NVIDIA H200"]
    ratios = [r["power_ratio"] for r in doc["rows"]]
    assert s["windows"] == len(ratios) == 36
    assert s["power_mape"] == pytest.approx(100 * statistics.fmean(abs(x - 1) for x in ratios))
    assert s["energy_ratio_median"] == pytest.approx(
        statistics.median(r["energy_ratio"] for r in doc["rows"])
    )
    json.dumps(doc)  # the --json output


def test_suite_windows_are_projected_from_the_runs_shapes() -> None:
    """``validate --energy``: a suite window takes the time and joules that the app's
    project-mode run gave its shape on the measured device, and nothing else."""
    doc = read_results(str(FILES[1]))
    launch = {
        "kernel": "syrk_kernel",
        "global_size": [2048, 2048],
        "local_size": [32, 8],
        "projections": [
            {"name": "NVIDIA H200", "time_s": 0.04, "energy_j": 10.0, "bound": "C"},
            {"name": "NVIDIA H100", "time_s": 0.05, "energy_j": 14.0, "bound": "C"},
        ],
    }
    shapes, errors = project_shapes([launch])
    assert not errors
    got = J.judge(doc, J.shape_projector(shapes, "NVIDIA H200"), J.of_suite)
    assert [(r.app, r.kernel) for r in got["rows"]] == [("syrk", "syrk_kernel")]
    row = got["rows"][0]
    assert (row.projected_s, row.projected_j, row.projected_w) == (0.04, 10.0, 250.0)
    assert len(got["unmatched"]) == 17  # the other PolyBench windows had no run here


def test_untrusted_results_are_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "e.json"
    bad.write_text('{"format": "clproj.energy-results", "version": 9}')
    with pytest.raises(ClprojError) as exc:
        read_results(str(bad))
    assert "\n" not in exc.value.cause
    bad.write_text("{not json")
    with pytest.raises(ClprojError, match="not valid JSON"):
        read_results(str(bad))


def test_cli_evaluate_energy_json() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "clproj.cli", "evaluate", "--energy", *map(str, FILES), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["summary"]["NVIDIA H200"]["windows"] == 36 and len(doc["rows"]) == 36
