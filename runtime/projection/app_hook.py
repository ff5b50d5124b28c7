"""``clproj run --mode project`` and ``--mode route``: what happens inside the intercepted
application.

At every launch of a new signature the shim asks :func:`admit` (before reading any
buffer) whether to snapshot it: ``miniemu.reuse.ReuseCache.plan`` decides from the
launch's metadata, so only the launches that will be emulated (first of a family, size
coverage, sampled drift checks) are snapshotted; the others are appended as metadata lines
to ``$CLPROJ_DEFERRED_FILE`` and answered by the reuse cache after the app exits.
In project mode that is all the app does: its record writer renames each record into
place, and ``clproj run`` emulates and projects it from there while the app runs
(:mod:`runtime.projection.live_run`), so the app's interpreter never holds a projection
and an emulation under way outlives the app's exit. In route mode each record is
emulated and projected at once inside the app and the projection posted to the broker
(keyed by the launch signature), which moves later launches of that kernel to the
projected-fastest device.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from typing import Any, Protocol

from clproj import settings
from clproj.background_thread import background_thread
from clproj.intercept import hooks

_queue: queue.Queue[Any] = queue.Queue()
_worker: threading.Thread | None = None
_lock = threading.Lock()
_devices: list[Any] | None = None
# One buffered append handle for the deferred launches (opening the file per launch cost
# ~40 us, 80 ms for LU's 2000 launches); closed, hence flushed, at the app's exit.
_deferred: Any = None
_emulation_mode: str | None = None
# Route mode: how often a family's launches that the reuse cache answers (new scalar
# values or sizes of a kernel already emulated) get a fresh projection posted. Each costs
# the app's interpreter about a millisecond; a factorisation brings a new signature with
# every launch, and its projected ranking moves far slower than that.
_reprojected: dict[Any, float] = {}


class RouteSink(Protocol):
    """What route mode lends this hook: its cluster's devices, a way to post projections
    to the broker, and the ``--split`` decision. Route mode registers one when it starts
    (runtime.route.platform); projection never imports route mode, which sits beside it
    and drives it."""

    def cluster_devices(self) -> list[Any]:
        """The cluster's devices (``.id``, ``.profile``); empty before route mode runs."""
        ...

    def post_projection(
        self,
        key: str,
        times: dict[str, float | None],
        energies: dict[str, float | None] | None = None,
    ) -> bool:
        """Projected seconds (and joules) per device for the launches of signature ``key``."""
        ...

    def consider_split(self, record: Any, doc: dict[str, Any] | None) -> None:
        """Offer a projected launch to ``--split``'s decision (when it is on)."""
        ...


_route_sink: RouteSink | None = None


def register_route_sink(sink: RouteSink | None) -> None:
    """Route mode, at its start: where this hook's projections go."""
    global _route_sink
    _route_sink = sink


class _Reused:
    """A route-mode launch without buffer snapshots, answered by the reuse cache."""

    __slots__ = ("record",)

    def __init__(self, record: Any) -> None:
        self.record = record


def _local_devices() -> list[Any]:
    """The profiles this app's launches are projected onto, without measuring anything.

    ``clproj run`` resolved ``--devices`` before the app started and passes the profile
    files in ``CLPROJ_DEVICES``; ``cluster`` (route mode) means the profiles the broker's
    nodes announced; without ``clproj run`` (``local``), unprofiled local devices get
    generic low-confidence profiles (devices.local).
    """
    global _devices
    if _devices is None:
        from clproj.runtime.projection import device_set

        spec = settings.get("CLPROJ_DEVICES")
        if settings.get("CLPROJ_MODE") == "route" and not settings.is_set("CLPROJ_DEVICES"):
            # Preloaded without `clproj run`: route mode's devices are the cluster's, as
            # its --devices default says. Never the local ones here: finding them queries
            # OpenCL from this daemon thread, i.e. the virtual platform, and a thread still
            # inside pyopencl when the interpreter finalises aborts the app (measured: a
            # short pyopencl app, 5 of 8 runs aborted at exit; 0 of 8 now).
            spec = "cluster"
        if spec == "cluster":
            _devices = _cluster_devices()
        else:
            _devices = device_set.resolve(spec, measure_missing=False)
    return _devices


def _cluster_devices() -> list[Any]:
    """Route mode: the valid profiles among the cluster's devices (one per profile key)."""
    from clproj.devices.profile import DeviceProfile
    from clproj.errors import ClprojError

    out: dict[str, Any] = {}
    for d in _route_sink.cluster_devices() if _route_sink is not None else ():
        try:
            prof = DeviceProfile(dict(d.profile or {}))
        except ClprojError as exc:
            print(
                f"clproj: device {d.id}: its node's profile is unusable: {exc.cause}",
                file=sys.stderr,
            )
            continue
        out.setdefault(prof.key, prof)
    if not out:
        raise ClprojError("no cluster device has a usable profile", "start nodes with --profiles")
    return list(out.values())


def _mode() -> str:
    global _emulation_mode
    if _emulation_mode is None:
        from clproj.runtime.projection.live import emulation_mode

        _emulation_mode = emulation_mode()
    return _emulation_mode


def admit(record: Any) -> bool:
    """Asked by the shim before it snapshots a launch's buffers: must it record this one?

    ``record`` carries the launch's kernel, NDRange and scalar arguments but no buffer
    data. Launches the reuse cache will answer (same kernel and local size as one already
    emulated, no drift check due) are queued for a scaled projection instead, so a
    launch-heavy application pays for a bounded number of snapshots (miniemu.reuse).
    """
    from clproj.miniemu.reuse import default_cache

    if default_cache(_mode()).plan(record) == "record":
        return True
    # Scaling and projecting is cheap but not free: it is done after the app exits
    # (runtime.projection.live.complete_run), from these lines, so the app never waits.
    out = settings.get("CLPROJ_DEFERRED_FILE")
    if out:
        from clproj.intercept.launch_lines import launch_line

        line = launch_line(record)
        with _lock:
            global _deferred
            if _deferred is None:
                _deferred = open(out, "a", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115
                hooks.at_exit(_deferred.close)
            _deferred.write(line)
    return False


def route_admit(record: Any) -> bool:
    """Route mode's :func:`admit`: must the first launch of this signature be snapshotted?

    Only the launches the reuse cache will emulate are (``True``): the others carry their
    metadata only, and at most one per family every ``CLPROJ_ROUTE_REPROJECT_S`` is projected from
    the cache's anchors and posted to the broker. Why: before, route mode snapshotted
    (read back every buffer of) and projected every new signature, ~1.4 ms per launch for
    a kernel whose scalar argument changes every launch (tests/cluster/test_route.py measures it).
    """
    from clproj.intercept.identity import reuse_family
    from clproj.miniemu.reuse import default_cache

    if default_cache(_mode()).plan(record) == "record":
        return True
    fam = reuse_family(record)
    now = time.monotonic()
    with _lock:
        if now - _reprojected.get(fam, -1e9) < settings.get("CLPROJ_ROUTE_REPROJECT_S"):
            return False
        if len(_reprojected) >= 10_000:
            _reprojected.clear()
        _reprojected[fam] = now
    if not hooks.exiting():
        _start_worker()
        _queue.put(_Reused(record))
    return False


def _project(record: Any, reused: bool = False) -> dict[str, Any] | None:
    """Route mode: emulate and project now (the broker needs the times while the app
    runs); a ``reused`` launch (no snapshots, :func:`route_admit`) is projected from the
    reuse cache's anchors, or not at all while they are still being emulated."""
    from clproj.runtime.projection.live import project_record

    if reused:
        from clproj.miniemu.reuse import default_cache

        prof = default_cache(_mode()).scaled(record)
        if prof is None:
            return None
        return project_record(record, _local_devices(), _mode(), profile=prof.to_dict())
    return project_record(record, _local_devices(), _mode())


def _work() -> None:
    from clproj.miniemu.oclgrind import shared_server

    # One emulator fork server for the rest of the app's run (miniemu.oclgrind.
    # shared_server): each new kernel's projection forks its runs from it instead of
    # importing Python, numpy and pyopencl again. It dies with this thread, which lives as
    # long as the app.
    with shared_server():
        _serve_queue()


def _serve_queue() -> None:
    from clproj.errors import ClprojError

    while True:
        record = _queue.get()
        reused = isinstance(record, _Reused)
        if reused:
            record = record.record
        try:
            doc = _project(record, reused)
            if not reused:  # a split decision needs the snapshots
                _consider_split(record, doc)
            if doc is not None:
                _post_to_route(record, doc)
        except ClprojError as exc:
            # e.g. no measured profile for a local device: `clproj run` completes it
            if not reused:
                _consider_split(record, {"error": exc.cause})
        except Exception as exc:  # never let the worker die silently or touch the app
            # the app is exiting ("can't register atexit after shutdown": a thread pool
            # started while Python waits for its threads): clproj run completes it
            if not (sys.is_finalizing() or "after shutdown" in str(exc)):
                print(
                    f"clproj: projection of {getattr(record, 'kernel', '?')} failed: {exc!r}",
                    file=sys.stderr,
                )
        finally:
            _queue.task_done()


def _post_to_route(record: Any, doc: dict[str, Any]) -> None:
    """In route mode, hand the projection to the broker so later launches can migrate."""
    if settings.get("CLPROJ_MODE") != "route" or not doc.get("projections"):
        return
    if _route_sink is None:
        return
    times: dict[str, float | None] = {}
    energies: dict[str, float | None] = {}
    for p in doc["projections"]:
        times[p["device"]] = p["time_s"]
        times.setdefault(p["name"], p["time_s"])
        energies[p["device"]] = p.get("energy_j")
        energies.setdefault(p["name"], p.get("energy_j"))
    _route_sink.post_projection(record.signature, times, energies)


def _consider_split(record: Any, doc: dict[str, Any] | None) -> None:
    """Route mode with --split: hand the record and its kernel profile to the split
    decision (runtime.partition.route_policy), which runs on its own thread: its emulations must
    not delay the projections that place the other kernels."""
    if settings.get("CLPROJ_MODE") != "route" or not settings.get("CLPROJ_SPLIT"):
        return
    if _route_sink is not None:
        _route_sink.consider_split(record, doc)


def _start_worker() -> None:
    global _worker
    with _lock:
        if _worker is None:
            _worker = background_thread(_work, "clproj-projection")
            _worker.start()


def on_record(record: Any) -> None:
    """Route mode: queue ``record`` for emulation + projection; returns at once. Project
    mode: nothing (``clproj run`` emulates it from its file, live_run).

    Not while the app exits (the record writer drains then): a worker started during
    interpreter shutdown would be killed inside native code; ``clproj run`` completes
    these records after the app.
    """
    if hooks.exiting() or settings.get("CLPROJ_MODE") != "route":
        return
    _start_worker()
    _queue.put(record)


# Loaded by the shim as a hook (CLPROJ_HOOKS), this module also answers the shim's and route
# mode's question "snapshot this launch?": intercept/ asks its hooks registry, never us.
hooks.register_admission("project", admit)
hooks.register_admission("route", route_admit)
