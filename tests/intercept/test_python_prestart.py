"""A C app's first OpenCL call starts the shim's Python side on a thread of its own in
project mode (native/shim/python_start.c, ``CLPROJ_PYTHON_PRESTART``). The app may do
anything while that start runs: end at once, launch at once, fork at once. Each keeps its
output and exit status, and nothing hangs, with the start ahead and without it. The same
app's forks under route mode: the child's OpenCL runs natively, and no child's exit
touches its parent's run."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize(
    ("mode", "how"), [("route", "fork"), ("route", "fork-exit"), ("project", "fork-exit")]
)
def test_a_forked_child_keeps_its_output_and_leaves_its_parents_run_alone(app, mode, how):
    """A child forked from a routed app runs its OpenCL calls natively: what routes them is
    its parent's (native/shim/route.c; its first call into the cluster failed with
    CL_OUT_OF_RESOURCES). A child that ends with ``exit()`` runs none of the exit
    functions it inherited (intercept.hooks): they stopped the parent's cluster, so the
    parent's launch after the child's end found no broker. The parent's launch is routed
    (or recorded) as before."""
    native = subprocess.run([app, how], capture_output=True, text=True, timeout=60)
    assert native.returncode == 0, native.stderr
    cmd = [sys.executable, "-m", "clproj.cli", "run", "--mode", mode, "--json", "--", app, how]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    for line in native.stdout.splitlines():  # --json: the app's output is on stderr
        assert line in p.stderr, (line, p.stderr[-2000:])
    (kernel,) = json.loads(p.stdout)["kernels"]
    if mode == "route":  # the parent's launch, on the cluster's node; the child's is native
        assert kernel["launches"] == 1 and kernel["device"].startswith("local/"), kernel
