"""Run the user's application under ``clproj run`` as a shell runs a foreground job.

What a user expects of a wrapper, and why each piece is here:
- Ctrl-C and ``kill`` reach the app, once. The app runs in its own process group; with a
  controlling terminal that group is made the terminal's foreground group (as job-control
  shells do), so a Ctrl-C goes to the app alone, and ``clproj run`` lives on to print what
  it measured and projected. SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to ``clproj run``
  itself are forwarded to the app's group.
- The app dies with ``clproj run``: ``PR_SET_PDEATHSIG`` (clproj.lifeline) kills it if
  ``clproj run`` is itself killed by SIGKILL.
- The exit status is the app's: its code, or 128+N for a death by signal N, named on stderr.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from typing import Any

from clproj.errors import ClprojError
from clproj.lifeline import die_with_parent

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


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
    """In the forked child, before exec: own group, foreground on the terminal, die with us."""
    os.setpgid(0, 0)
    if tty is not None:
        old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        with contextlib.suppress(OSError):
            os.tcsetpgrp(tty, os.getpgrp())
        signal.signal(signal.SIGTTOU, old)
    die_with_parent(signal.SIGKILL)


def run_app(cmd: list[str], env: dict[str, str], stdout: Any = None) -> int:
    """Run ``cmd`` to its end; returns its exit code, or 128+N after signal N."""
    tty = _terminal_fd()
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=stdout, preexec_fn=lambda: _child_setup(tty))
    except FileNotFoundError:
        raise ClprojError(f"command not found: {cmd[0]}", "check the command after --") from None
    except OSError as exc:  # not executable, not a program (ENOEXEC), ...
        raise ClprojError(
            f"cannot run {cmd[0]}: {exc.strerror or exc}",
            "give an executable program (or `python SCRIPT`) after --",
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
        return 128 - rc
    return rc
