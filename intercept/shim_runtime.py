"""Python side of the preloaded shim: started by cffi inside the intercepted process.

Everything here runs inside somebody else's application, so every callback catches its
own exceptions: a failure is logged once and the OpenCL call it belongs to is unaffected.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections import Counter

_launches: Counter[str] = Counter()
_reported_errors: set[str] = set()


def _log_once(key: str, message: str) -> None:
    if key not in _reported_errors:
        _reported_errors.add(key)
        print(f"clproj: {message}", file=sys.stderr)


def install(ffi, lib) -> None:
    """Register the ``extern "Python"`` callbacks of the shim."""

    @ffi.def_extern(onerror=lambda *exc: _log_once("launch", f"internal error: {exc[1]!r}"))
    def clproj_py_on_launch(queue, kernel, work_dim, offset, global_size, local_size, err):
        _launches["clEnqueueNDRangeKernel"] += 1

    if os.environ.get("CLPROJ_SUMMARY", "1") != "0":
        atexit.register(
            lambda: print(f"clproj: {sum(_launches.values())} kernel launches", file=sys.stderr)
        )
