"""The virtual platform's objects as Python keeps them: contexts, queues, buffers,
programs, kernels, events, and commands held back for user events.

Why ids, not pointers, cross the boundary: C owns the handle structs (route.c: their first
member is the ICD dispatch table), Python owns the state; ``id -> object`` in
:class:`clproj.runtime.route.state.Route`, ``handle -> id`` in the struct. Each object keeps
its C handle (``handle``) to answer info queries that name related objects.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from clproj import cl_names as C
from clproj.runtime.route.kernel_meta import KMeta

MEM_USE_HOST_PTR, MEM_ALLOC_HOST_PTR, MEM_COPY_HOST_PTR = (
    C.CL_MEM_USE_HOST_PTR,
    C.CL_MEM_ALLOC_HOST_PTR,
    C.CL_MEM_COPY_HOST_PTR,
)
MEM_ACCESS = C.CL_MEM_READ_WRITE | C.CL_MEM_WRITE_ONLY | C.CL_MEM_READ_ONLY
MEM_HOST_ACCESS = C.CL_MEM_HOST_WRITE_ONLY | C.CL_MEM_HOST_READ_ONLY | C.CL_MEM_HOST_NO_ACCESS
# an event's command (VEvent.kind) -> CL_EVENT_COMMAND_TYPE
CMD = {
    "launch": C.CL_COMMAND_NDRANGE_KERNEL,
    "read": C.CL_COMMAND_READ_BUFFER,
    "write": C.CL_COMMAND_WRITE_BUFFER,
    "copy": C.CL_COMMAND_COPY_BUFFER,
    "map": C.CL_COMMAND_MAP_BUFFER,
    "unmap": C.CL_COMMAND_UNMAP_MEM_OBJECT,
    "marker": C.CL_COMMAND_MARKER,
    "barrier": C.CL_COMMAND_BARRIER,
    "read_rect": C.CL_COMMAND_READ_BUFFER_RECT,
    "write_rect": C.CL_COMMAND_WRITE_BUFFER_RECT,
    "copy_rect": C.CL_COMMAND_COPY_BUFFER_RECT,
    "migrate": C.CL_COMMAND_MIGRATE_MEM_OBJECTS,
    "fill": C.CL_COMMAND_FILL_BUFFER,
    "user": C.CL_COMMAND_USER,
}
ARG_INFO_OPTION = "-cl-kernel-arg-info"


@dataclass(eq=False)
class VContext:
    handle: Any = None


@dataclass(eq=False)
class VQueue:
    ctx: VContext
    props: int
    handle: Any = None
    held: list[Held] = field(default_factory=list)  # commands waiting for user events

    @property
    def in_order(self) -> bool:
        return not self.props & C.CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE


@dataclass(eq=False)
class VMem:
    ctx: VContext
    flags: int
    size: int
    buf: Any  # RemoteBuffer (a sub-buffer's is its parent's)
    host_ptr: int = 0
    maps: dict[int, tuple[Any, int, int, bool]] = field(default_factory=dict)
    handle: Any = None
    parent: VMem | None = None  # a sub-buffer's buffer
    origin: int = 0  # a sub-buffer's offset in it

    def arg(self) -> Any:
        """The kernel argument value: the buffer, or a sub-buffer's region of it."""
        if self.parent is None:
            return self.buf
        from clproj.runtime.cluster.client.platform import SubRegion

        return SubRegion(self.buf, self.origin, self.size)


@dataclass(eq=False)
class VProgram:
    ctx: VContext
    source: str
    options: str = ""
    remote: Any = None  # RemoteProgram once built / compiled / linked
    status: int = C.CL_BUILD_NONE
    log: str = ""
    kernels: dict[str, KMeta] = field(default_factory=dict)
    handle: Any = None
    hash: str = ""  # program_hash(source, options), once: signatures need it per launch
    binary_type: int = C.CL_PROGRAM_BINARY_TYPE_NONE
    from_binary: bool = False
    headers: list[tuple[str, str]] = field(default_factory=list)  # compiled with these
    parts: list[VProgram] = field(default_factory=list)  # linked from these
    nkernels: int = 0  # kernel objects alive (a program with kernels cannot be rebuilt)

    @property
    def arg_info(self) -> bool:
        return ARG_INFO_OPTION in self.options.split() or any(p.arg_info for p in self.parts)

    def describe(self) -> dict[str, Any]:
        """What rebuilds this program (its binary, msgpack)."""
        d: dict[str, Any] = {"src": self.source, "opts": self.options}
        if self.headers:
            d["hdrs"] = [list(h) for h in self.headers]
        if self.parts:
            d["parts"] = [p.describe() for p in self.parts]
        d["type"] = self.binary_type
        return d


@dataclass(eq=False)
class VKernel:
    prog: VProgram
    name: str
    meta: KMeta
    remote: Any  # RemoteKernel
    scalars: dict[int, bytes] = field(default_factory=dict)
    handle: Any = None
    argv: Any = None  # route.c's clproj_karg array of this kernel
    gens: list[int] = field(default_factory=list)  # each argument's gen taken in


@dataclass(eq=False)
class VEvent:
    queue: VQueue | None
    kind: str
    remote: Any  # RemoteEvent or None (already complete)
    queued_ns: int
    launch_req: Any = None
    end_ns: int = 0
    handle: Any = None
    ctx: VContext | None = None
    user: bool = False  # a user event: complete when the app sets its status
    status: int | None = None  # user event status once set; a held command's failure
    held: bool = False  # its command is held back (waits for a user event)

    def complete(self) -> bool:
        """Its command is done (a finished remote event is dropped here, once)."""
        if self.user or self.held:
            return self.status is not None
        if self.remote is not None and self.remote.complete:
            self.remote = None
            self.end_ns = time.monotonic_ns()
        return self.remote is None

    def exec_status(self) -> int:
        """CL_EVENT_COMMAND_EXECUTION_STATUS."""
        if self.user:
            return C.CL_SUBMITTED if self.status is None else self.status
        if self.status is not None and self.status < 0:
            return self.status
        if self.held:
            return C.CL_QUEUED
        return C.CL_COMPLETE if self.complete() else C.CL_SUBMITTED

    def resolved(self) -> bool:
        """A command may follow it: not a user event still unset, not a command still
        held back."""
        if self.user:
            return self.status is not None
        return not self.held


@dataclass(eq=False)
class Held:
    """A command held back until the events it waits on are resolved."""

    run: Any  # callable() -> OpenCL code: carries the command out
    waits: list[VEvent]
    event: VEvent | None  # the command's event, handed out already (held=True)
    code: int = C.CL_SUCCESS  # what running it returned
    retained: tuple[Any, ...] = ()  # handles it holds a reference to until it has run


def context_of(o: object) -> VContext | None:
    """The context an object belongs to (None: not a context-bound object)."""
    if isinstance(o, (VQueue, VMem, VProgram)):
        return o.ctx
    if isinstance(o, VKernel):
        return o.prog.ctx
    if isinstance(o, VEvent):
        return o.ctx if o.ctx is not None else (o.queue.ctx if o.queue is not None else None)
    return None


def foreign_context(objs: dict[int, Any], queue_id: int, ids: list[int]) -> bool:
    """Whether a command on queue ``queue_id`` names (kernel, buffers, wait-list events by
    ``ids``) an object of another context: the driver answers CL_INVALID_CONTEXT, and
    route mode's one cluster would otherwise run it (its contexts share every device)."""
    q = objs.get(queue_id)
    if not isinstance(q, VQueue):
        return False
    return any((ctx := context_of(objs.get(i))) is not None and ctx is not q.ctx for i in ids if i)


def host_may(m: VMem, read: bool, write: bool) -> bool:
    """Whether the host may read (``read``) and write (``write``) buffer ``m`` under its
    CL_MEM_HOST_* flags; a transfer or map it may not do is CL_INVALID_OPERATION."""
    f = m.flags
    if f & C.CL_MEM_HOST_NO_ACCESS:
        return not (read or write)
    if read and f & C.CL_MEM_HOST_WRITE_ONLY:
        return False
    return not (write and f & C.CL_MEM_HOST_READ_ONLY)
