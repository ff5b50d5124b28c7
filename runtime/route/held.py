"""Commands held back for user events: an enqueue that waits on a user event not yet set
(or on a command held back for one, or behind one in an in-order queue) runs later.

Why here and not on the nodes: a user event is the application's, set by a call of the
application; the nodes only ever see commands that can run. A held command's call is
copied (it outlives the application's call) and run by :func:`release_held` when the
events it waits on are resolved; its event, handed out at the enqueue, is bound to the
command's real event then (:attr:`clproj.runtime.route.state.Route.bound_event`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from clproj import cl_names as C
from clproj.errors import ClprojError
from clproj.runtime.route.errors import CLError, log_once
from clproj.runtime.route.objects import Held, VEvent, VKernel, VMem, VQueue

if TYPE_CHECKING:
    from clproj.runtime.route.state import Route

Handler = Callable[["Route", Any], int]  # one op: (route, clproj_rcall) -> OpenCL code
HELD_POLL_S = 0.05  # a call waiting for a user event re-checks at least this often
_BLOCKING = {  # kinds that may block the call, and where their flag is
    "read": lambda c: c.u.rw.blocking,
    "write": lambda c: c.u.rw.blocking,
    "map": lambda c: c.u.map.blocking,
    "read_rect": lambda c: c.u.rect.blocking,
    "write_rect": lambda c: c.u.rect.blocking,
}


def wait_events(r: Route, c: Any) -> list[VEvent]:
    """The events of the call's wait list."""
    n = int(c.n_wait)
    if not n:
        return []
    objs = r.objs
    return [e for e in (objs.get(c.wait_ids[i]) for i in range(n)) if isinstance(e, VEvent)]


def _blocked(q: VQueue | None, waits: list[VEvent]) -> bool:
    if q is not None and q.held and q.in_order:
        return True
    return not all(e.resolved() for e in waits)


def _queue_held(r: Route, q: VQueue, held: Held) -> None:
    q.held.append(held)
    if q not in r.held_queues:
        r.held_queues.append(q)


def _hold(
    r: Route, c: Any, q: VQueue, kind: str, waits: list[VEvent], run: Any, retained: tuple
) -> int:
    """Hold a command back: its event (if asked for) is handed out now, ``run``
    carries the command out once every event it waits on is resolved."""
    ev = None
    if c.want_event:
        ev = VEvent(q, kind, None, time.monotonic_ns(), held=True)
        c.ret_event = r.new(r.lib.RT_EVENT, ev, q)
    _queue_held(r, q, Held(run, waits, ev, retained=retained))
    return C.CL_SUCCESS


def _retain_named(r: Route, c: Any, q: VQueue) -> tuple[Any, ...]:
    """Take a reference to every object a held command names: its queue, its kernel or
    buffers, and a launch's buffer arguments. Why: an enqueued command holds its own
    references (the OpenCL specification), so the app may release the kernel or a buffer
    (pyopencl's ``prg.inc(queue, ..., wait_for=[user_event])`` drops its temporary kernel
    at once) before the user event is set; the command must still run with them."""
    objs = [q, r.objs.get(int(c.id)), r.objs.get(int(c.id2))]
    k = objs[1]
    if c.op == r.lib.RT_OP_LAUNCH and isinstance(k, VKernel):
        argv = k.argv
        objs += [
            r.objs.get(argv[i].id) for i in range(len(k.gens)) if argv[i].kind == r.lib.RT_SET_MEM
        ]
    handles = tuple(
        o.handle
        for o in dict.fromkeys(o for o in objs if isinstance(o, (VQueue, VKernel, VMem)))
        if o.handle is not None
    )
    for h in handles:
        r.lib.clproj_route_retain(h)
    return handles


def _copy_call(r: Route, c: Any) -> tuple[Any, list[Any]]:
    """A copy of the call that outlives it (its NDRange / rect arrays copied too)."""
    ffi = r.ffi
    cc = ffi.new("clproj_rcall *")
    ffi.memmove(cc, c, ffi.sizeof("clproj_rcall"))
    keep: list[Any] = [cc]
    lib = r.lib
    fields: tuple[str, ...] = ()
    if c.op == lib.RT_OP_LAUNCH:
        args, dst, n = c.u.launch, cc.u.launch, int(c.u.launch.dim)
        fields = ("global_size", "local_size", "global_offset")
    elif c.op in (lib.RT_OP_READ_RECT, lib.RT_OP_WRITE_RECT, lib.RT_OP_COPY_RECT):
        args, dst, n = c.u.rect, cc.u.rect, 3
        fields = ("region", "a_origin", "b_origin")
    for f in fields:
        v = getattr(args, f)
        if v != ffi.NULL:
            arr = ffi.new("size_t[3]", [v[i] if i < n else 0 for i in range(3)])
            keep.append(arr)
            setattr(dst, f, arr)
    cc.n_wait, cc.wait_ids, cc.n_released = 0, ffi.NULL, 0
    cc.want_event = 0
    return cc, keep


def maybe_hold(
    r: Route,
    c: Any,
    q: VQueue,
    kind: str,
    op: Handler,
    snapshot: Callable[[], AbstractContextManager[Any]] | None = None,
) -> int | None:
    """Run-later handling of an enqueue: None when the command may run now; else it is
    held (non-blocking) or waited for (blocking: the call returns once it ran). ``op``
    runs the copied call later; ``snapshot`` (a launch) keeps its arguments as they are."""
    if r.in_held:
        return None
    waits = wait_events(r, c)
    if not _blocked(q, waits):
        return None
    cc, keep = _copy_call(r, c)
    if kind == "fill":  # the pattern is copied at the call
        pat = r.ffi.new("char[]", bytes(r.ffi.buffer(c.src, int(c.u.fill.pattern_size))))
        keep.append(pat)
        cc.src = pat
    flag = _BLOCKING.get(kind)
    blocking = flag is not None and bool(flag(c))
    restore = snapshot() if snapshot is not None else None
    retained = _retain_named(r, c, q)

    def run() -> int:
        _ = keep
        if restore is not None:
            with restore:
                return op(r, cc)
        return op(r, cc)

    if blocking or kind == "map":
        held = Held(run, waits, None, retained=retained)
        _queue_held(r, q, held)
        while held in q.held:
            r.p.uncork()
            r.cond.wait(HELD_POLL_S)
            release_held(r)
        if c.want_event:
            ev = VEvent(q, kind, None, time.monotonic_ns())
            c.ret_event = r.new(r.lib.RT_EVENT, ev, q)
        if kind == "map":
            c.ret = cc.ret
        return held.code
    return _hold(r, c, q, kind, waits, run, retained)


def _run(r: Route, h: Held, failed: bool) -> int:
    r.bound_event, r.in_held = h.event, True
    try:
        if failed:
            return C.CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST
        try:
            return h.run()
        except CLError as exc:
            return exc.code
        except ClprojError as exc:
            log_once("held", f"a held command failed: {exc}")
            return C.CL_OUT_OF_RESOURCES
    finally:
        r.bound_event, r.in_held = None, False


def release_held(r: Route) -> None:
    """Run the held commands whose events are resolved, in each queue's order."""
    progress = True
    while progress:
        progress = False
        for q in list(r.held_queues):
            i = 0
            while i < len(q.held):
                h = q.held[i]
                failed = any(
                    e.status is not None and e.status < 0 for e in h.waits if e.user or e.held
                )
                if not failed and not all(e.resolved() for e in h.waits):
                    if q.in_order:
                        break
                    i += 1
                    continue
                q.held.pop(i)
                progress = True
                code = _run(r, h, failed)
                for handle in h.retained:  # the command has run (or failed): let go
                    r.lib.clproj_route_release(handle)
                h.code = code
                if h.event is not None and code != C.CL_SUCCESS:
                    h.event.held = False
                    h.event.status = code if code < 0 else C.CL_OUT_OF_RESOURCES
            if not q.held:
                r.held_queues.remove(q)
    r.cond.notify_all()


def wait_resolved(r: Route, events: list[VEvent]) -> None:
    """Wait (lock released) until no event here is a user event still unset or a
    command still held back."""
    while not all(e.resolved() for e in events):
        release_held(r)
        if all(e.resolved() for e in events):
            break
        r.p.uncork()
        r.cond.wait(HELD_POLL_S)


def drain_queue(r: Route, q: VQueue) -> None:
    """clFinish: the queue's commands held for user events run first (lock released
    while they wait)."""
    while q.held:
        release_held(r)
        if q.held:
            r.p.uncork()
            r.cond.wait(HELD_POLL_S)
