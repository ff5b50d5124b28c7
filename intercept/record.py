"""Launch records: one kernel launch, self-contained and replayable (docs/formats.md §1).

A record is a msgpack map in ``DIR/records/<id>.clrec``; buffer snapshots live in a
content-addressed blob store ``DIR/blobs/<sha256>`` so that identical inputs (the same
matrix passed to a thousand launches) are stored once. Records made in memory
(:func:`from_arrays`) keep their blobs in memory; saving copies them to the store.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import itertools
import math
import os
import re
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import msgpack

from clproj.errors import ClprojError
from clproj.untrusted import is_int, read_regular_file

FORMAT = "clproj.launch-record"
VERSION = 1

RECORDS_SUBDIR = "records"
BLOBS_SUBDIR = "blobs"
SUFFIX = ".clrec"

ARG_KINDS = ("scalar", "buffer", "local", "null", "unsupported")

# Bounds of a record read from disk (docs/formats.md section 1, "Validation"): records are
# copied between machines, so every value is checked before it is used.
MAX_RECORD_BYTES = 64 << 20  # the msgpack file: program source, scalars, metadata
MAX_ARGS = 1024
MAX_SCALAR_BYTES = 1 << 16  # one by-value argument (a double16 is 128 bytes)
MAX_SIZE_T = 2**64 - 1  # sizes and NDRange entries are size_t
MAX_NAME = 1024  # kernel names, ids
BINARY_KINDS = (None, "il", "binary")
# A blob reference is the sha256 of the content, as BlobStore names its files, and
# nothing else: it becomes a file name, so it can never be a path.
BLOB_KEY = re.compile(r"[0-9a-f]{64}")
_ID = re.compile(r"[A-Za-z0-9_.-]*")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_blob_key(value: object) -> bool:
    """True for a content hash as the blob store names its files (64 lowercase hex)."""
    return isinstance(value, str) and BLOB_KEY.fullmatch(value) is not None


PENDING_BLOB = "pending-"  # LaunchRecord.add_blob: not a hex digest, never in a saved record
_pending_keys = itertools.count(1)


@dataclass
class ArgRecord:
    """One kernel argument as the application set it."""

    index: int
    kind: str  # "scalar" | "buffer" | "local" | "null" | "unsupported"
    data: bytes | None = None  # scalar bytes
    size: int | None = None  # buffer or local size in bytes
    flags: int | None = None  # cl_mem_flags of a buffer
    blob: str | None = None  # sha256 of pre-launch buffer content
    what: str | None = None  # for unsupported: "image", "pipe", "svm", "sampler"
    origin: int | None = None  # sub-buffer: byte offset in its parent
    parent: int | None = None  # sub-buffer: size of the parent buffer

    def to_map(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "kind": self.kind}
        if self.kind == "scalar":
            out["bytes"] = self.data
        elif self.kind == "buffer":
            out.update(size=self.size, flags=self.flags, blob=self.blob)
            if self.origin is not None:
                out.update(origin=self.origin, parent=self.parent)
        elif self.kind == "local":
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
        )


class BlobStore:
    """Content-addressed store ``DIR/blobs/<sha256>``: identical data is written once."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, BLOBS_SUBDIR)

    def put(self, data: bytes, sha: str | None = None) -> str:
        """Store ``data``; ``sha`` (its sha256, when the caller has it) spares a second
        pass over a multi-MiB snapshot."""
        sha = sha or sha256(data)
        if not is_blob_key(sha):  # the name becomes a path: a hash, never anything else
            raise ClprojError(f"blob key {str(sha)[:80]!r} is not a content hash")
        target = os.path.join(self.path, sha)
        if os.path.exists(target):
            return sha
        os.makedirs(self.path, exist_ok=True)
        # Write to a temporary file then rename: concurrent writers (threads of the
        # recorded app) never expose a half-written blob under its final name.
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return sha

    def get(self, sha: str, size: int | None = None) -> bytes:
        """The blob named ``sha``, checked: a content hash (never a path), a regular
        file, ``size`` bytes when the record declares a size, and content hashing to
        ``sha``. At most ``size`` bytes are read, whatever the file is."""
        if not is_blob_key(sha):
            raise ClprojError(
                f"blob reference {str(sha)[:80]!r} is not a content hash (64 lowercase hex digits)",
                "record the launch again with `clproj run --record DIR -- ...`",
            )
        target = os.path.join(self.path, sha)
        if not os.path.lexists(target):
            raise ClprojError(
                f"blob {sha} is missing from {self.path}",
                "copy the record directory together with its blobs/ folder",
            )
        limit = size if size is not None else MAX_SIZE_T
        data = read_regular_file(
            target, "blob", limit, "copy the blobs/ folder again, or record the launch again"
        )
        if size is not None and len(data) != size:
            raise ClprojError(
                f"blob {sha} in {self.path} is corrupt: {len(data)} bytes, the record "
                f"declares {size}",
                "copy the blobs/ folder again, or record the launch again",
            )
        if sha256(data) != sha:
            raise ClprojError(
                f"blob {sha} in {self.path} is corrupt (content hash differs)",
                "record the launch again",
            )
        return data

    def has(self, sha: str) -> bool:
        return is_blob_key(sha) and os.path.exists(os.path.join(self.path, sha))


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
    outputs: dict[int, str] | None = None  # arg index -> blob sha of post-launch content
    emulatable: bool = True
    not_emulatable_reason: str | None = None
    id: str = ""
    created: float = 0.0
    # Where blob contents come from: a directory with a blob store, and/or in-memory blobs.
    store_dir: str | None = field(default=None, repr=False, compare=False)
    blobs: dict[str, bytes] = field(default_factory=dict, repr=False, compare=False)
    path: str | None = field(default=None, repr=False, compare=False)

    @property
    def program_hash(self) -> str:
        return program_hash(self.source, self.options)

    @property
    def signature(self) -> str:
        return signature(
            self.program_hash,
            self.kernel,
            self.work_dim,
            self.global_size,
            self.local_size,
            [a.data or b"" for a in self.args if a.kind == "scalar"],
        )

    def blob(self, sha: str, size: int | None = None) -> bytes:
        """Content of blob ``sha``; ``size`` (the declared buffer size) bounds the read."""
        if sha in self.blobs:
            return self.blobs[sha]
        if self.store_dir is None:
            raise ClprojError(f"blob {sha} is not available: the record has no blob store")
        return BlobStore(self.store_dir).get(sha, size)

    def add_blob(self, data: bytes) -> str:
        """Attach a buffer's content; returns the key to put in ``ArgRecord.blob``.

        The key is a placeholder until :func:`save` replaces it by the content's sha256:
        hashing a multi-MiB snapshot is left to the writer thread (:class:`RecordWriter`),
        the app's thread only copies it.
        """
        key = f"{PENDING_BLOB}{next(_pending_keys)}"
        self.blobs[key] = data
        return key

    def resolve_blobs(self) -> None:
        """Replace placeholder blob keys (:meth:`add_blob`) by content hashes."""
        renamed = {}
        for key in [k for k in self.blobs if k.startswith(PENDING_BLOB)]:
            data = self.blobs.pop(key)
            renamed[key] = sha = sha256(data)
            self.blobs[sha] = data
        if not renamed:
            return
        for a in self.args:
            if a.blob in renamed:
                a.blob = renamed[a.blob]
        if self.outputs:
            self.outputs = {i: renamed.get(s, s) for i, s in self.outputs.items()}

    def arg(self, index: int) -> ArgRecord:
        for a in self.args:
            if a.index == index:
                return a
        raise KeyError(index)

    def buffer_bytes(self, index: int) -> bytes:
        """Pre-launch content of buffer argument ``index`` (zeros if none was snapshotted)."""
        a = self.arg(index)
        if a.kind != "buffer":
            raise ClprojError(f"argument {index} of {self.kernel} is {a.kind}, not a buffer")
        if a.blob is None:
            return bytes(a.size or 0)
        return self.blob(a.blob, a.size)

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
            "signature": self.signature,
        }


@functools.lru_cache(maxsize=64)
def program_hash(source: str | None, options: str) -> str:
    """sha256 of source and options; memoized, as project mode asks it at every launch."""
    h = hashlib.sha256()
    h.update((source or "").encode())
    h.update(b"\0")
    h.update((options or "").encode())
    return h.hexdigest()


def signature(
    prog_hash: str,
    kernel: str,
    work_dim: int,
    global_size: list[int],
    local_size: list[int] | None,
    scalars: list[bytes],
) -> str:
    """Key of "the first launch of each distinct kernel" (same recipe as the C shim)."""
    h = hashlib.sha256()
    h.update(prog_hash.encode())
    h.update(b"\0" + kernel.encode() + b"\0")
    h.update(repr((work_dim, list(global_size), local_size and list(local_size))).encode())
    for s in scalars:
        h.update(len(s).to_bytes(4, "little") + s)
    return h.hexdigest()


_seq_lock = threading.Lock()
_seq = itertools.count(1)
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def new_id(kernel: str, directory: str | None = None) -> str:
    """``<kernel>-<seq>``: seq is unique within this process and within ``directory``."""
    name = _SAFE.sub("_", kernel)[:80] or "kernel"
    with _seq_lock:
        n = next(_seq)
        pid = os.getpid()
        rid = f"{name}-{pid}{n:05d}"
        if directory is not None:
            while os.path.exists(os.path.join(directory, RECORDS_SUBDIR, rid + SUFFIX)):
                n = next(_seq)
                rid = f"{name}-{pid}{n:05d}"
    return rid


def save(record: LaunchRecord, directory: str) -> str:
    """Write the record and its blobs under ``directory``; returns the record file path."""
    record.resolve_blobs()
    store = BlobStore(directory)
    shas = [a.blob for a in record.args if a.kind == "buffer" and a.blob]
    shas += list((record.outputs or {}).values())
    for sha in shas:
        if not store.has(sha):
            store.put(record.blob(sha), sha if sha in record.blobs else None)
    if not record.id:
        record.id = new_id(record.kernel, directory)
    if not record.created:
        record.created = time.time()
    rdir = os.path.join(directory, RECORDS_SUBDIR)
    os.makedirs(rdir, exist_ok=True)
    path = os.path.join(rdir, record.id + SUFFIX)
    payload = msgpack.packb(record.to_map(), use_bin_type=True)
    fd, tmp = tempfile.mkstemp(dir=rdir, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    record.store_dir = directory
    record.path = path
    return path


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

    def submit(self, record: LaunchRecord, directory: str, then: Any = None) -> None:
        size = sum(len(b) for b in record.blobs.values())
        with self._cond:
            while self._bytes and self._bytes + size > self.max_bytes:
                self._cond.wait()
            self._queue.append((record, directory, then, size))
            self._bytes += size
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="clproj-record-writer", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                record, directory, then, size = self._queue.popleft()
                self._busy = True
            try:
                save(record, directory)
                if then is not None:
                    then(record)
            except Exception as exc:  # log once; the app must go on
                if not self._failed:
                    self._failed = True
                    print(f"clproj: writing record {record.id} failed: {exc!r}", file=sys.stderr)
            finally:
                record.blobs.clear()  # written: the snapshot's memory is not needed here
                with self._cond:
                    self._bytes -= size
                    self._busy = False
                    self._cond.notify_all()

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every submitted record is written; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)


_writer: RecordWriter | None = None


def save_later(record: LaunchRecord, directory: str, then: Any = None) -> None:
    """:func:`save` on the process-wide :class:`RecordWriter`, drained at process exit.

    Only in project mode (``CLPROJ_MODE=project``), whose launch-heavy apps it is for;
    in the other modes the record is saved and ``then`` called at once, as before (route
    mode wants each projection as early as possible: later launches migrate by it).
    """
    global _writer
    if os.environ.get("CLPROJ_MODE") != "project":
        save(record, directory)
        if then is not None:
            then(record)
        return
    with _seq_lock:
        if _writer is None:
            from intercept.hooks import at_exit

            _writer = RecordWriter()
            at_exit(_writer.drain)
    _writer.submit(record, directory, then)


def _bad(path: str, what: str) -> ClprojError:
    return ClprojError(
        f"{path} is not a valid launch record: {what}",
        "record the launch again with `clproj run --record DIR -- ...`",
    )


class _BadField(Exception):
    """A record field that fails validation: ``field`` is its dotted name."""

    def __init__(self, field_name: str, what: str) -> None:
        super().__init__(what)
        self.field = field_name
        self.what = what


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _int_field(name: str, v: Any, lo: int, hi: int = MAX_SIZE_T) -> int:
    if not is_int(v):
        raise _BadField(name, f"must be an integer, got {type(v).__name__} {_short(v)}")
    if not lo <= v <= hi:
        raise _BadField(name, f"{v} is out of range {lo}..{hi}")
    return v


def _opt_str(name: str, v: Any, limit: int = MAX_RECORD_BYTES) -> str | None:
    if v is not None and (not isinstance(v, str) or len(v) > limit):
        raise _BadField(name, f"must be a string or null, got {type(v).__name__}")
    return v


def _sizes(name: str, v: Any, work_dim: int, lo: int) -> list[int]:
    if not isinstance(v, list):
        raise _BadField(name, f"must be a list of {work_dim} integers, got {type(v).__name__}")
    if len(v) != work_dim:
        raise _BadField(name, f"has {len(v)} entries, work_dim is {work_dim}")
    return [_int_field(f"{name}[{d}]", x, lo) for d, x in enumerate(v)]


def _check_arg(i: int, m: Any) -> ArgRecord:
    """One ``args[]`` entry: every field its kind uses, typed and in range."""
    at = f"args[{i}]"
    if not isinstance(m, dict):
        raise _BadField(at, f"must be a map, got {type(m).__name__}")
    kind = m.get("kind")
    if kind not in ARG_KINDS:
        raise _BadField(f"{at}.kind", f"unknown kind {_short(kind)}; one of {ARG_KINDS}")
    a = ArgRecord(index=_int_field(f"{at}.index", m.get("index"), 0, MAX_ARGS - 1), kind=kind)
    if kind == "scalar":
        data = m.get("bytes")
        if not isinstance(data, bytes) or not 1 <= len(data) <= MAX_SCALAR_BYTES:
            raise _BadField(f"{at}.bytes", f"must be 1..{MAX_SCALAR_BYTES} raw bytes")
        a.data = data
    elif kind == "buffer":
        a.size = _int_field(f"{at}.size", m.get("size"), 1)
        flags = m.get("flags")
        a.flags = None if flags is None else _int_field(f"{at}.flags", flags, 0)
        blob = m.get("blob")
        if blob is not None and not is_blob_key(blob):
            raise _BadField(
                f"{at}.blob", f"{_short(blob)} is not a content hash (64 lowercase hex digits)"
            )
        a.blob = blob
        origin, parent = m.get("origin"), m.get("parent")
        if (origin is None) != (parent is None):
            raise _BadField(f"{at}.origin", "origin and parent go together (sub-buffers)")
        if origin is not None:
            a.origin = _int_field(f"{at}.origin", origin, 0)
            a.parent = _int_field(f"{at}.parent", parent, 1)
            if a.origin + a.size > a.parent:
                raise _BadField(
                    f"{at}.origin", f"origin + size ({a.origin + a.size}) exceeds parent {a.parent}"
                )
    elif kind == "local":
        a.size = _int_field(f"{at}.size", m.get("size"), 1)
    elif kind == "unsupported":
        a.what = _opt_str(f"{at}.what", m.get("what"), MAX_NAME)
    return a


def _check_map(m: dict[str, Any]) -> dict[str, Any]:
    """Every field of a record map (docs/formats.md section 1, "Validation")."""
    out: dict[str, Any] = {}
    prog = m.get("program")
    if not isinstance(prog, dict):
        raise _BadField("program", f"must be a map, got {type(prog).__name__}")
    if "source" not in prog:
        raise _BadField("program.source", "missing")
    out["source"] = _opt_str("program.source", prog["source"])
    out["options"] = _opt_str("program.options", prog.get("options")) or ""
    out["binary_kind"] = prog.get("binary_kind")
    if out["binary_kind"] not in BINARY_KINDS:
        raise _BadField(
            "program.binary_kind", f"{_short(out['binary_kind'])} is not null/il/binary"
        )
    kernel = m.get("kernel")
    if not isinstance(kernel, str) or not 1 <= len(kernel) <= MAX_NAME:
        raise _BadField("kernel", f"must be a kernel name (1..{MAX_NAME} characters)")
    out["kernel"] = kernel
    raw_args = m.get("args")
    if not isinstance(raw_args, list):
        raise _BadField("args", "missing" if raw_args is None else "must be a list")
    if len(raw_args) > MAX_ARGS:
        raise _BadField("args", f"{len(raw_args)} arguments, more than {MAX_ARGS}")
    args = [_check_arg(i, a) for i, a in enumerate(raw_args)]
    seen: set[int] = set()
    for i, a in enumerate(args):
        if a.index in seen or a.index >= len(args):
            raise _BadField(
                f"args[{i}].index",
                f"{a.index} repeats or leaves a gap: indices must be 0..{len(args) - 1}, once each",
            )
        seen.add(a.index)
    out["args"] = args
    work_dim = _int_field("work_dim", m.get("work_dim"), 1, 3)
    out["work_dim"] = work_dim
    out["global_size"] = _sizes("global_size", m.get("global_size"), work_dim, 1)
    lsz, goff = m.get("local_size"), m.get("global_offset")
    out["local_size"] = None if lsz is None else _sizes("local_size", lsz, work_dim, 1)
    out["global_offset"] = None if goff is None else _sizes("global_offset", goff, work_dim, 0)
    outputs = m.get("outputs")
    if outputs is not None:
        if not isinstance(outputs, dict):
            raise _BadField("outputs", "must be a map or null")
        buffers = {a.index for a in args if a.kind == "buffer"}
        out["outputs"] = {}
        for k, sha in outputs.items():
            index = int(k) if isinstance(k, str) and k.isdecimal() and len(k) < 5 else k
            if not is_int(index) or index not in buffers:
                raise _BadField(f"outputs[{_short(k)}]", "is not the index of a buffer argument")
            if not is_blob_key(sha):
                raise _BadField(
                    f"outputs[{k}]",
                    f"{_short(sha)} is not a content hash (64 lowercase hex digits)",
                )
            out["outputs"][index] = sha
    else:
        out["outputs"] = None
    device = m.get("device")
    if device is None:
        device = {}
    if not isinstance(device, dict):
        raise _BadField("device", "must be a map")
    for k, v in device.items():
        if not isinstance(k, str) or not (v is None or isinstance(v, (str, int, float))):
            raise _BadField(f"device.{_short(k)}", "must map names to strings or numbers")
    out["device"] = dict(device)
    mt = m.get("measured_time_ns")
    out["measured_time_ns"] = None if mt is None else _int_field("measured_time_ns", mt, 0)
    emulatable = m.get("emulatable", True)
    if not isinstance(emulatable, bool):
        raise _BadField("emulatable", "must be true or false")
    out["emulatable"] = emulatable
    out["not_emulatable_reason"] = _opt_str(
        "not_emulatable_reason", m.get("not_emulatable_reason"), MAX_NAME
    )
    rid = m.get("id", "")
    if not isinstance(rid, str) or len(rid) > MAX_NAME or not _ID.fullmatch(rid):
        raise _BadField("id", f"{_short(rid)} is not a record id (letters, digits, _ . -)")
    out["id"] = rid
    created = m.get("created", 0.0)
    if isinstance(created, bool) or not isinstance(created, (int, float)):
        raise _BadField("created", "must be a number (UNIX time)")
    if not math.isfinite(created):
        raise _BadField("created", f"{created} is not a finite time")
    out["created"] = float(created)
    return out


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
        m = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception as exc:
        raise _bad(path, f"corrupt msgpack ({type(exc).__name__}: {str(exc)[:80]})") from None
    if not isinstance(m, dict):
        raise _bad(path, "top level is not a map")
    if m.get("format") != FORMAT:
        raise _bad(path, f"field 'format' is {_short(m.get('format'))}, expected {FORMAT!r}")
    version = m.get("version")
    if not is_int(version) or version != VERSION:
        raise ClprojError(
            f"{path}: field 'version' is {_short(version)}; this clproj reads version {VERSION}",
            "use the clproj version that wrote the record, or record the launch again",
        )
    try:
        f = _check_map(m)
    except _BadField as exc:
        raise _bad(path, f"field '{exc.field}': {exc.what}") from None
    rec = LaunchRecord(
        kernel=f["kernel"],
        source=f["source"],
        options=f["options"],
        args=f["args"],
        work_dim=f["work_dim"],
        global_size=f["global_size"],
        local_size=f["local_size"],
        global_offset=f["global_offset"],
        device=f["device"],
        binary_kind=f["binary_kind"],
        measured_time_ns=f["measured_time_ns"],
        outputs=f["outputs"],
        emulatable=f["emulatable"],
        not_emulatable_reason=f["not_emulatable_reason"],
        id=f["id"],
        created=f["created"],
    )
    # records/<id>.clrec -> the store is the directory above records/
    rdir = os.path.dirname(os.path.abspath(path))
    rec.store_dir = os.path.dirname(rdir) if os.path.basename(rdir) == RECORDS_SUBDIR else rdir
    rec.path = path
    return rec


def list_records(directory: str) -> list[str]:
    """Record file paths under ``directory`` (or its ``records/``), oldest first."""
    rdir = os.path.join(directory, RECORDS_SUBDIR)
    if not os.path.isdir(rdir):
        rdir = directory
    if not os.path.isdir(rdir):
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
            sha = sha256(data)
            blobs[sha] = data
            recs.append(ArgRecord(i, "buffer", size=len(data), flags=1, blob=sha))  # READ_WRITE
        elif isinstance(a, np.generic):
            recs.append(ArgRecord(i, "scalar", data=a.tobytes()))
        elif isinstance(a, (bytes, bytearray)):
            recs.append(ArgRecord(i, "scalar", data=bytes(a)))
        else:
            raise ClprojError(
                f"argument {i} of {kernel}: cannot record {type(a).__name__}",
                "pass numpy arrays, numpy scalars (np.int32(3)), LocalArg(n) or None",
            )
    dev: dict = {}
    if device is not None:
        dev = device if isinstance(device, dict) else device_info(device)
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
