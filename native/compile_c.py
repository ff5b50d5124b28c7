"""The one plain-C compile step of the build scripts that call the C compiler directly
(``build_energy_window.py``, ``build_live_pages.py``, ``build_c_hosts.py``).

Why a module of its own: each chose its compiler (``CC``, else ``cc``, else ``gcc``), ran
it and turned a failure into one error naming the command the same way; one definition
keeps them alike.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys


def compiler(cc: str | None = None) -> str:
    """``cc``, else ``$CC``, else ``cc`` on the PATH, else ``gcc``."""
    return cc or os.environ.get("CC") or shutil.which("cc") or "gcc"


def compile_c(
    source: str,
    output: str,
    flags: list[str],
    libs: list[str] | tuple[str, ...] = (),
    cc: str | None = None,
) -> str:
    """``compiler(cc) flags source -o output libs`` (the output's folder made); raises with
    the command and the compiler's messages on failure, echoes its warnings otherwise."""
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    cmd = [compiler(cc), *flags, source, "-o", output, *libs]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling {source} failed:\n{' '.join(cmd)}\n{proc.stderr}")
    if proc.stderr.strip():
        sys.stderr.write(proc.stderr)
    return output
