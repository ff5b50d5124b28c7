"""Buffer coherence: which device holds the current content of each buffer, and moving it.

Why a module of its own: the client is the one party that knows where a buffer's
content is valid (a set of device ids and/or a host copy), so every write, read, fill
and copy goes through these rules. Buffers move only when a launch on another device
needs them (read from a device holding them, written to the target); writes of buffers
not yet used by any kernel stay on the host until then. Non-blocking writes copy the
host data immediately (the copy doubles as the replay-log entry), so the app may reuse
its memory at once, which OpenCL allows only after the event completes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clproj.cl_names import CL_MEM_READ_ONLY, CL_MEM_READ_WRITE, CL_MEM_WRITE_ONLY
from clproj.errors import ClprojError
from clproj.runtime.cluster.client.recovery import CopyEntry, FillEntry, WriteEntry
from clproj.runtime.cluster.client.requests import RemoteEvent, Request

if TYPE_CHECKING:
    from clproj.runtime.cluster.client.platform import RemotePlatform

# the client API's buffer flags (clCreateBuffer's cl_mem_flags)
MEM_READ_WRITE = CL_MEM_READ_WRITE
MEM_WRITE_ONLY = CL_MEM_WRITE_ONLY
MEM_READ_ONLY = CL_MEM_READ_ONLY


@dataclass(eq=False)
class RemoteBuffer:
    """A buffer of the virtual platform: where its content is valid (``valid`` devices,
    the ``host`` copy when ``host_valid``) and where it is allocated."""

    h: int
    size: int
    flags: int
    valid: set[str] = field(default_factory=set)
    allocated: set[str] = field(default_factory=set)
    host: Any = None  # bytes / memoryview with the current content, when host_valid
    host_valid: bool = False
    released: bool = False

    @property
    def read_only(self) -> bool:
        """Kernels cannot write it (CL_MEM_READ_ONLY): a launch leaves its copies valid."""
        return bool(self.flags & MEM_READ_ONLY)

    def written_on(self, dev: str) -> None:
        """A command on ``dev`` changed the content: valid there only, no host copy."""
        self.valid, self.host_valid, self.host = {dev}, False, None


@dataclass(frozen=True)
class SubRegion:
    """A sub-buffer kernel argument: ``size`` bytes of ``buf`` from ``offset``
    (clCreateSubBuffer). It shares the buffer's content, so it moves with the buffer."""

    buf: RemoteBuffer
    offset: int
    size: int


class Coherence:
    """The live buffers (``buffers``: handle -> RemoteBuffer) and the commands that read,
    change or move their content."""

    def __init__(self, p: RemotePlatform) -> None:
        self.p = p
        self.buffers: dict[int, RemoteBuffer] = {}

    def create(self, h: int, size: int, flags: int, hostbuf: Any) -> RemoteBuffer:
        """clCreateBuffer. Allocation on a device happens when the buffer is first used there."""
        if size <= 0:
            raise ClprojError("buffer size must be positive", "pass the size in bytes")
        b = RemoteBuffer(h, int(size), int(flags))
        if hostbuf is not None:
            data = self.p.shm_path.host_copy(hostbuf)
            if len(data) != size:
                raise ClprojError(
                    f"host buffer has {len(data)} bytes, not {size}",
                    "pass a host buffer of the buffer's size",
                )
            b.host, b.host_valid = data, True
            self.p.recovery.set_base(b.h, data)
        else:
            self.p.recovery.set_base(b.h, None)
        self.buffers[b.h] = b
        return b

    def drop_released(self) -> None:
        """Forget released buffers (at a checkpoint: nothing may replay them any more)."""
        self.buffers = {h: b for h, b in self.buffers.items() if not b.released}

    def ensure_on(self, b: RemoteBuffer, dev: str) -> list[Request]:
        """Make ``b``'s current content valid on ``dev`` (moving it if needed)."""
        if dev in b.valid:
            return []
        if not b.host_valid and b.valid:
            self.fetch_host(b)
        cmd = self.p.requests.cmd
        reqs = []
        if dev not in b.allocated:
            init = b.host if b.host_valid else None
            reqs.append(
                cmd(dev, "buf_create", {"h": b.h, "size": b.size, "flags": b.flags}, data=init)
            )
            b.allocated.add(dev)
        elif b.host_valid:
            reqs.append(cmd(dev, "buf_write", {"h": b.h, "off": 0, "n": b.size}, data=b.host))
        b.valid.add(dev)
        return reqs

    def fetch_host(self, b: RemoteBuffer) -> None:
        """Bring the current content of ``b`` to the host (blocking)."""
        while not b.host_valid and b.valid:
            src = next(iter(b.valid))

            def done(frame: Any, b: RemoteBuffer = b) -> None:
                b.host, b.host_valid = frame.buffer, True

            req = self.p.requests.cmd(
                src, "buf_read", {"h": b.h, "off": 0, "n": b.size}, on_done=done
            )
            self.p.requests.wait([req])

    def home(self, b: RemoteBuffer) -> str | None:
        """A live device holding ``b``'s current content (the default device first)."""
        live = [d for d in b.valid if d not in self.p.dead]
        default = self.p.directory.default_device
        if default in live:
            return default
        return live[0] if live else None

    def write(
        self, b: RemoteBuffer, data: Any, offset: int, blocking: bool, device: str | None
    ) -> RemoteEvent:
        """clEnqueueWriteBuffer. ``data`` is copied at once (so the caller may reuse it)."""
        p = self.p
        payload = p.shm_path.host_copy(data)
        n = len(payload)
        if offset < 0 or offset + n > b.size or n == 0:
            raise ClprojError("write outside the buffer", f"buffer has {b.size} bytes")
        full = offset == 0 and n == b.size
        p.recovery.record(
            WriteEntry(b.h, offset, payload), n, [b.h], replaces=b.h if full else None, data=payload
        )
        default = p.directory.default_device
        target = device or self.home(b) or (default if default in p.directory.live() else None)
        if target is None:  # not used by any kernel yet: stay on the host until needed
            if full:
                b.host = payload
            else:
                base = bytearray(b.host if b.host_valid else bytes(b.size))
                base[offset : offset + n] = payload
                b.host = bytes(base)
            b.host_valid = True
            return RemoteEvent(p, [])
        cmd = p.requests.cmd
        reqs: list[Request] = []
        if full:
            if target not in b.allocated:
                reqs.append(
                    cmd(
                        target,
                        "buf_create",
                        {"h": b.h, "size": b.size, "flags": b.flags},
                        data=payload,
                    )
                )
                b.allocated.add(target)
            else:
                reqs.append(cmd(target, "buf_write", {"h": b.h, "off": 0, "n": n}, data=payload))
        else:
            reqs.extend(self.ensure_on(b, target))
            reqs.append(cmd(target, "buf_write", {"h": b.h, "off": offset, "n": n}, data=payload))
        b.valid = {target}
        b.host_valid = full
        b.host = payload if full else None
        ev = RemoteEvent(p, reqs)
        if blocking:
            ev.wait()
        return ev

    def read(
        self, b: RemoteBuffer, out: Any, offset: int, size: int | None, blocking: bool
    ) -> tuple[Any, RemoteEvent]:
        """clEnqueueReadBuffer into ``out`` (a writable buffer; a new bytearray if None)."""
        p = self.p
        n = b.size - offset if size is None else int(size)
        if offset < 0 or n <= 0 or offset + n > b.size:
            raise ClprojError("read outside the buffer", f"buffer has {b.size} bytes")
        if out is None:
            out = bytearray(n)
        dst = memoryview(out).cast("B")
        if len(dst) < n:
            raise ClprojError("read destination too small", f"need {n} bytes")
        if b.host_valid or not b.valid:
            if b.host_valid:
                dst[:n] = memoryview(b.host)[offset : offset + n]
            return out, RemoteEvent(p, [])
        full = offset == 0 and n == b.size

        def done(frame: Any) -> None:
            mv = frame.buffer
            dst[:n] = mv
            if full:
                b.host, b.host_valid = mv, True

        src = self.home(b)
        assert src is not None
        a = {"h": b.h, "off": offset, "n": n}
        req = p.requests.cmd(src, "buf_read", a, on_done=done)
        req.reissue = lambda dev: p.requests.cmd(dev, "buf_read", a, on_done=done)
        ev = RemoteEvent(p, [req])
        if blocking:
            ev.wait()
            p.requests.raise_async()
        return out, ev

    def fill(self, b: RemoteBuffer, pattern: bytes, offset: int, size: int | None) -> RemoteEvent:
        """clEnqueueFillBuffer: ``pattern`` repeated over ``size`` bytes from ``offset``."""
        p = self.p
        n = b.size - offset if size is None else size
        p.recovery.record(FillEntry(b.h, bytes(pattern), offset, n), 0, [b.h])
        dev = self.home(b) or p.default_target()
        reqs = self.ensure_on(b, dev)
        reqs.append(
            p.requests.cmd(
                dev, "buf_fill", {"h": b.h, "pattern": bytes(pattern), "off": offset, "n": n}
            )
        )
        b.written_on(dev)
        return RemoteEvent(p, reqs)

    def copy(
        self, src: RemoteBuffer, dst: RemoteBuffer, size: int | None, soff: int, doff: int
    ) -> RemoteEvent:
        """clEnqueueCopyBuffer, on a device holding either buffer."""
        p = self.p
        n = src.size - soff if size is None else size
        p.recovery.record(CopyEntry(src.h, dst.h, soff, doff, n), 0, [src.h, dst.h])
        dev = self.home(src) or self.home(dst) or p.default_target()
        reqs = self.ensure_on(src, dev) + self.ensure_on(dst, dev)
        reqs.append(
            p.requests.cmd(
                dev, "buf_copy", {"src": src.h, "dst": dst.h, "soff": soff, "doff": doff, "n": n}
            )
        )
        dst.written_on(dev)
        return RemoteEvent(p, reqs)
