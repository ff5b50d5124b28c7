"""Content-addressed blob store of launch records: ``DIR/blobs/<key>`` (docs/formats.md §1).

Why a module of its own: buffer snapshots are the bulk of a record directory and are
shared between records (the same matrix passed to a thousand launches is stored once);
how they are named, written atomically and checked when read back (a blob name becomes
a file name, so it must be a content hash and nothing else) is one job, apart from the
record format that refers to them.

The content key is BLAKE3-256 (hex), not sha256: a launch's record can be emulated only
once every changed snapshot is hashed, and on the 2-core Xeon VM (no SHA instructions)
sha256 takes 0.75-0.9 s per GiB on a core, BLAKE3 0.23-0.28 s, less than the snapshot's
copy into its file (0.3 s per GiB), so a hash computed beside the copy does not delay the
record (benchmarks/results/snapshot_copy.md). hashlib has nothing faster than sha256 here
(sha1 0.76, blake2b 1.6, md5 1.8 s per GiB).
"""

from __future__ import annotations

import functools
import mmap
import os
import re
import tempfile
import threading
from typing import Any

import blake3

from clproj.atomic import write_atomic
from clproj.background_thread import background_thread
from clproj.errors import ClprojError
from clproj.untrusted import map_regular_file, read_regular_file

BLOBS_SUBDIR = "blobs"
MAX_SIZE_T = 2**64 - 1  # sizes and NDRange entries are size_t: no blob is larger
# A blob reference is the content key of the data, as BlobStore names its files, and
# nothing else: it becomes a file name, so it can never be a path.
BLOB_KEY = re.compile(r"[0-9a-f]{64}")
CONTENT_HASH = "BLAKE3-256"  # what a blob key is (docs/formats.md §1)


def content_hasher() -> Any:
    """A new incremental hasher of :data:`CONTENT_HASH` (``update``, ``hexdigest``): for a
    snapshot hashed chunk by chunk as it is copied (intercept.snapshot_hash). Its
    ``update`` releases the interpreter lock, so it runs beside the copying thread."""
    return blake3.blake3()


def content_key(data: Any) -> str:
    """The name of a blob: :data:`CONTENT_HASH` (hex) of its content (any buffer).

    On one thread, the caller's: hashing on every core would start the library's thread
    pool, one thread per core that stays for the process's life, inside a recorded app
    too, and the app's cores are the app's."""
    return blake3.blake3(data).hexdigest()


@functools.lru_cache(maxsize=16)
def zeros_key(size: int) -> str:
    """The name of a blob of ``size`` zero bytes, hashed once per size and process: a
    buffer no launch wrote yet is snapshotted as zeros, often several of one size (the
    arrays an app creates together), and hashing 400 MiB still takes 0.1 s of a core."""
    h = content_hasher()
    chunk = bytes(min(size, 1 << 20))
    for offset in range(0, size, len(chunk) or 1):
        h.update(chunk[: size - offset])
    return h.hexdigest()


_prepared: dict[int, threading.Thread] = {}
_prepared_lock = threading.Lock()


def prepare_zeros_key(size: int) -> None:
    """Start :func:`zeros_key` of ``size`` on a thread of its own (once per size, for
    16 sizes). Why: the shim finds a snapshot of zeros before its launch runs, and the
    record writer names the blob only after the launch: hashing meanwhile, the writer finds
    the name ready. BabelStream's first launch, three 400 MiB arrays nothing wrote yet,
    waited 0.6-1.3 s for that hash after a launch of about 1 s."""
    with _prepared_lock:
        if size in _prepared or len(_prepared) >= 16:
            return
        thread = background_thread(zeros_key, "clproj-zeros-hash", (size,))
        _prepared[size] = thread
    thread.start()


def prepared_zeros_key(size: int) -> str:
    """:func:`zeros_key`, waiting for a hash :func:`prepare_zeros_key` started
    rather than computing it a second time beside it."""
    with _prepared_lock:
        thread = _prepared.get(size)
    if thread is not None and thread.ident is not None:
        thread.join()
    return zeros_key(size)


def is_blob_key(value: object) -> bool:
    """True for a content hash as the blob store names its files (64 lowercase hex)."""
    return isinstance(value, str) and BLOB_KEY.fullmatch(value) is not None


class BlobStore:
    """Content-addressed store ``DIR/blobs/<content key>``: identical data is written once."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, BLOBS_SUBDIR)

    def put(self, data: bytes, key: str | None = None) -> str:
        """Store ``data``; ``key`` (its content key, when the caller has it) spares a
        second pass over a multi-MiB snapshot."""
        key = key or content_key(data)
        if not is_blob_key(key):  # the name becomes a path: a hash, never anything else
            raise ClprojError(f"blob key {str(key)[:80]!r} is not a content hash")
        target = os.path.join(self.path, key)
        if os.path.exists(target):
            return key
        os.makedirs(self.path, exist_ok=True)
        # concurrent writers (threads of the recorded app) never expose half a blob
        write_atomic(target, data, private=True)
        return key

    def put_zeros(self, size: int, key: str) -> None:
        """Store blob ``key`` (:func:`zeros_key` of ``size``) as a sparse file: no page
        of it is written, and reading or mapping it gives zeros."""
        if not is_blob_key(key):
            raise ClprojError(f"blob key {str(key)[:80]!r} is not a content hash")
        target = os.path.join(self.path, key)
        if os.path.exists(target):
            return
        os.makedirs(self.path, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=".zeros-")  # 0600, like blobs
        try:
            os.ftruncate(fd, size)
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise
        finally:
            os.close(fd)

    def scratch(self, size: int) -> tuple[str, mmap.mmap]:
        """A new private file of ``size`` bytes in the store, mapped writable: a snapshot
        is copied into it from the staging buffer (:meth:`adopt` names it by its hash).

        Why: a snapshot held in process memory until its blob is written is copied once
        more into the page cache, and holds anonymous memory the size of the buffer until
        then; a mapped file is written once and the kernel writes it back in the
        background. Measured on the 2-core VM, 400 MiB: 1.96 -> 1.34 ms per MiB for
        read + hash + store (the hash, 0.95 ms, is most of what is left).
        """
        os.makedirs(self.path, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=".snap-")  # 0600, like blobs
        try:
            os.ftruncate(fd, size)
            return tmp, mmap.mmap(fd, size)
        except BaseException:
            os.unlink(tmp)
            raise
        finally:
            os.close(fd)

    def adopt(self, scratch: str, key: str) -> None:
        """Make the scratch file of :meth:`scratch`, whose content hashes to ``key``, blob
        ``key`` (a rename: no copy); when the store has that blob already, drop it."""
        if not is_blob_key(key):
            raise ClprojError(f"blob key {str(key)[:80]!r} is not a content hash")
        target = os.path.join(self.path, key)
        if os.path.exists(target):
            os.unlink(scratch)
        else:
            os.replace(scratch, target)

    def _existing(self, key: str) -> str:
        """The file of blob ``key``: a content hash (never a path) that is in the store."""
        if not is_blob_key(key):
            raise ClprojError(
                f"blob reference {str(key)[:80]!r} is not a content hash (64 lowercase hex digits)",
                "record the launch again with `clproj run --record DIR -- ...`",
            )
        target = os.path.join(self.path, key)
        if not os.path.lexists(target):
            raise ClprojError(
                f"blob {key} is missing from {self.path}",
                "copy the record directory together with its blobs/ folder",
            )
        return target

    def get(self, key: str, size: int | None = None) -> bytes:
        """The blob named ``key``, checked: a content hash (never a path), a regular
        file, ``size`` bytes when the record declares a size, and content hashing to
        ``key``. At most ``size`` bytes are read, whatever the file is."""
        target = self._existing(key)
        limit = size if size is not None else MAX_SIZE_T
        data = read_regular_file(
            target, "blob", limit, "copy the blobs/ folder again, or record the launch again"
        )
        if size is not None and len(data) != size:
            raise ClprojError(
                f"blob {key} in {self.path} is corrupt: {len(data)} bytes, the record "
                f"declares {size}",
                "copy the blobs/ folder again, or record the launch again",
            )
        if content_key(data) != key:
            raise ClprojError(
                f"blob {key} in {self.path} is corrupt (content hash differs)",
                "record the launch again",
            )
        return data

    def map(self, key: str, size: int) -> mmap.mmap:
        """The blob named ``key`` mapped copy-on-write, without reading it: a regular file
        of exactly ``size`` bytes. The content hash is not checked (that would read every
        page); readers that need the whole content use :meth:`get`. The emulator maps:
        it reads the pages its sampled work-items touch, and a corrupt page can only make
        a projection wrong, never reach the app or the record.

        The mapping is advised random access (``MADV_RANDOM``): a fault reads its page, not
        the device's read-ahead window around it (8 MiB on the 2-core VM), so a cold
        snapshot costs the pages the sampled work-items touch (bounded emulation of a copy
        over 64 MiB arrays: 8 MiB read per array with the default advice, 4 KiB with it)."""
        target = self._existing(key)
        mapped = map_regular_file(
            target, "blob", size, "copy the blobs/ folder again, or record the launch again"
        )
        if hasattr(mmap, "MADV_RANDOM"):
            mapped.madvise(mmap.MADV_RANDOM)
        return mapped

    def link(self, key: str, source: BlobStore) -> None:
        """Make blob ``key`` of ``source`` a blob of this store without copying it: a hard
        link, or a symbolic link to the source file across file systems. Readers check the
        linked file as any blob (:meth:`get`, :meth:`map`)."""
        if not is_blob_key(key):
            raise ClprojError(f"blob key {str(key)[:80]!r} is not a content hash")
        os.makedirs(self.path, exist_ok=True)
        origin = os.path.abspath(os.path.join(source.path, key))
        target = os.path.join(self.path, key)
        try:
            os.link(origin, target)
        except FileExistsError:
            return
        except OSError:
            os.symlink(origin, target)

    def has(self, key: str) -> bool:
        return is_blob_key(key) and os.path.exists(os.path.join(self.path, key))
