"""Where clproj keeps its per-user caches (device profiles measured on the fly, projections)
and its scratch folders."""

from __future__ import annotations

import os
import tempfile


def cache_dir(kind: str) -> str:
    """``$CLPROJ_CACHE/<kind>`` (default ``~/.cache/clproj/<kind>``), created on demand."""
    from clproj import settings

    base = settings.get("CLPROJ_CACHE")
    path = os.path.join(base, kind)
    os.makedirs(path, exist_ok=True)
    return path


def scratch_parent() -> str | None:
    """Where clproj's temporary folders go: the run's folder under ``clproj run``
    (``CLPROJ_RUN_DIR``), else the system's (None). Why: an app that ends abruptly (SIGKILL,
    ``os._exit``) never runs the cleanup of folders its clproj threads made; ``clproj run``
    outlives it and removes the run's folder with everything in it."""
    from clproj import settings

    run_dir = settings.get("CLPROJ_RUN_DIR")
    return run_dir if run_dir and os.path.isdir(run_dir) else None


def scratch_dir(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary folder under :func:`scratch_parent` whose removal never raises. Why:
    emulations run on daemon threads inside an app (route mode's projections, split
    decisions); when the app exits while one is under way, Python's exit removes the
    folder (the ``TemporaryDirectory`` finalizer) while the thread may still write to it,
    and the removal's ``FileNotFoundError`` printed a traceback into the app's stderr.
    ``clproj run`` removes the run's folder with whatever is left in it."""
    return tempfile.TemporaryDirectory(
        prefix=prefix, dir=scratch_parent(), ignore_cleanup_errors=True
    )


# A Unix socket's path fits in 107 bytes (sun_path); the names clproj binds inside a socket
# folder ("broker", "direct", "local") are short, this leaves them room.
SOCKET_PATH_MAX = 107
SOCKET_NAME_ROOM = 16


def socket_dir(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A 0700 folder for ipc:// and Unix sockets: in the run's folder where one is set
    (removed with the run), else in the system's temporary folder; where that path would
    leave a socket name past the 107 bytes a Unix socket path may have (a long TMPDIR),
    in the first of ``/tmp``, ``/dev/shm`` whose path fits. Why: ZeroMQ refused the bind
    with "File name too long" and route mode could not start under a TMPDIR of about 60
    characters."""
    parents = [scratch_parent() or tempfile.gettempdir(), "/tmp", "/dev/shm"]
    room = SOCKET_PATH_MAX - SOCKET_NAME_ROOM - len(prefix) - 10  # random part, separators
    parent = next(
        (p for p in parents if len(os.path.abspath(p)) <= room and os.access(p, os.W_OK)),
        parents[0],
    )
    tmp = tempfile.TemporaryDirectory(prefix=prefix, dir=parent)
    os.chmod(tmp.name, 0o700)
    return tmp
