"""Python side of route mode (``CLPROJ_MODE=route``): the virtual platform's calls.

``native/shim/route.c`` presents the application one virtual platform with one virtual
device that stands for every device of the cluster; every call on its handles arrives
here as one ``clproj_rcall`` and is carried out through
:class:`runtime.cluster.client.platform.RemotePlatform`: the broker places each launch (first launch on a
default device at once, later launches move when a projection says it pays), buffers
follow the kernels, node failures are recovered by the client. Without
``CLPROJ_BROKER`` an embedded broker and a local node (subprocess, no LD_PRELOAD) start
at the first call.

Why ids, not pointers, cross the boundary: C owns the handle structs (their first member
is the ICD dispatch table), Python owns the state; ``id -> object`` here, ``handle ->
id`` in the struct. Everything runs under one lock (the client's socket is not
thread-safe); a failing call returns an OpenCL error code and is logged once, it never
raises into the application. Event callbacks (clSetEventCallback) are the one thing done on
a thread of ours: :meth:`Route._callback_loop` pumps under the lock and calls the app's
functions outside it, never inside one of the app's own calls and never after exit began.

What the virtual platform reports is what the real devices and kernels are
(intercept/route/info.py): a kernel's argument count, kinds, type names, accepted sizes
and work-group info come from the real kernel, fetched once when its program is built
(runtime.cluster.introspect on the node) and cached here; clSetKernelArg is checked against them
with the codes the driver gives. Commands that wait on a user event (or on a command held
back for one) are held back here, per queue, until the app sets the event's status.

The placement key of a launch is the launch record's ``signature`` (program hash, kernel,
NDRange, scalar arguments), so a projection computed for a record (project mode) and
posted with :func:`post_projection` reaches the broker under the key it places by. With
``CLPROJ_HOOKS`` set, the first launch of each signature is also made into a
:class:`intercept.record.LaunchRecord` (buffer snapshots read back first) and handed to
the hooks, as in project mode.
"""

from __future__ import annotations

import os
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import msgpack

from clproj import cl_names as C
from clproj.errors import ClprojError  # a leaf module; imported per call before (~1 us each)
from intercept.route.info import (
    KMeta,
    VirtualDevice,
    cstr,
    i32,
    kernel_arg_info,
    kernel_wg_info,
    platform_info,
    ptrs,
    size_t,
    u32,
    u64,
)

RT_SET_BYTES, RT_SET_MEM, RT_SET_NULL, RT_SET_LOCAL = 1, 2, 3, 4  # route_types.h
# OpenCL names used on hot paths (module globals: no attribute lookup per call)
CL_SUCCESS = C.CL_SUCCESS
CL_OUT_OF_RESOURCES = C.CL_OUT_OF_RESOURCES
CL_INVALID_VALUE = C.CL_INVALID_VALUE
CL_INVALID_OPERATION = C.CL_INVALID_OPERATION
MEM_USE_HOST_PTR, MEM_ALLOC_HOST_PTR, MEM_COPY_HOST_PTR = (
    C.CL_MEM_USE_HOST_PTR,
    C.CL_MEM_ALLOC_HOST_PTR,
    C.CL_MEM_COPY_HOST_PTR,
)
MEM_ACCESS = C.CL_MEM_READ_WRITE | C.CL_MEM_WRITE_ONLY | C.CL_MEM_READ_ONLY
MEM_HOST_ACCESS = C.CL_MEM_HOST_WRITE_ONLY | C.CL_MEM_HOST_READ_ONLY | C.CL_MEM_HOST_NO_ACCESS
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
CL_COMPLETE, CL_RUNNING, CL_SUBMITTED, CL_QUEUED = (
    C.CL_COMPLETE,
    C.CL_RUNNING,
    C.CL_SUBMITTED,
    C.CL_QUEUED,
)
CALLBACK_POLL_S = 0.001  # the callback thread's pump interval while callbacks wait
HELD_POLL_S = 0.05  # a call waiting for a user event re-checks at least this often
# Binaries of this platform (clGetProgramInfo(CL_PROGRAM_BINARIES)): what rebuilds the
# program. Source programs keep the first form (older caches hold it); compiled objects
# and linked programs are described in msgpack behind the second.
BINARY_MAGIC = b"clproj-source\n"
PROGRAM_MAGIC = b"clproj-program\n"
PTR = struct.calcsize("P")
ARG_INFO_OPTION = "-cl-kernel-arg-info"

_reported: set[str] = set()


def _log_once(key: str, message: str) -> None:
    if key not in _reported:
        _reported.add(key)
        print(f"clproj: route: {message}", file=sys.stderr)


class CLError(Exception):
    def __init__(self, code: int, why: str = "") -> None:
        super().__init__(why or str(code))
        self.code = code


# ---- rectangular transfers --------------------------------------------------------------
def rect_rows(origin: list[int], region: list[int], row: int, slice_: int) -> list[int]:
    """Byte offset of each row (``region[0]`` bytes) of a rect, z-major then y: the
    OpenCL layout, origins in bytes, pitches already resolved (no 0)."""
    base = origin[0] + origin[1] * row + origin[2] * slice_
    return [base + y * row + z * slice_ for z in range(region[2]) for y in range(region[1])]


def runs(a: list[int], b: list[int], width: int) -> list[tuple[int, int, int]]:
    """Rows at offsets ``a`` (one side) and ``b`` (other side) merged into
    ``(a_off, b_off, n)`` runs where both sides are contiguous: a tightly packed rect
    becomes one transfer instead of one per row."""
    out: list[tuple[int, int, int]] = []
    for x, y in zip(a, b, strict=True):
        if out and out[-1][0] + out[-1][2] == x and out[-1][1] + out[-1][2] == y:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + width)
        else:
            out.append((x, y, width))
    return out


def copy_overlap(so: list[int], do: list[int], region: list[int], row: int, slice_: int) -> bool:
    """Whether a rect copy within one buffer overlaps: the rule of the Khronos reference
    check (``check_copy_overlap``) that PoCL applies, so the same calls fail with
    CL_MEM_COPY_OVERLAP: boxes intersecting in (x, y, z), or rows/slices that wrap past
    the pitch into the other region's byte range."""
    overlap = all(so[i] < do[i] + region[i] and so[i] + region[i] > do[i] for i in range(3))
    if overlap:
        return True
    extent = region[2] * slice_ + region[1] * row + region[0]
    s0 = so[2] * slice_ + so[1] * row + so[0]
    d0 = do[2] * slice_ + do[1] * row + do[0]
    spans = s0 <= d0 < s0 + extent or d0 <= s0 < d0 + extent
    dsx = max(so[0] + region[0] - row, 0)
    ddx = max(do[0] + region[0] - row, 0)
    if (dsx > do[0] or ddx > so[0]) and spans:
        return True
    if region[2] > 1:
        height = slice_ // row
        dsy = max(so[1] + region[1] - height, 0)
        ddy = max(do[1] + region[1] - height, 0)
        if (dsy > do[1] or ddy > so[1]) and spans:
            return True
    return False


def _overlap(a: int, b: int, n: int) -> bool:
    """Two byte ranges of ``n`` bytes at ``a`` and ``b`` intersect."""
    return a < b + n and b < a + n


# ---- virtual objects --------------------------------------------------------------------
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
        from runtime.cluster.client.platform import SubRegion

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


@dataclass(eq=False)
class Held:
    """A command held back until the events it waits on are resolved."""

    run: Any  # callable() -> OpenCL code: carries the command out
    waits: list[VEvent]
    event: VEvent | None  # the command's event, handed out already (held=True)
    code: int = CL_SUCCESS  # what running it returned


class LocalCluster:
    """The single-machine default of route mode: a broker and a node, each its own process.

    Why not :class:`runtime.cluster.embedded.EmbeddedCluster` (broker on a thread of the caller):
    inside the application a broker thread competes with the app for the GIL, and every
    message it forwards stalls the app's next OpenCL call (measured: ~165 us per send).
    Both processes run without LD_PRELOAD, on a private ipc:// endpoint in a 0700 temp
    dir, bounded by ``lifetime_s`` and stopped at exit."""

    def __init__(self, lifetime_s: float) -> None:
        import subprocess
        import tempfile

        # inside `clproj run`'s run directory, which it removes however the app ends
        self.tmp = tempfile.TemporaryDirectory(
            prefix="clproj-route-", dir=os.environ.get("CLPROJ_RUN_DIR") or None
        )
        os.chmod(self.tmp.name, 0o700)
        self.endpoint = f"ipc://{self.tmp.name}/broker"
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p)
        life = str(max(1, int(lifetime_s)))
        # their logs would land in the app's stderr; CLPROJ_ROUTE_VERBOSE=1 keeps them
        quiet = None if os.environ.get("CLPROJ_ROUTE_VERBOSE") == "1" else subprocess.DEVNULL
        exe = sys.executable
        if not exe or not os.path.basename(exe).startswith("python"):
            exe = os.path.join(sys.base_prefix, "bin", "python3")  # embedded in a C app
        common = [exe, "-m", "clproj.cli"]
        # both stop when this app exits, even by a signal (clproj.lifeline)
        parent = ["--parent-pid", str(os.getpid())]
        self.procs = [
            subprocess.Popen(
                [
                    *common,
                    "broker",
                    "--bind",
                    self.endpoint,
                    "--curve",
                    "off",
                    "--lifetime",
                    life,
                    *parent,
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=quiet,
            ),
            subprocess.Popen(
                [
                    *common,
                    "node",
                    "--broker",
                    self.endpoint,
                    "--curve",
                    "off",
                    "--name",
                    "local",
                    "--lifetime",
                    life,
                    *parent,
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=quiet,
                stderr=quiet,
            ),
        ]

    def stop(self) -> None:
        """Both told at once, then waited for (one after the other cost ~0.3 s per app)."""
        import subprocess

        live = [p for p in reversed(self.procs) if p.poll() is None]
        for p in live:
            p.terminate()
        for p in live:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.tmp.cleanup()


class Route:
    """The state of the virtual platform inside one application process."""

    def __init__(self, ffi: Any, lib: Any) -> None:
        from runtime.cluster.client.platform import RemotePlatform

        self.ffi, self.lib = ffi, lib
        self.lock = threading.RLock()
        # a call waiting for a user event waits on this (releasing the lock)
        self.cond = threading.Condition(self.lock)
        self.cluster: LocalCluster | None = None
        broker = os.environ.get("CLPROJ_BROKER")
        if not broker:
            self.cluster = _take_prestarted() or LocalCluster(_lifetime())
            broker = self.cluster.endpoint
        self.p = RemotePlatform(
            broker, wait_devices_s=float(os.environ.get("CLPROJ_ROUTE_WAIT", 60))
        )
        self.objs: dict[int, Any] = {}
        self.parents: dict[int, Any] = {}  # id -> handle it retains implicitly
        self.next_id = 100
        self.platform = lib.clproj_route_static(lib.RT_PLATFORM)
        self.device = lib.clproj_route_static(lib.RT_DEVICE)
        self._vdev: VirtualDevice | None = None
        self._vdev_key: tuple[str, ...] = ()
        self._vdev_quick: tuple[int, int, int] = (-1, -1, -1)
        self.sigs: dict[tuple, tuple[str, str]] = {}  # launch -> (signature, family)
        self.families: dict[tuple, str] = {}  # launch without scalar values -> family
        self.seen_sigs: set[str] = set()
        self.hooks = bool(os.environ.get("CLPROJ_HOOKS"))
        self.launches: list[tuple[str, str, Any]] = []  # (kernel, device, req) not yet summed
        self.stats: dict[tuple[str, str], list[int]] = {}  # launches, timed, total_ns
        self.t0 = time.monotonic_ns()
        self.closed = False
        # clSetEventCallback: (handle, event, type, fn, user) not yet fired; fired by
        # self._callback_loop on its own thread (started at the first registration)
        self.callbacks: list[tuple[Any, VEvent, int, int, int]] = []
        self.cb_wake = threading.Event()
        self.cb_stop = False
        self.cb_thread: threading.Thread | None = None
        self.held_queues: list[VQueue] = []  # queues holding commands back
        self._bind: VEvent | None = None  # a held command being run: its event
        self._in_held = False  # a held command is being run (it is not held again)
        self.split: Any = (
            None  # runtime.partition.route_policy.Splitter with --split (CLPROJ_SPLIT=1)
        )
        if os.environ.get("CLPROJ_SPLIT") == "1":
            from runtime.partition.route_policy import Splitter

            self.split = Splitter.from_env(
                lambda: [d for d in list(self.p.devices.values()) if d.id not in self.p.dead],
                self.lock,
            )

    # ---- handles ----
    def new(self, kind: int, obj: Any, parent: Any = None) -> Any:
        """A handle for ``obj``; ``parent`` (an object with a handle) is kept alive by it."""
        self.next_id += 1
        h = self.lib.clproj_route_handle(kind, self.next_id)
        if h == self.ffi.NULL:
            raise CLError(C.CL_OUT_OF_HOST_MEMORY, "out of host memory")
        obj.handle = h
        if parent is not None and parent.handle is not None:
            self.lib.clproj_route_retain(parent.handle)
            self.parents[self.next_id] = parent.handle
        self.objs[self.next_id] = obj
        return h

    def get(self, oid: int, cls: type) -> Any:
        o = self.objs.get(oid)
        if not isinstance(o, cls):
            raise CLError(CL_INVALID_VALUE, f"no {cls.__name__} {oid}")
        return o

    def addr(self, h: Any) -> int:
        return int(self.ffi.cast("uintptr_t", h)) if h is not None else 0

    # ---- the virtual device ----
    @property
    def vdev(self) -> VirtualDevice:
        """The virtual device's answers (remade when the cluster's devices change)."""
        p = self.p
        quick = (p.epoch, len(p.devices), len(p.dead))
        if self._vdev is not None and quick == self._vdev_quick:
            return self._vdev
        devs = [d for d in p.devices.values() if d.id not in p.dead]
        key = tuple(sorted(d.id for d in devs))
        if self._vdev is None or (key != self._vdev_key and devs):
            self._vdev = VirtualDevice(devs, self.addr(self.platform))
            self._vdev_key = key
        self._vdev_quick = quick
        return self._vdev

    # ---- info dispatch ----
    def info(self, c: Any) -> bytes:
        kind, param, cls = c.kind, int(c.u[0]), int(c.u[2])
        lib = self.lib
        if kind == lib.RT_PLATFORM:
            try:
                return platform_info(param, self.vdev.platform_extensions)
            except KeyError:
                raise CLError(CL_INVALID_VALUE, f"clGetPlatformInfo param {param:#x}") from None
        if kind == lib.RT_DEVICE:
            try:
                return self.vdev.info(param)
            except KeyError:
                raise CLError(CL_INVALID_VALUE, f"clGetDeviceInfo param {param:#x}") from None
        o = self.objs.get(c.id)
        if o is None:
            raise CLError(CL_INVALID_VALUE, "stale handle")
        if isinstance(o, VContext):
            return {
                C.CL_CONTEXT_DEVICES: ptrs(self.addr(self.device)),
                C.CL_CONTEXT_PROPERTIES: b"",
                C.CL_CONTEXT_NUM_DEVICES: u32(1),
            }[param]
        if isinstance(o, VQueue):
            return {
                C.CL_QUEUE_CONTEXT: ptrs(self.addr(o.ctx.handle)),
                C.CL_QUEUE_DEVICE: ptrs(self.addr(self.device)),
                C.CL_QUEUE_PROPERTIES: u64(o.props),
            }[param]
        if isinstance(o, VMem):
            par = o.parent
            return {
                C.CL_MEM_TYPE: u32(C.CL_MEM_OBJECT_BUFFER),
                C.CL_MEM_FLAGS: u64(o.flags),
                C.CL_MEM_SIZE: size_t(o.size),
                C.CL_MEM_HOST_PTR: ptrs(o.host_ptr if o.flags & MEM_USE_HOST_PTR else 0),
                C.CL_MEM_MAP_COUNT: u32(len(o.maps)),
                C.CL_MEM_CONTEXT: ptrs(self.addr(o.ctx.handle)),
                C.CL_MEM_ASSOCIATED_MEMOBJECT: ptrs(self.addr(par.handle) if par else 0),
                C.CL_MEM_OFFSET: size_t(o.origin),
                C.CL_MEM_USES_SVM_POINTER: u32(C.CL_FALSE),
            }[param]
        if isinstance(o, VProgram):
            return self.program_info(o, param, cls, c)
        if isinstance(o, VKernel):
            return self.kernel_info(o, param, cls, int(c.u[3]))
        if isinstance(o, VEvent):
            return self.event_info(o, param, cls)
        raise CLError(CL_INVALID_VALUE)

    def _binary(self, o: VProgram) -> bytes:
        if o.status != C.CL_BUILD_SUCCESS:
            return b""
        if not o.parts and not o.headers and o.binary_type == C.CL_PROGRAM_BINARY_TYPE_EXECUTABLE:
            return BINARY_MAGIC + o.source.encode()
        return PROGRAM_MAGIC + msgpack.packb(o.describe(), use_bin_type=True)

    def program_info(self, o: VProgram, param: int, cls: int, c: Any) -> bytes:
        if cls == self.lib.RT_INFO_BUILD:
            return {
                C.CL_PROGRAM_BUILD_STATUS: i32(o.status),
                C.CL_PROGRAM_BUILD_OPTIONS: cstr(o.options),
                C.CL_PROGRAM_BUILD_LOG: cstr(o.log),
                C.CL_PROGRAM_BINARY_TYPE: u32(o.binary_type),
                C.CL_PROGRAM_BUILD_GLOBAL_VARIABLE_TOTAL_SIZE: size_t(0),
            }[param]
        if param == C.CL_PROGRAM_BINARIES:  # fill the application's buffers
            binary = self._binary(o)
            if c.dst != self.ffi.NULL and c.u[1] >= PTR:
                dst = self.ffi.cast("unsigned char **", c.dst)
                if dst[0] != self.ffi.NULL:
                    self.ffi.memmove(dst[0], binary, len(binary))
            return b"\0" * PTR
        if param in (C.CL_PROGRAM_NUM_KERNELS, C.CL_PROGRAM_KERNEL_NAMES) and (
            o.status != C.CL_BUILD_SUCCESS or o.binary_type != C.CL_PROGRAM_BINARY_TYPE_EXECUTABLE
        ):
            raise CLError(C.CL_INVALID_PROGRAM_EXECUTABLE)
        if param == C.CL_PROGRAM_BINARY_SIZES:
            return size_t(len(self._binary(o)))
        return {
            C.CL_PROGRAM_CONTEXT: lambda: ptrs(self.addr(o.ctx.handle)),
            C.CL_PROGRAM_NUM_DEVICES: lambda: u32(1),
            C.CL_PROGRAM_DEVICES: lambda: ptrs(self.addr(self.device)),
            C.CL_PROGRAM_SOURCE: lambda: cstr("" if o.from_binary else o.source),
            C.CL_PROGRAM_NUM_KERNELS: lambda: size_t(len(o.kernels)),
            C.CL_PROGRAM_KERNEL_NAMES: lambda: cstr(";".join(o.kernels)),
        }[param]()

    def kernel_info(self, k: VKernel, param: int, cls: int, arg: int) -> bytes:
        lib = self.lib
        if cls == lib.RT_INFO_KERNEL_WG:
            v = kernel_wg_info(k.meta, param, self.vdev.limit("max_work_group_size"))
            if v is None:
                raise CLError(CL_INVALID_VALUE, f"clGetKernelWorkGroupInfo param {param:#x}")
            return v
        if cls == lib.RT_INFO_KERNEL_ARG:
            if arg >= len(k.meta.args):
                raise CLError(C.CL_INVALID_ARG_INDEX)
            a = k.meta.args[arg]
            if not k.prog.arg_info or a.type_name is None:
                raise CLError(C.CL_KERNEL_ARG_INFO_NOT_AVAILABLE)
            return kernel_arg_info(a, param)
        return {
            C.CL_KERNEL_FUNCTION_NAME: lambda: cstr(k.name),
            C.CL_KERNEL_NUM_ARGS: lambda: u32(len(k.meta.args)),
            C.CL_KERNEL_CONTEXT: lambda: ptrs(self.addr(k.prog.ctx.handle)),
            C.CL_KERNEL_PROGRAM: lambda: ptrs(self.addr(k.prog.handle)),
            C.CL_KERNEL_ATTRIBUTES: lambda: cstr(k.meta.attrs),
        }[param]()

    def event_info(self, e: VEvent, param: int, cls: int) -> bytes:
        if cls == self.lib.RT_INFO_PROFILING:
            if (
                e.queue is None
                or not e.queue.props & C.CL_QUEUE_PROFILING_ENABLE
                or not self._complete(e)
                or e.held
            ):
                raise CLError(C.CL_PROFILING_INFO_NOT_AVAILABLE)
            start = e.queued_ns
            t = (e.launch_req.res or {}).get("t") if e.launch_req is not None else None
            end = start + int(t * 1e9) if isinstance(t, (int, float)) else max(e.end_ns, start)
            return {
                C.CL_PROFILING_COMMAND_QUEUED: u64(start),
                C.CL_PROFILING_COMMAND_SUBMIT: u64(start),
                C.CL_PROFILING_COMMAND_START: u64(start),
                C.CL_PROFILING_COMMAND_END: u64(end),
                C.CL_PROFILING_COMMAND_COMPLETE: u64(end),
            }[param]
        ctx = e.ctx or (e.queue.ctx if e.queue else None)
        return {
            C.CL_EVENT_COMMAND_QUEUE: lambda: ptrs(self.addr(e.queue.handle) if e.queue else 0),
            C.CL_EVENT_COMMAND_TYPE: lambda: u32(CMD.get(e.kind, C.CL_COMMAND_MARKER)),
            C.CL_EVENT_COMMAND_EXECUTION_STATUS: lambda: i32(self._status(e)),
            C.CL_EVENT_CONTEXT: lambda: ptrs(self.addr(ctx.handle) if ctx else 0),
        }[param]()

    def _status(self, e: VEvent) -> int:
        if e.user:
            return CL_SUBMITTED if e.status is None else e.status
        if e.status is not None and e.status < 0:
            return e.status
        if e.held:
            return CL_QUEUED
        return CL_COMPLETE if self._complete(e) else CL_SUBMITTED

    def _complete(self, e: VEvent) -> bool:
        if e.user or e.held:
            return e.status is not None
        if e.remote is not None and e.remote.complete:
            e.remote = None
            e.end_ns = time.monotonic_ns()
        return e.remote is None

    # ---- events ----
    def event(self, c: Any, q: VQueue | None, kind: str, rev: Any, launch_req: Any = None) -> None:
        bound = self._bind
        if bound is not None:  # a held command runs now: its event was handed out already
            bound.remote, bound.launch_req, bound.held = rev, launch_req, False
            bound.queued_ns = time.monotonic_ns()
            if rev is not None and not rev.reqs:
                bound.remote, bound.end_ns = None, bound.queued_ns
            return
        if not c.want_event:
            return
        e = VEvent(q, kind, rev, time.monotonic_ns(), launch_req)
        if rev is not None and not rev.reqs:
            e.remote, e.end_ns = None, e.queued_ns
        c.ret_event = self.new(self.lib.RT_EVENT, e, q)

    # ---- commands held back for user events ----
    def _resolved(self, e: Any) -> bool:
        """An event a command may follow: not a user event still unset, not a command
        still held back."""
        if not isinstance(e, VEvent):
            return True
        if e.user:
            return e.status is not None
        return not e.held

    def _waits(self, c: Any) -> list[VEvent]:
        n = int(c.n_wait)
        if not n:
            return []
        objs = self.objs
        return [e for e in (objs.get(c.wait_ids[i]) for i in range(n)) if isinstance(e, VEvent)]

    def _blocked(self, q: VQueue | None, waits: list[VEvent]) -> bool:
        if q is not None and q.held and q.in_order:
            return True
        return not all(self._resolved(e) for e in waits)

    def _hold(self, c: Any, q: VQueue, kind: str, waits: list[VEvent], run: Any) -> int:
        """Hold a command back: its event (if asked for) is handed out now, ``run``
        carries the command out once every event it waits on is resolved."""
        ev = None
        if c.want_event:
            ev = VEvent(q, kind, None, time.monotonic_ns(), held=True)
            c.ret_event = self.new(self.lib.RT_EVENT, ev, q)
        q.held.append(Held(run, waits, ev))
        if q not in self.held_queues:
            self.held_queues.append(q)
        return CL_SUCCESS

    def _copy_call(self, c: Any) -> tuple[Any, list[Any]]:
        """A copy of the call that outlives it (its NDRange / origin arrays copied too)."""
        ffi = self.ffi
        cc = ffi.new("clproj_rcall *")
        ffi.memmove(cc, c, ffi.sizeof("clproj_rcall"))
        keep: list[Any] = [cc]
        n = int(c.u[0]) if c.op == self.lib.RT_OP_LAUNCH else 3  # NDRange / rect dimensions
        for f in ("g", "l", "o"):
            v = getattr(c, f)
            if v != ffi.NULL:
                arr = ffi.new("size_t[3]", [v[i] if i < n else 0 for i in range(3)])
                keep.append(arr)
                setattr(cc, f, arr)
        cc.n_wait, cc.wait_ids, cc.n_released = 0, ffi.NULL, 0
        cc.want_event = 0
        return cc, keep

    def _maybe_hold(
        self, c: Any, q: VQueue, kind: str, op: Any, snapshot: Any = None
    ) -> int | None:
        """Run-later handling of an enqueue: None when the command may run now; else it is
        held (non-blocking) or waited for (blocking: the call returns once it ran)."""
        if self._in_held:
            return None
        waits = self._waits(c)
        if not self._blocked(q, waits):
            return None
        cc, keep = self._copy_call(c)
        if kind == "fill":  # the pattern is copied at the call
            pat = self.ffi.new("char[]", bytes(self.ffi.buffer(c.src, int(c.u[0]))))
            keep.append(pat)
            cc.src = pat
        blocking = kind in ("read", "write", "map", "read_rect", "write_rect") and bool(c.u[0])
        restore = snapshot() if snapshot is not None else None

        def run() -> int:
            _ = keep
            if restore is not None:
                with restore:
                    return op(cc)
            return op(cc)

        if blocking or kind == "map":
            held = Held(run, waits, None)
            q.held.append(held)
            if q not in self.held_queues:
                self.held_queues.append(q)
            while held in q.held:
                self.p.uncork()
                self.cond.wait(HELD_POLL_S)
                self._release_held()
            if c.want_event:
                ev = VEvent(q, kind, None, time.monotonic_ns())
                c.ret_event = self.new(self.lib.RT_EVENT, ev, q)
            if kind == "map":
                c.ret = cc.ret
            return held.code
        return self._hold(c, q, kind, waits, run)

    def _release_held(self) -> None:
        """Run the held commands whose events are resolved, in each queue's order."""
        progress = True
        while progress:
            progress = False
            for q in list(self.held_queues):
                i = 0
                while i < len(q.held):
                    h = q.held[i]
                    failed = any(
                        e.status is not None and e.status < 0 for e in h.waits if e.user or e.held
                    )
                    if not failed and not all(self._resolved(e) for e in h.waits):
                        if q.in_order:
                            break
                        i += 1
                        continue
                    q.held.pop(i)
                    progress = True
                    self._bind, self._in_held = h.event, True
                    try:
                        if failed:
                            code = C.CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST
                        else:
                            try:
                                code = h.run()
                            except CLError as exc:
                                code = exc.code
                            except ClprojError as exc:
                                _log_once("held", f"a held command failed: {exc}")
                                code = CL_OUT_OF_RESOURCES
                    finally:
                        self._bind, self._in_held = None, False
                    h.code = code
                    if h.event is not None and code != CL_SUCCESS:
                        h.event.held = False
                        h.event.status = code if code < 0 else CL_OUT_OF_RESOURCES
                if not q.held:
                    self.held_queues.remove(q)
        self.cond.notify_all()

    def _wait_resolved(self, events: list[VEvent]) -> None:
        """Wait (lock released) until no event here is a user event still unset or a
        command still held back."""
        while not all(self._resolved(e) for e in events):
            self._release_held()
            if all(self._resolved(e) for e in events):
                break
            self.p.uncork()
            self.cond.wait(HELD_POLL_S)

    def user_event(self, c: Any) -> int:
        ctx = self.get(c.id, VContext)
        e = VEvent(None, "user", None, time.monotonic_ns(), ctx=ctx, user=True)
        c.ret = self.new(self.lib.RT_EVENT, e, ctx)
        return CL_SUCCESS

    def user_status(self, c: Any) -> int:
        e = self.get(c.id, VEvent)
        if not e.user:
            return C.CL_INVALID_EVENT
        if e.status is not None:
            return CL_INVALID_OPERATION  # set once only
        e.status = int(self.ffi.cast("int64_t", c.u[0]))
        e.end_ns = time.monotonic_ns()
        self._release_held()
        self.cb_wake.set()
        return CL_SUCCESS

    # ---- operations ----
    def call(self, c: Any) -> int:
        lib, op = self.lib, c.op
        if op == lib.RT_OP_INFO:
            value = self.info(c)
            size = int(c.u[1])
            if c.dst != self.ffi.NULL:
                if size < len(value):
                    return CL_INVALID_VALUE
                if int(c.u[0]) != C.CL_PROGRAM_BINARIES or c.kind != lib.RT_PROGRAM:
                    self.ffi.memmove(c.dst, value, len(value))
            if c.size_ret != self.ffi.NULL:
                c.size_ret[0] = len(value)
            return CL_SUCCESS
        if op == lib.RT_OP_LAUNCH:
            return self.launch(c)
        if op in (lib.RT_OP_READ, lib.RT_OP_WRITE, lib.RT_OP_COPY, lib.RT_OP_FILL):
            return self.transfer(c)
        if op == lib.RT_OP_RELEASE:
            self.release(c.id)
        elif op == lib.RT_OP_WAIT:
            return self.wait(c)
        elif op == lib.RT_OP_FINISH:
            q = self.get(c.id, VQueue)
            while q.held:  # commands held for user events come first
                self._release_held()
                if q.held:
                    self.p.uncork()
                    self.cond.wait(HELD_POLL_S)
            self.p.finish()
            self._harvest()
        elif op == lib.RT_OP_FLUSH:
            self.p.pump(0)
        elif op == lib.RT_OP_CREATE_CONTEXT:
            c.ret = self.new(lib.RT_CONTEXT, VContext())
        elif op == lib.RT_OP_CREATE_QUEUE:
            ctx = self.get(c.id, VContext)
            props = int(c.u[0])
            known = C.CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE | C.CL_QUEUE_PROFILING_ENABLE
            if props & ~known:
                return C.CL_INVALID_QUEUE_PROPERTIES
            c.ret = self.new(lib.RT_QUEUE, VQueue(ctx, props), ctx)
        elif op == lib.RT_OP_CREATE_BUFFER:
            return self.create_buffer(c)
        elif op == lib.RT_OP_CREATE_SUBBUF:
            return self.create_subbuffer(c)
        elif op == lib.RT_OP_CREATE_PROGRAM:
            return self.create_program(c)
        elif op == lib.RT_OP_BUILD:
            return self.build(c)
        elif op == lib.RT_OP_COMPILE:
            return self.compile(c)
        elif op == lib.RT_OP_LINK:
            return self.link(c)
        elif op == lib.RT_OP_CREATE_KERNEL:
            prog = self.get(c.id, VProgram)
            name = self.ffi.string(self.ffi.cast("char *", c.src)).decode(errors="replace")
            c.ret = self.create_kernel(prog, name)
        elif op == lib.RT_OP_CLONE_KERNEL:
            k = self.get(c.id, VKernel)
            c.ret = self.create_kernel(k.prog, k.name)
            lib.clproj_route_kernel_copy_args(c.ret, k.handle)
        elif op == lib.RT_OP_KERNELS_IN_PROGRAM:
            prog = self.get(c.id, VProgram)
            if prog.status != C.CL_BUILD_SUCCESS or not prog.remote:
                return C.CL_INVALID_PROGRAM_EXECUTABLE
            names = list(prog.kernels)
            if c.dst != self.ffi.NULL:
                if int(c.u[0]) < len(names):
                    return CL_INVALID_VALUE
                out = self.ffi.cast("void **", c.dst)
                for i, n in enumerate(names):
                    out[i] = self.create_kernel(prog, n)
            c.u[1] = len(names)
        elif op == lib.RT_OP_MARKER:  # u[0]: 0 marker, 1 migration (a hint), 2 barrier
            q = self.get(c.id, VQueue)
            kind = ("marker", "migrate", "barrier")[int(c.u[0])]
            held = self._maybe_hold(c, q, kind, self.call)
            if held is not None:
                return held
            from runtime.cluster.client.platform import RemoteEvent

            self.event(c, q, kind, RemoteEvent(self.p, list(self.p.pending.values())))
        elif op in (lib.RT_OP_READ_RECT, lib.RT_OP_WRITE_RECT, lib.RT_OP_COPY_RECT):
            return self.transfer_rect(c)
        elif op == lib.RT_OP_CALLBACK:
            return self.set_callback(c)
        elif op == lib.RT_OP_MAP:
            return self.map(c)
        elif op == lib.RT_OP_UNMAP:
            return self.unmap(c)
        elif op == lib.RT_OP_USER_EVENT:
            return self.user_event(c)
        elif op == lib.RT_OP_USER_STATUS:
            return self.user_status(c)
        else:
            return CL_INVALID_OPERATION
        return CL_SUCCESS

    def wait(self, c: Any) -> int:
        """clWaitForEvents: user events and held commands first (lock released while
        waiting), then the replies."""
        evs = [self.objs.get(c.wait_ids[i]) for i in range(c.n_wait)]
        evs = [e for e in evs if isinstance(e, VEvent)]
        if not all(self._resolved(e) for e in evs):
            self._wait_resolved(evs)
        failed = False
        for e in evs:
            if e.status is not None and e.status < 0:
                failed = True
            elif e.remote is not None:
                e.remote.wait()  # raises if the command failed: remote stays set
                e.remote, e.end_ns = None, time.monotonic_ns()  # no second pump
        return C.CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST if failed else CL_SUCCESS

    # ---- buffers ----
    def create_buffer(self, c: Any) -> int:
        flags, size, host = int(c.u[0]), int(c.u[1]), c.src
        ctx = self.get(c.id, VContext)
        access = flags & MEM_ACCESS
        if access & (access - 1) or flags & ~(
            MEM_ACCESS | MEM_USE_HOST_PTR | MEM_ALLOC_HOST_PTR | MEM_COPY_HOST_PTR | MEM_HOST_ACCESS
        ):
            return CL_INVALID_VALUE
        if size == 0 or size > self.vdev.limit("max_mem_alloc_size"):
            return C.CL_INVALID_BUFFER_SIZE
        uses = flags & (MEM_USE_HOST_PTR | MEM_COPY_HOST_PTR)
        if bool(uses) != (host != self.ffi.NULL) or (
            flags & MEM_USE_HOST_PTR and flags & (MEM_COPY_HOST_PTR | MEM_ALLOC_HOST_PTR)
        ):
            return C.CL_INVALID_HOST_PTR
        hostbuf = self.ffi.buffer(host, size) if uses else None
        buf = self.p.create_buffer(size, access or C.CL_MEM_READ_WRITE, hostbuf=hostbuf)
        m = VMem(ctx, flags, size, buf, self.addr(host) if uses else 0)
        c.ret = self.new(self.lib.RT_MEM, m, ctx)
        return CL_SUCCESS

    def create_subbuffer(self, c: Any) -> int:
        """clCreateSubBuffer: a region of a buffer (the OpenCL checks, in PoCL's order).
        It shares the buffer's content: transfers are the buffer's at an offset, a kernel
        argument is the region (a real sub-buffer on the node)."""
        parent = self.get(c.id, VMem)
        flags, origin, size = int(c.u[0]), int(c.u[1]), int(c.u[2])
        if parent.parent is not None:
            return C.CL_INVALID_MEM_OBJECT
        access = flags & MEM_ACCESS
        pacc = parent.flags & MEM_ACCESS or C.CL_MEM_READ_WRITE
        if (
            access & (access - 1)
            or flags & (MEM_USE_HOST_PTR | MEM_ALLOC_HOST_PTR | MEM_COPY_HOST_PTR)
            or flags & ~(MEM_ACCESS | MEM_HOST_ACCESS)
            or (pacc == C.CL_MEM_WRITE_ONLY and access & (C.CL_MEM_READ_WRITE | C.CL_MEM_READ_ONLY))
            or (pacc == C.CL_MEM_READ_ONLY and access & (C.CL_MEM_READ_WRITE | C.CL_MEM_WRITE_ONLY))
        ):
            return CL_INVALID_VALUE
        if size == 0:
            return C.CL_INVALID_BUFFER_SIZE
        if origin + size > parent.size:
            return CL_INVALID_VALUE
        if origin % max(1, self.vdev.limit("mem_base_addr_align") // 8):
            return C.CL_MISALIGNED_SUB_BUFFER_OFFSET
        inherited = parent.flags & (MEM_USE_HOST_PTR | MEM_ALLOC_HOST_PTR | MEM_COPY_HOST_PTR)
        if not access:
            access = parent.flags & MEM_ACCESS
        if not flags & MEM_HOST_ACCESS:
            inherited |= parent.flags & MEM_HOST_ACCESS
        m = VMem(
            parent.ctx,
            access | (flags & MEM_HOST_ACCESS) | inherited,
            size,
            parent.buf,
            parent.host_ptr + origin if parent.host_ptr else 0,
            parent=parent,
            origin=origin,
        )
        c.ret = self.new(self.lib.RT_MEM, m, parent)
        return CL_SUCCESS

    # ---- programs ----
    def _node_source(self, src: str) -> str:
        """The source as the nodes build it: behind the virtual device's prefix."""
        return self.vdev.source_prefix() + src

    def create_program(self, c: Any) -> int:
        ctx = self.get(c.id, VContext)
        data = bytes(self.ffi.buffer(c.src, int(c.u[0])))
        if not c.u[1]:  # from source
            prog = VProgram(ctx, data.decode(errors="replace"))
            c.ret = self.new(self.lib.RT_PROGRAM, prog, ctx)
            return CL_SUCCESS
        prog = self._from_binary(ctx, data)
        if prog is None:
            return C.CL_INVALID_BINARY
        c.ret = self.new(self.lib.RT_PROGRAM, prog, ctx)
        return CL_SUCCESS

    def _from_binary(self, ctx: VContext, data: bytes) -> VProgram | None:
        """A program from one of this platform's binaries (see BINARY_MAGIC)."""
        if data.startswith(BINARY_MAGIC):
            prog = VProgram(ctx, data[len(BINARY_MAGIC) :].decode(errors="replace"))
            prog.from_binary = True
            prog.binary_type = C.CL_PROGRAM_BINARY_TYPE_EXECUTABLE
            return prog
        if not data.startswith(PROGRAM_MAGIC):
            return None
        try:
            d = msgpack.unpackb(data[len(PROGRAM_MAGIC) :], raw=False)
            return self._from_description(ctx, d)
        except (ValueError, TypeError, KeyError, ClprojError, CLError) as exc:
            _log_once("binary", f"clCreateProgramWithBinary: unusable binary ({exc})")
            return None

    def _from_description(self, ctx: VContext, d: dict[str, Any]) -> VProgram:
        """A compiled object or a linked program again: compiled (and linked) now, as
        its binary would be loaded."""
        from runtime.cluster.client.platform import RemoteError

        prog = VProgram(ctx, str(d.get("src", "")), str(d.get("opts", "")))
        prog.from_binary = True
        prog.headers = [(str(n), str(s)) for n, s in d.get("hdrs") or []]
        prog.binary_type = int(d.get("type", C.CL_PROGRAM_BINARY_TYPE_EXECUTABLE))
        try:
            if d.get("parts"):
                prog.parts = [self._from_description(ctx, p) for p in d["parts"]]
                prog.remote = self.p.link_program([p.remote for p in prog.parts], prog.options)
                self._built(prog, prog.remote.info or {})
            elif prog.binary_type != C.CL_PROGRAM_BINARY_TYPE_EXECUTABLE:
                prog.remote = self.p.compile_program(
                    self._node_source(prog.source), prog.options, prog.headers
                )
                prog.status = C.CL_BUILD_SUCCESS
        except RemoteError as exc:
            raise CLError(C.CL_INVALID_BINARY, str(exc)) from None
        return prog

    def _failed(self, prog: VProgram, exc: Any, default: int) -> int:
        res = getattr(exc, "res", None) or {}
        prog.status = C.CL_BUILD_ERROR
        prog.log = str(res.get("log") or getattr(exc, "cause", None) or exc)
        prog.kernels = {}
        code = res.get("code")
        return code if code == C.CL_INVALID_BUILD_OPTIONS else default

    def _built(self, prog: VProgram, info: dict[str, Any]) -> None:
        prog.status = C.CL_BUILD_SUCCESS
        prog.log = str(info.get("log") or "")
        prog.kernels = {}
        for m in info.get("kernels") or []:
            km = KMeta.from_wire(m)
            prog.kernels[km.name] = km

    def _options(self, c: Any) -> str:
        if c.src == self.ffi.NULL:
            return ""
        return self.ffi.string(self.ffi.cast("char *", c.src)).decode(errors="replace")

    def build(self, c: Any) -> int:
        from runtime.cluster.client.platform import RemoteError

        prog = self.get(c.id, VProgram)
        if prog.nkernels:
            return CL_INVALID_OPERATION  # kernels are attached to it
        if prog.from_binary and prog.binary_type in (
            C.CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT,
            C.CL_PROGRAM_BINARY_TYPE_LIBRARY,
        ):
            return CL_INVALID_OPERATION  # a compiled object's binary: link it instead
        if prog.parts:  # a linked program: loaded from its binary already, or made by link
            return CL_SUCCESS if prog.from_binary else CL_INVALID_OPERATION
        opts = self._options(c)
        prog.options, prog.hash = opts, ""
        prog.headers, prog.parts = [], []
        prog.remote = self.p.create_program(self._node_source(prog.source), opts)
        try:
            info = self.p.build_program(prog.remote)
        except RemoteError as exc:
            prog.binary_type = C.CL_PROGRAM_BINARY_TYPE_NONE
            return self._failed(prog, exc, C.CL_BUILD_PROGRAM_FAILURE)
        prog.binary_type = C.CL_PROGRAM_BINARY_TYPE_EXECUTABLE
        self._built(prog, info)
        return CL_SUCCESS

    def compile(self, c: Any) -> int:
        """clCompileProgram: compiled on a node now (errors and log at the call); the
        headers are other programs' sources, by their include names."""
        from runtime.cluster.client.platform import RemoteError

        prog = self.get(c.id, VProgram)
        if prog.nkernels:
            return CL_INVALID_OPERATION
        if prog.from_binary or prog.parts:
            return CL_INVALID_OPERATION
        headers = []
        for i in range(int(c.n_ids)):
            hp = self.objs.get(c.ids[i])
            if not isinstance(hp, VProgram) or hp.from_binary:
                return C.CL_INVALID_PROGRAM
            name = self.ffi.string(c.names[i]).decode(errors="replace")
            headers.append((name, hp.source))
        opts = self._options(c)
        prog.options, prog.hash, prog.headers = opts, "", headers
        try:
            prog.remote = self.p.compile_program(self._node_source(prog.source), opts, headers)
        except RemoteError as exc:
            prog.binary_type = C.CL_PROGRAM_BINARY_TYPE_NONE
            return self._failed(prog, exc, C.CL_COMPILE_PROGRAM_FAILURE)
        prog.status = C.CL_BUILD_SUCCESS
        prog.binary_type = C.CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT
        prog.log = str((prog.remote.info or {}).get("log") or "")
        prog.kernels = {}
        return CL_SUCCESS

    def link(self, c: Any) -> int:
        """clLinkProgram: a new program from compiled ones (a library with
        -create-library). A failed link still returns the program (its log says why)."""
        from runtime.cluster.client.platform import RemoteError

        ctx = self.get(c.id, VContext)
        parts = []
        for i in range(int(c.n_ids)):
            p = self.objs.get(c.ids[i])
            if not isinstance(p, VProgram):
                return C.CL_INVALID_PROGRAM
            if p.status != C.CL_BUILD_SUCCESS or p.binary_type not in (
                C.CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT,
                C.CL_PROGRAM_BINARY_TYPE_LIBRARY,
            ):
                return CL_INVALID_OPERATION
            parts.append(p)
        opts = self._options(c)
        prog = VProgram(ctx, "", opts)
        prog.parts = parts
        library = "-create-library" in opts.split()
        c.ret = self.new(self.lib.RT_PROGRAM, prog, ctx)
        try:
            prog.remote = self.p.link_program([p.remote for p in parts], opts)
        except RemoteError as exc:
            return self._failed(prog, exc, C.CL_LINK_PROGRAM_FAILURE)
        prog.binary_type = (
            C.CL_PROGRAM_BINARY_TYPE_LIBRARY if library else C.CL_PROGRAM_BINARY_TYPE_EXECUTABLE
        )
        self._built(prog, prog.remote.info or {})
        if library:
            prog.kernels = {}
        return CL_SUCCESS

    def create_kernel(self, prog: VProgram, name: str) -> Any:
        if (
            prog.status != C.CL_BUILD_SUCCESS
            or prog.binary_type != C.CL_PROGRAM_BINARY_TYPE_EXECUTABLE
            or prog.remote is None
        ):
            raise CLError(C.CL_INVALID_PROGRAM_EXECUTABLE)
        meta = prog.kernels.get(name)
        if meta is None:
            raise CLError(C.CL_INVALID_KERNEL_NAME, name)
        k = VKernel(prog, name, meta, self.p.create_kernel(prog.remote, name))
        h = self.new(self.lib.RT_KERNEL, k, prog)
        kinds = meta.kinds()
        sizes = self.ffi.new("uint32_t[]", meta.sizes() or [0])
        self.lib.clproj_route_kernel_args(h, len(kinds), kinds, sizes)
        k.argv = self.lib.clproj_route_kernel_argv(h)
        k.gens = [0] * len(kinds)
        prog.nkernels += 1
        return h

    def sync_args(self, k: VKernel) -> int:
        """Take in the arguments the app set since the last launch (route.c answered each
        clSetKernelArg and kept the value; ``gen`` says which changed). An argument never
        set, or naming a buffer released since: CL_INVALID_KERNEL_ARGS."""
        argv = k.argv
        gens = k.gens
        remote = k.remote.args
        for i in range(len(gens)):
            a = argv[i]
            g = a.gen
            if g == gens[i]:
                continue
            if g == 0:
                return C.CL_INVALID_KERNEL_ARGS
            kind = a.kind
            if kind == RT_SET_BYTES:
                data = self.ffi.unpack(self.ffi.cast("char *", a.bytes), int(a.size))
                remote[i] = data
                k.scalars[i] = data
            else:
                k.scalars.pop(i, None)
                if kind == RT_SET_MEM:
                    m = self.objs.get(a.id)
                    if not isinstance(m, VMem):
                        return C.CL_INVALID_KERNEL_ARGS
                    remote[i] = m.arg()
                elif kind == RT_SET_LOCAL:
                    from runtime.cluster.client.platform import LocalMemory

                    remote[i] = LocalMemory(int(a.size))
                else:
                    remote[i] = None
            gens[i] = g
        return CL_SUCCESS

    def release(self, oid: int) -> None:
        o = self.objs.pop(oid, None)
        if isinstance(o, VMem):
            if o.parent is None:
                self.p.release(o.buf)
        elif isinstance(o, VProgram) and o.remote is not None:
            linked_into = o.binary_type != C.CL_PROGRAM_BINARY_TYPE_EXECUTABLE and any(
                isinstance(x, VProgram) and o in x.parts for x in self.objs.values()
            )
            if not linked_into:  # a linked program may need its parts on another device
                self.p.release(o.remote)
        elif isinstance(o, VKernel):
            o.prog.nkernels -= 1
        if o is not None:
            o.handle = None
        parent = self.parents.pop(oid, None)
        if parent is not None:
            self.lib.clproj_route_release(parent)

    # ---- transfers ----
    def transfer(self, c: Any) -> int:
        lib, ffi = self.lib, self.ffi
        q = self.get(int(c.u[5]), VQueue)
        m = self.get(c.id, VMem)
        off, n = int(c.u[1]), int(c.u[2])
        if c.op == lib.RT_OP_COPY:
            dst = self.get(c.id2, VMem)
            so, do, n = off, n, int(c.u[3])
            if n == 0 or so + n > m.size or do + n > dst.size:
                return CL_INVALID_VALUE
            if m.buf is dst.buf and _overlap(m.origin + so, dst.origin + do, n):
                return C.CL_MEM_COPY_OVERLAP
            held = self._maybe_hold(c, q, "copy", self.transfer)
            if held is not None:
                return held
            ev = self.p.enqueue_copy_buffer(m.buf, dst.buf, n, m.origin + so, dst.origin + do)
            self.event(c, q, "copy", ev)
            return CL_SUCCESS
        if c.op == lib.RT_OP_FILL:
            ps = int(c.u[0])
            if ps & (ps - 1) or n == 0 or off % ps or n % ps or off + n > m.size:
                return CL_INVALID_VALUE
            held = self._maybe_hold(c, q, "fill", self.transfer)
            if held is not None:
                return held
            ev = self.p.enqueue_fill(m.buf, bytes(ffi.buffer(c.src, ps)), m.origin + off, n)
            self.event(c, q, "fill", ev)
            return CL_SUCCESS
        if off + n > m.size:
            return CL_INVALID_VALUE
        write = c.op == lib.RT_OP_WRITE
        held = self._maybe_hold(c, q, "write" if write else "read", self.transfer)
        if held is not None:
            return held
        if write:
            ev = self.p.enqueue_write(
                m.buf, ffi.buffer(c.src, n), offset=m.origin + off, blocking=bool(c.u[0])
            )
            self.event(c, q, "write", ev)
        else:
            _, ev = self.p.enqueue_read(
                m.buf,
                out=ffi.buffer(c.dst, n),
                offset=m.origin + off,
                size=n,
                blocking=bool(c.u[0]),
            )
            self.event(c, q, "read", ev)
        return CL_SUCCESS

    def transfer_rect(self, c: Any) -> int:
        """clEnqueueRead/Write/CopyBufferRect (route.c checked the pitches and resolved 0).

        Reads fetch the covering byte span of the buffer and scatter its rows into the
        app's memory when the read completes; writes gather the rows and write the span
        (a buffer side with gaps is read first, so the bytes between rows keep their
        content); copies stay on the devices, one copy per run of contiguous rows."""
        lib, ffi = self.lib, self.ffi
        q = self.get(int(c.u[5]), VQueue)
        m = self.get(c.id, VMem)
        region = [int(c.g[i]) for i in range(3)]
        a_org = [int(c.l[i]) for i in range(3)]
        b_org = [int(c.o[i]) for i in range(3)]
        a_rows = rect_rows(a_org, region, int(c.u[1]), int(c.u[2]))
        b_rows = rect_rows(b_org, region, int(c.u[3]), int(c.u[4]))
        w = region[0]
        lo, hi = a_rows[0], a_rows[-1] + w
        if hi > m.size:
            return CL_INVALID_VALUE
        kind = {lib.RT_OP_READ_RECT: "read_rect", lib.RT_OP_WRITE_RECT: "write_rect"}
        if c.op == lib.RT_OP_COPY_RECT:
            dst = self.get(c.id2, VMem)
            if b_rows[-1] + w > dst.size:
                return CL_INVALID_VALUE
            if dst is m:  # PoCL's order: pitches must agree, then no overlap
                if c.u[1] != c.u[3] or c.u[2] != c.u[4]:
                    return CL_INVALID_VALUE
                if copy_overlap(a_org, b_org, region, int(c.u[1]), int(c.u[2])):
                    return C.CL_MEM_COPY_OVERLAP
            held = self._maybe_hold(c, q, "copy_rect", self.transfer_rect)
            if held is not None:
                return held
            from runtime.cluster.client.platform import RemoteEvent

            reqs = []
            so0, do0 = m.origin, dst.origin
            for so, do, n in runs(a_rows, b_rows, w):
                reqs += self.p.enqueue_copy_buffer(m.buf, dst.buf, n, so0 + so, do0 + do).reqs
            self.event(c, q, "copy_rect", RemoteEvent(self.p, reqs))
            return CL_SUCCESS
        held = self._maybe_hold(c, q, kind[c.op], self.transfer_rect)
        if held is not None:
            return held
        base = m.origin  # a sub-buffer's rows are its buffer's, from its origin
        ptr = c.dst if c.op == lib.RT_OP_READ_RECT else c.src
        host = memoryview(ffi.buffer(ffi.cast("char *", ptr), b_rows[-1] + w))
        blocking = bool(c.u[0])
        pieces = runs(a_rows, b_rows, w)
        if c.op == lib.RT_OP_WRITE_RECT:
            if len(pieces) == 1:  # contiguous on both sides: the app's memory as it is
                _, ho, n = pieces[0]
                ev = self.p.enqueue_write(
                    m.buf, host[ho : ho + n], offset=base + lo, blocking=blocking
                )
            else:
                if len(runs(a_rows, a_rows, w)) == 1:  # the buffer side is contiguous
                    span = bytearray(hi - lo)
                else:  # keep the bytes between the rows: read the span first
                    span, _ = self.p.enqueue_read(
                        m.buf, offset=base + lo, size=hi - lo, blocking=True
                    )
                mv = memoryview(span)
                for ao, ho, n in pieces:
                    mv[ao - lo : ao - lo + n] = host[ho : ho + n]
                ev = self.p.enqueue_write(m.buf, mv, offset=base + lo, blocking=blocking)
            self.event(c, q, "write_rect", ev)
            return CL_SUCCESS
        if len(pieces) == 1:  # contiguous on both sides: straight into the app's memory
            _, ho, n = pieces[0]
            _, ev = self.p.enqueue_read(
                m.buf, out=host[ho : ho + n], offset=base + lo, size=n, blocking=blocking
            )
            self.event(c, q, "read_rect", ev)
            return CL_SUCCESS
        tmp = bytearray(hi - lo)

        def scatter() -> None:
            src = memoryview(tmp)
            for ao, ho, n in pieces:
                host[ho : ho + n] = src[ao - lo : ao - lo + n]

        _, ev = self.p.enqueue_read(m.buf, out=tmp, offset=base + lo, size=hi - lo, blocking=False)
        if ev.reqs:
            ev.reqs[-1].then(scatter)
        else:  # served from the host copy: already in tmp
            scatter()
        if blocking:
            ev.wait()
            self.p.raise_async()
        self.event(c, q, "read_rect", ev)
        return CL_SUCCESS

    # ---- event callbacks ----
    def set_callback(self, c: Any) -> int:
        """clSetEventCallback: remembered here, fired by the callback thread once due
        (SUBMITTED/RUNNING at once: every command is submitted when enqueued; COMPLETE
        when the event's replies are in). route.c retained the event for the callback."""
        e = self.get(c.id, VEvent)
        addr = self.addr
        self.callbacks.append((c.ret, e, int(c.u[0]), addr(c.src), addr(c.dst)))
        if self.cb_thread is None:
            self.cb_thread = threading.Thread(
                target=self._callback_loop, name="clproj-route-callbacks", daemon=True
            )
            self.cb_thread.start()
        self.cb_wake.set()
        return CL_SUCCESS

    def _due_callbacks(self) -> list[tuple[Any, int, int, int]]:
        """Take the callbacks that are due (under the lock): ``(handle, status, fn, user)``,
        SUBMITTED before RUNNING before COMPLETE."""
        due, keep = [], []
        for h, e, kind, fn, user in self.callbacks:
            if kind != CL_COMPLETE:
                due.append((h, kind, fn, user))
                continue
            if e.user or e.held:  # a user event / a command held back for one
                if e.held or e.status is None:
                    keep.append((h, e, kind, fn, user))
                else:
                    due.append((h, e.status, fn, user))
                continue
            reqs = e.remote.reqs if e.remote is not None else []
            if all(r.done for r in reqs):
                failed = any(r.err for r in reqs) or (e.status is not None and e.status < 0)
                due.append((h, CL_OUT_OF_RESOURCES if failed else CL_COMPLETE, fn, user))
            else:
                keep.append((h, e, kind, fn, user))
        self.callbacks = keep
        due.sort(key=lambda d: -d[1] if d[1] >= 0 else 0)
        return due

    def _callback_loop(self) -> None:
        """The callback thread: while callbacks wait, pump the client under the route
        lock every CALLBACK_POLL_S and fire the due ones *outside* it (a callback may call
        OpenCL, or wake a thread that does). Never fires after stop_callbacks()."""
        ffi, lib = self.ffi, self.lib
        while True:
            self.cb_wake.wait()
            with self.lock:
                if self.cb_stop or self.closed:
                    return
                if self.callbacks:
                    self.p.pump(0)
                due = self._due_callbacks()
                if not self.callbacks:
                    self.cb_wake.clear()
            for h, status, fn, user in due:
                if self.cb_stop:
                    return
                try:
                    lib.clproj_route_fire(
                        ffi.cast("void *", fn), h, status, ffi.cast("void *", user)
                    )
                except Exception as exc:  # never let the thread die: later ones still fire
                    _log_once("callback", f"event callback failed: {exc!r}")
            if self.callbacks:
                time.sleep(CALLBACK_POLL_S)

    def stop_callbacks(self) -> None:
        """At exit, before close (and not under the route lock: a callback being fired
        may be calling OpenCL): no callback fires after this returns."""
        self.cb_stop = True
        self.cb_wake.set()
        t = self.cb_thread
        if t is not None and t is not threading.current_thread():
            t.join(5.0)

    def map(self, c: Any) -> int:
        ffi = self.ffi
        q = self.get(int(c.u[5]), VQueue)
        m = self.get(c.id, VMem)
        off, n, flags = int(c.u[1]), int(c.u[2]), int(c.u[3])
        if n == 0 or off + n > m.size:
            return CL_INVALID_VALUE
        held = self._maybe_hold(c, q, "map", self.map)
        if held is not None:
            return held
        if m.flags & MEM_USE_HOST_PTR:
            keep = None
            ptr = ffi.cast("char *", m.host_ptr) + off
        else:
            keep = ffi.new("char[]", n)
            ptr = keep
        if not flags & C.CL_MAP_WRITE_INVALIDATE_REGION:
            self.p.enqueue_read(
                m.buf, out=ffi.buffer(ptr, n), offset=m.origin + off, size=n, blocking=True
            )
        write = bool(flags & (C.CL_MAP_WRITE | C.CL_MAP_WRITE_INVALIDATE_REGION))
        m.maps[self.addr(ptr)] = (keep, off, n, write)
        c.ret = ptr
        self.event(c, q, "map", None)
        return CL_SUCCESS

    def unmap(self, c: Any) -> int:
        q = self.get(int(c.u[5]), VQueue)
        m = self.get(c.id, VMem)
        if self.addr(c.src) not in m.maps:
            return CL_INVALID_VALUE
        held = self._maybe_hold(c, q, "unmap", self.unmap)
        if held is not None:
            return held
        _keep, off, n, write = m.maps.pop(self.addr(c.src))
        ev = None
        if write:
            ev = self.p.enqueue_write(
                m.buf,
                self.ffi.buffer(self.ffi.cast("char *", c.src), n),
                offset=m.origin + off,
                blocking=False,
            )
        self.event(c, q, "unmap", ev)
        return CL_SUCCESS

    def signature(self, k: VKernel, g: list[int], lo: list[int] | None) -> tuple[str, str]:
        """The launch's record signature (the placement key: program, kernel, NDRange,
        scalar arguments) and its family (the same without the scalars' values)."""
        scal = tuple(k.scalars[i] for i in sorted(k.scalars))
        key = (id(k.prog.remote), k.name, tuple(g), lo and tuple(lo), scal)
        sig = self.sigs.get(key)
        if sig is None:
            from intercept.record import program_hash, signature

            if not k.prog.hash:
                k.prog.hash = program_hash(k.prog.source, k.prog.options)
            ph = k.prog.hash
            fam = self.families.get(key[:4])
            if fam is None:  # once per kernel and NDRange, not per scalar value
                fam = signature(ph, k.name, len(g), g, lo, [b"" for _ in scal])
                if len(self.families) > 10000:
                    self.families.clear()
                self.families[key[:4]] = fam
            sig = (signature(ph, k.name, len(g), g, lo, list(scal)), fam)
            if len(self.sigs) > 100000:
                self.sigs.clear()
            self.sigs[key] = sig
        return sig

    def _args_snapshot(self, k: VKernel) -> Any:
        """The kernel's arguments as they are now, for a launch held back: set again
        when it runs (clSetKernelArg after the enqueue must not change it)."""
        import contextlib

        args, scal = dict(k.remote.args), dict(k.scalars)

        @contextlib.contextmanager
        def swap() -> Any:
            old = (k.remote.args, k.scalars)
            k.remote.args, k.scalars = args, scal
            try:
                yield
            finally:
                k.remote.args, k.scalars = old

        return swap()

    def launch(self, c: Any) -> int:
        q = self.get(int(c.u[5]), VQueue)
        k = self.get(c.id, VKernel)
        dim = int(c.u[0])
        g = [int(c.g[i]) for i in range(dim)]
        lo = [int(c.l[i]) for i in range(dim)] if c.l != self.ffi.NULL else None
        off = [int(c.o[i]) for i in range(dim)] if c.o != self.ffi.NULL else None
        if not self._in_held:  # a held launch runs with the arguments of its enqueue
            bad = self.sync_args(k)
            if bad:
                return bad
        args = k.remote.args
        if len(args) != len(k.meta.args):
            return C.CL_INVALID_KERNEL_ARGS
        if lo is not None:
            wg = 1
            for x in lo:
                wg *= x
            if wg > self.vdev.limit("max_work_group_size") or any(
                x > m
                for x, m in zip(lo, self.vdev.limits.get("max_work_item_sizes") or lo, strict=False)
            ):
                return C.CL_INVALID_WORK_GROUP_SIZE
        held = self._maybe_hold(c, q, "launch", self.launch, lambda: self._args_snapshot(k))
        from runtime.cluster.client.platform import SubRegion

        if held is not None:
            return held
        sig, fam = self.signature(k, g, lo)
        first = self.hooks and sig not in self.seen_sigs
        if first:
            if len(self.seen_sigs) >= 100_000:  # a new signature every launch
                self.seen_sigs.clear()
            self.seen_sigs.add(sig)
            self._notify_hooks(k, g, lo, off)
        plan = None
        if self.split is not None and not any(isinstance(v, SubRegion) for v in args.values()):
            plan = self.split.plan(sig, k.remote, first)  # (a sub-buffer argument: unsplit)
        # the split's measured check: this launch alone, from issue to completion
        timed = self.split is not None and self.split.timing(sig, plan is not None)
        if timed:
            self._settled(list(self.p.pending.values()))
            t0 = time.perf_counter()
        try:
            if plan is not None:
                ev = self.p.enqueue_split_launch(k.remote, g, lo, off, plan, key=sig)
            else:
                ev = self.p.enqueue_launch(k.remote, g, lo, off, key=sig, family=fam)
            if timed and self._settled(ev.reqs):
                self.split.observe(sig, time.perf_counter() - t0, plan is not None)
        except ClprojError as exc:
            if "not set" in str(exc.cause if hasattr(exc, "cause") else exc):
                return C.CL_INVALID_KERNEL_ARGS
            raise
        req = ev.reqs[-1]
        self.launches.append((k.name, plan.label if plan is not None else req.dev, req))
        if len(self.launches) >= 4096:
            self._harvest()
        self.event(c, q, "launch", ev, req)
        return CL_SUCCESS

    def _settled(self, reqs: list[Any]) -> bool:
        """Every request in ``reqs`` completed without error; their errors stay for the
        app's own wait (unlike RemoteEvent.wait). False if one failed or on timeout."""
        return self.p.settle(reqs) and not any(r.err for r in reqs)

    def _notify_hooks(
        self, k: VKernel, g: list[int], lo: list[int] | None, off: list[int] | None
    ) -> None:
        """The first launch of a signature, for the hooks (projection in route mode).

        Its buffers are read back and a full record saved only when the reuse cache will
        emulate it (runtime.projection.app_hook.route_admit, as project mode's admit); otherwise
        the hook projects its metadata from the cache's anchors (at most every few
        tens of milliseconds per kernel family)."""
        from intercept import hooks
        from intercept.record import ArgRecord, LaunchRecord, new_id, save, sha256
        from intercept.shim_runtime import record_dir
        from runtime.cluster.client.platform import LocalMemory, RemoteBuffer, SubRegion
        from runtime.projection.app_hook import route_admit

        args, bufs = [], {}
        for i in range(max(k.remote.args, default=-1) + 1):
            v = k.remote.args.get(i)
            if isinstance(v, SubRegion):  # recorded as the region, read from its buffer
                bufs[i] = v
                args.append(ArgRecord(i, "buffer", size=v.size, flags=v.buf.flags))
            elif isinstance(v, RemoteBuffer):
                bufs[i] = v
                args.append(ArgRecord(i, "buffer", size=v.size, flags=v.flags))
            elif isinstance(v, LocalMemory):
                args.append(ArgRecord(i, "local", size=v.size))
            elif v is None:
                args.append(ArgRecord(i, "null"))
            else:
                args.append(ArgRecord(i, "scalar", data=bytes(v)))
        rec = LaunchRecord(
            kernel=k.name,
            source=k.prog.source,
            options=k.prog.options,
            args=args,
            work_dim=len(g),
            global_size=g,
            local_size=lo,
            global_offset=off,
            device={"name": "clproj virtual device"},
            created=time.time(),
        )
        if not route_admit(rec):
            return
        for a in args:
            if a.index in bufs:
                b = bufs[a.index]
                if isinstance(b, SubRegion):
                    data, _ = self.p.enqueue_read(
                        b.buf, offset=b.offset, size=b.size, blocking=True
                    )
                else:
                    data, _ = self.p.enqueue_read(b, blocking=True)
                a.blob = sha256(bytes(data))
                rec.blobs[a.blob] = bytes(data)
        rec.id = new_id(k.name, record_dir())
        save(rec, record_dir())
        hooks.notify(rec)

    def _harvest(self) -> None:
        """Fold completed launches into the per-(kernel, device) summary."""
        keep = []
        for name, dev, req in self.launches:
            if not req.done:
                keep.append((name, dev, req))
                continue
            if dev in self.p.dead and req.res is None:  # lost with its node, replayed
                dev = f"{dev} (lost: replayed on a survivor)"
            s = self.stats.setdefault((name, dev or "?"), [0, 0, 0])
            s[0] += 1
            t = (req.res or {}).get("t")
            if isinstance(t, (int, float)):
                s[1] += 1
                s[2] += int(t * 1e9)
        self.launches = keep

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            try:
                self.p.finish()
            except Exception as exc:
                _log_once("finish-exit", f"pending commands failed at exit: {exc}")
            self._harvest()
            self.write_summary()
            self.p.close()
        finally:
            if self.cluster is not None:
                self.cluster.stop()

    def write_summary(self) -> None:
        path = os.environ.get("CLPROJ_SUMMARY_FILE")
        names = {d.id: f"{d.id} {d.name}" for d in self.p.devices.values()}
        rows = [(k, names.get(dev, dev), *v) for (k, dev), v in sorted(self.stats.items())]
        if path:
            with open(path, "w") as f:
                for k, dev, n, timed, total in rows:
                    f.write(f"{k}\t{dev}\t{n}\t{timed}\t{total}\n")
        elif os.environ.get("CLPROJ_SUMMARY") != "0":
            for k, dev, n, timed, total in rows:
                mean = total / timed / 1e3 if timed else 0.0
                print(
                    f"clproj: route {k:32s} {n:10d} {total / 1e6:14.3f} {mean:12.3f}  {dev}",
                    file=sys.stderr,
                )
        if self.p.recoveries:
            print(
                f"clproj: route: recovered from {self.p.recoveries} node failure(s)",
                file=sys.stderr,
            )
        if self.split is not None and not os.environ.get("CLPROJ_SPLIT_FILE"):
            from runtime.partition.route_policy import (
                print_summary,  # else `clproj run` prints them
            )

            print_summary(self.split)
        # the observe-mode summary (C, runs after us) has nothing to say in route mode
        os.environ.pop("CLPROJ_SUMMARY_FILE", None)
        os.environ["CLPROJ_SUMMARY"] = "0"


_route: Route | None = None
_start_lock = threading.Lock()
_start_failed: str | None = None


_prestarted: LocalCluster | None = None


def _lifetime() -> float:
    return float(os.environ.get("CLPROJ_ROUTE_LIFETIME", 86400))


def prestart(lib: Any) -> None:
    """Start the local cluster's processes now, without waiting for them (route.c asks
    at the first clGetPlatformIDs): they come up while the app goes on (pytest collects
    its tests between listing platforms and making a context), instead of during the
    first context's creation (~0.5 s here)."""
    global _prestarted
    if _route is not None or _prestarted is not None or _start_failed:
        return
    if os.environ.get("CLPROJ_BROKER") or os.environ.get("CLPROJ_ROUTE_PRESTART") == "0":
        return
    with _start_lock:
        if _route is None and _prestarted is None:
            _prestarted = LocalCluster(_lifetime())
            from intercept import hooks

            hooks.at_exit(lambda: _exit(lib))  # stops it also when no context was made


def _take_prestarted() -> LocalCluster | None:
    global _prestarted
    c, _prestarted = _prestarted, None
    return c


def _get(ffi: Any, lib: Any) -> Route:
    global _route, _start_failed
    if _route is None:
        with _start_lock:
            if _start_failed:
                raise CLError(CL_OUT_OF_RESOURCES, _start_failed)
            if _route is None:
                try:
                    _route = Route(ffi, lib)
                except Exception as exc:
                    _start_failed = f"route mode cannot start: {exc}"
                    print(f"clproj: {_start_failed}", file=sys.stderr)
                    raise CLError(CL_OUT_OF_RESOURCES, _start_failed) from None
                from intercept import hooks

                # one exit mechanism for C and Python apps (hooks.at_exit says how)
                hooks.at_exit(lambda: _exit(lib))
    return _route


def _exit(lib: Any) -> None:
    c = _take_prestarted()  # started, never used
    if c is not None:
        c.stop()
    r = _route
    if r is not None:
        try:
            r.stop_callbacks()
            with r.lock:
                r.close()
        except Exception as exc:
            _log_once("exit", f"shutdown failed: {exc!r}")
    lib.clproj_route_closed()


def post_projection(key: str, times: dict[str, float | None]) -> bool:
    """Give the broker projected seconds for the launches of signature ``key``.

    ``times`` keys are cluster device ids (``node/index``), or device names / profile
    keys, which apply to every cluster device with that name or profile key. Returns
    False outside route mode (nothing to post to)."""
    r = _route
    if r is None or r.closed:
        return False
    with r.lock:
        out: dict[str, float | None] = {}
        for d in r.p.devices.values():
            for k in (d.id, d.name, str((d.profile or {}).get("key", ""))):
                if k in times:
                    out[d.id] = times[k]
                    break
        if out:
            r.p.post_projection(key, out, source="route")
        return bool(out)


def route() -> Route | None:
    """The running route state (tests, hooks), or None."""
    return _route


def install(ffi: Any, lib: Any) -> None:
    """Register the ``extern "Python"`` callbacks of route mode."""

    def failed(exc_type: Any, exc: Any, tb: Any) -> None:
        _log_once(
            f"internal-{exc_type.__name__}",
            f"internal error, call answered CL_OUT_OF_RESOURCES: {exc!r}",
        )

    @ffi.def_extern(error=CL_OUT_OF_RESOURCES, onerror=failed)
    def clproj_py_route(c):
        try:
            if c.op == lib.RT_OP_PRESTART:
                prestart(lib)
                return CL_SUCCESS
            r = _get(ffi, lib)
            with r.lock:
                if r.closed:  # at exit everything completed; nothing new can start
                    done = (lib.RT_OP_RELEASE, lib.RT_OP_WAIT, lib.RT_OP_FINISH, lib.RT_OP_FLUSH)
                    return CL_SUCCESS if c.op in done else CL_INVALID_OPERATION
                if c.n_released:  # events released in C since the last call (route.c)
                    for i in range(c.n_released):
                        r.release(c.released[i])
                p = r.p
                p.cork()  # one write per call to each node, however many commands
                try:
                    return r.call(c)
                finally:
                    p.uncork()
        except CLError as exc:
            if exc.code in (CL_OUT_OF_RESOURCES, CL_INVALID_OPERATION):
                _log_once(f"cl{exc.code}-{c.op}", f"op {c.op}: {exc} ({exc.code})")
            return exc.code
        except KeyError as exc:  # an info parameter we do not answer
            _log_once(
                f"param-{c.op}-{c.kind}-{exc}",
                f"info parameter {exc} of handle kind {c.kind} not supported",
            )
            return CL_INVALID_VALUE
        except ClprojError as exc:
            _log_once(f"err-{c.op}-{exc.cause}", f"op {c.op} failed: {exc.cause}")
            return CL_OUT_OF_RESOURCES
