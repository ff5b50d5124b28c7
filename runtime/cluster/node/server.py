"""A cluster node: serves clients' OpenCL commands on this machine's real devices.

This module is the node's serving side: its sockets, the poll loop, registration and
heartbeats, and decoding each command before runtime.cluster.node.executor carries it out.
Why asynchronous in one thread: commands are enqueued on an in-order profiling queue per
device as soon as they arrive and the reply is sent when the command's OpenCL event
completes (runtime.cluster.node.completions), so the socket keeps serving (heartbeats,
other clients) while kernels run. Write data arrives as a zero-copy zmq frame whose
buffer goes straight to ``clEnqueueWriteBuffer``; read data leaves as a numpy array sent
without copying.

Direct path: besides its connection to the broker, a node binds its own ROUTER socket
(runtime.cluster.node.direct) and announces it when it registers. Clients send commands
for this node's devices straight there: one round trip client <-> node instead of two
through the broker. The broker still learns load and measured launch times from the
heartbeats. With CURVE that socket is a CURVE server with a fresh key pair per process
(its public key reaches clients through the authenticated broker) and accepts only the
cluster's member keys. Clients on the node's own host use a plain Unix socket in the
node's private directory instead (runtime.cluster.unixlink: no zmq I/O threads, ~4x faster
round trip here), and, beside it, a second one served by a C thread that runs launches
the client repeats (fast-launch slots, runtime.cluster.node.slots and .nodelink) without
entering Python.

Why the node watches its broker connection's handshake: a node started with keys the
broker does not accept would otherwise heartbeat into the void, serve nothing and look
healthy to whoever started it. A refused CURVE handshake stops it with one line naming the
cause (``fatal``), and ``clproj node`` exits non-zero.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import zmq

from clproj import settings
from clproj.background_thread import background_thread
from clproj.runtime.cluster import protocol, unixlink
from clproj.runtime.cluster.keys import Keys, make_client
from clproj.runtime.cluster.node import nodelink
from clproj.runtime.cluster.node.completions import Completions, Dev, reply, settle_seconds
from clproj.runtime.cluster.node.direct import direct_bind, member_authenticator, private_dir
from clproj.runtime.cluster.node.executor import Command, Executor
from clproj.runtime.cluster.node.profile import describe
from clproj.runtime.cluster.node.slots import Slot, Slots
from clproj.runtime.cluster.node.store import ObjectStore

log = logging.getLogger("clproj.node")

HEARTBEAT_S = 0.5

# monitor events of the broker connection that mean the broker will never hear this node
_HANDSHAKE_FAILED = {
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: (
        "the broker refused this node's CURVE key (it is not in the broker's authorized keys)"
    ),
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: (
        "the CURVE handshake with the broker failed: this node's broker key is not the "
        "broker's, or one side has CURVE off"
    ),
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: (
        "the handshake with the broker failed: one side has CURVE on and the other off"
    ),
}
CURVE_FIX = (
    "use the cluster's keys: copy the key folder the broker was given (`clproj keys "
    "--dir DIR`: broker.key, member.key, member.key_secret) and pass it as --keys DIR, "
    "with the same --curve on both sides"
)


class Node:
    """Connects to the broker, registers devices, serves commands; bounded by ``until``."""

    def __init__(
        self,
        broker: str,
        keys: Keys | None = None,
        name: str | None = None,
        ctx: zmq.Context | None = None,
        profiles_dir: Path | None = None,
        device_filter: str | None = None,
        direct: str | None = "auto",
    ) -> None:
        import pyopencl as cl

        from clproj.devices.discovery import opencl_devices

        self.cl = cl
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.ctx = ctx or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        protocol.secure_socket_options(self.sock)
        self.sock.setsockopt(zmq.ROUTING_ID, self.name.encode()[:200])
        self.sock.setsockopt(zmq.SNDHWM, 10000)
        self.sock.setsockopt(zmq.RCVHWM, 10000)
        self.sock.setsockopt(zmq.RECONNECT_IVL, 100)
        self.sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        if keys:
            make_client(self.sock, keys)
        # the handshake's outcome (see the module docstring); the monitor must exist before
        # connect, or the first handshake's events are lost
        self._monitor = self.sock.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_SUCCEEDED | sum(_HANDSHAKE_FAILED),
            addr=f"inproc://clproj-node-monitor-{os.getpid()}-{id(self):x}",
        )
        self.fatal = ""  # why the node stopped on its own ("" while it serves)
        self.sock.connect(broker)
        self._wedge_after = int(settings.get("CLPROJ_NODE_WEDGE_AFTER"))
        self.direct, self.direct_key = "", ""
        self.dsock: Any = None
        self._dctx: Any = None
        self._dauth: Any = None
        self._dtmp: Any = None
        self.local = ""  # Unix socket path for clients on this host
        self._listener: Any = None
        self.links: dict[int, unixlink.Link] = {}
        self._native: nodelink.NativeLink | None = None
        self._native_rejects = 0
        self._deferred: set[unixlink.Link] = set()  # links holding back a command (`after`)
        self._cur_rid = 0
        self._settle_s = settle_seconds()
        if direct and direct != "off":
            self._open_direct(broker, direct, keys)
        devs = opencl_devices()
        if device_filter:
            devs = [d for d in devs if device_filter.lower() in d.name.lower()]
        self.devs: list[Dev] = []
        self.descr: list[dict[str, Any]] = []
        for i, d in enumerate(devs):
            c = cl.Context([d])
            q = cl.CommandQueue(c, properties=cl.command_queue_properties.PROFILING_ENABLE)
            self.devs.append(Dev(i, d, c, q))
            self.descr.append(describe(d, profiles_dir))
        self.rejects = 0
        self.served = 0
        self._stop = threading.Event()
        self._done = Completions(cl, self.devs, self.sock, self._settle_s)
        self.store = ObjectStore(cl)
        self._slots = Slots(cl, self._native, self.store, self._done.learn_time)
        self._executor = Executor(cl, self.store, self._slots, self._done)

    @property
    def native(self) -> nodelink.NativeLink | None:
        """The fast-launch link (None: not built, switched off, or no same-host socket).
        Read-only: tests observe its counters (``served``, ``rejects``)."""
        return self._native

    @property
    def slots(self) -> Mapping[int, Slot]:
        """The fast-launch slots granted now (read-only: tests watch them go with their
        client)."""
        return self._slots.granted

    def _open_direct(self, broker: str, direct: str, keys: Keys | None) -> None:
        """Bind the direct command socket (see the module docstring)."""
        bind, host = direct_bind(broker, direct)
        if not bind:
            self._dtmp = private_dir()
            bind = f"ipc://{self._dtmp.name}/direct"
        # own context: its ZAP handler must not clash with a broker in the same process
        self._dctx = zmq.Context() if keys else self.ctx
        s = self._dctx.socket(zmq.ROUTER)
        protocol.secure_socket_options(s)
        s.setsockopt(zmq.ROUTER_HANDOVER, 1)
        s.setsockopt(zmq.SNDHWM, 10000)
        s.setsockopt(zmq.RCVHWM, 10000)
        if keys:
            self._dauth = member_authenticator(self._dctx, keys)
            pub, sec = zmq.curve_keypair()
            s.setsockopt(zmq.CURVE_SERVER, 1)
            s.setsockopt(zmq.CURVE_SECRETKEY, sec)
            s.setsockopt(zmq.CURVE_PUBLICKEY, pub)
            s.setsockopt(zmq.ZAP_DOMAIN, b"clproj")
            self.direct_key = pub.decode()
        s.bind(bind)
        ep = s.getsockopt_string(zmq.LAST_ENDPOINT)
        if ep.startswith("tcp://0.0.0.0:"):
            ep = f"tcp://{host}:{ep.rsplit(':', 1)[1]}"
        self.dsock, self.direct = s, ep
        if self._dtmp is None:
            self._dtmp = private_dir()
        try:
            self.local = f"{self._dtmp.name}/local"
            self._listener = unixlink.listen(self.local)
        except OSError as exc:  # no Unix sockets here: same-host clients use the zmq socket
            log.info("no same-host socket: %s", exc)
            self.local = ""
        if self.local and nodelink.available():
            try:
                self._native = nodelink.NativeLink(self.local + nodelink.SUFFIX, self._settle_s)
            except OSError as exc:  # launches stay on the command link
                log.info("no fast-launch link: %s", exc)

    def stop(self) -> None:
        self._stop.set()

    # ---- protocol --------------------------------------------------------------------
    def _to_broker(self, msg: bytes) -> None:
        """Send a control message to the broker without ever blocking: with no connection
        up (the broker is down, or refused the handshake) a DEALER's send would wait for
        one, and the loop must go on (to notice a refused handshake, to stop). A message
        dropped so is sent again: heartbeats come every HEARTBEAT_S, and the broker asks an
        unknown node to register again (``reregister``)."""
        with contextlib.suppress(zmq.Again):
            self.sock.send(msg, zmq.NOBLOCK)

    def register(self) -> None:
        self._to_broker(
            protocol.pack(
                "register",
                node=self.name,
                host=socket.gethostname(),
                devices=self.descr,
                pid=os.getpid(),
                direct=self.direct,
                direct_key=self.direct_key,
                local=self.local,
            )
        )

    def _heartbeat(self) -> None:
        load = {str(d.index): d.pending for d in self.devs}
        if self._native is not None:
            for d in self.devs:
                load[str(d.index)] += self._native.inflight(d.index)
            self._slots.fold_times()
        self._to_broker(
            protocol.pack(
                "heartbeat",
                node=self.name,
                load=load,
                inflight=self._done.npending,
                measured=self._done.take_measured(),
                lt=self._done.lt,
            )
        )

    def run(self, until: float | None = None) -> None:  # noqa: C901
        from clproj.runtime.cluster.client.shm import sweep_orphan_shm

        sweep_orphan_shm()  # files of same-host clients that died by a signal
        done = self._done
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(done.wake_fd, zmq.POLLIN)
        if self.dsock is not None:
            poller.register(self.dsock, zmq.POLLIN)
        if self._listener is not None:
            poller.register(self._listener.fileno(), zmq.POLLIN)
        if self._native is not None:
            poller.register(self._native.fd, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        done.start()
        self.register()
        next_hb = time.monotonic() + HEARTBEAT_S
        try:
            while not self._stop.is_set() and (until is None or time.time() < until):
                timeout = 2 if done.npending else 100
                events = dict(poller.poll(timeout))
                if self._monitor in events and self._watch_handshake():
                    break
                if done.wake_fd in events:
                    done.drain_wake()
                for sock in (self.sock, self.dsock):
                    if sock is not None and sock in events:
                        self._drain(sock)
                if self._listener is not None and self._listener.fileno() in events:
                    self._accept(poller)
                if self._native is not None and self._native.fd in events:
                    self._native_notes(poller)
                for fd, ev in events.items():
                    link = self.links.get(fd) if isinstance(fd, int) else None
                    if link is not None and ev & zmq.POLLIN:
                        self._drain_link(link, poller)
                done.settle()
                if done.npending:
                    done.complete()
                self._flush_links(poller)
                now = time.monotonic()
                if now >= next_hb:
                    self._heartbeat()
                    next_hb = now + HEARTBEAT_S
        finally:
            done.stop()
            if self._native is not None:
                self._native.close()
            self._slots.clear()
            self.sock.disable_monitor()
            self._monitor.close(0)
            self.sock.close(0)
            for link in self.links.values():
                link.close()
            if self._listener is not None:
                self._listener.close()
            if self.dsock is not None:
                self.dsock.close(0)
            if self._dauth is not None:
                self._dauth.stop()
            if self._dctx is not None and self._dctx is not self.ctx:
                self._dctx.destroy(linger=0)
            if self._dtmp is not None:
                self._dtmp.cleanup()
            done.close()

    def _watch_handshake(self) -> bool:
        """Read the broker connection's monitor events; True (``fatal`` set) when the
        broker refused the handshake: it will never hear this node, however long it runs."""
        from zmq.utils.monitor import recv_monitor_message

        while self._monitor.poll(0):
            ev = recv_monitor_message(self._monitor)["event"]
            why = _HANDSHAKE_FAILED.get(ev)
            if why is not None:
                self.fatal = why  # clproj node reports it and exits non-zero
                return True
        return False

    # ---- same-host links -------------------------------------------------------------
    def _accept(self, poller: zmq.Poller) -> None:
        for _ in range(64):
            try:
                conn, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.info("accept failed: %s", exc)
                return
            link = unixlink.Link(conn, drop_first=True)
            self.links[link.fd] = link
            poller.register(link.fd, zmq.POLLIN)

    def _drop_link(self, link: unixlink.Link, poller: zmq.Poller) -> None:
        if link.peer:  # the client forgets its slots when a link closes: so does the node
            self._slots.drop_client(link.peer)
        self._deferred.discard(link)
        self.links.pop(link.fd, None)
        with contextlib.suppress(KeyError, zmq.ZMQError):
            poller.unregister(link.fd)
        link.close()

    def _drain_link(self, link: unixlink.Link, poller: zmq.Poller) -> None:  # noqa: C901
        """Messages from a same-host client: the first one is its routing id.

        With the fast link (runtime.cluster.node.nodelink), every handled command is
        reported to it (a fast frame may wait for it), and a command that must follow a
        fast frame not yet taken (``after``) holds back itself and the rest of its link
        until it is."""
        try:
            msgs = link.receive()
        except unixlink.LinkError as exc:
            if exc.framing:
                self._reject(f"same-host link: {exc}")
            self._drop_link(link, poller)
            return
        held = getattr(link, "held", None)
        if held:
            msgs = held + msgs
            link.held = []
            self._deferred.discard(link)
        native = self._native
        gate = None
        if native is not None:

            def gate(after: int) -> bool:
                if native.fast_done(link.peer) >= after:
                    return True
                native.want(link.peer, after)
                return False

        for i, frames in enumerate(msgs):
            if not link.peer:
                pid = frames[0].bytes
                if len(frames) != 1 or not 0 < len(pid) <= 255:
                    self._reject("same-host link: no routing id first")
                    self._drop_link(link, poller)
                    return
                link.peer = pid
                continue
            self._cur_rid = 0
            try:
                if self._handle([unixlink.Frame(link.peer), *frames], link, gate) is _HELD:
                    link.held = msgs[i:]
                    self._deferred.add(link)
                    return
            except Exception as exc:  # never let one message stop the node
                self._reject(f"internal error {type(exc).__name__}: {exc}")
                if self.rejects <= 5:
                    log.exception("node failed on a message")
            if native is not None:
                native.handled(link.peer, self._cur_rid or protocol.lenient_id(frames))

    def _retry_held(self, poller: zmq.Poller) -> None:
        for link in list(self._deferred):
            if not link.closed:
                self._drain_link(link, poller)

    def _native_notes(self, poller: zmq.Poller) -> None:
        """The fast link's news: clients whose fast connection closed (their slots go),
        fast frames taken that held-back commands wait for, malformed frames."""
        native = self._native
        assert native is not None
        for peer in native.closed_clients():
            self._slots.drop_client(peer)
        self._retry_held(poller)
        if native.rejects > self._native_rejects:
            self._native_rejects = native.rejects
            self._reject(f"fast-launch link: {native.rejects} malformed messages so far")

    def _flush_links(self, poller: zmq.Poller) -> None:
        """Write queued replies; watch for writability only while some are queued."""
        for link in list(self.links.values()):
            if link.closed:
                self._drop_link(link, poller)
                continue
            if link.pending_out:
                done = link.flush()
                poller.modify(link.fd, zmq.POLLIN if done else zmq.POLLIN | zmq.POLLOUT)

    # ---- commands --------------------------------------------------------------------
    def _drain(self, sock: Any) -> None:
        """Handle what arrived on one socket (bounded burst, then the loop goes on)."""
        for _ in range(1000):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                self._handle(frames, sock)
            except Exception as exc:  # never let one message stop the node
                self._reject(f"internal error {type(exc).__name__}: {exc}")
                if self.rejects <= 5:
                    log.exception("node failed on a message")

    def _reject(self, why: str) -> None:
        self.rejects += 1
        if self.rejects <= 20 or self.rejects % 1000 == 0:
            log.warning("node %s rejected command #%d: %s", self.name, self.rejects, why)

    def _handle(  # noqa: C901
        self, frames: list[Any], sock: Any = None, gate: Callable[[int], bool] | None = None
    ) -> Any:
        """Decode, check and carry out one command. ``gate(after)`` (same-host links with
        a fast link): False holds the command back (returns _HELD, nothing done)."""
        sock = sock or self.sock
        if 0 <= self._wedge_after <= self.served:  # CLPROJ_NODE_WEDGE_AFTER (tests)
            return None
        if len(frames) == 1 and sock is self.sock:  # broker control message
            try:
                h, _ = protocol.decode(frames)
            except protocol.ProtocolError as exc:
                self._reject(str(exc))
                return None
            if h["t"] == "reregister":
                self.register()
            elif h["t"] == "probe":  # answered after everything that arrived before it
                self._to_broker(protocol.pack("probe_ok", id=h["id"], node=self.name))
            return None
        if len(frames) < 2:
            self._reject("short message")
            return None
        client = frames[0].bytes
        try:
            h, data = protocol.decode(frames[1:])
            if h["t"] != "cmd":
                raise protocol.ProtocolError(f"node takes cmd, not {h['t']}")
        except protocol.ProtocolError as exc:
            self._reject(str(exc))
            rid = protocol.lenient_id(frames[1:])
            if rid:  # answered at once: the client would wait for its reply otherwise
                reply(sock, client, rid, ok=False, err=f"rejected: {exc}")
            return None
        after = h.get("after")
        if after and gate is not None and not gate(after):
            return _HELD
        rid = h["id"]
        self._cur_rid = rid
        key = h["a"].get("key") if h["op"] == "launch" else None
        try:
            dev = self._device(h["dev"])
            cmd = Command(client, rid, dev, h["op"], h["a"], data, sock)
            cmd.key = key if isinstance(key, str) else None
            self._executor.execute(cmd)
            self.served += 1
        except (protocol.ProtocolError, KeyError, ValueError) as exc:
            self._reject(str(exc))
            reply(sock, client, rid, ok=False, err=f"rejected: {exc}")
        except self.cl.Error as exc:
            reply(sock, client, rid, ok=False, err=f"OpenCL error: {exc}")
        return None

    def _device(self, did: str) -> Dev:
        node, _, idx = did.rpartition("/")
        if node != self.name or not idx.isdigit() or int(idx) >= len(self.devs):
            raise protocol.ProtocolError(f"device {did!r} is not on node {self.name}")
        return self.devs[int(idx)]


_HELD = object()  # _handle: the command waits for a fast frame (see _drain_link)


def serve_in_thread(node: Node, until: float | None = None) -> threading.Thread:
    """Run ``node`` on a daemon thread (in-process clusters, tests)."""
    th = background_thread(node.run, "clproj-node", kwargs={"until": until})
    th.start()
    return th
