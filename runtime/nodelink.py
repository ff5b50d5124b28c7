"""Python side of the node's native same-host link (``native/nodelink/nodelink.c``).

Why: on the same host, a client's launch+wait used to cross the node's Python twice
(read + decode + enqueue, then event polling + reply), about 100 us of a 270 us round
trip on the 2-core VM. The native link moves the socket work into a C thread and lets it
run *fast launches* alone: a 16-byte frame naming a slot, i.e. a kernel whose arguments
and NDRange are fixed. Every other message still reaches :class:`runtime.node.Node` in
stream order, through :meth:`NativeLink.messages`; the node says when it has enqueued one
(:meth:`NativeLink.handled`), and only then may the C thread run a fast launch queued
behind it on that connection, so commands reach the device's in-order queue in the order
the client sent them.

Slots: a client asks for one (launch field ``slot``) when it sends the same launch (kernel,
arguments, NDRange) a second time; the node creates a dedicated ``cl_kernel`` with those
arguments (so nothing else ever changes them) and answers with the slot number. Both
sides drop slots when buffers or programs they name may change (``buf_create``,
``release``, ``release_all``; the client drops on a superset, so it never names a slot the
node has dropped). Format of the fast frame: docs/protocol.md.

The wire framing is that of :mod:`runtime.unixlink` (the client side stays Python).
``CLPROJ_NODE_NATIVE=0`` makes the node serve the link in Python (benchmarks compare).
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator, Sequence
from typing import Any

from runtime import protocol, unixlink

FAST = struct.Struct("<BBHIQ")  # 0xC1, version 1, 0, slot, request id
FAST_MAGIC = 0xC1
MAX_SLOTS = 4096  # NL_MAX_SLOTS in nodelink.c (slot 0 is never used)


def available() -> bool:
    """The native link is built and not switched off (CLPROJ_NODE_NATIVE=0)."""
    if os.environ.get("CLPROJ_NODE_NATIVE", "1") == "0":
        return False
    try:
        from runtime import _nodelink  # noqa: F401
    except ImportError:
        return False
    return True


def fast_frame(slot: int, rid: int) -> bytes:
    """A client's fast launch of ``slot`` as request ``rid``."""
    return FAST.pack(FAST_MAGIC, 1, 0, slot, rid)


class NativeConn:
    """One client connection, as the node's handlers see it: ``send_multipart`` with the
    zmq signature (frame 0, the client's routing id, is dropped: the connection already
    identifies the client)."""

    __slots__ = ("conn", "link", "peer")

    def __init__(self, link: NativeLink, conn: int, peer: bytes) -> None:
        self.link = link
        self.conn = conn
        self.peer = peer

    def send_multipart(self, frames: list[Any], copy: bool = True) -> None:
        self.link.send(self.conn, frames[1:])


class NativeLink:
    """A listening Unix socket at ``path`` served by the C thread."""

    def __init__(self, path: str, settle_s: float) -> None:
        from runtime._nodelink import ffi, lib

        self.ffi, self.lib = ffi, lib
        self.path = path
        self._sock = unixlink.listen(path)
        self._h = lib.nl_start(
            self._sock.fileno(),
            protocol.MAX_DATA_FRAMES + 1,
            protocol.MAX_MESSAGE_BYTES if protocol.MAX_MESSAGE_BYTES < 2**32 else 2**32 - 1,
            settle_s,
            protocol.PROTOCOL_VERSION,
        )
        if self._h == ffi.NULL:
            self._sock.close()
            raise OSError("the native link thread did not start")
        self.fd = int(lib.nl_py_fd(self._h))
        self._conns: dict[int, NativeConn] = {}

    def messages(self) -> Iterator[tuple[NativeConn, list[unixlink.Frame] | None]]:
        """What has arrived for Python, oldest first: (connection, frames), or
        (connection, None) when the connection closed. Call :meth:`handled` for each
        message with frames once it is enqueued (or refused)."""
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 8)  # reset the eventfd before emptying the queue
        ffi, lib = self.ffi, self.lib
        while True:
            m = lib.nl_pop(self._h)
            if m == ffi.NULL:
                return
            try:
                conn = self._conns.get(m.conn)
                if conn is None:
                    conn = NativeConn(self, int(m.conn), bytes(ffi.buffer(m.peer, m.peer_len)))
                    self._conns[conn.conn] = conn
                if m.nframes == 0:
                    self._conns.pop(conn.conn, None)
                    frames = None
                else:
                    raw = ffi.buffer(m.data, sum(m.lens[i] for i in range(m.nframes)))
                    frames, pos = [], 0
                    for i in range(m.nframes):
                        n = m.lens[i]
                        frames.append(unixlink.Frame(raw[pos : pos + n]))
                        pos += n
            finally:
                lib.nl_free(m)
            yield conn, frames

    def handled(self, conn: NativeConn) -> None:
        self.lib.nl_handled(self._h, conn.conn)

    def send(self, conn: int, frames: Sequence[Any]) -> None:
        views = [memoryview(f).cast("B") for f in frames]
        ptrs = [self.ffi.from_buffer(v) for v in views]
        lens = [v.nbytes for v in views]
        self.lib.nl_send(self._h, conn, len(views), ptrs, lens)

    def add_slot(
        self,
        slot: int,
        conn: NativeConn,
        kernel_ptr: int,
        queue_ptr: int,
        dev: int,
        gsize: Sequence[int],
        lsize: Sequence[int] | None,
        goff: Sequence[int] | None,
    ) -> bool:
        ffi = self.ffi
        return (
            self.lib.nl_slot_add(
                self._h,
                slot,
                conn.conn,
                ffi.cast("void *", kernel_ptr),
                ffi.cast("void *", queue_ptr),
                dev,
                len(gsize),
                list(gsize),
                list(lsize) if lsize else ffi.NULL,
                list(goff) if goff else ffi.NULL,
            )
            == 0
        )

    def drop_slot(self, slot: int) -> None:
        self.lib.nl_slot_drop(self._h, slot)

    def take_times(self, slot: int) -> tuple[int, float]:
        """(launches completed since the last call, their summed kernel seconds)."""
        secs = self.ffi.new("double *")
        n = int(self.lib.nl_slot_take(self._h, slot, secs))
        return n, float(secs[0])

    def inflight(self, dev: int) -> int:
        return int(self.lib.nl_inflight(self._h, dev))

    @property
    def rejects(self) -> int:
        return int(self.lib.nl_rejects(self._h))

    @property
    def served(self) -> int:
        return int(self.lib.nl_served(self._h))

    def close(self) -> None:
        if self._h != self.ffi.NULL:
            self.lib.nl_stop(self._h)
            self._h = self.ffi.NULL
            with contextlib.suppress(OSError):
                self._sock.close()
