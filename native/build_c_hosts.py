"""Compile the plain-C benchmark hosts (``benchmarks/apps/c_hosts/*.c``).

They are ordinary OpenCL programs linked against the system ICD loader (``-lOpenCL``), so
that interception under ``LD_PRELOAD`` is exercised by real, unmodified binaries. Each
reads its kernel from the ``.cl`` file in ``benchmarks/apps`` (the same file the pyopencl
app uses). Called from setup.py's ``build_ext``; also usable directly:
``python native/build_c_hosts.py [OUT_DIR]``.
"""

from __future__ import annotations

import glob
import os
import sys

from compile_c import compile_c  # native/compile_c.py (native/ is on sys.path)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC_DIR = os.path.join(REPO, "benchmarks", "apps", "c_hosts")
NATIVE_DIR = os.path.join(REPO, "native")  # clproj_settings.h
DEFAULT_OUT = os.path.join(REPO, "benchmarks", "apps", "bin")
CFLAGS = ["-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Wno-deprecated-declarations"]


def sources() -> list[str]:
    return sorted(glob.glob(os.path.join(SRC_DIR, "*.c")))


def build(out_dir: str = DEFAULT_OUT, cc: str | None = None) -> list[str]:
    """Compile every host into ``out_dir``; returns the executables' paths.

    The binaries find their ``.cl`` file at ``<out_dir>/../<name>.cl``, so the default
    ``benchmarks/apps/bin`` needs no configuration; elsewhere set ``CLPROJ_KERNEL_DIR``.
    """
    built = []
    for src in sources():
        exe = os.path.join(out_dir, os.path.splitext(os.path.basename(src))[0])
        flags = [*CFLAGS, "-I", SRC_DIR, "-I", NATIVE_DIR]
        built.append(compile_c(src, exe, flags, ["-lOpenCL", "-lm"], cc))
    return built


if __name__ == "__main__":
    for path in build(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT):
        print(path)
