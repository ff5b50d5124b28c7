"""Peers that lie: a node must answer a probe before its devices are offered; a node that
heartbeats but leaves probes unanswered is dropped in seconds and its work fails over; a
node whose answers come late because it gets the CPU only in bursts is slow, not dead; a
node with the wrong CURVE keys says so and exits non-zero.

Real brokers and ``clproj node`` processes on PoCL throughout. The wedged node is a real
node started with ``CLPROJ_NODE_WEDGE_AFTER`` (docs/settings.md): after that many commands
its serving loop takes nothing more off its sockets while its heartbeats go on. The busy
node is a real node that the test stops and continues (SIGSTOP / SIGCONT) for up to 3.5 s
at a time, as a process starved of CPU.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from clproj.runtime.cluster.broker import Broker, serve_in_thread
from clproj.runtime.cluster.client.platform import MEM_READ_ONLY, RemotePlatform

REPO = Path(__file__).resolve().parents[2]


def _app(plat, src, n=4096, reps=4):
    a0 = np.linspace(0, 1, n, dtype=np.float32)
    b0 = np.full(n, 0.5, np.float32)
    k = plat.create_kernel(plat.create_program(src), "advance")
    A = plat.create_buffer(a0.nbytes, hostbuf=a0)
    B = plat.create_buffer(b0.nbytes, MEM_READ_ONLY, hostbuf=b0)
    k.set_args(A, B, np.float32(0.25), np.int32(reps))
    return a0, b0, k, A


@pytest.fixture()
def broker(tmp_path):
    """A broker thread with the default liveness and probe deadlines."""
    b = Broker(f"ipc://{tmp_path}/broker")
    th = serve_in_thread(b, until=time.time() + 120)
    yield b
    b.stop()
    th.join(3)


def test_a_node_is_offered_only_after_answering_a_probe(
    broker, tmp_path, start_node, wait_devices, monkeypatch
):
    monkeypatch.setenv("CLPROJ_NODE_WEDGE_AFTER", "0")  # never answers anything
    start_node(broker.endpoint, "mute", "pthread", tmp_path / "mute.log")
    monkeypatch.delenv("CLPROJ_NODE_WEDGE_AFTER")
    start_node(broker.endpoint, "good", "basic", tmp_path / "good.log")
    deadline = time.monotonic() + 60
    while {"mute", "good"} - set(broker.nodes) or not broker.devices:
        assert time.monotonic() < deadline, "the nodes did not register"
        time.sleep(0.05)
    plat = RemotePlatform(broker.endpoint, timeout_s=20)
    try:
        assert set(plat.devices) == {"good/0"}  # registered and heartbeating, never offered
        nodes = {n["node"]: n for n in plat.status()["nodes"]}
        assert nodes["good"]["offered"] and not nodes.get("mute", {"offered": False})["offered"]
    finally:
        plat.close()


def test_a_wedged_node_is_dropped_in_seconds_and_its_work_fails_over(
    broker, tmp_path, start_node, wait_devices, monkeypatch, add_kernel_source, reference_step
):
    # 5 commands served (build, two buffers, a launch, a read), then a hung serving loop
    monkeypatch.setenv("CLPROJ_NODE_WEDGE_AFTER", "5")
    monkeypatch.setenv("CLPROJ_NODE_NATIVE", "0")
    start_node(broker.endpoint, "wedged", "pthread", tmp_path / "wedged.log")
    monkeypatch.delenv("CLPROJ_NODE_WEDGE_AFTER")
    start_node(broker.endpoint, "survivor", "basic", tmp_path / "survivor.log")
    wait_devices(broker, 2, timeout=60)
    plat = RemotePlatform(broker.endpoint, timeout_s=40)
    try:
        a0, b0, k, A = _app(plat, add_kernel_source)
        plat.enqueue_launch(k, [a0.size], device="wedged/0")
        out = np.empty_like(a0)
        plat.enqueue_read(A, out)
        assert plat.default_device == "wedged/0"
        for _ in range(3):  # pinned: a placement by projection may pick the survivor
            plat.enqueue_launch(k, [a0.size], device="wedged/0")
        t0 = time.monotonic()
        plat.enqueue_read(A, out)  # the node wedged: dropped, replayed on the survivor
        took = time.monotonic() - t0
        np.testing.assert_allclose(out, reference_step(a0, b0, 0.25, 4, 4), rtol=1e-5)
        assert plat.recoveries == 1 and "wedged/0" in plat.dead
        assert took < 15, f"failover took {took:.1f}s"
        print(f"failover from a wedged node: {took:.1f}s")
        assert [n["node"] for n in plat.status()["nodes"]] == ["survivor"]
    finally:
        plat.close()


def test_a_busy_node_is_slow_not_dead(
    broker, tmp_path, start_node, wait_devices, add_kernel_source, reference_step
):
    node = start_node(broker.endpoint, "busy", "pthread", tmp_path / "busy.log")
    wait_devices(broker, 1, timeout=60)
    plat = RemotePlatform(broker.endpoint, timeout_s=60)
    stops = (1.0, 2.0, 3.0, 3.5)  # the last two are past the 3-s liveness floor

    def starve() -> None:
        for s in stops:
            node.send_signal(signal.SIGSTOP)
            time.sleep(s)
            node.send_signal(signal.SIGCONT)
            time.sleep(0.6)

    th = threading.Thread(target=starve)
    try:
        a0, b0, k, A = _app(plat, add_kernel_source)
        out = np.empty_like(a0)
        launches = 0
        th.start()
        while th.is_alive() or launches < 2:
            plat.enqueue_launch(k, [a0.size])
            launches += 1
            plat.enqueue_read(A, out)
            time.sleep(0.2)
        th.join()
        np.testing.assert_allclose(out, reference_step(a0, b0, 0.25, 4, launches), rtol=1e-4)
        assert plat.recoveries == 0 and not plat.dead
        assert broker.nodes["busy"].offered and "busy/0" in broker.devices
    finally:
        node.send_signal(signal.SIGCONT)
        th.join()
        plat.close()


@pytest.mark.parametrize("wrong", ["member key", "broker key"])
def test_a_node_with_the_wrong_curve_keys_says_so_and_exits_non_zero(tmp_path, wrong):
    import zmq

    from clproj.runtime.cluster.keys import generate, load

    generate(tmp_path / "keys")
    generate(tmp_path / "other")
    if wrong == "member key":  # the broker's right public key, a member key it never saw
        shutil.copy(tmp_path / "keys" / "broker.key", tmp_path / "other" / "broker.key")
    ctx = zmq.Context()
    broker = Broker("tcp://127.0.0.1:0", keys=load(tmp_path / "keys", "broker"), ctx=ctx)
    th = serve_in_thread(broker, until=time.time() + 60)
    env = {**os.environ, "PYTHONPATH": str(REPO), "POCL_DEVICES": "basic"}
    env.pop("LD_PRELOAD", None)
    try:
        t0 = time.monotonic()
        proc = subprocess.run(
            [
                *(sys.executable, "-m", "clproj.cli", "node", "--broker", broker.endpoint),
                *("--keys", str(tmp_path / "other"), "--lifetime", "40"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        took = time.monotonic() - t0
    finally:
        broker.stop()
        th.join(3)
        ctx.destroy(linger=0)
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "CURVE" in errors[0], proc.stderr
    assert "fix:" in proc.stderr and "--keys" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < 25
    assert not broker.nodes  # it never registered
