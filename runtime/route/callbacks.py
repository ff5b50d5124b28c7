"""Event callbacks (clSetEventCallback): the one thing route mode does on a thread of ours.

Why a thread: a callback is due when its event's command completes, which the application
may never ask about; the thread pumps the cluster client under the route lock and calls
the application's functions *outside* it, never inside one of the application's own calls
and never after exit began (a callback may call OpenCL, or wake a thread that does).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from clproj import cl_names as C
from clproj.background_thread import background_thread
from clproj.runtime.route.errors import log_once
from clproj.runtime.route.objects import VEvent

if TYPE_CHECKING:
    from clproj.runtime.route.state import Route

CALLBACK_POLL_S = 0.001  # the callback thread's pump interval while callbacks wait


class EventCallbacks:
    """The callbacks not yet fired and the thread that fires them."""

    def __init__(self, route: Route) -> None:
        self.route = route
        # (handle, event, type, fn, user) not yet fired
        self.pending: list[tuple[Any, VEvent, int, int, int]] = []
        self.wake = threading.Event()
        self.stopped = False
        self.thread: threading.Thread | None = None

    def add(self, handle: Any, e: VEvent, kind: int, fn: int, user: int) -> None:
        """Remember one callback (under the lock); the thread starts with the first."""
        self.pending.append((handle, e, kind, fn, user))
        if self.thread is None:
            self.thread = background_thread(self._loop, "clproj-route-callbacks")
            self.thread.start()
        self.wake.set()

    def _due(self) -> list[tuple[Any, int, int, int]]:
        """Take the callbacks that are due (under the lock): ``(handle, status, fn, user)``,
        SUBMITTED before RUNNING before COMPLETE."""
        due, keep = [], []
        for h, e, kind, fn, user in self.pending:
            if kind != C.CL_COMPLETE:
                due.append((h, kind, fn, user))
                continue
            if e.user or e.held:  # a user event / a command held back for one
                if e.held or e.status is None:
                    keep.append((h, e, kind, fn, user))
                else:
                    due.append((h, e.status, fn, user))
                continue
            reqs = e.remote.reqs if e.remote is not None else []
            if all(r.done for r in reqs):
                failed = any(r.err for r in reqs) or (e.status is not None and e.status < 0)
                due.append((h, C.CL_OUT_OF_RESOURCES if failed else C.CL_COMPLETE, fn, user))
            else:
                keep.append((h, e, kind, fn, user))
        self.pending = keep
        due.sort(key=lambda d: -d[1] if d[1] >= 0 else 0)
        return due

    def _loop(self) -> None:
        """The callback thread: while callbacks wait, pump the client under the route
        lock every CALLBACK_POLL_S and fire the due ones outside it. Never fires after
        stop()."""
        r = self.route
        ffi, lib = r.ffi, r.lib
        while True:
            self.wake.wait()
            with r.lock:
                if self.stopped or r.closed:
                    return
                if self.pending:
                    r.p.pump(0)
                due = self._due()
                if not self.pending:
                    self.wake.clear()
            for h, status, fn, user in due:
                if self.stopped:
                    return
                try:
                    lib.clproj_route_fire(
                        ffi.cast("void *", fn), h, status, ffi.cast("void *", user)
                    )
                except Exception as exc:  # never let the thread die: later ones still fire
                    log_once("callback", f"event callback failed: {exc!r}")
            if self.pending:
                time.sleep(CALLBACK_POLL_S)

    def stop(self) -> None:
        """At exit, before close (and not under the route lock: a callback being fired
        may be calling OpenCL): no callback fires after this returns."""
        self.stopped = True
        self.wake.set()
        t = self.thread
        if t is not None and t is not threading.current_thread():
            t.join(5.0)


def set_callback(r: Route, c: Any) -> int:
    """clSetEventCallback: remembered here, fired by the callback thread once due
    (SUBMITTED/RUNNING at once: every command is submitted when enqueued; COMPLETE
    when the event's replies are in). route.c retained the event for the callback."""
    e = r.get(c.id, VEvent)
    r.callbacks.add(c.ret, e, int(c.u.callback.type), r.addr(c.src), r.addr(c.dst))
    return C.CL_SUCCESS
