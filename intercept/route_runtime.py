"""Python side of route mode (``CLPROJ_MODE=route``): the virtual platform's calls.

``native/shim/route.c`` presents the application one virtual platform with one virtual
device that stands for every device of the cluster; every call on its handles arrives
here as one ``clproj_rcall`` and is carried out through
:class:`runtime.client.RemotePlatform`: the broker places each launch (first launch on a
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

The placement key of a launch is the launch record's ``signature`` (program hash, kernel,
NDRange, scalar arguments), so a projection computed for a record (project mode) and
posted with :func:`post_projection` reaches the broker under the key it places by. With
``CLPROJ_HOOKS`` set, the first launch of each signature is also made into a
:class:`intercept.record.LaunchRecord` (buffer snapshots read back first) and handed to
the hooks, as in project mode.
"""

from __future__ import annotations

import os
import re
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from clproj.errors import ClprojError  # a leaf module; imported per call before (~1 us each)

# ---- OpenCL constants (no OpenCL headers in Python) ----------------------------------
CL_SUCCESS = 0
CL_OUT_OF_RESOURCES = -5
CL_MEM_COPY_OVERLAP = -8
CL_PROFILING_INFO_NOT_AVAILABLE = -7
CL_BUILD_PROGRAM_FAILURE = -11
CL_MAP_FAILURE = -12
CL_INVALID_VALUE = -30
CL_INVALID_HOST_PTR = -37
CL_INVALID_MEM_OBJECT = -38
CL_INVALID_PROGRAM = -44
CL_INVALID_PROGRAM_EXECUTABLE = -45
CL_INVALID_KERNEL_NAME = -46
CL_INVALID_ARG_INDEX = -49
CL_INVALID_ARG_VALUE = -50
CL_INVALID_ARG_SIZE = -51
CL_INVALID_KERNEL_ARGS = -52
CL_INVALID_EVENT = -58
CL_INVALID_OPERATION = -59
CL_INVALID_BUFFER_SIZE = -61
CL_KERNEL_ARG_INFO_NOT_AVAILABLE = -19

MEM_USE_HOST_PTR, MEM_ALLOC_HOST_PTR, MEM_COPY_HOST_PTR = 8, 16, 32
MAP_WRITE, MAP_WRITE_INVALIDATE = 2, 4
QUEUE_PROFILING = 2
CMD = {
    "launch": 0x11F0,
    "read": 0x11F3,
    "write": 0x11F4,
    "copy": 0x11F5,
    "map": 0x11FB,
    "unmap": 0x11FD,
    "marker": 0x11FE,
    "read_rect": 0x1201,
    "write_rect": 0x1202,
    "copy_rect": 0x1203,
    "migrate": 0x1206,
    "fill": 0x1207,
}
CL_COMPLETE, CL_RUNNING, CL_SUBMITTED = 0, 1, 2
CALLBACK_POLL_S = 0.001  # the callback thread's pump interval while callbacks wait
ADDR_GLOBAL, ADDR_LOCAL, ADDR_CONSTANT, ADDR_PRIVATE = 0x119B, 0x119C, 0x119D, 0x119E
BINARY_MAGIC = b"clproj-source\n"
PTR = struct.calcsize("P")

_reported: set[str] = set()


def _log_once(key: str, message: str) -> None:
    if key not in _reported:
        _reported.add(key)
        print(f"clproj: route: {message}", file=sys.stderr)


class CLError(Exception):
    def __init__(self, code: int, why: str = "") -> None:
        super().__init__(why or str(code))
        self.code = code


# ---- value encoding for clGet*Info ----------------------------------------------------
def u32(v: int) -> bytes:
    return struct.pack("=I", v & 0xFFFFFFFF)


def i32(v: int) -> bytes:
    return struct.pack("=i", v)


def u64(v: int) -> bytes:
    return struct.pack("=Q", v & 0xFFFFFFFFFFFFFFFF)


def size_t(*v: int) -> bytes:
    return struct.pack("@" + "N" * len(v), *v)


def ptrs(*v: int) -> bytes:
    return struct.pack("@" + "P" * len(v), *v)


def cstr(s: str) -> bytes:
    return s.encode() + b"\0"


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


# ---- kernel signatures parsed from the source ----------------------------------------
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_KERNEL = re.compile(
    r"\b(?:__kernel|kernel)\s+(?:__attribute__\s*\(\(.*?\)\)\s*)*void\s+"
    r"(?:__attribute__\s*\(\(.*?\)\)\s*)*(\w+)\s*\(([^)]*)\)",
    re.S,
)
_QUAL = {
    "__global": ADDR_GLOBAL,
    "global": ADDR_GLOBAL,
    "__local": ADDR_LOCAL,
    "local": ADDR_LOCAL,
    "__constant": ADDR_CONSTANT,
    "constant": ADDR_CONSTANT,
    "__private": ADDR_PRIVATE,
    "private": ADDR_PRIVATE,
}


@dataclass
class Param:
    addr: int
    type_name: str
    name: str
    type_qual: int


def parse_kernels(source: str) -> dict[str, list[Param]]:
    """``{kernel name: parameters}`` from OpenCL C source (best effort, no preprocessor)."""
    out: dict[str, list[Param]] = {}
    for m in _KERNEL.finditer(_COMMENTS.sub(" ", source)):
        params: list[Param] = []
        body = m.group(2).strip()
        if body and body != "void":
            for raw in body.split(","):
                toks = re.findall(r"\w+|\*", raw)
                addr = next((_QUAL[t] for t in toks if t in _QUAL), ADDR_PRIVATE)
                tq = (1 if "const" in toks else 0) | (2 if "restrict" in toks else 0)
                tq |= 4 if "volatile" in toks else 0
                name = toks[-1] if toks else ""
                skip = set(_QUAL) | {"const", "restrict", "volatile", "__restrict", "unsigned"}
                base = [t for t in toks[:-1] if t not in skip]
                unsigned = "unsigned" in toks
                tname = ("u" if unsigned else "") + (base[0] if base and base[0] != "*" else "int")
                tname = {"uint": "uint", "uchar": "uchar"}.get(tname, tname)
                tname += "*" * base.count("*")
                params.append(Param(addr, tname, name, tq))
        out[m.group(1)] = params
    return out


# ---- virtual objects --------------------------------------------------------------------
@dataclass(eq=False)
class VContext:
    handle: Any = None


@dataclass(eq=False)
class VQueue:
    ctx: VContext
    props: int
    handle: Any = None


@dataclass(eq=False)
class VMem:
    ctx: VContext
    flags: int
    size: int
    buf: Any  # RemoteBuffer
    host_ptr: int = 0
    maps: dict[int, tuple[Any, int, int, bool]] = field(default_factory=dict)
    handle: Any = None


@dataclass(eq=False)
class VProgram:
    ctx: VContext
    source: str
    options: str = ""
    remote: Any = None  # RemoteProgram once built
    status: int = -1  # CL_BUILD_NONE
    log: str = ""
    kernels: dict[str, list[Param]] = field(default_factory=dict)
    handle: Any = None
    hash: str = ""  # program_hash(source, options), once: signatures need it per launch


@dataclass(eq=False)
class VKernel:
    prog: VProgram
    name: str
    params: list[Param] | None
    remote: Any  # RemoteKernel
    scalars: dict[int, bytes] = field(default_factory=dict)
    handle: Any = None


@dataclass(eq=False)
class VEvent:
    queue: VQueue | None
    kind: str
    remote: Any  # RemoteEvent or None (already complete)
    queued_ns: int
    launch_req: Any = None
    end_ns: int = 0
    handle: Any = None


class LocalCluster:
    """The single-machine default of route mode: a broker and a node, each its own process.

    Why not :class:`runtime.embedded.EmbeddedCluster` (broker on a thread of the caller):
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
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
        import subprocess

        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.tmp.cleanup()


class Route:
    """The state of the virtual platform inside one application process."""

    def __init__(self, ffi: Any, lib: Any) -> None:
        from runtime.client import RemotePlatform

        self.ffi, self.lib = ffi, lib
        self.lock = threading.RLock()
        self.cluster: LocalCluster | None = None
        broker = os.environ.get("CLPROJ_BROKER")
        if not broker:
            self.cluster = LocalCluster(float(os.environ.get("CLPROJ_ROUTE_LIFETIME", 86400)))
            broker = self.cluster.endpoint
        self.p = RemotePlatform(
            broker, wait_devices_s=float(os.environ.get("CLPROJ_ROUTE_WAIT", 60))
        )
        self.objs: dict[int, Any] = {}
        self.parents: dict[int, Any] = {}  # id -> handle it retains implicitly
        self.next_id = 100
        self.platform = lib.clproj_route_static(lib.RT_PLATFORM)
        self.device = lib.clproj_route_static(lib.RT_DEVICE)
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
        self.split: Any = None  # runtime.route_split.Splitter with --split (CLPROJ_SPLIT=1)
        if os.environ.get("CLPROJ_SPLIT") == "1":
            from runtime.route_split import Splitter

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
            raise CLError(-6, "out of host memory")
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

    # ---- device description ----
    def _limits(self) -> dict[str, int]:
        lim: dict[str, int] = {}
        for d in self.p.devices.values():
            prof = d.profile or {}
            cl_lim = prof.get("limits") or {}
            occ = prof.get("occupancy") or {}
            mem = prof.get("memory") or {}
            vals = {
                "wg": cl_lim.get("max_work_group_size") or occ.get("max_work_group_size"),
                "local": cl_lim.get("local_mem_size") or mem.get("local_bytes_per_group"),
                "global": cl_lim.get("global_mem_size") or mem.get("global_bytes"),
                "alloc": cl_lim.get("max_mem_alloc_size"),
                "cu": prof.get("compute_units"),
                "mhz": prof.get("clock_mhz"),
            }
            for k, v in vals.items():
                if isinstance(v, (int, float)) and v > 0:
                    v = int(v)
                    lim[k] = (
                        max(lim[k], v) if k in ("cu", "mhz") and k in lim else min(lim.get(k, v), v)
                    )
        lim.setdefault("wg", 256)
        lim.setdefault("local", 32768)
        lim.setdefault("global", 1 << 30)
        lim.setdefault("alloc", max(lim["global"] // 4, 1 << 27))
        lim.setdefault("cu", 1)
        lim.setdefault("mhz", 1000)
        return lim

    def device_info(self, param: int) -> bytes:
        lim = self._limits()
        devs = list(self.p.devices.values())
        kinds = {str((d.profile.get("identity") or {}).get("kind", "")).upper() for d in devs}
        names = ", ".join(f"{d.id} {d.name}" for d in devs)
        wg = lim["wg"]
        fp = 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20  # denorm, inf_nan, round*, fma
        table: dict[int, bytes] = {
            0x1000: u64(4 if kinds == {"GPU"} else 2 if kinds <= {"CPU", ""} else 1 | 2 | 4),
            0x1001: u32(0x10002),
            0x1002: u32(lim["cu"]),
            0x1003: u32(3),
            0x1004: size_t(wg),
            0x1005: size_t(wg, wg, wg),
            0x100C: u32(lim["mhz"]),
            0x100D: u32(64),
            0x100E: u32(0),
            0x100F: u32(0),
            0x1010: u64(lim["alloc"]),
            0x1016: u32(0),
            0x1017: size_t(1024),
            0x1018: u32(0),
            0x1019: u32(1024),
            0x101A: u32(128),
            0x101B: u64(fp),
            0x101C: u32(2),
            0x101D: u32(64),
            0x101E: u64(1 << 20),
            0x101F: u64(lim["global"]),
            0x1020: u64(65536),
            0x1021: u32(8),
            0x1022: u32(1),
            0x1023: u64(lim["local"]),
            0x1024: u32(0),
            0x1025: size_t(1),
            0x1026: u32(1),
            0x1027: u32(1),
            0x1028: u32(1),
            0x1029: u64(1),
            0x102A: u64(QUEUE_PROFILING),
            0x102B: cstr("clproj virtual device"),
            0x102C: cstr("clproj"),
            0x102D: cstr("clproj-route 1"),
            0x102E: cstr("FULL_PROFILE"),
            0x102F: cstr("OpenCL 1.2 clproj"),
            0x1030: cstr(
                "cl_khr_fp64 cl_khr_global_int32_base_atomics cl_khr_global_int32_extended_atomics "
                "cl_khr_local_int32_base_atomics cl_khr_local_int32_extended_atomics cl_khr_byte_addressable_store"
            ),
            0x1031: ptrs(self.addr(self.platform)),
            0x1032: u64(fp),
            0x1033: u64(0),
            0x1035: u32(1 if kinds <= {"CPU"} else 0),
            0x103D: cstr("OpenCL C 1.2 "),
            0x103E: u32(1),
            0x103F: cstr(""),
            0x1040: size_t(0),
            0x1041: size_t(0),
            0x1042: ptrs(0),
            0x1043: u32(0),
            0x1044: ptrs(0),
            0x1045: u64(0),
            0x1046: ptrs(0),
            0x1047: u32(1),
            0x1048: u32(1),
            0x1049: size_t(1 << 20),
            0x104A: u32(0),
            0x104B: u32(0),
            0x4000 + 0x1: cstr(names),  # clproj-specific: the cluster's devices
        }
        for i, w in enumerate((16, 8, 4, 1, 1, 1)):  # PREFERRED_VECTOR_WIDTH_CHAR..DOUBLE
            table[0x1006 + i] = u32(w)
        for i, w in enumerate((16, 8, 4, 1, 1, 1, 0)):  # NATIVE_VECTOR_WIDTH_CHAR..HALF
            table[0x1036 + i] = u32(w)
        table[0x1034] = u32(0)
        for p in range(0x1011, 0x1016):  # image sizes: no images
            table[p] = size_t(0)
        if param not in table:
            raise CLError(CL_INVALID_VALUE, f"clGetDeviceInfo param {param:#x}")
        return table[param]

    def platform_info(self, param: int) -> bytes:
        table = {
            0x0900: cstr("FULL_PROFILE"),
            0x0901: cstr("OpenCL 1.2 clproj"),
            0x0902: cstr("clproj virtual platform"),
            0x0903: cstr("clproj"),
            0x0904: cstr(""),
            0x0905: u64(0),
            0x0920: cstr("clproj"),
        }
        if param not in table:
            raise CLError(CL_INVALID_VALUE, f"clGetPlatformInfo param {param:#x}")
        return table[param]

    # ---- info dispatch ----
    def info(self, c: Any) -> bytes:
        kind, param, cls = c.kind, int(c.u[0]), int(c.u[2])
        lib = self.lib
        if kind == lib.RT_PLATFORM:
            return self.platform_info(param)
        if kind == lib.RT_DEVICE:
            return self.device_info(param)
        o = self.objs.get(c.id)
        if o is None:
            raise CLError(CL_INVALID_VALUE, "stale handle")
        if isinstance(o, VContext):
            return {
                0x1081: ptrs(self.addr(self.device)),
                0x1082: b"",
                0x1083: u32(1),
            }[param]
        if isinstance(o, VQueue):
            return {
                0x1090: ptrs(self.addr(o.ctx.handle)),
                0x1091: ptrs(self.addr(self.device)),
                0x1093: u64(o.props),
            }[param]
        if isinstance(o, VMem):
            return {
                0x1100: u32(0x10F0),
                0x1101: u64(o.flags),
                0x1102: size_t(o.size),
                0x1103: ptrs(o.host_ptr if o.flags & MEM_USE_HOST_PTR else 0),
                0x1104: u32(len(o.maps)),
                0x1106: ptrs(self.addr(o.ctx.handle)),
                0x1107: ptrs(0),
                0x1108: size_t(0),
                0x1109: u32(0),
            }[param]
        if isinstance(o, VProgram):
            return self.program_info(o, param, cls, c)
        if isinstance(o, VKernel):
            return self.kernel_info(o, param, cls, int(c.u[3]))
        if isinstance(o, VEvent):
            return self.event_info(o, param, cls)
        raise CLError(CL_INVALID_VALUE)

    def program_info(self, o: VProgram, param: int, cls: int, c: Any) -> bytes:
        if cls == self.lib.RT_INFO_BUILD:
            return {
                0x1181: i32(o.status),
                0x1182: cstr(o.options),
                0x1183: cstr(o.log),
                0x1184: u32(4 if o.status == 0 else 0),
                0x1185: size_t(0),
            }[param]
        binary = BINARY_MAGIC + o.source.encode()
        if param == 0x1166:  # BINARIES: fill the application's buffers
            if c.dst != self.ffi.NULL and c.u[1] >= PTR:
                dst = self.ffi.cast("unsigned char **", c.dst)
                if dst[0] != self.ffi.NULL:
                    self.ffi.memmove(dst[0], binary, len(binary))
            return b"\0" * PTR
        if o.status != 0 and param in (0x1167, 0x1168):
            raise CLError(CL_INVALID_PROGRAM_EXECUTABLE)
        return {
            0x1161: ptrs(self.addr(o.ctx.handle)),
            0x1162: u32(1),
            0x1163: ptrs(self.addr(self.device)),
            0x1164: cstr(o.source),
            0x1165: size_t(len(binary)),
            0x1167: size_t(len(o.kernels)),
            0x1168: cstr(";".join(o.kernels)),
        }[param]

    def kernel_info(self, k: VKernel, param: int, cls: int, arg: int) -> bytes:
        lib = self.lib
        if cls == lib.RT_INFO_KERNEL_WG:
            lim = self._limits()
            return {
                0x11B0: size_t(lim["wg"]),
                0x11B1: size_t(0, 0, 0),
                0x11B2: u64(0),
                0x11B3: size_t(1),
                0x11B4: u64(0),
            }[param]
        if cls == lib.RT_INFO_KERNEL_ARG:
            if k.params is None:
                raise CLError(CL_KERNEL_ARG_INFO_NOT_AVAILABLE)
            if arg >= len(k.params):
                raise CLError(CL_INVALID_ARG_INDEX)
            pa = k.params[arg]
            return {
                0x1196: u32(pa.addr),
                0x1197: u32(0x11A3),
                0x1198: cstr(pa.type_name),
                0x1199: u64(pa.type_qual),
                0x119A: cstr(pa.name),
            }[param]
        if param == 0x1191 and k.params is None:
            raise CLError(CL_INVALID_VALUE, "argument count unknown")
        return {
            0x1190: cstr(k.name),
            0x1191: u32(len(k.params or [])),
            0x1193: ptrs(self.addr(k.prog.ctx.handle)),
            0x1194: ptrs(self.addr(k.prog.handle)),
            0x1195: cstr(""),
        }[param]

    def event_info(self, e: VEvent, param: int, cls: int) -> bytes:
        if cls == self.lib.RT_INFO_PROFILING:
            if e.queue is None or not e.queue.props & QUEUE_PROFILING or not self._complete(e):
                raise CLError(CL_PROFILING_INFO_NOT_AVAILABLE)
            start = e.queued_ns
            t = (e.launch_req.res or {}).get("t") if e.launch_req is not None else None
            end = start + int(t * 1e9) if isinstance(t, (int, float)) else max(e.end_ns, start)
            return {
                0x1280: u64(start),
                0x1281: u64(start),
                0x1282: u64(start),
                0x1283: u64(end),
                0x1284: u64(end),
            }[param]
        return {
            0x11D0: ptrs(self.addr(e.queue.handle) if e.queue else 0),
            0x11D1: u32(CMD.get(e.kind, 0x11FE)),
            0x11D3: i32(0 if self._complete(e) else 2),
            0x11D4: ptrs(self.addr(e.queue.ctx.handle) if e.queue else 0),
        }[param]

    def _complete(self, e: VEvent) -> bool:
        if e.remote is not None and e.remote.complete:
            e.remote = None
            e.end_ns = time.monotonic_ns()
        return e.remote is None

    # ---- events ----
    def event(self, c: Any, q: VQueue | None, kind: str, rev: Any, launch_req: Any = None) -> None:
        if not c.want_event:
            return
        e = VEvent(q, kind, rev, time.monotonic_ns(), launch_req)
        if rev is not None and not rev._reqs:
            e.remote, e.end_ns = None, e.queued_ns
        c.ret_event = self.new(self.lib.RT_EVENT, e, q)

    # ---- operations ----
    def call(self, c: Any) -> int:
        lib, op = self.lib, c.op
        if op == lib.RT_OP_INFO:
            value = self.info(c)
            size = int(c.u[1])
            if c.dst != self.ffi.NULL:
                if size < len(value):
                    return CL_INVALID_VALUE
                if int(c.u[0]) != 0x1166:
                    self.ffi.memmove(c.dst, value, len(value))
            if c.size_ret != self.ffi.NULL:
                c.size_ret[0] = len(value)
            return CL_SUCCESS
        if op == lib.RT_OP_CREATE_CONTEXT:
            c.ret = self.new(lib.RT_CONTEXT, VContext())
        elif op == lib.RT_OP_CREATE_QUEUE:
            if int(c.u[0]) & 1:
                _log_once("ooo", "out-of-order queue requested: the virtual queue is in order")
            ctx = self.get(c.id, VContext)
            c.ret = self.new(lib.RT_QUEUE, VQueue(ctx, int(c.u[0]) & ~1), ctx)
        elif op == lib.RT_OP_CREATE_BUFFER:
            return self.create_buffer(c)
        elif op == lib.RT_OP_CREATE_PROGRAM:
            src = bytes(self.ffi.buffer(c.src, int(c.u[0]))).decode(errors="replace")
            prog = VProgram(self.get(c.id, VContext), src)
            c.ret = self.new(lib.RT_PROGRAM, prog, prog.ctx)
        elif op == lib.RT_OP_BUILD:
            return self.build(c)
        elif op == lib.RT_OP_CREATE_KERNEL:
            prog = self.get(c.id, VProgram)
            name = self.ffi.string(self.ffi.cast("char *", c.src)).decode()
            c.ret = self.create_kernel(prog, name)
        elif op == lib.RT_OP_KERNELS_IN_PROGRAM:
            prog = self.get(c.id, VProgram)
            if prog.status != 0:
                return CL_INVALID_PROGRAM_EXECUTABLE
            names = list(prog.kernels)
            if c.dst != self.ffi.NULL:
                if int(c.u[0]) < len(names):
                    return CL_INVALID_VALUE
                out = self.ffi.cast("void **", c.dst)
                for i, n in enumerate(names):
                    out[i] = self.create_kernel(prog, n)
            c.u[1] = len(names)
        elif op == lib.RT_OP_SET_ARG:
            return self.set_arg(c)
        elif op == lib.RT_OP_RELEASE:
            self.release(c.id)
        elif op == lib.RT_OP_WAIT:
            for i in range(c.n_wait):
                e = self.objs.get(c.wait_ids[i])
                if isinstance(e, VEvent) and e.remote is not None:
                    e.remote.wait()  # raises if the command failed: remote stays set
                    e.remote, e.end_ns = None, time.monotonic_ns()  # no second pump
        elif op == lib.RT_OP_FINISH:
            self.p.finish()
            self._harvest()
        elif op == lib.RT_OP_FLUSH:
            self.p._pump(0)
        elif op == lib.RT_OP_MARKER:  # u[0] = 1: clEnqueueMigrateMemObjects (a hint)
            q = self.get(c.id, VQueue)
            from runtime.client import RemoteEvent

            kind = "migrate" if c.u[0] == 1 else "marker"
            self.event(c, q, kind, RemoteEvent(self.p, list(self.p._pending.values())))
        elif op in (lib.RT_OP_READ_RECT, lib.RT_OP_WRITE_RECT, lib.RT_OP_COPY_RECT):
            return self.transfer_rect(c)
        elif op == lib.RT_OP_CALLBACK:
            return self.set_callback(c)
        elif op in (lib.RT_OP_READ, lib.RT_OP_WRITE, lib.RT_OP_COPY, lib.RT_OP_FILL):
            return self.transfer(c)
        elif op == lib.RT_OP_MAP:
            return self.map(c)
        elif op == lib.RT_OP_UNMAP:
            return self.unmap(c)
        elif op == lib.RT_OP_LAUNCH:
            return self.launch(c)
        else:
            return CL_INVALID_OPERATION
        return CL_SUCCESS

    def create_buffer(self, c: Any) -> int:
        flags, size, host = int(c.u[0]), int(c.u[1]), c.src
        ctx = self.get(c.id, VContext)
        if size == 0 or size > self._limits()["alloc"]:
            return CL_INVALID_BUFFER_SIZE
        uses = flags & (MEM_USE_HOST_PTR | MEM_COPY_HOST_PTR)
        if bool(uses) != (host != self.ffi.NULL) or (
            flags & MEM_USE_HOST_PTR and flags & (MEM_COPY_HOST_PTR | MEM_ALLOC_HOST_PTR)
        ):
            return CL_INVALID_HOST_PTR
        hostbuf = self.ffi.buffer(host, size) if uses else None
        buf = self.p.create_buffer(size, (flags & 7) or 1, hostbuf=hostbuf)
        m = VMem(ctx, flags, size, buf, self.addr(host) if uses else 0)
        c.ret = self.new(self.lib.RT_MEM, m, ctx)
        return CL_SUCCESS

    def build(self, c: Any) -> int:
        from runtime.client import RemoteError

        prog = self.get(c.id, VProgram)
        opts = (
            self.ffi.string(self.ffi.cast("char *", c.src)).decode()
            if c.src != self.ffi.NULL
            else ""
        )
        prog.options, prog.hash = opts, ""
        prog.remote = self.p.create_program(prog.source, opts)
        try:
            self.p.build_program(prog.remote)
        except RemoteError as exc:
            prog.status, prog.log = -2, str(exc.cause if hasattr(exc, "cause") else exc)
            return CL_BUILD_PROGRAM_FAILURE
        prog.status, prog.log = 0, ""
        prog.kernels = parse_kernels(prog.source)
        return CL_SUCCESS

    def create_kernel(self, prog: VProgram, name: str) -> Any:
        if prog.status != 0:
            raise CLError(CL_INVALID_PROGRAM_EXECUTABLE)
        params = prog.kernels.get(name)
        if (
            params is None
            and prog.kernels
            and not re.search(rf"\b{re.escape(name)}\b", prog.source)
        ):
            raise CLError(CL_INVALID_KERNEL_NAME, name)
        k = VKernel(prog, name, params, self.p.create_kernel(prog.remote, name))
        return self.new(self.lib.RT_KERNEL, k, prog)

    def set_arg(self, c: Any) -> int:
        from runtime.client import LocalMemory

        k = self.get(c.id, VKernel)
        idx, size = int(c.u[0]), int(c.u[1])
        if k.params is not None and idx >= len(k.params):
            return CL_INVALID_ARG_INDEX
        addr = k.params[idx].addr if k.params is not None else None
        if c.id2:
            m = self.objs.get(c.id2)
            if not isinstance(m, VMem):
                return CL_INVALID_MEM_OBJECT
            k.remote.set_arg(idx, m.buf)
            k.scalars.pop(idx, None)
        elif c.src == self.ffi.NULL:
            if addr == ADDR_LOCAL or (addr is None and size != PTR):
                if size == 0:
                    return CL_INVALID_ARG_SIZE
                k.remote.set_arg(idx, LocalMemory(size))
            elif addr in (ADDR_GLOBAL, ADDR_CONSTANT, None):
                k.remote.set_arg(idx, None)
            else:
                return CL_INVALID_ARG_VALUE
            k.scalars.pop(idx, None)
        elif c.u[2] and addr in (ADDR_GLOBAL, ADDR_CONSTANT):
            k.remote.set_arg(idx, None)  # a NULL cl_mem
            k.scalars.pop(idx, None)
        else:
            if addr == ADDR_LOCAL:
                return CL_INVALID_ARG_VALUE
            if addr in (ADDR_GLOBAL, ADDR_CONSTANT):
                return CL_INVALID_MEM_OBJECT
            if size == 0 or size > 256:
                return CL_INVALID_ARG_SIZE
            data = bytes(self.ffi.buffer(c.src, size))
            k.remote.set_arg(idx, data)
            k.scalars[idx] = data
        return CL_SUCCESS

    def release(self, oid: int) -> None:
        o = self.objs.pop(oid, None)
        if isinstance(o, VMem):
            self.p.release(o.buf)
        elif isinstance(o, VProgram) and o.remote is not None:
            self.p.release(o.remote)
        if o is not None:
            o.handle = None
        parent = self.parents.pop(oid, None)
        if parent is not None:
            self.lib.clproj_route_release(parent)

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
            ev = self.p.enqueue_copy_buffer(m.buf, dst.buf, n, so, do)
            self.event(c, q, "copy", ev)
            return CL_SUCCESS
        if c.op == lib.RT_OP_FILL:
            ps = int(c.u[0])
            if n == 0 or off % ps or n % ps or off + n > m.size:
                return CL_INVALID_VALUE
            ev = self.p.enqueue_fill(m.buf, bytes(ffi.buffer(c.src, ps)), off, n)
            self.event(c, q, "fill", ev)
            return CL_SUCCESS
        if off + n > m.size:
            return CL_INVALID_VALUE
        if c.op == lib.RT_OP_WRITE:
            ev = self.p.enqueue_write(
                m.buf, ffi.buffer(c.src, n), offset=off, blocking=bool(c.u[0])
            )
            self.event(c, q, "write", ev)
        else:
            _, ev = self.p.enqueue_read(
                m.buf, out=ffi.buffer(c.dst, n), offset=off, size=n, blocking=bool(c.u[0])
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
        if c.op == lib.RT_OP_COPY_RECT:
            dst = self.get(c.id2, VMem)
            if b_rows[-1] + w > dst.size:
                return CL_INVALID_VALUE
            if dst is m:  # PoCL's order: pitches must agree, then no overlap
                if c.u[1] != c.u[3] or c.u[2] != c.u[4]:
                    return CL_INVALID_VALUE
                if copy_overlap(a_org, b_org, region, int(c.u[1]), int(c.u[2])):
                    return CL_MEM_COPY_OVERLAP
            from runtime.client import RemoteEvent

            reqs = []
            for so, do, n in runs(a_rows, b_rows, w):
                reqs += self.p.enqueue_copy_buffer(m.buf, dst.buf, n, so, do)._reqs
            self.event(c, q, "copy_rect", RemoteEvent(self.p, reqs))
            return CL_SUCCESS
        ptr = c.dst if c.op == lib.RT_OP_READ_RECT else c.src
        host = memoryview(ffi.buffer(ffi.cast("char *", ptr), b_rows[-1] + w))
        blocking = bool(c.u[0])
        pieces = runs(a_rows, b_rows, w)
        if c.op == lib.RT_OP_WRITE_RECT:
            if len(pieces) == 1:  # contiguous on both sides: the app's memory as it is
                _, ho, n = pieces[0]
                ev = self.p.enqueue_write(m.buf, host[ho : ho + n], offset=lo, blocking=blocking)
            else:
                if len(runs(a_rows, a_rows, w)) == 1:  # the buffer side is contiguous
                    span = bytearray(hi - lo)
                else:  # keep the bytes between the rows: read the span first
                    span, _ = self.p.enqueue_read(m.buf, offset=lo, size=hi - lo, blocking=True)
                mv = memoryview(span)
                for ao, ho, n in pieces:
                    mv[ao - lo : ao - lo + n] = host[ho : ho + n]
                ev = self.p.enqueue_write(m.buf, mv, offset=lo, blocking=blocking)
            self.event(c, q, "write_rect", ev)
            return CL_SUCCESS
        if len(pieces) == 1:  # contiguous on both sides: straight into the app's memory
            _, ho, n = pieces[0]
            _, ev = self.p.enqueue_read(
                m.buf, out=host[ho : ho + n], offset=lo, size=n, blocking=blocking
            )
            self.event(c, q, "read_rect", ev)
            return CL_SUCCESS
        tmp = bytearray(hi - lo)

        def scatter() -> None:
            src = memoryview(tmp)
            for ao, ho, n in pieces:
                host[ho : ho + n] = src[ao - lo : ao - lo + n]

        _, ev = self.p.enqueue_read(m.buf, out=tmp, offset=lo, size=hi - lo, blocking=False)
        if ev._reqs:
            self._then(ev._reqs[-1], scatter)
        else:  # served from the host copy: already in tmp
            scatter()
        if blocking:
            ev.wait()
            self.p._raise_async()
        self.event(c, q, "read_rect", ev)
        return CL_SUCCESS

    def _then(self, req: Any, fn: Any) -> None:
        """Run ``fn`` when the read ``req`` has delivered its data (before it counts as
        done), also when the client re-issues it after a node failure (both re-issue
        paths of runtime.client: the wrapped ``on_done`` or the wrapped ``reissue``)."""
        inner = req.on_done

        def done(frame: Any) -> None:
            if inner is not None:
                inner(frame)
            fn()

        req.on_done = done
        reissue = req.reissue
        if reissue is not None:

            def again(dev: str) -> Any:
                nr = reissue(dev)
                self._then(nr, fn)
                return nr

            req.reissue = again

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
            reqs = e.remote._reqs if e.remote is not None else []
            if all(r.done for r in reqs):
                failed = any(r.err for r in reqs)
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
                    self.p._pump(0)
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
        if m.flags & MEM_USE_HOST_PTR:
            keep = None
            ptr = ffi.cast("char *", m.host_ptr) + off
        else:
            keep = ffi.new("char[]", n)
            ptr = keep
        if not flags & MAP_WRITE_INVALIDATE:
            self.p.enqueue_read(m.buf, out=ffi.buffer(ptr, n), offset=off, size=n, blocking=True)
        write = bool(flags & (MAP_WRITE | MAP_WRITE_INVALIDATE))
        m.maps[self.addr(ptr)] = (keep, off, n, write)
        c.ret = ptr
        self.event(c, q, "map", None)
        return CL_SUCCESS

    def unmap(self, c: Any) -> int:
        q = self.get(int(c.u[5]), VQueue)
        m = self.get(c.id, VMem)
        entry = m.maps.pop(self.addr(c.src), None)
        if entry is None:
            return CL_INVALID_VALUE
        _keep, off, n, write = entry
        ev = None
        if write:
            ev = self.p.enqueue_write(
                m.buf,
                self.ffi.buffer(self.ffi.cast("char *", c.src), n),
                offset=off,
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

    def launch(self, c: Any) -> int:
        q = self.get(int(c.u[5]), VQueue)
        k = self.get(c.id, VKernel)
        dim = int(c.u[0])
        g = [int(c.g[i]) for i in range(dim)]
        lo = [int(c.l[i]) for i in range(dim)] if c.l != self.ffi.NULL else None
        off = [int(c.o[i]) for i in range(dim)] if c.o != self.ffi.NULL else None
        if k.params is not None and any(i not in k.remote.args for i in range(len(k.params))):
            return CL_INVALID_KERNEL_ARGS
        sig, fam = self.signature(k, g, lo)
        first = self.hooks and sig not in self.seen_sigs
        if first:
            if len(self.seen_sigs) >= 100_000:  # a new signature every launch
                self.seen_sigs.clear()
            self.seen_sigs.add(sig)
            self._notify_hooks(k, g, lo, off)
        plan = self.split.plan(sig, k.remote, first) if self.split is not None else None
        # the split's measured check: this launch alone, from issue to completion
        timed = self.split is not None and self.split.timing(sig, plan is not None)
        if timed:
            self._settled(list(self.p._pending.values()))
            t0 = time.perf_counter()
        try:
            if plan is not None:
                ev = self.p.enqueue_split_launch(k.remote, g, lo, off, plan, key=sig)
            else:
                ev = self.p.enqueue_launch(k.remote, g, lo, off, key=sig, family=fam)
            if timed and self._settled(ev._reqs):
                self.split.observe(sig, time.perf_counter() - t0, plan is not None)
        except ClprojError as exc:
            if "not set" in str(exc.cause if hasattr(exc, "cause") else exc):
                return CL_INVALID_KERNEL_ARGS
            raise
        req = ev._reqs[-1]
        self.launches.append((k.name, plan.label if plan is not None else req.dev, req))
        if len(self.launches) >= 4096:
            self._harvest()
        self.event(c, q, "launch", ev, req)
        return CL_SUCCESS

    def _settled(self, reqs: list[Any]) -> bool:
        """Every request in ``reqs`` completed without error; their errors stay for the
        app's own wait (unlike RemoteEvent.wait). False if one failed or on timeout."""
        return self.p._settle(reqs) and not any(r.err for r in reqs)

    def _notify_hooks(
        self, k: VKernel, g: list[int], lo: list[int] | None, off: list[int] | None
    ) -> None:
        """The first launch of a signature, for the hooks (projection in route mode).

        Its buffers are read back and a full record saved only when the reuse cache will
        emulate it (runtime.shim_hook.route_admit, as project mode's admit); otherwise
        the hook projects its metadata from the cache's anchors (at most every few
        tens of milliseconds per kernel family)."""
        from intercept import hooks
        from intercept.record import ArgRecord, LaunchRecord, new_id, save, sha256
        from intercept.shim_runtime import record_dir
        from runtime.client import LocalMemory, RemoteBuffer
        from runtime.shim_hook import route_admit

        args, bufs = [], {}
        for i in range(max(k.remote.args, default=-1) + 1):
            v = k.remote.args.get(i)
            if isinstance(v, RemoteBuffer):
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
                data, _ = self.p.enqueue_read(bufs[a.index], blocking=True)
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
            from runtime.route_split import print_summary  # else `clproj run` prints them

            print_summary(self.split)
        # the observe-mode summary (C, runs after us) has nothing to say in route mode
        os.environ.pop("CLPROJ_SUMMARY_FILE", None)
        os.environ["CLPROJ_SUMMARY"] = "0"


_route: Route | None = None
_start_lock = threading.Lock()
_start_failed: str | None = None


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
            r = _get(ffi, lib)
            with r.lock:
                if r.closed:  # at exit everything completed; nothing new can start
                    done = (lib.RT_OP_RELEASE, lib.RT_OP_WAIT, lib.RT_OP_FINISH, lib.RT_OP_FLUSH)
                    return CL_SUCCESS if c.op in done else CL_INVALID_OPERATION
                if c.n_released:  # events released in C since the last call (route.c)
                    for i in range(c.n_released):
                        r.release(c.released[i])
                return r.call(c)
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
