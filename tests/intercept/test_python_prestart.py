"""A C app's first OpenCL call starts the shim's Python side on a thread of its own in
project mode (native/shim/python_start.c, ``CLPROJ_PYTHON_PRESTART``). The app may do
anything while that start runs: end at once, launch at once, fork at once. Each keeps its
output and exit status, and nothing hangs, with the start ahead and without it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> str:
    exe = str(tmp_path_factory.mktemp("prestart") / "app_prestart")
    src = os.path.join(REPO, "tests", "c_apps", "app_prestart.c")
    subprocess.run(["gcc", "-O1", "-Wall", "-Werror", "-o", exe, src, "-lOpenCL"], check=True)
    return exe


def _project(app: str, args: list[str], prestart: str, record: str):
    env = dict(os.environ, CLPROJ_PYTHON_PRESTART=prestart)
    cmd = [sys.executable, "-m", "clproj.cli", "run", "--mode", "project", "--record", record]
    return subprocess.run(
        [*cmd, "--", app, *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=120
    )


def _records(folder: str) -> int:
    """Launch records written (a child that ``_exit``s may leave a writer's temporary)."""
    path = os.path.join(folder, "records")
    return len([n for n in os.listdir(path) if n.endswith(".clrec")]) if os.path.isdir(path) else 0


@pytest.mark.parametrize("prestart", ["1", "0"])
def test_an_app_ending_during_the_start_keeps_its_status(app, tmp_path, prestart):
    p = _project(app, ["exit", "7"], prestart, str(tmp_path / "r"))
    assert p.returncode == 7, p.stderr[-2000:]
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("prestart", ["1", "0"])
def test_a_launch_during_the_start_waits_for_it_and_is_recorded(app, tmp_path, prestart):
    native = subprocess.run([app, "launch"], capture_output=True, text=True, timeout=60)
    assert native.returncode == 0, native.stderr
    p = _project(app, ["launch"], prestart, str(tmp_path / "r"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert native.stdout.strip() in p.stdout
    assert _records(str(tmp_path / "r")) == 1


@pytest.mark.parametrize("prestart", ["1", "0"])
def test_a_fork_during_the_start_leaves_both_processes_working(app, tmp_path, prestart):
    """A fork during the start waits for its end (the starting thread may hold the loader's
    lock: a child forked then hung in its next dlopen), then both processes launch; the
    parent's launch is recorded, the child's may be."""
    native = subprocess.run([app, "fork"], capture_output=True, text=True, timeout=60)
    assert native.returncode == 0, native.stderr
    p = _project(app, ["fork"], prestart, str(tmp_path / "r"))
    assert p.returncode == 0, p.stderr[-2000:]
    for line in native.stdout.splitlines():
        assert line in p.stdout, (line, p.stdout)
    assert 1 <= _records(str(tmp_path / "r")) <= 2
