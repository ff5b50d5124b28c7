"""cffi build of the node's native same-host link (``runtime.cluster.node._nodelink``).

``native/nodelink/nodelink.c`` serves the Unix socket a node offers clients on its own
host: framing and socket I/O in C, and fast launches (a fixed kernel + NDRange, named by a
slot) enqueued, waited for and answered without entering Python. ``runtime/cluster/node/nodelink.py``
wraps it for ``runtime.cluster.node.server``. It calls OpenCL through each object's ICD dispatch table,
so it links no OpenCL library.
"""

from __future__ import annotations

import os

import cffi

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_DIR = os.path.join(HERE, "nodelink")


def builder(extra_flags: tuple[str, ...] = ()) -> cffi.FFI:
    """The link's cffi build; ``extra_flags`` go to the compiler and the linker (the
    sanitizer test builds a copy with ``-fsanitize=address,undefined``)."""
    ffi = cffi.FFI()
    with open(os.path.join(SRC_DIR, "nodelink_api.h")) as f:
        ffi.cdef(f.read())
    ffi.set_source(
        "clproj.runtime.cluster.node._nodelink",
        '#include "nodelink_api.h"\n',
        sources=[os.path.join(SRC_DIR, "nodelink.c")],
        include_dirs=[SRC_DIR],
        libraries=["pthread"],
        extra_compile_args=["-Wall", "-Wextra", "-O2", "-std=gnu11", *extra_flags],
        extra_link_args=list(extra_flags),
    )
    return ffi


ffibuilder = builder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
