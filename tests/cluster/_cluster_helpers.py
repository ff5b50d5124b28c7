"""Shared set-up for the cluster tests: a real broker (thread) and real node processes.

Nodes are separate ``clproj node`` processes with their own PoCL driver (``basic`` = one
thread, ``pthread`` = all cores), so the "cluster" is genuinely heterogeneous and a node
can be killed for real. Everything is bounded by ``--lifetime``/``until``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIFETIME = 150

ADD_SRC = """
__kernel void advance(__global float *a, __global const float *b, const float s, const int reps) {
    int i = get_global_id(0);
    float x = a[i];
    for (int r = 0; r < reps; ++r) x = x * 0.999f + b[i] * s;
    a[i] = x;
}
"""


def reference_step(a, b, s, reps, times):
    import numpy as np

    a = a.astype(np.float32).copy()
    for _ in range(times):
        for _ in range(reps):
            a = (a * np.float32(0.999) + b * np.float32(s)).astype(np.float32)
    return a


def start_node(
    endpoint: str, name: str, pocl: str, log_path: Path, extra: list[str] | None = None
) -> subprocess.Popen:
    env = dict(os.environ)
    env["POCL_DEVICES"] = pocl
    env["PYTHONPATH"] = str(REPO)
    env.pop("LD_PRELOAD", None)
    log = open(log_path, "wb")  # noqa: SIM115 - closed with the process by the OS
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "clproj.cli",
            "node",
            "--broker",
            endpoint,
            "--name",
            name,
            "--lifetime",
            str(LIFETIME),
            *(extra or []),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


def wait_devices(broker, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while len(broker.devices) < n:
        if time.monotonic() > deadline:
            raise AssertionError(f"only {len(broker.devices)} of {n} devices registered")
        time.sleep(0.05)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def broker_and_two_nodes(tmp_path: Path, liveness_s: float = 3.0):
    """Broker thread + a ``basic`` node (nb) and a ``pthread`` node (np), as processes:
    yields ``{"endpoint", "broker", "nodes"}``; everything stopped afterwards."""
    from runtime.cluster.broker import Broker
    from runtime.cluster.broker import serve_in_thread as broker_thread

    endpoint = f"ipc://{tmp_path}/broker"
    broker = Broker(endpoint, liveness_s=liveness_s)
    th = broker_thread(broker, until=time.time() + 170)
    nodes = {
        "nb": start_node(endpoint, "nb", "basic", tmp_path / "nb.log"),
        "np": start_node(endpoint, "np", "pthread", tmp_path / "np.log"),
    }
    try:
        wait_devices(broker, 2, timeout=60)
        yield {"endpoint": endpoint, "broker": broker, "nodes": nodes}
    finally:
        for p in nodes.values():
            stop(p)
        broker.stop()
        th.join(3)
