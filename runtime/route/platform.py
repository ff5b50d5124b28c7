"""Python side of route mode (``CLPROJ_MODE=route``): the entry of the virtual platform's
calls, and its start and end in the application's process.

``native/shim/route.c`` presents the application one virtual platform with one virtual
device that stands for every device of the cluster; every call on its handles arrives
here as one ``clproj_rcall`` (native/shim/route_types.h: its op and the op's named
arguments) and is dispatched through :data:`HANDLERS` (op -> handler) to the module that
carries it out through :class:`runtime.cluster.client.platform.RemotePlatform`: the broker
places each launch (first launch on a default device at once, later launches move when a
projection says it pays), buffers follow the kernels, node failures are recovered by the
client. Without ``CLPROJ_BROKER`` a local broker and node (processes, no LD_PRELOAD)
start at the first clGetPlatformIDs (runtime/route/local_cluster.py).

Why one entry: everything runs under one lock (the client's socket is not thread-safe),
the client is corked for the call (one write per node however many commands), and a
failing call returns an OpenCL error code, logged once; it never raises into the
application. The state is :class:`clproj.runtime.route.state.Route`; the modules beside this
one do one job each (info, programs, buffers, transfers, enqueue, events, held,
callbacks, summary).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from clproj import cl_names as C
from clproj import settings
from clproj.errors import ClprojError  # a leaf module; imported per call before (~1 us each)
from clproj.runtime.route import (
    buffers,
    callbacks,
    enqueue,
    events,
    info,
    programs,
    signals,
    transfers,
)
from clproj.runtime.route.errors import CLError, log_once
from clproj.runtime.route.held import Handler
from clproj.runtime.route.local_cluster import LocalCluster
from clproj.runtime.route.objects import VContext, VQueue, foreign_context
from clproj.runtime.route.state import Route, lifetime

_route: Route | None = None
_start_lock = threading.Lock()
_start_failed: str | None = None
_prestarted: LocalCluster | None = None


_CL_VALUES: frozenset[int] | None = None


def _defined_in_opencl(value: object) -> bool:
    """Whether ``value`` is the value of some constant of the OpenCL headers."""
    global _CL_VALUES
    if _CL_VALUES is None:
        _CL_VALUES = frozenset(
            v for k, v in vars(C).items() if k.startswith("CL_") and isinstance(v, int)
        )
    return isinstance(value, int) and value in _CL_VALUES


# ---- the ops with no module of their own ---------------------------------------------------
def _release(r: Route, c: Any) -> int:
    r.release(c.id)
    return C.CL_SUCCESS


def _create_context(r: Route, c: Any) -> int:
    c.ret = r.new(r.lib.RT_CONTEXT, VContext())
    return C.CL_SUCCESS


def _create_queue(r: Route, c: Any) -> int:
    ctx = r.get(c.id, VContext)
    props = int(c.u.create_queue.properties)
    served = C.CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE | C.CL_QUEUE_PROFILING_ENABLE
    defined = served | C.CL_QUEUE_ON_DEVICE | C.CL_QUEUE_ON_DEVICE_DEFAULT
    if props & ~defined:  # a bit no OpenCL version defines: invalid (PoCL says so too)
        return C.CL_INVALID_VALUE
    if props & ~served:  # defined, but device-side queues are not served
        return C.CL_INVALID_QUEUE_PROPERTIES
    c.ret = r.new(r.lib.RT_QUEUE, VQueue(ctx, props), ctx)
    return C.CL_SUCCESS


def handlers(lib: Any) -> dict[int, Handler]:
    """op (route_types.h RT_OP_*) -> the function that carries it out."""
    return {
        lib.RT_OP_INFO: info.answer,
        lib.RT_OP_LAUNCH: enqueue.launch,
        lib.RT_OP_READ: transfers.read_write,
        lib.RT_OP_WRITE: transfers.read_write,
        lib.RT_OP_COPY: transfers.copy,
        lib.RT_OP_FILL: transfers.fill,
        lib.RT_OP_RELEASE: _release,
        lib.RT_OP_WAIT: events.wait,
        lib.RT_OP_FINISH: events.finish,
        lib.RT_OP_FLUSH: events.flush,
        lib.RT_OP_CREATE_CONTEXT: _create_context,
        lib.RT_OP_CREATE_QUEUE: _create_queue,
        lib.RT_OP_CREATE_BUFFER: buffers.create_buffer,
        lib.RT_OP_CREATE_SUBBUF: buffers.create_subbuffer,
        lib.RT_OP_CREATE_PROGRAM: programs.create_program,
        lib.RT_OP_BUILD: programs.build,
        lib.RT_OP_COMPILE: programs.compile_program,
        lib.RT_OP_LINK: programs.link,
        lib.RT_OP_CREATE_KERNEL: programs.create_kernel,
        lib.RT_OP_CLONE_KERNEL: programs.clone_kernel,
        lib.RT_OP_KERNELS_IN_PROGRAM: programs.kernels_in_program,
        lib.RT_OP_MARKER: events.marker,
        lib.RT_OP_READ_RECT: transfers.transfer_rect,
        lib.RT_OP_WRITE_RECT: transfers.transfer_rect,
        lib.RT_OP_COPY_RECT: transfers.transfer_rect,
        lib.RT_OP_CALLBACK: callbacks.set_callback,
        lib.RT_OP_MAP: transfers.map_buffer,
        lib.RT_OP_UNMAP: transfers.unmap,
        lib.RT_OP_USER_EVENT: events.user_event,
        lib.RT_OP_USER_STATUS: events.user_status,
    }


# ---- start and end -------------------------------------------------------------------------
def prestart(lib: Any) -> None:
    """Start the local cluster's processes now, without waiting for them (route.c asks
    at the first clGetPlatformIDs): they come up while the app goes on (pytest collects
    its tests between listing platforms and making a context), instead of during the
    first context's creation (~0.5 s here)."""
    global _prestarted
    if _route is not None or _prestarted is not None or _start_failed:
        return
    if settings.get("CLPROJ_BROKER") or not settings.get("CLPROJ_ROUTE_PRESTART"):
        return
    with _start_lock:
        if _route is None and _prestarted is None:
            _prestarted = LocalCluster(lifetime())
            from clproj.intercept import hooks

            hooks.at_exit(lambda: _exit(lib))  # stops it also when no context was made


def _take_prestarted() -> LocalCluster | None:
    global _prestarted
    c, _prestarted = _prestarted, None
    return c


def _get(ffi: Any, lib: Any) -> Route:
    global _route, _start_failed
    if _route is None:
        with _start_lock:
            if _start_failed:
                raise CLError(C.CL_OUT_OF_RESOURCES, _start_failed)
            if _route is None:
                try:
                    _route = Route(ffi, lib, _take_prestarted)
                except Exception as exc:
                    _start_failed = f"route mode cannot start: {exc}"
                    print(f"clproj: {_start_failed}", file=sys.stderr)
                    raise CLError(C.CL_OUT_OF_RESOURCES, _start_failed) from None
                from clproj.intercept import hooks

                # one exit mechanism for C and Python apps (hooks.at_exit says how)
                hooks.at_exit(lambda: _exit(lib))
    return _route


def _exit(lib: Any) -> None:
    c = _take_prestarted()  # started, never used
    if c is not None:
        c.stop()
    r = _route
    if r is not None:
        try:
            r.callbacks.stop()
            with r.lock:
                r.close()
        except Exception as exc:
            log_once("exit", f"shutdown failed: {exc!r}")
    lib.clproj_route_closed()


# ---- the public API ------------------------------------------------------------------------
def post_projection(
    key: str, times: dict[str, float | None], energies: dict[str, float | None] | None = None
) -> bool:
    """Give the broker projected seconds (and, where known, joules) for the launches of
    signature ``key``.

    ``times`` and ``energies`` keys are cluster device ids (``node/index``), or device
    names / profile keys, which apply to every cluster device with that name or profile
    key. Returns False outside route mode (nothing to post to)."""
    r = _route
    if r is None or r.closed:
        return False
    with r.lock:
        if r.closed:  # closed at exit while this waited for the lock (a projection thread)
            return False
        out: dict[str, float | None] = {}
        joules: dict[str, float | None] = {}
        for d in r.p.devices.values():
            for k in (d.id, d.name, str((d.profile or {}).get("key", ""))):
                if k in times:
                    out[d.id] = times[k]
                    if energies and k in energies:
                        joules[d.id] = energies[k]
                    break
        if out:
            r.p.post_projection(key, out, source="route", energies=joules or None)
        return bool(out)


def route() -> Route | None:
    """The running route state (tests, hooks), or None."""
    return _route


class ProjectionSink:
    """Route mode's side of the projection hook (runtime.projection.app_hook.RouteSink):
    the hook projects each recorded launch and hands the result here."""

    def cluster_devices(self) -> list[Any]:
        r = _route
        return list(r.p.devices.values()) if r is not None else []

    def post_projection(
        self,
        key: str,
        times: dict[str, float | None],
        energies: dict[str, float | None] | None = None,
    ) -> bool:
        return post_projection(key, times, energies)

    def consider_split(self, record: Any, doc: dict[str, Any] | None) -> None:
        r = _route
        if r is not None and r.split is not None:
            r.split.consider(record, doc)


def install(ffi: Any, lib: Any) -> None:  # noqa: C901
    """Register the ``extern "Python"`` callback of route mode: one call, one handler."""
    table = handlers(lib)
    if settings.get("CLPROJ_MODE") == "route":
        from clproj.runtime.projection import app_hook

        app_hook.register_route_sink(ProjectionSink())
    done_at_exit = (lib.RT_OP_RELEASE, lib.RT_OP_WAIT, lib.RT_OP_FINISH, lib.RT_OP_FLUSH)
    commands = {  # enqueues: every object they name is of their queue's context
        lib.RT_OP_LAUNCH, lib.RT_OP_READ, lib.RT_OP_WRITE, lib.RT_OP_COPY, lib.RT_OP_FILL,
        lib.RT_OP_MAP, lib.RT_OP_UNMAP, lib.RT_OP_MARKER, lib.RT_OP_READ_RECT,
        lib.RT_OP_WRITE_RECT, lib.RT_OP_COPY_RECT,
    }  # fmt: skip

    def failed(exc_type: Any, exc: Any, tb: Any) -> None:
        log_once(
            f"internal-{exc_type.__name__}",
            f"internal error, call answered CL_OUT_OF_RESOURCES: {exc!r}",
        )

    @ffi.def_extern(error=C.CL_OUT_OF_RESOURCES, onerror=failed)
    def clproj_py_route(c: Any) -> int:
        main = signals.enter()  # the app's signal handlers run once the call has returned
        try:
            return _call(c)
        finally:
            if main:
                signals.leave()

    signals.watch(clproj_py_route)

    def _foreign(r: Route, c: Any) -> bool:
        """An enqueue naming an object of another context than its queue's."""
        waits = list(c.wait_ids[0 : c.n_wait]) if c.n_wait else []
        qid = int(c.queue) or (int(c.id) if c.kind == lib.RT_QUEUE else 0)  # a marker's
        return foreign_context(r.objs, qid, [c.id, c.id2, *waits])

    def _call(c: Any) -> int:  # noqa: C901
        try:
            if c.op == lib.RT_OP_PRESTART:
                prestart(lib)
                return C.CL_SUCCESS
            r = _get(ffi, lib)
            with r.lock:
                if r.closed:  # at exit everything completed; nothing new can start
                    return C.CL_SUCCESS if c.op in done_at_exit else C.CL_INVALID_OPERATION
                if c.n_released:  # events released in C since the last call (route.c)
                    for i in range(c.n_released):
                        r.release(c.released[i])
                handler = table.get(c.op)
                if handler is None:
                    return C.CL_INVALID_OPERATION
                if c.op in commands and _foreign(r, c):
                    return C.CL_INVALID_CONTEXT
                p = r.p
                p.cork()  # one write per call to each node, however many commands
                try:
                    return handler(r, c)
                finally:
                    p.uncork()
        except CLError as exc:
            if exc.code in (C.CL_OUT_OF_RESOURCES, C.CL_INVALID_OPERATION):
                log_once(f"cl{exc.code}-{c.op}", f"op {c.op}: {exc} ({exc.code})")
            return exc.code
        except KeyError as exc:  # an info parameter we do not answer
            if _defined_in_opencl(exc.args[0] if exc.args else None):
                log_once(
                    f"param-{c.op}-{c.kind}-{exc}",
                    f"info parameter {exc} of handle kind {c.kind} not supported",
                )
            # A value no OpenCL header defines is the app's own error: the code alone, as
            # the implementation answers it, and nothing in the app's stderr.
            return C.CL_INVALID_VALUE
        except ClprojError as exc:
            log_once(f"err-{c.op}-{exc.cause}", f"op {c.op} failed: {exc.cause}")
            return C.CL_OUT_OF_RESOURCES
