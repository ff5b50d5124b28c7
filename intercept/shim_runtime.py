"""Python side of the preloaded shim: started by cffi inside the intercepted process.

The C side counts and times every launch itself; Python is only reached at launches that
are recorded (``clproj_py_pre_launch`` snapshots the inputs on the app's own queue,
``clproj_py_post_launch`` reads the outputs with ``--verify``, writes the record and calls
the hooks of :mod:`intercept.hooks`). Everything here runs inside somebody else's
application, so every callback catches its own exceptions: a failure is logged once and
the OpenCL call it belongs to is passed through unchanged.

Fault injection for tests: ``CLPROJ_FAULT=start`` makes start-up fail,
``CLPROJ_FAULT=launch`` makes every recorded launch raise.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import threading
import time
from collections.abc import Iterator
from typing import Any

from clproj import cl_names as cl
from clproj import settings
from clproj.errors import say_once
from clproj.intercept import size_queries
from clproj.paths import nearest_existing

_lock = threading.Lock()
_dir_lock = threading.Lock()  # record_dir's folder made once
_pending: dict[int, tuple[object, int, bool]] = {}  # handle -> (record, bytes reserved, published)
_handles = itertools.count(1)
# What CLPROJ_RECORD_MAX_BYTES counts: the bytes this process's records added to their blob
# store (content-addressed: a snapshot identical to one stored is not stored again), plus
# the bytes reserved by records not yet written (their hashes, hence what they add, are
# not known until the writer has them: :func:`settle`).
_snapshot_bytes = 0
_unwritten = 0  # of those, reserved by records not yet written
_settled = threading.Condition(_lock)
# How long a launch waits for the writer to tell what the records before it stored, when
# only that decides whether it may be recorded: longer than the hashing of the largest
# snapshots (~1 ms per MiB) under load, short of looking hung.
SETTLE_WAIT_S = 60.0

# Recording never takes a file system below this (a launch-heavy app whose scalar
# arguments change at every launch makes a record per launch: thousands of snapshots).
FREE_SPACE_FLOOR = 1 << 30

CL_DEVICE_TYPE_NAMES = {
    cl.CL_DEVICE_TYPE_DEFAULT: "DEFAULT",
    cl.CL_DEVICE_TYPE_CPU: "CPU",
    cl.CL_DEVICE_TYPE_GPU: "GPU",
    cl.CL_DEVICE_TYPE_ACCELERATOR: "ACCELERATOR",
    cl.CL_DEVICE_TYPE_CUSTOM: "CUSTOM",
}
KINDS = {0: "scalar", 1: "buffer", 2: "local", 3: "null", 4: "unsupported"}


def record_dir() -> str:
    """Where this process's records go: ``CLPROJ_RECORD_DIR``, else (project or route mode
    preloaded without ``clproj run``, which always names one) a private temporary folder,
    in ``CLPROJ_RUN_DIR`` when set, removed when the app exits: such records only serve
    the projections made inside the app, and an app's run must leave nothing in /tmp."""
    d = settings.get("CLPROJ_RECORD_DIR")
    if d:
        return d
    from clproj.intercept.hooks import at_exit
    from clproj.paths import temp_dir

    with _dir_lock:  # one folder, whichever of the app's threads records first
        d = settings.get("CLPROJ_RECORD_DIR")
        if d:
            return d
        parent = settings.get("CLPROJ_RUN_DIR") or None
        d = temp_dir("clproj-records-", parent)
        at_exit(lambda: shutil.rmtree(d, ignore_errors=True), last=True)
        os.environ["CLPROJ_RECORD_DIR"] = d
    return d


def _device_info(ffi, lib, device) -> dict:
    if device == ffi.NULL:
        return {}
    buf = ffi.new("char[]", 512)
    out = {}
    for key, param in (
        ("name", cl.CL_DEVICE_NAME),
        ("vendor", cl.CL_DEVICE_VENDOR),
        ("driver", cl.CL_DRIVER_VERSION),
    ):
        lib.clproj_device_str(device, param, buf, 512)
        out[key] = ffi.string(buf).decode(errors="replace").strip()
    t = int(lib.clproj_device_type(device))
    out["type"] = " | ".join(n for bit, n in CL_DEVICE_TYPE_NAMES.items() if t & bit) or str(t)
    return out


class UnreadableBuffer(RuntimeError):
    """The driver refused to read a buffer argument for the record: the launch is one it
    will refuse too (a buffer of another context), or one that cannot be snapshotted."""


def _read(ffi, lib, L, mem, size: int, wait: bool, into=None):
    """Read ``size`` bytes of ``mem`` straight into the snapshot's own memory (no zero
    fill by ffi.new, no second copy into bytes): ``into`` (the staging buffer of
    intercept.last_snapshots), else a new bytearray."""
    data = bytearray(max(1, size)) if into is None else into
    err = lib.clproj_read_mem(
        L.queue,
        mem,
        size,
        ffi.from_buffer("unsigned char[]", data),
        L.n_wait if wait else 0,
        L.wait if wait else ffi.NULL,
    )
    if err != 0:
        raise UnreadableBuffer(f"clEnqueueReadBuffer returned {err}")
    return data if size else bytearray()


_unified: dict[int, bool] = {}  # device -> its memory is the host's (clproj_host_unified)


@contextlib.contextmanager
def _content(ffi, lib, L, mem, size: int, wait: bool) -> Iterator[tuple[Any, int | None]]:
    """The ``size`` bytes of ``mem`` (after the launch's wait list when ``wait``), readable
    for the duration of the ``with``, and their address when they are the buffer's own
    memory (mapped; None for the staging buffer).

    Where the device's memory is the host's (PoCL's CPU devices), the buffer mapped for
    reading: its own memory, read once by the comparisons and the copy instead of being
    copied into the staging buffer first (BabelStream's 15 snapshots of 400 MiB: 0.04-0.06 s
    a snapshot, and 0.35 s to fault the staging buffer in, on the 2-core VM). Elsewhere, or
    where the map is refused, the staging buffer of intercept.last_snapshots, read into
    (``clEnqueueReadBuffer``) and held under its lock."""
    from clproj.intercept.last_snapshots import LAST

    device = int(ffi.cast("uintptr_t", L.device))
    if device not in _unified:
        _unified[device] = bool(lib.clproj_host_unified(L.device))
    if _unified[device] and settings.get("CLPROJ_SNAPSHOT_READS") == "fewest":
        ptr = lib.clproj_map_mem(
            L.queue, mem, size, L.n_wait if wait else 0, L.wait if wait else ffi.NULL
        )
        if ptr != ffi.NULL:
            view = memoryview(ffi.buffer(ptr, size))
            try:
                yield view, int(ffi.cast("uintptr_t", ptr))
            finally:
                with contextlib.suppress(BufferError):  # a view of it left in a traceback
                    view.release()
                lib.clproj_unmap_mem(L.queue, mem, ptr)
            return
    with LAST.lock:
        stage = LAST.staging(size)
        _read(ffi, lib, L, mem, size, wait, into=stage)
        yield stage, None


# Snapshots from this size on are mapped or read into the staging buffer (:func:`_content`)
# and, unless they equal the buffer's last snapshot or are zeros (intercept.last_snapshots),
# copied into a file of the blob store (BlobStore.scratch); smaller ones are read into
# memory (a file costs a create, a map and a rename: ~50 us).
SCRATCH_MIN_BYTES = 1 << 20


def _known_content(rec, stage, source: int, previous, inputs: bool) -> tuple[bool, str | None]:
    """(True, blob key) when the staged snapshot of ``source`` needs no file of its own: it
    holds the bytes of the buffer's last snapshot ``previous``, or zeros (None for an input,
    see :func:`_snapshot`); (False, None) otherwise."""
    from clproj.intercept.blobs import prepare_zeros_key
    from clproj.intercept.last_snapshots import LAST, all_zero

    if previous is not None and LAST.equals_previous(stage, previous):
        if inputs and LAST.is_zeros(previous):
            return True, None
        return True, rec.add_blob(
            memoryview(previous[1]), source=(source, previous[0], previous[0])
        )
    if not all_zero(stage):
        return False, None
    seq, zeros = LAST.remember_zeros(source, len(stage))
    if inputs:
        return True, None
    prepare_zeros_key(len(stage))  # named while the launch runs
    return True, rec.add_blob(memoryview(zeros), source=(source, seq, None), zeros=True)


def _snapshot(
    ffi,
    lib,
    L,
    rec,
    index: int,
    size: int,
    wait: bool,
    inputs: bool = False,
    live: Any = None,
) -> str | None:
    """Snapshot buffer argument ``index`` into ``rec``; returns its (pending) blob key.

    ``inputs`` (the launch's inputs, not ``--verify``'s outputs): a snapshot of 1 MiB or
    more that is all zeros is recorded as no blob (null, which readers take as zeros):
    neither stored nor hashed (400 MiB of zeros: 0.1 s of a core with BLAKE3, 0.4-0.6 s
    with sha256, beside the app's kernel).

    ``live`` (an :class:`intercept.live_view.LiveView` and the ExitStack that holds its
    buffers mapped): a changed snapshot of a mapped buffer is not copied here but added
    to the view, copied by :func:`intercept.live_copy.copy_live` once the launch's live
    record is out."""
    mem = L.args[index].mem
    if size < SCRATCH_MIN_BYTES:
        return rec.add_blob(_read(ffi, lib, L, mem, size, wait))
    from clproj.intercept.blobs import BlobStore
    from clproj.intercept.last_snapshots import LAST
    from clproj.intercept.live_view import LiveView
    from clproj.intercept.snapshot_hash import copy_snapshot, streamed

    source = int(ffi.cast("uintptr_t", mem))
    previous = LAST.previous(source, size)
    # compared with the buffer's last snapshot and with zeros (last_snapshots); only a
    # snapshot that is neither is copied into a file of its own
    with contextlib.ExitStack() as mapped:
        stage, address = mapped.enter_context(_content(ffi, lib, L, mem, size, wait))
        known, key = _known_content(rec, stage, source, previous, inputs)
        if known:
            return key
        path, view = BlobStore(record_dir()).scratch(size)
        if live is not None and address is not None:
            key = rec.add_blob(view, scratch=path)  # the buffer stays mapped until copied
            live[1].enter_context(mapped.pop_all())
            live[0].add(LiveView.Copy(index, address, path, stage, size, key, source))
            return key
        try:
            digest = copy_snapshot(path, view, stage, size, streamed())
        except BaseException:
            view.close()
            os.unlink(path)
            raise
    try:
        seq = LAST.remember(source, path, size)
    except BaseException:
        if digest is not None:
            digest.cancel()
        view.close()
        os.unlink(path)
        raise
    return rec.add_blob(view, scratch=path, source=(source, seq, None), digest=digest)


def _metadata(ffi, lib, L):
    """The launch as a record without buffer contents: kernel, NDRange, argument kinds,
    scalars and buffer sizes. Cheap enough to build for every launch; ``pre_launch``
    adds the snapshots and the device when the launch is really recorded."""
    from clproj.intercept.record import ArgRecord, LaunchRecord

    args = []
    for i in range(L.nargs):
        a = L.args[i]
        kind = KINDS.get(a.kind, "null")
        if kind == "scalar":
            args.append(ArgRecord(i, kind, data=bytes(ffi.buffer(a.data, a.size))))
        elif kind == "buffer":
            r = ArgRecord(i, kind, size=int(a.size), flags=int(a.flags))
            if a.parent_size:
                r.origin, r.parent = int(a.origin), int(a.parent_size)
            args.append(r)
        elif kind == "local":
            args.append(ArgRecord(i, kind, size=int(a.size)))
        elif kind == "unsupported":
            what = ffi.string(a.what).decode() if a.what != ffi.NULL else "unsupported"
            args.append(ArgRecord(i, kind, what=what))
        else:  # NULL value: kept with its size, which a __local parameter needs
            args.append(ArgRecord(i, "null", size=int(a.size) or None))
    dim = int(L.work_dim)
    reason = ffi.string(L.not_emulatable).decode() if L.not_emulatable != ffi.NULL else None
    return LaunchRecord(
        kernel=ffi.string(L.kernel_name).decode(),
        source=ffi.string(L.source).decode(errors="replace") if L.source != ffi.NULL else None,
        options=ffi.string(L.options).decode(errors="replace"),
        args=args,
        work_dim=dim,
        global_size=[int(L.global_size[d]) for d in range(dim)],
        local_size=[int(L.local_size[d]) for d in range(dim)] if L.has_local else None,
        global_offset=[int(L.offset[d]) for d in range(dim)] if L.has_offset else None,
        binary_kind=ffi.string(L.binary_kind).decode() if L.binary_kind != ffi.NULL else None,
        emulatable=reason is None,
        not_emulatable_reason=reason,
        asked=size_queries.read(int(L.size_queries), lib.clproj_size_query_answer),
        created=time.time(),
    )


def free_bytes(path: str) -> int:
    """Free bytes on the file system that holds ``path`` (or would: its nearest existing parent)."""
    return shutil.disk_usage(nearest_existing(path)).free


def writable(path: str) -> bool:
    """Whether records can be written at ``path`` (or made under its nearest existing
    parent). Checked before the free space: a read-only file system reports little or no
    space free, and "less than 1 GiB free" would name the wrong cause."""
    return os.access(nearest_existing(path), os.W_OK)


def within_record_budget(need: int, directory: str) -> bool:
    """Whether a record snapshotting ``need`` more bytes may be made (CLPROJ_RECORD_MAX_BYTES
    and :data:`FREE_SPACE_FLOOR`); says once, on stderr, why recording stopped. When True,
    ``need`` is reserved until :func:`settle` says what the record stored.

    A reservation that would pass the limit waits (up to :data:`SETTLE_WAIT_S`) for the
    records before it to be written: the limit bounds the disk the records take, and a
    snapshot identical to a stored one takes none (BabelStream at 400 MiB: 6000 MiB of
    snapshots, most of them the same arrays again, every kernel within 4 GiB)."""
    global _snapshot_bytes, _unwritten
    limit = int(settings.get("CLPROJ_RECORD_MAX_BYTES"))
    with _settled:
        if limit and _snapshot_bytes + need > limit:
            _settled.wait_for(
                lambda: _snapshot_bytes + need <= limit or not _unwritten, SETTLE_WAIT_S
            )
        if limit and _snapshot_bytes + need > limit:
            say_once(
                "budget",
                f"recording stopped: {_snapshot_bytes >> 20} MiB of buffer snapshots reached "
                f"CLPROJ_RECORD_MAX_BYTES ({limit >> 20} MiB); later launches run, are counted "
                "and timed but not recorded (raise it, 0 = no limit, or record fewer: --kernel)",
            )
            return False
        if not writable(directory):
            say_once(
                "disk",
                f"recording stopped: {directory} is not writable (a read-only folder or file "
                "system); later launches run, are counted and timed but not recorded (record "
                "elsewhere: --record DIR)",
            )
            return False
        if free_bytes(directory) - need < FREE_SPACE_FLOOR:
            say_once(
                "disk",
                f"recording stopped: {directory} would have less than "
                f"{FREE_SPACE_FLOOR >> 30} GiB free; later launches run, are counted and timed "
                "but not recorded (free space there or record elsewhere: --record DIR)",
            )
            return False
        _snapshot_bytes += need
        _unwritten += need
    return True


def settle(reserved: int, stored: int) -> None:
    """A record that reserved ``reserved`` bytes (:func:`within_record_budget`) is written
    (or dropped) and added ``stored`` bytes to its blob store: the rest is free again."""
    global _snapshot_bytes, _unwritten
    with _settled:
        _snapshot_bytes -= reserved - stored
        _unwritten -= reserved
        _settled.notify_all()


def _snapshot_inputs(ffi, lib, L, rec) -> None:
    """Snapshot every buffer argument of ``rec`` (hashed by the record writer, off this
    thread), name its device and give it its id."""
    from clproj.intercept.live_copy import copy_live, view_for
    from clproj.intercept.record import new_id

    fewest = settings.get("CLPROJ_SNAPSHOT_READS") == "fewest"
    view = view_for(record_dir(), bool(L.verify))
    with contextlib.ExitStack() as held:  # live: the buffers stay mapped until copied
        live = None if view is None else (view, held)
        for arg in rec.args:
            if arg.kind == "buffer":
                # no command wrote it yet (native/shim/writes.c): its content is undefined,
                # recorded as no blob (zeros) without reading the buffer at all
                arg.unwritten = bool(L.args[arg.index].fresh) and fewest
                if not arg.unwritten:
                    arg.blob = _snapshot(
                        ffi, lib, L, rec, arg.index, int(arg.size), True, True, live
                    )
        rec.device = _device_info(ffi, lib, L.device)
        rec.id = new_id(rec.kernel, record_dir())
        if view is not None and view.copies:
            copy_live(rec, view, say_once)


def pre_launch(ffi, lib, L):
    """Build the record and snapshot every buffer argument before the launch runs."""
    if settings.get("CLPROJ_FAULT") == "launch":
        raise RuntimeError("injected fault (CLPROJ_FAULT=launch)")
    rec = _metadata(ffi, lib, L)
    if settings.get("CLPROJ_MODE") == "project" and rec.emulatable:
        from clproj.intercept import hooks

        if not hooks.admit("project", rec):
            return 0  # answered from the reuse cache: no snapshot, no record
    need = sum(int(a.size) for a in rec.args if a.kind == "buffer") * (2 if L.verify else 1)
    if not within_record_budget(need, record_dir()):
        return 0
    try:
        _snapshot_inputs(ffi, lib, L, rec)
    except BaseException as exc:
        rec.drop_blobs()  # the launch passes through unrecorded: no scratch file stays
        settle(need, 0)
        if isinstance(exc, UnreadableBuffer):  # the driver answers the launch with its code
            return 0
        raise
    # The record is published now, before the launch runs: its snapshots are copies
    # already, project mode's emulation of a kernel that runs for seconds (PolyBench 2mm:
    # 25 s a launch on the 2-core VM) starts at its launch instead of after it, and the
    # launch is not waited for (native/shim/launch.c). post_launch adds the measured time
    # once the shim has it (take_record_times), or withdraws the record of a failed launch.
    # With --verify the outputs are read right after the launch: the record waits for them.
    early = not L.verify
    take_record_times(ffi, lib)
    with _lock:
        handle = next(_handles)
        _pending[handle] = (rec, need, early)
    if early:
        _save(rec, need)
        _times_at_exit(ffi, lib)
    return handle


_TIMES_BATCH = 256


def take_record_times(ffi, lib) -> None:
    """Give each published record whose launch has completed its measured time (the shim
    finds it when the launch's event completes: native/shim/track.c)."""
    handles = ffi.new("int32_t[]", _TIMES_BATCH)
    times = ffi.new("int64_t[]", _TIMES_BATCH)
    while (n := lib.clproj_take_record_times(handles, times, _TIMES_BATCH)) > 0:
        for i in range(n):
            post_launch(ffi, lib, int(handles[i]), None, 0, int(times[i]))


_exit_registered = False


def _times_at_exit(ffi, lib) -> None:
    """At exit, before the record writer drains (registered after it: exit functions run
    last registered first), the times of the launches that completed since: collected
    without waiting for any (an app may exit with a kernel still running, as natively)."""
    global _exit_registered
    if _exit_registered:
        return
    _exit_registered = True
    from clproj.intercept.hooks import at_exit

    def last_times() -> None:
        lib.clproj_harvest_now()
        take_record_times(ffi, lib)

    at_exit(last_times)


def _save(rec, need: int) -> None:
    """Hand ``rec`` to the record writer: the hooks run once it is written, and the bytes
    it reserved are settled against those it stored."""
    from clproj.intercept import hooks
    from clproj.intercept.record_writer import save_later

    save_later(rec, record_dir(), then=hooks.notify, after=lambda r: settle(need, r.stored_bytes))


def post_launch(ffi, lib, handle: int, L, err: int, time_ns: int) -> None:
    """Give a record published at its launch its measured time (or withdraw it: the launch
    failed); with --verify, store the outputs and write the record. The writing and the
    hooks run on the background writer (intercept.record_writer.save_later), not in the app."""
    with _lock:
        rec, need, early = _pending.pop(handle, (None, 0, False))
    if rec is None:
        return
    rec.measured_time_ns = None if err != 0 or time_ns < 0 else int(time_ns)
    if early:  # published at the launch (pre_launch): its time, or its withdrawal
        from clproj.intercept.record_writer import revise_later

        revise_later(rec, record_dir(), withdraw=err != 0)
        return
    if err != 0:  # the launch failed: not recorded
        rec.drop_blobs()
        settle(need, 0)
        return
    # --verify (the only record not published early): the outputs, read right after it
    rec.outputs = {}
    try:
        for a in rec.args:
            if a.kind == "buffer":
                rec.outputs[a.index] = _snapshot(ffi, lib, L, rec, a.index, int(a.size), False)
    except BaseException:
        rec.drop_blobs()
        settle(need, 0)
        raise
    _save(rec, need)


def install(ffi, lib) -> None:
    """Register the ``extern "Python"`` callbacks of the shim."""

    def onerror(key):
        def handler(exc_type, exc, tb):
            say_once(key, f"internal error ({key}), the launch passes through unchanged: {exc!r}")

        return handler

    def start_failed(exc_type, exc, tb):
        say_once("start", f"recording disabled, calls pass through unchanged: {exc!r}")

    @ffi.def_extern(onerror=start_failed)
    def clproj_py_start():
        if settings.get("CLPROJ_FAULT") == "start":
            raise RuntimeError("injected fault (CLPROJ_FAULT=start)")
        import clproj.intercept.record  # fail here, once, rather than at each launch

        if settings.get("CLPROJ_MODE") == "project":
            # what its first recorded launch imports, imported here: in a C app this start
            # runs beside the app's set-up (native/shim/python_start.c, prestart)
            import clproj.intercept.hooks
            import clproj.intercept.last_snapshots
            import clproj.intercept.live_view
            import clproj.intercept.record_writer
            import clproj.intercept.snapshot_hash  # noqa: F401
        return 1

    @ffi.def_extern(onerror=onerror("record"))
    def clproj_py_pre_launch(L):
        return pre_launch(ffi, lib, L)

    @ffi.def_extern(onerror=onerror("record"))
    def clproj_py_post_launch(handle, L, err, time_ns):
        post_launch(ffi, lib, handle, L, err, time_ns)
