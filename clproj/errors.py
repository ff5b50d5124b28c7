"""Errors that tell the user both what went wrong and how to fix it."""

from __future__ import annotations

import sys
import threading

# The exit status of a command that failed with a ClprojError.
ERROR_STATUS = 2
# What a shell, ``env`` and ``timeout`` exit with when the program to start does not exist
# (127) or cannot be executed (126): ``clproj run -- CMD`` says the same, so a script that
# tells "no such program" from "the program failed" still can.
NOT_FOUND_STATUS = 127
CANNOT_EXECUTE_STATUS = 126


class ClprojError(Exception):
    """A user-facing failure: ``cause`` says what happened, ``fix`` what to do about it,
    ``status`` the exit status of the command it ends."""

    def __init__(self, cause: str, fix: str | None = None, status: int = ERROR_STATUS) -> None:
        super().__init__(cause)
        self.cause = cause
        self.fix = fix
        self.status = status

    def __str__(self) -> str:
        return self.cause if not self.fix else f"{self.cause}\n  fix: {self.fix}"


_said: set[str] = set()
_said_lock = threading.Lock()


def say_once(key: str, message: str) -> None:
    """Print ``clproj: message`` to stderr the first time ``key`` is seen in this process.
    Why one set for the process: a condition that holds for every later call (a full
    disk, a cache that cannot be written, a call route mode cannot make) is worth one line,
    whichever module meets it first; keys name the condition, e.g. ``route:exit``."""
    with _said_lock:
        if key in _said:
            return
        _said.add(key)
    print(f"clproj: {message}", file=sys.stderr)
