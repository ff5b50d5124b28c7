"""``clproj run``'s exit status is the app's, whatever state stdout and stderr are in.

clproj's own report (tables, notes, the ``--json`` document) can fail where the app's
output did not: a pipe whose reader left, a closed descriptor, a full disk. Each case runs
the real CLI under bash with the redirection, beside the app alone under the same one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLPROJ = f"{sys.executable} -m clproj.cli run"
CTYPES_APP = os.path.join(REPO, "tests", "c_apps", "ctypes_app.py")
# one kernel launch (so clproj has a table to print), its PASS line on stdout, a line on
# stderr, a pause (a pipe's reader is gone by then), exit 5
APP = f"sh -c '{sys.executable} {CTYPES_APP}; echo err >&2; sleep 0.3; exit 5'"


def status(line: str) -> tuple[int, str]:
    """The exit status ``line`` reports (``STATUS=N`` on stderr) and its whole stderr."""
    p = subprocess.run(["bash", "-c", line], capture_output=True, text=True, cwd=REPO, timeout=120)
    return int(re.findall(r"STATUS=(\d+)", p.stderr)[-1]), p.stderr


@pytest.mark.parametrize("json_flag", ["", "--json"])
@pytest.mark.parametrize(
    "redirect",
    [
        "| head -1; echo STATUS=${PIPESTATUS[0]} >&2",
        ">&-; echo STATUS=$? >&2",
        "2>&-; echo STATUS=$? >&2",
        ">/dev/full; echo STATUS=$? >&2",
        "2>/dev/full; echo STATUS=$? >&2",
    ],
    ids=["pipe-closed-early", "stdout-closed", "stderr-closed", "stdout-full", "stderr-full"],
)
def test_exit_status_survives_any_stream_state(redirect: str, json_flag: str) -> None:
    """Before: 1 through the pipe, a traceback and no app with stdout closed, 1 with stderr
    closed, 2 with stdout full."""
    native, _ = status(f"{APP} {redirect}")
    wrapped, err = status(f"{CLPROJ} {json_flag} -- {APP} {redirect}")
    assert native == 5
    assert wrapped == native, err
    # the app may fail its own print (a full disk), clproj never
    assert not re.search(r'File ".*/(clproj|intercept|runtime)/', err), err


def test_own_report_goes_to_stderr() -> None:
    """The app's stdout stays the app's: clproj's table and notes are on stderr."""
    p = subprocess.run(
        ["bash", "-c", f"{CLPROJ} -- {APP}"], capture_output=True, text=True, cwd=REPO
    )
    assert p.returncode == 5
    assert p.stdout == "PASS\n"
    assert "kernels of sh" in p.stderr


def test_app_sees_its_closed_stdout_closed() -> None:
    """clproj keeps a closed stdout reserved for itself (so no file of its own becomes the
    app's stdout), closed on exec: the app sees it closed, as it would alone."""
    probe = "import os, sys; print('fd1', os.path.exists('/proc/self/fd/1'), file=sys.stderr)"
    line = f'{CLPROJ} -- {sys.executable} -c "{probe}" >&-'
    p = subprocess.run(["bash", "-c", line], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert "fd1 False" in p.stderr
