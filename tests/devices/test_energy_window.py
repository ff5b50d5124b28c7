"""The energy-window preload library under a real, unmodified C app (PoCL here): each
first launch shape becomes a window of repeated launches, logged with its times, and the
app's output and exit status stay its own although its kernels update buffers in place."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from clproj.devices import energy_app
from clproj.errors import ClprojError

REPO = Path(__file__).resolve().parents[2]
C_APPS = REPO / "tests" / "c_apps"


@pytest.fixture(scope="module")
def app_basic(tmp_path_factory: pytest.TempPathFactory) -> str:
    exe = str(tmp_path_factory.mktemp("ew") / "app_basic")
    cmd = ["gcc", "-O1", "-Wall", "-o", exe, str(C_APPS / "app_basic.c"), "-lOpenCL"]
    subprocess.run([*cmd, "-lpthread"], check=True)
    return exe


def run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = env | {"POCL_DEVICES": "pthread"}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


def test_windows_leave_the_apps_results_alone(app_basic: str, tmp_path: Path) -> None:
    plain = run([app_basic, "20", "2"], dict(os.environ))
    log = str(tmp_path / "windows.jsonl")
    env = energy_app.preload_environment(log, 2.0, 0.0, 0.1, 1)
    measured = run([app_basic, "20", "2"], env)
    assert plain.returncode == measured.returncode == 0, measured.stderr
    # scale() is x = x * a + 1 in place: repeated without the saved copy, sums would differ
    assert sorted(plain.stdout.splitlines()) == sorted(measured.stdout.splitlines())
    windows = energy_app.read_log(Path(log).read_text())
    by = {w["kernel"]: w for w in windows}
    assert {"scale", "rev", "twice"} <= set(by)  # the NDRange launches; a task is not one
    assert len(windows) == len(by)  # one shape per kernel was asked for
    for w in windows:
        assert w["error"] is None and w["launches"] >= 1
        assert w["end"] - w["start"] >= 2.0
        assert w["idle"][0] <= w["idle"][1] <= w["start"]
    assert by["scale"]["saved_buffers"] == 1
    assert by["scale"]["global_size"] == [256] and by["scale"]["local_size"] is None  # NULL local


def test_unset_log_passes_everything_through(app_basic: str, tmp_path: Path) -> None:
    env = energy_app.preload_environment("", 2.0, 0.0, 0.0, 1)
    got = run([app_basic, "3", "1"], env)
    assert got.returncode == 0 and "scale" not in got.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "line",
    [
        '{"kernel":"k","global_size":[4],"local_size":null,"idle":[1,2],"start":3,',
        '{"kernel":"k","global_size":4,"local_size":null,"idle":[1,2],"start":3,"end":5,'
        '"launches":2,"saved_buffers":0,"error":null}',
        '{"kernel":"k","global_size":[4],"local_size":null,"idle":[1],"start":3,"end":5,'
        '"launches":2,"saved_buffers":0,"error":null}',
    ],
)
def test_cut_or_wrong_log_lines_are_one_clear_error(line: str) -> None:
    with pytest.raises(ClprojError) as exc:
        energy_app.read_log(line + "\n")
    assert "energy-window log line 1" in exc.value.cause and "\n" not in exc.value.cause
