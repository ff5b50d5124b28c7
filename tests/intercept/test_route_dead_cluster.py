"""A dead embedded cluster is noticed at once: the waiting call fails with one line naming
which process died, instead of after the client's 60-s timeout per call."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import helpers_of

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not list(REPO.glob("intercept/_shim*.so")), reason="shim not built (make build)"
)

# Runs one kernel, says so, waits for a line on stdin, then runs another and waits for it.
APP = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import pyopencl as cl
    ctx = cl.create_some_context(interactive=False)
    q = cl.CommandQueue(ctx)
    k = cl.Program(ctx, "__kernel void k(__global int *a) { a[get_global_id(0)] += 1; }").build().k
    host = np.zeros(4096, np.int32)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
    k(q, host.shape, None, buf)
    q.finish()
    print("READY", os.getpid(), flush=True)
    sys.stdin.readline()
    try:
        k(q, host.shape, None, buf)
        cl.enqueue_copy(q, host, buf)
        print("SUM", int(host.sum()), flush=True)
    except cl.Error as exc:
        print("FAILED", type(exc).__name__, flush=True)
        sys.exit(4)
    """
)


def node_of(pid: int) -> int:
    """The embedded node started by app ``pid`` (``clproj node ... --parent-pid PID``)."""
    nodes = helpers_of(pid, "node")
    assert nodes, f"no embedded node of {pid}"
    return nodes[0]


def test_a_killed_embedded_node_fails_the_waiting_call_at_once(tmp_path):
    app = tmp_path / "app.py"
    app.write_text(APP)
    proc = subprocess.Popen(
        [sys.executable, "-m", "clproj.cli", "run", "--mode", "route", "--", sys.executable, app],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()
        assert line.startswith("READY"), line
        node = node_of(int(line.split()[1]))
        os.kill(node, signal.SIGKILL)
        time.sleep(0.2)
        t0 = time.monotonic()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "FAILED" in out and proc.returncode == 4, (out, err[-2000:])
    assert f"the embedded cluster's node (pid {node}) killed by signal 9" in err, err[-2000:]
    assert "no reply from the cluster" not in err
    assert took < 15, took
