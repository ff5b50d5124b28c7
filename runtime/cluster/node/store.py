"""The node's objects: clients' buffers, programs, kernels and sub-buffers, by handle.

Why a module of its own: the command handlers (runtime.cluster.node.executor) and the
fast-launch slots (runtime.cluster.node.slots) both look objects up, and both must forget
them together when a client replaces or releases a buffer. Objects are keyed by (client
identity, device, client handle), so a client that reconnects (broker restart) keeps its
buffers, and one client cannot touch another's objects. Built programs are cached per
device by source + options, so replays and migrations do not recompile.
"""

from __future__ import annotations

from typing import Any

from clproj.runtime.cluster.node.completions import Dev


def raw_program_class(cl: Any) -> type:
    """pyopencl's raw program class (``pyopencl._cl._Program``).

    Why the private class: the node must build with exactly the client's options and
    report the driver's own error and log. pyopencl's public ``cl.Program`` adds its
    default options and include path to every build and compile, serves builds from its
    binary cache, and rewrites build errors; ``cl.link_program`` re-splits the options.
    No public pyopencl API creates, compiles or links a program without those changes."""
    return cl._cl._Program  # noqa: SLF001


class ObjectStore:
    """Clients' OpenCL objects on this node's devices."""

    def __init__(self, cl: Any) -> None:
        self.cl = cl
        self.Program = raw_program_class(cl)
        self.objects: dict[tuple[bytes, int, int], Any] = {}
        self.kernels: dict[tuple[bytes, int, int, str], Any] = {}
        # built programs by (device, sha256 of source + options): (program, introspection)
        self.prog_cache: dict[tuple[int, str], tuple[Any, dict[str, Any]]] = {}
        # sub-buffers made for ["r", h, off, size] kernel arguments, by (client, dev, h, off, size)
        self.subs: dict[tuple[bytes, int, int, int, int], Any] = {}

    def get(self, client: bytes, dev: Dev, h: int, kind: type) -> Any:
        """The client's object ``h`` on ``dev``, which must be a ``kind`` (else KeyError)."""
        o = self.objects.get((client, dev.index, h))
        if not isinstance(o, kind):
            raise KeyError(f"no {kind.__name__} with handle {h}")
        return o

    def program(self, client: bytes, dev: Dev, h: int) -> Any:
        return self.get(client, dev, h, self.Program)

    def arg_value(self, client: bytes, dev: Dev, arg: list[Any]) -> Any:
        """The cl.Buffer of a ``["b", h]`` argument, or the sub-buffer of a
        ``["r", h, off, size]`` one (made once per region, dropped with its buffer)."""
        buf = self.get(client, dev, arg[1], self.cl.Buffer)
        if arg[0] == "b":
            return buf
        key = (client, dev.index, arg[1], arg[2], arg[3])
        sub = self.subs.get(key)
        if sub is None:
            if arg[2] + arg[3] > buf.size:
                raise ValueError("sub-buffer region outside the buffer")
            sub = self.subs[key] = buf.get_sub_region(arg[2], arg[3])
        return sub

    def forget_subs(self, client: bytes, dev: Dev, h: int) -> None:
        """Drop the sub-buffers of buffer ``h`` (it is being replaced or released)."""
        for k in [k for k in self.subs if k[:3] == (client, dev.index, h)]:
            del self.subs[k]

    def release(self, client: bytes, dev: Dev, h: int) -> None:
        """Forget object ``h`` with its sub-buffers and kernels."""
        self.objects.pop((client, dev.index, h), None)
        self.forget_subs(client, dev, h)
        for k in [k for k in self.kernels if k[:3] == (client, dev.index, h)]:
            del self.kernels[k]

    def release_all(self, client: bytes) -> None:
        """Forget every object of ``client``."""
        for k in [k for k in self.objects if k[0] == client]:
            del self.objects[k]
        for k in [k for k in self.subs if k[0] == client]:
            del self.subs[k]
        for k in [k for k in self.kernels if k[0] == client]:
            del self.kernels[k]
