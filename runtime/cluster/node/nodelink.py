"""Python side of the node's native fast-launch link (``native/nodelink/nodelink.c``).

Why: on the same host, a client's launch+wait crossed the node's Python twice (read +
decode + enqueue, then event polling + reply), about 100 us of a 270 us round trip on the
2-core VM. A launch the client repeats exactly (kernel, arguments, NDRange) can instead
travel as a 24-byte frame on a second Unix socket (the node's command socket path +
``.fast``) that a C thread reads, enqueues, waits for and answers without Python.

Slots: a client asks for one (launch field ``slot``) when it sends a launch of the same
shape a second time (program, kernel, buffer/local arguments, scalar sizes, NDRange); the
node creates a dedicated ``cl_kernel`` with those arguments (so nothing else ever changes
them), registers it here for that client and answers with the slot number. Fast frames
carry the scalar arguments' values, which the C thread sets before each launch: a loop
whose step index changes every launch is covered too. Both
sides drop slots when buffers or programs they name may change (``buf_create``,
``release``, ``release_all``, a closed link; the client drops on a superset, so it never
names a slot the node has dropped).

Order between a client's two connections (its command link, served by the node's Python,
and its fast link, served in C), both numbered by the client's request ids: a fast frame
carries ``after`` = the last command sent on the command link and runs once the node has
handled it (:meth:`NativeLink.handled`); a command sent after fast frames carries ``after``
= the last fast frame, and the node holds it back until C has taken that frame
(:meth:`NativeLink.fast_done`, :meth:`NativeLink.want`). Commands on the command link pay
nothing extra (no second thread hop). Frame format: docs/cluster.md.

``CLPROJ_NODE_NATIVE=0`` makes the node offer no fast link (benchmarks compare).
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Sequence

from clproj import settings
from clproj.runtime.cluster import protocol, unixlink

FAST = struct.Struct("<BBBBIQQ")  # 0xC1, version 1, flags, scalars, slot, request id, after
SCALAR = struct.Struct("<HH")  # per scalar argument: index, size (its bytes follow)
FAST_MAGIC = 0xC1
MAX_SLOTS = 4096  # NL_MAX_SLOTS in nodelink.c (slot 0 is never used)
SUFFIX = ".fast"  # the fast socket's path = the node's command socket path + this


def available() -> bool:
    """The native link is built and not switched off (CLPROJ_NODE_NATIVE=0)."""
    if not settings.get("CLPROJ_NODE_NATIVE"):
        return False
    try:
        from clproj.runtime.cluster.node import _nodelink  # noqa: F401
    except ImportError:
        return False
    return True


def fast_frame(
    slot: int,
    rid: int,
    after: int,
    scalars: Sequence[tuple[int, bytes]] = (),
    same_key: bool = True,
) -> bytes:
    """A client's fast launch of ``slot`` as request ``rid``, to run after its command
    ``after`` (the last one it sent on its command link, 0: none), with these values of
    the kernel's scalar arguments (index, bytes); ``same_key``: the launch's placement key
    is the one the slot was made with (its kernel time then counts for that key)."""
    head = FAST.pack(FAST_MAGIC, 1, int(same_key), len(scalars), slot, rid, after)
    if not scalars:
        return head
    return head + b"".join(SCALAR.pack(i, len(v)) + v for i, v in scalars)


class NativeLink:
    """The fast socket at ``path``, served by the C thread."""

    def __init__(self, path: str, settle_s: float) -> None:
        from clproj.runtime.cluster.node._nodelink import ffi, lib

        self.ffi, self.lib = ffi, lib
        self.path = path
        self._sock = unixlink.listen(path)
        self._h = lib.nl_start(self._sock.fileno(), settle_s, protocol.PROTOCOL_VERSION)
        if self._h == ffi.NULL:
            self._sock.close()
            raise OSError("the native link thread did not start")
        self.fd = int(lib.nl_py_fd(self._h))

    def closed_clients(self) -> list[bytes]:
        """Clients whose fast connection closed since the last call (also resets the
        readiness of :attr:`fd`)."""
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 8)
        ffi, lib = self.ffi, self.lib
        out = []
        while True:
            m = lib.nl_pop(self._h)
            if m == ffi.NULL:
                return out
            out.append(bytes(ffi.buffer(m.peer, m.peer_len)))
            lib.nl_free(m)

    def handled(self, peer: bytes, rid: int) -> None:
        """The node has enqueued (or refused) command ``rid`` of client ``peer``."""
        self.lib.nl_handled(self._h, peer, len(peer), rid)

    def fast_done(self, peer: bytes) -> int:
        return int(self.lib.nl_fast_done(self._h, peer, len(peer)))

    def want(self, peer: bytes, rid: int) -> None:
        """Make :attr:`fd` readable once ``peer``'s fast frame ``rid`` has been taken."""
        self.lib.nl_want(self._h, peer, len(peer), rid)

    def add_slot(
        self,
        slot: int,
        peer: bytes,
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
                peer,
                len(peer),
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

    def take_times(self, slot: int) -> tuple[int, float, int, float]:
        """Launches completed since the last call and their summed kernel seconds: all of
        them, and those whose placement key was the slot's own."""
        secs, key_n, key_secs = (
            self.ffi.new("double *"),
            self.ffi.new("uint32_t *"),
            self.ffi.new("double *"),
        )
        n = int(self.lib.nl_slot_take(self._h, slot, secs, key_n, key_secs))
        return n, float(secs[0]), int(key_n[0]), float(key_secs[0])

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
