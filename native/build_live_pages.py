"""Compile the live-pages library (``native/live_pages/live_pages.c``).

Plain C, no Python inside: the emulator loads it with ctypes (intercept.live_pages) to
read a launch's buffers from the app while the app copies them. Called from setup.py's
``build_ext``; also usable directly: ``python native/build_live_pages.py [OUT]``.
"""

from __future__ import annotations

import os
import sys

from compile_c import compile_c  # native/compile_c.py (native/ is on sys.path)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(REPO, "native", "live_pages", "live_pages.c")
LIBRARY_FILENAME = "libclproj_live_pages.so"
DEFAULT_OUT = os.path.join(REPO, "intercept", LIBRARY_FILENAME)
CFLAGS = ["-O2", "-std=c11", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror"]


def build(output: str = DEFAULT_OUT, cc: str | None = None, extra: tuple[str, ...] = ()) -> str:
    """Compile the library to ``output``; ``extra`` flags (e.g. sanitizers) are appended."""
    return compile_c(SOURCE, output, [*CFLAGS, *extra], ["-lpthread"], cc)


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT))
