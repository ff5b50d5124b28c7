"""`clproj run --mode project --objective energy --max-slowdown`: on a profile pair of the
two local PoCL devices whose power sections make the faster one (pthread) the hungrier,
an unmodified app's kernel is recommended on basic by energy, on pthread by time, and on
pthread again when basic is slower than the slowdown bound allows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import clproj_project

REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, devices: str, *options: str) -> dict:
    env = dict(os.environ, CLPROJ_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(
        [
            *clproj_project("--devices", devices, *options),
            "--",
            sys.executable,
            "-m",
            "clproj.benchmarks.apps",
            "heavy_fma",
            "--size",
            "small",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout[proc.stdout.index("{") :])


def test_run_objective_and_slowdown_bound(tmp_path: Path, power_pair: dict[str, str]) -> None:
    pair = power_pair
    devices = ",".join(pair.values())
    by_energy = _run(tmp_path, devices, "--objective", "energy")
    (doc,) = [p for p in by_energy["projections"] if p.get("projections")]
    rows = {q["device"]: q for q in doc["projections"]}
    basic, pthread = rows["pocl-basic-amd-epyc"], rows["pocl-pthread-amd-epyc"]
    assert pthread["time_s"] < basic["time_s"] and basic["energy_j"] < pthread["energy_j"]
    assert doc["recommended"] == "pocl-basic-amd-epyc" and doc["objective"] == "energy"
    assert doc["recommended_by"]["time"] == "pocl-pthread-amd-epyc"
    by_time = _run(tmp_path, devices)
    (doc,) = [p for p in by_time["projections"] if p.get("projections")]
    assert doc["recommended"] == "pocl-pthread-amd-epyc"
    slow = basic["time_s"] / pthread["time_s"] - 1
    bounded = _run(tmp_path, devices, "--objective", "energy", "--max-slowdown", f"{slow / 2:.4f}")
    (doc,) = [p for p in bounded["projections"] if p.get("projections")]
    assert doc["recommended"] == "pocl-pthread-amd-epyc"
    assert doc["constraints"]["max_slowdown"] == float(f"{slow / 2:.4f}")


def test_objective_flags_need_a_choosing_mode(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "clproj.cli",
            "run",
            "--max-slowdown",
            "0.1",
            "--",
            sys.executable,
            "-c",
            "pass",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode != 0 and "--mode project" in proc.stderr
    assert "Traceback" not in proc.stderr
