"""Programs and kernels of the virtual platform: from source or from this platform's
binaries, built / compiled / linked on a node, and the kernels made from them.

Why: a program is built on the cluster (RemotePlatform), behind the virtual device's
source prefix (runtime/route/device.py), and its real kernels come back with it; a
kernel tells route.c its real argument kinds so that clSetKernelArg is answered in C.
Binaries (clGetProgramInfo(CL_PROGRAM_BINARIES)) are what rebuilds the program: source
programs keep the first form (older caches hold it); compiled objects and linked programs
are described in msgpack behind the second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgpack

from clproj import cl_names as C
from clproj.errors import ClprojError
from clproj.runtime.cluster import protocol
from clproj.runtime.route.errors import CLError, log_once
from clproj.runtime.route.kernel_meta import KMeta
from clproj.runtime.route.objects import VContext, VKernel, VProgram

if TYPE_CHECKING:
    from clproj.runtime.route.state import Route

BINARY_MAGIC = b"clproj-source\n"
PROGRAM_MAGIC = b"clproj-program\n"


def binary(o: VProgram) -> bytes:
    """The program's binary: what rebuilds it (empty until it is built)."""
    if o.status != C.CL_BUILD_SUCCESS:
        return b""
    if not o.parts and not o.headers and o.binary_type == C.CL_PROGRAM_BINARY_TYPE_EXECUTABLE:
        return BINARY_MAGIC + o.source.encode()
    return PROGRAM_MAGIC + msgpack.packb(o.describe(), use_bin_type=True)


def _node_source(r: Route, src: str) -> str:
    """The source as the nodes build it: behind the virtual device's prefix."""
    return r.vdev.source_prefix() + src


def create_program(r: Route, c: Any) -> int:
    """clCreateProgramWithSource / clCreateProgramWithBinary."""
    ctx = r.get(c.id, VContext)
    args = c.u.create_program
    data = bytes(r.ffi.buffer(c.src, int(args.length)))
    if not args.binary:  # from source
        size = len(data) + len(r.vdev.source_prefix())
        if size > protocol.MAX_PROGRAM_BYTES:  # no node takes it: refused here, at once
            log_once(
                "source-size",
                f"a program source of {size} bytes exceeds the {protocol.MAX_PROGRAM_BYTES} "
                "a node accepts: CL_OUT_OF_HOST_MEMORY",
            )
            return C.CL_OUT_OF_HOST_MEMORY
        prog = VProgram(ctx, data.decode(errors="replace"))
        c.ret = r.new(r.lib.RT_PROGRAM, prog, ctx)
        return C.CL_SUCCESS
    prog = _from_binary(r, ctx, data)
    if prog is None:
        return C.CL_INVALID_BINARY
    c.ret = r.new(r.lib.RT_PROGRAM, prog, ctx)
    return C.CL_SUCCESS


def _from_binary(r: Route, ctx: VContext, data: bytes) -> VProgram | None:
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
        return _from_description(r, ctx, d)
    except (ValueError, TypeError, KeyError, ClprojError, CLError) as exc:
        log_once("binary", f"clCreateProgramWithBinary: unusable binary ({exc})")
        return None


def _from_description(r: Route, ctx: VContext, d: dict[str, Any]) -> VProgram:
    """A compiled object or a linked program again: compiled (and linked) now, as
    its binary would be loaded."""
    from clproj.runtime.cluster.client.platform import RemoteError

    prog = VProgram(ctx, str(d.get("src", "")), str(d.get("opts", "")))
    prog.from_binary = True
    prog.headers = [(str(n), str(s)) for n, s in d.get("hdrs") or []]
    prog.binary_type = int(d.get("type", C.CL_PROGRAM_BINARY_TYPE_EXECUTABLE))
    try:
        if d.get("parts"):
            prog.parts = [_from_description(r, ctx, p) for p in d["parts"]]
            prog.remote = r.p.link_program([p.remote for p in prog.parts], prog.options)
            _built(prog, prog.remote.info or {})
        elif prog.binary_type != C.CL_PROGRAM_BINARY_TYPE_EXECUTABLE:
            prog.remote = r.p.compile_program(
                _node_source(r, prog.source), prog.options, prog.headers
            )
            prog.status = C.CL_BUILD_SUCCESS
    except RemoteError as exc:
        raise CLError(C.CL_INVALID_BINARY, str(exc)) from None
    return prog


def _failed(prog: VProgram, exc: Any, default: int) -> int:
    res = getattr(exc, "res", None) or {}
    prog.status = C.CL_BUILD_ERROR
    prog.log = str(res.get("log") or getattr(exc, "cause", None) or exc)
    prog.kernels = {}
    code = res.get("code")
    return code if code == C.CL_INVALID_BUILD_OPTIONS else default


def _built(prog: VProgram, info: dict[str, Any]) -> None:
    prog.status = C.CL_BUILD_SUCCESS
    prog.log = str(info.get("log") or "")
    prog.kernels = {}
    for m in info.get("kernels") or []:
        km = KMeta.from_wire(m)
        prog.kernels[km.name] = km


def _options(r: Route, c: Any) -> str:
    if c.src == r.ffi.NULL:
        return ""
    return r.ffi.string(r.ffi.cast("char *", c.src)).decode(errors="replace")


def build(r: Route, c: Any) -> int:
    """clBuildProgram."""
    from clproj.runtime.cluster.client.platform import RemoteError

    prog = r.get(c.id, VProgram)
    if prog.nkernels:
        return C.CL_INVALID_OPERATION  # kernels are attached to it
    if prog.from_binary and prog.binary_type in (
        C.CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT,
        C.CL_PROGRAM_BINARY_TYPE_LIBRARY,
    ):
        return C.CL_INVALID_OPERATION  # a compiled object's binary: link it instead
    if prog.parts:  # a linked program: loaded from its binary already, or made by link
        return C.CL_SUCCESS if prog.from_binary else C.CL_INVALID_OPERATION
    opts = _options(r, c)
    prog.options, prog.hash = opts, ""
    prog.headers, prog.parts = [], []
    prog.remote = r.p.create_program(_node_source(r, prog.source), opts)
    try:
        info = r.p.build_program(prog.remote)
    except RemoteError as exc:
        prog.binary_type = C.CL_PROGRAM_BINARY_TYPE_NONE
        return _failed(prog, exc, C.CL_BUILD_PROGRAM_FAILURE)
    prog.binary_type = C.CL_PROGRAM_BINARY_TYPE_EXECUTABLE
    _built(prog, info)
    return C.CL_SUCCESS


def compile_program(r: Route, c: Any) -> int:
    """clCompileProgram: compiled on a node now (errors and log at the call); the
    headers are other programs' sources, by their include names."""
    from clproj.runtime.cluster.client.platform import RemoteError

    prog = r.get(c.id, VProgram)
    if prog.nkernels:
        return C.CL_INVALID_OPERATION
    if prog.from_binary or prog.parts:
        return C.CL_INVALID_OPERATION
    headers = []
    for i in range(int(c.n_ids)):
        hp = r.objs.get(c.ids[i])
        if not isinstance(hp, VProgram) or hp.from_binary:
            return C.CL_INVALID_PROGRAM
        name = r.ffi.string(c.names[i]).decode(errors="replace")
        headers.append((name, hp.source))
    opts = _options(r, c)
    prog.options, prog.hash, prog.headers = opts, "", headers
    try:
        prog.remote = r.p.compile_program(_node_source(r, prog.source), opts, headers)
    except RemoteError as exc:
        prog.binary_type = C.CL_PROGRAM_BINARY_TYPE_NONE
        return _failed(prog, exc, C.CL_COMPILE_PROGRAM_FAILURE)
    prog.status = C.CL_BUILD_SUCCESS
    prog.binary_type = C.CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT
    prog.log = str((prog.remote.info or {}).get("log") or "")
    prog.kernels = {}
    return C.CL_SUCCESS


def link(r: Route, c: Any) -> int:
    """clLinkProgram: a new program from compiled ones (a library with
    -create-library). A failed link still returns the program (its log says why)."""
    from clproj.runtime.cluster.client.platform import RemoteError

    ctx = r.get(c.id, VContext)
    parts = []
    for i in range(int(c.n_ids)):
        p = r.objs.get(c.ids[i])
        if not isinstance(p, VProgram):
            return C.CL_INVALID_PROGRAM
        if p.status != C.CL_BUILD_SUCCESS or p.binary_type not in (
            C.CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT,
            C.CL_PROGRAM_BINARY_TYPE_LIBRARY,
        ):
            return C.CL_INVALID_OPERATION
        parts.append(p)
    opts = _options(r, c)
    prog = VProgram(ctx, "", opts)
    prog.parts = parts
    library = "-create-library" in opts.split()
    c.ret = r.new(r.lib.RT_PROGRAM, prog, ctx)
    try:
        prog.remote = r.p.link_program([p.remote for p in parts], opts)
    except RemoteError as exc:
        return _failed(prog, exc, C.CL_LINK_PROGRAM_FAILURE)
    prog.binary_type = (
        C.CL_PROGRAM_BINARY_TYPE_LIBRARY if library else C.CL_PROGRAM_BINARY_TYPE_EXECUTABLE
    )
    _built(prog, prog.remote.info or {})
    if library:
        prog.kernels = {}
    return C.CL_SUCCESS


def new_kernel(r: Route, prog: VProgram, name: str) -> Any:
    """A kernel of a built program: its handle (route.c learns its argument kinds)."""
    if (
        prog.status != C.CL_BUILD_SUCCESS
        or prog.binary_type != C.CL_PROGRAM_BINARY_TYPE_EXECUTABLE
        or prog.remote is None
    ):
        raise CLError(C.CL_INVALID_PROGRAM_EXECUTABLE)
    meta = prog.kernels.get(name)
    if meta is None:
        raise CLError(C.CL_INVALID_KERNEL_NAME, name)
    lib = r.lib
    k = VKernel(prog, name, meta, r.p.create_kernel(prog.remote, name))
    h = r.new(lib.RT_KERNEL, k, prog)
    kinds = meta.kinds(lib)
    sizes = r.ffi.new("uint32_t[]", meta.sizes(lib.RT_ARG_SIZES) or [0])
    lib.clproj_route_kernel_args(h, len(kinds), kinds, sizes)
    k.argv = lib.clproj_route_kernel_argv(h)
    k.gens = [0] * len(kinds)
    prog.nkernels += 1
    return h


def create_kernel(r: Route, c: Any) -> int:
    """clCreateKernel."""
    prog = r.get(c.id, VProgram)
    name = r.ffi.string(r.ffi.cast("char *", c.src)).decode(errors="replace")
    c.ret = new_kernel(r, prog, name)
    return C.CL_SUCCESS


def clone_kernel(r: Route, c: Any) -> int:
    """clCloneKernel: a new kernel with the arguments set so far."""
    k = r.get(c.id, VKernel)
    c.ret = new_kernel(r, k.prog, k.name)
    r.lib.clproj_route_kernel_copy_args(c.ret, k.handle)
    return C.CL_SUCCESS


def kernels_in_program(r: Route, c: Any) -> int:
    """clCreateKernelsInProgram."""
    prog = r.get(c.id, VProgram)
    if prog.status != C.CL_BUILD_SUCCESS or not prog.remote:
        return C.CL_INVALID_PROGRAM_EXECUTABLE
    names = list(prog.kernels)
    args = c.u.kernels_in_program
    if c.dst != r.ffi.NULL:
        if int(args.capacity) < len(names):
            return C.CL_INVALID_VALUE
        out = r.ffi.cast("void **", c.dst)
        for i, n in enumerate(names):
            out[i] = new_kernel(r, prog, n)
    args.count = len(names)
    return C.CL_SUCCESS
