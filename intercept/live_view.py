"""The app's side of a live view: a launch published before its large snapshots are copied,
naming where the emulator can read them meanwhile (docs/formats.md §1, "Live records").

Why: project mode publishes a launch's record at the launch, but a record is whole only
once each changed snapshot is copied (0.27-0.32 s per GiB on the 2-core VM) and hashed,
so a launch over a gigabyte buffer was projected a third of a second later than one over
a megabyte. While the app's thread copies inside the shim, the buffers hold still: the
launch waits for the copy. So, before copying, the shim writes ``records/<id>.live``: the
record with each buffer to be copied named by its address in the app (a mapped buffer of
a device whose memory is the host's), the copy's file and a state file. The emulator reads
the pages its work-items touch from the app while the state says ``copying`` and from the
copy once it says ``done`` (intercept.live_pages); the app never waits for the emulator.
A buffer equal to its earlier snapshot is named by that snapshot's blob once the record
writer has written it (else the launch waits for its copies as before). The record proper
follows as before and is what every other reader uses; ``clproj run`` removes the live
files once every projection is made (after the app, its pages come from the copies).
Once the launch is projected, ``clproj run`` releases the view (:func:`release`); where
the records are the run's own (no ``--record``: ``CLPROJ_SNAPSHOT_VIEW=release``) the
app then stops copying, and the record proper names those snapshots ``dropped``.

Only where it can help and cannot harm: project mode under ``clproj run`` (whose scheduler
reads them), the launch's record published at the launch, a device whose buffers are
mapped in place, and every large buffer copied now, known to be zeros or named by a written
blob; otherwise the launch is recorded as before.
``CLPROJ_SNAPSHOT_VIEW=off`` turns it off.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import struct
from typing import Any

from clproj.atomic import write_atomic
from clproj.intercept.blobs import BlobStore, content_key, is_blob_key
from clproj.untrusted import BadField, is_int

LIVE_SUFFIX = ".live"
LIVE_SUBDIR = "live"  # <store>/live/: state files and links to the copies

# the state file's first uint32, the copies' state as the app says it; native/live_pages/
# live_pages.h names them (tested to agree)
COPYING, DONE, ABANDONED = 0, 1, 2
# its second uint32, written by clproj run: RELEASED once the launch is projected from the
# live record, so the app may stop copying (read by the app only)
RELEASE_OFFSET, RELEASED = 4, 1
STATE_BYTES = 4096


class LiveView:
    """The large snapshots of one launch that are still to be copied, and where they are.

    The shim adds (:meth:`add`) one per buffer (its address in this process, its scratch
    file, and what the copy needs), publishes the ``.live`` record (:meth:`publish`),
    copies, and says :meth:`done` (or :meth:`abandon` when a copy failed or stopped:
    ``releasable`` views stop once :meth:`released` says clproj run needs no more)."""

    class Copy:
        """One buffer to copy: arg ``index`` at ``address``, ``size`` bytes of ``source``
        (the mapped buffer) into ``scratch`` (pending blob ``key``); ``device_buffer``
        for intercept.last_snapshots."""

        __slots__ = ("address", "device_buffer", "index", "key", "scratch", "size", "source")

        def __init__(self, index: int, address: int, scratch: str, source: Any, size: int,
                     key: str, device_buffer: int) -> None:  # fmt: skip
            self.index, self.address, self.scratch, self.source = index, address, scratch, source
            self.size, self.key, self.device_buffer = size, key, device_buffer

    def __init__(self, store_dir: str, releasable: bool = False) -> None:
        self.store_dir = store_dir
        self.releasable = releasable
        self.folder = os.path.join(store_dir, LIVE_SUBDIR)
        self.copies: list[LiveView.Copy] = []
        self.state_path = ""
        self.published: str | None = None

    def add(self, copy: LiveView.Copy) -> None:
        self.copies.append(copy)

    def publish(self, record_id: str, record_map: dict[str, Any], inline: dict[str, bytes]) -> str:
        """Write the state file (``copying``), link each copy, and write
        ``records/<id>.live``: ``record_map`` (the record's map, each live buffer's blob
        None), ``inline`` (the small snapshots by content key) and the live section."""
        os.makedirs(self.folder, exist_ok=True)
        self.state_path = os.path.join(self.folder, f"{record_id}.state")
        new_state_file(self.state_path)
        buffers = [(c.index, c.address, c.scratch) for c in self.copies]
        # a hard link: the copy keeps its name here when the record writer renames it
        self.published = write_live(
            self.store_dir, record_id, record_map, inline, os.getpid(), None, buffers, os.link
        )
        return self.published

    def _state(self, value: int) -> None:
        """One write of the state (a system call: the app's later stores to the buffers
        cannot be seen before it)."""
        fd = os.open(self.state_path, os.O_WRONLY)
        try:
            os.pwrite(fd, struct.pack("<I", value), 0)
        finally:
            os.close(fd)

    def done(self) -> None:
        """Every copy is whole: the emulator reads them from now on."""
        if self.published:
            self._state(DONE)

    def abandon(self) -> None:
        """A copy failed or stopped: nothing more of the buffers can be had."""
        if self.published:
            with contextlib.suppress(OSError):
                self._state(ABANDONED)

    def released(self) -> bool:
        """Whether the copies may stop: a ``releasable`` view whose launch clproj run has
        projected from the live record (:func:`release`). Asked between chunks of a copy:
        one ``pread`` of the state file."""
        if not (self.releasable and self.published):
            return False
        try:
            fd = os.open(self.state_path, os.O_RDONLY)
        except OSError:
            return False
        try:
            word = os.pread(fd, 4, RELEASE_OFFSET)
        finally:
            os.close(fd)
        return len(word) == 4 and struct.unpack("<I", word)[0] == RELEASED


def new_state_file(path: str) -> None:
    """A state file at ``path`` saying ``copying``."""
    write_atomic(path, struct.pack("<I", COPYING).ljust(STATE_BYTES, b"\0"))


def release(state_path: str) -> None:
    """clproj run's side: the launch of the live record whose state file is ``state_path``
    is projected, so the app may stop copying its buffers (:meth:`LiveView.released`).
    Why: in project mode without ``--record`` the records serve this run's projections
    only, and the copies are what the launch waits for (BabelStream at 400 MiB: 0.12-0.7 s
    per array on the 2-core VM, seven arrays a run); once the projection stands, nobody
    reads them. A state file already gone (the app finished its copies and exited) is
    fine."""
    with contextlib.suppress(OSError):
        fd = os.open(state_path, os.O_WRONLY)
        try:
            os.pwrite(fd, struct.pack("<I", RELEASED), RELEASE_OFFSET)
        finally:
            os.close(fd)


def live_copy_path(folder: str, record_id: str, index: int) -> str:
    """Where a live record's link to the copy of its buffer argument ``index`` lives, in
    the store's ``live/`` ``folder``."""
    return os.path.join(folder, f"{record_id}-{index}.copy")


def write_live(
    store_dir: str,
    record_id: str,
    record_map: dict[str, Any],
    inline: dict[str, bytes],
    pid: int,
    state: str | None,
    buffers: list[tuple[int, int, str]],
    link: Any,
) -> str:
    """Write ``<store_dir>/records/<id>.live``: ``record_map`` with ``inline`` and the
    live section; each buffer (arg index, address, its copy's file) named by a ``link``
    (os.link or os.symlink) in ``<store_dir>/live/``, and the state file too unless it
    is there already (``state`` None: ``live/<id>.state``). Returns the path."""
    import msgpack

    from clproj.intercept.record import RECORDS_SUBDIR

    folder = os.path.join(store_dir, LIVE_SUBDIR)
    os.makedirs(folder, exist_ok=True)

    def named(name: str, source: str) -> str:
        target = os.path.join(folder, name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
        link(source, target)
        return name

    state_name = f"{record_id}.state" if state is None else named(f"{record_id}.state", state)
    entries = [
        {
            "index": index,
            "address": address,
            "copy": named(os.path.basename(live_copy_path(folder, record_id, index)), copy),
        }
        for index, address, copy in buffers
    ]
    doc = dict(
        record_map, inline=inline, live={"pid": pid, "state": state_name, "buffers": entries}
    )
    path = os.path.join(store_dir, RECORDS_SUBDIR, record_id + LIVE_SUFFIX)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_atomic(path, msgpack.packb(doc, use_bin_type=True), private=True)
    return path


def save_live_copy(record: Any, directory: str) -> str:
    """A working copy of a live record in ``directory`` (the emulator's runs each take
    one): again a live record, its live files symbolic links to the original's, its
    blobs carried inline. Returns its path (also set as ``record.path``)."""
    from clproj.intercept.record import new_id

    if not record.id:
        record.id = new_id(record.kernel, directory)
    inline = {}
    for a in record.args:
        if a.kind != "buffer" or a.blob is None:
            continue
        if a.blob in record.blobs:
            inline[a.blob] = bytes(record.blobs[a.blob])
        else:  # an earlier snapshot's blob in the record's store: linked, not copied
            BlobStore(directory).link(a.blob, BlobStore(record.store_dir))
    first = next(iter(record.live.values()))
    buffers = [(i, b.address, b.copy) for i, b in sorted(record.live.items())]
    record.path = write_live(
        directory, record.id, record.to_map(), inline, first.pid, first.state, buffers, os.symlink
    )
    return record.path


def inline_blob(data: Any) -> tuple[str, bytes]:
    """A small snapshot carried inside the ``.live`` record: (content key, bytes)."""
    raw = bytes(data)
    return content_key(raw), raw


def remove_live_files(store_dir: str) -> None:
    """Remove every live record and live file under ``store_dir`` (after the app, once its
    launches are projected: each has its record proper)."""
    from clproj.intercept.record import RECORDS_SUBDIR

    shutil.rmtree(os.path.join(store_dir, LIVE_SUBDIR), ignore_errors=True)
    rdir = os.path.join(store_dir, RECORDS_SUBDIR)
    with contextlib.suppress(OSError):
        for name in os.listdir(rdir):
            if name.endswith(LIVE_SUFFIX):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(rdir, name))


class LiveBuffer:
    """A live buffer as a reader finds it: the app's process, the buffer's address there,
    its copy and the state file (absolute paths under ``<store>/live/``)."""

    __slots__ = ("address", "copy", "pid", "state")

    def __init__(self, pid: int, address: int, copy: str, state: str) -> None:
        self.pid, self.address, self.copy, self.state = pid, address, copy, state


def _name(field: str, value: Any) -> str:
    """A plain file name (no folder, nothing hidden): the live files stay in live/."""
    if (
        not isinstance(value, str)
        or not value
        or value != os.path.basename(value)
        or value.startswith(".")
        or len(value) > 255
    ):
        raise BadField(field, "not a plain file name")
    return value


def check_live(m: Any, store_dir: str, args: dict[int, Any]) -> dict[int, LiveBuffer]:
    """The live section of a ``.live`` record, checked: every named buffer is a buffer
    argument of the record with no blob, the files are plain names in ``<store>/live/``.
    Raises :class:`BadField`."""
    if not isinstance(m, dict):
        raise BadField("live", "not a map")
    pid = m.get("pid")
    if not is_int(pid) or not 0 < pid < 1 << 31:
        raise BadField("live.pid", "not a process id")
    folder = os.path.join(store_dir, LIVE_SUBDIR)
    state = os.path.join(folder, _name("live.state", m.get("state")))
    buffers = m.get("buffers")
    if not isinstance(buffers, list) or len(buffers) > len(args):
        raise BadField("live.buffers", "not a list of the record's buffers")
    out: dict[int, LiveBuffer] = {}
    for i, b in enumerate(buffers):
        at = f"live.buffers[{i}]"
        if not isinstance(b, dict):
            raise BadField(at, "not a map")
        index, address = b.get("index"), b.get("address")
        arg = args.get(index) if is_int(index) else None
        if arg is None or arg.kind != "buffer" or arg.blob is not None or index in out:
            raise BadField(f"{at}.index", "not a buffer argument without a blob")
        if not is_int(address) or not 0 < address < 1 << 64:
            raise BadField(f"{at}.address", "not an address")
        copy = os.path.join(folder, _name(f"{at}.copy", b.get("copy")))
        out[int(index)] = LiveBuffer(int(pid), int(address), copy, state)
    return out


def check_inline(m: Any) -> dict[str, bytes]:
    """The small snapshots carried by a ``.live`` record, each checked against its key."""
    if not isinstance(m, dict):
        raise BadField("inline", "not a map")
    out = {}
    for key, data in m.items():
        if not is_blob_key(key) or not isinstance(data, bytes) or content_key(data) != key:
            raise BadField("inline", "a blob whose bytes do not hash to its key")
        out[key] = data
    return out
