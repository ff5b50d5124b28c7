"""What clproj's parts inside an app create goes with the run, however the app ends.

Emulation, bounded probes and split checks make scratch folders in the app's process; an
app killed with SIGKILL or leaving through ``os._exit`` never runs their cleanup, and they
piled up in TMPDIR. Under ``clproj run`` they live in the run's folder (``CLPROJ_RUN_DIR``,
``clproj.paths.scratch_parent``), which ``clproj run`` removes after the app. The TMPDIR
here is pytest's, about 80 characters: route mode's sockets then go to a folder short
enough for a Unix socket path (``clproj.paths.socket_dir``; it could not start before).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

APP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "abrupt_app.py")


@pytest.mark.parametrize(("how", "status"), [("kill", -9), ("exit", 0)])
@pytest.mark.parametrize("mode", ["route", "project"])
def test_an_abrupt_end_leaves_nothing_in_tmpdir(tmp_path, mode, how, status):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = dict(os.environ, TMPDIR=str(tmpdir), POCL_DEVICES="pthread basic")
    cmd = [sys.executable, "-m", "clproj.cli", "run", "--mode", mode, "--",
           sys.executable, APP, how, "1.0", "2000"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
    assert res.returncode == status, res.stderr[-1500:]
    assert "launched" in res.stdout
    assert sorted(os.listdir(tmpdir)) == [], res.stderr[-1500:]


def test_scratch_goes_to_the_run_folder(tmp_path, monkeypatch):
    from clproj.paths import scratch_parent

    monkeypatch.setenv("CLPROJ_RUN_DIR", str(tmp_path))
    assert scratch_parent() == str(tmp_path)
    monkeypatch.setenv("CLPROJ_RUN_DIR", str(tmp_path / "gone"))
    assert scratch_parent() is None


def test_socket_folders_stay_short_enough(tmp_path, monkeypatch):
    from clproj.paths import SOCKET_PATH_MAX, socket_dir

    deep = tmp_path / ("d" * 60) / ("e" * 40)
    deep.mkdir(parents=True)
    monkeypatch.setenv("CLPROJ_RUN_DIR", str(deep))
    with socket_dir("clproj-route-") as folder:
        assert len(os.path.join(folder, "broker")) <= SOCKET_PATH_MAX
        assert os.stat(folder).st_mode & 0o777 == 0o700
