"""Where clproj keeps its per-user caches (device profiles measured on the fly, projections)
and its scratch folders."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile


def cache_dir(kind: str) -> str:
    """``$CLPROJ_CACHE/<kind>`` (default ``~/.cache/clproj/<kind>``), created on demand."""
    from clproj import settings

    base = settings.get("CLPROJ_CACHE")
    path = os.path.join(base, kind)
    os.makedirs(path, exist_ok=True)
    return path


def nearest_existing(path: str) -> str:
    """``path``, or the nearest name above it that exists: where a folder that is not made
    yet would be made, so whose file system, space and permissions it would have."""
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def discard_cache_entry(path: str) -> None:
    """Remove a bad cache entry (a torn file, a FIFO, a link to a device) so that the next
    write puts a good one in its place; a real folder there is left alone (it may be a
    user's), and a failure is ignored (the caller caches nothing then)."""
    if os.path.isdir(path) and not os.path.islink(path):
        return
    with contextlib.suppress(OSError):
        os.unlink(path)


def scratch_parent() -> str | None:
    """Where clproj's temporary folders go: the run's folder under ``clproj run``
    (``CLPROJ_RUN_DIR``), else the system's (None). Why: an app that ends abruptly (SIGKILL,
    ``os._exit``) never runs the cleanup of folders its clproj threads made; ``clproj run``
    outlives it and removes the run's folder with everything in it."""
    from clproj import settings

    run_dir = settings.get("CLPROJ_RUN_DIR")
    return run_dir if run_dir and os.path.isdir(run_dir) else None


def _pid_namespace() -> str:
    """This process's pid namespace (the number of ``/proc/self/ns/pid``), "0" where it
    cannot be read: a pid names a process only within its namespace, and containers that
    share a /tmp see each other's folders but not each other's processes."""
    try:
        return re.sub(r"\D", "", os.readlink("/proc/self/ns/pid")) or "0"
    except OSError:
        return "0"


def owned_prefix(prefix: str) -> str:
    """``prefix`` + ``<pid namespace>.<pid>-``: the start of the name of every temporary
    folder clproj makes, so that the folders of a process that died without removing them
    (SIGKILL, ``os._exit``, a crash) can be told from those of live processes
    (:func:`sweep_stale`)."""
    return f"{prefix}{_pid_namespace()}.{os.getpid()}-"


_swept: set[tuple[str, str]] = set()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def sweep_stale(parent: str | None, prefix: str) -> list[str]:
    """Remove the folders :func:`owned_prefix` named in ``parent`` (default: the system's
    temporary folder) whose process is gone, once per process and prefix; returns them.

    Why: a process killed outright cannot remove its own folders, and a ``clproj run``
    killed so cannot remove its run folder; the next clproj process that makes a folder of
    the same kind removes them instead. Only folders of this user and of this pid
    namespace, whose named process does not exist, are touched: a live process's folder
    (even one whose pid was reused) stays."""
    parent = parent or tempfile.gettempdir()
    if (parent, prefix) in _swept:
        return []
    _swept.add((parent, prefix))
    ns = _pid_namespace()
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.(\d+)-")
    gone = []
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    for name in names:
        m = pattern.match(name)
        if not m or m.group(1) != ns or _alive(int(m.group(2))):
            continue
        path = os.path.join(parent, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid == os.geteuid() and os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
    return gone


def temp_dir(prefix: str, parent: str | None = None) -> str:
    """A new private folder (``mkdtemp``) named by :func:`owned_prefix`, in ``parent``
    (default: the system's temporary folder), after sweeping that parent's stale folders
    of the same kind (:func:`sweep_stale`). The caller removes it."""
    sweep_stale(parent, prefix)
    return tempfile.mkdtemp(prefix=owned_prefix(prefix), dir=parent)


def temp_directory(
    prefix: str, parent: str | None = None, *, ignore_cleanup_errors: bool = False
) -> tempfile.TemporaryDirectory[str]:
    """:func:`temp_dir` as a ``TemporaryDirectory`` (removed by ``with`` or ``cleanup``)."""
    sweep_stale(parent, prefix)
    return tempfile.TemporaryDirectory(
        prefix=owned_prefix(prefix), dir=parent, ignore_cleanup_errors=ignore_cleanup_errors
    )


def scratch_dir(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary folder under :func:`scratch_parent` whose removal never raises. Why:
    emulations run on daemon threads inside an app (route mode's projections, split
    decisions); when the app exits while one is under way, Python's exit removes the
    folder (the ``TemporaryDirectory`` finalizer) while the thread may still write to it,
    and the removal's ``FileNotFoundError`` printed a traceback into the app's stderr.
    ``clproj run`` removes the run's folder with whatever is left in it."""
    return temp_directory(prefix, scratch_parent(), ignore_cleanup_errors=True)


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
    # random part, separators
    room = SOCKET_PATH_MAX - SOCKET_NAME_ROOM - len(owned_prefix(prefix)) - 10
    parent = next(
        (p for p in parents if len(os.path.abspath(p)) <= room and os.access(p, os.W_OK)),
        parents[0],
    )
    tmp = temp_directory(prefix, parent)
    os.chmod(tmp.name, 0o700)
    return tmp
