"""Recovery: the replay log, checkpoints, and re-running lost work after a node failure.

Why the client keeps this: it is the only party that always survives a node failure, so
it owns a *checkpoint* (host copies of all buffers at one consistent point) and a *log*
of every state-changing command since then (writes, fills, copies, launches), one typed
entry each. When a node dies the broker says so (``node_lost``); the client then
rebuilds every buffer on a surviving device from the checkpoint, replays the log there
and re-issues the reads that were lost, so in-flight launches are re-executed elsewhere
and the app still sees correct data. Kernels are assumed deterministic given their
inputs (OpenCL kernels with atomics-order-dependent results are the exception; they are
replayed too, with the same caveat as any re-execution). When the log grows past
``log_limit_bytes`` or ``log_limit_ops`` the client takes a checkpoint (reads every
buffer back), bounding both memory and recovery time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clproj.runtime.cluster.client.platform import RemotePlatform
    from clproj.runtime.cluster.client.programs import RemoteProgram
    from clproj.runtime.cluster.client.requests import Request

log = logging.getLogger("clproj.client")


@dataclass(frozen=True)
class WriteEntry:
    """clEnqueueWriteBuffer of ``data`` into buffer ``h`` at ``off``."""

    h: int
    off: int
    data: Any

    def replay(self, p: RemotePlatform, dev: str) -> Request:
        """Send the write again, to ``dev``."""
        return p.cmd(
            dev, "buf_write", {"h": self.h, "off": self.off, "n": len(self.data)}, self.data
        )


@dataclass(frozen=True)
class FillEntry:
    """clEnqueueFillBuffer of buffer ``h``: ``pattern`` over ``n`` bytes from ``off``."""

    h: int
    pattern: bytes
    off: int
    n: int

    def replay(self, p: RemotePlatform, dev: str) -> Request:
        """Send the fill again, to ``dev``."""
        a = {"h": self.h, "pattern": self.pattern, "off": self.off, "n": self.n}
        return p.cmd(dev, "buf_fill", a)


@dataclass(frozen=True)
class CopyEntry:
    """clEnqueueCopyBuffer of ``n`` bytes from buffer ``src`` at ``soff`` to ``dst`` at ``doff``."""

    src: int
    dst: int
    soff: int
    doff: int
    n: int

    def replay(self, p: RemotePlatform, dev: str) -> Request:
        """Send the copy again, to ``dev``."""
        a = {"src": self.src, "dst": self.dst, "soff": self.soff, "doff": self.doff, "n": self.n}
        return p.cmd(dev, "buf_copy", a)


@dataclass(frozen=True)
class LaunchEntry:
    """clEnqueueNDRangeKernel of ``kernel`` of ``prog``: its wire arguments, NDRange and
    placement ``key`` (one entry whatever the launch became: one device or a split)."""

    prog: RemoteProgram
    kernel: str
    args: list[list[Any]]
    gsize: list[int]
    lsize: list[int] | None
    goff: list[int] | None
    key: str

    def fields(self) -> dict[str, Any]:
        """The ``launch`` command's arguments (first run and replay alike)."""
        a: dict[str, Any] = {
            "prog": self.prog.h,
            "kernel": self.kernel,
            "args": self.args,
            "gsize": self.gsize,
            "key": self.key,
        }
        if self.lsize:
            a["lsize"] = self.lsize
        if self.goff:
            a["goff"] = self.goff
        return a

    def replay(self, p: RemotePlatform, dev: str) -> Request:
        """Build the program on ``dev`` if needed and launch again there."""
        p.ensure_built(self.prog, dev)
        return p.cmd(dev, "launch", self.fields())


LogEntry = WriteEntry | FillEntry | CopyEntry | LaunchEntry


class Recovery:
    """The checkpoint (``ckpt``: buffer handle -> content, None = undefined), the log
    since then, and the recovery from lost devices (``recoveries`` counts them)."""

    def __init__(self, p: RemotePlatform, log_limit_bytes: int, log_limit_ops: int) -> None:
        self.p = p
        self.log_limit_bytes = log_limit_bytes
        self.log_limit_ops = log_limit_ops
        self.ckpt: dict[int, Any] = {}
        self.log: list[LogEntry] = []
        self.log_bytes = 0
        self.log_refs: set[int] = set()  # buffers some logged command uses
        self.recoveries = 0
        self._recovering = False
        self._lost_queue: set[str] = set()

    def set_base(self, h: int, data: Any) -> None:
        """Buffer ``h``'s content at the checkpoint (a new buffer: its initial data)."""
        self.ckpt[h] = data

    def record(
        self,
        entry: LogEntry,
        nbytes: int,
        refs: list[int],
        replaces: int | None = None,
        data: Any = None,
    ) -> None:
        """Log ``entry`` (``nbytes`` of data, using buffers ``refs``); a full overwrite
        (``replaces``) of a buffer no logged command uses replaces its checkpoint instead."""
        if self.log_bytes + nbytes > self.log_limit_bytes or len(self.log) >= self.log_limit_ops:
            self.checkpoint()  # before the new command is sent, so the log stays complete
        if replaces is not None and replaces not in self.log_refs:
            self.ckpt[replaces] = data  # a full overwrite before any logged use: no log entry
            return
        self.log.append(entry)
        self.log_bytes += nbytes
        self.log_refs.update(refs)

    def checkpoint(self) -> None:
        """Make the current state the recovery base: read every live buffer to the host."""
        p = self.p
        p.finish()
        ckpt: dict[int, Any] = {}
        for b in p.buffers.values():
            if b.released:
                continue
            if not b.host_valid and b.valid:
                p.coherence.fetch_host(b)
            ckpt[b.h] = b.host if b.host_valid else None
        self.ckpt, self.log, self.log_bytes, self.log_refs = ckpt, [], 0, set()
        p.coherence.drop_released()

    def lost(self, devs: set[str]) -> None:
        """Devices ``devs`` are gone: recover (once per device; a loss noticed during a
        recovery is recovered from right after it)."""
        devs = {d for d in devs if d} - self.p.dead
        if not devs:
            return
        if self._recovering:
            self._lost_queue |= devs
            return
        self._recovering = True
        try:
            while devs:
                self._recover(devs)
                devs, self._lost_queue = self._lost_queue - self.p.dead, set()
        finally:
            self._recovering = False

    def _recover(self, dead: set[str]) -> None:  # noqa: C901
        """Re-execute everything since the checkpoint on a surviving device."""
        p = self.p
        log.warning("devices %s lost: replaying %d logged commands", sorted(dead), len(self.log))
        self.recoveries += 1
        p.directory.dead |= dead
        p.transport.drop_unused(dead)
        p.directory.forget(dead)
        pending = p.requests.pending
        lost = {rid: r for rid, r in pending.items() if r.dev in dead}
        for rid in lost:
            del pending[rid]
        for b in p.buffers.values():
            b.valid -= dead
            b.allocated -= dead
        p.decisions.forget(dead)
        for prog in {e.prog for e in self.log if isinstance(e, LaunchEntry)}:
            prog.built_on -= dead
        target = p.default_target()
        # 1. every buffer back to its checkpoint content on the target
        reqs: list[Request] = []
        for b in p.buffers.values():
            init = self.ckpt.get(b.h)
            if target in b.allocated:
                if init is not None:
                    reqs.append(
                        p.cmd(target, "buf_write", {"h": b.h, "off": 0, "n": b.size}, data=init)
                    )
            else:
                a = {"h": b.h, "size": b.size, "flags": b.flags}
                reqs.append(p.cmd(target, "buf_create", a, data=init))
                b.allocated.add(target)
        # 2. the log, in order
        reqs.extend(e.replay(p, target) for e in self.log)
        p.wait(reqs)
        for b in p.buffers.values():
            if not b.released:
                b.valid.add(target)
        # 3. lost reads are read again from the target; other lost commands were replayed
        again = []
        for r in lost.values():
            if r.reissue is not None:
                again.append((r, r.reissue(target)))
            else:
                r.done = True
        for r, nr in again:
            p.wait([nr])
            r.done = True
