"""Compile the Oclgrind statistics plugin (``native/oclgrind_plugin/*.cpp``).

Called from ``setup.py``'s ``build_ext``. The flags are the ones measured to work with
Debian's ``liboclgrind-dev`` 21.10: C++17, ``-fno-rtti`` (Oclgrind is built without RTTI,
so a plugin with RTTI fails to load on the missing ``typeinfo for oclgrind::Plugin``) and
LLVM 14's headers, which Oclgrind's own headers include.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

PLUGIN_FILENAME = "libclproj_oclgrind.so"
HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = sorted(glob.glob(os.path.join(HERE, "oclgrind_plugin", "*.cpp")))
LLVM_INCLUDE = "/usr/lib/llvm-14/include"


def command(output: str) -> list[str]:
    cxx = os.environ.get("CXX", "g++")
    return [
        cxx,
        "-std=c++17",
        "-O2",
        "-fPIC",
        "-fno-rtti",
        "-shared",
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        f"-I{LLVM_INCLUDE}",
        f"-I{os.path.join(HERE, 'oclgrind_plugin')}",
        *SOURCES,
        "-o",
        output,
        "-loclgrind",
    ]


def build(output: str) -> None:
    """Build the plugin into ``output``; raise with the fix when a dependency is missing."""
    if not SOURCES:
        raise RuntimeError("native/oclgrind_plugin has no .cpp sources")
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        raise RuntimeError(
            "g++ not found: install it with `apt-get install g++` (or run `make setup`)"
        )
    if not os.path.exists("/usr/include/oclgrind/Plugin.h"):
        raise RuntimeError(
            "Oclgrind headers missing: install them with `apt-get install liboclgrind-dev` (or `make setup`)"
        )
    if not os.path.isdir(LLVM_INCLUDE):
        raise RuntimeError(
            "LLVM 14 headers missing: `apt-get install llvm-14-dev` (or `make setup`)"
        )
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    newest_source = max(
        os.path.getmtime(s)
        for s in [
            *SOURCES,
            *glob.glob(os.path.join(HERE, "oclgrind_plugin", "*.h")),
            os.path.join(HERE, "clproj_settings.h"),  # the plugin reads settings through it
        ]
    )
    if os.path.exists(output) and os.path.getmtime(output) >= newest_source:
        return
    print("building Oclgrind plugin:", " ".join(command(output)))
    subprocess.run(command(output), check=True)
