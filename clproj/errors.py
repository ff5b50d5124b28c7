"""Errors that tell the user both what went wrong and how to fix it."""

from __future__ import annotations

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
