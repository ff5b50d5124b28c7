"""Programs and kernels of the virtual platform, and building them where they run.

Why a module of its own: a program is built lazily on every device a launch (or a
replay) sends it to, but the app must see build errors at clBuildProgram; this module
keeps that rule (build now on one device, then wherever needed) and what a kernel's
arguments look like on the wire.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgpack

from clproj.errors import ClprojError
from clproj.intercept import identity
from clproj.runtime.cluster.client.coherence import RemoteBuffer, SubRegion

if TYPE_CHECKING:
    from clproj.runtime.cluster.client.platform import RemotePlatform


@dataclass(frozen=True)
class LocalMemory:
    """A ``__local`` kernel argument of ``size`` bytes (clSetKernelArg with NULL value)."""

    size: int


@dataclass(eq=False)
class RemoteProgram:
    """A program: from source (``kind`` "build"), compiled only ("compile": source plus
    embedded ``headers``, clCompileProgram) or linked from compiled ``parts`` ("link").
    ``info``: the real program's introspection from the first build (runtime.cluster.introspect:
    ``kernels``, ``log``)."""

    h: int
    source: str
    options: str
    hash: str
    built_on: set[str] = field(default_factory=set)
    kind: str = "build"
    headers: list[tuple[str, str]] = field(default_factory=list)
    parts: list[RemoteProgram] = field(default_factory=list)
    info: dict[str, Any] | None = None


@dataclass(eq=False)
class RemoteKernel:
    """A kernel of a program, with the arguments set so far (index -> value)."""

    program: RemoteProgram
    name: str
    args: dict[int, Any] = field(default_factory=dict)

    def set_arg(self, index: int, value: Any) -> None:
        """RemoteBuffer, SubRegion, LocalMemory, None, bytes, or a numpy scalar/array
        (raw bytes)."""
        if isinstance(value, (RemoteBuffer, SubRegion, LocalMemory)) or value is None:
            self.args[index] = value
        elif isinstance(value, (bytes, bytearray, memoryview)):
            self.args[index] = bytes(value)
        elif hasattr(value, "tobytes"):
            self.args[index] = value.tobytes()
        else:
            raise TypeError(f"unsupported kernel argument type {type(value).__name__}")

    def set_args(self, *values: Any) -> None:
        """Set arguments 0, 1, ... to ``values``."""
        for i, v in enumerate(values):
            self.set_arg(i, v)

    def buffers(self) -> list[RemoteBuffer]:
        """The buffers the arguments bind (a sub-region's buffer included), once each."""
        bufs = []
        for v in self.args.values():
            b = v.buf if isinstance(v, SubRegion) else v
            if isinstance(b, RemoteBuffer) and b not in bufs:
                bufs.append(b)
        return bufs

    def wire_args(self) -> list[list[Any]]:
        """The arguments as the ``launch`` command carries them (every one must be set)."""
        n = max(self.args) + 1 if self.args else 0
        out: list[list[Any]] = []
        for i in range(n):
            if i not in self.args:
                raise ClprojError(
                    f"kernel {self.name}: argument {i} not set",
                    "set every argument before launching",
                )
            v = self.args[i]
            if isinstance(v, RemoteBuffer):
                out.append(["b", v.h])
            elif isinstance(v, SubRegion):
                out.append(["r", v.buf.h, v.offset, v.size])
            elif isinstance(v, LocalMemory):
                out.append(["l", v.size])
            elif v is None:
                out.append(["n"])
            else:
                out.append(["s", v])
        return out


class Programs:
    """Creating programs (by content hash, so the nodes cache builds) and building them."""

    def __init__(self, p: RemotePlatform) -> None:
        self.p = p

    def create(self, h: int, source: str, options: str) -> RemoteProgram:
        """A program from source, not built yet."""
        digest = identity.program_hash(source, options)
        return RemoteProgram(h, source, options, digest)

    def compile(
        self, h: int, source: str, options: str, headers: Sequence[tuple[str, str]], dev: str
    ) -> RemoteProgram:
        """clCompileProgram, compiled now on ``dev`` (errors surface at the call)."""
        hdrs = [(str(n), str(src)) for n, src in headers]
        ident = source + "\0" + options + "\0" + repr(hdrs)
        digest = hashlib.sha256(("compile\0" + ident).encode()).hexdigest()
        prog = RemoteProgram(h, source, options, digest, kind="compile")
        prog.headers = hdrs
        self.ensure_built(prog, dev)
        return prog

    def link(self, h: int, parts: Sequence[RemoteProgram], options: str, dev: str) -> RemoteProgram:
        """clLinkProgram of compiled ``parts``, linked now on ``dev``."""
        ident = "\0".join(part.hash for part in parts) + "\0" + options
        digest = hashlib.sha256(("link\0" + ident).encode()).hexdigest()
        prog = RemoteProgram(h, "", options, digest, kind="link")
        prog.parts = list(parts)
        self.ensure_built(prog, dev)
        return prog

    def ensure_built(self, prog: RemoteProgram, dev: str) -> None:
        """Build (compile, link) ``prog`` on ``dev`` unless done; blocking, so a failure
        raises here. A device lost meanwhile: built on the default target instead."""
        p = self.p
        if dev in prog.built_on:
            return
        if prog.kind == "link":
            for part in prog.parts:
                self.ensure_built(part, dev)
            if dev in p.dead:
                return self.ensure_built(prog, p.default_target())
            op = "prog_link"
            a: dict[str, Any] = {
                "h": prog.h,
                "parts": [part.h for part in prog.parts],
                "opts": prog.options,
            }
        elif prog.kind == "compile":
            op = "prog_compile"
            a = {"h": prog.h, "opts": prog.options}
        else:
            op = "prog_build"
            a = {"h": prog.h, "opts": prog.options}
        # the source (and headers) as a data frame: a header is limited to
        # protocol.MAX_HEADER_BYTES, its strings to protocol.MAX_STR
        data: bytes | None = None
        if op == "prog_compile" and prog.headers:
            a["hf"] = True
            hdrs = [list(hd) for hd in prog.headers]
            data = msgpack.packb([prog.source, hdrs], use_bin_type=True)
        elif op != "prog_link":
            data = prog.source.encode()
        req = p.cmd(dev, op, a, data)
        p.wait([req])
        if dev not in p.dead:
            prog.built_on.add(dev)
            if prog.info is None and isinstance(req.res, dict):
                prog.info = req.res
        else:
            self.ensure_built(prog, p.default_target())
