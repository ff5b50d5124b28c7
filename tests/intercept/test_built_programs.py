"""A program built once is loaded from its binary by the next replay of the same source
(intercept.built_programs: the emulator's server replays one launch several times)."""

from __future__ import annotations

import os

import numpy as np

from clproj.intercept import built_programs
from clproj.intercept import record as R
from clproj.intercept.replay import replay

SRC = """
__kernel void axpy(float a, __global const float *x, __global float *y) {
    int i = get_global_id(0); y[i] = a * x[i] + y[i]; }
"""


def _axpy():
    n = 128
    x = np.arange(n, dtype=np.float32)
    y = np.full(n, 3, dtype=np.float32)
    return R.from_arrays(SRC, "axpy", [np.float32(2.0), x, y], n, 64), 2 * x + 3


def test_the_second_replay_loads_the_binary_and_computes_the_same(cl_device, tmp_path):
    rec, expected = _axpy()
    folder = str(tmp_path / "programs")
    first = replay(rec, cl_device, binaries=folder)
    second = replay(rec, cl_device, binaries=folder)
    assert (first.built_from, second.built_from) == ("source", "binary")
    for res in (first, second):
        np.testing.assert_array_equal(np.frombuffer(res.outputs[2], np.float32), expected)
    assert [f for f in os.listdir(folder) if f.endswith(".bin")]
    assert not [f for f in os.listdir(folder) if f.endswith(".part")]


def test_without_a_folder_every_replay_builds_from_source(cl_device, tmp_path):
    rec, _ = _axpy()
    assert replay(rec, cl_device).built_from == "source"
    assert replay(rec, cl_device).built_from == "source"


def test_an_unloadable_binary_is_built_from_source_and_replaced(cl_device, tmp_path):
    """A binary that cannot be loaded (a run killed while writing leaves a ``.part``,
    never a partial file under the key; this one is garbage) costs the speed-up only."""
    rec, expected = _axpy()
    folder = tmp_path / "programs"
    folder.mkdir()
    options = "-cl-kernel-arg-info"  # what replay builds with
    path = folder / built_programs.key(rec.source, options, cl_device)
    path.write_bytes(b"not a program")
    res = replay(rec, cl_device, binaries=str(folder))
    assert res.built_from == "source"
    np.testing.assert_array_equal(np.frombuffer(res.outputs[2], np.float32), expected)
    assert path.read_bytes() != b"not a program"
    assert replay(rec, cl_device, binaries=str(folder)).built_from == "binary"


def test_the_key_names_source_options_and_device(cl_device):
    base = built_programs.key(SRC, "", cl_device)
    assert base == built_programs.key(SRC, "", cl_device)
    assert base != built_programs.key(SRC + " ", "", cl_device)
    assert base != built_programs.key(SRC, "-DX=1", cl_device)
