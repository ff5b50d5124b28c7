"""A snapshot's content hash, computed on a thread of its own while the snapshot is copied.

Why: a launch record can be emulated only once it is whole, and its blobs are named by
their content key (intercept.blobs). A changed snapshot of a large buffer is copied into
its scratch file in the app's thread; hashed afterwards on the record writer's thread, one
after the other, the record waits for both: with sha256 (about 1 ms per MiB) PolyBench
gemver's 256 MiB matrix waited 0.3 s for its hash after the copy, BabelStream's 400 MiB
arrays 0.4 s each, queued behind each other (2-core VM). Hashing each chunk as soon as it
is copied, from the file's pages the copy just touched, overlaps the two: the record's
hash is ready about when the copy ends (the hash, BLAKE3, is faster than the copy:
benchmarks/results/snapshot_copy.md). The hasher releases the interpreter lock while it
hashes a chunk, so the two threads run on two cores; on a busy machine the hash costs the
same CPU time, only earlier.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from clproj import settings
from clproj.background_thread import background_thread
from clproj.intercept.blobs import content_hasher

# Bytes copied before the hasher is told: small enough that a chunk is still in the cache
# when it is hashed, large enough that the hand-over (a lock and a wake-up) costs nothing.
CHUNK_BYTES = 4 << 20


class StreamHash:
    """The content key of ``data`` (``size`` bytes) as a copier fills it from the start:
    :meth:`filled` says how far, :meth:`result` waits for the hex digest, :meth:`cancel`
    stops the hasher (the copy failed: ``data`` is about to be closed). ``hasher`` makes
    the incremental hash (the content key's; benchmarks/snapshot_copy.py times another
    beside it)."""

    def __init__(self, data: Any, size: int, hasher: Callable[[], Any] = content_hasher) -> None:
        self._data = data
        self._hasher = hasher
        self._size = size
        self._ready = 0
        self._cancelled = False
        self._cond = threading.Condition()
        self._digest: str | None = None
        self._error: BaseException | None = None
        self._thread = background_thread(self._run, "clproj-snapshot-hash")
        self._thread.start()

    def filled(self, end: int) -> None:
        """The first ``end`` bytes of ``data`` hold their final content."""
        with self._cond:
            self._ready = end
            self._cond.notify_all()

    def cancel(self) -> None:
        """Stop hashing and wait until the hasher no longer reads ``data``."""
        with self._cond:
            self._cancelled = True
            self._cond.notify_all()
        self._thread.join()

    def result(self) -> str:
        """The content key (hex) of all ``size`` bytes, once the copier has filled them."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._digest is None:
            raise RuntimeError("the snapshot's hash was cancelled")
        return self._digest

    def _run(self) -> None:
        h = self._hasher()
        done = 0
        try:
            while done < self._size:
                with self._cond:
                    self._cond.wait_for(lambda done=done: self._cancelled or self._ready > done)
                    if self._cancelled:
                        return
                    end = self._ready
                chunk = memoryview(self._data)[done:end]
                try:
                    h.update(chunk)
                finally:
                    chunk.release()  # a mapping closes only once no view refers to it
                done = end
            self._digest = h.hexdigest()
        except BaseException as exc:  # reported by result(), on the writer's thread
            self._error = exc


def write_file(
    path: str,
    source: Any,
    size: int,
    filled: Callable[[int], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> int:
    """Write the first ``size`` bytes of ``source`` into the file ``path`` (created at that
    size: :meth:`BlobStore.scratch`) chunk by chunk with ``pwrite``, calling
    ``filled(end)`` after each chunk; returns the bytes written: ``size``, or fewer where
    ``stop()``, asked before each chunk, said the copy is no longer wanted
    (intercept.live_view.LiveView.released).

    Why ``pwrite`` and not a store through the file's mapping: every first store to a page
    of a new mapping faults, which on the 2-core VM makes the copy half as slow again
    (400 MiB into a new file of /tmp (ext4), median of five: 0.46 ms per MiB through the
    mapping, 0.29 with ``pwrite``, which allocates the pages without faulting them in;
    benchmarks/results/snapshot_copy.md)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        for start in range(0, size, CHUNK_BYTES):
            if stop is not None and stop():
                return start
            end = min(size, start + CHUNK_BYTES)
            chunk = source[start:end]
            if len(chunk) != end - start:
                raise ValueError(f"the source holds {start + len(chunk)} of {size} bytes")
            done = 0
            while done < len(chunk):  # pwrite may write less than asked
                done += os.pwrite(fd, chunk[done:], start + done)
            if filled is not None:
                filled(end)
    finally:
        os.close(fd)
    return size


def copy_and_hash(
    path: str,
    target: Any,
    source: Any,
    size: int,
    hasher: Callable[[], Any] = content_hasher,
) -> StreamHash:
    """Copy ``size`` bytes of ``source`` into the file ``path`` chunk by chunk, hashing
    each chunk from ``target`` (a mapping of that file: its pages are the ones just
    written, still in the cache) on a thread of its own as soon as it is written;
    returns the hash."""
    digest = StreamHash(target, size, hasher)
    try:
        write_file(path, source, size, digest.filled)
    except BaseException:
        digest.cancel()
        raise
    return digest


def streamed() -> bool:
    """Whether large snapshots are hashed as they are copied (``CLPROJ_SNAPSHOT_HASH``)."""
    return settings.get("CLPROJ_SNAPSHOT_HASH") == "streamed"


def copy_snapshot(path: str, view: Any, stage: Any, size: int, hashed: bool) -> StreamHash | None:
    """Copy ``size`` bytes of ``stage`` into the scratch file ``path`` (mapped as ``view``);
    ``hashed``: hashed as it is copied, so the record is whole about when the copy ends
    (the hash under way is returned), else by the record writer after the copy (None)."""
    if hashed:
        return copy_and_hash(path, view, stage, size)
    write_file(path, stage, size)
    return None
