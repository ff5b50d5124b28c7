"""Requests: commands in flight, and settling them as the replies come in.

Why a module of its own: every command the client sends becomes a :class:`Request` that
completes when its reply arrives (or, after a node failure, when its re-issue or the
replay completes); waiting, pumping, error reporting and the routing of every incoming
message live here, apart from what the commands mean.

Event semantics: every enqueue returns a :class:`RemoteEvent`; non-blocking launches,
reads and writes return at once; ``wait()``/``finish()`` pump replies.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clproj.errors import ClprojError
from clproj.runtime.cluster import protocol, unixlink
from clproj.runtime.cluster.client.shm import ShmFrame

if TYPE_CHECKING:
    from clproj.runtime.cluster.client.platform import RemotePlatform

# commands in flight before a send first takes in what has arrived, and the most there may
# be: zmq drops a ROUTER's messages past its high-water mark, so replies must be read
PUMP_INFLIGHT = 1024
MAX_INFLIGHT = 8192


class RemoteError(ClprojError):
    """A command failed on its node (build error, bad argument, OpenCL error)."""


@dataclass(eq=False)
class Request:
    """One command in flight to device ``dev`` (None: the broker)."""

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
        """All requests replied (takes in what has arrived, without waiting)."""
        if all(r.done for r in self.reqs):  # known without asking the sockets
            return True
        self._p.pump(0)
        return all(r.done for r in self.reqs)

    def wait(self) -> None:
        """Block until every request replied; raises the first failure."""
        self._p.wait(self.reqs)


def _chain(old: Request, new: Request) -> None:
    """Complete ``old`` when its re-issued ``new`` completes."""
    inner = new.on_done

    def done(frame: Any) -> None:
        if inner is not None:
            inner(frame)
        old.done = True

    new.on_done = done


class Requests:
    """The requests in flight (``pending``: request id -> Request), the broker's answers
    to calls that wait for them, and failures nobody has waited on yet."""

    def __init__(self, p: RemotePlatform) -> None:
        self.p = p
        self.pending: dict[int, Request] = {}
        self.rid = 0
        self.broker_replies: dict[int, dict[str, Any]] = {}
        self.async_errors: list[Request] = []
        self._health_at = 0.0  # when p.health was last asked

    def next_id(self) -> int:
        """A new message id (commands, broker calls and background asks share the count)."""
        self.rid += 1
        return self.rid

    def register(self, req: Request) -> int:
        """Register ``req`` under a new request id, first making room: past PUMP_INFLIGHT
        in flight, take in what has arrived; at MAX_INFLIGHT, wait for the oldest."""
        if len(self.pending) >= PUMP_INFLIGHT:
            self.pump(0)  # take in replies (and background placements) as they come
            while len(self.pending) >= MAX_INFLIGHT:
                self.wait([next(iter(self.pending.values()))])
        rid = self.next_id()
        self.pending[rid] = req
        return rid

    def cmd(
        self,
        dev: str,
        op: str,
        a: dict[str, Any],
        data: Any = None,
        on_done: Any = None,
        reissue: Any = None,
    ) -> Request:
        """Send command ``op`` (arguments ``a``, optional data frame) to device ``dev``."""
        p = self.p
        req = Request(dev, op, on_done, reissue=reissue)
        rid = self.register(req)
        if op in ("buf_create", "release", "release_all") and dev is not None:
            p.fast.drop(dev)  # the node may drop the slots naming this object
        a, data, keep = p.shm_path.attach(dev, op, a, data)
        if keep is not None:
            req.keep = keep  # the file must exist until the node has read or written it
        sock = p.transport.sock_for(dev)
        order: dict[str, int] = {}
        if isinstance(sock, unixlink.Link):  # the fast link orders itself against these
            sock.last_rid = rid
            if getattr(sock, "fast_last", 0):
                order["after"] = sock.fast_last
        p.transport.send(sock, protocol.pack("cmd", id=rid, dev=dev, op=op, a=a, **order), data)
        return req

    def broker_call(self, t: str, **fields: Any) -> dict[str, Any]:
        """Ask the broker ``t`` and wait for its answer (raises on an error answer)."""
        rid = self.next_id()
        self.p.transport.to_broker(protocol.pack(t, id=rid, **fields))
        deadline = time.monotonic() + self.p.timeout_s
        while rid not in self.broker_replies:
            if time.monotonic() > deadline:
                raise ClprojError(
                    f"broker did not answer {t!r} within {self.p.timeout_s:g}s",
                    "check that `clproj broker` runs at that address with the same keys",
                )
            self.check_health()
            self.pump(50)
        h = self.broker_replies.pop(rid)
        if h["t"] == "error":
            raise ClprojError(f"broker: {h['err']}", "start a node: `clproj node --broker ADDR`")
        return h

    # ---- settling ----------------------------------------------------------------
    def pump(self, timeout_ms: int) -> bool:
        """Receive and dispatch what has arrived (waiting up to ``timeout_ms`` for the first)."""
        return self.p.transport.pump(timeout_ms, self.dispatch)

    def settle(self, reqs: list[Request]) -> bool:
        """Pump until every request in ``reqs`` has completed (their errors stay on them);
        False when the client's timeout passed first."""
        deadline = time.monotonic() + self.p.timeout_s
        while not all(r.done for r in reqs):
            if time.monotonic() > deadline:
                return False
            self.check_health()
            self.pump(50)
        return True

    def check_health(self) -> None:
        """Raise at once when ``p.health`` (the processes of an embedded cluster) says a
        part of the cluster is gone: no reply will come, waiting out the timeout is moot."""
        health = self.p.health
        if health is None:
            return
        now = time.monotonic()
        if now - self._health_at < 0.2:  # a waitpid per 0.2 s, not per pump
            return
        self._health_at = now
        gone = health()
        if gone:
            raise ClprojError(gone, "see the lines above; rerun with CLPROJ_ROUTE_VERBOSE=1")

    def wait(self, reqs: Iterable[Request]) -> None:
        """Settle ``reqs``; raises when the cluster did not answer in time, or the first
        failure among them (as RemoteError, ``res`` holding the failure's details)."""
        reqs = list(reqs)
        if not self.settle(reqs):
            raise ClprojError(
                f"no reply from the cluster within {self.p.timeout_s:g}s",
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
        errs = [r for r in self.async_errors if r.err]
        self.async_errors.clear()
        if errs:
            r = errs[0]
            err, r.err = r.err, None
            raise RemoteError(
                f"{r.op} on {r.dev}: {err}"
                + (f" (and {len(errs) - 1} more)" if len(errs) > 1 else "")
            )

    # ---- incoming messages -------------------------------------------------------
    def dispatch(self, h: dict[str, Any], data: list[Any]) -> None:
        """Act on one incoming message (replies, errors, broker notices)."""
        t = h["t"]
        if t == "done":
            self._done_batch(h)
        elif t == "reply":
            self._reply(h, data)
        elif t == "error":
            self._error(h)
        elif t == "node_lost":
            d = self.p.directory
            d.epoch = max(d.epoch, h["epoch"])
            self.p.recovery.lost({dev for dev in h["devices"] if isinstance(dev, str)})
        elif t == "welcome":
            self.p.directory.welcome = h
        elif t == "placed" and self.p.decisions.reask_answered(h):
            pass  # a background placement, applied
        elif t in ("placed", "status_reply"):
            self.broker_replies[h["id"]] = h

    def _done_batch(self, h: dict[str, Any]) -> None:
        """A batch of successful commands without data (direct path)."""
        pending = self.pending
        for rid, secs in zip(h["ids"], h["ts"], strict=True):
            req = pending.pop(rid, None)
            if req is None:
                continue
            req.res = {} if secs is None else {"t": secs}
            if req.on_done is not None:
                # a read into our /dev/shm file: the data is there, not in a frame
                keep = req.keep if req.op == "buf_read" else None
                req.on_done(ShmFrame(keep) if isinstance(keep, memoryview) else None)
            req.done = True

    def _reply(self, h: dict[str, Any], data: list[Any]) -> None:
        req = self.pending.pop(h["id"], None)
        if req is None:
            return
        if h["ok"]:
            req.res = h.get("res")
            if req.op == "buf_read" and isinstance(req.keep, memoryview):
                data = [ShmFrame(req.keep)]  # the node wrote into our /dev/shm file
            if req.on_done is not None:
                req.on_done(data[0] if data else None)
            req.done = True
        elif str(h.get("err", "")).startswith("gone"):
            self.pending[h["id"]] = req
            self.p.recovery.lost({req.dev} if req.dev else set())
        else:
            req.err = h.get("err") or "failed"
            req.res = h.get("res")  # details of the failure (a build's code and log)
            req.done = True
            self.async_errors.append(req)

    def _error(self, h: dict[str, Any]) -> None:
        req = self.pending.get(h["id"])
        if req is not None and h["err"].startswith("gone") and req.dev in self.p.dead:
            # sent to a device already recovered from: the replay covered it
            self.pending.pop(h["id"])
            if req.reissue is not None:
                nr = req.reissue(self.p.default_target())
                nr.on_done, req.on_done = req.on_done, None
                _chain(req, nr)
            else:
                req.done = True
        elif req is not None and h["err"].startswith("gone"):
            self.p.recovery.lost({req.dev} if req.dev else set())
        elif req is not None:
            self.pending.pop(h["id"])
            req.err, req.done = h["err"], True
            self.async_errors.append(req)
        elif not self.p.decisions.reask_failed(h["id"]):
            self.broker_replies[h["id"]] = h
