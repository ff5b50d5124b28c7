"""How a failing call of the virtual platform is answered: an OpenCL error code, logged once.

Why: route mode runs inside the application; a failure must come back as the code the
application checks (never as a Python exception into its OpenCL call), and a failure that
repeats on every call must not flood its stderr.
"""

from __future__ import annotations

from clproj.errors import say_once


def log_once(key: str, message: str) -> None:
    """Print ``route: message`` to stderr the first time ``key`` is seen in this process
    (:func:`clproj.errors.say_once`, keys of route mode's own)."""
    say_once(f"route:{key}", f"route: {message}")


class CLError(Exception):
    """A call's failure as the OpenCL error code it returns (``why`` for the log)."""

    def __init__(self, code: int, why: str = "") -> None:
        super().__init__(why or str(code))
        self.code = code
