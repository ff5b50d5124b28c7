"""Whatever clproj starts dies with what started it.

Two mechanisms, because neither covers every case alone:
- :func:`die_with_parent` (``prctl(PR_SET_PDEATHSIG)``) for a child whose parent *thread*
  lives as long as the parent process (``clproj run`` starting the app): the kernel sends
  the signal even when the parent is SIGKILLed.
- :func:`watch_parent` (a polling thread) for helpers started from inside an application
  (route mode's broker and node): there the starting thread may be any thread of the app,
  and PDEATHSIG fires when that *thread* exits, which would kill the cluster under a
  healthy app. Polling ``getppid`` costs nothing measurable at 4 Hz.

And a death seen from outside as what it is: :func:`die_by` ends a clproj process by the
signal that ended what it ran (or interrupted it), so its parent and a shell see a death
by that signal, not an exit status.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from clproj.background_thread import background_thread

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _libc_prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None  # not Linux: the parent's own cleanup still runs on an orderly exit


# Looked up when this module is imported, in the parent: a forked child (a ``preexec_fn``)
# must not dlopen, whose loader lock another thread may have held at the fork.
_PRCTL = _libc_prctl()


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """In a freshly forked child (``preexec_fn``): receive ``sig`` when the parent dies.

    "Parent" is the thread that forked: use it for children that thread waits for. Only
    in children of clproj's own processes (``clproj run``, ``clproj replay``): see
    :func:`die_with_starter` for children started inside an application."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def die_by(sig: int) -> None:
    """End this process by signal ``sig``, as its parent should see it end; returns only
    where the signal did not end it.

    Why not ``exit(128 + sig)``: a parent tells the two apart (``-2`` from Python's
    ``subprocess``, not 130), and bash stops a loop at Ctrl-C only when its job died of
    SIGINT (the cooperative exit every wrapper of a foreground job owes its shell). What
    Python would do at exit is done first: the standard streams are flushed. No core file
    (a SIGQUIT or SIGSEGV re-raised here is the app's, which dumped its own)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    with contextlib.suppress(ValueError, OSError):  # SIGKILL has no handler to reset
        signal.signal(sig, signal.SIG_DFL)
    with contextlib.suppress(ValueError, OSError):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
    os.kill(os.getpid(), sig)


def die_with_starter(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """The first thing a helper does after its exec: die with the thread that started it
    (``PR_SET_PDEATHSIG``), or exit now if ``parent_pid`` is already gone.

    Why not a ``preexec_fn``: with one, ``subprocess`` forks instead of using ``vfork``,
    and a fork runs every ``pthread_atfork`` handler of the process. Inside an application
    those are the app's: OpenBLAS's shuts its thread pool down, beside an app thread that
    is inside a BLAS call, and the app hangs for good. Measured on the 2-core VM: a thread
    starting ``true`` with a ``preexec_fn`` in a loop beside numpy's complex ``dot`` on
    200,000 elements hung the dot loop within its first 2,000 calls; without one (vfork),
    19,438 calls in 20 s. pyopencl's ``test_dot`` under ``clproj run --mode project`` hung
    the same way (its in-app emulator was started with a ``preexec_fn``)."""
    die_with_parent(sig)
    if os.getppid() != parent_pid:  # it died before the setting took: nobody waits for us
        os._exit(1)


def watch_parent(
    pid: int, on_gone: Callable[[], None], grace_s: float = 5.0, interval_s: float = 0.25
) -> threading.Thread:
    """Call ``on_gone`` once process ``pid`` (our parent) has exited, even by SIGKILL.

    A dead parent is seen as re-parenting (``getppid`` changes). ``on_gone`` should stop
    the process in an orderly way; if it is still alive ``grace_s`` later it exits hard,
    so a stuck shutdown never leaves an orphan holding sockets and shared memory.
    """

    def run() -> None:
        while os.getppid() == pid:
            time.sleep(interval_s)
        on_gone()
        time.sleep(grace_s)
        os._exit(1)

    th = background_thread(run, "clproj-lifeline")
    th.start()
    return th


class Signalled(BaseException):
    """Raised in the main thread by a signal :func:`unwinding_on` turns into an exception."""

    def __init__(self, sig: int) -> None:
        super().__init__(sig)
        self.sig = sig


@contextlib.contextmanager
def unwinding_on(*sigs: int) -> Iterator[None]:
    """Within the block, ``sigs`` (e.g. SIGTERM, SIGHUP) unwind it as an exception, so
    every ``with`` inside it cleans up (temporary folders, helper processes), and then end
    the process by that signal (:func:`die_by`). Why: their default action ends the process
    at once, leaving ``clproj run``'s folders in /tmp when one arrived before the app
    started or after it ended. A signal the parent had ignored (``nohup``) stays ignored.
    Main thread only, as Python's signal handlers are."""

    def unwind(sig: int, _frame: Any) -> None:
        raise Signalled(sig)

    previous = {}
    for sig in sigs:
        if signal.getsignal(sig) is signal.SIG_DFL:
            previous[sig] = signal.signal(sig, unwind)
    try:
        yield
    except Signalled as exc:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        previous = {}
        die_by(exc.sig)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
