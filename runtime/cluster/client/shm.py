"""The same-host data path: bulk data in 0600 /dev/shm files instead of socket frames.

Why it exists: a node on the client's own machine can read a file the client names, so a
large write or read need not travel through two socket hops. This module owns those
files (made, pooled when released, unlinked at exit, and swept after a crashed client)
and the choice of whether a given command's data takes that path (:class:`ShmPath`).
``CLPROJ_SHM=0`` turns the path off: every byte then goes through the sockets.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import mmap
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clproj.runtime.cluster.client.discovery import Directory

log = logging.getLogger("clproj.client")

SHM_PREFIX = "clproj-c"  # /dev/shm/clproj-c<pid>-<random>: the creating client's pid
# released /dev/shm files by size, reused by the next copy (unlinked at exit)
SHM_POOL_LIMIT = 512 * 2**20
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # one kernel call instead of a fault per page
_SHM_POOL: dict[int, list[str]] = {}
_SHM_POOL_BYTES = [0]


class ShmMap(mmap.mmap):
    """Bulk data in a 0600 /dev/shm file: the same-host data path (node on this machine).

    The client's one copy of the host data (also the replay-log entry) is made into such
    a file; commands then name the file instead of carrying the bytes through two socket
    hops. The file is unlinked when the last reference (log, checkpoint, host copy) goes."""

    path = ""

    @classmethod
    def copy_of(cls, data: Any) -> memoryview:
        """A mapped file holding a copy of ``data``."""
        src = memoryview(data).cast("B")
        mv = cls.empty(len(src))
        mv[:] = src
        return mv

    @classmethod
    def empty(cls, size: int) -> memoryview:
        """A mapped file of ``size`` bytes (content undefined), pooled where possible."""
        pooled = _SHM_POOL.get(size)
        path = pooled.pop() if pooled else ""
        if path:  # a released file of this size: its pages exist, no allocation/zeroing
            _SHM_POOL_BYTES[0] -= size
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        else:
            path = f"/dev/shm/{SHM_PREFIX}{os.getpid()}-{os.urandom(8).hex()}"
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.ftruncate(fd, size)
            m = cls(fd, size, flags=mmap.MAP_SHARED | _POPULATE)
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        m.path = path
        return memoryview(m)

    def __del__(self) -> None:
        if not self.path:
            return
        n = len(self)
        if _SHM_POOL_BYTES[0] + n <= SHM_POOL_LIMIT:  # keep the file for the next copy
            _SHM_POOL.setdefault(n, []).append(self.path)
            _SHM_POOL_BYTES[0] += n
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)


class ShmFrame:
    """What a reply's data frame offers (``.buffer``) for data that came through shm."""

    def __init__(self, buffer: memoryview) -> None:
        self.buffer = buffer


def sweep_orphan_shm(folder: str = "/dev/shm") -> int:
    """Unlink the /dev/shm files of clients that are gone; returns how many.

    A client killed by a signal never runs its exit cleanup, and its files hold memory
    until reboot (40 crashed route-mode runs once left 21 GB). The pid in the name says
    whose a file is; a file whose pid is alive (or not ours to signal) is left alone.
    """
    removed = 0
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    for name in names:
        if not name.startswith(SHM_PREFIX):
            continue
        pid_text = name[len(SHM_PREFIX) :].split("-", 1)[0]
        if not pid_text.isdigit():
            continue
        try:
            os.kill(int(pid_text), 0)
            continue  # alive
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError):
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(folder, name))
            removed += 1
    return removed


@atexit.register
def _shm_pool_cleanup() -> None:
    for paths in _SHM_POOL.values():
        for path in paths:
            with contextlib.suppress(OSError):
                os.unlink(path)
    _SHM_POOL.clear()


class ShmPath:
    """Whether a command's data goes through a /dev/shm file: on when enabled, /dev/shm
    exists and the command's device is on this host; reads and host copies only from
    ``min_bytes`` up (a small frame costs less than a file)."""

    def __init__(self, directory: Directory, enabled: bool, min_bytes: int) -> None:
        self.directory = directory
        self.enabled = enabled and os.path.isdir("/dev/shm")
        self.min_bytes = min_bytes

    def same_host(self, dev: str | None) -> bool:
        """``dev`` is on this client's host (and the path is on)."""
        d = self.directory.devices.get(dev) if dev else None
        return self.enabled and d is not None and d.host == self.directory.host

    def host_copy(self, data: Any) -> Any:
        """The client's copy of written data: in /dev/shm when a node shares this host."""
        mv = memoryview(data).cast("B")
        if (
            self.enabled
            and len(mv) >= self.min_bytes
            and any(map(self.same_host, self.directory.live()))
        ):
            try:
                return ShmMap.copy_of(mv)
            except OSError as exc:  # /dev/shm full or absent: the socket path still works
                log.info("shm copy failed (%s): sending through the socket", exc)
        return bytes(mv)

    def attach(
        self, dev: str, op: str, a: dict[str, Any], data: Any
    ) -> tuple[dict[str, Any], Any, Any]:
        """A command's arguments and data frame for the trip to ``dev``, and what the
        request must keep alive until the reply (the file the node reads or writes).

        Data already in a /dev/shm file is named (``shm``) instead of sent; a large read
        gets a file for the node to write into."""
        keep = None
        if self.same_host(dev):
            obj = getattr(data, "obj", None)
            if isinstance(obj, ShmMap) and len(data) == len(obj):
                return {**a, "shm": obj.path}, None, data
            if op == "buf_read" and a["n"] >= self.min_bytes:
                with contextlib.suppress(OSError):
                    keep = ShmMap.empty(a["n"])
                    a = {**a, "shm": keep.obj.path}
        return a, data, keep
