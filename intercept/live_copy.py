"""The app's side of a launch's live record, inside the shim: publish it, copy the buffers
it names, and stop copying once ``clproj run`` has projected the launch.

Why apart from intercept.shim_runtime (which snapshots every recorded launch) and
intercept.live_view (the live record's files and their checks): this is the procedure
of one launch's copies, whose end is decided by another process. While the copies run the
launch waits and its buffers hold still, so the emulator reads the pages it touches
straight from the app (intercept.live_pages). Once the launch is projected nobody reads
them: where the records are this run's own (``CLPROJ_SNAPSHOT_VIEW=release``, project
mode without ``--record``) the copies stop between chunks, their scratch files go, and
the record proper marks those arguments ``dropped`` (docs/formats.md §1). BabelStream at
400 MiB arrays copies seven of them for its six kernels, 0.12-0.7 s each on the 2-core VM,
while each kernel is projected 0.05-0.3 s after its launch.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

from clproj import settings
from clproj.intercept.live_view import LiveView, live_copy_path

# CLPROJ_FAULT=copy-wait: how long a launch waits for its release before copying anyway
COPY_WAIT_S = 30.0


def view_for(store_dir: str, verify: bool) -> LiveView | None:
    """A live view for a launch's snapshots, where one can help: project mode under
    ``clproj run``, the record published at the launch (not ``--verify``), emulation while
    the app runs."""
    view = settings.get("CLPROJ_SNAPSHOT_VIEW")
    if (
        settings.get("CLPROJ_MODE") != "project"
        or verify
        or view not in ("release", "live")
        or str(settings.get("CLPROJ_LIVE_EMULATION")) == "0"
        or not settings.get("CLPROJ_RUN_DIR")  # only clproj run reads (and removes) them
    ):
        return None
    return LiveView(store_dir, releasable=view == "release")


def live_map(rec: Any, view: LiveView) -> tuple[dict[str, Any], dict[str, bytes]] | None:
    """The live record's map and its inline snapshots; None where a buffer cannot be
    described: a large one equal to an earlier snapshot whose blob is not written yet."""
    from clproj.intercept.blobs import BlobStore
    from clproj.intercept.live_view import inline_blob
    from clproj.intercept.record_writer import hashed_snapshot

    live_keys = {c.key for c in view.copies}
    m = rec.to_map()
    inline: dict[str, bytes] = {}
    for a in m["args"]:
        key = a.get("blob") if a.get("kind") == "buffer" else None
        if key is None:
            continue
        if key in live_keys:
            a["blob"] = None
            continue
        data = rec.blobs.get(key)
        if isinstance(data, (bytes, bytearray)) and key not in rec.blob_files:
            a["blob"], inline[a["blob"]] = inline_blob(data)  # a small one
            continue
        source, _, same = rec.blob_sources.get(key, (None, None, None))
        hashed = hashed_snapshot(source) if same is not None else None
        if hashed is None or hashed[0] != same or not BlobStore(view.store_dir).has(hashed[1]):
            return None
        a["blob"] = hashed[1]  # the earlier snapshot's blob, written by now
    return m, inline


def copy_live(rec: Any, view: LiveView, log: Callable[[str, str], None]) -> None:
    """Publish the launch's live record, then copy each of its buffers (the app's thread
    waits for the copies as before; the emulator need not), then say they are whole; a
    releasable view stops at its release, its copies not yet whole dropped. ``log(key,
    message)``: the shim's once-per-run message."""
    from clproj.intercept.last_snapshots import LAST
    from clproj.intercept.snapshot_hash import copy_snapshot, streamed, write_file

    described = live_map(rec, view)
    if described is not None:
        try:
            view.publish(rec.id, *described)
        except OSError as exc:  # the record proper still follows
            log("live", f"live records not written ({exc}); launches wait for copies")
    if view.releasable and settings.get("CLPROJ_FAULT") == "copy-wait":
        _wait_for_release(view)
    try:
        for n, c in enumerate(view.copies):
            if not view.published:  # no live record: hashed as it is copied, as before
                digest = copy_snapshot(c.scratch, rec.blobs[c.key], c.source, c.size, streamed())
            else:
                # with the live record out, hashed by the record writer: while the app
                # copies, the other core is the emulator's, which reads the live record
                digest = None
                if write_file(c.scratch, c.source, c.size, stop=view.released) < c.size:
                    view.abandon()  # nothing more of the buffers can be had
                    _drop(rec, view, view.copies[n:])
                    return
            if digest is not None:
                rec.blob_digests[c.key] = digest
            rec.blob_sources[c.key] = (
                c.device_buffer,
                LAST.remember(c.device_buffer, c.scratch, c.size),
                None,
            )
    except BaseException:
        view.abandon()
        raise
    view.done()


def _wait_for_release(view: LiveView) -> None:
    """``CLPROJ_FAULT=copy-wait``: the copies start only once clproj run released the view
    (or after :data:`COPY_WAIT_S`), so a test sees them dropped whatever the machine's speed."""
    end = time.monotonic() + COPY_WAIT_S
    while not view.released() and time.monotonic() < end:
        time.sleep(0.01)


def _drop(rec: Any, view: LiveView, copies: list[LiveView.Copy]) -> None:
    """The snapshots of ``copies`` are not kept: their scratch files and the live record's
    links to them go (a part-written copy holds its pages until both are gone), and their
    arguments say so (intercept.record.ArgRecord.dropped)."""
    keys = {c.key for c in copies}
    for a in rec.args:
        if a.kind == "buffer" and a.blob in keys:
            a.blob, a.dropped = None, True
    rec.drop_blobs(keys)
    for c in copies:
        with contextlib.suppress(OSError):
            os.unlink(live_copy_path(view.folder, rec.id, c.index))
