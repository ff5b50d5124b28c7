"""Snapshots mapped instead of read: what the emulator relies on to cost the same for a
kilobyte and a gigabyte buffer, and that mapping never changes or trusts a record."""

from __future__ import annotations

import os

import blake3
import numpy as np
import pytest

from clproj.errors import ClprojError
from clproj.intercept import record as R
from clproj.intercept.blobs import BlobStore
from clproj.intercept.replay import replay

SRC = """
__kernel void bump(__global float *x, __global float *y) {
  size_t i = get_global_id(0);
  y[i] = x[i] * 2.0f;
  x[i] = -1.0f;  /* writes its input: a mapped snapshot must not change on disk */
}
"""


@pytest.fixture
def saved(tmp_path):
    x = np.arange(4096, dtype=np.float32)
    rec = R.from_arrays(SRC, "bump", [x, np.zeros_like(x)], [4096], [64])
    path = R.save(rec, str(tmp_path / "store"))
    return R.load(path)


def test_mapped_replay_matches_and_leaves_the_snapshot_alone(saved, cl_device):
    plain = replay(saved, cl_device)
    mapped = replay(saved, cl_device, map_buffers=True)
    assert mapped.outputs == plain.outputs
    y = np.frombuffer(mapped.outputs[1], dtype=np.float32)
    assert y[3] == 6.0
    sha = saved.arg(0).blob
    on_disk = BlobStore(saved.store_dir).get(sha, saved.arg(0).size)  # hash still checks
    assert blake3.blake3(on_disk).hexdigest() == sha
    assert replay(saved, cl_device, map_buffers=True, read_outputs=False).outputs == {}


def test_working_copies_link_their_blobs(saved, tmp_path):
    import copy

    path = R.save(copy.copy(saved), str(tmp_path / "work"), link_blobs=True)
    sha = saved.arg(0).blob
    linked = os.path.join(str(tmp_path / "work"), "blobs", sha)
    origin = os.path.join(saved.store_dir, "blobs", sha)
    assert os.path.samefile(linked, origin)
    assert R.load(path).buffer_bytes(0) == saved.buffer_bytes(0)
    # A copy meant to travel holds its own blobs.
    R.save(copy.copy(saved), str(tmp_path / "travel"))
    own = os.path.join(str(tmp_path / "travel"), "blobs", sha)
    assert not os.path.samefile(own, origin)


def test_a_mapped_blob_is_still_checked(saved, tmp_path):
    store = BlobStore(saved.store_dir)
    sha, size = saved.arg(0).blob, saved.arg(0).size
    with pytest.raises(ClprojError, match="expected"):
        store.map(sha, size + 1)
    with pytest.raises(ClprojError, match="not a content hash"):
        store.map("../../etc/passwd", 8)
    with pytest.raises(ClprojError, match="missing"):
        store.map("0" * 64, 8)
    os.replace(os.path.join(store.path, sha), os.path.join(store.path, "moved"))
    os.mkfifo(os.path.join(store.path, sha))
    with pytest.raises(ClprojError, match="not a regular file"):
        store.map(sha, size)
    # An argument without a snapshot maps zero pages of its size.
    saved.arg(1).blob = None
    view = saved.buffer_view(1)
    assert len(view) == saved.arg(1).size and bytes(view) == bytes(saved.arg(1).size)
