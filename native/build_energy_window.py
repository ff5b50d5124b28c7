"""Compile the energy-window preload library (``native/energy_window/energy_window.c``).

It is plain C linked against the system ICD loader, with no Python inside, so it can be
built and preloaded wherever an OpenCL app runs (the GPU machine included). Called from
setup.py's ``build_ext``; also usable directly: ``python native/build_energy_window.py [OUT]``.
"""

from __future__ import annotations

import os
import sys

from compile_c import compile_c  # native/compile_c.py (native/ is on sys.path)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(REPO, "native", "energy_window", "energy_window.c")
NATIVE_DIR = os.path.join(REPO, "native")  # clproj_settings.h
LIBRARY_FILENAME = "libclproj_energy_window.so"
DEFAULT_OUT = os.path.join(REPO, "devices", LIBRARY_FILENAME)
CFLAGS = ["-O2", "-std=c11", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror"]
CFLAGS += ["-Wno-deprecated-declarations"]


def build(output: str = DEFAULT_OUT, cc: str | None = None, extra: tuple[str, ...] = ()) -> str:
    """Compile the library to ``output``; ``extra`` flags (e.g. sanitizers) are appended."""
    flags = [*CFLAGS, *extra, "-I", NATIVE_DIR]
    return compile_c(SOURCE, output, flags, ["-lOpenCL", "-ldl", "-lpthread"], cc)


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT))
