"""`clproj evaluate` on the committed ground truth, and `clproj project` on a real record."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from clproj.runtime.evaluation.evaluate import default_results, evaluate


def clproj(*args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clproj.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


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
        assert set(a.bound.values()) <= {"C", "G", "L", "D"}


def test_best_device_among_really_different_devices(evaluation):
    """Regression guard on a GPU and two CPUs (README's second row): all chosen right."""
    keys = [d for d in evaluation.devices if "h100" in d or "xeon16" in d or "pthread" in d]
    assert len(keys) == 3
    s = evaluation.subset(keys).summary()
    assert s["best_chosen_fraction"] >= 0.9
    assert s["mean_penalty"] <= 0.05


def test_all_devices_relative_error_beats_the_paper(evaluation):
    """Regression guard: mean relative error over all devices below the paper's 19.8%."""
    s = evaluation.summary()
    assert s["mean_relative_error"] < 0.198
    assert s["mean_penalty"] <= 0.05


def test_evaluate_cli_json_and_html_report(evaluate_cli_report):
    out, report = evaluate_cli_report
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["summary"]["apps"] >= 20
    html = (report / "index.html").read_text()
    assert "relative_times.png" in html and (report / "relative_times.png").stat().st_size > 1000


def test_evaluate_rejects_a_single_device():
    one = [p for p in default_results() if "nvidia-h100" in p]
    out = clproj("evaluate", "--results", *one)
    assert out.returncode == 2 and "at least two devices" in out.stderr


def test_project_a_record_on_measured_profiles(tmp_path):
    from clproj.intercept.record import from_arrays, save

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


def test_evaluate_judges_a_device_only_this_machine_profiled(tmp_path, monkeypatch):
    """Results of a device no committed profile describes (a host of another CPU type) are
    judged with the profile clproj measured for it on this machine; without one they are
    named as skipped, with the fix, not dropped silently."""
    from types import SimpleNamespace

    from clproj.benchmarks.harness import load_results
    from clproj.devices.local import cache_path

    monkeypatch.setenv("CLPROJ_CACHE", str(tmp_path / "cache"))
    name = "pthread-haswell-AMD EPYC"
    cpu = next(p for p in default_results() if "pocl-pthread-epyc2" in p)
    gpu = next(p for p in default_results() if "nvidia-h100" in p)
    res = load_results(cpu)
    res["device"] |= {"name": name, "key": "pocl-pthread-epyc2-0a1b2c"}
    mine = tmp_path / "bench-mine.json"
    mine.write_text(json.dumps(res))

    skipped = evaluate([gpu, str(mine), next(p for p in default_results() if "h200" in p)])
    assert "device pocl-pthread-epyc2-0a1b2c" in skipped.skipped
    assert "clproj devices --profiles" in skipped.skipped["device pocl-pthread-epyc2-0a1b2c"]
    assert "pocl-pthread-epyc2-0a1b2c" not in skipped.devices

    # The profile a first `clproj run` would have measured and cached for that device.
    dev = SimpleNamespace(
        name=name,
        platform=SimpleNamespace(name=res["device"]["platform"]),
        driver_version=res["device"]["driver"],
    )
    from clproj.devices.profile import PROFILES_DIR

    prof = json.loads((PROFILES_DIR / "measured" / "pocl-pthread-amd-epyc.json").read_text())
    prof["identity"]["name"] = name
    os.makedirs(os.path.dirname(cache_path(dev)), exist_ok=True)
    with open(cache_path(dev), "w") as fh:
        json.dump(prof, fh)
    judged = evaluate([gpu, str(mine)])
    assert judged.devices == sorted(["nvidia-h100", "pocl-pthread-epyc2-0a1b2c"])
    assert len(judged.apps) >= 20 and not any(k.startswith("device ") for k in judged.skipped)
    # Results written apart under one key (`clproj bench` on each host) are both judged.
    from clproj.benchmarks.harness import distinct_key

    res["device"]["key"] = "pocl-pthread-epyc2"
    mine.write_text(json.dumps(res))
    both = evaluate([gpu, cpu, str(mine)])
    assert both.devices == sorted(
        ["nvidia-h100", "pocl-pthread-epyc2", distinct_key("pocl-pthread-epyc2", name)]
    )
