"""Programs built once and loaded as binaries by later replays of the same source.

Why: a bounded emulation is several runs of one launch (attempt, scout, loop probes), each
a process forked from the emulator's server, and each built the kernel from its source
again. In Oclgrind that build is clang's front-end, 10-14 ms of a probe's ~32 ms on the
2-core VM; loading the program's binary (the LLVM bitcode Oclgrind hands out as
``CL_PROGRAM_BINARIES``) takes 3-4 ms in a fresh fork. So the first run of a source
writes its binary into a folder and later runs build from it.

The folder belongs to one emulator server (``miniemu.oclgrind.WorkerServer``): its
binaries come from the same Oclgrind in the same process tree and go with the server, so
none is ever read by another version. A binary is written to a file of its own and
renamed into place, so a run killed mid-write (runs are cancelled routinely) leaves no
partial binary under the key; one that cannot be read or loaded is built from source as
before. Nothing here is used for a real device: a driver's binary is its own business.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any


def key(source: str, options: str, device: Any) -> str:
    """The file name of a program's binary: its source, build options and device."""
    h = hashlib.blake2b(digest_size=16)
    for part in (source, options, device.name, device.driver_version, device.platform.version):
        h.update(part.encode(errors="surrogateescape") + b"\0")
    return h.hexdigest() + ".bin"


def build(ctx: Any, device: Any, source: str, options: str, folder: str | None) -> tuple[Any, str]:
    """``(program, "binary" | "source")``: the program built for ``device`` in ``ctx``, from
    a binary in ``folder`` where one is there (else from source, its binary then saved
    there). ``folder`` None: from source. Build errors of the source are pyopencl's."""
    import pyopencl as cl

    path = os.path.join(folder, key(source, options, device)) if folder else None
    if path is not None:
        try:
            with open(path, "rb") as fh:
                binary = fh.read()
            return cl.Program(ctx, [device], [binary]).build(options=options), "binary"
        except (OSError, cl.Error):
            pass
    program = cl.Program(ctx, source).build(options=options)
    if path is not None:
        _save(program, path)
    return program, "source"


def _save(program: Any, path: str) -> None:
    import pyopencl as cl

    try:
        binary = program.get_info(cl.program_info.BINARIES)[0]
        if not binary:
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        part = f"{path}.{os.getpid()}.part"
        with open(part, "wb") as fh:
            fh.write(binary)
        os.replace(part, path)
    except (OSError, cl.Error):
        pass  # only the speed-up is lost
