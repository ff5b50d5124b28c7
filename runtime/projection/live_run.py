"""Project mode while the app runs: ``clproj run`` emulates and projects each recorded
launch as soon as its record is written.

Why here, in ``clproj run``, and not inside the app: the app's interpreter holds nothing
of it (no interpreter lock taken by a projection, no fork in the app, no device profiles
loaded there), an emulation under way when the app exits simply goes on (an emulator
started inside the app dies with it and was done again), and the process that completes
the run afterwards already holds the finished projections and the reuse cache's anchors.

The app's record writer renames each record into ``records/`` once it is whole; this
scheduler lists that folder when a file is renamed into it (clproj.folder_watch; every
:data:`POLL_S` anyway), takes new records in launch order, and starts each at once, one
per core (``CLPROJ_LIVE_EMULATION=1``, the default). An emulation started while the app
runs forks its emulator runs at nice 19 (:func:`miniemu.oclgrind.runs_at_nice`), which
orders them behind the app's threads *within one scheduling group*; the thread that plans
the runs, fits the probes and projects keeps its priority: ``clproj run`` shares the app's
session, and at nice 19 that thread waited behind the app's busy threads (figures:
``runs_at_nice``). The emulator server runs in a session of its own (miniemu.oclgrind:
its process group is killed as one), and where the kernel groups tasks by session (Linux's autogroup, on in
Debian's kernels) the server's group and the app's share the CPUs evenly while both are
busy: the emulation gets up to half of a machine the app keeps busy, and the app pays
for it. Measured on the 2-core VM, server in its own session against in the app's (two
rounds each): PolyBench syrk (both cores busy for 8 s) projected 3.6-4.8 s after its
launch against 8.4-8.6 s (after the app), the app 8.1-8.4 against 8.5-8.7 s, the run
8.4-8.7 against 9.2 s; PolyBench-ACC bicg LARGE, the app 2.4-2.5 against 1.9-2.1 s, the
run 3.0-3.2 against 2.7-3.1 s. The first projection within seconds is what routing needs,
so the server keeps its session (benchmarks/results/first_projection.md). ``auto`` starts one
only while a whole core is idle (:func:`clproj.load.idle_cores`, over 0.25 s of
``/proc/stat``; our own emulators count as busy), for a machine whose other users should
not see even nice-19 work. After the app (:meth:
`LiveProjector.finish`), the remaining records run one per core at the ordinary emulation
priority, as :func:`runtime.projection.live.complete_run` does without this scheduler
(``CLPROJ_LIVE_EMULATION=0``, the post-app method).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import time
from typing import Any

from clproj import settings
from clproj.background_thread import background_thread
from clproj.folder_watch import FolderWatch

POLL_S = 0.1  # listing records/ ten times a second costs nothing measurable
LIVE_NICE = 19
# What the first emulation and projection import on first use, imported by the scheduler's
# thread as it starts (while the app starts, before its first launch), so that no launch
# waits for them. Measured on the 2-core Xeon VM (python -X importtime, one projection of
# a loop-extrapolated launch): numpy 83 ms (the loop fit's polyfit), the emulator backend
# 29 ms, the projection model and power modules 10 ms; a 10^5-trip loop's first projection
# waited 0.09 s after its probes, for numpy.
WARM_MODULES = (
    "numpy",
    "clproj.miniemu.oclgrind",
    "clproj.runtime.projection.live",
    "clproj.runtime.projection.model",
    "clproj.runtime.projection.power",
)


class LiveProjector:
    """Emulates and projects the records of a running app (see the module docstring).

    ``done`` maps a launch signature to its ``clproj.launch-projection`` (with
    ``since_launch_s``: from the launch to this projection). Every thread it starts is a
    :func:`background_thread`; every emulator it starts dies with that thread
    (``miniemu.worker --parent-pid``), so nothing outlives ``clproj run``.
    """

    def __init__(
        self, record_dir: str, devices_spec: str, mode: str, policy: str, run_tag: str = ""
    ) -> None:
        from clproj.miniemu.reuse import ReuseCache

        self.record_dir = record_dir
        self.run_tag = run_tag  # only this run's records (intercept.identity.run_tag)
        self.devices_spec = devices_spec
        self.mode = mode
        self.policy = policy  # "1": at once (at nice 19); "auto": only on an idle core
        self.cache = ReuseCache(mode=mode)
        self.done: dict[str, dict[str, Any]] = {}
        self.during_app = 0  # emulations finished while the app ran
        self.after_app = 0
        self._devices: list[Any] | None = None
        self._seen: set[str] = set()
        # live records (intercept.live_view): id -> "on" while its projection stands or is
        # under way (the record proper is then not emulated again), "failed" after
        self._live: dict[str, str] = {}
        self._finals: dict[str, str] = {}  # id -> record file held back behind its live one
        self._found: dict[str, float] = {}  # record id -> when a scan found its file
        self._queue: list[Any] = []
        self._later: list[Any] = []  # starved while the app ran: again after it
        self._running = 0
        self._app_ended = False
        self._stop = False
        self._changed = False  # records/ changed since the loop last listed it
        self._watch: FolderWatch | None = None
        self._cond = threading.Condition()
        self._scan_lock = threading.Lock()
        self._cores = max(1, os.cpu_count() or 1)
        self._started = time.time()
        self._thread = background_thread(self._loop, "clproj-live")

    def start(self) -> None:
        from clproj.intercept.record import RECORDS_SUBDIR

        self.devices()  # the pinned profile files, read once before any emulation
        # records/ made now (the writer would make it at its first record), so that it is
        # watched from the app's first record on
        folder = os.path.join(self.record_dir, RECORDS_SUBDIR)
        with contextlib.suppress(OSError):  # unwatched: found by the poll
            os.makedirs(folder, exist_ok=True)
        self._watch = FolderWatch(folder, self._wake)
        self._thread.start()

    def _wake(self) -> None:
        """A file was renamed or written into records/: list it now, not at the next poll."""
        with self._cond:
            self._changed = True
            self._cond.notify_all()

    def devices(self) -> list[Any]:
        if self._devices is None:
            from clproj.runtime.projection import device_set

            # the profile files clproj run pinned before the app: nothing is measured here
            self._devices = device_set.resolve(self.devices_spec, measure_missing=False)
        return self._devices

    def _scan(self) -> None:
        """Queue the records that appeared since the last scan, in launch order. A live
        record (``.live``: its buffers read from the app while it copies them) goes before
        the record proper of its launch, which is emulated only if the live one fails."""
        from clproj.errors import ClprojError
        from clproj.intercept.identity import of_run
        from clproj.intercept.live_view import LIVE_SUFFIX
        from clproj.intercept.record import RECORDS_SUBDIR, SUFFIX, load

        folder = os.path.join(self.record_dir, RECORDS_SUBDIR)
        try:
            names = [n for n in os.listdir(folder) if n.endswith((SUFFIX, LIVE_SUFFIX))]
        except OSError:
            return  # nothing recorded yet
        names.sort(key=lambda n: not n.endswith(LIVE_SUFFIX))  # a launch's live one first
        fresh = []
        with self._scan_lock:  # the loop and finish() both scan: one at a time, whole
            for name in names:
                if name in self._seen:
                    continue
                self._seen.add(name)
                path = os.path.join(folder, name)
                rid = name[: -len(LIVE_SUFFIX if name.endswith(LIVE_SUFFIX) else SUFFIX)]
                if not of_run(rid, self.run_tag):
                    continue  # another run's, in a --record folder they share
                with self._cond:
                    if name.endswith(SUFFIX) and self._live.get(rid) == "on":
                        self._finals[rid] = path  # emulated only if the live one fails
                        continue
                try:
                    record = load(path)
                except (ClprojError, OSError):
                    continue  # complete_run reports a bad record; a live one can be gone
                if record.live:
                    if record.created < self._started:
                        continue  # left by a run that was killed: its app is gone
                    with self._cond:
                        self._live[record.id] = "on"
                fresh.append(record)
                self._found.setdefault(record.id, time.time())
            if fresh:
                with self._cond:
                    self._queue += fresh
                    self._queue.sort(key=lambda r: (r.created, r.id))

    def _live_failed(self, record: Any) -> None:
        """A live record's projection failed: its record proper is emulated instead (now
        if found, else when it appears)."""
        from clproj.errors import ClprojError
        from clproj.intercept.record import load

        with self._cond:
            self._live[record.id] = "failed"
            path = self._finals.pop(record.id, None)
        if path is not None:
            try:
                final = load(path)
            except ClprojError:
                return  # complete_run reports it
            with self._cond:
                self._queue.append(final)
                self._queue.sort(key=lambda r: (r.created, r.id))
                self._changed = True
                self._cond.notify_all()

    def _left(self) -> int:
        """Records queued or under way (the caller holds the lock)."""
        return len(self._queue) + len(self._later) + self._running

    def _may_start(self) -> bool:
        """Whether one more emulation may start now (the caller holds no lock)."""
        with self._cond:
            if not self._queue or self._running >= self._cores:
                return False
            if self._app_ended or self.policy == "1":
                return True
        from clproj.load import idle_cores

        return idle_cores() >= 1.0

    def _loop(self) -> None:
        for name in WARM_MODULES:  # imported once; later imports find them loaded
            with contextlib.suppress(ImportError):  # then imported (and reported) at first use
                importlib.import_module(name)
        while True:
            with self._cond:
                if self._stop:
                    return
            self._scan()
            while self._may_start():
                with self._cond:
                    record = self._queue.pop(0)
                    self._running += 1
                    during = not self._app_ended
                background_thread(self._run, "clproj-live-emulate", (record, during)).start()
            with self._cond:
                # one that came during the listing is listed now; a stop that came then
                # ends the loop now (finish() waited a whole poll for it: 0.1 s of a run)
                if not self._changed and not self._stop:
                    self._cond.wait(POLL_S)
                self._changed = False

    def _run(self, record: Any, during: bool) -> None:
        from clproj.intercept.live_view import release
        from clproj.miniemu.oclgrind import runs_at_nice
        from clproj.runtime.projection.live import failed_projection, project_record

        # the emulator runs go behind the app; this thread keeps its priority (docstring)
        nice = runs_at_nice(LIVE_NICE) if during else contextlib.nullcontext()
        try:
            with nice:
                doc = project_record(record, self.devices(), self.mode, cache=self.cache)
        except Exception as exc:  # one launch's failure is that launch's row, not the run's
            doc = failed_projection(record, f"{type(exc).__name__}: {exc}")
        starved = "time budget" in str(doc.get("error", "")) or (
            doc.get("emulation", {}).get("budget") == "wall"
        )
        if record.live and (starved or not doc.get("projections")):
            # read live from the app and failed (or starved): its record proper instead
            self._live_failed(record)
            with self._cond:
                self._running -= 1
                self._cond.notify_all()
            return
        if during and starved:
            # At nice 19 beside an app that took its cores back, the emulation ran out of
            # its wall-clock budget: its counts depend on the load. Done again after the app.
            with self._cond:
                self._later.append(record)
                self._running -= 1
                self._cond.notify_all()
            return
        doc["live"] = "during app" if during else "after app"
        if record.live:  # emulated from the app's buffers while it copied them
            doc["live_view"] = True
            # projected: the app may stop copying (it does where its records are this
            # run's own; intercept.live_view.release)
            release(next(iter(record.live.values())).state)
        if doc.get("projections"):  # a cached projection too: this run's latency
            doc["since_launch_s"] = round(time.time() - record.created, 4)
        if record.id in self._found:  # how much of that the record took to appear
            doc["record_found_s"] = round(self._found[record.id] - record.created, 4)
        with self._cond:
            self.done[record.signature] = doc
            self._running -= 1
            if during:
                self.during_app += 1
            else:
                self.after_app += 1
            self._cond.notify_all()

    def finish(self) -> dict[str, dict[str, Any]]:
        """After the app exited (its record writer drained): project every record left,
        one per core, and wait for those under way; returns :attr:`done`."""
        with self._cond:
            self._app_ended = True
            self._queue[:0] = self._later
            self._later.clear()
            self._cond.notify_all()
        from clproj.console import track

        self._scan()  # whole after any scan of the loop's: every record is queued
        with self._cond:
            total = self._left()

        def finished() -> Any:
            """Yields once per record finished, until none is left."""
            last = total
            while last > 0:
                with self._cond:
                    self._cond.wait_for(lambda last=last: self._left() < last)
                    now = self._left()
                yield from range(last - now)
                last = now

        for _ in track(finished(), "projecting recorded launches", total=total):
            pass
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=5.0)
        if self._watch is not None:
            self._watch.close()
        return self.done


def policy() -> str:
    """``CLPROJ_LIVE_EMULATION``: ``1`` (at once), ``auto`` (on idle cores), ``0`` (after the app)."""
    return str(settings.get("CLPROJ_LIVE_EMULATION"))


def maybe_start(
    record_dir: str, devices_spec: str, mode: str, run_tag: str = ""
) -> LiveProjector | None:
    """The scheduler for this run, started; None with ``CLPROJ_LIVE_EMULATION=0``."""
    if policy() == "0":
        return None
    live = LiveProjector(record_dir, devices_spec, mode, policy(), run_tag)
    live.start()
    return live
