"""The emulator's fork server (``python -m clproj.miniemu.worker --serve``): runs of
recorded launches forked from one process that imported Python, numpy and pyopencl once,
and runs of one launch forked from a process that prepared it once (a *template*).

Why forks: a bounded emulation is several short runs of one launch (attempt, scout, loop
probes), and each started Python, numpy and pyopencl again: 0.3-0.45 s of imports per run
on the 2-core VM against 0.02-0.1 s of emulation in a probe. Why templates: a run forked
from the server still loads its record, makes an Oclgrind context, loads its program and
makes the kernel and its buffers (about 8.5 ms of a 15 ms run of 16k instructions, the
2-core VM); the runs of one emulation differ only in their budgets and in one scalar
argument (the probes' knob), so a template prepares the launch once, up to the moment
before it is enqueued (``intercept.replay.replay``'s ``before_launch``), and forks each run
from there (6.7 ms instead of 15.3 ms per run of 16k instructions). Its runs read their
budgets and output file when the kernel starts (the plugin reads ``CLPROJ_STATS_*`` at
each launch) and keep a log of their own (:func:`_own_log`).

Protocol: one JSON request a line on stdin:

* ``{"id": n, "record": path, "dir": folder, "env": {...}, "nice": k}``: a run. A child
  sets ``env``, lowers its priority to nice ``k`` where that is below the server's (a
  server shared by a whole ``clproj run`` serves threads that yield to the app and threads
  that run after it), sends its stdout/stderr to ``dir`` and runs the record as the
  one-shot worker does, loading a program an earlier run built (``--binaries``).
* ``{"id": t, "template": true, "record": path, "dir": folder, "env": {...}, "nice": k}``:
  a template: a child that prepares the record's launch and then serves runs of it.
  Where the preparation fails it exits with status 3, its error in ``dir``'s stderr.
* ``{"id": n, "from": t, "dir": folder, "env": {...}, "nice": k, "args": {"i": hex}}``:
  a run forked from template ``t``, scalar argument ``i`` set to the bytes ``hex``.
* ``{"signal": "kill"|"stop"|"cont", "to": n}``: to a run or a template.

It writes ``{"id": n, "status": s}`` (``s`` as ``Popen.returncode``) once run or template
``n`` has exited; a run whose template has gone gets status -9 (3 where the template failed
before serving it: its error is the template's). The server is single-threaded (a fork
copies only the forking thread) and runs with ``OPENBLAS_NUM_THREADS=1`` and
``PYOPENCL_NO_CACHE=1`` (miniemu.oclgrind says why); it ends its children and itself when
stdin closes. Every process here dies with the one that forked it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import sys
import traceback
from collections.abc import Iterator
from typing import Any

from clproj.miniemu.worker import run_record

SIGNALS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP, "cont": signal.SIGCONT}
WAKE_S = 0.25  # a loop looks for exited children at least this often


class Children:
    """The forked processes of one loop (the server's or a template's), which a child's
    exit wakes: SIGCHLD is written to a pipe the loop selects on. Polling every 5 ms made
    each run's result wait 2.5 ms on average, twice on a loop's probe path (the scout,
    then the probes). SIGCHLD is unblocked first: a signal mask is inherited through fork
    and exec, and the app thread that starts a route-mode app's server blocks every signal
    (its children's exits then never woke the loop, and its emulations waited for their
    time-out). ``WAKE_S``: a backstop, should a signal still not arrive."""

    def __init__(self) -> None:
        self.woken, self._wake = os.pipe()
        for fd in (self.woken, self._wake):
            os.set_blocking(fd, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self._wake)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        self.ids: dict[int, int] = {}  # pid -> request id

    def wait(self, fds: list[int]) -> list[int]:
        """The readable ones of ``fds`` (and this wake-up pipe, drained)."""
        ready, _, _ = select.select([*fds, self.woken], [], [], WAKE_S if self.ids else None)
        if self.woken in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(self.woken, 4096)
        return ready

    def fork(self, rid: int) -> bool:
        """Fork request ``rid``'s process: True in it (this loop's wake-up undone there),
        False here."""
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(self.woken)
            os.close(self._wake)
            return True
        self.ids[pid] = rid
        return False

    def signal(self, rid: int, sig: int) -> bool:
        """Send ``sig`` to request ``rid``'s process; False if it is not one of these."""
        for pid, other in self.ids.items():
            if other == rid:
                os.kill(pid, sig)
                return True
        return False

    def kill_all(self) -> None:
        for pid in self.ids:
            os.kill(pid, signal.SIGKILL)

    def reaped(self) -> Iterator[tuple[int, int]]:
        """(request id, status) of each child that has exited since the last call."""
        while self.ids:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            rid = self.ids.pop(pid, None)
            if rid is not None:
                yield rid, os.waitstatus_to_exitcode(status)


def _lines(fd: int, pending: bytearray) -> tuple[list[dict], bool]:
    """The whole JSON lines readable on ``fd`` now, and whether it is still open."""
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        return [], True
    pending += data
    out = []
    while b"\n" in pending:
        line, _, rest = bytes(pending).partition(b"\n")
        pending[:] = rest
        if line.strip():
            out.append(json.loads(line))
    return out, bool(data)


class _Template:
    """The server's side of a template: its pipes and the runs it has not reported."""

    def __init__(self, commands: int, reports: int) -> None:
        self.commands, self.reports = commands, reports
        self.pending: set[int] = set()
        self.buffer = bytearray()
        self.serving = False  # it has reported ready: its launch is prepared

    def send(self, req: dict) -> bool:
        """Pass a request on; False where the template has died (not yet reaped)."""
        try:
            os.write(self.commands, (json.dumps(req) + "\n").encode())
        except OSError:
            return False
        return True


def serve(binaries: str | None = None) -> int:  # noqa: C901
    """The server's loop (module docstring); ``binaries``: where its runs keep the
    programs they built, so that the next run of the same source loads it."""
    # What every run needs, imported once; nothing that creates an OpenCL context.
    import numpy  # noqa: F401
    import pyopencl.invoker  # noqa: F401  (a run's first cl.Kernel would import it: 1.6 ms)

    import clproj.intercept.record
    import clproj.intercept.replay
    import clproj.miniemu.profile  # noqa: F401

    server = os.getpid()
    kids = Children()
    templates: dict[int, _Template] = {}
    stdin, pending, open_ = sys.stdin.fileno(), bytearray(), True

    def report(rid: int, status: int) -> None:
        sys.stdout.write(json.dumps({"id": rid, "status": status}) + "\n")
        sys.stdout.flush()

    def relay(t: _Template) -> None:
        lines, _ = _lines(t.reports, t.buffer)
        for msg in lines:
            if msg.get("ready"):
                t.serving = True
                continue
            t.pending.discard(int(msg["id"]))
            report(int(msg["id"]), int(msg["status"]))

    def handle(req: dict) -> None:
        if "signal" in req:
            sig = SIGNALS.get(req["signal"])
            if sig is not None and not kids.signal(req["to"], sig):
                for t in templates.values():
                    if req["to"] in t.pending:
                        t.send(req)
            return
        rid = int(req["id"])
        if req.get("template"):
            commands, theirs = os.pipe()
            mine, reports = os.pipe()
            if kids.fork(rid):
                _template(req, server, binaries, commands, reports)  # never returns
            os.close(commands)
            os.close(reports)
            os.set_blocking(mine, False)
            templates[rid] = _Template(theirs, mine)
        elif "from" in req:
            t = templates.get(int(req["from"]))
            if t is None or not t.send(req):  # the template is gone (or going): so is the run
                report(rid, -int(signal.SIGKILL))
                return
            t.pending.add(rid)
        elif kids.fork(rid):
            _child(req, server, binaries)  # never returns

    while open_ or kids.ids:
        ready = kids.wait(([stdin] if open_ else []) + [t.reports for t in templates.values()])
        for t in list(templates.values()):
            if t.reports in ready:
                relay(t)
        if stdin in ready:
            lines, open_ = _lines(stdin, pending)
            if not open_:  # the driver is done (or gone): end what is left
                kids.kill_all()
            for req in lines:
                handle(req)
        for rid, status in kids.reaped():
            t = templates.pop(rid, None)
            if t is not None:  # its runs died with it; what it reported first still counts
                relay(t)
                for run in sorted(t.pending):
                    report(run, -int(signal.SIGKILL) if t.serving else status)
                os.close(t.commands)
                os.close(t.reports)
            report(rid, status)
    return 0


def _start(req: dict, parent: int) -> None:
    """What every forked process does first: its priority, its lifeline, its environment
    and its output files."""
    nice = int(req.get("nice", 0))  # first: the asking thread may be yielding to an app
    if nice > os.getpriority(os.PRIO_PROCESS, 0):  # never raise priority
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    from clproj.lifeline import die_with_starter

    die_with_starter(parent)
    os.environ.update({str(k): str(v) for k, v in req.get("env", {}).items()})
    for fd, name in ((1, "stdout"), (2, "stderr")):
        out = os.open(os.path.join(req["dir"], name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, fd)
        os.close(out)
    sys.stdout = os.fdopen(1, "w", closefd=False)
    sys.stderr = os.fdopen(2, "w", closefd=False)


def _ended(rc: int) -> None:
    """A forked process ends here, whatever happened (no interpreter shutdown)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(rc)


def _child(req: dict, server: int, binaries: str | None) -> None:
    """A run forked from the server: the record, as the one-shot worker runs it."""
    rc = 1
    try:
        _start(req, server)
        rc = run_record(req["record"], binaries)
    except BaseException:  # the child must end here, whatever happened
        traceback.print_exc()
    finally:
        _ended(rc)


def _template(req: dict, server: int, binaries: str | None, commands: int, reports: int) -> None:
    """A template: the record's launch prepared, then a run forked per request. Its runs
    return from ``before_launch`` and go on with the launch; the template never does."""
    rc = 1
    template = os.getpid()
    try:
        _start(req, server)
        log = os.environ.get("OCLGRIND_LOG", "")

        def serve_runs(kernel: Any) -> None:  # returns in a run only, to launch
            os.write(reports, b'{"ready": true}\n')
            _serve_runs(kernel, template, log, commands, reports)

        rc = run_record(req["record"], binaries, before_launch=serve_runs)
    except BaseException:
        traceback.print_exc()
    finally:
        _ended(rc)


def _serve_runs(kernel: Any, template: int, log: str, commands: int, reports: int) -> None:
    """The template's loop: fork a run per request until the server closes the pipe."""
    from clproj.intercept.replay import set_scalar

    kids = Children()
    pending, open_ = bytearray(), True

    def run(req: dict) -> None:
        os.close(commands)
        os.close(reports)
        _start(req, template)
        _own_log(log, os.environ.get("OCLGRIND_LOG", ""))
        for index, data in req.get("args", {}).items():
            set_scalar(kernel, int(index), bytes.fromhex(data))
        # returns into intercept.replay.replay: the launch, then the run's end (_template)

    while open_ or kids.ids:
        ready = kids.wait([commands] if open_ else [])
        if commands in ready:
            lines, open_ = _lines(commands, pending)
            if not open_:
                kids.kill_all()
            for req in lines:
                if "signal" in req:
                    kids.signal(req["to"], SIGNALS[req["signal"]])
                    continue
                if kids.fork(int(req["id"])):
                    run(req)
                    return  # the run goes on into the launch
        for rid, status in kids.reaped():
            os.write(reports, (json.dumps({"id": rid, "status": status}) + "\n").encode())
    os._exit(0)


def _own_log(template_log: str, run_log: str) -> None:
    """Point Oclgrind's log at the run's own file. Oclgrind opens it when the context is
    made (in the template): the run's file starts with what the template logged (its
    build) and takes what the run logs, as a run of its own would have it."""
    if not template_log or not run_log:
        return
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target == template_log:
            shutil.copyfile(template_log, run_log)
            fd = os.open(run_log, os.O_WRONLY | os.O_APPEND)
            os.dup2(fd, int(name))
            os.close(fd)
            return
