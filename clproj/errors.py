"""Errors that tell the user both what went wrong and how to fix it."""

from __future__ import annotations


class ClprojError(Exception):
    """A user-facing failure: ``cause`` says what happened, ``fix`` what to do about it."""

    def __init__(self, cause: str, fix: str | None = None) -> None:
        super().__init__(cause)
        self.cause = cause
        self.fix = fix

    def __str__(self) -> str:
        return self.cause if not self.fix else f"{self.cause}\n  fix: {self.fix}"
