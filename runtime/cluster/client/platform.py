"""Client API of the virtual OpenCL platform: what the shim's route mode calls into.

Why the client keeps state: it is the only party that always survives a node failure, so
it owns the truth about every buffer: where its current content is valid (a set of
device ids and/or a host copy), a *checkpoint* (host copies of all buffers at one
consistent point) and a *log* of every state-changing command since then (writes, fills,
copies, launches). When a node dies the broker says so (``node_lost``); the client then
rebuilds every buffer on a surviving device from the checkpoint, replays the log there
and re-issues the reads that were lost, so in-flight launches are re-executed elsewhere
and the app still sees correct data. Kernels are assumed deterministic given their
inputs (OpenCL kernels with atomics-order-dependent results are the exception; they are
replayed too, with the same caveat as any re-execution).

Direct path: a node that announces a direct endpoint (``welcome``: ``direct``,
``direct_key``) gets this client's commands for its devices on a DEALER socket connected
straight to it (same routing id as the broker socket, so the node sees one client): a
launch+wait is one round trip client <-> node, not two through the broker. Every
command for a device takes the same path, so per-device order is kept. The broker stays
in charge of placement, liveness and ``node_lost``; a node that dies is noticed through
the broker (the direct socket itself just stays silent) and recovered as below.
A node on this client's own host is reached through its Unix socket
(``local``, runtime.cluster.unixlink) rather than zmq: same framing and validation, no zmq I/O
threads in the round trip. ``CLPROJ_DIRECT=0`` sends everything through the broker;
``CLPROJ_DIRECT=zmq`` keeps the direct path but on zmq only.

Placement: a launch without an explicit device asks the broker (``place``) with the bytes
that would have to move to each device; the answer is cached per kernel key and asked
again every 16 launches (in the background), every 0.25 s, or when the broker's epoch
changes (a projection arrived, a node came or went). A launch may name a *family* (route
mode: the same kernel and NDRange with other scalar arguments, e.g. a factorisation's
step index): a key without a fresh decision of its own takes its family's and asks for its
own in the background, so a launch costs one message, not two, even when every launch
brings a new key. Buffers move only when a launch on another
device needs them (read from a device holding them, written to the target); writes of
buffers not yet used by any kernel stay on the host until then.

Event semantics: every enqueue returns a :class:`RemoteEvent`; non-blocking launches,
reads and writes return at once; ``wait()``/``finish()`` pump replies. Non-blocking
writes copy the host data immediately (the copy doubles as the replay log entry), so the
app may reuse its memory at once, which OpenCL allows only after the event completes.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import mmap
import os
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import zmq

from clproj.errors import ClprojError
from runtime.cluster import protocol, unixlink
from runtime.cluster.keys import Keys, load, make_client, needs_curve
from runtime.cluster.node import nodelink

log = logging.getLogger("clproj.client")

MEM_READ_WRITE = 1
MEM_WRITE_ONLY = 2
MEM_READ_ONLY = 4
REASK_LAUNCHES = 16
REASK_S = 0.25
# a background re-ask goes out at most this often per key: each is a message to the broker
# and back (zmq I/O thread, broker, reply: ~20 us per launch on average when a tight
# launch+wait loop re-asked every 16 launches), and placements change only as often as
# projections arrive or nodes come and go
REASK_MIN_S = 0.02
# commands in flight before a send first takes in what has arrived, and the most there may
# be: zmq drops a ROUTER's messages past its high-water mark, so replies must be read
PUMP_INFLIGHT = 1024
MAX_INFLIGHT = 8192
FAST_MAX_SCALAR = 256  # bytes of one scalar in a fast-launch frame (NL_MAX_SCALAR, nodelink.c)


class RemoteError(ClprojError):
    """A command failed on its node (build error, bad argument, OpenCL error)."""


@dataclass(frozen=True)
class RemoteDevice:
    id: str
    node: str
    name: str
    peak_flops: float
    profile: dict[str, Any]
    host: str = ""
    direct: str = ""  # the node's direct command endpoint ("" = through the broker)
    direct_key: str = ""  # its CURVE server key (Z85), "" without CURVE
    local: str = ""  # the node's Unix socket (used when the node is on this host)


_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # one kernel call instead of a fault per page


class _ShmMap(mmap.mmap):
    """Bulk data in a 0600 /dev/shm file: the same-host data path (node on this machine).

    The client's one copy of the host data (also the replay-log entry) is made into such
    a file; commands then name the file instead of carrying the bytes through two socket
    hops. The file is unlinked when the last reference (log, checkpoint, host copy) goes."""

    path = ""

    @classmethod
    def copy_of(cls, data: Any) -> memoryview:
        src = memoryview(data).cast("B")
        mv = cls.empty(len(src))
        mv[:] = src
        return mv

    @classmethod
    def empty(cls, size: int) -> memoryview:
        """A mapped file of ``size`` bytes (content undefined), pooled where possible."""
        pooled = _SHM_POOL.get(size)
        path = pooled.pop() if pooled else ""
        if path:  # a released file of this size: its pages exist, no allocation/zeroing
            _SHM_POOL_BYTES[0] -= size
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        else:
            path = f"/dev/shm/{SHM_PREFIX}{os.getpid()}-{os.urandom(8).hex()}"
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.ftruncate(fd, size)
            m = cls(fd, size, flags=mmap.MAP_SHARED | _POPULATE)
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        m.path = path
        return memoryview(m)

    def __del__(self) -> None:
        if not self.path:
            return
        n = len(self)
        if _SHM_POOL_BYTES[0] + n <= SHM_POOL_LIMIT:  # keep the file for the next copy
            _SHM_POOL.setdefault(n, []).append(self.path)
            _SHM_POOL_BYTES[0] += n
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)


SHM_PREFIX = "clproj-c"  # /dev/shm/clproj-c<pid>-<random>: the creating client's pid


def sweep_orphan_shm(folder: str = "/dev/shm") -> int:
    """Unlink the /dev/shm files of clients that are gone; returns how many.

    A client killed by a signal never runs its exit cleanup, and its files hold memory
    until reboot (40 crashed route-mode runs once left 21 GB). The pid in the name says
    whose a file is; a file whose pid is alive (or not ours to signal) is left alone.
    """
    removed = 0
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    for name in names:
        if not name.startswith(SHM_PREFIX):
            continue
        pid_text = name[len(SHM_PREFIX) :].split("-", 1)[0]
        if not pid_text.isdigit():
            continue
        try:
            os.kill(int(pid_text), 0)
            continue  # alive
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError):
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(folder, name))
            removed += 1
    return removed


# released /dev/shm files by size, reused by the next copy (unlinked at exit)
SHM_POOL_LIMIT = 512 * 2**20
_SHM_POOL: dict[int, list[str]] = {}
_SHM_POOL_BYTES = [0]


@atexit.register
def _shm_pool_cleanup() -> None:
    for paths in _SHM_POOL.values():
        for path in paths:
            with contextlib.suppress(OSError):
                os.unlink(path)
    _SHM_POOL.clear()


class _Frame:
    """What a reply's data frame offers (``.buffer``) for data that came through shm."""

    def __init__(self, buffer: memoryview) -> None:
        self.buffer = buffer


@dataclass(frozen=True)
class LocalMemory:
    """A ``__local`` kernel argument of ``size`` bytes (clSetKernelArg with NULL value)."""

    size: int


@dataclass(eq=False)
class RemoteBuffer:
    h: int
    size: int
    flags: int
    valid: set[str] = field(default_factory=set)
    allocated: set[str] = field(default_factory=set)
    host: Any = None  # bytes / memoryview with the current content, when host_valid
    host_valid: bool = False
    released: bool = False

    @property
    def read_only(self) -> bool:
        return bool(self.flags & MEM_READ_ONLY)


@dataclass(frozen=True)
class SubRegion:
    """A sub-buffer kernel argument: ``size`` bytes of ``buf`` from ``offset``
    (clCreateSubBuffer). It shares the buffer's content, so it moves with the buffer."""

    buf: RemoteBuffer
    offset: int
    size: int


@dataclass(eq=False)
class RemoteProgram:
    """A program: from source (``kind`` "build"), compiled only ("compile": source plus
    embedded ``headers``, clCompileProgram) or linked from compiled ``parts`` ("link").
    ``info``: the real program's introspection from the first build (runtime.cluster.introspect:
    ``kernels``, ``log``)."""

    h: int
    source: str
    options: str
    hash: str
    built_on: set[str] = field(default_factory=set)
    kind: str = "build"
    headers: list[tuple[str, str]] = field(default_factory=list)
    parts: list[RemoteProgram] = field(default_factory=list)
    info: dict[str, Any] | None = None


@dataclass(eq=False)
class RemoteKernel:
    program: RemoteProgram
    name: str
    args: dict[int, Any] = field(default_factory=dict)

    def set_arg(self, index: int, value: Any) -> None:
        """RemoteBuffer, SubRegion, LocalMemory, None, bytes, or a numpy scalar/array
        (raw bytes)."""
        if isinstance(value, (RemoteBuffer, SubRegion, LocalMemory)) or value is None:
            self.args[index] = value
        elif isinstance(value, (bytes, bytearray, memoryview)):
            self.args[index] = bytes(value)
        elif hasattr(value, "tobytes"):
            self.args[index] = value.tobytes()
        else:
            raise TypeError(f"unsupported kernel argument type {type(value).__name__}")

    def set_args(self, *values: Any) -> None:
        for i, v in enumerate(values):
            self.set_arg(i, v)


@dataclass(eq=False)
class Request:
    dev: str | None
    op: str
    on_done: Any = None  # callable(data frame or None)
    done: bool = False
    err: str | None = None
    reissue: Any = None  # callable(target device) for a lost read
    res: Any = None  # the reply's ``res`` (launch: ``t`` = profiled kernel seconds)
    keep: Any = None  # data that must stay alive until the reply

    def then(self, fn: Callable[[], None]) -> Request:
        """Run ``fn`` once this request's data has been delivered (before it counts as done),
        also when the client re-issues it to another device after a node failure: callers
        chain work onto a request without knowing how completion or recovery is wired."""
        inner = self.on_done

        def done(frame: Any) -> None:
            if inner is not None:
                inner(frame)
            fn()

        self.on_done = done
        reissue = self.reissue
        if reissue is not None:

            def again(dev: str) -> Request:
                return reissue(dev).then(fn)

            self.reissue = again
        return self


class RemoteEvent:
    """A cl_event of the virtual platform: completes when all its requests replied."""

    def __init__(self, platform: RemotePlatform, reqs: Sequence[Request]) -> None:
        self._p = platform
        self.reqs = list(reqs)

    @property
    def complete(self) -> bool:
        if all(r.done for r in self.reqs):  # known without asking the sockets
            return True
        self._p.pump(0)
        return all(r.done for r in self.reqs)

    def wait(self) -> None:
        self._p.wait(self.reqs)


def _launch_fields(entry: tuple[Any, ...]) -> dict[str, Any]:
    """The ``launch`` command of a replay-log launch entry (first run and replay alike)."""
    _, prog, name, args, gsize, lsize, goff, key = entry
    a: dict[str, Any] = {"prog": prog.h, "kernel": name, "args": args, "gsize": gsize, "key": key}
    if lsize:
        a["lsize"] = lsize
    if goff:
        a["goff"] = goff
    return a


@dataclass
class _KeyState:
    count: int = 0
    dev: str | None = None
    epoch: int = -1
    asked_at: float = 0.0
    since_ask: int = 0
    reason: str = ""
    asking: int = 0  # id of a background re-ask in flight (0: none)
    sent_at: float = 0.0  # when the last background re-ask went out


class RemotePlatform:
    """The virtual platform: devices of every live node behind one broker.

    ``broker``: endpoint (tcp://host:port, ipc://path, inproc://name). ``curve``:
    "auto" (on for tcp), "on", "off". ``keys``: loaded member keys (else loaded from
    ``keys_dir``/$CLPROJ_KEYS when CURVE is on). ``log_limit_bytes``/``log_limit_ops``:
    when the replay log grows past either, the client takes a checkpoint (reads every
    buffer back), bounding both memory and recovery time.
    """

    def __init__(
        self,
        broker: str,
        curve: str = "auto",
        keys: Keys | None = None,
        keys_dir: str | None = None,
        ctx: zmq.Context | None = None,
        timeout_s: float = 60.0,
        log_limit_bytes: int = 256 * 2**20,
        log_limit_ops: int = 4096,
        wait_devices_s: float = 10.0,
    ) -> None:
        self.ctx = ctx or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        protocol.secure_socket_options(self.sock)
        self.sock.setsockopt(zmq.ROUTING_ID, b"c" + os.urandom(15))
        self.sock.setsockopt(zmq.SNDHWM, 10000)
        self.sock.setsockopt(zmq.RCVHWM, 10000)
        self.sock.setsockopt(zmq.RECONNECT_IVL, 100)
        self.sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        self._curve_keys = keys or load(keys_dir, "member") if needs_curve(broker, curve) else None
        if self._curve_keys is not None:
            make_client(self.sock, self._curve_keys)
        self.sock.connect(broker)
        self.direct_mode = os.environ.get("CLPROJ_DIRECT", "1")
        self.direct = self.direct_mode != "0"
        self._dsocks: dict[str, zmq.Socket] = {}  # direct endpoint -> socket
        self._links: dict[str, unixlink.Link] = {}  # node's Unix socket path -> link
        self._link_fds: dict[int, unixlink.Link] = {}
        self._no_link: set[str] = set()  # Unix sockets we could not connect to
        self._poller = zmq.Poller()
        self._poller.register(self.sock, zmq.POLLIN)
        self.timeout_s = timeout_s
        # same-host data path (see _ShmMap); CLPROJ_SHM=0 sends every byte through sockets
        self.host = socket.gethostname()
        self.shm = os.environ.get("CLPROJ_SHM", "1") != "0" and os.path.isdir("/dev/shm")
        self.shm_min = int(os.environ.get("CLPROJ_SHM_MIN", 1 << 20))
        self.log_limit_bytes = log_limit_bytes
        self.log_limit_ops = log_limit_ops
        self._rid = 0
        self._handle = 0
        self.pending: dict[int, Request] = {}
        self._broker_replies: dict[int, dict[str, Any]] = {}
        # background place request id -> (kernel key, its family or None)
        self._reasks: dict[int, tuple[str, str | None]] = {}
        self._families: dict[str, _KeyState] = {}  # family -> its latest decision
        self._welcome: dict[str, Any] | None = None
        self.epoch = 0
        self.devices: dict[str, RemoteDevice] = {}
        self.dead: set[str] = set()
        self.buffers: dict[int, RemoteBuffer] = {}
        self._keys: dict[str, _KeyState] = {}
        self.default_device: str | None = None
        self._ckpt: dict[int, Any] = {}
        self._log: list[tuple[Any, ...]] = []
        self._log_bytes = 0
        self._log_refs: set[int] = set()
        self._recovering = False
        self._async_errors: list[Request] = []
        self._lost_queue: set[str] = set()
        self.recoveries = 0
        self.placements: list[tuple[str, str, str]] = []  # (key, device, reason), recent
        # fast-launch slots (runtime.cluster.node.nodelink): a launch seen twice on a same-host node is
        # then sent as a 24-byte frame the node's C thread runs alone. CLPROJ_FAST_LAUNCH=0
        # keeps every launch a full command (benchmarks compare both).
        self.fast_launch = os.environ.get("CLPROJ_FAST_LAUNCH", "1") != "0"
        # device -> launch shape -> (slot, the placement key it was made with)
        self._slots: dict[str, dict[tuple[Any, ...], tuple[int, str]]] = {}
        self._slot_seen: dict[str, dict[tuple[Any, ...], int]] = {}  # device -> launch -> 0/1
        self._slot_epoch: dict[str, int] = {}  # bumped whenever a device's slots are dropped
        # corked: commands to same-host links are queued, written at uncork() (route mode:
        # once per API call, so a launch that also creates its buffer is one write, not two)
        self._corked = False
        self._dirty: set[unixlink.Link] = set()
        self.refresh_devices(wait_s=wait_devices_s)

    # ---- messaging -------------------------------------------------------------------
    def _next_id(self) -> int:
        self._rid += 1
        return self._rid

    def pump(self, timeout_ms: int) -> bool:
        """Receive and dispatch what has arrived (waiting up to ``timeout_ms`` for the first)."""
        if self._link_fds:
            for link in list(self._link_fds.values()):
                if link.pending_out and not link.flush():
                    timeout_ms = min(timeout_ms, 1)  # the rest goes out as the node reads
        if self._dsocks or self._link_fds:
            ready = [s for s, _ in self._poller.poll(timeout_ms)]
        else:
            ready = [self.sock] if self.sock.poll(timeout_ms) else []
        got = False
        for sock in ready:
            if isinstance(sock, int):
                got = self._pump_link(self._link_fds.get(sock)) or got
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
                self._dispatch(h, data)
        return got

    def _pump_link(self, link: unixlink.Link | None) -> bool:
        if link is None:
            return False
        try:
            msgs = link.receive()
        except unixlink.LinkError as exc:  # the node went away: node_lost will follow
            log.info("same-host link to a node closed: %s", exc)
            self._close_link(link)
            return False
        for frames in msgs:
            try:
                h, data = protocol.decode(frames)
            except protocol.ProtocolError as exc:
                log.warning("client dropped a malformed message: %s", exc)
                continue
            if h["t"] in ("reply", "done"):
                self._dispatch(h, data)
        return bool(msgs)

    def _close_link(self, link: unixlink.Link) -> None:
        for dev in list(self._slots):  # slots live on the node's side of a link
            self._drop_slots(dev)
        self._link_fds.pop(link.fd, None)
        for path in [p for p, lk in self._links.items() if lk is link]:
            del self._links[path]
        with contextlib.suppress(KeyError, zmq.ZMQError):
            self._poller.unregister(link.fd)
        link.close()

    def _sock_for(self, dev: str) -> Any:
        """Where commands for ``dev`` go: its node's Unix socket on this host, else its
        direct zmq socket, else the broker."""
        d = self.devices.get(dev)
        if not self.direct or d is None or not d.direct:
            return self.sock
        if d.local and d.host == self.host and self.direct_mode != "zmq":
            link = self._links.get(d.local)
            if link is None and d.local not in self._no_link:
                try:
                    link = unixlink.connect(d.local, self.sock.getsockopt(zmq.ROUTING_ID))
                except OSError as exc:  # another user's node, or gone: use zmq
                    log.info("no same-host link to %s: %s", d.local, exc)
                    self._no_link.add(d.local)
                else:
                    self._links[d.local] = link
                    self._link_fds[link.fd] = link
                    self._poller.register(link.fd, zmq.POLLIN)
            if link is not None:
                return link
        s = self._dsocks.get(d.direct)
        if s is None:
            s = self.ctx.socket(zmq.DEALER)
            protocol.secure_socket_options(s)
            s.setsockopt(zmq.ROUTING_ID, self.sock.getsockopt(zmq.ROUTING_ID))
            s.setsockopt(zmq.SNDHWM, 10000)
            s.setsockopt(zmq.RCVHWM, 10000)
            s.setsockopt(zmq.RECONNECT_IVL, 100)
            s.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
            if d.direct_key:
                k = self._curve_keys
                if k is None:
                    raise ClprojError(
                        f"node of {dev} wants CURVE on its direct socket",
                        "connect to the broker with CURVE on (--curve on)",
                    )
                s.setsockopt(zmq.CURVE_SERVERKEY, d.direct_key.encode())
                s.setsockopt(zmq.CURVE_PUBLICKEY, k.own_public)
                s.setsockopt(zmq.CURVE_SECRETKEY, k.own_secret)
            s.connect(d.direct)
            self._dsocks[d.direct] = s
            self._poller.register(s, zmq.POLLIN)
        return s

    def _drop_direct(self, dead: set[str]) -> None:
        """Close direct sockets no live device uses any more (their node is gone)."""
        live = [d for d in self.devices.values() if d.id not in dead]
        used = {d.direct for d in live}
        for ep in [ep for ep in self._dsocks if ep not in used]:
            s = self._dsocks.pop(ep)
            self._poller.unregister(s)
            s.close(0)
        used = {d.local for d in live} | {d.local + nodelink.SUFFIX for d in live}
        for path in [p for p in self._links if p not in used]:
            self._close_link(self._links[path])

    def _dispatch(self, h: dict[str, Any], data: list[Any]) -> None:
        t = h["t"]
        if t == "done":  # a batch of successful commands without data (direct path)
            pending = self.pending
            for rid, secs in zip(h["ids"], h["ts"], strict=True):
                req = pending.pop(rid, None)
                if req is None:
                    continue
                req.res = {} if secs is None else {"t": secs}
                if req.on_done is not None:
                    # a read into our /dev/shm file: the data is there, not in a frame
                    keep = req.keep if req.op == "buf_read" else None
                    req.on_done(_Frame(keep) if isinstance(keep, memoryview) else None)
                req.done = True
            return
        if t == "reply":
            req = self.pending.pop(h["id"], None)
            if req is None:
                return
            if h["ok"]:
                req.res = h.get("res")
                if req.op == "buf_read" and isinstance(req.keep, memoryview):
                    data = [_Frame(req.keep)]  # the node wrote into our /dev/shm file
                if req.on_done is not None:
                    req.on_done(data[0] if data else None)
                req.done = True
            elif str(h.get("err", "")).startswith("gone"):
                self.pending[h["id"]] = req
                self._lost({req.dev} if req.dev else set())
            else:
                req.err = h.get("err") or "failed"
                req.res = h.get("res")  # details of the failure (a build's code and log)
                req.done = True
                self._async_errors.append(req)
        elif t == "error":
            req = self.pending.get(h["id"])
            if req is not None and h["err"].startswith("gone") and req.dev in self.dead:
                # sent to a device already recovered from: the replay covered it
                self.pending.pop(h["id"])
                if req.reissue is not None:
                    nr = req.reissue(self.default_target())
                    nr.on_done, req.on_done = req.on_done, None
                    self._chain(req, nr)
                else:
                    req.done = True
            elif req is not None and h["err"].startswith("gone"):
                self._lost({req.dev} if req.dev else set())
            elif req is not None:
                self.pending.pop(h["id"])
                req.err, req.done = h["err"], True
                self._async_errors.append(req)
            elif h["id"] in self._reasks:  # a background re-ask failed: ask again later
                key, fam = self._reasks.pop(h["id"])
                for ks in (self._keys.get(key), self._families.get(fam) if fam else None):
                    if ks is not None:
                        ks.asking = 0
            else:
                self._broker_replies[h["id"]] = h
        elif t == "node_lost":
            self.epoch = max(self.epoch, h["epoch"])
            self._lost({d for d in h["devices"] if isinstance(d, str)})
        elif t == "welcome":
            self._welcome = h
        elif t == "placed" and h["id"] in self._reasks:
            key, fam = self._reasks.pop(h["id"])
            self._apply_place(key, h, family=fam)
        elif t in ("placed", "status_reply"):
            self._broker_replies[h["id"]] = h

    def _chain(self, old: Request, new: Request) -> None:
        """Complete ``old`` when its re-issued ``new`` completes."""
        inner = new.on_done

        def done(frame: Any) -> None:
            if inner is not None:
                inner(frame)
            old.done = True

        new.on_done = done

    def settle(self, reqs: list[Request]) -> bool:
        """Pump until every request in ``reqs`` has completed (their errors stay on them);
        False when the client's timeout passed first."""
        deadline = time.monotonic() + self.timeout_s
        while not all(r.done for r in reqs):
            if time.monotonic() > deadline:
                return False
            self.pump(50)
        return True

    def wait(self, reqs: Iterable[Request]) -> None:
        reqs = list(reqs)
        if not self.settle(reqs):
            raise ClprojError(
                f"no reply from the cluster within {self.timeout_s:g}s",
                "check `clproj status`: is the broker up, is any node alive?",
            )
        for r in reqs:
            if r.err:
                err, r.err = r.err, None
                exc = RemoteError(f"{r.op} on {r.dev}: {err}")
                exc.res = r.res if isinstance(r.res, dict) else {}  # e.g. a build's log
                raise exc

    def raise_async(self) -> None:
        """Report a failure of a command nobody waited on (like an OpenCL error at clFinish)."""
        errs = [r for r in self._async_errors if r.err]
        self._async_errors.clear()
        if errs:
            r = errs[0]
            err, r.err = r.err, None
            raise RemoteError(
                f"{r.op} on {r.dev}: {err}"
                + (f" (and {len(errs) - 1} more)" if len(errs) > 1 else "")
            )

    def _broker_call(self, t: str, **fields: Any) -> dict[str, Any]:
        rid = self._next_id()
        self.sock.send(protocol.pack(t, id=rid, **fields))
        deadline = time.monotonic() + self.timeout_s
        while rid not in self._broker_replies:
            if time.monotonic() > deadline:
                raise ClprojError(
                    f"broker did not answer {t!r} within {self.timeout_s:g}s",
                    "check that `clproj broker` runs at that address with the same keys",
                )
            self.pump(50)
        h = self._broker_replies.pop(rid)
        if h["t"] == "error":
            raise ClprojError(f"broker: {h['err']}", "start a node: `clproj node --broker ADDR`")
        return h

    def _new_req(self, req: Request) -> tuple[int, Request]:
        """Register ``req`` under a new request id, first making room: past PUMP_INFLIGHT
        in flight, take in what has arrived; at MAX_INFLIGHT, wait for the oldest."""
        if len(self.pending) >= PUMP_INFLIGHT:
            self.pump(0)  # take in replies (and background placements) as they come
            while len(self.pending) >= MAX_INFLIGHT:
                self.wait([next(iter(self.pending.values()))])
        rid = self._next_id()
        self.pending[rid] = req
        return rid, req

    def cmd(
        self,
        dev: str,
        op: str,
        a: dict[str, Any],
        data: Any = None,
        on_done: Any = None,
        reissue: Any = None,
    ) -> Request:
        rid, req = self._new_req(Request(dev, op, on_done, reissue=reissue))
        if op in ("buf_create", "release", "release_all") and dev is not None:
            self._drop_slots(dev)  # the node may drop the slots naming this object
        if self._same_host(dev):
            obj = getattr(data, "obj", None)
            if isinstance(obj, _ShmMap) and len(data) == len(obj):
                a = {**a, "shm": obj.path}
                req.keep = data  # the file must exist until the node has read it
                data = None
            elif op == "buf_read" and a["n"] >= self.shm_min:
                with contextlib.suppress(OSError):
                    req.keep = _ShmMap.empty(a["n"])
                    a = {**a, "shm": req.keep.obj.path}
        sock = self._sock_for(dev)
        order: dict[str, int] = {}
        if isinstance(sock, unixlink.Link):  # the fast link orders itself against these
            sock.last_rid = rid
            if getattr(sock, "fast_last", 0):
                order["after"] = sock.fast_last
        header = protocol.pack("cmd", id=rid, dev=dev, op=op, a=a, **order)
        if self._corked and isinstance(sock, unixlink.Link):
            sock.send_multipart([header] if data is None else [header, data], False, False)
            self._dirty.add(sock)
        elif data is None:
            sock.send(header)
        else:
            sock.send_multipart([header, data], copy=False)
        return req

    def cork(self) -> None:
        """Queue same-host commands until uncork() (a wait in between flushes them)."""
        self._corked = True

    def uncork(self) -> None:
        """Write the commands queued since cork()."""
        self._corked = False
        if self._dirty:
            for link in self._dirty:
                link.flush()  # what the socket does not take now, _pump writes later
            self._dirty.clear()

    # ---- devices ---------------------------------------------------------------------
    def refresh_devices(self, wait_s: float = 10.0) -> list[RemoteDevice]:
        """Ask the broker for the live devices (waits up to ``wait_s`` for at least one)."""
        deadline = time.monotonic() + max(wait_s, 0.0)
        while True:
            self._welcome = None
            self.sock.send(
                protocol.pack("hello", client=self.sock.getsockopt(zmq.ROUTING_ID).hex())
            )
            t_end = (
                min(deadline, time.monotonic() + 2.0)
                if wait_s > 0
                else time.monotonic() + self.timeout_s
            )
            while self._welcome is None and time.monotonic() < t_end:
                self.pump(50)
            if self._welcome is not None:
                self.epoch = max(self.epoch, self._welcome["epoch"])
                devs = {}
                for d in self._welcome["devices"]:
                    if (
                        isinstance(d, dict)
                        and isinstance(d.get("id"), str)
                        and d["id"] not in self.dead
                    ):
                        devs[d["id"]] = RemoteDevice(
                            d["id"],
                            str(d.get("node")),
                            str(d.get("name")),
                            float(d.get("peak_flops") or 0),
                            d.get("profile") or {},
                            str(d.get("host") or ""),
                            str(d.get("direct") or ""),
                            str(d.get("direct_key") or ""),
                            str(d.get("local") or ""),
                        )
                self.devices = devs
                if devs:
                    return list(devs.values())
            if time.monotonic() >= deadline:
                if self._welcome is None:
                    raise ClprojError(
                        "broker did not answer", "start `clproj broker` or check --broker/keys"
                    )
                raise ClprojError(
                    "no live device in the cluster", "start `clproj node --broker ADDR`"
                )
            time.sleep(0.1)

    def _same_host(self, dev: str | None) -> bool:
        d = self.devices.get(dev) if dev else None
        return self.shm and d is not None and d.host == self.host

    def _host_copy(self, data: Any) -> Any:
        """The client's copy of written data: in /dev/shm when a node shares this host."""
        mv = memoryview(data).cast("B")
        if self.shm and len(mv) >= self.shm_min and any(map(self._same_host, self._live())):
            try:
                return _ShmMap.copy_of(mv)
            except OSError as exc:  # /dev/shm full or absent: the socket path still works
                log.info("shm copy failed (%s): sending through the socket", exc)
        return bytes(mv)

    def _live(self) -> list[str]:
        return [d for d in self.devices if d not in self.dead]

    # ---- objects ---------------------------------------------------------------------
    def _new_handle(self) -> int:
        self._handle += 1
        return self._handle

    def create_buffer(
        self, size: int, flags: int = MEM_READ_WRITE, hostbuf: Any = None
    ) -> RemoteBuffer:
        """clCreateBuffer. Allocation on a device happens when the buffer is first used there."""
        if size <= 0:
            raise ClprojError("buffer size must be positive", "pass the size in bytes")
        b = RemoteBuffer(self._new_handle(), int(size), int(flags))
        if hostbuf is not None:
            data = self._host_copy(hostbuf)
            if len(data) != size:
                raise ClprojError(
                    f"host buffer has {len(data)} bytes, not {size}",
                    "pass a host buffer of the buffer's size",
                )
            b.host, b.host_valid = data, True
            self._ckpt[b.h] = data
        else:
            self._ckpt[b.h] = None
        self.buffers[b.h] = b
        return b

    def create_program(self, source: str, options: str = "") -> RemoteProgram:
        digest = hashlib.sha256((source + "\0" + options).encode()).hexdigest()
        return RemoteProgram(self._new_handle(), source, options, digest)

    def build_program(self, prog: RemoteProgram, device: str | None = None) -> dict[str, Any]:
        """clBuildProgram: build now on one device so build errors surface at the call.

        Returns the real program's introspection (``kernels``: per kernel its argument
        count, kinds, type names, accepted scalar sizes, work-group info; ``log``). A
        failure raises RemoteError with ``res`` = {"code": OpenCL error, "log": ...}."""
        self.ensure_built(prog, device or self.default_target())
        return prog.info or {}

    def compile_program(
        self,
        source: str,
        options: str = "",
        headers: Sequence[tuple[str, str]] = (),
        device: str | None = None,
    ) -> RemoteProgram:
        """clCompileProgram: compiled (not linked) now, so errors surface at the call;
        ``headers``: (include name, source) pairs the source may #include."""
        hdrs = [(str(n), str(src)) for n, src in headers]
        ident = source + "\0" + options + "\0" + repr(hdrs)
        digest = hashlib.sha256(("compile\0" + ident).encode()).hexdigest()
        prog = RemoteProgram(self._new_handle(), source, options, digest, kind="compile")
        prog.headers = hdrs
        self.ensure_built(prog, device or self.default_target())
        return prog

    def link_program(
        self, parts: Sequence[RemoteProgram], options: str = "", device: str | None = None
    ) -> RemoteProgram:
        """clLinkProgram of compiled programs; linked now (errors and introspection as
        build_program)."""
        ident = "\0".join(p.hash for p in parts) + "\0" + options
        digest = hashlib.sha256(("link\0" + ident).encode()).hexdigest()
        prog = RemoteProgram(self._new_handle(), "", options, digest, kind="link")
        prog.parts = list(parts)
        self.ensure_built(prog, device or self.default_target())
        return prog

    def create_kernel(self, prog: RemoteProgram, name: str) -> RemoteKernel:
        return RemoteKernel(prog, name)

    def kernel_key(self, kernel: RemoteKernel, gsize: Sequence[int]) -> str:
        """The placement key: program hash + kernel name + global size (see docs/cluster.md)."""
        return f"{kernel.program.hash[:16]}:{kernel.name}:{'x'.join(str(int(g)) for g in gsize)}"

    def ensure_built(self, prog: RemoteProgram, dev: str) -> None:
        if dev in prog.built_on:
            return
        if prog.kind == "link":
            for part in prog.parts:
                self.ensure_built(part, dev)
            if dev in self.dead:
                return self.ensure_built(prog, self.default_target())
            op = "prog_link"
            a: dict[str, Any] = {
                "h": prog.h,
                "parts": [p.h for p in prog.parts],
                "opts": prog.options,
            }
        elif prog.kind == "compile":
            op = "prog_compile"
            a = {"h": prog.h, "src": prog.source, "opts": prog.options}
            if prog.headers:
                a["hdrs"] = [list(hd) for hd in prog.headers]
        else:
            op = "prog_build"
            a = {"h": prog.h, "src": prog.source, "opts": prog.options}
        req = self.cmd(dev, op, a)
        self.wait([req])
        if dev not in self.dead:
            prog.built_on.add(dev)
            if prog.info is None and isinstance(req.res, dict):
                prog.info = req.res
        else:
            self.ensure_built(prog, self.default_target())

    def ensure_on(self, b: RemoteBuffer, dev: str) -> list[Request]:
        """Make ``b``'s current content valid on ``dev`` (moving it if needed)."""
        if dev in b.valid:
            return []
        if not b.host_valid and b.valid:
            self._fetch_host(b)
        reqs = []
        if dev not in b.allocated:
            init = b.host if b.host_valid else None
            reqs.append(
                self.cmd(dev, "buf_create", {"h": b.h, "size": b.size, "flags": b.flags}, data=init)
            )
            b.allocated.add(dev)
        elif b.host_valid:
            reqs.append(self.cmd(dev, "buf_write", {"h": b.h, "off": 0, "n": b.size}, data=b.host))
        b.valid.add(dev)
        return reqs

    def _fetch_host(self, b: RemoteBuffer) -> None:
        """Bring the current content of ``b`` to the host (blocking)."""
        while not b.host_valid and b.valid:
            src = next(iter(b.valid))

            def done(frame: Any, b: RemoteBuffer = b) -> None:
                b.host, b.host_valid = frame.buffer, True

            self.wait([self.cmd(src, "buf_read", {"h": b.h, "off": 0, "n": b.size}, on_done=done)])

    def _home(self, b: RemoteBuffer) -> str | None:
        live = [d for d in b.valid if d not in self.dead]
        if self.default_device in live:
            return self.default_device
        return live[0] if live else None

    def default_target(self) -> str:
        live = self._live()
        if not live:
            self.refresh_devices()
            live = self._live()
        if self.default_device in live:
            return self.default_device  # type: ignore[return-value]
        return max(live, key=lambda d: (self.devices[d].peak_flops, d))

    # ---- commands --------------------------------------------------------------------
    def enqueue_write(
        self,
        b: RemoteBuffer,
        data: Any,
        offset: int = 0,
        blocking: bool = True,
        device: str | None = None,
    ) -> RemoteEvent:
        """clEnqueueWriteBuffer. ``data`` is copied at once (so the caller may reuse it)."""
        payload = self._host_copy(data)
        n = len(payload)
        if offset < 0 or offset + n > b.size or n == 0:
            raise ClprojError("write outside the buffer", f"buffer has {b.size} bytes")
        full = offset == 0 and n == b.size
        self._record(
            ("write", b.h, offset, payload), n, [b.h], replaces=b.h if full else None, data=payload
        )
        target = (
            device
            or self._home(b)
            or (self.default_device if self.default_device in self._live() else None)
        )
        if target is None:  # not used by any kernel yet: stay on the host until needed
            if full:
                b.host = payload
            else:
                base = bytearray(b.host if b.host_valid else bytes(b.size))
                base[offset : offset + n] = payload
                b.host = bytes(base)
            b.host_valid = True
            return RemoteEvent(self, [])
        reqs: list[Request] = []
        if full:
            if target not in b.allocated:
                reqs.append(
                    self.cmd(
                        target,
                        "buf_create",
                        {"h": b.h, "size": b.size, "flags": b.flags},
                        data=payload,
                    )
                )
                b.allocated.add(target)
            else:
                reqs.append(
                    self.cmd(target, "buf_write", {"h": b.h, "off": 0, "n": n}, data=payload)
                )
        else:
            reqs.extend(self.ensure_on(b, target))
            reqs.append(
                self.cmd(target, "buf_write", {"h": b.h, "off": offset, "n": n}, data=payload)
            )
        b.valid = {target}
        b.host_valid = full
        b.host = payload if full else None
        ev = RemoteEvent(self, reqs)
        if blocking:
            ev.wait()
        return ev

    def enqueue_read(
        self,
        b: RemoteBuffer,
        out: Any = None,
        offset: int = 0,
        size: int | None = None,
        blocking: bool = True,
    ) -> tuple[Any, RemoteEvent]:
        """clEnqueueReadBuffer into ``out`` (a writable buffer; a new bytearray if None)."""
        n = b.size - offset if size is None else int(size)
        if offset < 0 or n <= 0 or offset + n > b.size:
            raise ClprojError("read outside the buffer", f"buffer has {b.size} bytes")
        if out is None:
            out = bytearray(n)
        dst = memoryview(out).cast("B")
        if len(dst) < n:
            raise ClprojError("read destination too small", f"need {n} bytes")
        if b.host_valid or not b.valid:
            if b.host_valid:
                dst[:n] = memoryview(b.host)[offset : offset + n]
            return out, RemoteEvent(self, [])
        full = offset == 0 and n == b.size

        def done(frame: Any) -> None:
            mv = frame.buffer
            dst[:n] = mv
            if full:
                b.host, b.host_valid = mv, True

        src = self._home(b)
        assert src is not None
        req = self.cmd(src, "buf_read", {"h": b.h, "off": offset, "n": n}, on_done=done)
        req.reissue = lambda dev: self.cmd(
            dev, "buf_read", {"h": b.h, "off": offset, "n": n}, on_done=done
        )
        ev = RemoteEvent(self, [req])
        if blocking:
            ev.wait()
            self.raise_async()
        return out, ev

    def enqueue_fill(
        self, b: RemoteBuffer, pattern: bytes, offset: int = 0, size: int | None = None
    ) -> RemoteEvent:
        n = b.size - offset if size is None else size
        self._record(("fill", b.h, bytes(pattern), offset, n), 0, [b.h])
        dev = self._home(b) or self.default_target()
        reqs = self.ensure_on(b, dev)
        reqs.append(
            self.cmd(dev, "buf_fill", {"h": b.h, "pattern": bytes(pattern), "off": offset, "n": n})
        )
        b.valid, b.host_valid, b.host = {dev}, False, None
        return RemoteEvent(self, reqs)

    def enqueue_copy_buffer(
        self,
        src: RemoteBuffer,
        dst: RemoteBuffer,
        size: int | None = None,
        src_offset: int = 0,
        dst_offset: int = 0,
    ) -> RemoteEvent:
        n = src.size - src_offset if size is None else size
        self._record(("copy", src.h, dst.h, src_offset, dst_offset, n), 0, [src.h, dst.h])
        dev = self._home(src) or self._home(dst) or self.default_target()
        reqs = self.ensure_on(src, dev) + self.ensure_on(dst, dev)
        reqs.append(
            self.cmd(
                dev,
                "buf_copy",
                {"src": src.h, "dst": dst.h, "soff": src_offset, "doff": dst_offset, "n": n},
            )
        )
        dst.valid, dst.host_valid, dst.host = {dev}, False, None
        return RemoteEvent(self, reqs)

    def map_buffer(self, b: RemoteBuffer, offset: int = 0, size: int | None = None) -> bytearray:
        """clEnqueueMapBuffer (blocking): a host copy of the region; pair with unmap_buffer."""
        out, _ = self.enqueue_read(b, offset=offset, size=size, blocking=True)
        return out

    def unmap_buffer(
        self, b: RemoteBuffer, mapped: Any, offset: int = 0, write: bool = True
    ) -> RemoteEvent:
        """clEnqueueUnmapMemObject: a region mapped for writing is written back."""
        if not write:
            return RemoteEvent(self, [])
        return self.enqueue_write(b, mapped, offset=offset, blocking=False)

    def _wire_args(self, k: RemoteKernel) -> list[list[Any]]:
        n = max(k.args) + 1 if k.args else 0
        out: list[list[Any]] = []
        for i in range(n):
            if i not in k.args:
                raise ClprojError(
                    f"kernel {k.name}: argument {i} not set", "set every argument before launching"
                )
            v = k.args[i]
            if isinstance(v, RemoteBuffer):
                out.append(["b", v.h])
            elif isinstance(v, SubRegion):
                out.append(["r", v.buf.h, v.offset, v.size])
            elif isinstance(v, LocalMemory):
                out.append(["l", v.size])
            elif v is None:
                out.append(["n"])
            else:
                out.append(["s", v])
        return out

    def enqueue_launch(
        self,
        k: RemoteKernel,
        gsize: Sequence[int],
        lsize: Sequence[int] | None = None,
        goff: Sequence[int] | None = None,
        device: str | None = None,
        key: str | None = None,
        family: str | None = None,
    ) -> RemoteEvent:
        """clEnqueueNDRangeKernel (non-blocking). ``device`` pins; else the broker places it
        (``family``: launches whose decisions a new ``key`` may start from, see _place)."""
        key = key or self.kernel_key(k, gsize)
        entry, bufs = self.logged_launch(k, gsize, lsize, goff, key)
        if device and device not in self.dead:
            dev = device
        else:
            dev = self.place(key, bufs, family)
        return RemoteEvent(self, self.launch_on(dev, entry, bufs))

    def enqueue_split_launch(
        self,
        k: RemoteKernel,
        gsize: Sequence[int],
        lsize: Sequence[int] | None,
        goff: Sequence[int] | None,
        plan: Any,
        key: str | None = None,
    ) -> RemoteEvent:
        """clEnqueueNDRangeKernel as shares on several devices, merged on one
        (``plan``: a runtime.partition.route_policy.SplitPlan; runtime.cluster.client.split says how)."""
        from runtime.cluster.client.split import split_launch

        return split_launch(self, k, gsize, lsize, goff, plan, key or self.kernel_key(k, gsize))

    def logged_launch(
        self,
        k: RemoteKernel,
        gsize: Sequence[int],
        lsize: Sequence[int] | None,
        goff: Sequence[int] | None,
        key: str,
    ) -> tuple[tuple[Any, ...], list[RemoteBuffer]]:
        """The replay-log entry of a launch of ``k`` (logged now) and its buffers: one
        entry whatever the launch becomes (one device, or a split's shares)."""
        bufs = []
        for v in k.args.values():
            b = v.buf if isinstance(v, SubRegion) else v
            if isinstance(b, RemoteBuffer) and b not in bufs:
                bufs.append(b)
        entry = (
            "launch",
            k.program,
            k.name,
            self._wire_args(k),
            list(gsize),
            list(lsize) if lsize else None,
            list(goff) if goff else None,
            key,
        )
        self._record(entry, 0, [b.h for b in bufs])
        return entry, bufs

    def launch_on(
        self, dev: str, entry: tuple[Any, ...], bufs: list[RemoteBuffer]
    ) -> list[Request]:
        self.ensure_built(entry[1], dev)
        reqs: list[Request] = []
        for b in bufs:
            reqs.extend(self.ensure_on(b, dev))
        reqs.append(self._launch_cmd(dev, entry))
        for b in bufs:
            if not b.read_only:
                b.valid, b.host_valid, b.host = {dev}, False, None
        self.default_device = dev
        return reqs

    def _launch_cmd(self, dev: str, entry: tuple[Any, ...]) -> Request:
        """The launch command: a fast frame when the node holds a slot for this launch's
        shape (program, kernel, buffer and local arguments, scalar sizes, NDRange; the
        scalar values travel in the frame), else the full command, asking for a slot the
        second time the shape is seen.

        Why the second time: a slot costs the node a dedicated kernel object, worth it for
        a launch that repeats (launch loops, also with a changing step index), not for
        one-offs."""
        fields = _launch_fields(entry)
        if not self.fast_launch:
            return self.cmd(dev, "launch", fields)
        sock = self._sock_for(dev)
        fast = self._fast_link_for(dev) if isinstance(sock, unixlink.Link) else None
        if fast is None:
            return self.cmd(dev, "launch", fields)
        _, prog, name, args, gsize, lsize, goff, key = entry
        if any(a[0] == "s" and len(a[1]) > FAST_MAX_SCALAR for a in args):
            return self.cmd(dev, "launch", fields)  # the fast frame carries <= 256 bytes
        sig = nodelink.launch_shape(prog.h, name, args, gsize, lsize, goff)
        slots = self._slots.setdefault(dev, {})
        got = slots.get(sig)
        if got is not None:
            slot, slot_key = got
            rid, req = self._new_req(Request(dev, "launch"))
            scalars = [(i, a[1]) for i, a in enumerate(args) if a[0] == "s"]
            after = getattr(sock, "last_rid", 0)
            frame = nodelink.fast_frame(slot, rid, after, scalars, key == slot_key)
            if self._corked:
                fast.send(frame, flush=False)
                self._dirty.add(fast)
            else:
                fast.send(frame)
            sock.fast_last = rid  # the command link's next commands follow this frame
            return req
        seen = self._slot_seen.setdefault(dev, {})
        times = seen.get(sig, 0)
        if times != 1:  # first sighting, or a slot already asked for
            if not times:
                if len(seen) >= 4096:
                    seen.clear()
                seen[sig] = 1
            return self.cmd(dev, "launch", fields)
        seen[sig] = 2  # asked: not again until the answer (or a drop) comes
        epoch = self._slot_epoch.get(dev, 0)
        req = self.cmd(dev, "launch", {**fields, "slot": True})

        def granted(_frame: Any) -> None:
            n = (req.res or {}).get("slot")
            if isinstance(n, int) and self._slot_epoch.get(dev, 0) == epoch and len(slots) < 256:
                slots[sig] = (n, key)

        req.on_done = granted
        return req

    def _fast_link_for(self, dev: str) -> unixlink.Link | None:
        """The node's fast-launch link (its command socket path + ``.fast``), connected on
        first use; None when the node offers none (runtime.cluster.node.nodelink)."""
        d = self.devices.get(dev)
        if d is None or not d.local:
            return None
        path = d.local + nodelink.SUFFIX
        link = self._links.get(path)
        if link is None and path not in self._no_link:
            try:
                link = unixlink.connect(path, self.sock.getsockopt(zmq.ROUTING_ID))
            except OSError:  # an older node, or CLPROJ_NODE_NATIVE=0 there
                self._no_link.add(path)
                return None
            self._links[path] = link
            self._link_fds[link.fd] = link
            self._poller.register(link.fd, zmq.POLLIN)
        return link

    def _drop_slots(self, dev: str) -> None:
        """Forget ``dev``'s slots (a superset of what the node drops, see runtime.cluster.node.nodelink)."""
        self._slots.pop(dev, None)
        self._slot_seen.pop(dev, None)
        self._slot_epoch[dev] = self._slot_epoch.get(dev, 0) + 1

    def place(self, key: str, bufs: list[RemoteBuffer], family: str | None = None) -> str:
        """The device for a launch of ``key`` (see the module docstring).

        The cached decision while it is fresh; the broker is asked again, and waited for,
        when it is not (none yet, its device died, older than REASK_S, the broker's epoch
        moved: a projection arrived, a node came or went), and in the background every
        REASK_LAUNCHES launches, at most once per REASK_MIN_S (the answer applies when it
        arrives). A key whose own decision is not fresh takes its ``family``'s fresh one
        instead of waiting, and asks for its own in the background (at most once per
        REASK_MIN_S per family): so a stream of launches that brings a new key every time
        waits for the broker only when the family's decision goes stale."""
        now = time.monotonic()
        ks = self._keys.get(key)
        if ks is None:
            if len(self._keys) >= 100_000:  # every launch a new key: forget the oldest
                self._keys.clear()
            ks = self._keys[key] = _KeyState()
        fs = self._families.get(family) if family else None
        stale = (
            ks.dev is None
            or ks.dev in self.dead
            or ks.epoch != self.epoch
            or now - ks.asked_at > REASK_S
        )
        if (
            stale
            and fs is not None
            and fs.dev is not None
            and fs.dev not in self.dead
            and fs.epoch == self.epoch
            and now - fs.asked_at <= REASK_S
        ):
            ks.dev, ks.epoch, ks.reason, ks.asked_at = fs.dev, fs.epoch, fs.reason, fs.asked_at
            ks.since_ask = REASK_LAUNCHES  # its own answer, in the background
            stale = False
        if stale:
            fields = self._place_fields(key, ks, bufs, fs)
            self._apply_place(key, self._broker_call("place", **fields), now, family)
        elif (
            ks.since_ask >= REASK_LAUNCHES
            and not ks.asking
            # at most one background ask per REASK_MIN_S per key, and per family
            and now - max(ks.sent_at, fs.sent_at if fs is not None else 0.0) >= REASK_MIN_S
        ):
            rid = self._next_id()
            self.sock.send(protocol.pack("place", id=rid, **self._place_fields(key, ks, bufs, fs)))
            ks.asking, ks.since_ask, ks.sent_at = rid, 0, now
            if fs is not None:
                fs.sent_at = now
            self._reasks[rid] = (key, family)
        ks.count += 1
        ks.since_ask += 1
        if fs is not None:
            fs.count += 1
        return ks.dev  # type: ignore[return-value]

    def _place_fields(
        self, key: str, ks: _KeyState, bufs: list[RemoteBuffer], fs: _KeyState | None = None
    ) -> dict[str, Any]:
        live = self._live()
        move = {d: sum(b.size for b in bufs if d not in b.valid) for d in live}
        # the launches still to come are guessed from those so far: of the key, or of its
        # family when every launch brings a new key
        count = max(ks.count, fs.count if fs is not None else 0)
        fields: dict[str, Any] = {"key": key, "move": move, "remaining": max(1, count)}
        if ks.dev and ks.dev in live:
            fields["current"] = ks.dev
        return fields

    def _apply_place(
        self, key: str, h: dict[str, Any], now: float | None = None, family: str | None = None
    ) -> None:
        if family is not None:  # the family's decision follows its newest answer
            fs = self._families.get(family)
            if fs is None:
                if len(self._families) >= 10_000:
                    self._families.clear()
                fs = self._families[family] = _KeyState()
            if h["dev"] not in self.dead and h["dev"] in self.devices:
                fs.dev, fs.epoch, fs.reason = h["dev"], max(self.epoch, h["epoch"]), h["reason"]
                fs.asked_at = time.monotonic() if now is None else now
            if h["id"] == fs.asking:
                fs.asking = 0
        ks = self._keys.setdefault(key, _KeyState())
        if h["id"] == ks.asking:
            ks.asking = 0
        self.epoch = max(self.epoch, h["epoch"])
        if h["dev"] not in self.devices and now is not None:  # not from inside a pump
            self.refresh_devices()
        if h["dev"] in self.dead or h["dev"] not in self.devices:
            return
        ks.dev, ks.epoch, ks.reason = h["dev"], self.epoch, h["reason"]
        ks.asked_at = time.monotonic() if now is None else now
        if now is not None:
            ks.since_ask = 0
        self.placements.append((key, h["dev"], h["reason"]))
        del self.placements[:-100]

    def post_projection(
        self, key: str, times: dict[str, float | None], source: str = "client"
    ) -> None:
        """Give the broker a kernel's projected seconds per device (e.g. from runtime.projection.model)."""
        self.sock.send(protocol.pack("projection", key=key, times=times, source=source))

    def finish(self) -> None:
        """clFinish: every command issued so far has completed."""
        self.wait(list(self.pending.values()))
        self.raise_async()

    def release(self, obj: RemoteBuffer | RemoteProgram) -> None:
        for dev in list(getattr(obj, "allocated", getattr(obj, "built_on", set()))):
            if dev not in self.dead:
                self.cmd(dev, "release", {"h": obj.h})
        if isinstance(obj, RemoteBuffer):
            obj.released = True
            obj.allocated.clear()
            obj.valid.clear()

    def status(self) -> dict[str, Any]:
        return self._broker_call("status")["status"]

    def close(self) -> None:
        try:
            for dev in self._live():
                self.cmd(dev, "release_all", {})
            self.sock.send(protocol.pack("bye"))
        finally:
            for s in self._dsocks.values():
                s.close(linger=200)
            self._dsocks.clear()
            for link in list(self._link_fds.values()):
                deadline = time.monotonic() + 0.2
                while not link.flush() and time.monotonic() < deadline:
                    time.sleep(0.001)
                self._close_link(link)
            self.sock.close(linger=200)

    # ---- replay log & recovery -------------------------------------------------------
    def _record(
        self,
        entry: tuple[Any, ...],
        nbytes: int,
        refs: list[int],
        replaces: int | None = None,
        data: bytes | None = None,
    ) -> None:
        if self._log_bytes + nbytes > self.log_limit_bytes or len(self._log) >= self.log_limit_ops:
            self.checkpoint()  # before the new command is sent, so the log stays complete
        if replaces is not None and replaces not in self._log_refs:
            self._ckpt[replaces] = data  # a full overwrite before any logged use: no log entry
            return
        self._log.append(entry)
        self._log_bytes += nbytes
        self._log_refs.update(refs)

    def checkpoint(self) -> None:
        """Make the current state the recovery base: read every live buffer to the host."""
        self.finish()
        ckpt: dict[int, Any] = {}
        for b in self.buffers.values():
            if b.released:
                continue
            if not b.host_valid and b.valid:
                self._fetch_host(b)
            ckpt[b.h] = b.host if b.host_valid else None
        self._ckpt, self._log, self._log_bytes, self._log_refs = ckpt, [], 0, set()
        self.buffers = {h: b for h, b in self.buffers.items() if not b.released}

    def _lost(self, devs: set[str]) -> None:
        devs = {d for d in devs if d} - self.dead
        if not devs:
            return
        if self._recovering:
            self._lost_queue |= devs
            return
        self._recovering = True
        try:
            while devs:
                self._recover(devs)
                devs, self._lost_queue = self._lost_queue - self.dead, set()
        finally:
            self._recovering = False

    def _recover(self, dead: set[str]) -> None:
        """Re-execute everything since the checkpoint on a surviving device."""
        log.warning("devices %s lost: replaying %d logged commands", sorted(dead), len(self._log))
        self.recoveries += 1
        self.dead |= dead
        self._drop_direct(dead)
        for d in dead:
            self.devices.pop(d, None)
        lost = {rid: r for rid, r in self.pending.items() if r.dev in dead}
        for rid in lost:
            del self.pending[rid]
        for b in self.buffers.values():
            b.valid -= dead
            b.allocated -= dead
        for ks in self._keys.values():
            if ks.dev in dead:
                ks.dev = None
        if self.default_device in dead:
            self.default_device = None
        progs = {e[1] for e in self._log if e[0] == "launch"}
        for p in progs:
            p.built_on -= dead
        target = self.default_target()
        # 1. every buffer back to its checkpoint content on the target
        reqs: list[Request] = []
        for b in self.buffers.values():
            init = self._ckpt.get(b.h)
            if target in b.allocated:
                if init is not None:
                    reqs.append(
                        self.cmd(target, "buf_write", {"h": b.h, "off": 0, "n": b.size}, data=init)
                    )
            else:
                reqs.append(
                    self.cmd(
                        target,
                        "buf_create",
                        {"h": b.h, "size": b.size, "flags": b.flags},
                        data=init,
                    )
                )
                b.allocated.add(target)
        # 2. the log, in order
        for e in self._log:
            if e[0] == "write":
                reqs.append(
                    self.cmd(
                        target, "buf_write", {"h": e[1], "off": e[2], "n": len(e[3])}, data=e[3]
                    )
                )
            elif e[0] == "fill":
                reqs.append(
                    self.cmd(
                        target, "buf_fill", {"h": e[1], "pattern": e[2], "off": e[3], "n": e[4]}
                    )
                )
            elif e[0] == "copy":
                reqs.append(
                    self.cmd(
                        target,
                        "buf_copy",
                        {"src": e[1], "dst": e[2], "soff": e[3], "doff": e[4], "n": e[5]},
                    )
                )
            else:
                self.ensure_built(e[1], target)
                reqs.append(self.cmd(target, "launch", _launch_fields(e)))
        self.wait(reqs)
        for b in self.buffers.values():
            if not b.released:
                b.valid.add(target)
        # 3. lost reads are read again from the target; other lost commands were replayed
        again = []
        for r in lost.values():
            if r.reissue is not None:
                nr = r.reissue(target)
                again.append((r, nr))
            else:
                r.done = True
        for r, nr in again:
            self.wait([nr])
            r.done = True
