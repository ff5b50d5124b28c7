"""A signal that arrives while the app's main thread is inside a virtual-platform call is
handled by the app once that call has returned, as it would be natively.

Why: CPython runs a Python-level signal handler (``KeyboardInterrupt`` for SIGINT by
default) in the main thread at its next bytecode. Natively the app's OpenCL call is C
code, so the handler runs once the call has returned to the app. In route mode the call
runs Python (the cffi callback of :mod:`clproj.runtime.route.platform`), so the handler would
raise inside it: the call, which can only answer an error code, would swallow the
exception and the app would run on. So while the main thread is inside a call, each
Python handler of :data:`SIGNALS` is deferred, and run when the call has returned (a
one-shot profile hook, :func:`_arm`), in the app's own frame. Signals left to the kernel (SIG_DFL: a C app, SIGTERM to a Python app)
are untouched and end the process at once, as natively.

What an app may notice: ``signal.getsignal`` answers a :class:`Deferring` wrapper around
its handler (the handler itself is its ``handler`` attribute), and a KeyboardInterrupt's
traceback ends in one frame of ours (the wrapper or the hook), below the app's own.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
RECHECK_S = 0.25

_MAIN = threading.main_thread().ident
_entry: CodeType | None = None  # the code of the call's entry function
_depth = 0  # the main thread's calls in progress (0 or 1: calls do not nest)
_pending: list[int] = []
_previous: Any = None  # a profile hook the app had set, chained and restored
_checked_at = -1.0  # when the app's handlers were last looked at


class Deferring:
    """The app's handler for one signal, deferred while the main thread is in a call."""

    def __init__(self, handler: Callable[[int, FrameType | None], Any]) -> None:
        self.handler = handler

    def __call__(self, signum: int, frame: FrameType | None) -> Any:
        if _depth > 0 or _in_call(frame):  # in a call, or its frames are still returning
            _defer(signum)
            if _depth == 0:
                _arm()
            return None
        return self.handler(signum, frame)


def _defer(signum: int) -> None:
    if signum not in _pending:
        _pending.append(signum)


def _in_call(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code is _entry:
            return True
        frame = frame.f_back
    return False


def _arm() -> None:
    """Run the deferred handlers at the first profiling event outside the call's frames:
    the return of the app's (or pyopencl's) C call that entered the virtual platform.

    Why a profile hook and not ``_thread.interrupt_main``: a signal re-armed from Python
    is handled at the next bytecode, which is still the returning call's (so it would be
    deferred again, forever); the hook's first event outside is in the app's frame, and
    an exception it raises comes out of that C call, where a native app sees it too."""
    global _previous
    hook = sys.getprofile()
    if hook is _deliver:
        return
    _previous = hook
    sys.setprofile(_deliver)


def _deliver(frame: FrameType, event: str, arg: Any) -> None:
    if callable(_previous):
        _previous(frame, event, arg)
    if _depth > 0 or _in_call(frame):
        return
    sys.setprofile(_previous)
    due = list(_pending)
    _pending.clear()
    for sig in due:
        h = signal.getsignal(sig)
        if isinstance(h, Deferring):
            h.handler(sig, frame)


def watch(entry: Callable[..., Any]) -> None:
    """Name the function every call enters through (its frames are "inside a call"); in a
    C app, give SIGINT back to the kernel (:func:`_kernel_sigint_in_c_apps`)."""
    global _entry
    _entry = entry.__code__
    _kernel_sigint_in_c_apps()


def _kernel_sigint_in_c_apps() -> None:
    """Importing :mod:`signal` installs Python's SIGINT handler (KeyboardInterrupt) where
    SIGINT was SIG_DFL, also in the interpreter cffi embeds in a C app. No code of a C app
    ever runs it, so the app would never die of a Ctrl-C (measured: a looping C app under
    route mode ran on after SIGINT); the kernel's default is put back. A C app's own
    handler (seen by Python as ``None``) is left alone. ``sys.orig_argv`` is empty only
    in the embedded interpreter (intercept.hooks.at_exit)."""
    if getattr(sys, "orig_argv", None):
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        # ValueError: not the interpreter's main thread, only it may set handlers
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGINT, signal.SIG_DFL)


def enter() -> bool:
    """At the start of a call; True on the main thread, which must then :func:`leave`.

    The handlers are wrapped here, not once at start, because the app may set its own
    at any time (only the main thread may, and only it runs them); looked at every
    :data:`RECHECK_S` at most, as ``signal.getsignal`` costs ~1.2 us each here."""
    global _depth, _checked_at
    if threading.get_ident() != _MAIN:
        return False
    now = time.monotonic()
    if now - _checked_at > RECHECK_S:
        _checked_at = now
        for sig in SIGNALS:
            h = signal.getsignal(sig)
            if callable(h) and not isinstance(h, Deferring):
                signal.signal(sig, Deferring(h))
    _depth += 1
    return True


def leave() -> None:
    """At the end of a main-thread call: the signals deferred during it are armed."""
    global _depth
    _depth -= 1
    if _depth == 0 and _pending:
        _arm()
