"""Program sources of any size reach the nodes; a message a peer refuses is answered at once.

A source travels as a data frame of prog_build / prog_compile, not in the header (which
is limited to protocol.MAX_HEADER_BYTES), up to protocol.MAX_PROGRAM_BYTES; a request the
node or the broker refuses (too large, malformed) gets an error reply at once, never
silence and the client's 60-s wait.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import zmq

from clproj.runtime.cluster import protocol

REPO = Path(__file__).resolve().parents[2]

# A kernel behind a 6 MiB comment: more than the header limit (4 MiB).
APP = textwrap.dedent(
    """
    import sys
    import numpy as np
    import pyopencl as cl
    KERNEL = "__kernel void twice(__global int *a) { a[get_global_id(0)] *= 2; }"
    filler = "// " + "x" * 96 + "\\n"
    src = filler * (6 * 2**20 // len(filler)) + KERNEL
    ctx = cl.create_some_context(interactive=False)
    q = cl.CommandQueue(ctx)
    prg = cl.Program(ctx, src).build()
    host = np.arange(1024, dtype=np.int32)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
    prg.twice(q, host.shape, None, buf)
    cl.enqueue_copy(q, host, buf)
    print("SOURCE", len(src), "SUM", int(host.sum()), flush=True)
    sys.exit(3)
    """
)


@pytest.mark.skipif(not list(REPO.glob("intercept/_shim*.so")), reason="shim not built")
def test_a_program_source_over_the_header_limit_builds_in_route_mode(tmp_path):
    app = tmp_path / "big.py"
    app.write_text(APP)
    native = subprocess.run([sys.executable, str(app)], capture_output=True, text=True, timeout=120)
    assert native.returncode == 3, native.stderr[-2000:]
    assert int(native.stdout.split()[1]) > protocol.MAX_HEADER_BYTES
    t0 = time.monotonic()
    routed = subprocess.run(
        [sys.executable, "-m", "clproj.cli", "run", "--mode", "route", "--", sys.executable, app],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    took = time.monotonic() - t0
    assert routed.returncode == 3, routed.stderr[-2000:]
    assert routed.stdout.startswith(native.stdout)  # then clproj's table of kernels
    assert "no reply" not in routed.stderr and "clproj: route:" not in routed.stderr
    assert took < 45, took  # seconds, not a 60-s wait per try


def test_a_command_over_the_header_limit_is_answered_at_once(embedded_cluster):
    from clproj.runtime.cluster.client.platform import RemoteError, RemotePlatform

    c = embedded_cluster(node="process", lifetime_s=120)
    p = RemotePlatform(c.endpoint, wait_devices_s=60)
    try:
        dev = next(iter(p.devices))
        big = "//" + "x" * (protocol.MAX_HEADER_BYTES + 1024)  # in the header: refused
        t0 = time.monotonic()
        req = p.cmd(dev, "prog_build", {"h": 9999, "src": big, "opts": ""})
        with pytest.raises(RemoteError, match="rejected: header of"):
            p.wait([req])
        assert time.monotonic() - t0 < 10
        # the same source as a data frame builds
        prog = p.create_program(big + "\n__kernel void k(__global int *a) { a[0] = 1; }")
        p.build_program(prog)
    finally:
        p.close()


def test_the_broker_answers_a_request_it_refuses(embedded_cluster):
    c = embedded_cluster(node="process", lifetime_s=120)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    try:
        protocol.secure_socket_options(sock)
        sock.connect(c.endpoint)
        big = protocol.pack("status", id=42, pad="x" * (protocol.MAX_HEADER_BYTES + 1))
        sock.send(big)
        assert sock.poll(10_000), "no answer from the broker"
        h, _ = protocol.decode(sock.recv_multipart())
        assert h["t"] == "error" and h["id"] == 42 and "rejected" in h["err"], h
    finally:
        sock.close(0)


TOO_LARGE_APP = textwrap.dedent(
    """
    import os
    os.environ["PYOPENCL_NO_CACHE"] = "1"  # the cache's error path hides the OpenCL error
    import pyopencl as cl
    from clproj.runtime.cluster import protocol
    ctx = cl.create_some_context(interactive=False)
    src = "//" + "x" * protocol.MAX_PROGRAM_BYTES + "\\n__kernel void k() {}"
    try:
        cl.Program(ctx, src).build()
    except cl.Error as exc:
        print("REFUSED", exc.code, flush=True)
    """
)


@pytest.mark.skipif(not list(REPO.glob("intercept/_shim*.so")), reason="shim not built")
def test_a_source_over_the_nodes_limit_is_refused_at_once(tmp_path):
    """The call answers CL_OUT_OF_HOST_MEMORY with one line on stderr (not natively
    compared: a 256-MiB build on PoCL takes minutes)."""
    app = tmp_path / "huge.py"
    app.write_text(TOO_LARGE_APP)
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "clproj.cli", "run", "--mode", "route", "--", sys.executable, app],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "REFUSED -6" in out.stdout  # CL_OUT_OF_HOST_MEMORY
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("clproj: route:")]
    assert len(lines) == 1 and "exceeds" in lines[0], out.stderr[-2000:]
    assert time.monotonic() - t0 < 45


def test_a_source_frame_over_the_nodes_limit_is_a_protocol_error():
    with pytest.raises(protocol.ProtocolError, match="exceeds"):
        protocol.program_source({}, [b"x" * (protocol.MAX_PROGRAM_BYTES + 1)])
    assert protocol.program_source({}, [b"__kernel void k() {}"]) == ("__kernel void k() {}", [])


def test_compile_with_an_include_header_over_the_string_limit(embedded_cluster):
    """clCompileProgram's embedded headers travel in the data frame too (a header string
    over protocol.MAX_STR was refused)."""
    import numpy as np

    from clproj.runtime.cluster.client.platform import RemotePlatform

    c = embedded_cluster(node="process", lifetime_s=120)
    p = RemotePlatform(c.endpoint, wait_devices_s=60)
    try:
        dev = next(iter(p.devices))
        filler = "// " + "y" * 96 + "\n"
        header = filler * (2 * protocol.MAX_STR // len(filler)) + "#define SEVEN 7\n"
        src = '#include "big.h"\n__kernel void k(__global int *a) { a[get_global_id(0)] = SEVEN; }'
        part = p.compile_program(src, "", [("big.h", header)], device=dev)
        prog = p.link_program([part], "", device=dev)
        b = p.create_buffer(64)
        k = p.create_kernel(prog, "k")
        k.set_args(b)
        p.enqueue_launch(k, (16,), device=dev)
        out, _ = p.enqueue_read(b)
        assert np.frombuffer(bytes(out), np.int32).tolist() == [7] * 16
    finally:
        p.close()
