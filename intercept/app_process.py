"""Run the user's application under ``clproj run`` as a shell runs a foreground job.

What a user expects of a wrapper, and why each piece is here:
- Ctrl-C and ``kill`` reach the app, once. The app runs in its own process group; with a
  controlling terminal that group is made the terminal's foreground group (as job-control
  shells do), so a Ctrl-C goes to the app alone, and ``clproj run`` lives on to print what
  it measured and projected. SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to ``clproj run``
  itself are forwarded to the app's group.
- The app dies with ``clproj run``: ``PR_SET_PDEATHSIG`` (clproj.lifeline) kills it if
  ``clproj run`` is itself killed by SIGKILL.
- The exit status is the app's: its code, or a death by the signal that killed it, named on
  stderr. ``clproj run`` ends by that signal too once its report is out (:func:`end_like`),
  as a shell's wrapper must: a parent sees what it would see of the app alone (``-11``
  from Python's ``subprocess``, not 139), and a shell loop stops at Ctrl-C, which it
  does only when its job died of SIGINT (an exit status of 130 lets the loop run on).
- Signals its starter left ignored stay ignored in the app (``nohup``, a script's
  background job ignoring SIGINT). An OpenCL driver loaded into ``clproj run`` itself
  (project and route modes list the local devices; PoCL catches SIGINT, SIGTERM and
  more as it initialises) would otherwise hand the app caught-then-default signals: a
  background job that ignores Ctrl-C natively would die of it under ``clproj run``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from typing import Any, NamedTuple

from clproj.errors import CANNOT_EXECUTE_STATUS, NOT_FOUND_STATUS, ClprojError
from clproj.lifeline import die_by, die_with_parent

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
# The interpreter ignores these itself; subprocess gives the app their defaults back.
_PYTHON_IGNORES = frozenset({signal.SIGPIPE, signal.SIGXFSZ})
# Signals this process was started with ignored: Python's record of the dispositions it
# found at start up, which a driver's sigaction() calls since then do not change.
INHERITED_IGNORED = frozenset(
    s for s in signal.valid_signals() - _PYTHON_IGNORES if signal.getsignal(s) is signal.SIG_IGN
)


def _terminal_fd() -> int | None:
    """The controlling terminal, when this process is in its foreground group."""
    for stream in (sys.stdin, sys.stderr, sys.stdout):
        try:
            fd = stream.fileno()
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                return fd
        except (OSError, ValueError, AttributeError):
            continue
    return None


def _child_setup(tty: int | None) -> None:
    """In the forked child, before exec: the starter's ignored signals, own group,
    foreground on the terminal, die with us."""
    for sig in INHERITED_IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    os.setpgid(0, 0)
    if tty is not None:
        old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        with contextlib.suppress(OSError):
            os.tcsetpgrp(tty, os.getpgrp())
        signal.signal(signal.SIGTTOU, old)
    die_with_parent(signal.SIGKILL)


class AppExit(NamedTuple):
    """How the app ended: ``status`` as a shell reports it (its code, or 128+N after a
    death by signal N: the reports and ``--json`` show this), ``signal`` N or None."""

    status: int
    signal: int | None = None


def run_app(cmd: list[str], env: dict[str, str], stdout: Any = None) -> AppExit:
    """Run ``cmd`` to its end."""
    tty = _terminal_fd()
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=stdout, preexec_fn=lambda: _child_setup(tty))
    except FileNotFoundError:
        raise ClprojError(
            f"command not found: {cmd[0]}", "check the command after --", NOT_FOUND_STATUS
        ) from None
    except OSError as exc:  # not executable, not a program (ENOEXEC), ...
        raise ClprojError(
            f"cannot run {cmd[0]}: {exc.strerror or exc}",
            "give an executable program (or `python SCRIPT`) after --",
            CANNOT_EXECUTE_STATUS,
        ) from None

    def forward(sig: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        rc = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if tty is not None:  # the terminal back to clproj run, for its tables
            old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
            with contextlib.suppress(OSError):
                os.tcsetpgrp(tty, os.getpgrp())
            signal.signal(signal.SIGTTOU, old)
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        print(f"clproj: the app was killed by {name} (exit status {128 - rc})", file=sys.stderr)
        return AppExit(128 - rc, -rc)
    return AppExit(rc)


def end_like(app: AppExit) -> None:
    """End this process by the signal that killed the app (:func:`clproj.lifeline.die_by`);
    return where the app exited. Called last, with clproj's report printed and its
    temporary files gone."""
    if app.signal is not None:
        die_by(app.signal)
