"""Completions: a node's commands in flight, from enqueue to the reply that answers them.

Why a module of its own: a node answers a command when its OpenCL event completes, not
when it is enqueued, so that the socket keeps serving while kernels run. Everything
between those two moments lives here: per device, the commands waiting in queue order;
one waiter thread per device blocked on the newest event and a pipe that wakes the
serving loop; the short poll that answers a lone command without those hops
(``CLPROJ_NODE_SETTLE_US``); the replies (one ``reply`` each, or one ``done`` per client
and pass for a burst); and the measured launch times the heartbeat reports to the broker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import zmq

from clproj import settings
from clproj.background_thread import background_thread
from clproj.runtime.cluster import protocol

log = logging.getLogger("clproj.node")


def settle_seconds() -> float:
    """How long a lone command (nothing else in flight on its device, e.g. launch+wait) is
    first polled on the serving thread before the waiter thread takes it over: a short
    kernel completes within it, and its reply then leaves without the hops serving thread
    -> waiter -> pipe -> serving thread (each a wake-up and a GIL hand-off).
    CLPROJ_NODE_SETTLE_US=0 turns it off (benchmarks compare both)."""
    return float(settings.get("CLPROJ_NODE_SETTLE_US")) * 1e-6


@dataclass
class Dev:
    """One local OpenCL device, its in-order profiling queue and the commands on it."""

    index: int
    device: Any
    ctx: Any
    queue: Any
    pending: int = 0
    # commands enqueued and not yet answered, in queue order (the queue is in order)
    waiting: deque[Any] = field(default_factory=deque)
    # the newest command enqueued in this pass, not yet handed to the waiter thread
    unwaited: Any = None


@dataclass
class Pending:
    """A command enqueued on a device and not yet answered."""

    event: Any
    client: bytes
    rid: int
    dev: Dev
    kind: str
    keep: list[Any] = field(default_factory=list)
    out: Any = None
    sock: Any = None  # where the command came from (broker or direct socket)
    key: str | None = None  # launch: placement key, for the measured times
    res: dict[str, Any] | None = None  # extra reply fields (a granted fast-launch slot)


def reply(
    sock: Any,
    client: bytes,
    rid: int,
    ok: bool = True,
    err: str | None = None,
    res: dict[str, Any] | None = None,
    data: Any = None,
) -> None:
    """Send one ``reply`` to ``client`` on ``sock`` (a client gone away is only logged)."""
    fields: dict[str, Any] = {"id": rid, "ok": ok}
    if err is not None:
        fields["err"] = err[:2000]
    if res is not None:
        fields["res"] = res
    frames: list[Any] = [client, protocol.pack("reply", **fields)]
    if data is not None:
        frames.append(data)
    try:
        sock.send_multipart(frames, copy=False)
    except zmq.ZMQError as exc:  # a direct client that went away
        log.info("cannot reply to %s: %s", client.hex()[:16], exc)


def _done(sock: Any, client: bytes, done: tuple[list[int], list[float | None]]) -> None:
    try:
        sock.send_multipart([client, protocol.pack("done", ids=done[0], ts=done[1])], copy=False)
    except zmq.ZMQError as exc:  # a direct client that went away
        log.info("cannot reply to %s: %s", client.hex()[:16], exc)


class Completions:
    """The commands in flight on ``devs``; ``broker_sock``'s replies the broker sees itself."""

    def __init__(self, cl: Any, devs: list[Dev], broker_sock: Any, settle_s: float) -> None:
        self.cl = cl
        self.settle_s = settle_s
        self.devs = devs
        self.broker_sock = broker_sock
        self.npending = 0  # commands enqueued on some device and not yet answered
        # one waiter thread per device (its queue is in order): pyopencl's per-event
        # set_callback costs ~150 us per command on this machine, a blocked wait nothing
        self._waitqs: list[queue.SimpleQueue[Any]] = [queue.SimpleQueue() for _ in devs]
        self._threads: list[threading.Thread] = []
        self.wake_fd, self._wfd = os.pipe()  # wake_fd: the serving loop polls it
        os.set_blocking(self.wake_fd, False)
        os.set_blocking(self._wfd, False)
        # kernel key -> {device index: seconds}, launch-time means the broker has not seen
        self._measured: dict[str, dict[str, float]] = {}
        self._measured_new: set[str] = set()
        self.lt: dict[str, float] = {}  # device index -> mean launch time (heartbeat)

    # ---- waiter threads --------------------------------------------------------------
    def start(self) -> None:
        self._threads = [
            background_thread(self._waiter, "clproj-node-wait", args=(q,)) for q in self._waitqs
        ]
        for th in self._threads:
            th.start()

    def stop(self) -> None:
        """Stop the waiters after each device's queue has drained; close the pipe."""
        for q in self._waitqs:
            q.put(None)
        for d in self.devs:
            with contextlib.suppress(Exception):
                d.queue.finish()
        for th in self._threads:
            th.join(1)

    def close(self) -> None:
        os.close(self.wake_fd)
        os.close(self._wfd)

    def drain_wake(self) -> None:
        """Empty the wake-up pipe (the loop woke; what completed is found by complete())."""
        with contextlib.suppress(BlockingIOError):
            os.read(self.wake_fd, 4096)

    def _waiter(self, q: queue.SimpleQueue[Any]) -> None:
        """Wait for a device's commands; wake the poller when the newest one queued so far
        has completed.

        Why the newest, not each in turn: the device queue is in order, so its completion
        implies all earlier ones, and a burst of non-blocking launches then costs one wait
        and one wake-up (each a GIL hand-off between this thread and the serving one)
        instead of one per launch. A single command (launch+wait) is reported as soon as
        it completes; an older command of a burst is still noticed by the serving loop's
        2 ms status scan while newer ones run."""
        while True:
            ev = q.get()
            while ev is not None:  # skip to the newest command queued meanwhile
                try:
                    nxt = q.get_nowait()
                except queue.Empty:
                    break
                ev = nxt
            if ev is None:
                return
            with contextlib.suppress(Exception):  # failed commands are reported by complete
                ev.wait()
            self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wfd, b"x")

    # ---- in flight -------------------------------------------------------------------
    def enqueued(
        self,
        event: Any,
        client: bytes,
        rid: int,
        dev: Dev,
        kind: str,
        sock: Any,
        key: str | None = None,
        keep: list[Any] | None = None,
        out: Any = None,
        res: dict[str, Any] | None = None,
    ) -> None:
        """A command was enqueued as ``event``: answer it on ``sock`` when it completes."""
        dev.pending += 1
        self.npending += 1
        dev.waiting.append(Pending(event, client, rid, dev, kind, keep or [], out, sock, key, res))
        dev.unwaited = event  # handed to the waiter in settle (unless it completes first)

    def settle(self) -> None:
        """Hand this pass's newest command per device to that device's waiter thread;
        a lone command (the only one in flight on its device) is first polled here for up
        to ``settle_s`` (settle_seconds()), yielding the CPU between polls so PoCL's worker
        can run it.

        Why: a launch the client waits for otherwise costs three extra wake-ups (this
        thread -> waiter thread blocked in clWaitForEvents -> pipe -> this thread) with a
        GIL hand-off each; on 2 loaded cores each costs tens of us. A burst (more than one
        command in flight) goes to the waiter at once: polling it would only delay the
        serving loop."""
        for dev in self.devs:
            ev = dev.unwaited
            if ev is None:
                continue
            dev.unwaited = None
            if dev.pending == 1:
                deadline = time.perf_counter() + self.settle_s
                try:
                    while ev.command_execution_status > 0:
                        if time.perf_counter() >= deadline:
                            break
                        os.sched_yield()
                    else:
                        continue  # complete (or failed): complete() answers it now
                except Exception:  # the waiter and complete() report failures
                    pass
            self._waitqs[dev.index].put(ev)

    def complete(self) -> None:  # noqa: C901
        """Answer finished commands, oldest first, looking only at each device's head:
        its queue is in order, so the first unfinished command ends the scan (a scan of
        everything in flight made a pipelined launch cost O(launches in flight)).

        Successful commands that came on the direct socket and return no data are
        answered in one ``done`` message per client and pass (ids + kernel seconds)
        instead of one ``reply`` each: a burst of non-blocking launches costs the node
        and the client one message per pass, not per launch."""
        batch: dict[tuple[Any, bytes], tuple[list[int], list[float | None]]] = {}
        for dev in self.devs:
            w = dev.waiting
            while w:
                p = w[0]
                try:
                    st = p.event.command_execution_status
                except Exception as exc:
                    st = -1
                    log.warning("event status failed: %s", exc)
                if st > 0:
                    break
                w.popleft()
                dev.pending -= 1
                self.npending -= 1
                if st < 0:
                    err = f"{p.kind} failed with status {st}"
                    reply(p.sock, p.client, p.rid, ok=False, err=err)
                    continue
                t: float | None = None
                if p.kind == "launch":
                    with contextlib.suppress(self.cl.Error):
                        t = (p.event.profile.end - p.event.profile.start) * 1e-9
                        self._learn(p, t)
                if p.sock is not self.broker_sock and p.out is None and p.res is None:
                    ids, ts = batch.setdefault((p.sock, p.client), ([], []))
                    ids.append(p.rid)
                    ts.append(t)
                    if len(ids) >= protocol.MAX_LIST:
                        _done(p.sock, p.client, batch.pop((p.sock, p.client)))
                    continue
                res = dict(p.res or {})
                if t is not None:
                    res["t"] = t
                reply(p.sock, p.client, p.rid, res=res, data=p.out)
        for (sock, client), done in batch.items():
            _done(sock, client, done)

    # ---- measured times --------------------------------------------------------------
    def _learn(self, p: Pending, t: float) -> None:
        """Fold a direct launch's profiled time into the means the heartbeat reports (the
        broker no longer sees those replies)."""
        if p.sock is self.broker_sock:
            return  # the broker saw this reply itself
        self.learn_time(p.dev.index, p.key, t)

    def learn_time(self, dev: int, key: str | None, t: float) -> None:
        """Fold a kernel time on device ``dev`` into its launch-time mean and, with a
        placement ``key``, into that kernel's measured time (both go to the broker)."""
        i = str(dev)
        old = self.lt.get(i)
        self.lt[i] = t if old is None else 0.8 * old + 0.2 * t
        if key:
            m = self._measured.get(key)
            if m is None:
                if len(self._measured) >= 4096:
                    self._measured.clear()
                m = self._measured[key] = {}
            m[i] = t if i not in m else 0.7 * m[i] + 0.3 * t
            self._measured_new.add(key)

    def take_measured(self) -> dict[str, dict[str, float]]:
        """The measured times learnt since the last heartbeat (at most 512 kernels)."""
        measured = {k: self._measured[k] for k in list(self._measured_new)[:512]}
        self._measured_new.difference_update(measured)
        return measured
