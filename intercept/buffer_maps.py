"""Whether this host can map a record's buffers, as the emulator maps them.

Why a check of its own: an emulation maps every buffer argument whole
(:meth:`LaunchRecord.buffer_view`: zero pages, or the blob copy-on-write), and records are
untrusted, so a buffer ``size`` can be far beyond what the host will map (a 1 TiB
``size`` with a null blob). The kernel refuses such a mapping by its overcommit policy: by
default one larger than its memory and swap, under strict accounting more than its commit
limit, always more than the address space or ``RLIMIT_AS``. No formula here models that
policy: the kernel is asked, with the same anonymous mappings, never touched and unmapped
at once, before a worker process starts. Inside the worker the same refusal is this
module's one-line error too, never the worker's traceback.
"""

from __future__ import annotations

import mmap
from typing import TYPE_CHECKING

from clproj.errors import ClprojError
from clproj.intercept.blobs import BlobStore

if TYPE_CHECKING:
    from clproj.intercept.record import LaunchRecord


def refused(record: LaunchRecord, index: int, size: int, exc: Exception) -> ClprojError:
    """The one-line error for buffer argument ``index`` of ``size`` bytes that this host
    would not map (``exc``: what ``mmap`` raised)."""
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "too large to address"
    return ClprojError(
        f"launch {record.id or record.kernel}: field 'args[{index}].size' {size} bytes "
        f"({size / 2**30:.4g} GiB) cannot be mapped on this machine ({why}): an emulation "
        "maps each buffer argument whole, and this host refuses a mapping beyond its memory "
        "and swap (or its address space)",
        "emulate the launch on a machine with that much memory, or record it again if "
        "the size is wrong",
    )


def mapped(record: LaunchRecord, index: int, blob_key: str | None, size: int) -> mmap.mmap:
    """Buffer argument ``index`` of ``size`` bytes mapped for :meth:`LaunchRecord.buffer_view`:
    zero pages (``blob_key`` None), or the blob of the record's store copy-on-write."""
    try:
        if blob_key is None:
            return mmap.mmap(-1, max(1, size))
        return BlobStore(str(record.store_dir)).map(blob_key, size)
    except (OSError, OverflowError) as exc:
        raise refused(record, index, max(1, size), exc) from None


def check_mappable(record: LaunchRecord) -> None:
    """Raise :func:`refused` for the first buffer argument the host would not map beside
    the ones before it (the worker holds them all at once). A live record's buffers are
    the app's own pages (intercept.live_pages): mapped already, not asked for."""
    held: list[mmap.mmap] = []
    try:
        for a in sorted(record.args, key=lambda a: a.index):
            if a.kind != "buffer" or a.dropped or a.index in record.live:
                continue
            size = max(1, int(a.size or 0))
            try:
                held.append(mmap.mmap(-1, size))
            except (OSError, OverflowError) as exc:
                raise refused(record, a.index, size, exc) from None
    finally:
        for m in held:
            m.close()
