"""clproj's own standard streams in any state: closed, a pipe whose reader left, a full disk.

Why: ``clproj run`` is a wrapper, and a wrapper's exit status is the app's. clproj's own
output (tables, notes, errors) can fail where the app's did not: ``clproj run -- app |
head -1`` (the reader is gone when the summary comes), ``>&-`` (no stdout at all: Python
starts with ``sys.stdout`` None), ``2>&-``, ``>/dev/full`` (every write fails with
ENOSPC). None of these may stop the app from running or become its exit status: what
clproj cannot write is dropped, wherever in clproj the write is.
"""

from __future__ import annotations

import io
import os
import select
import sys
from typing import Any


class DescriptorStream(io.TextIOBase):
    """A text stream that writes straight to a descriptor and drops what it cannot write.

    Unbuffered on purpose: a buffered stream keeps what it failed to write and fails again
    at every later flush, the interpreter's own at exit included (which turns the exit
    status into 120)."""

    def __init__(self, fd: int, like: Any) -> None:
        super().__init__()
        self._fd = fd
        self._encoding = getattr(like, "encoding", None) or "utf-8"
        self._errors = getattr(like, "errors", None) or "backslashreplace"
        self.failed = False  # the descriptor refused a write: nothing more is tried

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._encoding

    @property
    def errors(self) -> str:  # type: ignore[override]
        return self._errors

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        try:
            return os.isatty(self._fd)
        except OSError:
            return False

    def write(self, text: str) -> int:
        if self.failed:
            return len(text)
        data = memoryview(text.encode(self._encoding, self._errors))
        try:
            while data:
                try:
                    data = data[os.write(self._fd, data) :]
                except BlockingIOError:  # a non-blocking descriptor the shell handed us
                    select.select([], [self._fd], [])
        except OSError:  # EPIPE, EBADF, ENOSPC, EIO: the stream failed, not clproj
            self.failed = True
        return len(text)

    def flush(self) -> None:
        """Nothing is buffered."""


def reserve_closed() -> None:
    """Give each closed standard descriptor (0, 1, 2) a close-on-exec ``/dev/null``.

    Why: a file clproj opens would otherwise take the lowest free number and become the
    app's stdout or stderr; close-on-exec keeps the app's view as it was (closed), since
    ``clproj run`` hands its own descriptors on unchanged."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
            if null != fd:  # another thread took fd meanwhile: keep ours closed on exec
                os.dup2(null, fd, inheritable=False)
                os.close(null)


def protect() -> None:
    """Make the process's stdout and stderr safe for clproj to write to, in any state.

    Only the process's own streams are replaced: a caller that redirected them (a test
    capturing output, a program embedding clproj's CLI) keeps its own."""
    reserve_closed()
    for name, fd in (("stdout", 1), ("stderr", 2)):
        current = getattr(sys, name)
        if current is not getattr(sys, f"__{name}__") or isinstance(current, DescriptorStream):
            continue
        if current is not None:
            try:
                current.flush()
            except (OSError, ValueError):
                continue  # cannot be emptied: left alone rather than written to twice
        setattr(sys, name, DescriptorStream(fd, current))
