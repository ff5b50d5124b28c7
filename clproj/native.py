"""Where the built native parts live, and a clear error when they are missing."""

from __future__ import annotations

import glob
import importlib.util
import os

from clproj.errors import ClprojError

BUILD_FIX = "build the native parts with `make setup` (or `pip install -e .` in the repository)"


def shim_library() -> str:
    """Path of the LD_PRELOAD shim (cffi embedding module ``intercept._shim``)."""
    spec = importlib.util.find_spec("clproj.intercept")
    if spec is None or not spec.submodule_search_locations:
        raise ClprojError("the intercept package is not installed", BUILD_FIX)
    for folder in spec.submodule_search_locations:
        found = sorted(glob.glob(os.path.join(folder, "_shim*.so")))
        if found:
            return found[0]
    raise ClprojError("the interception shim (intercept/_shim*.so) has not been built", BUILD_FIX)


def oclgrind_plugin() -> str:
    """Path of our Oclgrind statistics plugin."""
    spec = importlib.util.find_spec("clproj.miniemu")
    if spec is None or not spec.submodule_search_locations:
        raise ClprojError("the miniemu package is not installed", BUILD_FIX)
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, "libclproj_oclgrind.so")
        if os.path.exists(path):
            return path
    raise ClprojError(
        "the Oclgrind plugin (miniemu/libclproj_oclgrind.so) has not been built", BUILD_FIX
    )
