"""Subprocess entry point: ``python -m clproj.miniemu.worker RECORD [--parent-pid PID] [--nice N]``,
or ``python -m clproj.miniemu.worker --serve ...``: the fork server of bounded emulation.

Run by :class:`miniemu.oclgrind.OclgrindBackend` with ``LD_PRELOAD=liboclgrind-rt.so`` and
``OCLGRIND_PLUGINS=<our plugin>``: the preloaded runtime's ``cl*`` symbols win over
pyopencl's bundled ICD loader, so the replay runs inside Oclgrind and the plugin writes
its statistics to ``$CLPROJ_STATS_OUT``. Keeping this in a separate process is what lets
the caller kill a slow or crashing emulation without harming the app or the broker.

``--parent-pid``: die with the thread that started the worker (``clproj.lifeline.
die_with_starter``); ``--nice``: lower its own priority (inside an app the emulator must
not take the app's cores). The worker does both itself, after its exec: a ``preexec_fn``
would make the caller fork, and a fork inside an app runs the app's ``pthread_atfork``
handlers (OpenBLAS hangs, see clproj.lifeline).

``--serve``: import once, fork a child per run. A bounded emulation is several short runs
of the same launch (attempt, scout, loop probes) and each started Python, numpy and
pyopencl again: 0.3-0.45 s of imports per run on the 2-core VM against 0.02-0.1 s of
emulation in a probe, so the probes cost more than the kernel. The server reads one JSON
request a line on stdin (``{"id": n, "record": path, "dir": folder, "env": {...},
"nice": k}`` or ``{"signal": "kill"|"stop"|"cont", "to": n}``) and forks a child that
sets ``env`` (the plugin and Oclgrind's logger read it when the child creates its OpenCL
context: nothing of Oclgrind is created before the fork), lowers its own priority to nice
``k`` where that is below the server's (a server shared by a whole ``clproj run`` serves
threads that yield to the app and threads that run after it), sends its stdout/stderr to
``dir`` and runs the record as the one-shot worker does, except that a program an earlier
run built is loaded from its binary (``--binaries``, ``intercept.built_programs``: 10-14 ms
of clang per run saved). The server writes
``{"id": n, "status": s}`` when the child has exited (``s`` as ``Popen.returncode``).
The server itself is single-threaded (a fork copies only the forking thread) and runs
with ``OPENBLAS_NUM_THREADS=1`` (no BLAS thread pool to fork beside) and
``PYOPENCL_NO_CACHE=1`` (pyopencl's compiler cache takes a lock file that a paused or
killed child would hold: the others waited 60 s, then failed); it ends its children and
itself when stdin closes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import sys
import traceback


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m clproj.miniemu.worker")
    p.add_argument("record", nargs="?")
    p.add_argument("--parent-pid", type=int, default=0)
    p.add_argument("--nice", type=int, default=0)
    p.add_argument("--serve", action="store_true", help="fork server (module docstring)")
    p.add_argument("--binaries", help="--serve: the folder of its runs' built programs")
    args = p.parse_args(argv)
    if args.parent_pid:
        from clproj.lifeline import die_with_starter

        die_with_starter(args.parent_pid)
    if args.nice:
        os.nice(args.nice)
    if args.serve:
        return serve(args.binaries)
    if not args.record:
        p.error("RECORD is required without --serve")
    return run_record(args.record)


def run_record(path: str, binaries: str | None = None) -> int:
    """Replay the record at ``path`` inside Oclgrind; 0, or 3 after a reported error.
    ``binaries``: programs built by earlier runs (``intercept.built_programs``)."""
    from clproj.errors import ClprojError
    from clproj.intercept.record import load
    from clproj.intercept.replay import replay
    from clproj.miniemu.profile import emulated_local_size

    try:
        record = load(path)
        if record.local_size is None:
            # The driver would choose; Oclgrind would choose one work-item. Emulate a
            # representative group instead; the projection regroups for each device.
            record.local_size = emulated_local_size(record.global_size)
        # Oclgrind's limits are nominal; the buffers are mapped, not read, and nothing is
        # read back: the statistics are the result.
        result = replay(
            record, device_limits=False, map_buffers=True, read_outputs=False, binaries=binaries
        )
    except ClprojError as exc:
        # one marked line each, found by the parent among the emulator's own output
        sys.stderr.write(f"{ERROR_MARK}{' '.join(exc.cause.split())}\n")
        if exc.fix:
            sys.stderr.write(f"{FIX_MARK}{' '.join(exc.fix.split())}\n")
        return 3
    # Oclgrind's profiling event spans the emulation of the kernel alone (benchmarks use it).
    sys.stdout.write(json.dumps({"kernel_time_ns": result.time_ns}) + "\n")
    return 0


def serve(binaries: str | None = None) -> int:  # noqa: C901
    """The fork server's loop (module docstring); ``binaries``: where its runs keep the
    programs they built, so that the next run of the same source loads it."""
    # What every run needs, imported once; nothing that creates an OpenCL context.
    import numpy  # noqa: F401
    import pyopencl.invoker  # noqa: F401  (a run's first cl.Kernel would import it: 1.6 ms)

    import clproj.intercept.record
    import clproj.intercept.replay
    import clproj.miniemu.profile  # noqa: F401

    server = os.getpid()
    children: dict[int, int] = {}  # pid -> request id
    pending = b""
    stdin = sys.stdin.fileno()
    # A child's exit wakes the loop (SIGCHLD written to a pipe it selects on): polling
    # every 5 ms made each run's result wait 2.5 ms on average, twice on a loop's probe
    # path (the scout, then the probes). SIGCHLD is unblocked first: a signal mask is
    # inherited through fork and exec, and the app thread that starts a route-mode app's
    # server blocks every signal (its children's exits then never woke the loop, and its
    # emulations waited for their time-out). WAKE_S: a backstop, should a signal still
    # not arrive.
    woken, wake = os.pipe()
    for fd in (woken, wake):
        os.set_blocking(fd, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
    open_ = True
    while open_ or children:
        ready, _, _ = select.select(
            [stdin, woken] if open_ else [woken], [], [], WAKE_S if children else None
        )
        if woken in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(woken, 4096)
        if stdin in ready:
            data = os.read(stdin, 65536)
            if not data:  # the driver is done (or gone): end what is left
                open_ = False
                for pid in children:
                    os.kill(pid, signal.SIGKILL)
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                if not line.strip():
                    continue
                req = json.loads(line)
                if "signal" in req:  # {"signal": n, "to": id}: SIGKILL, SIGSTOP, SIGCONT
                    for pid, rid in children.items():
                        if rid == req["to"] and req["signal"] in _SIGNALS:
                            os.kill(pid, _SIGNALS[req["signal"]])
                    continue
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    os.close(woken)
                    os.close(wake)
                    _child(req, server, binaries)  # never returns
                children[pid] = int(req["id"])
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            rid = children.pop(pid, None)
            if rid is not None:
                rc = os.waitstatus_to_exitcode(status)
                sys.stdout.write(json.dumps({"id": rid, "status": rc}) + "\n")
                sys.stdout.flush()
    return 0


_SIGNALS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP, "cont": signal.SIGCONT}
WAKE_S = 0.25  # the server's loop looks for exited runs at least this often


def _child(req: dict, server: int, binaries: str | None) -> None:
    """A forked run: its own environment and output files, then the record; exits."""
    rc = 1
    try:
        nice = int(req.get("nice", 0))  # first: the asking thread may be yielding to an app
        if nice > os.getpriority(os.PRIO_PROCESS, 0):  # never raise priority
            os.setpriority(os.PRIO_PROCESS, 0, nice)
        from clproj.lifeline import die_with_starter

        die_with_starter(server)
        os.environ.update({str(k): str(v) for k, v in req.get("env", {}).items()})
        for fd, name in ((1, "stdout"), (2, "stderr")):
            out = os.open(os.path.join(req["dir"], name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(out, fd)
            os.close(out)
        sys.stdout = os.fdopen(1, "w", closefd=False)
        sys.stderr = os.fdopen(2, "w", closefd=False)
        rc = run_record(req["record"], binaries)
    except BaseException:  # the child must end here, whatever happened
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(rc)


ERROR_MARK = "clproj-worker-error: "
FIX_MARK = "clproj-worker-fix: "


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
