"""Fast launches over the node's native same-host link (runtime.cluster.node.nodelink, nodelink.c).

A launch repeated exactly (kernel, arguments, NDRange) gets a slot on the node and is then
sent as a 24-byte frame on a second socket, which the node's C thread enqueues and answers
alone. These tests check that this never changes results or the order of commands across
the two sockets, that the slots follow every change of the objects they name, and that bad
frames are refused without harm.
"""

from __future__ import annotations

import socket
import struct
import time

import msgpack
import numpy as np
import pytest

from clproj.runtime.cluster import protocol
from clproj.runtime.cluster.broker import Broker
from clproj.runtime.cluster.broker import serve_in_thread as broker_thread
from clproj.runtime.cluster.client.platform import RemotePlatform
from clproj.runtime.cluster.node import nodelink
from clproj.runtime.cluster.node.server import Node
from clproj.runtime.cluster.node.server import serve_in_thread as node_thread

pytestmark = pytest.mark.skipif(not nodelink.available(), reason="native link not built")

INC = """
__kernel void inc(__global int *x, const int by) { x[get_global_id(0)] += by; }
__kernel void scale(__global int *x, __global const int *y) {
    int i = get_global_id(0); x[i] = x[i] * 2 + y[i];
}
"""


@pytest.fixture()
def fast_node(tmp_path, monkeypatch, wait_devices):
    """A broker thread and an in-process node "fast" (its fast link inspectable)."""
    monkeypatch.setenv("CLPROJ_DIRECT", "1")
    endpoint = f"ipc://{tmp_path}/broker"
    broker = Broker(endpoint, liveness_s=3.0)
    bth = broker_thread(broker, until=time.time() + 120)
    node = Node(endpoint, name="fast")
    nth = node_thread(node, until=time.time() + 120)
    wait_devices(broker, 1)
    yield broker, node, endpoint
    node.stop()
    broker.stop()
    nth.join(5)
    bth.join(5)


def _platform(endpoint: str) -> tuple[RemotePlatform, str]:
    plat = RemotePlatform(endpoint, timeout_s=30)
    dev = sorted(d for d in plat.devices if d.startswith("fast/"))[0]
    return plat, dev


def _inc(plat: RemotePlatform, n: int, by: int) -> tuple[np.ndarray, object, object]:
    """Zeros on the platform and the kernel adding ``by`` to them."""
    x = np.zeros(n, np.int32)
    X = plat.create_buffer(x.nbytes, hostbuf=x)
    k = plat.create_kernel(plat.create_program(INC), "inc")
    k.set_args(X, np.int32(by))
    return x, X, k


def test_repeated_launch_goes_fast_and_the_broker_still_learns_its_time(fast_node):
    broker, node, endpoint = fast_node
    plat, dev = _platform(endpoint)
    try:
        x, X, k = _inc(plat, 4096, 1)
        key = "fast-test"
        for _ in range(50):  # launch + wait
            plat.enqueue_launch(k, [4096], device=dev, key=key).wait()
        for _ in range(300):  # pipelined
            plat.enqueue_launch(k, [4096], device=dev, key=key)
        out = np.empty_like(x)
        plat.enqueue_read(X, out)
        assert (out == 350).all()
        assert node.native is not None and node.native.served >= 340, node.native.served
        assert plat.fast.slots[dev], "the client never got a slot"
        deadline = time.monotonic() + 5
        while dev not in broker.measured.get(key, {}):
            assert time.monotonic() < deadline, "the broker never learnt the fast launches' time"
            time.sleep(0.05)
        assert broker.measured[key][dev] > 0
    finally:
        plat.close()
    deadline = time.monotonic() + 5
    while node.slots:  # release_all at close drops the client's slots
        assert time.monotonic() < deadline, "slots outlived their client"
        time.sleep(0.05)


def test_fast_launches_keep_order_with_writes_argument_changes_and_new_buffers(fast_node):
    """Every change the client makes between repeated launches must be seen by the next
    fast launch exactly when a plain command stream would see it."""
    _, node, endpoint = fast_node
    plat, dev = _platform(endpoint)
    try:
        n = 1024
        ref_x = np.arange(n, dtype=np.int32)
        ref_y = np.full(n, 3, np.int32)
        X = plat.create_buffer(ref_x.nbytes, hostbuf=ref_x)
        Y = plat.create_buffer(ref_y.nbytes, hostbuf=ref_y)
        prog = plat.create_program(INC)
        inc = plat.create_kernel(prog, "inc")
        inc2 = plat.create_kernel(prog, "inc")  # same node kernel name, other arguments
        sc = plat.create_kernel(prog, "scale")
        inc.set_args(X, np.int32(1))
        inc2.set_args(Y, np.int32(5))
        sc.set_args(X, Y)
        out = np.empty_like(ref_x)
        by = 1
        for rnd in range(6):
            for _ in range(4):
                plat.enqueue_launch(inc, [n], device=dev)
                plat.enqueue_launch(inc2, [n], device=dev)
                ref_x += by
                ref_y += 5
            plat.enqueue_launch(sc, [n], device=dev)
            ref_x = ref_x * 2 + ref_y
            if rnd == 2:  # a host write between fast launches
                ref_x[:] = rnd
                plat.enqueue_write(X, ref_x, device=dev)
            if rnd == 3:  # a scalar argument changes: a new launch signature
                by = 7
                inc.set_args(X, np.int32(by))
            if rnd == 4:  # a new buffer behind the same kernels
                Y2 = plat.create_buffer(ref_y.nbytes, hostbuf=ref_y)
                inc2.set_args(Y2, np.int32(5))
                sc.set_args(X, Y2)
                plat.release(Y)
                Y = Y2
            plat.enqueue_read(X, out)
            np.testing.assert_array_equal(out, ref_x)
        assert node.native is not None and node.native.served > 20
    finally:
        plat.close()


def test_a_step_index_changing_every_launch_still_goes_fast(fast_node):
    """The slot is made for the launch's shape; each fast frame brings the scalar values,
    which the node's C thread sets before the launch (a factorisation's step index)."""
    _, node, endpoint = fast_node
    plat, dev = _platform(endpoint)
    try:
        n = 512
        x, X, k = _inc(plat, n, 0)
        served = node.native.served
        ref = x.copy()
        for t in range(200):
            k.set_args(X, np.int32(t % 7))
            ev = plat.enqueue_launch(k, [n], device=dev, key=f"step-{t}")
            ref += t % 7
            if t % 5 == 0:
                ev.wait()
        out = np.empty_like(x)
        plat.enqueue_read(X, out)
        np.testing.assert_array_equal(out, ref)
        assert node.native.served - served >= 190, node.native.served - served
    finally:
        plat.close()


def _frame(*parts: bytes) -> bytes:
    head = struct.pack(f"<{len(parts) + 1}I", len(parts), *(len(p) for p in parts))
    return head + b"".join(parts)


def _read_msg(s: socket.socket) -> list[bytes]:
    buf = b""
    s.settimeout(5)
    while True:
        if len(buf) >= 4:
            (nf,) = struct.unpack_from("<I", buf)
            if len(buf) >= 4 + 4 * nf:
                lens = struct.unpack_from(f"<{nf}I", buf, 4)
                if len(buf) >= 4 + 4 * nf + sum(lens):
                    out, p = [], 4 + 4 * nf
                    for n in lens:
                        out.append(buf[p : p + n])
                        p += n
                    return out
        chunk = s.recv(65536)
        assert chunk, "the node closed the connection"
        buf += chunk


def test_bad_fast_frames_are_refused_and_the_node_keeps_serving(fast_node):
    _, node, endpoint = fast_node
    plat, dev = _platform(endpoint)
    try:
        x, X, k = _inc(plat, 256, 2)
        for _ in range(3):
            plat.enqueue_launch(k, [256], device=dev).wait()
        slot, _ = next(iter(plat.fast.slots[dev].values()))
        rejects = node.native.rejects
        # a stranger on the same host: its own connection may not use the client's slot
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(node.local + nodelink.SUFFIX)
        s.sendall(_frame(b"intruder"))
        s.sendall(_frame(nodelink.fast_frame(slot, 77, 0)))
        h = msgpack.unpackb(_read_msg(s)[0])
        protocol.validate(h, 0)
        assert h["t"] == "reply" and h["id"] == 77 and not h["ok"] and "slot" in h["err"]
        s.sendall(_frame(nodelink.fast_frame(999_999, 78, 0)))  # slot out of range
        assert msgpack.unpackb(_read_msg(s)[0])["id"] == 78
        s.sendall(_frame(b"\xc1" + b"\x00" * 20))  # malformed: dropped, counted
        s.sendall(_frame(b"\xc1\x02" + b"\x00" * 22))  # unknown version
        bad = bytearray(nodelink.fast_frame(slot, 79, 0, [(1, b"\x01\x00\x00\x00")]))
        bad[3] = 2  # says two scalars, carries one
        s.sendall(_frame(bytes(bad)))
        s.sendall(_frame(protocol.pack("cmd", id=5, dev=dev, op="finish", a={})))  # not fast
        s.sendall(struct.pack("<I", 2))  # framing violation (one frame per message): cut off
        s.settimeout(5)
        assert s.recv(100) == b"", "a framing violation must close the connection"
        s.close()
        deadline = time.monotonic() + 5
        while node.native.rejects < rejects + 6:
            assert time.monotonic() < deadline, node.native.rejects - rejects
            time.sleep(0.05)
        # the client's own connection is untouched
        for _ in range(5):
            plat.enqueue_launch(k, [256], device=dev).wait()
        out = np.empty_like(x)
        plat.enqueue_read(X, out)
        assert (out == 16).all()
    finally:
        plat.close()


def test_without_the_native_link_slots_are_never_granted(tmp_path, monkeypatch, wait_devices):
    """CLPROJ_NODE_NATIVE=0: the Python link serves; slot requests are simply not
    granted and every launch stays a full command (results identical)."""
    monkeypatch.setenv("CLPROJ_NODE_NATIVE", "0")
    monkeypatch.setenv("CLPROJ_DIRECT", "1")
    endpoint = f"ipc://{tmp_path}/broker"
    broker = Broker(endpoint)
    bth = broker_thread(broker, until=time.time() + 60)
    node = Node(endpoint, name="fast")
    nth = node_thread(node, until=time.time() + 60)
    try:
        wait_devices(broker, 1)
        assert node.native is None and node.local
        plat, dev = _platform(endpoint)
        try:
            x, X, k = _inc(plat, 512, 3)
            for _ in range(20):
                plat.enqueue_launch(k, [512], device=dev).wait()
            out = np.empty_like(x)
            plat.enqueue_read(X, out)
            assert (out == 60).all() and not plat.fast.slots.get(dev)
        finally:
            plat.close()
    finally:
        node.stop()
        broker.stop()
        nth.join(5)
        bth.join(5)
