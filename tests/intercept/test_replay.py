"""Replaying records on every OpenCL device reproduces the outputs."""

from __future__ import annotations

import numpy as np
import pytest

from clproj.errors import ClprojError
from clproj.intercept import record as R
from clproj.intercept.replay import replay

SRC = """
__kernel void axpy(float a, __global const float *x, __global float *y) {
    int i = get_global_id(0); y[i] = a * x[i] + y[i]; }
__kernel void rev(__global const int *in, __global int *out, __local int *tmp, __global int *unused) {
    int l = get_local_id(0), n = get_local_size(0);
    tmp[l] = in[get_global_id(0)]; barrier(CLK_LOCAL_MEM_FENCE);
    out[get_global_id(0)] = tmp[n - 1 - l] + (unused == 0 ? 1000 : 0); }
"""


def test_replay_axpy(cl_device, tmp_path):
    n = 256
    x = np.arange(n, dtype=np.float32)
    y = np.full(n, 3, dtype=np.float32)
    rec = R.from_arrays(SRC, "axpy", [np.float32(2.0), x, y], n, 64)
    res = replay(rec, cl_device)
    np.testing.assert_array_equal(np.frombuffer(res.outputs[2], np.float32), 2 * x + 3)
    assert res.outputs[1] == x.tobytes() and res.matches is None
    assert res.device == cl_device.name.strip()
    # a saved record with outputs verifies
    rec.outputs = {2: R.content_key(res.outputs[2]), 1: R.content_key(res.outputs[1])}
    rec.blobs.update({R.content_key(v): v for v in res.outputs.values()})
    again = replay(R.load(R.save(rec, str(tmp_path))), cl_device, check_outputs=True)
    assert again.matches is True
    assert again.time_ns is None or again.time_ns >= 0
    # a wrong expectation is caught
    rec.outputs = {2: R.content_key(x.tobytes())}
    rec.blobs[R.content_key(x.tobytes())] = x.tobytes()
    assert replay(rec, cl_device, check_outputs=True).matches is False


def test_replay_local_null_offset(cl_device):
    data = np.arange(64, dtype=np.int32)
    rec = R.from_arrays(
        SRC,
        "rev",
        [data, np.zeros(64, np.int32), R.LocalArg(16 * 4), None],
        48,
        16,
        global_offset=[16],
    )
    out = np.frombuffer(replay(rec, cl_device).outputs[1], np.int32)
    expect = np.zeros(64, np.int32)
    for g in range(16, 64, 16):
        expect[g : g + 16] = data[g : g + 16][::-1] + 1000
    np.testing.assert_array_equal(out, expect)


def test_a_null_with_a_size_on_a_local_parameter_is_local_memory(cl_device, tmp_path):
    """What the shim records for ``clSetKernelArg(k, 2, 8, NULL)`` without argument
    information: a NULL with its size. On a ``__local`` parameter the replay sets that
    much local memory (two ints: a group of two); a NULL without a size is refused there."""
    data = np.arange(8, dtype=np.int32)
    rec = R.from_arrays(SRC, "rev", [data, np.zeros(8, np.int32), None, None], 8, 2)
    rec.args[2].size = 8
    saved = R.load(R.save(rec, str(tmp_path)))
    assert (saved.args[2].kind, saved.args[2].size) == ("null", 8)
    out = np.frombuffer(replay(saved, cl_device).outputs[1], np.int32)
    np.testing.assert_array_equal(out, data.reshape(4, 2)[:, ::-1].ravel() + 1000)
    rec.args[2].size = None
    with pytest.raises(
        ClprojError, match=r"args\[2\]' is null, but argument 2 of rev is a __local"
    ):
        replay(rec, cl_device)


def test_replay_refuses_unsupported():
    rec = R.from_arrays(
        SRC, "axpy", [np.float32(1), np.zeros(4, np.float32), np.zeros(4, np.float32)], 4
    )
    rec.args[1] = R.ArgRecord(1, "unsupported", what="image")
    with pytest.raises(ClprojError, match="image"):
        replay(rec)
    rec.source = None
    with pytest.raises(ClprojError):
        replay(rec)


INT3_SRC = """
__kernel void sum3(__global int *out, int3 v) { out[get_global_id(0)] = v.x + v.y + v.z; }
"""


def test_a_three_component_vector_set_as_its_components_replays_and_emulates(cl_device):
    """PoCL accepts an ``int3`` set as 12 bytes (its three components); OpenCL C sizes it
    as an ``int4`` and Oclgrind refuses 12: the replay and the emulation pad it."""
    from clproj import miniemu

    rec = R.from_arrays(INT3_SRC, "sum3", [np.zeros(4, np.int32), np.int32(0)], 4, 4)
    rec.args[1].data = np.array([1, 2, 40], np.int32).tobytes()  # 12 bytes, as the app set
    out = np.frombuffer(replay(rec, cl_device).outputs[0], np.int32)
    np.testing.assert_array_equal(out, [43] * 4)
    assert miniemu.emulate(rec).launch["work_items"] == 4
