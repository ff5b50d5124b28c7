"""Apps whose threads launch kernels at the same moment, under every recording mode.

The first recorded launch starts the shim's Python side. In a pyopencl app the threads
arrive there holding the GIL (pyopencl keeps it around clEnqueueNDRangeKernel), and the
start-up itself needs it: the shim must never make one of them wait while holding it
(native/shim/python_start.c).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
APP = [sys.executable, os.path.join(HERE, "threaded_app.py")]


@pytest.mark.parametrize("mode", ["project", "record"])
def test_threads_launching_together_finish(tmp_path, mode):
    """Four pyopencl threads launching together finish under project mode and under
    recording (they hung in 6 of 6 tries), with the app's own output and exit status."""
    native = subprocess.run(APP, capture_output=True, text=True, timeout=60)
    assert native.returncode == 3, native.stderr
    for attempt in range(3):
        rec = tmp_path / f"r{attempt}"
        how = ["--mode", "project"] if mode == "project" else ["--record", str(rec)]
        p = subprocess.run(
            [sys.executable, "-m", "clproj.cli", "run", *how, "--", *APP],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=90,
        )
        assert p.returncode == 3, p.stderr[-2000:]
        assert p.stdout.splitlines()[0] == native.stdout.strip()
        if mode == "record":
            assert len(os.listdir(rec / "records")) == 4  # one signature per thread
