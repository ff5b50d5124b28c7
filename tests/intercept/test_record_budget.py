"""CLPROJ_RECORD_MAX_BYTES counts the bytes records store (intercept/shim_runtime.py): the
blob store is content-addressed, so a snapshot identical to a stored one takes no disk and
must not stop recording (BabelStream at 400 MiB: 6000 MiB of snapshots of the same three
arrays, every kernel within 4 GiB)."""

from __future__ import annotations

import numpy as np

from clproj.intercept import shim_runtime
from clproj.intercept.record import from_arrays, list_records
from clproj.intercept.record_writer import RecordWriter

SOURCE = "__kernel void peek(__global const float *a, int k) { }"


def test_the_record_budget_counts_stored_bytes_not_snapshots(tmp_path, monkeypatch):
    """Six records of one 1 MiB snapshot under a 3 MiB limit are all written through the
    background writer (the fourth reservation passes the limit until the writer has told
    what the first three stored, and waits for it); distinct content counts in full and is
    refused past the limit."""
    monkeypatch.setattr(shim_runtime, "_snapshot_bytes", 0)
    monkeypatch.setattr(shim_runtime, "_unwritten", 0)
    data = np.arange(1 << 18, dtype=np.float32)  # 1 MiB
    monkeypatch.setenv("CLPROJ_RECORD_MAX_BYTES", str(3 * data.nbytes))
    writer = RecordWriter()
    written: list[str] = []

    def record(content: np.ndarray, k: int) -> bool:
        if not shim_runtime.within_record_budget(content.nbytes, str(tmp_path)):
            return False
        rec = from_arrays(SOURCE, "peek", [content.copy(), np.int32(k)], 4)
        writer.submit(
            rec,
            str(tmp_path),
            then=lambda r: written.append(r.id),
            after=lambda r: shim_runtime.settle(content.nbytes, r.stored_bytes),
        )
        return True

    assert all(record(data, k) for k in range(6))
    assert writer.drain(60)
    assert len(written) == len(list_records(str(tmp_path))) == 6
    assert record(data + 1, 6) and record(data + 2, 7)  # 2 and 3 MiB stored
    assert not record(data + 3, 8)  # 4 MiB would be stored: past the limit
    assert writer.drain(60)
    assert len(list_records(str(tmp_path))) == 8
