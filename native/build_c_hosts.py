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
import shutil
import subprocess
import sys

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
    cc = cc or os.environ.get("CC") or shutil.which("cc") or "gcc"
    os.makedirs(out_dir, exist_ok=True)
    built = []
    for src in sources():
        exe = os.path.join(out_dir, os.path.splitext(os.path.basename(src))[0])
        cmd = [cc, *CFLAGS, "-I", SRC_DIR, "-I", NATIVE_DIR, src, "-o", exe, "-lOpenCL", "-lm"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"compiling {src} failed:\n{' '.join(cmd)}\n{proc.stderr}")
        if proc.stderr.strip():
            sys.stderr.write(proc.stderr)
        built.append(exe)
    return built


if __name__ == "__main__":
    for path in build(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT):
        print(path)
