"""cffi embedding build of the LD_PRELOAD shim (``intercept/_shim*.so``).

The C part (``native/shim/*.c``) exports the OpenCL entry points, forwards each call to
the real implementation found with ``dlsym(RTLD_NEXT, ...)`` and keeps the hot path in C.
Python (``intercept/shim_runtime.py``) is reached through ``extern "Python"`` callbacks
only where it pays: recording launches, summaries at exit.
"""

from __future__ import annotations

import glob
import os
import sys
import sysconfig
from typing import Any

import cffi

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM_DIR = os.path.join(HERE, "shim")

# cdef: the plain struct declarations shared with C, then the callbacks and helpers.
_CDEF_TYPES = "typedef int32_t cl_int;\ntypedef uint32_t cl_uint;\n"

_LIBPYTHON = os.path.join(
    sysconfig.get_config_var("LIBDIR"),
    sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY"),
)


SOURCE_PREAMBLE = '#include "shim.h"\n#include "route.h"\n'


def source_options(extra_flags: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keyword arguments of the shim's ``set_source``: its C sources and how they are
    compiled and linked (the sanitizer test keys its kept build on them too)."""
    return dict(
        sources=sorted(glob.glob(os.path.join(SHIM_DIR, "*.c"))),
        include_dirs=[SHIM_DIR],
        # A C application has no Python in it, yet libpython is NOT linked: the shim
        # dlopens it only when Python is needed (shim/lazy_python.h says why), see _LIBPYTHON.
        libraries=["dl", "pthread"],
        py_limited_api=False,
        extra_compile_args=[
            *("-include", os.path.join(SHIM_DIR, "lazy_python.h")),
            *("-Wall", "-Wextra", "-Wno-unused-parameter", "-O2"),
            *extra_flags,
        ],
        extra_link_args=list(extra_flags),
        define_macros=[
            ("CL_TARGET_OPENCL_VERSION", "300"),
            ("CLPROJ_LIBPYTHON", f'"{_LIBPYTHON}"'),
            # the build interpreter's home: track.c pin_python_home() says why
            ("CLPROJ_PYTHONHOME", f'"{sys.base_prefix}"'),
        ],
    )


def builder(extra_flags: tuple[str, ...] = ()) -> cffi.FFI:
    """The shim's cffi build; ``extra_flags`` go to the compiler and the linker (the
    sanitizer test builds a copy with ``-fsanitize=address,undefined``)."""
    ffi = cffi.FFI()
    with open(os.path.join(SHIM_DIR, "launch_types.h")) as f:
        cdef = _CDEF_TYPES + f.read()
    with open(os.path.join(SHIM_DIR, "route_types.h")) as f:
        cdef += f.read()
    with open(os.path.join(SHIM_DIR, "shim_api.h")) as f:
        ffi.cdef(cdef + f.read())
    with open(os.path.join(SHIM_DIR, "embedding_api.h")) as f:
        ffi.embedding_api(f.read())
    # clproj reaches the app's interpreter through CLPROJ_PYTHON_PATH, never PYTHONPATH: its
    # folders go at the *end* of sys.path (site.addsitedir, so the venv's .pth finders load),
    # where they neither shadow the app's modules nor reach the app's own child processes.
    ffi.embedding_init_code(
        """
        import os as _clproj_os, site as _clproj_site, sys as _clproj_sys
        _clproj_paths = [
            p for p in _clproj_os.environ.get("CLPROJ_PYTHON_PATH", "").split(_clproj_os.pathsep) if p
        ]
        for _clproj_p in _clproj_paths:
            if _clproj_p not in _clproj_sys.path:
                _clproj_site.addsitedir(_clproj_p)
        # An app that imported a module of its own named clproj (a clproj.py beside the
        # script) before its first OpenCL call: one interpreter has one "clproj", and the
        # app's must stay the app's. clproj then stays out of this app (calls pass through,
        # as with no Python side), says so once, and leaves the module table as it was.
        # (One the app has not imported is no matter: clproj's own is imported below from
        # its folders alone.)
        _clproj_app_own = _clproj_sys.modules.get("clproj")
        if getattr(_clproj_app_own, "PACKAGE_ID", None) == "clproj":
            _clproj_app_own = None  # clproj itself (an app of clproj's own, run with -m)
        if _clproj_app_own is not None:
            del _clproj_sys.modules["clproj"]
        # the package itself from clproj's folders even where the app's folder holds a
        # clproj.py: the app's path is put back at once, before anything else is imported
        _clproj_saved = list(_clproj_sys.path)
        _clproj_sys.path[:] = _clproj_paths
        try:
            import clproj
        finally:
            _clproj_sys.path[:] = _clproj_saved
        from clproj.intercept._shim import ffi, lib
        if _clproj_app_own is not None:

            @ffi.def_extern()
            def clproj_py_start():
                return 0

            for _clproj_name in [n for n in _clproj_sys.modules if n.split(".")[0] == "clproj"]:
                del _clproj_sys.modules[_clproj_name]
            _clproj_sys.modules["clproj"] = _clproj_app_own
            _clproj_sys.stderr.write(
                "clproj: this app's own module clproj (%s) hides clproj's package in its "
                "interpreter: its kernels run unrecorded, unprojected and unrouted (rename "
                "that module to use clproj)\\n" % getattr(_clproj_app_own, "__file__", "?")
            )
        else:
            from clproj.intercept.shim_runtime import install as _clproj_install
            _clproj_install(ffi, lib)
            from clproj.runtime.route.platform import install as _clproj_route_install
            _clproj_route_install(ffi, lib)
        """
    )
    ffi.set_source("clproj.intercept._shim", SOURCE_PREAMBLE, **source_options(extra_flags))
    # cffi adds -lpython for embedding modules; the shim loads libpython itself.
    ffi._apply_embedding_fix = lambda kwds: None  # noqa: SLF001  (cffi has no public switch)
    return ffi


ffibuilder = builder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
