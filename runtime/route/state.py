"""The state of the virtual platform inside one application process: :class:`Route`.

Why one object: every call of the virtual platform reads and changes the same things (the
objects by id, the cluster client, the virtual device, the commands held back, the launch
statistics) under one lock, because the cluster client's socket is not thread-safe. The
modules beside this one (info, programs, buffers, transfers, enqueue, events, held,
callbacks, summary) carry out the calls on it; runtime/route/platform.py dispatches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from clproj import cl_names as C
from clproj import settings
from clproj.runtime.route.callbacks import EventCallbacks
from clproj.runtime.route.device import VirtualDevice
from clproj.runtime.route.errors import CLError, log_once
from clproj.runtime.route.local_cluster import LocalCluster
from clproj.runtime.route.objects import VEvent, VKernel, VMem, VProgram, VQueue
from clproj.runtime.route.summary import LaunchStats

# At exit: how long replies already on their way are taken in, and an embedded node busy
# with an abandoned kernel is given to stop before it is killed (seconds)
EXIT_GRACE_S = 0.5


class Route:
    """The virtual platform's state: objects by id, the cluster client, what is pending."""

    def __init__(self, ffi: Any, lib: Any, prestarted: Callable[[], LocalCluster | None]) -> None:
        """``prestarted``: takes the local cluster started already (prestart), or None."""
        from clproj.runtime.cluster.client.platform import RemotePlatform

        self.ffi, self.lib = ffi, lib
        self.lock = threading.RLock()
        # a call waiting for a user event waits on this (releasing the lock)
        self.cond = threading.Condition(self.lock)
        self.cluster: LocalCluster | None = None
        broker = settings.get("CLPROJ_BROKER")
        if not broker:
            self.cluster = prestarted() or LocalCluster(lifetime())
            broker = self.cluster.endpoint
        self.p = RemotePlatform(broker, wait_devices_s=settings.get("CLPROJ_ROUTE_WAIT"))
        if self.cluster is not None:
            self.p.health = self.cluster.gone
        self.objs: dict[int, Any] = {}
        self.parents: dict[int, Any] = {}  # id -> handle it retains implicitly
        self.next_id = 100
        self.platform = lib.clproj_route_static(lib.RT_PLATFORM)
        self.device = lib.clproj_route_static(lib.RT_DEVICE)
        self._vdev: VirtualDevice | None = None
        self._vdev_key: tuple[str, ...] = ()
        self._vdev_quick: tuple[int, int, int] = (-1, -1, -1)
        self.sigs: dict[tuple, tuple[str, str]] = {}  # launch -> (signature, family)
        self.families: dict[tuple, str] = {}  # launch without scalar values -> family
        self.seen_sigs: set[str] = set()
        self.hooks = bool(settings.get("CLPROJ_HOOKS"))
        self.stats = LaunchStats()
        self.t0 = time.monotonic_ns()
        self.closed = False
        self.callbacks = EventCallbacks(self)  # clSetEventCallback, fired on its thread
        self.held_queues: list[VQueue] = []  # queues holding commands back
        # Public for runtime/route/held.py, which runs held commands: the event of the
        # held command being run (handed out already), and whether one is being run
        # (it is then not held again).
        self.bound_event: VEvent | None = None
        self.in_held = False
        self.split: Any = None  # runtime.partition.route_policy.Splitter (CLPROJ_SPLIT=1)
        if settings.get("CLPROJ_SPLIT"):
            from clproj.runtime.partition.route_policy import Splitter

            self.split = Splitter.from_env(
                lambda: [d for d in list(self.p.devices.values()) if d.id not in self.p.dead],
                self.lock,
            )

    # ---- handles ----
    def new(self, kind: int, obj: Any, parent: Any = None) -> Any:
        """A handle for ``obj``; ``parent`` (an object with a handle) is kept alive by it."""
        self.next_id += 1
        h = self.lib.clproj_route_handle(kind, self.next_id)
        if h == self.ffi.NULL:
            raise CLError(C.CL_OUT_OF_HOST_MEMORY, "out of host memory")
        obj.handle = h
        if parent is not None and parent.handle is not None:
            self.lib.clproj_route_retain(parent.handle)
            self.parents[self.next_id] = parent.handle
        self.objs[self.next_id] = obj
        return h

    def get(self, oid: int, cls: type) -> Any:
        """The object ``oid``, which must be a ``cls`` (else CL_INVALID_VALUE)."""
        o = self.objs.get(oid)
        if not isinstance(o, cls):
            raise CLError(C.CL_INVALID_VALUE, f"no {cls.__name__} {oid}")
        return o

    def addr(self, h: Any) -> int:
        """A C pointer (handle) as an integer; None: 0."""
        return int(self.ffi.cast("uintptr_t", h)) if h is not None else 0

    def release(self, oid: int) -> None:
        """Drop object ``oid`` (its count reached 0 in route.c) and what only it kept."""
        o = self.objs.pop(oid, None)
        if isinstance(o, VMem):
            if o.parent is None:
                self.p.release(o.buf)
        elif isinstance(o, VProgram) and o.remote is not None:
            linked_into = o.binary_type != C.CL_PROGRAM_BINARY_TYPE_EXECUTABLE and any(
                isinstance(x, VProgram) and o in x.parts for x in self.objs.values()
            )
            if not linked_into:  # a linked program may need its parts on another device
                self.p.release(o.remote)
        elif isinstance(o, VKernel):
            o.prog.nkernels -= 1
        if o is not None:
            o.handle = None
        parent = self.parents.pop(oid, None)
        if parent is not None:
            self.lib.clproj_route_release(parent)

    # ---- the virtual device ----
    @property
    def vdev(self) -> VirtualDevice:
        """The virtual device's answers (remade when the cluster's devices change)."""
        p = self.p
        quick = (p.epoch, len(p.devices), len(p.dead))
        if self._vdev is not None and quick == self._vdev_quick:
            return self._vdev
        devs = [d for d in p.devices.values() if d.id not in p.dead]
        key = tuple(sorted(d.id for d in devs))
        if self._vdev is None or (key != self._vdev_key and devs):
            self._vdev = VirtualDevice(devs, self.addr(self.platform))
            self._vdev_key = key
        self._vdev_quick = quick
        return self._vdev

    # ---- the end ----
    def close(self) -> None:
        """At exit (under the lock): finish what is pending, print the summary, stop."""
        if self.closed:
            return
        self.closed = True
        abandoned = 0
        try:
            # What has completed is taken in; what still runs is not waited for beyond a
            # moment for replies on their way: natively an app's exit waits for no kernel,
            # and one that never ends (an app abandoning it) held route mode's exit for ever.
            deadline = time.monotonic() + EXIT_GRACE_S
            while self.p.pending and time.monotonic() < deadline:
                self.p.pump(20)
            abandoned = len(self.p.pending)
            if abandoned:
                log_once("exit-running", f"{abandoned} commands still running at exit: abandoned")
            try:
                self.p.raise_async()
            except Exception as exc:
                log_once("finish-exit", f"pending commands failed at exit: {exc}")
            self.stats.harvest(self.p.dead)
            self.stats.write_summary(self.p, self.split)
            self.p.close()
        finally:
            if self.cluster is not None:
                # a node busy with an abandoned kernel does not stop when asked (its thread
                # is inside the driver): it is killed after a short grace instead
                self.cluster.stop(grace_s=EXIT_GRACE_S if abandoned else 5.0)


def lifetime() -> float:
    """How long a local cluster started for this app may live (seconds)."""
    return float(settings.get("CLPROJ_ROUTE_LIFETIME"))
