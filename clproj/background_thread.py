"""Threads clproj starts inside someone else's process never take that process's signals.

Why: a signal sent to a process (``kill``, Ctrl-C, ``clproj run`` forwarding one) is
delivered by Linux to *any* of its threads that does not block it. CPython runs its
handlers on the main thread only, but a signal taken by another thread does not wake a
main thread that sleeps in a system call: an app in ``time.sleep`` (or a C app in
``pause()`` or ``sigsuspend()``) then misses its Ctrl-C until the call ends on its own.
Measured on the 2-core VM (a PyOpenCL app sleeping after its first launch, SIGINT sent to
``clproj run --mode project`` and forwarded, both cores busy): the app missed the signal
in 3 of 80 runs while the shim's record writer and projection threads could take it, in
0 of 80 once they blocked it (the plain app, no clproj: 1 of 80, through PoCL's threads).
A library's helper threads must leave the application's signals to the application's
threads, as libzmq's I/O threads do: every thread clproj starts blocks the asynchronous
signals.

Synchronous faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT) stay
unblocked: they are raised by the faulting thread itself, and a blocked fault kills the
process without its handler.
"""

from __future__ import annotations

import contextvars
import signal
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_SYNCHRONOUS = {
    signal.SIGSEGV,
    signal.SIGBUS,
    signal.SIGFPE,
    signal.SIGILL,
    signal.SIGTRAP,
    signal.SIGSYS,
    signal.SIGABRT,
    signal.SIGKILL,
    signal.SIGSTOP,
}

# Every signal an application may wait for: the terminal's and kill's, timers, children,
# user signals and the real-time range.
APP_SIGNALS = frozenset(signal.valid_signals()) - _SYNCHRONOUS


def block_app_signals() -> None:
    """Block :data:`APP_SIGNALS` in the calling thread (and the threads it starts): the
    first thing every :func:`background_thread` does."""
    signal.pthread_sigmask(signal.SIG_BLOCK, APP_SIGNALS)


def background_thread(
    target: Callable[..., Any],
    name: str,
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
) -> threading.Thread:
    """A daemon thread (not started) that runs ``target`` with the app's signals blocked."""

    def run() -> None:
        block_app_signals()
        target(*args, **(kwargs or {}))

    return threading.Thread(target=run, name=name, daemon=True)


def map_in_threads(
    fn: Callable[[T], R], items: Iterable[T], name: str, workers: int | None = None
) -> list[R]:
    """``[fn(x) for x in items]`` on at most ``workers`` (default: one per item)
    :func:`background_thread` s, results in item order; the first exception (in item
    order) is raised once all have ended.

    Why not ``ThreadPoolExecutor``: an exiting interpreter joins every executor thread
    before it runs ``atexit``, so an app whose kernel was being emulated in parallel
    probes (miniemu.bounded) would wait for them to end. These are daemon threads; the
    emulators they wait for die with the process (``miniemu.worker --parent-pid``).
    Each thread sees the caller's context variables (a copy of its context).
    """
    work = list(items)
    results: list[Any] = [None] * len(work)
    errors: list[BaseException | None] = [None] * len(work)
    claimed = iter(range(len(work)))
    lock = threading.Lock()

    def serve() -> None:
        while True:
            with lock:
                i = next(claimed, None)
            if i is None:
                return
            try:
                results[i] = fn(work[i])
            except BaseException as exc:  # re-raised on the caller's thread below
                errors[i] = exc

    count = min(len(work), workers or len(work))
    # each thread runs in a copy of the caller's context: its context variables (e.g. the
    # priority of emulator runs, miniemu.oclgrind.runs_at_nice) hold there too
    threads = [
        background_thread(contextvars.copy_context().run, f"{name}-{k}", (serve,))
        for k in range(count)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for exc in errors:
        if exc is not None:
            raise exc
    return results
