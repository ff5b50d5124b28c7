"""Launch records: one kernel launch, self-contained and replayable (docs/formats.md §1).

A record is a msgpack map in ``DIR/records/<id>.clrec``; buffer snapshots live in the
content-addressed blob store ``DIR/blobs/<content key>`` (:mod:`intercept.blobs`) so that
identical inputs (the same matrix passed to a thousand launches) are stored once. Records
made in memory (:func:`from_arrays`) keep their blobs in memory; saving copies them to
the store. This module is the record itself and its files (save, load, list); a loaded
map is validated by :mod:`intercept.record_check`, written in the background by
:mod:`intercept.record_writer`, and its program hash and signature are those of
:mod:`intercept.identity`.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import mmap
import os
import re
import stat
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import msgpack

from clproj import settings
from clproj.atomic import write_atomic
from clproj.cl_names import CL_MEM_READ_WRITE
from clproj.errors import ClprojError
from clproj.intercept import identity
from clproj.intercept.blobs import BlobStore, content_key, prepared_zeros_key
from clproj.intercept.buffer_maps import mapped
from clproj.intercept.live_view import LIVE_SUFFIX, check_inline, check_live, save_live_copy
from clproj.intercept.record_check import ARG_KINDS, MAX_RECORD_BYTES, check_map, unpack
from clproj.untrusted import BadField, is_int, read_regular_file, short

FORMAT = "clproj.launch-record"
VERSION = 2  # 2: blobs named by BLAKE3-256 (version 1: sha256; intercept.blobs)

RECORDS_SUBDIR = "records"
SUFFIX = ".clrec"

PENDING_BLOB = "pending-"  # LaunchRecord.add_blob: not a hex digest, never in a saved record
_pending_keys = itertools.count(1)


@dataclass
class ArgRecord:
    """One kernel argument as the application set it."""

    index: int
    kind: str  # "scalar" | "buffer" | "local" | "null" | "unsupported"
    data: bytes | None = None  # scalar bytes
    size: int | None = None  # buffer/local bytes; null: the size set with it (replay.set_kinds)
    flags: int | None = None  # cl_mem_flags of a buffer
    blob: str | None = None  # content key of pre-launch buffer content; None: zeros
    what: str | None = None  # for unsupported: "image", "pipe", "svm", "sampler"
    origin: int | None = None  # sub-buffer: byte offset in its parent
    parent: int | None = None  # sub-buffer: size of the parent buffer
    # buffer: no command wrote it before the launch, so its content was undefined; it was
    # not read, and ``blob`` is None (zeros) (native/shim/writes.c)
    unwritten: bool = False
    # buffer: its snapshot was not kept (``blob`` None), its content is not to be had:
    # project mode stopped copying it once the launch was projected (live_view.release)
    dropped: bool = False

    def to_map(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "kind": self.kind}
        if self.kind == "scalar":
            out["bytes"] = self.data
        elif self.kind == "buffer":
            out.update(size=self.size, flags=self.flags, blob=self.blob)
            if self.origin is not None:
                out.update(origin=self.origin, parent=self.parent)
            out.update({flag: True for flag in ("unwritten", "dropped") if getattr(self, flag)})
        elif self.kind == "local" or (self.kind == "null" and self.size is not None):
            out["size"] = self.size
        elif self.kind == "unsupported":
            out["what"] = self.what
        return out

    @classmethod
    def from_map(cls, m: dict[str, Any]) -> ArgRecord:
        kind = m.get("kind")
        if kind not in ARG_KINDS:
            raise ValueError(f"args[].kind: unknown kind {kind!r}")
        return cls(
            index=int(m["index"]),
            kind=kind,
            data=m.get("bytes"),
            size=m.get("size"),
            flags=m.get("flags"),
            blob=m.get("blob"),
            what=m.get("what"),
            origin=m.get("origin"),
            parent=m.get("parent"),
            unwritten=m.get("unwritten") is True,
            dropped=m.get("dropped") is True,
        )


class LocalArg:
    """Marker for a ``__local`` argument of ``nbytes`` bytes in :func:`from_arrays`."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = int(nbytes)

    def __repr__(self) -> str:
        return f"LocalArg({self.nbytes})"


@dataclass
class LaunchRecord:
    """One launch: program, kernel, arguments (with buffer snapshots), NDRange, device."""

    kernel: str
    source: str | None
    options: str
    args: list[ArgRecord]
    work_dim: int
    global_size: list[int]
    local_size: list[int] | None
    global_offset: list[int] | None = None
    device: dict = field(default_factory=dict)  # name, vendor, type, driver
    binary_kind: str | None = None  # None | "il" | "binary"
    measured_time_ns: int | None = None
    outputs: dict[int, str] | None = None  # arg index -> blob key of post-launch content
    emulatable: bool = True
    not_emulatable_reason: str | None = None
    asked: dict[str, int] = field(default_factory=dict)  # launch-sizing answers read (size_queries)
    id: str = ""
    created: float = 0.0
    # Where blob contents come from: a directory with a blob store, and/or in-memory blobs.
    store_dir: str | None = field(default=None, repr=False, compare=False)
    blobs: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # blob key -> scratch file of the store (BlobStore.scratch) that holds that blob's data
    blob_files: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    path: str | None = field(default=None, repr=False, compare=False)
    # blob key -> (device buffer it was read from, its snapshot's sequence number, the
    # sequence number of the snapshot it equals or None): intercept.last_snapshots
    blob_sources: dict[str, tuple] = field(default_factory=dict, repr=False, compare=False)
    # keys of blobs the shim found to be all zeros (add_blob ``zeros``)
    zero_blobs: set[str] = field(default_factory=set, repr=False, compare=False)
    # blob key -> its content hash under way (intercept.snapshot_hash), for resolve_blobs
    blob_digests: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # bytes of blobs the last save() added to its store (the others were stored already):
    # what the recording process's CLPROJ_RECORD_MAX_BYTES counts
    stored_bytes: int = field(default=0, repr=False, compare=False)
    # a live record (intercept.live_view): arg index -> where its buffer is read meanwhile,
    # and the regions buffer_view opened over them (alive as long as the record)
    live: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)
    live_regions: list[Any] = field(default_factory=list, repr=False, compare=False)

    @property
    def program_hash(self) -> str:
        """:func:`intercept.identity.program_hash` of the record's program."""
        return identity.program_hash(self.source, self.options)

    @property
    def signature(self) -> str:
        """:func:`intercept.identity.launch_signature` of the launch."""
        return identity.launch_signature(
            self.program_hash,
            self.kernel,
            self.work_dim,
            self.global_size,
            self.local_size,
            [a.data or b"" for a in self.args if a.kind == "scalar"],
        )

    def blob(self, blob_key: str, size: int | None = None) -> bytes:
        """Content of blob ``blob_key``; ``size`` (the declared buffer size) bounds the read."""
        if blob_key in self.blobs:
            return self.blobs[blob_key]
        if self.store_dir is None:
            raise ClprojError(f"blob {blob_key} is not available: the record has no blob store")
        return BlobStore(self.store_dir).get(blob_key, size)

    def add_blob(
        self,
        data: Any,
        scratch: str | None = None,
        source: tuple | None = None,
        zeros: bool = False,
        digest: Any = None,
    ) -> str:
        """Attach a buffer's content; returns the key to put in ``ArgRecord.blob``.

        The key is a placeholder until :func:`save` replaces it by the content's key:
        hashing a multi-MiB snapshot is left to the writer thread (:class:`RecordWriter`),
        the app's thread only copies it. ``scratch``: ``data`` is the mapped scratch file
        of the record's store at that path (:meth:`BlobStore.scratch`); saving renames it
        instead of writing the data again. ``source``: (device buffer, sequence number,
        sequence number of the snapshot with the same bytes or None), for
        :meth:`resolve_blobs`. ``zeros``: every byte of ``data`` is zero (the shim checked):
        named without hashing, stored as a sparse file (intercept.last_snapshots).
        ``digest``: the content hash under way (an :class:`intercept.snapshot_hash.
        StreamHash`), taken instead of hashing ``data`` again.
        """
        key = f"{PENDING_BLOB}{next(_pending_keys)}"
        self.blobs[key] = data
        if scratch is not None:
            self.blob_files[key] = scratch
        if source is not None:
            self.blob_sources[key] = source
        if zeros:
            self.zero_blobs.add(key)
        if digest is not None:
            self.blob_digests[key] = digest
        return key

    def drop_blobs(self, keys: set[str] | None = None) -> None:
        """Forget the in-memory blobs (``keys``: those only, snapshots not kept), removing
        scratch files no blob took (a failed save)."""
        if keys is None:
            keys = set(self.blobs) | set(self.blob_files) | set(self.blob_digests)
        for key in keys:
            digest = self.blob_digests.pop(key, None)
            if digest is not None:
                digest.cancel()  # before the mapping it reads is closed
            with contextlib.suppress(OSError):
                os.unlink(self.blob_files.pop(key, ""))
            data = self.blobs.pop(key, None)
            if isinstance(data, mmap.mmap):
                data.close()
            self.blob_sources.pop(key, None)

    def resolve_blobs(self, last: dict[int, tuple[int, str]] | None = None) -> None:
        """Replace placeholder blob keys (:meth:`add_blob`) by content hashes.

        ``last`` maps a device buffer to (sequence number, hash) of its last snapshot
        hashed (and is updated): a snapshot that the shim found byte-equal to snapshot k
        of its buffer takes the hash of k when ``last`` holds k, without being hashed
        (intercept.last_snapshots)."""
        renamed = {}
        for key in [k for k in self.blobs if k.startswith(PENDING_BLOB)]:
            data = self.blobs.pop(key)
            source, seq, same = self.blob_sources.pop(key, (None, None, None))
            had = last.get(source) if last is not None else None
            blob_key = had[1] if had is not None and same is not None and had[0] == same else None
            renamed[key] = blob_key = self._content_hash(key, data, blob_key)
            if last is not None and source is not None:
                last[source] = (seq, blob_key)
            self.blobs[blob_key] = data
            if key in self.blob_files:
                path = self.blob_files.pop(key)
                if blob_key in self.blob_files:  # the same content twice: one file is enough
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                else:
                    self.blob_files[blob_key] = path
        if not renamed:
            return
        for a in self.args:
            if a.blob in renamed:
                a.blob = renamed[a.blob]
        if self.outputs:
            self.outputs = {i: renamed.get(s, s) for i, s in self.outputs.items()}

    def _content_hash(self, key: str, data: Any, known: str | None) -> str:
        """Pending blob ``key``'s hash: ``known`` (its equal's), the hash computed while it
        was copied (``add_blob`` ``digest``), or :meth:`_hash` of its bytes."""
        digest = self.blob_digests.pop(key, None)
        if known is not None:
            if digest is not None:
                digest.cancel()
            return known
        return digest.result() if digest is not None else self._hash(key, data)

    def _hash(self, key: str, data: Any) -> str:
        """The content hash of pending blob ``key``: of its bytes, or where the shim found
        them all zero, of that many zeros (hashed once per size)."""
        if key not in self.zero_blobs:
            return content_key(data)
        self.zero_blobs.discard(key)
        blob_key = prepared_zeros_key(len(data))
        self.zero_blobs.add(blob_key)
        return blob_key

    def arg(self, index: int) -> ArgRecord:
        for a in self.args:
            if a.index == index:
                return a
        raise KeyError(index)

    def _buffer_arg(self, index: int) -> ArgRecord:
        a = self.arg(index)  # a buffer whose pre-launch content the record holds
        if a.kind != "buffer":
            raise ClprojError(f"argument {index} of {self.kernel} is {a.kind}, not a buffer")
        if a.dropped:
            raise ClprojError(
                f"argument {index} of {self.kernel} has no snapshot: project mode stopped "
                "copying it once the launch was projected",
                "record the launch with `clproj run --mode project --record DIR` to keep it",
            )
        return a

    def buffer_bytes(self, index: int) -> bytes:
        """Pre-launch content of buffer argument ``index`` (zeros if none was snapshotted)."""
        a = self._buffer_arg(index)
        if a.blob is None:
            return bytes(a.size or 0)
        return self.blob(a.blob, a.size)

    def buffer_view(self, index: int) -> Any:
        """Pre-launch content of buffer argument ``index`` as a writable buffer that is
        read only where it is touched: the blob mapped copy-on-write, or zero pages when
        nothing was snapshotted. Why: the emulator touches a few pages of buffers that can
        be a gigabyte; :meth:`buffer_bytes` reads and hashes all of them. A mapping the host
        refuses (an untrusted size) is one line naming the argument (intercept.buffer_maps)."""
        a = self._buffer_arg(index)
        size = int(a.size or 0)
        if index in self.live:  # read from the app while it copies (intercept.live_view)
            from clproj.intercept.live_pages import region_of

            self.live_regions.append(region_of(self.live[index], size))
            return self.live_regions[-1].view
        if a.blob is not None and (a.blob in self.blobs or None in (self.store_dir, a.size)):
            return bytearray(self.blob(a.blob, a.size))
        return mapped(self, index, a.blob, size)

    def output_bytes(self, index: int) -> bytes | None:
        """Post-launch content of buffer argument ``index``, if it was recorded."""
        if not self.outputs or index not in self.outputs:
            return None
        return self.blob(self.outputs[index], self.arg(index).size)

    def to_map(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "id": self.id,
            "created": self.created,
            "program": {
                "source": self.source,
                "binary_kind": self.binary_kind,
                "options": self.options,
                "hash": self.program_hash,
            },
            "kernel": self.kernel,
            "args": [a.to_map() for a in self.args],
            "work_dim": self.work_dim,
            "global_offset": self.global_offset,
            "global_size": list(self.global_size),
            "local_size": None if self.local_size is None else list(self.local_size),
            "device": dict(self.device),
            "measured_time_ns": self.measured_time_ns,
            "outputs": None
            if self.outputs is None
            else {str(k): v for k, v in self.outputs.items()},
            "emulatable": self.emulatable,
            "not_emulatable_reason": self.not_emulatable_reason,
            "asked": dict(self.asked),
            "signature": self.signature,
        }


_seq_lock = threading.Lock()
_seq = itertools.count(1)
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def new_id(kernel: str, directory: str | None = None) -> str:
    """``<kernel>-<run tag>-<seq>`` (no tag outside ``clproj run``: identity.run_tag): seq
    is unique within this process and within ``directory``."""
    tag = identity.run_tag(settings.get("CLPROJ_RUN_DIR"))
    head = f"{_SAFE.sub('_', kernel)[:80] or 'kernel'}-{tag + '-' if tag else ''}{os.getpid()}"
    with _seq_lock:
        rid = f"{head}{next(_seq):05d}"
        while directory and os.path.exists(os.path.join(directory, RECORDS_SUBDIR, rid + SUFFIX)):
            rid = f"{head}{next(_seq):05d}"
    return rid


def save(
    record: LaunchRecord,
    directory: str,
    *,
    link_blobs: bool = False,
    last: dict[int, tuple[int, str]] | None = None,
) -> str:
    """Write the record and its blobs under ``directory``; returns the record file path.

    ``link_blobs``: blobs the record reads from another store on disk are linked, not
    copied (:meth:`BlobStore.link`). For the working copies the emulator and the
    partition check make in a temporary folder: copying meant reading, hashing and
    writing every snapshot (2.6 GB for a launch over three 400 MB arrays) before a run
    that touches a few pages. A record meant to travel is saved with its own copies.
    ``last``: each device buffer's last snapshot hashed (:meth:`LaunchRecord.resolve_blobs`).
    """
    if record.live:  # a working copy of a live record is live too
        return save_live_copy(record, directory)
    record.resolve_blobs(last)
    store = BlobStore(directory)
    blob_keys = [a.blob for a in record.args if a.kind == "buffer" and a.blob]
    blob_keys += list((record.outputs or {}).values())
    source = BlobStore(record.store_dir) if link_blobs and record.store_dir else None
    record.stored_bytes = 0
    for blob_key in blob_keys:
        if blob_key in record.blobs and not store.has(blob_key):  # stored below, by this save
            record.stored_bytes += len(record.blobs[blob_key])
        scratch = record.blob_files.pop(blob_key, None)
        if scratch is not None:  # read into the store's own file: named, not copied
            if os.path.dirname(os.path.abspath(scratch)) == os.path.abspath(store.path):
                store.adopt(scratch, blob_key)
                continue
            record.blob_files[blob_key] = scratch  # another store's: removed by drop_blobs
        if not store.has(blob_key):
            _store(record, store, source, blob_key)
    if not record.id:
        record.id = new_id(record.kernel, directory)
    if not record.created:
        record.created = time.time()
    packed = msgpack.packb(record.to_map(), use_bin_type=True)
    if len(packed) > MAX_RECORD_BYTES:  # load() would refuse it: never write one
        raise ClprojError(
            f"the record of {record.kernel} would be {len(packed) / 2**20:.0f} MiB, over the "
            f"{MAX_RECORD_BYTES >> 20} MiB a record may be (its program source is "
            f"{len((record.source or '').encode()) / 2**20:.0f} MiB): not written",
            "record a kernel whose program source is smaller",
        )
    rdir = os.path.join(directory, RECORDS_SUBDIR)
    os.makedirs(rdir, exist_ok=True)
    path = os.path.join(rdir, record.id + SUFFIX)
    write_atomic(path, packed, private=True)
    record.store_dir = directory
    record.path = path
    return path


def _store(record: LaunchRecord, store: BlobStore, source: BlobStore | None, blob_key: str) -> None:
    """Put blob ``blob_key`` of ``record`` into ``store``: sparse where it is zeros, linked
    from ``source`` where only that store has it (``save``'s ``link_blobs``), else copied."""
    if blob_key in record.zero_blobs and blob_key in record.blobs:
        store.put_zeros(len(record.blobs[blob_key]), blob_key)
    elif source is not None and blob_key not in record.blobs and source.has(blob_key):
        store.link(blob_key, source)
    else:
        store.put(record.blob(blob_key), blob_key if blob_key in record.blobs else None)


def _bad(path: str, what: str) -> ClprojError:
    return ClprojError(
        f"{path} is not a valid launch record: {what}",
        "record the launch again with `clproj run --record DIR -- ...`",
    )


def load(path: str) -> LaunchRecord:
    """Read a record file; every field is validated and the error names the one that is
    wrong. Records travel between machines: nothing in one is trusted (the blob store is
    only ever indexed by content hashes, NDRange and arguments are typed and bounded)."""
    raw = read_regular_file(
        path,
        "launch record",
        MAX_RECORD_BYTES,
        "pass a .clrec file (see `clproj records DIR`)",
    )
    try:
        m = unpack(raw)
    except ValueError as exc:
        raise _bad(path, str(exc)) from None
    if not isinstance(m, dict):
        raise _bad(path, "top level is not a map")
    if m.get("format") != FORMAT:
        raise _bad(path, f"field 'format' is {short(m.get('format'))}, expected {FORMAT!r}")
    version = m.get("version")
    if not is_int(version) or version != VERSION:
        why = " (its blobs are named by sha256)" if is_int(version) and version == 1 else ""
        raise ClprojError(
            f"{path}: field 'version' is {short(version)}{why}; this clproj reads version "
            f"{VERSION}",
            "use the clproj version that wrote the record, or record the launch again",
        )
    try:
        f = check_map(m)
    except BadField as exc:
        raise _bad(path, f"field '{exc.field}': {exc.what}") from None
    args = [ArgRecord(**a) for a in f.pop("args")]
    rec = LaunchRecord(args=args, **f)
    # records/<id>.clrec -> the store is the directory above records/
    rdir = os.path.dirname(os.path.abspath(path))
    rec.store_dir = os.path.dirname(rdir) if os.path.basename(rdir) == RECORDS_SUBDIR else rdir
    rec.path = path
    if path.endswith(LIVE_SUFFIX):  # only a live record's file may name another process
        try:
            rec.blobs.update(check_inline(m.get("inline", {})))
            rec.live = check_live(m.get("live"), rec.store_dir, {a.index: a for a in args})
        except BadField as exc:
            raise _bad(path, f"field '{exc.field}': {exc.what}") from None
    return rec


def _is_folder(path: str) -> bool:
    """Whether ``path`` is a folder; a name that is there but leads nowhere (a loop of
    symbolic links, a dangling link) is an error naming it. Why: read as "no folder", such
    a ``records`` link made ``clproj records`` list nothing and exit 0."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except OSError as exc:
        if not os.path.lexists(path):
            return False
        why = "a loop of symbolic links" if exc.errno == errno.ELOOP else exc.strerror
        raise ClprojError(
            f"{path} leads nowhere: {why}", "point the link at the record folder, or remove it"
        ) from None


def list_records(directory: str) -> list[str]:
    """Record file paths under ``directory`` (or its ``records/``), oldest first."""
    rdir = os.path.join(directory, RECORDS_SUBDIR)
    if not _is_folder(rdir):
        rdir = directory
    if not _is_folder(rdir):
        raise ClprojError(
            f"{directory} is not a record directory", "pass the --record DIR of `clproj run`"
        )
    paths = [os.path.join(rdir, n) for n in os.listdir(rdir) if n.endswith(SUFFIX)]
    return sorted(paths, key=lambda p: (os.path.getmtime(p), p))


def from_arrays(
    source: str,
    kernel: str,
    args: list,
    global_size,
    local_size=None,
    *,
    options: str = "",
    global_offset=None,
    device=None,
) -> LaunchRecord:
    """An in-memory record from numpy data (tests, benchmarks, the emulator's own inputs).

    ``np.ndarray`` -> buffer (a snapshot of its bytes), numpy scalar -> scalar bytes,
    ``LocalArg(n)`` -> ``__local`` of n bytes, ``None`` -> null.
    """
    import numpy as np

    gsz = [int(x) for x in (global_size if hasattr(global_size, "__len__") else [global_size])]
    lsz = None
    if local_size is not None:
        lsz = [int(x) for x in (local_size if hasattr(local_size, "__len__") else [local_size])]
    recs: list[ArgRecord] = []
    blobs: dict[str, bytes] = {}
    for i, a in enumerate(args):
        if a is None:
            recs.append(ArgRecord(i, "null"))
        elif isinstance(a, LocalArg):
            recs.append(ArgRecord(i, "local", size=a.nbytes))
        elif isinstance(a, np.ndarray):
            data = np.ascontiguousarray(a).tobytes()
            blob_key = content_key(data)
            blobs[blob_key] = data
            recs.append(
                ArgRecord(i, "buffer", size=len(data), flags=CL_MEM_READ_WRITE, blob=blob_key)
            )
        elif isinstance(a, np.generic):
            recs.append(ArgRecord(i, "scalar", data=a.tobytes()))
        elif isinstance(a, (bytes, bytearray)):
            recs.append(ArgRecord(i, "scalar", data=bytes(a)))
        else:
            raise ClprojError(
                f"argument {i} of {kernel}: cannot record {type(a).__name__}",
                "pass numpy arrays, numpy scalars (np.int32(3)), LocalArg(n) or None",
            )
    dev = {} if device is None else device if isinstance(device, dict) else device_info(device)
    return LaunchRecord(
        kernel=kernel,
        source=source,
        options=options,
        args=recs,
        work_dim=len(gsz),
        global_size=gsz,
        local_size=lsz,
        global_offset=None if global_offset is None else [int(x) for x in global_offset],
        device=dev,
        id=new_id(kernel),
        created=time.time(),
        blobs=blobs,
    )


def device_info(device) -> dict:
    """``name``/``vendor``/``type``/``driver`` of a pyopencl device."""
    import pyopencl as cl

    return {
        "name": device.name.strip(),
        "vendor": device.vendor.strip(),
        "type": cl.device_type.to_string(device.type),
        "driver": device.driver_version.strip(),
    }
