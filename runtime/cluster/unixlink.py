"""Same-host command link between a client and a node: a plain Unix stream socket.

Why not ZeroMQ here: every zmq message crosses the sender's and the receiver's I/O
threads, i.e. four thread wake-ups per round trip besides the two endpoints. Between two
processes on this 2-core VM a zmq ipc echo takes 70-95 us, a Unix-socket echo 18-19 us
(measured side by side, benchmarks/results/broker.md). A launch+wait is one such round trip
on the direct path, so on the same host the node also listens on a Unix socket in its
private 0700 directory (reachable only by the same user, as the local ipc broker; no
CURVE: nothing leaves the machine) and announces its path (``register`` field
``local``). Clients on the node's host use it; everything else still uses zmq.

Framing: one message = ``u32 nframes`` + ``u32`` length per frame + the frames; frame 0 is
the msgpack header of :mod:`runtime.cluster.protocol`, frames 1.. bulk data, exactly as on zmq,
and every header is decoded and validated the same way. The first message of a
connection is the client's routing id (so the node keys objects as for its zmq
sockets). Sends never block the node: a :class:`Link` queues what the kernel buffer does
not take and flushes it when the socket is writable; reads are bounded bursts. Size
limits: at most :data:`protocol.MAX_DATA_FRAMES` + 1 frames, each at most
:data:`protocol.MAX_MESSAGE_BYTES`; a peer that breaks them is disconnected.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import struct
from collections import deque
from itertools import islice
from typing import Any

from clproj.runtime.cluster import protocol

_U32 = struct.Struct("<I")
MAX_FRAMES = protocol.MAX_DATA_FRAMES + 1
READ_CHUNK = 1 << 20
# the first read of a burst asks for little: socket.recv(n) allocates n bytes up front, and
# 1 MiB (an mmap + page faults + munmap) cost ~16 us per call here against ~1.3 us for
# 64 KiB, once per command message; bulk data switches to READ_CHUNK after a full read
FIRST_CHUNK = 1 << 16


class LinkError(ConnectionError):
    """The peer went away, or (``framing``) broke the framing and was cut off."""

    def __init__(self, why: str, framing: bool = False) -> None:
        super().__init__(why)
        self.framing = framing


class Frame:
    """What zmq frames offer the message handlers: ``.bytes`` and ``.buffer``."""

    __slots__ = ("buffer", "bytes")

    def __init__(self, data: bytes) -> None:
        self.bytes = data
        self.buffer = memoryview(data)


class Link:
    """One connected Unix stream socket, non-blocking, with framing both ways.

    ``send_multipart`` has the zmq signature so handlers reply through a Link as through
    a socket; on the node, frame 0 (the client's routing id) is dropped, the connection
    already identifies the client."""

    def __init__(self, sock: socket.socket, drop_first: bool = False) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.fd = sock.fileno()
        self.drop_first = drop_first
        self.closed = False
        self.peer = b""  # the client's routing id (node side)
        self._in = bytearray()
        self._out: deque[memoryview] = deque()

    # ---- sending -----------------------------------------------------------------
    def send(self, data: Any, copy: bool = True, flush: bool = True) -> None:
        self.send_multipart([data], copy=copy, flush=flush)

    def send_multipart(self, frames: list[Any], copy: bool = True, flush: bool = True) -> None:
        """Queue one message and write what the socket takes (``flush=False``: only
        queue it; the caller flushes, e.g. once for all the commands of one API call)."""
        if self.drop_first:
            frames = frames[1:]
        if self.closed:
            return
        parts: list[Any] = [_U32.pack(len(frames))]
        views = [memoryview(f).cast("B") for f in frames]
        parts += [_U32.pack(v.nbytes) for v in views]
        parts += views
        self._out.extend(memoryview(p) if isinstance(p, bytes) else p for p in parts)
        if flush:
            self.flush()

    def flush(self) -> bool:
        """Write what the socket takes now; True when nothing is left queued."""
        while self._out and not self.closed:
            try:
                n = self.sock.sendmsg(list(islice(self._out, 64)), [], socket.MSG_NOSIGNAL)
            except BlockingIOError:
                return False
            except OSError:
                self.close()
                return True
            while n:
                head = self._out[0]
                if n >= head.nbytes:
                    n -= head.nbytes
                    self._out.popleft()
                else:
                    self._out[0] = head[n:]
                    n = 0
        return not self._out

    @property
    def pending_out(self) -> bool:
        return bool(self._out)

    # ---- receiving ---------------------------------------------------------------
    def receive(self, max_bytes: int = 16 * READ_CHUNK) -> list[list[Frame]]:
        """The complete messages that have arrived (a bounded read burst). Raises
        :class:`LinkError` at end of stream or on a framing violation."""
        got, size = 0, FIRST_CHUNK
        while got < max_bytes:
            try:
                chunk = self.sock.recv(size)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise LinkError(str(exc)) from None
            if not chunk:
                if not self._in:
                    raise LinkError("connection closed")
                raise LinkError("connection closed inside a message")
            self._in += chunk
            got += len(chunk)
            if len(chunk) < size:  # drained for now: skip the recv that would fail
                break  # (poll is level-triggered: anything later wakes the caller again)
            size = READ_CHUNK
        return self._parse()

    def _parse(self) -> list[list[Frame]]:
        out: list[list[Frame]] = []
        buf = self._in
        pos = 0
        while len(buf) - pos >= 4:
            (nf,) = _U32.unpack_from(buf, pos)
            if not 1 <= nf <= MAX_FRAMES:
                raise LinkError(f"message with {nf} frames", framing=True)
            head = pos + 4 + 4 * nf
            if len(buf) < head:
                break
            lens = struct.unpack_from(f"<{nf}I", buf, pos + 4)
            if any(n > protocol.MAX_MESSAGE_BYTES for n in lens):
                raise LinkError("oversized frame", framing=True)
            end = head + sum(lens)
            if len(buf) < end:
                break
            frames = []
            p = head
            for n in lens:
                frames.append(Frame(bytes(buf[p : p + n])))
                p += n
            out.append(frames)
            pos = end
        if pos:
            del buf[:pos]
        return out

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._out.clear()
            with contextlib.suppress(OSError):
                self.sock.close()


def listen(path: str) -> socket.socket:
    """A listening Unix socket at ``path`` (non-blocking accept)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(64)
    s.setblocking(False)
    return s


def connect(path: str, routing_id: bytes) -> Link:
    """Connect a client to a node's Unix socket and introduce it by its routing id."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    link = Link(s)
    link.send(routing_id)
    return link
