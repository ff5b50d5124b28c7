"""Broker with real node processes (PoCL basic vs pthread): placement, garbage, restart, CURVE."""

from __future__ import annotations

import contextlib
import os
import time

import msgpack
import numpy as np
import pytest
import zmq

from clproj.runtime.cluster import protocol
from clproj.runtime.cluster.broker import Broker, serve_in_thread
from clproj.runtime.cluster.client.platform import MEM_READ_ONLY, RemotePlatform


@pytest.fixture(scope="module")
def cluster(module_cluster):
    """The module's cluster (conftest ``module_cluster``): nodes "basic" and "pthread"."""
    return module_cluster


def _run_app(plat, src, n=4096, launches=6, reps=4):
    a0 = np.linspace(0, 1, n, dtype=np.float32)
    b0 = np.full(n, 0.5, np.float32)
    prog = plat.create_program(src)
    plat.build_program(prog)
    k = plat.create_kernel(prog, "advance")
    A = plat.create_buffer(a0.nbytes, hostbuf=a0)
    B = plat.create_buffer(b0.nbytes, MEM_READ_ONLY, hostbuf=b0)
    k.set_args(A, B, np.float32(0.25), np.int32(reps))
    return a0, b0, k, A


def test_devices_registered_with_profiles(cluster):
    plat = RemotePlatform(cluster["endpoint"])
    try:
        names = {d.id: d.name for d in plat.devices.values()}
        assert set(names) == {"basic/0", "pthread/0"}
        assert names["basic/0"].startswith("basic") and names["pthread/0"].startswith("pthread")
        for d in plat.devices.values():
            assert d.profile["format"] == "clproj.device-profile" and d.peak_flops > 0
    finally:
        plat.close()


@pytest.mark.parametrize("winner", ["basic/0", "pthread/0"])
def test_kernel_goes_where_the_projection_says_and_results_are_correct(
    cluster, winner, add_kernel_source, reference_step
):
    plat = RemotePlatform(cluster["endpoint"])
    try:
        a0, b0, k, A = _run_app(plat, add_kernel_source)
        key = plat.kernel_key(k, [a0.size])
        loser = ({"basic/0", "pthread/0"} - {winner}).pop()
        plat.post_projection(key, {winner: 0.001, loser: 0.1})
        for _ in range(6):
            plat.enqueue_launch(k, [a0.size])
        out = np.empty_like(a0)
        plat.enqueue_read(A, out)
        np.testing.assert_allclose(out, reference_step(a0, b0, 0.25, 4, 6), rtol=1e-5)
        assert plat.placements[-1][1] == winner
        st = plat.status()
        assert any(p["device"] == winner and p["key"] == key for p in st["placements"])
    finally:
        plat.close()


def test_first_launch_runs_at_once_then_migrates_when_projection_arrives(
    cluster, add_kernel_source, reference_step
):
    plat = RemotePlatform(cluster["endpoint"])
    try:
        a0, b0, k, A = _run_app(
            plat, add_kernel_source, n=2048
        )  # a kernel key nobody has projected yet
        key = plat.kernel_key(k, [a0.size])
        plat.enqueue_launch(k, [a0.size])
        first_dev, reason = plat.placements[-1][1:]
        assert "no projection" in reason
        plat.finish()
        other = ({"basic/0", "pthread/0"} - {first_dev}).pop()
        plat.post_projection(key, {other: 1e-4, first_dev: 0.05})  # arrives late
        time.sleep(0.3)  # the client re-asks after REASK_S
        for _ in range(5):
            plat.enqueue_launch(k, [a0.size])
        assert plat.placements[-1][1] == other and plat.placements[-1][2].startswith("migrate")
        out = np.empty_like(a0)
        plat.enqueue_read(A, out)
        np.testing.assert_allclose(out, reference_step(a0, b0, 0.25, 4, 6), rtol=1e-5)
    finally:
        plat.close()


def test_nonblocking_reads_writes_events_map_unmap(cluster, add_kernel_source, reference_step):
    plat = RemotePlatform(cluster["endpoint"])
    try:
        a0, b0, k, A = _run_app(plat, add_kernel_source, n=1024)
        ev = plat.enqueue_launch(k, [1024])
        ev.wait()
        out, rev = plat.enqueue_read(A, bytearray(a0.nbytes), blocking=False)
        rev.wait()
        ref = reference_step(a0, b0, 0.25, 4, 1)
        np.testing.assert_allclose(np.frombuffer(out, np.float32), ref, rtol=1e-5)
        m = plat.map_buffer(A, offset=16, size=16)
        np.frombuffer(m, np.float32)[:] = 7.0
        plat.unmap_buffer(A, m, offset=16)
        plat.enqueue_write(A, np.float32([1, 2]), offset=0, blocking=False)
        plat.finish()
        got = np.frombuffer(plat.map_buffer(A), np.float32)
        assert list(got[:2]) == [1, 2] and list(got[4:8]) == [7, 7, 7, 7]
        np.testing.assert_allclose(got[8:], ref[8:], rtol=1e-5)
        bad = plat.create_program("__kernel void k(__global float *a) { a[0] = undefined_thing; }")
        with pytest.raises(Exception, match="build failed"):
            plat.build_program(bad)
    finally:
        plat.close()


def test_10000_garbage_messages_rejected_and_cluster_keeps_serving(  # noqa: C901
    cluster, add_kernel_source, reference_step
):
    broker = cluster["broker"]
    before = broker.rejects
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.SNDHWM, 0)
    s.connect(cluster["endpoint"])
    rng = np.random.default_rng(1)
    dev = "pthread/0"
    garbage = []
    for i in range(10000):
        kind = i % 8
        if kind == 0:
            garbage.append([rng.bytes(int(rng.integers(0, 200)))])
        elif kind == 1:
            garbage.append(
                [
                    msgpack.packb(
                        {"v": 1, "t": "cmd", "id": i, "dev": dev, "op": "launch", "a": {"x": 1}}
                    )
                ]
            )
        elif kind == 2:
            garbage.append([msgpack.packb({"v": 9, "t": "hello", "client": "x"})])
        elif kind == 3:
            garbage.append([b"\x80", b"x" * 10])  # valid empty map + stray frame
        elif kind == 4:
            garbage.append([msgpack.packb({"v": 1, "t": "reply", "id": 1, "ok": True}), b"a", b"b"])
        elif kind == 5:  # well-formed but nonsensical for the node: forwarded, rejected there
            garbage.append(
                [
                    protocol.pack(
                        "cmd", id=i, dev=dev, op="buf_read", a={"h": 99999, "off": 0, "n": 4}
                    )
                ]
            )
        elif kind == 6:
            garbage.append([b"\xdb" + (2**31).to_bytes(4, "big")])  # str claiming 2 GiB
        else:
            garbage.append([protocol.pack("cmd", id=i, dev="nowhere/0", op="finish", a={})])
    for g in garbage:
        s.send_multipart(g)
    deadline = time.monotonic() + 30
    while broker.rejects - before < 6 * 1250 and time.monotonic() < deadline:
        time.sleep(0.1)
    # kinds 0-4 and 6 are rejected by the broker; 5 by the node; 7 answered "unknown device"
    assert broker.rejects - before == 6 * 1250
    s.close(0)
    # the node's direct socket takes the same garbage (a bounded share of it)
    d = ctx.socket(zmq.DEALER)
    d.setsockopt(zmq.LINGER, 0)
    d.setsockopt(zmq.SNDHWM, 0)
    d.connect(broker.nodes["pthread"].direct)
    for g in garbage[:2000]:
        d.send_multipart(g)
    # both the broker and the nodes still serve a real app correctly
    test_kernel_goes_where_the_projection_says_and_results_are_correct(
        cluster, "pthread/0", add_kernel_source, reference_step
    )
    d.close(0)
    # 1250 rejects came through the broker; the log's 3000th exists only if the node
    # rejected the direct garbage too (its log is rate-limited: every 1000th)
    deadline = time.monotonic() + 15
    while "rejected command #3000" not in (cluster["tmp"] / "pthread.log").read_text():
        assert time.monotonic() < deadline, "the node did not reject the direct garbage"
        time.sleep(0.1)


def test_direct_path_skips_the_broker_which_learns_from_heartbeats(
    cluster, monkeypatch, add_kernel_source, reference_step
):
    """Commands go straight to the node (the broker forwards none of them), yet the broker
    learns the kernel's measured time and the device's launch time from the heartbeats.
    Same host: the node's Unix socket ("1"), or its zmq socket ("zmq");
    CLPROJ_DIRECT=0 puts the broker back in the command path."""
    broker = cluster["broker"]
    assert broker.nodes["pthread"].direct.startswith("ipc://")
    assert broker.nodes["pthread"].local.startswith("/")
    for direct in ("1", "zmq", "0"):
        monkeypatch.setenv("CLPROJ_DIRECT", direct)
        plat = RemotePlatform(cluster["endpoint"])
        try:
            a0, b0, k, A = _run_app(plat, add_kernel_source, n=512)
            key = f"direct-test-{direct}"
            before = broker.forwarded
            for _ in range(3):
                plat.enqueue_launch(k, [a0.size], device="pthread/0", key=key)
            out = np.empty_like(a0)
            plat.enqueue_read(A, out)
            np.testing.assert_allclose(out, reference_step(a0, b0, 0.25, 4, 3), rtol=1e-5)
            forwarded = broker.forwarded - before
            assert forwarded >= 5 if direct == "0" else forwarded == 0
            assert bool(plat.transport.links) == (direct == "1") and bool(
                plat.transport.dsocks
            ) == (direct == "zmq")
            deadline = time.monotonic() + 5
            while "pthread/0" not in broker.measured.get(key, {}):
                assert time.monotonic() < deadline, "the broker never learnt the launch time"
                time.sleep(0.05)
            assert broker.measured[key]["pthread/0"] > 0
            assert broker.devices["pthread/0"].launch_ewma_s > 0
        finally:
            plat.close()


def test_broker_restart_clients_and_nodes_reconnect(
    cluster, add_kernel_source, reference_step, wait_devices
):
    plat = RemotePlatform(cluster["endpoint"], timeout_s=20)
    try:
        a0, b0, k, A = _run_app(plat, add_kernel_source)
        plat.enqueue_launch(k, [a0.size], device="pthread/0")
        plat.finish()
        old = cluster["broker"]
        old.stop()
        cluster["thread"].join(3)
        time.sleep(0.5)
        new = Broker(cluster["endpoint"], liveness_s=2.0)
        cluster["thread"] = serve_in_thread(new, until=time.time() + 120)
        cluster["broker"] = new
        wait_devices(new, 2, timeout=15)  # nodes re-registered after "reregister"
        plat.enqueue_launch(k, [a0.size], device="pthread/0")  # old buffers still on the node
        out = np.empty_like(a0)
        plat.enqueue_read(A, out)
        np.testing.assert_allclose(out, reference_step(a0, b0, 0.25, 4, 2), rtol=1e-5)
    finally:
        plat.close()


def test_curve_direct_path_serves_members_and_rejects_others(tmp_path, monkeypatch, wait_devices):
    """With CURVE, a node's direct socket is a CURVE server whose key clients get from
    the broker; a member's commands run there, an unknown key or a plaintext peer gets
    nothing through (the node never sees their messages)."""
    from clproj.runtime.cluster.keys import Keys, generate, load
    from clproj.runtime.cluster.node.server import Node
    from clproj.runtime.cluster.node.server import serve_in_thread as node_thread

    generate(tmp_path / "keys")
    generate(tmp_path / "other")
    member = load(tmp_path / "keys", "member")
    monkeypatch.setenv("CLPROJ_DIRECT", "zmq")  # the CURVE socket, not the same-host link
    ctx = zmq.Context()
    broker = Broker("tcp://127.0.0.1:0", keys=load(tmp_path / "keys", "broker"), ctx=ctx)
    bth = serve_in_thread(broker, until=time.time() + 60)
    node = Node(broker.endpoint, keys=member, name="sec")
    nth = node_thread(node, until=time.time() + 60)
    try:
        assert node.direct.startswith("tcp://127.0.0.1:") and node.direct_key
        wait_devices(broker, 1)
        plat = RemotePlatform(broker.endpoint, keys=member)
        try:
            dev = next(iter(plat.devices))
            assert plat.devices[dev].direct == node.direct
            src = "__kernel void twice(__global int *x) { x[get_global_id(0)] *= 2; }"
            k = plat.create_kernel(plat.create_program(src), "twice")
            x = np.arange(64, dtype=np.int32)
            X = plat.create_buffer(x.nbytes, hostbuf=x)
            k.set_args(X)
            plat.enqueue_launch(k, [64], device=dev)
            out = np.empty_like(x)
            plat.enqueue_read(X, out)
            assert (out == 2 * x).all() and broker.forwarded == 0 and plat.transport.dsocks
        finally:
            plat.close()
        time.sleep(0.5)  # the client's closing release_all reaches the node
        served, rejects = node.served, node.rejects
        intruder = load(tmp_path / "other", "member")
        for keys in (intruder, None):
            s = zmq.Context.instance().socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            if keys is not None:
                forged = Keys(
                    keys.directory, node.direct_key.encode(), keys.own_public, keys.own_secret
                )
                s.setsockopt(zmq.CURVE_SERVERKEY, forged.broker_public)
                s.setsockopt(zmq.CURVE_PUBLICKEY, forged.own_public)
                s.setsockopt(zmq.CURVE_SECRETKEY, forged.own_secret)
            # A refused handshake can drop the connection before the send (seen under
            # load): a DEALER with no peer then blocks in send, so the send times out
            # instead; either way nothing may come back.
            s.setsockopt(zmq.SNDTIMEO, 1000)
            s.connect(node.direct)
            with contextlib.suppress(zmq.Again):
                s.send(protocol.pack("cmd", id=1, dev=dev, op="finish", a={}))
            assert not s.poll(1000), "an unauthenticated peer got an answer"
            s.close(0)
        assert (node.served, node.rejects) == (served, rejects)
    finally:
        node.stop()
        broker.stop()
        nth.join(10)
        bth.join(10)
        ctx.destroy(linger=0)


def test_curve_rejects_unknown_key_and_serves_known(tmp_path):
    from clproj.runtime.cluster.cli import fetch_status
    from clproj.runtime.cluster.keys import generate, load

    generate(tmp_path / "keys")
    generate(tmp_path / "other")
    ctx = zmq.Context()
    broker = Broker("tcp://127.0.0.1:0", keys=load(tmp_path / "keys", "broker"), ctx=ctx)
    th = serve_in_thread(broker, until=time.time() + 30)
    try:
        ok = fetch_status(broker.endpoint, load(tmp_path / "keys", "member"), 5)
        assert ok["epoch"] >= 1
        intruder = load(tmp_path / "other", "member")
        from clproj.runtime.cluster.keys import Keys

        forged = Keys(
            intruder.directory,
            load(tmp_path / "keys", "member").broker_public,
            intruder.own_public,
            intruder.own_secret,
        )
        with pytest.raises(Exception, match="no answer"):
            fetch_status(broker.endpoint, forged, 1.5)
        with pytest.raises(Exception, match="no answer"):  # plaintext peer
            fetch_status(broker.endpoint, None, 1.0)
    finally:
        broker.stop()
        th.join(3)
        ctx.term()
    assert os.stat(tmp_path / "keys" / "member.key_secret").st_mode & 0o077 == 0
