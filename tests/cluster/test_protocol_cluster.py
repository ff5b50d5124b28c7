"""Protocol: encoding, size limits, schema validation, version field; plus placement rules."""

from __future__ import annotations

import msgpack
import pytest

from clproj.runtime.cluster import placement, protocol
from clproj.runtime.cluster.protocol import ProtocolError


def test_done_batch_and_direct_register_are_accepted():
    h, _ = protocol.decode([protocol.pack("done", ids=[3, 4], ts=[1.5e-5, None])])
    assert h["ids"] == [3, 4] and h["ts"] == [1.5e-5, None]
    reg = protocol.pack(
        "register",
        node="n",
        host="h",
        pid=1,
        devices=[{"name": "d", "profile": {}}],
        direct="tcp://10.0.0.2:5600",
        direct_key="rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7",
    )
    assert protocol.decode([reg])[0]["direct"] == "tcp://10.0.0.2:5600"


def test_roundtrip_and_data_frames_stay_outside_the_header():
    data = bytes(range(256)) * 10
    hdr = protocol.pack(
        "cmd", id=7, dev="n/0", op="buf_write", a={"h": 1, "off": 0, "n": len(data)}
    )
    h, frames = protocol.decode([hdr, data])
    assert h["op"] == "buf_write" and frames[0] is data
    assert len(hdr) < 100  # bulk data is never packed into the header


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xc1",  # never-used msgpack byte
        msgpack.packb([1, 2, 3]),
        msgpack.packb({"v": 2, "t": "hello", "client": "x"}),  # future version
        msgpack.packb({"v": 1, "t": "nope"}),
        msgpack.packb({"v": 1, "t": "hello"}),  # missing field
        msgpack.packb({"v": 1, "t": "hello", "client": "x", "extra": 1}),
        msgpack.packb({"v": 1, "t": "hello", "client": 5}),
        msgpack.packb({"v": 1, "t": "cmd", "id": 1, "dev": "d", "op": "launch", "a": {}}),
        msgpack.packb(
            {
                "v": 1,
                "t": "cmd",
                "id": 1,
                "dev": "d",
                "op": "buf_create",
                "a": {"h": 1, "size": -5, "flags": 1},
            }
        ),
        msgpack.packb(
            {
                "v": 1,
                "t": "cmd",
                "id": 1,
                "dev": "d",
                "op": "buf_read",
                "a": {"h": 1, "off": 0, "n": 2**40},
            }
        ),
        msgpack.packb(
            {"v": 1, "t": "place", "id": 1, "key": "k", "move": {"d": -1}, "remaining": 1}
        ),
        msgpack.packb({"v": 1, "t": "projection", "key": "k", "times": {"d": "fast"}}),
        msgpack.packb({"v": 1, "t": "hello", "client": "x" * 300}),
        msgpack.packb({1: 2}),  # non-string map key
        msgpack.packb({"v": 1, "t": "done", "ids": [1, 2], "ts": [0.1]}),  # lengths differ
        msgpack.packb({"v": 1, "t": "done", "ids": ["1"], "ts": [None]}),
        msgpack.packb({"v": 1, "t": "done", "ids": [1], "ts": ["fast"]}),
        msgpack.packb(
            {
                "v": 1,
                "t": "register",
                "node": "n",
                "host": "h",
                "pid": 1,
                "devices": [{"name": "d", "profile": {}}],
                "direct": "file:///etc/passwd",  # only ipc:// or tcp://
            }
        ),
        msgpack.packb(
            {"v": 1, "t": "heartbeat", "node": "n", "load": {}, "inflight": 0, "lt": {"0": "x"}}
        ),
        b"\x92" + b"\xc4\xff" * 2,  # truncated bin
    ],
)
def test_malformed_headers_are_rejected(raw):
    with pytest.raises(ProtocolError):
        protocol.decode([raw])


def test_launch_argument_and_dimension_checks():
    base = {"prog": 1, "kernel": "k", "gsize": [64]}
    ok = dict(
        base,
        args=[["b", 1], ["s", b"\0\0\0\0"], ["l", 256], ["n"], ["r", 1, 64, 32], ["s", b"x" * 300]],
        lsize=[16],
    )
    protocol.validate_command("launch", ok, 0)
    bad = [
        dict(base, args=[["s", b"x" * 5000]]),  # past the largest by-value argument
        dict(base, args=[["r", 1, 0, 0]]),  # an empty sub-buffer
        dict(base, args=[["r", 1, 0]]),
        dict(base, args=[["b", -1]]),
        dict(base, args=[["q", 1]]),
        dict(base, args=[], gsize=[0]),
        dict(base, args=[], gsize=[1, 2, 3, 4]),
        dict(base, args=[], lsize=[1, 1]),
        dict(base, args=[["b"]] * 300),
        dict(base, args=[], kernel="k\0x"),  # would launch k: clCreateKernel stops at NUL
        dict(base, args=[], kernel="1k"),
    ]
    for a in bad:
        with pytest.raises(ProtocolError):
            protocol.validate_command("launch", a, 0)
    with pytest.raises(ProtocolError):  # a write without its data frame
        protocol.validate_command("buf_write", {"h": 1, "off": 0, "n": 4}, 0)


def test_oversized_header_rejected_before_decoding():
    with pytest.raises(ProtocolError, match="exceeds"):
        protocol.unpack(b"\x00" * (protocol.MAX_HEADER_BYTES + 1))


def _views():
    return {
        "slow": placement.DeviceView("slow", peak_flops=1e9, h2d_bytes_per_s=1e9),
        "fast": placement.DeviceView("fast", peak_flops=4e9, h2d_bytes_per_s=1e9),
    }


def test_placement_without_projection_goes_to_default_at_once():
    d = placement.decide({"slow": None, "fast": None}, _views(), {}, 1)
    assert d.device == "fast" and "no projection" in d.reason
    d = placement.decide({}, _views(), {}, 1, current="slow")
    assert d.device == "slow"


def test_migration_only_when_gain_over_remaining_launches_outweighs_moving_data():
    times = {"slow": 0.010, "fast": 0.002}
    move = {"fast": 100_000_000, "slow": 0}  # 0.1 s to move the buffers to "fast"
    # 5 launches left: gain 0.04 s < 0.1 s of data movement -> stay
    assert placement.decide(times, _views(), move, 5, current="slow").device == "slow"
    # 50 launches left: gain 0.4 s > 0.1 s -> migrate
    d = placement.decide(times, _views(), move, 50, current="slow")
    assert d.device == "fast" and d.reason.startswith("migrate")


def test_queue_load_steers_away_from_a_busy_device():
    views = _views()
    views["fast"].queue_s = 1.0
    assert placement.decide({"slow": 0.01, "fast": 0.002}, views, {}, 10).device == "slow"


def test_fallback_peak_ratio_projection_scales_a_measured_time():
    t = placement.peak_ratio_projection({"slow": 0.008}, _views())
    assert t["slow"] == pytest.approx(0.008) and t["fast"] == pytest.approx(0.002)
    assert placement.peak_ratio_projection({}, _views()) == {"slow": None, "fast": None}
