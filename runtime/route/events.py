"""Events of the virtual platform: the event a command hands out, user events, markers
and barriers, and the calls that wait (clWaitForEvents, clFinish, clFlush).

Why: an event of the virtual platform is a Python object over the cluster client's
RemoteEvent (the replies of the command's requests); user events and commands held back
for them have no remote side until they run (runtime/route/held.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from clproj import cl_names as C
from clproj.runtime.route.held import drain_queue, maybe_hold, release_held, wait_resolved
from clproj.runtime.route.objects import VContext, VEvent, VQueue

if TYPE_CHECKING:
    from clproj.runtime.route.state import Route


def event(r: Route, c: Any, q: VQueue | None, kind: str, rev: Any, launch_req: Any = None) -> None:
    """The command's event: handed out if the call asked for one (``c.ret_event``), or
    bound to the event handed out already when a held command runs now."""
    bound = r.bound_event
    if bound is not None:  # a held command runs now: its event was handed out already
        bound.remote, bound.launch_req, bound.held = rev, launch_req, False
        bound.queued_ns = time.monotonic_ns()
        if rev is not None and not rev.reqs:
            bound.remote, bound.end_ns = None, bound.queued_ns
        return
    if not c.want_event:
        return
    e = VEvent(q, kind, rev, time.monotonic_ns(), launch_req)
    if rev is not None and not rev.reqs:
        e.remote, e.end_ns = None, e.queued_ns
    c.ret_event = r.new(r.lib.RT_EVENT, e, q)


def user_event(r: Route, c: Any) -> int:
    """clCreateUserEvent."""
    ctx = r.get(c.id, VContext)
    e = VEvent(None, "user", None, time.monotonic_ns(), ctx=ctx, user=True)
    c.ret = r.new(r.lib.RT_EVENT, e, ctx)
    return C.CL_SUCCESS


def user_status(r: Route, c: Any) -> int:
    """clSetUserEventStatus: commands held for the event may run now."""
    e = r.get(c.id, VEvent)
    if not e.user:
        return C.CL_INVALID_EVENT
    if e.status is not None:
        return C.CL_INVALID_OPERATION  # set once only
    e.status = int(c.u.user_status.status)
    e.end_ns = time.monotonic_ns()
    release_held(r)
    r.callbacks.wake.set()
    return C.CL_SUCCESS


MARKER_KINDS = ("marker", "migrate", "barrier")  # by RT_MARKER_* (route_types.h)


def marker(r: Route, c: Any) -> int:
    """clEnqueueMarker(WithWaitList), clEnqueueBarrier(WithWaitList), migrations (a
    hint): an event for everything enqueued so far."""
    q = r.get(c.id, VQueue)
    kind = MARKER_KINDS[int(c.u.marker.type)]
    held = maybe_hold(r, c, q, kind, marker)
    if held is not None:
        return held
    from clproj.runtime.cluster.client.platform import RemoteEvent

    event(r, c, q, kind, RemoteEvent(r.p, list(r.p.pending.values())))
    return C.CL_SUCCESS


def wait(r: Route, c: Any) -> int:
    """clWaitForEvents: user events and held commands first (lock released while
    waiting), then the replies."""
    evs = [r.objs.get(c.wait_ids[i]) for i in range(c.n_wait)]
    evs = [e for e in evs if isinstance(e, VEvent)]
    if not all(e.resolved() for e in evs):
        wait_resolved(r, evs)
    failed = False
    for e in evs:
        if e.status is not None and e.status < 0:
            failed = True
        elif e.remote is not None:
            e.remote.wait()  # raises if the command failed: remote stays set
            e.remote, e.end_ns = None, time.monotonic_ns()  # no second pump
    return C.CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST if failed else C.CL_SUCCESS


def finish(r: Route, c: Any) -> int:
    """clFinish: commands held for user events come first, then every reply."""
    q = r.get(c.id, VQueue)
    drain_queue(r, q)
    r.p.finish()
    r.stats.harvest(r.p.dead)
    return C.CL_SUCCESS


def flush(r: Route, c: Any) -> int:
    """clFlush: send what is corked, take in what has arrived."""
    r.p.pump(0)
    return C.CL_SUCCESS
