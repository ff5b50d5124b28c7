"""Nodes: killing one mid-run, command errors, the embedded single-machine cluster."""

from __future__ import annotations

import signal
import time

import numpy as np
import pytest

from clproj.runtime.cluster.broker import Broker, serve_in_thread
from clproj.runtime.cluster.client.platform import MEM_READ_ONLY, RemoteError, RemotePlatform


def test_killed_node_inflight_launches_reexecuted_elsewhere(
    tmp_path, start_node, wait_devices, reference_step, add_kernel_source
):
    endpoint = f"ipc://{tmp_path}/broker"
    broker = Broker(endpoint, liveness_s=1.5)
    th = serve_in_thread(broker, until=time.time() + 90)
    victim = start_node(endpoint, "victim", "pthread", tmp_path / "victim.log")
    start_node(endpoint, "survivor", "basic", tmp_path / "survivor.log")
    try:
        wait_devices(broker, 2)
        plat = RemotePlatform(endpoint, timeout_s=30)
        n, reps, launches = 1 << 15, 400, 40
        a0 = np.linspace(0, 1, n, dtype=np.float32)
        b0 = np.full(n, 0.5, np.float32)
        prog = plat.create_program(add_kernel_source)
        k = plat.create_kernel(prog, "advance")
        A = plat.create_buffer(a0.nbytes, hostbuf=a0)
        B = plat.create_buffer(b0.nbytes, MEM_READ_ONLY, hostbuf=b0)
        k.set_args(A, B, np.float32(0.25), np.int32(reps))
        plat.post_projection(plat.kernel_key(k, [n]), {"victim/0": 1e-4, "survivor/0": 1.0})
        for _ in range(launches // 2):
            plat.enqueue_launch(k, [n])
        mid = np.empty_like(a0)
        plat.enqueue_read(A, mid)  # a consistent point the app saw
        np.testing.assert_allclose(
            mid, reference_step(a0, b0, 0.25, reps, launches // 2), rtol=1e-4
        )
        for _ in range(launches // 2):
            plat.enqueue_launch(k, [n])
        assert plat.placements[-1][1] == "victim/0"
        assert plat.pending, "launches should still be in flight when the node dies"
        victim.send_signal(signal.SIGKILL)
        out = np.empty_like(a0)
        plat.enqueue_read(A, out)  # waits through detection, replay on the survivor, re-read
        np.testing.assert_allclose(out, reference_step(a0, b0, 0.25, reps, launches), rtol=1e-4)
        assert plat.recoveries == 1 and "victim/0" in plat.dead
        # the app goes on, now on the survivor
        plat.enqueue_launch(k, [n])
        plat.enqueue_read(A, out)
        np.testing.assert_allclose(out, reference_step(a0, b0, 0.25, reps, launches + 1), rtol=1e-4)
        assert plat.placements[-1][1] == "survivor/0"
        assert [nd["node"] for nd in plat.status()["nodes"]] == ["survivor"]
        plat.close()
    finally:
        broker.stop()
        th.join(3)


def test_node_errors_are_reported_not_fatal_and_checkpoint_bounds_the_log(
    embedded_cluster, add_kernel_source
):
    c = embedded_cluster(node="thread", lifetime_s=60)
    plat = RemotePlatform(c.endpoint, log_limit_ops=8)
    prog = plat.create_program(add_kernel_source)
    k = plat.create_kernel(prog, "advance")
    A = plat.create_buffer(64)
    k.set_args(A, A, np.float32(1))  # one argument short
    plat.enqueue_launch(k, [16])
    with pytest.raises(RemoteError, match="takes 4 arguments"):
        plat.finish()
    k.set_arg(3, np.int32(1))
    a = np.zeros(16, np.float32)
    plat.enqueue_write(A, a)
    for _ in range(20):
        plat.enqueue_launch(k, [16])
    assert len(plat.recovery.log) <= 8  # checkpoints were taken
    out = np.empty_like(a)
    plat.enqueue_read(A, out)
    # a[i] = a[i]*0.999 + a[i]*1 each launch from zero stays zero
    assert not out.any()
    assert c.node_obj.rejects == 1  # the bad launch, logged; the node went on
    plat.close()


def test_embedded_cluster_with_node_process(embedded_cluster):
    c = embedded_cluster(node="process", lifetime_s=60)
    plat = RemotePlatform(c.endpoint, wait_devices_s=30)
    assert plat.devices
    src = "__kernel void twice(__global int *x) { x[get_global_id(0)] *= 2; }"
    k = plat.create_kernel(plat.create_program(src), "twice")
    x = np.arange(100, dtype=np.int32)
    X = plat.create_buffer(x.nbytes, hostbuf=x)
    k.set_args(X)
    plat.enqueue_launch(k, [100])
    out = np.empty_like(x)
    plat.enqueue_read(X, out)
    assert (out == 2 * x).all()
    plat.close()
