"""Background writing of launch records: a recording app does not wait for the disk.

Why a module of its own: a launch-heavy app (project mode) records thousands of launches;
the blocking read of a launch's buffers must happen at the launch, but hashing and
writing a multi-MiB snapshot need not. The writer thread, its bounded queue and its
drain at exit are one job, apart from the record format (intercept.record).
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
from typing import Any

from clproj import settings
from clproj.background_thread import background_thread
from clproj.errors import ClprojError, say_once
from clproj.intercept.hooks import at_exit
from clproj.intercept.record import LaunchRecord, save


class RecordWriter:
    """Saves records on a background thread, so a recording app does not wait for it.

    The blocking read of a launch's buffers must happen at the launch, but writing a
    multi-MiB snapshot (msgpack, blob files) need not: :meth:`submit` queues the record
    and returns. At most ``max_bytes`` of blob data wait in the queue (a full queue makes
    :meth:`submit` wait: memory stays bounded). ``then(record)`` runs on the writer thread
    once the record file is complete (blobs first, then the record, renamed into place),
    so nothing refers to a record file that is not whole. :meth:`drain` waits until the
    queue is written (at exit, before ``clproj run`` reads the records; hooks that run
    then see ``intercept.hooks.exiting()``).
    """

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self._cond = threading.Condition()
        self._queue: collections.deque[tuple[Any, ...]] = collections.deque()
        self._bytes = 0
        self._busy = False
        self._thread: threading.Thread | None = None
        self._failed = False
        # each device buffer's last snapshot (record.save ``last``): one writer, in order
        self.last: dict[int, tuple[int, str]] = {}

    def submit(
        self,
        record: LaunchRecord,
        directory: str,
        then: Any = None,
        after: Any = None,
        kind: str = "save",
    ) -> None:
        """Queue ``record``: ``kind`` ``save`` writes it; ``update`` writes it again (a
        field changed since, e.g. its measured time) and ``withdraw`` removes its file, each
        only where its ``save`` wrote it."""
        # Snapshots read into the store's scratch files (BlobStore.scratch) are page cache,
        # which the kernel writes back and bounds itself: only process memory counts.
        size = sum(len(b) for k, b in record.blobs.items() if k not in record.blob_files)
        with self._cond:
            while self._bytes and self._bytes + size > self.max_bytes:
                self._cond.wait()
            self._queue.append((kind, record, directory, then, after, size))
            self._bytes += size
            if self._thread is None:
                self._thread = background_thread(self._run, "clproj-record-writer")
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                kind, record, directory, then, after, size = self._queue.popleft()
                self._busy = True
            try:
                self._write(kind, record, directory)
                if then is not None:
                    then(record)
            except ClprojError as exc:  # e.g. a record over the size limit: that one only
                print(f"clproj: {exc.cause}", file=sys.stderr)
            except Exception as exc:  # log once; the app must go on
                if not self._failed:
                    self._failed = True
                    print(f"clproj: writing record {record.id} failed: {exc!r}", file=sys.stderr)
            finally:
                record.drop_blobs()  # written: the snapshot's memory is not needed here
                if after is not None:
                    after(record)
                with self._cond:
                    self._bytes -= size
                    self._busy = False
                    self._cond.notify_all()

    def _write(self, kind: str, record: LaunchRecord, directory: str) -> None:
        if kind != "save" and record.path is None:
            return  # its save failed (reported): nothing to update or remove
        if kind == "withdraw":
            with contextlib.suppress(OSError):
                os.unlink(record.path)
        else:  # an update finds its blobs stored: only the map is written again
            save(record, directory, last=self.last)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every submitted record is written; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)


_writer_lock = threading.Lock()
_writer: RecordWriter | None = None
# Each device buffer's last snapshot, for the records saved at once (outside project mode).
# Threads of the app may save side by side: a stale entry only costs a hash.
_last: dict[int, tuple[int, str]] = {}


def hashed_snapshot(source: int) -> tuple[int, str] | None:
    """(sequence number, content key) of the last snapshot of device buffer ``source``
    that the project-mode writer has hashed, or None: a later launch whose buffer still
    holds those bytes can name that blob before its own record is written
    (intercept.live_view)."""
    with _writer_lock:
        writer = _writer
    return None if writer is None else writer.last.get(source)


def revise_later(record: LaunchRecord, directory: str, withdraw: bool = False) -> None:
    """Project mode: after :func:`save_later` of ``record``, write its file again (a field
    changed: the launch's measured time) or, with ``withdraw``, remove it (the launch
    failed), in order behind that save on the same writer."""
    with _writer_lock:
        writer = _writer
    if writer is not None:
        writer.submit(record, directory, kind="withdraw" if withdraw else "update")


def save_later(record: LaunchRecord, directory: str, then: Any = None, after: Any = None) -> None:
    """:func:`save` on the process-wide :class:`RecordWriter`, drained at process exit.
    ``then(record)`` runs once the record is saved, ``after(record)`` once it is saved or
    failed (``record.stored_bytes``: what it added to the blob store).

    Only in project mode (``CLPROJ_MODE=project``), whose launch-heavy apps it is for;
    in the other modes the record is saved and ``then`` called at once, as before (route
    mode wants each projection as early as possible: later launches migrate by it).
    """
    global _writer
    if settings.get("CLPROJ_MODE") != "project":
        try:
            save(record, directory, last=_last)
        except ClprojError as exc:  # not recorded (e.g. over the size limit); the app goes on
            print(f"clproj: {exc.cause}", file=sys.stderr)
            return
        except OSError as exc:  # a full or failing disk: the record is lost, never the app's call
            # one line per process: every later record fails alike
            say_once(
                "records-unwritten",
                f"launch records cannot be written to {directory} ({exc.strerror or exc}); "
                "later launches run but are not recorded (record elsewhere: --record DIR)",
            )
            return
        finally:
            if after is not None:
                after(record)
        if then is not None:
            then(record)
        return
    with _writer_lock:
        if _writer is None:
            _writer = RecordWriter()
            at_exit(_writer.drain)
    _writer.submit(record, directory, then, after)
