"""Hooks called with every launch record the shim writes (inside the intercepted app).

This is the plug-in point for ``--mode project``: the projection package registers a
function taking a :class:`intercept.record.LaunchRecord` (already saved, so ``record.path``
is set). Hooks are named in ``CLPROJ_HOOKS`` as ``module:function`` (comma-separated) and
imported the first time a record is written. A hook runs in the application's thread at
a recorded launch, so it must be quick (hand heavy work to a thread or subprocess); its
exceptions are logged once and never reach the application.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from clproj import settings
from clproj.intercept.record import LaunchRecord

Hook = Callable[[LaunchRecord], None]
_hooks: list[Hook] = []
_loaded = False
_failed: set[str] = set()


def register(fn: Hook) -> Hook:
    """Call ``fn(record)`` for every record written from now on (usable as a decorator)."""
    _hooks.append(fn)
    return fn


def _load_env_hooks() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for spec in settings.get("CLPROJ_HOOKS"):
        module, _, name = spec.partition(":")
        try:
            register(getattr(importlib.import_module(module), name or "on_record"))
        except Exception as exc:  # a broken hook must not break the app
            print(f"clproj: cannot load hook {spec}: {exc!r}", file=sys.stderr)


Admit = Callable[[LaunchRecord], bool]
_admitters: dict[str, Admit] = {}


def register_admission(mode: str, fn: Admit) -> Admit:
    """Let ``fn(record)`` decide, in ``mode`` (``project`` or ``route``), whether a launch is
    snapshotted and recorded (True) or answered without its buffers (False: e.g. from a
    reuse cache). Why here: the shim and route mode ask this registry, never the projection
    package itself, so intercept/ depends on runtime/ only through the hooks it loads."""
    _admitters[mode] = fn
    return fn


def admit(mode: str, record: LaunchRecord) -> bool:
    """Whether to snapshot and record this launch (metadata only in ``record``): the
    admission registered for ``mode`` by a hook module, else always (every launch of a new
    signature is recorded when no hook answers launches from a cache)."""
    _load_env_hooks()
    fn = _admitters.get(mode)
    return True if fn is None else fn(record)


def notify(record: LaunchRecord) -> None:
    """Run every hook on ``record``; failures are logged once per hook."""
    _load_env_hooks()
    for fn in list(_hooks):
        try:
            fn(record)
        except Exception as exc:
            key = getattr(fn, "__qualname__", repr(fn))
            if key not in _failed:
                _failed.add(key)
                print(f"clproj: hook {key} failed: {exc!r}", file=sys.stderr)


_exit_fns: list[Callable[[], None]] = []
_exit_lock = threading.Lock()
_c_callback = None  # keeps the ctypes thunk alive for the C library
_exit_pid = 0  # the process that registered them (a forked child runs none)


_exiting = False


def exiting() -> bool:
    """True once the process runs its exit functions (:func:`at_exit`). A hook called then
    (the record writer drains its queue at exit) must not start threads or native work:
    the interpreter is shutting down, and a thread killed inside native code aborts the
    process ("FATAL: exception not rethrown")."""
    return _exiting


def _run_exit_fns() -> None:
    global _exiting
    _exiting = True
    with _exit_lock:
        fns = list(reversed(_exit_fns))
        _exit_fns.clear()
    if os.getpid() != _exit_pid:
        # A child forked from the app (a C fork() keeps the registration, as does Python's
        # atexit): what these close is its parent's (the route cluster it started, its
        # record writer's thread, which the child lacks: a drain would wait for it).
        fns = []
    for fn in fns:
        try:
            fn()
        except Exception as exc:  # exit must go on
            print(f"clproj: at exit: {exc!r}", file=sys.stderr)
    _keep_sigint_death()


def _keep_sigint_death() -> None:
    """A Python app whose main code ended in an unhandled KeyboardInterrupt must die of
    SIGINT (exit status 130 from a shell), as it does natively.

    Why this is needed: CPython (3.11) remembers that unhandled KeyboardInterrupt in one
    process-wide flag, ``_Py_UnhandledKeyboardInterrupt``, and every ``exec`` of a *string*
    clears it, in any thread. clproj's background threads may still be importing while the
    app unwinds (a cold cache: projections in flight), and importing a module with a
    dataclass execs a string (dataclasses build ``__init__`` so): the app then exited 1
    instead of dying of SIGINT (measured: 3 of 6 runs of a routed pyopencl loop, a hardware
    watchpoint on the flag caught dataclasses' exec clearing it). ``sys.last_type`` (set
    when the interpreter printed the app's traceback) says what the app ended with; the flag
    is set again after clproj's own exit work.

    The flag can still be cleared after that: by an exit function registered before ours
    (they run after it) or a thread that runs before the interpreter stops them (seen once
    in a loaded test run: exit status 1; reproduced with an earlier-registered exit
    function that execs a string). So the C library's ``raise(SIGINT)`` is also registered
    to run at the process's ``exit()``: reached only where the interpreter returned an exit
    status instead of dying of SIGINT itself (it kills itself before ``exit()`` when the
    flag holds), once finalization has put SIGINT's default action back."""
    if getattr(sys, "last_type", None) is not KeyboardInterrupt or not getattr(
        sys, "orig_argv", None
    ):
        return
    import ctypes
    import signal

    with contextlib.suppress(ValueError, AttributeError):  # other interpreter versions
        ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt").value = 1
    with contextlib.suppress(OSError, AttributeError):
        c_raise = ctypes.CDLL(None)["raise"]  # a C symbol, not private
        _at_c_exit(ctypes.cast(c_raise, ctypes.c_void_p), ctypes.c_void_p(int(signal.SIGINT)))


def _at_c_exit(fn: Any, arg: Any) -> None:
    """Have the C library's ``exit()`` call ``fn(arg)`` (``__cxa_atexit``: C handlers, run
    after the interpreter's own exit functions when there is an interpreter to finalize)."""
    import ctypes

    ctypes.CDLL(None)["__cxa_atexit"](fn, arg, None)  # a C symbol, not private


def at_exit(fn: Callable[[], None], *, last: bool = False) -> None:
    """Run ``fn`` once when the intercepted process exits (last registered, first run;
    ``last``: after every other, for removing what the others may still use).

    Buffered work of the shim (records written by a background thread, buffered lines)
    must be drained before ``clproj run`` reads it. In a Python app the interpreter is
    finalized: :mod:`atexit` runs. In a C app the interpreter cffi embedded is never
    finalized (``sys.orig_argv`` is empty there), so the function is registered with
    the C library (``__cxa_atexit``) and runs from ``exit()`` while the interpreter is
    still alive; registering it there in a Python app would run it after finalization.
    """
    global _c_callback, _exit_pid
    with _exit_lock:
        first = not _exit_fns
        if first:
            _exit_pid = os.getpid()
        if last:
            _exit_fns.insert(0, fn)
        else:
            _exit_fns.append(fn)
    if not first:
        return
    if getattr(sys, "orig_argv", None):
        atexit.register(_run_exit_fns)
        return
    import ctypes

    _c_callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _arg: _run_exit_fns())
    _at_c_exit(_c_callback, None)
