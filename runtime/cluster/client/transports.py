"""Transports: the socket a command for a device takes, and receiving from all of them.

Why a module of its own: the client talks to the cluster over up to three kinds of
connection and the rest of it should not care which. The broker socket (a zmq DEALER)
always exists: placement, liveness, ``node_lost`` and every command when nothing faster
is there. A node that announces a direct endpoint (``welcome``: ``direct``,
``direct_key``) gets this client's commands for its devices on a DEALER socket connected
straight to it (same routing id as the broker socket, so the node sees one client): a
launch+wait is one round trip client <-> node, not two through the broker. A node on this
client's own host is reached through its Unix socket (``local``, runtime.cluster.unixlink)
rather than zmq: same framing and validation, no zmq I/O threads in the round trip. Every
command for a device takes the same path, so per-device order is kept; a node that dies
is noticed through the broker (a direct socket just stays silent).
``CLPROJ_DIRECT=0`` sends everything through the broker; ``CLPROJ_DIRECT=zmq`` keeps the
direct path but on zmq only.

Corking: between cork() and uncork() (route mode: one API call) commands to same-host
links are queued and written at once, so a launch that also creates its buffer is one
write, not two.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import zmq

from clproj.errors import ClprojError
from clproj.runtime.cluster import protocol, unixlink
from clproj.runtime.cluster.keys import Keys, load, make_client, needs_curve
from clproj.runtime.cluster.node import nodelink

if TYPE_CHECKING:
    from clproj.runtime.cluster.client.discovery import Directory

log = logging.getLogger("clproj.client")

Dispatch = Callable[[dict[str, Any], list[Any]], None]

# Messages a DEALER queues for a peer before a send waits (its high-water mark).
SEND_QUEUE = 10000


def _dealer(ctx: zmq.Context, routing_id: bytes, send_timeout_s: float) -> zmq.Socket:
    """A DEALER socket with the client's options (routing id, high-water marks, retry,
    send timeout).

    Why a send timeout: a DEALER blocks in send while it has no peer to queue for (a
    broker or node that refused this client's CURVE key drops the connection, and under
    load zmq may not have connected again yet) or its queue is full (a peer that stopped
    reading); without one, the app under route mode would hang in an OpenCL call."""
    s = ctx.socket(zmq.DEALER)
    protocol.secure_socket_options(s)
    s.setsockopt(zmq.ROUTING_ID, routing_id)
    s.setsockopt(zmq.SNDTIMEO, max(1, round(send_timeout_s * 1000)))
    s.setsockopt(zmq.SNDHWM, SEND_QUEUE)
    s.setsockopt(zmq.RCVHWM, 10000)
    s.setsockopt(zmq.RECONNECT_IVL, 100)
    s.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
    return s


class Transports:
    """The broker socket (``sock``), direct zmq sockets per node endpoint and same-host
    Unix links per node socket path, all under one poller.

    ``send_timeout_s``: how long a send may wait for a zmq peer to take the message
    before it fails with the cause (:func:`_dealer`).
    ``on_link_closed`` runs when a same-host link closes (fast-launch slots live on the
    node's side of a link and must be forgotten)."""

    def __init__(
        self,
        directory: Directory,
        broker: str,
        curve: str,
        keys: Keys | None,
        keys_dir: str | None,
        ctx: zmq.Context | None,
        direct_mode: str,
        on_link_closed: Callable[[], None],
        send_timeout_s: float = 60.0,
    ) -> None:
        self.directory = directory
        self.ctx = ctx or zmq.Context.instance()
        self.routing_id = b"c" + os.urandom(15)
        self.send_timeout_s = send_timeout_s
        self.broker = broker
        self.sock = _dealer(self.ctx, self.routing_id, send_timeout_s)
        self.curve_keys = keys or load(keys_dir, "member") if needs_curve(broker, curve) else None
        if self.curve_keys is not None:
            make_client(self.sock, self.curve_keys)
        self.sock.connect(broker)
        self.direct_mode = direct_mode
        self.direct = direct_mode != "0"
        self.on_link_closed = on_link_closed
        self.dsocks: dict[str, zmq.Socket] = {}  # direct endpoint -> socket
        self.links: dict[str, unixlink.Link] = {}  # node's Unix socket path -> link
        self.link_fds: dict[int, unixlink.Link] = {}
        self.no_link: set[str] = set()  # Unix sockets we could not connect to
        self.poller = zmq.Poller()
        self.poller.register(self.sock, zmq.POLLIN)
        self.corked = False
        self.dirty: set[unixlink.Link] = set()

    # ---- choosing ----------------------------------------------------------------
    def sock_for(self, dev: str) -> Any:
        """Where commands for ``dev`` go: its node's Unix socket on this host, else its
        direct zmq socket, else the broker."""
        d = self.directory.devices.get(dev)
        if not self.direct or d is None or not d.direct:
            return self.sock
        if d.local and d.host == self.directory.host and self.direct_mode != "zmq":
            link = self._link(d.local)
            if link is not None:
                return link
        s = self.dsocks.get(d.direct)
        if s is None:
            s = _dealer(self.ctx, self.routing_id, self.send_timeout_s)
            if d.direct_key:
                k = self.curve_keys
                if k is None:
                    raise ClprojError(
                        f"node of {dev} wants CURVE on its direct socket",
                        "connect to the broker with CURVE on (--curve on)",
                    )
                s.setsockopt(zmq.CURVE_SERVERKEY, d.direct_key.encode())
                s.setsockopt(zmq.CURVE_PUBLICKEY, k.own_public)
                s.setsockopt(zmq.CURVE_SECRETKEY, k.own_secret)
            s.connect(d.direct)
            self.dsocks[d.direct] = s
            self.poller.register(s, zmq.POLLIN)
        return s

    def fast_link_for(self, dev: str) -> unixlink.Link | None:
        """The node's fast-launch link (its command socket path + ``.fast``), connected on
        first use; None when the node offers none (runtime.cluster.node.nodelink)."""
        d = self.directory.devices.get(dev)
        if d is None or not d.local:
            return None
        return self._link(d.local + nodelink.SUFFIX, quiet=True)

    def _link(self, path: str, quiet: bool = False) -> unixlink.Link | None:
        """The link to the Unix socket ``path``, connected on first use; None when it
        cannot be (another user's node, gone, or an older node without a fast socket)."""
        link = self.links.get(path)
        if link is None and path not in self.no_link:
            try:
                link = unixlink.connect(path, self.routing_id)
            except OSError as exc:
                if not quiet:
                    log.info("no same-host link to %s: %s", path, exc)
                self.no_link.add(path)
                return None
            self.links[path] = link
            self.link_fds[link.fd] = link
            self.poller.register(link.fd, zmq.POLLIN)
        return link

    # ---- sending -----------------------------------------------------------------
    def send(self, sock: Any, header: Any, data: Any = None) -> None:
        """Send a command (header, optional data frame) on ``sock``; queued while corked
        when ``sock`` is a same-host link. A zmq peer that takes nothing within
        ``send_timeout_s`` fails the send with its cause (ClprojError)."""
        if self.corked and isinstance(sock, unixlink.Link):
            sock.send_multipart([header] if data is None else [header, data], False, False)
            self.dirty.add(sock)
            return
        try:
            if data is None:
                sock.send(header)
            else:
                sock.send_multipart([header, data], copy=False)
        except zmq.Again:
            raise ClprojError(
                f"{self._peer(sock)} took no message for {self.send_timeout_s:g} s (not "
                "connected: not running, or it refused this client's CURVE key; or it stopped "
                "reading)",
                "check that the broker and its nodes run, and --broker and the keys",
            ) from None

    def stop_waiting(self) -> None:
        """From now on a send that a zmq peer does not take at once fails (closing)."""
        self.send_timeout_s = 0.0
        for s in (self.sock, *self.dsocks.values()):
            s.setsockopt(zmq.SNDTIMEO, 0)

    def to_broker(self, header: Any) -> None:
        """Send a message to the broker (:meth:`send` on the broker socket)."""
        self.send(self.sock, header)

    def _peer(self, sock: Any) -> str:
        if sock is self.sock:
            return f"the broker at {self.broker}"
        ep = next((ep for ep, s in self.dsocks.items() if s is sock), "?")
        return f"the node at {ep}"

    def send_fast(self, fast: unixlink.Link, frame: bytes) -> None:
        """Send a fast-launch frame on a node's fast link (queued while corked)."""
        if self.corked:
            fast.send(frame, flush=False)
            self.dirty.add(fast)
        else:
            fast.send(frame)

    def cork(self) -> None:
        """Queue same-host commands until uncork() (a wait in between flushes them)."""
        self.corked = True

    def uncork(self) -> None:
        """Write the commands queued since cork()."""
        self.corked = False
        if self.dirty:
            for link in self.dirty:
                link.flush()  # what the socket does not take now, pump writes later
            self.dirty.clear()

    # ---- receiving ---------------------------------------------------------------
    def pump(self, timeout_ms: int, dispatch: Dispatch) -> bool:  # noqa: C901
        """Receive what has arrived (waiting up to ``timeout_ms`` for the first) and hand
        each well-formed message to ``dispatch`` as it is read; True if anything came."""
        if self.link_fds:
            for link in list(self.link_fds.values()):
                if link.pending_out and not link.flush():
                    timeout_ms = min(timeout_ms, 1)  # the rest goes out as the node reads
        if self.dsocks or self.link_fds:
            ready = [s for s, _ in self.poller.poll(timeout_ms)]
        else:
            ready = [self.sock] if self.sock.poll(timeout_ms) else []
        got = False
        for sock in ready:
            if isinstance(sock, int):
                got = self._receive_link(self.link_fds.get(sock), dispatch) or got
                continue
            for _ in range(10000):
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                got = True
                try:
                    h, data = protocol.decode(frames)
                except protocol.ProtocolError as exc:
                    log.warning("client dropped a malformed message: %s", exc)
                    continue
                if sock is not self.sock and h["t"] not in ("reply", "done"):
                    log.warning("client dropped a %r from a node's direct socket", h["t"])
                    continue
                dispatch(h, data)
        return got

    def _receive_link(self, link: unixlink.Link | None, dispatch: Dispatch) -> bool:
        if link is None:
            return False
        try:
            msgs = link.receive()
        except unixlink.LinkError as exc:  # the node went away: node_lost will follow
            log.info("same-host link to a node closed: %s", exc)
            self.close_link(link)
            return False
        for frames in msgs:
            try:
                h, data = protocol.decode(frames)
            except protocol.ProtocolError as exc:
                log.warning("client dropped a malformed message: %s", exc)
                continue
            if h["t"] in ("reply", "done"):
                dispatch(h, data)
        return bool(msgs)

    # ---- closing -----------------------------------------------------------------
    def close_link(self, link: unixlink.Link) -> None:
        """Close a same-host link (its node went away, or the client closes)."""
        self.on_link_closed()
        self.link_fds.pop(link.fd, None)
        for path in [p for p, lk in self.links.items() if lk is link]:
            del self.links[path]
        with contextlib.suppress(KeyError, zmq.ZMQError):
            self.poller.unregister(link.fd)
        link.close()

    def drop_unused(self, dead: set[str]) -> None:
        """Close direct sockets and links no live device uses any more (their node is gone)."""
        live = [d for d in self.directory.devices.values() if d.id not in dead]
        used = {d.direct for d in live}
        for ep in [ep for ep in self.dsocks if ep not in used]:
            s = self.dsocks.pop(ep)
            self.poller.unregister(s)
            s.close(0)
        used = {d.local for d in live} | {d.local + nodelink.SUFFIX for d in live}
        for path in [p for p in self.links if p not in used]:
            self.close_link(self.links[path])

    def close(self) -> None:
        """Close every connection (links get up to 0.2 s to write what is queued)."""
        for s in self.dsocks.values():
            s.close(linger=200)
        self.dsocks.clear()
        for link in list(self.link_fds.values()):
            deadline = time.monotonic() + 0.2
            while not link.flush() and time.monotonic() < deadline:
                time.sleep(0.001)
            self.close_link(link)
        self.sock.close(linger=200)
