"""Client API of the virtual OpenCL platform: what the shim's route mode calls into.

Why this module: route mode, the split launch and the tests see one object,
:class:`RemotePlatform`, with OpenCL-shaped calls (create, enqueue, finish). It composes
the parts of the client, one job each:

- :mod:`.discovery`: the live devices, the lost ones, the broker's epoch;
- :mod:`.transports`: the broker socket, direct sockets and same-host Unix links;
- :mod:`.shm`: the same-host data path through /dev/shm files;
- :mod:`.requests`: commands in flight, their replies, waiting and errors;
- :mod:`.coherence`: where each buffer's current content is, moving it;
- :mod:`.programs`: programs, kernels and building them where they run;
- :mod:`.decisions`: the placement cache and asking the broker;
- :mod:`.fastlaunch`: repeated launches on a same-host node as small frames;
- :mod:`.recovery`: the replay log, checkpoints and recovery after a node failure.

This module is the package's public facade (``__all__``): other areas import the client's
names from here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import zmq

from clproj import settings
from clproj.errors import ClprojError
from clproj.intercept import identity
from clproj.runtime.cluster import protocol
from clproj.runtime.cluster.client.coherence import (
    MEM_READ_ONLY,
    MEM_READ_WRITE,
    MEM_WRITE_ONLY,
    Coherence,
    RemoteBuffer,
    SubRegion,
)
from clproj.runtime.cluster.client.decisions import Decisions
from clproj.runtime.cluster.client.discovery import Directory, RemoteDevice
from clproj.runtime.cluster.client.fastlaunch import FastLaunch
from clproj.runtime.cluster.client.programs import (
    LocalMemory,
    Programs,
    RemoteKernel,
    RemoteProgram,
)
from clproj.runtime.cluster.client.recovery import LaunchEntry, Recovery
from clproj.runtime.cluster.client.requests import RemoteError, RemoteEvent, Request, Requests
from clproj.runtime.cluster.client.shm import ShmPath, sweep_orphan_shm
from clproj.runtime.cluster.client.transports import Transports
from clproj.runtime.cluster.keys import Keys

__all__ = [
    "MEM_READ_ONLY",
    "MEM_READ_WRITE",
    "MEM_WRITE_ONLY",
    "LocalMemory",
    "RemoteBuffer",
    "RemoteDevice",
    "RemoteError",
    "RemoteEvent",
    "RemoteKernel",
    "RemotePlatform",
    "RemoteProgram",
    "Request",
    "SubRegion",
    "sweep_orphan_shm",
]


class RemotePlatform:
    """The virtual platform: devices of every live node behind one broker.

    ``broker``: endpoint (tcp://host:port, ipc://path, inproc://name). ``curve``:
    "auto" (on for tcp), "on", "off". ``keys``: loaded member keys (else loaded from
    ``keys_dir``/$CLPROJ_KEYS when CURVE is on). ``log_limit_bytes``/``log_limit_ops``:
    when the replay log grows past either, the client takes a checkpoint (reads every
    buffer back), bounding both memory and recovery time.
    """

    def __init__(
        self,
        broker: str,
        curve: str = "auto",
        keys: Keys | None = None,
        keys_dir: str | None = None,
        ctx: zmq.Context | None = None,
        timeout_s: float = 60.0,
        log_limit_bytes: int = 256 * 2**20,
        log_limit_ops: int = 4096,
        wait_devices_s: float = 10.0,
    ) -> None:
        self.timeout_s = timeout_s
        # whoever started the cluster's processes may say one is gone (a one-line why, or
        # None): a wait then fails at once instead of after timeout_s
        self.health: Callable[[], str | None] | None = None
        self.directory = Directory(self)
        self.transport = Transports(
            self.directory,
            broker,
            curve,
            keys,
            keys_dir,
            ctx,
            direct_mode=settings.get("CLPROJ_DIRECT"),
            on_link_closed=lambda: self.fast.drop_all(),
            send_timeout_s=timeout_s,
        )
        self.shm_path = ShmPath(
            self.directory,
            enabled=settings.get("CLPROJ_SHM"),
            min_bytes=settings.get("CLPROJ_SHM_MIN"),
        )
        self.requests = Requests(self)
        self.coherence = Coherence(self)
        self.programs = Programs(self)
        self.decisions = Decisions(self)
        self.fast = FastLaunch(self, settings.get("CLPROJ_FAST_LAUNCH"))
        self.recovery = Recovery(self, log_limit_bytes, log_limit_ops)
        self._handle = 0
        self.refresh_devices(wait_s=wait_devices_s)

    # ---- state, as the parts keep it ---------------------------------------------
    @property
    def devices(self) -> dict[str, RemoteDevice]:
        """The live nodes' devices by id."""
        return self.directory.devices

    @property
    def dead(self) -> set[str]:
        """Devices lost (never used again)."""
        return self.directory.dead

    @property
    def epoch(self) -> int:
        """The broker's epoch as last seen (moves with projections and node changes)."""
        return self.directory.epoch

    @property
    def default_device(self) -> str | None:
        """The device of the latest launch, where unpinned work goes."""
        return self.directory.default_device

    @default_device.setter
    def default_device(self, dev: str | None) -> None:
        self.directory.default_device = dev

    @property
    def pending(self) -> dict[int, Request]:
        """Requests in flight by request id (route mode waits on all of them at clFinish)."""
        return self.requests.pending

    @property
    def buffers(self) -> dict[int, RemoteBuffer]:
        """Buffers not released (as of the last checkpoint) by handle."""
        return self.coherence.buffers

    @property
    def recoveries(self) -> int:
        """How many node failures this client recovered from."""
        return self.recovery.recoveries

    @property
    def placements(self) -> list[tuple[str, str, str]]:
        """Recent placement decisions: (kernel key, device, the broker's reason)."""
        return self.decisions.placements

    # ---- messaging ---------------------------------------------------------------
    def pump(self, timeout_ms: int) -> bool:
        """Receive and dispatch what has arrived (waiting up to ``timeout_ms`` for the first)."""
        return self.requests.pump(timeout_ms)

    def settle(self, reqs: list[Request]) -> bool:
        """Pump until every request in ``reqs`` has completed (their errors stay on them);
        False when the client's timeout passed first."""
        return self.requests.settle(reqs)

    def wait(self, reqs: Iterable[Request]) -> None:
        """Settle ``reqs``, raising a timeout or the first failure among them."""
        self.requests.wait(reqs)

    def raise_async(self) -> None:
        """Report a failure of a command nobody waited on (like an OpenCL error at clFinish)."""
        self.requests.raise_async()

    def cmd(
        self,
        dev: str,
        op: str,
        a: dict[str, Any],
        data: Any = None,
        on_done: Any = None,
        reissue: Any = None,
    ) -> Request:
        """Send command ``op`` to ``dev`` (the split launch sends its shares' commands so)."""
        return self.requests.cmd(dev, op, a, data, on_done, reissue)

    def cork(self) -> None:
        """Queue same-host commands until uncork() (a wait in between flushes them)."""
        self.transport.cork()

    def uncork(self) -> None:
        """Write the commands queued since cork()."""
        self.transport.uncork()

    # ---- devices -----------------------------------------------------------------
    def refresh_devices(self, wait_s: float = 10.0) -> list[RemoteDevice]:
        """Ask the broker for the live devices (waits up to ``wait_s`` for at least one)."""
        return self.directory.refresh(wait_s)

    def default_target(self) -> str:
        """Where work goes that nothing else places (the latest launch's device, else the
        fastest live one)."""
        return self.directory.default_target()

    # ---- objects -----------------------------------------------------------------
    def _new_handle(self) -> int:
        self._handle += 1
        return self._handle

    def create_buffer(
        self, size: int, flags: int = MEM_READ_WRITE, hostbuf: Any = None
    ) -> RemoteBuffer:
        """clCreateBuffer. Allocation on a device happens when the buffer is first used there."""
        return self.coherence.create(self._new_handle(), size, flags, hostbuf)

    def create_program(self, source: str, options: str = "") -> RemoteProgram:
        """clCreateProgramWithSource (built at build_program or first use)."""
        return self.programs.create(self._new_handle(), source, options)

    def build_program(self, prog: RemoteProgram, device: str | None = None) -> dict[str, Any]:
        """clBuildProgram: build now on one device so build errors surface at the call.

        Returns the real program's introspection (``kernels``: per kernel its argument
        count, kinds, type names, accepted scalar sizes, work-group info; ``log``). A
        failure raises RemoteError with ``res`` = {"code": OpenCL error, "log": ...}."""
        self.ensure_built(prog, device or self.default_target())
        return prog.info or {}

    def compile_program(
        self,
        source: str,
        options: str = "",
        headers: Sequence[tuple[str, str]] = (),
        device: str | None = None,
    ) -> RemoteProgram:
        """clCompileProgram: compiled (not linked) now, so errors surface at the call;
        ``headers``: (include name, source) pairs the source may #include."""
        h = self._new_handle()
        return self.programs.compile(h, source, options, headers, device or self.default_target())

    def link_program(
        self, parts: Sequence[RemoteProgram], options: str = "", device: str | None = None
    ) -> RemoteProgram:
        """clLinkProgram of compiled programs; linked now (errors and introspection as
        build_program)."""
        h = self._new_handle()
        return self.programs.link(h, parts, options, device or self.default_target())

    def create_kernel(self, prog: RemoteProgram, name: str) -> RemoteKernel:
        """clCreateKernel."""
        return RemoteKernel(prog, name)

    def kernel_key(self, kernel: RemoteKernel, gsize: Sequence[int]) -> str:
        """The placement key: program hash + kernel name + global size (see docs/cluster.md)."""
        return identity.placement_key(kernel.program.hash, kernel.name, gsize)

    def ensure_built(self, prog: RemoteProgram, dev: str) -> None:
        """Build ``prog`` on ``dev`` unless done (blocking: a failure raises here)."""
        self.programs.ensure_built(prog, dev)

    def ensure_on(self, b: RemoteBuffer, dev: str) -> list[Request]:
        """Make ``b``'s current content valid on ``dev`` (moving it if needed)."""
        return self.coherence.ensure_on(b, dev)

    # ---- buffer commands ---------------------------------------------------------
    def enqueue_write(
        self,
        b: RemoteBuffer,
        data: Any,
        offset: int = 0,
        blocking: bool = True,
        device: str | None = None,
    ) -> RemoteEvent:
        """clEnqueueWriteBuffer. ``data`` is copied at once (so the caller may reuse it)."""
        return self.coherence.write(b, data, offset, blocking, device)

    def enqueue_read(
        self,
        b: RemoteBuffer,
        out: Any = None,
        offset: int = 0,
        size: int | None = None,
        blocking: bool = True,
    ) -> tuple[Any, RemoteEvent]:
        """clEnqueueReadBuffer into ``out`` (a writable buffer; a new bytearray if None)."""
        return self.coherence.read(b, out, offset, size, blocking)

    def enqueue_fill(
        self, b: RemoteBuffer, pattern: bytes, offset: int = 0, size: int | None = None
    ) -> RemoteEvent:
        """clEnqueueFillBuffer."""
        return self.coherence.fill(b, pattern, offset, size)

    def enqueue_copy_buffer(
        self,
        src: RemoteBuffer,
        dst: RemoteBuffer,
        size: int | None = None,
        src_offset: int = 0,
        dst_offset: int = 0,
    ) -> RemoteEvent:
        """clEnqueueCopyBuffer."""
        return self.coherence.copy(src, dst, size, src_offset, dst_offset)

    def map_buffer(self, b: RemoteBuffer, offset: int = 0, size: int | None = None) -> bytearray:
        """clEnqueueMapBuffer (blocking): a host copy of the region; pair with unmap_buffer."""
        out, _ = self.enqueue_read(b, offset=offset, size=size, blocking=True)
        return out

    def unmap_buffer(
        self, b: RemoteBuffer, mapped: Any, offset: int = 0, write: bool = True
    ) -> RemoteEvent:
        """clEnqueueUnmapMemObject: a region mapped for writing is written back."""
        if not write:
            return RemoteEvent(self, [])
        return self.enqueue_write(b, mapped, offset=offset, blocking=False)

    # ---- launches ----------------------------------------------------------------
    def enqueue_launch(
        self,
        k: RemoteKernel,
        gsize: Sequence[int],
        lsize: Sequence[int] | None = None,
        goff: Sequence[int] | None = None,
        device: str | None = None,
        key: str | None = None,
        family: str | None = None,
    ) -> RemoteEvent:
        """clEnqueueNDRangeKernel (non-blocking). ``device`` pins; else the broker places it
        (``family``: launches whose decisions a new ``key`` may start from, see place)."""
        key = key or self.kernel_key(k, gsize)
        entry, bufs = self.logged_launch(k, gsize, lsize, goff, key)
        if device and device not in self.dead:
            dev = device
        else:
            dev = self.place(key, bufs, family)
        return RemoteEvent(self, self.launch_on(dev, entry, bufs))

    def enqueue_split_launch(
        self,
        k: RemoteKernel,
        gsize: Sequence[int],
        lsize: Sequence[int] | None,
        goff: Sequence[int] | None,
        plan: Any,
        key: str | None = None,
    ) -> RemoteEvent:
        """clEnqueueNDRangeKernel as shares on several devices, merged on one
        (``plan``: a runtime.cluster.client.split.SplitPlan; runtime.cluster.client.split says how)."""
        from clproj.runtime.cluster.client.split import split_launch

        return split_launch(self, k, gsize, lsize, goff, plan, key or self.kernel_key(k, gsize))

    def logged_launch(
        self,
        k: RemoteKernel,
        gsize: Sequence[int],
        lsize: Sequence[int] | None,
        goff: Sequence[int] | None,
        key: str,
    ) -> tuple[LaunchEntry, list[RemoteBuffer]]:
        """The replay-log entry of a launch of ``k`` (logged now) and its buffers: one
        entry whatever the launch becomes (one device, or a split's shares)."""
        bufs = k.buffers()
        entry = LaunchEntry(
            k.program,
            k.name,
            k.wire_args(),
            list(gsize),
            list(lsize) if lsize else None,
            list(goff) if goff else None,
            key,
        )
        self.recovery.record(entry, 0, [b.h for b in bufs])
        return entry, bufs

    def launch_on(self, dev: str, entry: LaunchEntry, bufs: list[RemoteBuffer]) -> list[Request]:
        """Launch the logged ``entry`` on ``dev``: build, bring its buffers there, send;
        the buffers it may write are then valid on ``dev`` only."""
        self.ensure_built(entry.prog, dev)
        reqs: list[Request] = []
        for b in bufs:
            reqs.extend(self.ensure_on(b, dev))
        reqs.append(self.fast.launch(dev, entry))
        for b in bufs:
            if not b.read_only:
                b.written_on(dev)
        self.default_device = dev
        return reqs

    def place(self, key: str, bufs: list[RemoteBuffer], family: str | None = None) -> str:
        """The device for a launch of ``key`` (runtime.cluster.client.decisions says how)."""
        return self.decisions.place(key, bufs, family)

    def post_projection(
        self,
        key: str,
        times: dict[str, float | None],
        source: str = "client",
        energies: dict[str, float | None] | None = None,
    ) -> None:
        """Give the broker a kernel's projected seconds per device (e.g. from
        runtime.projection.model), and its projected joules per launch where known."""
        extra = {"energies": energies} if energies else {}
        self.transport.to_broker(
            protocol.pack("projection", key=key, times=times, source=source, **extra)
        )

    # ---- completion and lifetime -------------------------------------------------
    def finish(self) -> None:
        """clFinish: every command issued so far has completed."""
        self.wait(list(self.pending.values()))
        self.raise_async()

    def checkpoint(self) -> None:
        """Make the current state the recovery base: read every live buffer to the host."""
        self.recovery.checkpoint()

    def release(self, obj: RemoteBuffer | RemoteProgram) -> None:
        """clReleaseMemObject / clReleaseProgram: free it on every device holding it."""
        for dev in list(getattr(obj, "allocated", getattr(obj, "built_on", set()))):
            if dev not in self.dead:
                self.cmd(dev, "release", {"h": obj.h})
        if isinstance(obj, RemoteBuffer):
            obj.released = True
            obj.allocated.clear()
            obj.valid.clear()

    def status(self) -> dict[str, Any]:
        """The broker's view of the cluster (``clproj status``)."""
        return self.requests.broker_call("status")["status"]

    def close(self) -> None:
        """Release everything on the nodes, say goodbye to the broker, close the sockets.

        The releases and the goodbye are sent only where a peer takes them at once: a
        broker or node that is gone has nothing to release, and an app's exit must not
        wait for it."""
        try:
            self.transport.stop_waiting()
            with contextlib.suppress(ClprojError):  # what could not be sent is moot now
                for dev in self.directory.live():
                    self.cmd(dev, "release_all", {})
                self.transport.to_broker(protocol.pack("bye"))
        finally:
            self.transport.close()
