"""A device buffer snapshotted again with the bytes of its last snapshot is that snapshot.

Why: an app launches kernels over the same buffers, and a buffer that no launch wrote
since its last snapshot is read again for the next recorded launch (BabelStream at 400 MiB:
6 of its 15 snapshots, 2400 MiB). Reading a snapshot into a new file of the blob store
costs 1.2-3 ms per MiB on the 2-core VM (page faults of a new file, dirty-page throttling
past a few GiB), hashing it 1.0-1.3 ms per MiB. Read into a staging buffer kept for the
process (0.1-0.2 ms per MiB once its pages exist) and compared with the last snapshot of
the same buffer (memcmp, stopping at the first differing byte), an unchanged snapshot
costs neither: the record names it by the last snapshot's blob, and the record writer
takes that blob's hash (:meth:`LaunchRecord.resolve_blobs`) only where it is the hash of
exactly that snapshot (its sequence number), else hashes the bytes. A launch's input of
zeros costs neither either: the record names no blob (read back as zeros); a
``--verify`` output of zeros is a sparse file whose hash is computed once per size
(:func:`clproj.intercept.blobs.zeros_key`). Either way its "last snapshot" is an
anonymous mapping of the kernel's zero page, compared as zeros (:func:`all_zero`) without
being read. A snapshot that is neither costs one more copy, from
the staging buffer into its file. The cost: a staging buffer the
size of the largest snapshot, and each buffer's last snapshot kept mapped; a mapped file
that the writer removed (its bytes were stored already) keeps its disk space while mapped,
so the mappings kept are the most recent ones up to ``CLPROJ_RECORD_MAX_BYTES`` in all.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import mmap
import threading
from collections.abc import Iterator
from typing import Any


class LastSnapshots:
    """Each device buffer's last snapshot (a read-only mapping of its file) and the
    staging buffer snapshots are compared in; thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # held while the staging buffer is in use
        self._last: dict[int, tuple[int, mmap.mmap]] = {}
        self._stage = bytearray()
        self._seq = itertools.count(1)
        self._guard = threading.Lock()
        self._zeros: set[int] = set()  # id() of the kept mappings that are zeros

    def previous(self, source: int, size: int) -> tuple[int, mmap.mmap] | None:
        """(sequence number, mapping) of ``source``'s last snapshot when it had ``size`` bytes."""
        with self._guard:
            last = self._last.get(source)
        return last if last is not None and len(last[1]) == size else None

    def is_zeros(self, previous: tuple[int, mmap.mmap]) -> bool:
        """Whether ``previous`` (from :meth:`previous`) is a snapshot of zeros."""
        with self._guard:
            return id(previous[1]) in self._zeros

    def equals_previous(self, data: Any, previous: tuple[int, mmap.mmap]) -> bool:
        """Whether ``data`` holds the bytes of ``previous`` (from :meth:`previous`). A
        previous snapshot of zeros is compared as zeros: reading its mapping would fault
        each of its pages in (400 MiB: 0.14-0.22 s the first time, 0.05-0.06 s for
        :func:`all_zero` of the data, 2-core VM)."""
        return all_zero(data) if self.is_zeros(previous) else same_bytes(data, previous[1])

    def staging(self, size: int) -> memoryview:
        """``size`` bytes of the staging buffer (the caller holds :attr:`lock`)."""
        if len(self._stage) < size:
            self._stage = bytearray(size)
        return memoryview(self._stage)[:size]

    def remember(self, source: int, path: str, size: int) -> int:
        """Make the snapshot in file ``path`` ``source``'s last one; its sequence number.
        Mapped from the path now, before the record writer renames or removes the file
        (the mapping outlives both)."""
        with open(path, "rb") as fh:
            mapped = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ)
        return self._keep(source, mapped)

    def remember_zeros(self, source: int, size: int) -> tuple[int, mmap.mmap]:
        """Make ``size`` zero bytes ``source``'s last snapshot: (sequence number, a
        read-only anonymous mapping, whose pages are the kernel's one zero page)."""
        zeros = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
        return self._keep(source, zeros, is_zeros=True), zeros

    def _keep(self, source: int, mapped: mmap.mmap, is_zeros: bool = False) -> int:
        from clproj import settings

        limit = int(settings.get("CLPROJ_RECORD_MAX_BYTES"))
        with self._guard:
            seq = next(self._seq)
            self._forget(source)
            self._last[source] = (seq, mapped)  # the newest last: the oldest go first
            if is_zeros:
                self._zeros.add(id(mapped))
            held = sum(len(m) for _, m in self._last.values())
            while limit and held > limit and len(self._last) > 1:
                held -= len(self._forget(next(iter(self._last))))
        return seq

    def _forget(self, source: int) -> bytes | mmap.mmap:
        """Drop ``source``'s last snapshot (the caller holds the guard); its mapping."""
        _, mapped = self._last.pop(source, (0, b""))
        self._zeros.discard(id(mapped))
        return mapped


def all_zero(data: Any) -> bool:
    """Whether every byte of ``data`` is zero: one pass, stopping at the first that is not
    (a buffer equal to itself shifted by one byte, and a zero first byte)."""
    with _bytes_of(data) as (p, n):
        return n == 0 or (ctypes.string_at(p, 1) == b"\0" and _memcmp()(p, p + 1, n - 1) == 0)


def same_bytes(a: Any, b: Any) -> bool:
    """Whether two buffers of one size hold the same bytes (C's memcmp)."""
    with _bytes_of(a) as (x, n), _bytes_of(b) as (y, m):
        return n == m and _memcmp()(x, y, n) == 0


class _PyBuffer(ctypes.Structure):
    """CPython's ``Py_buffer`` (the stable buffer protocol's view of an object)."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


@contextlib.contextmanager
def _bytes_of(data: Any) -> Iterator[tuple[int, int]]:
    """(address, length) of ``data``'s bytes, read-only mappings included, held for the
    ``with``: the buffer protocol through ctypes, released on leaving (a mapping closes
    only once nothing refers to it). Not numpy: a C app's first snapshot waited 0.05-0.06 s
    for numpy's import (2-core VM), and nothing else in the app needs it."""
    view = _PyBuffer()
    get, release = _buffer_api()
    get(ctypes.py_object(data), ctypes.byref(view), 0)  # PyBUF_SIMPLE; BufferError if not
    try:
        yield view.buf or 0, view.len
    finally:
        release(ctypes.byref(view))


@functools.cache
def _buffer_api() -> tuple[Any, Any]:
    get = ctypes.pythonapi.PyObject_GetBuffer
    get.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
    get.restype = ctypes.c_int
    release = ctypes.pythonapi.PyBuffer_Release
    release.argtypes = [ctypes.POINTER(_PyBuffer)]
    release.restype = None
    return get, release


@functools.cache
def _memcmp() -> Any:
    fn = ctypes.CDLL(None).memcmp
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


LAST = LastSnapshots()
