"""``clproj run --mode project``: projection inside the intercepted application.

``intercept.hooks`` calls :func:`on_record` at every recorded launch (the first launch of
each kernel signature). The hook only queues the record: a daemon thread mini-emulates it
(in an Oclgrind subprocess) and projects it on the local devices' profiles, appending
each result as a JSON line to ``$CLPROJ_PROJECTION_FILE``. The application never waits
for the emulator; whatever is unfinished when it exits is completed by ``clproj run``
afterwards (:func:`runtime.live_projection.complete_run`). In route mode each projection is
also posted to the broker (keyed by the launch signature), which moves later launches of
that kernel to the projected-fastest device.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
from typing import Any

_queue: queue.Queue[Any] = queue.Queue()
_worker: threading.Thread | None = None
_lock = threading.Lock()
_devices: list[Any] | None = None
# One buffered append handle for the deferred launches (opening the file per launch cost
# ~40 us, 80 ms for LU's 2000 launches); closed, hence flushed, at the app's exit.
_deferred: Any = None
_emulation_mode: str | None = None


def _local_devices() -> list[Any]:
    """Profiles of the local devices, without measuring anything inside the app."""
    global _devices
    if _devices is None:
        from runtime import device_set

        spec = os.environ.get("CLPROJ_DEVICES", "local")
        _devices = (
            device_set.local_profiles(measure_missing=False)
            if spec == "local"
            else device_set.resolve(spec)
        )
    return _devices


def _mode() -> str:
    global _emulation_mode
    if _emulation_mode is None:
        from runtime.live_projection import emulation_mode

        _emulation_mode = emulation_mode()
    return _emulation_mode


def admit(record: Any) -> bool:
    """Asked by the shim before it snapshots a launch's buffers: must it record this one?

    ``record`` carries the launch's kernel, NDRange and scalar arguments but no buffer
    data. Launches the reuse cache will answer (same kernel and local size as one already
    emulated, no drift check due) are queued for a scaled projection instead, so a
    launch-heavy application pays for a bounded number of snapshots (miniemu.reuse).
    """
    from miniemu.reuse import default_cache

    if default_cache(_mode()).plan(record) == "record":
        return True
    # Scaling and projecting is cheap but not free: it is done after the app exits
    # (runtime.live_projection.complete_run), from these lines, so the app never waits.
    out = os.environ.get("CLPROJ_DEFERRED_FILE")
    if out:
        line = json.dumps(_metadata_line(record)) + "\n"
        with _lock:
            global _deferred
            if _deferred is None:
                from intercept.hooks import at_exit

                _deferred = open(out, "a", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115
                at_exit(_deferred.close)
            _deferred.write(line)
    return False


def _metadata_line(record: Any) -> dict[str, Any]:
    """What complete_run needs to rebuild a buffer-less record of a reused launch."""
    return {
        "kernel": record.kernel,
        "program_hash": record.program_hash,
        "work_dim": record.work_dim,
        "global_size": record.global_size,
        "local_size": record.local_size,
        "global_offset": record.global_offset,
        "args": [
            {
                "index": a.index,
                "kind": a.kind,
                "size": a.size,
                "data": a.data.hex() if a.data else None,
            }
            for a in record.args
        ],
    }


def _project(record: Any) -> dict[str, Any] | None:
    from runtime.live_projection import project_record

    return project_record(record, _local_devices(), _mode())


def _work() -> None:
    from clproj.errors import ClprojError

    out = os.environ.get("CLPROJ_PROJECTION_FILE")
    while True:
        record = _queue.get()
        try:
            doc = _project(record)
            if doc is not None:
                if out:
                    with _lock, open(out, "a", encoding="utf-8") as fh:
                        fh.write(json.dumps(doc) + "\n")
                _post_to_route(record, doc)
        except ClprojError:
            pass  # e.g. no measured profile for a local device: `clproj run` completes it
        except Exception as exc:  # never let the worker die silently or touch the app
            print(
                f"clproj: projection of {getattr(record, 'kernel', '?')} failed: {exc!r}",
                file=sys.stderr,
            )
        finally:
            _queue.task_done()


def _post_to_route(record: Any, doc: dict[str, Any]) -> None:
    """In route mode, hand the projection to the broker so later launches can migrate."""
    if os.environ.get("CLPROJ_MODE") != "route" or not doc.get("projections"):
        return
    from intercept import route_runtime

    times: dict[str, float | None] = {}
    for p in doc["projections"]:
        times[p["device"]] = p["time_s"]
        times.setdefault(p["name"], p["time_s"])
    route_runtime.post_projection(record.signature, times)


def _start_worker() -> None:
    global _worker
    with _lock:
        if _worker is None:
            _worker = threading.Thread(target=_work, name="clproj-projection", daemon=True)
            _worker.start()


def on_record(record: Any) -> None:
    """Queue ``record`` for emulation + projection; returns at once."""
    _start_worker()
    _queue.put(record)
