"""The learned power model beside the fitted one, on the committed H200 windows of our
apps and our apps' committed kernel profiles (real NVML readings, nothing generated)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from clproj.devices.energy import read_results
from clproj.errors import ClprojError
from clproj.runtime.evaluation import energy_judge as J
from clproj.runtime.evaluation import energy_models as M

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "benchmarks" / "results" / "energy" / "h200-20261127"
FILES = [RUN / "energy-apps-run1.json", RUN / "energy-apps-run2.json"]
HELD_OUT = {"nbody", "aes", "matmul_gmem"}


@pytest.fixture(scope="module")
def docs() -> list[dict]:
    return [read_results(str(p)) for p in FILES]


@pytest.fixture(scope="module")
def ours(docs) -> list:
    return M.our_windows(docs)


def test_every_window_of_our_apps_becomes_a_training_row(ours) -> None:
    assert len(ours) == 36 and len({r.app for _, r, _ in ours}) == 32
    for w, row, t in ours:
        assert row.device_key == "nvidia-h200-nvidia" and row.app == w.app
        assert row.power_w == float(w.figures["average_power_w"]) and t > 0
        assert len({len(f) for _, f in row.variants}) == 1


def test_leave_one_app_out_never_sees_the_held_out_app(docs, ours) -> None:
    loao = M.LeaveOneAppOut(ours)
    judged = [J.judge(d, loao, lambda w: J.ours(w) and w.app in HELD_OUT) for d in docs]
    rows = [r for j in judged for r in j["rows"]]
    assert {r.app for r in rows} == HELD_OUT and not any(j["unmatched"] for j in judged)
    everyone = {r.app for _, r, _ in ours}
    assert set(loao.models) == HELD_OUT
    for app, model in loao.models.items():
        assert model.trained_apps == everyone - {app}
        assert model.chosen["nvidia-h200-nvidia"]["windows"] == sum(
            1 for _, r, _ in ours if r.app != app
        )
    fitted = {
        (r.app, r.kernel, str(r.global_size)): r
        for d in docs
        for r in J.judge(d, J.app_projector(J.measured_profile(d)))["rows"]
    }
    trained = [r.power_w for _, r, _ in ours]
    for r in rows:
        # the same projected time as the fitted power: the two differ by power alone
        assert r.projected_s == pytest.approx(
            fitted[(r.app, r.kernel, str(r.global_size))].projected_s
        )
        assert r.confidence == "learned"
        # a tree ensemble stays within the measured powers it was trained on
        assert min(trained) <= r.projected_w <= max(trained)


def test_the_model_refuses_a_device_it_has_no_windows_for(ours) -> None:
    model = M.trained_on_our_apps(ours)
    _, row, _ = ours[0]
    assert model.predict_w(row.variants, "nvidia-h200-nvidia") > 100.0
    with pytest.raises(ClprojError) as err:
        model.predict_w(row.variants, "nvidia-h100-nvidia")
    assert str(err.value.cause) == (
        "learned power model has no training windows for device nvidia-h100-nvidia"
    )


def test_cli_evaluate_energy_with_the_learned_model_json() -> None:
    """``clproj evaluate --energy FILES --models learned``: both power models on the same
    windows and the same projected times."""
    cmd = [sys.executable, "-m", "clproj.cli", "evaluate", "--energy", *map(str, FILES)]
    cmd += ["--models", "bound,learned", "--apps", "nbody,reduction", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["trained_on"] == {"apps": 32, "windows": 36}
    fitted, learned = doc["ours"]["fitted"]["rows"], doc["ours"]["learned"]["rows"]
    assert len(fitted) == len(learned) == 3  # nbody one shape, reduction two
    assert [r["measured_w"] for r in fitted] == [r["measured_w"] for r in learned]
    assert [r["projected_s"] for r in fitted] == pytest.approx([r["projected_s"] for r in learned])


def test_a_suite_window_takes_learned_power_times_the_runs_time(docs, ours) -> None:
    """``validate --energy --models learned``: a suite window's learned row is the model
    trained on all of our apps, times the time the run projected for the window's shape
    (the fitted row's time too). The run here is one project-mode launch doc of syrk's
    measured shape carrying a committed kernel profile of ours in place of syrk's."""
    from clproj.runtime.evaluation.app_profiles import load_cached
    from clproj.runtime.evaluation.validate import judge_runs
    from clproj.runtime.evaluation.validate_suite import AppRun

    profile = load_cached("matmul_gmem", "paper", "single")["groups"][0]["variants"][0]["profile"]
    launch = {
        "kernel": "syrk_kernel",
        "signature": "syrk-0",
        "global_size": [2048, 2048],
        "local_size": [32, 8],
        "profile": profile,
        "projections": [{"name": "NVIDIA H200", "time_s": 0.04, "energy_j": 10.0, "bound": "C"}],
    }
    val = judge_runs([AppRun("syrk", True, doc={"projections": [launch]})], [])
    out = M.side_by_side(docs, val, ours=False)  # every file with windows of our apps
    assert "ours" not in out and out["trained_on"] == {"apps": 32, "windows": 36}
    fitted, learned = out["suite"]["fitted"]["rows"], out["suite"]["learned"]["rows"]
    assert len(fitted) == len(learned) == 1 and len(out["suite"]["learned"]["unmatched"]) == 17
    row = learned[0]
    assert (row["app"], row["projected_s"]) == ("syrk", 0.04) and fitted[0]["projected_s"] == 0.04
    expected = M.trained_on_our_apps(ours).predict_w(
        M.launch_variants([(1.0, profile, None)], J.measured_profile(docs[1]))[0],
        "nvidia-h200-nvidia",
    )
    assert row["projected_w"] == pytest.approx(expected)
    assert row["projected_j"] == pytest.approx(expected * 0.04)
