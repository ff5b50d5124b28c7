"""`clproj evaluate` on the committed ground truth, and `clproj project` on a real record."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from runtime.evaluate import default_results, evaluate


def clproj(*args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clproj.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.fixture(scope="module")
def evaluation():
    return evaluate()


def test_committed_ground_truth_covers_really_different_devices():
    keys = {os.path.basename(p) for p in default_results()}
    assert any("nvidia-h100" in k for k in keys) and any("pocl" in k for k in keys)


def test_every_measured_app_is_projected(evaluation):
    assert len(evaluation.devices) >= 2
    assert len(evaluation.apps) >= 20, evaluation.skipped
    for a in evaluation.apps:
        assert set(a.actual_s) == set(a.projected_s) == set(evaluation.devices)
        assert all(t > 0 for t in a.projected_s.values())
        assert 0.0 <= a.relative_error <= 1.0 and a.penalty >= 0.0
        assert set(a.bound.values()) <= {"C", "G", "L"}


def test_gpu_chosen_where_it_is_measured_fastest(evaluation):
    """Regression guard: the H100 is 10-1000x faster than the CPUs on these apps."""
    s = evaluation.summary()
    assert s["best_chosen_fraction"] >= 0.9
    assert s["mean_penalty"] <= 0.05


def test_evaluate_cli_json_and_html_report(tmp_path):
    out = clproj("evaluate", "--json", "--report", str(tmp_path / "report"))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["summary"]["apps"] >= 20
    html = (tmp_path / "report" / "index.html").read_text()
    assert (
        "relative_times.png" in html
        and (tmp_path / "report" / "relative_times.png").stat().st_size > 1000
    )


def test_evaluate_rejects_a_single_device():
    one = [p for p in default_results() if "nvidia-h100" in p]
    out = clproj("evaluate", "--results", *one)
    assert out.returncode == 2 and "at least two devices" in out.stderr


def test_project_a_record_on_measured_profiles(tmp_path):
    from intercept.record import from_arrays, save

    src = "__kernel void scale(__global float* x, float a) { int i = get_global_id(0); x[i] = a * x[i]; }"
    rec = from_arrays(
        src, "scale", [np.arange(1 << 16, dtype=np.float32), np.float32(2)], [1 << 16], [256]
    )
    path = save(rec, str(tmp_path))
    out = clproj("project", path, "--devices", "measured", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    projections = doc["projections"]
    assert len(projections) >= 3
    times = [p["time_s"] for p in projections]
    assert times == sorted(times) and doc["recommended"] == projections[0]["device_key"]
    by_key = {p["device_key"]: p for p in projections}
    h100 = next(k for k in by_key if "h100" in k)
    assert by_key[h100]["bound"] == "G"  # a streaming scale is memory-bound on a GPU
    table = clproj("project", path, "--devices", "measured")
    assert "recommended device" in table.stdout
