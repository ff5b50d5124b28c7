"""Wake a waiting thread when a file is renamed or written into a folder (Linux inotify).

Why: ``clproj run``'s live scheduler (runtime.projection.live_run) finds the app's launch
records by listing ``records/``; listed every 0.1 s, a record waited 0.05 s on average
(0.1 s at worst) before its emulation could start, a third of the whole first projection
of a small kernel (0.13-0.15 s on the 2-core VM). The record writer renames each record
into place, so an inotify watch on the folder says at once that one is there.

Where inotify is not there (another kernel, the per-user watch limit reached, a folder
that cannot be watched) :class:`FolderWatch` is inactive and the caller's own poll is all
there is: nothing else changes. The watch thread reads the events only to clear them; the
caller lists the folder itself, so an event lost to an overflowing queue costs one poll.
"""

from __future__ import annotations

import ctypes
import os
import select
from collections.abc import Callable

from clproj.background_thread import background_thread

# <sys/inotify.h>
IN_CLOSE_WRITE = 0x00000008  # a file opened for writing was closed
IN_MOVED_TO = 0x00000080  # a file was renamed into the folder
IN_NONBLOCK = 0o4000  # = O_NONBLOCK
IN_CLOEXEC = 0o2000000  # = O_CLOEXEC: no child (the app, an emulator) inherits the watch

_EVENTS_BYTES = 64 * 1024  # one read clears this many bytes of queued events


def _libc() -> ctypes.CDLL | None:
    """The C library's inotify calls, typed; None where it has none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        init, add = libc.inotify_init1, libc.inotify_add_watch
    except (OSError, AttributeError):
        return None
    init.argtypes, init.restype = [ctypes.c_int], ctypes.c_int
    add.argtypes, add.restype = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32], ctypes.c_int
    return libc


class FolderWatch:
    """Calls ``changed()`` on a thread of its own each time files are renamed or written
    into ``folder`` (several at once may make one call). :attr:`active` is False where
    the folder cannot be watched; :meth:`close` stops the thread and frees the watch."""

    def __init__(self, folder: str, changed: Callable[[], None]) -> None:
        self.changed = changed
        self.active = False
        self._fd = -1
        self._stop_r = self._stop_w = -1
        libc = _libc()
        if libc is None:
            return
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            return
        if libc.inotify_add_watch(fd, os.fsencode(folder), IN_MOVED_TO | IN_CLOSE_WRITE) < 0:
            os.close(fd)
            return
        self._fd = fd
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC)
        self._thread = background_thread(self._run, "clproj-folder-watch")
        self._thread.start()
        self.active = True

    def _run(self) -> None:
        poller = select.poll()  # not select(): no limit on the descriptors' numbers
        poller.register(self._fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if self._stop_r in ready:
                return
            try:
                while os.read(self._fd, _EVENTS_BYTES):  # clear what is queued
                    pass
            except BlockingIOError:
                pass
            self.changed()

    def close(self) -> None:
        """Stop calling ``changed`` and free the watch (idempotent)."""
        if not self.active:
            return
        self.active = False
        os.write(self._stop_w, b"x")
        self._thread.join()
        for fd in (self._fd, self._stop_r, self._stop_w):
            os.close(fd)

    def __enter__(self) -> FolderWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
