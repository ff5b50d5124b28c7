"""What the virtual platform's clGet*Info calls answer: platform, device, context, queue,
buffer, program (and build), kernel (and work-group, argument) and event (and profiling).

Why one module: every answer is a table from the OpenCL parameter (named constants of
clproj.cl_names) to its value's bytes (runtime/route/encode.py); the device's own
values are combined from the cluster's devices (runtime/route/device.py), the kernels'
from the real kernels (runtime/route/kernel_meta.py). A parameter not in a table raises
KeyError, which the dispatcher answers with CL_INVALID_VALUE (logged once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clproj import cl_names as C
from clproj.runtime.route.encode import PTR, cstr, i32, ptrs, size_t, u32, u64
from clproj.runtime.route.errors import CLError
from clproj.runtime.route.kernel_meta import kernel_arg_info, kernel_wg_info
from clproj.runtime.route.objects import (
    CMD,
    MEM_USE_HOST_PTR,
    VContext,
    VEvent,
    VKernel,
    VMem,
    VProgram,
    VQueue,
)
from clproj.runtime.route.programs import binary

if TYPE_CHECKING:
    from clproj.runtime.route.state import Route


def platform_info(param: int, extensions: str) -> bytes:
    """clGetPlatformInfo (KeyError: not answered)."""
    table = {
        C.CL_PLATFORM_PROFILE: cstr("FULL_PROFILE"),
        C.CL_PLATFORM_VERSION: cstr("OpenCL 1.2 clproj"),
        C.CL_PLATFORM_NAME: cstr("clproj virtual platform"),
        C.CL_PLATFORM_VENDOR: cstr("clproj"),
        C.CL_PLATFORM_EXTENSIONS: cstr(" ".join(["cl_khr_icd", *extensions.split()])),
        C.CL_PLATFORM_HOST_TIMER_RESOLUTION: u64(0),
        C.CL_PLATFORM_ICD_SUFFIX_KHR: cstr("clproj"),
    }
    return table[param]


def answer(r: Route, c: Any) -> int:
    """RT_OP_INFO: the value into the caller's buffer (if any) and its size."""
    value = info_value(r, c)
    info = c.u.info
    ffi = r.ffi
    if c.dst != ffi.NULL:
        if int(info.size) < len(value):
            return C.CL_INVALID_VALUE
        # CL_PROGRAM_BINARIES filled the application's buffers already
        if int(info.param) != C.CL_PROGRAM_BINARIES or c.kind != r.lib.RT_PROGRAM:
            ffi.memmove(c.dst, value, len(value))
    if c.size_ret != ffi.NULL:
        c.size_ret[0] = len(value)
    return C.CL_SUCCESS


def info_value(r: Route, c: Any) -> bytes:  # noqa: C901
    """The bytes clGet*Info answers for the call's handle and parameter."""
    kind, param, cls = c.kind, int(c.u.info.param), int(c.u.info.cls)
    lib = r.lib
    if kind == lib.RT_PLATFORM:
        try:
            return platform_info(param, r.vdev.platform_extensions)
        except KeyError:
            raise CLError(C.CL_INVALID_VALUE, f"clGetPlatformInfo param {param:#x}") from None
    if kind == lib.RT_DEVICE:
        try:
            return r.vdev.info(param)
        except KeyError:
            raise CLError(C.CL_INVALID_VALUE, f"clGetDeviceInfo param {param:#x}") from None
    o = r.objs.get(c.id)
    if o is None:
        raise CLError(C.CL_INVALID_VALUE, "stale handle")
    if isinstance(o, VContext):
        return {
            C.CL_CONTEXT_DEVICES: ptrs(r.addr(r.device)),
            C.CL_CONTEXT_PROPERTIES: b"",
            C.CL_CONTEXT_NUM_DEVICES: u32(1),
        }[param]
    if isinstance(o, VQueue):
        return {
            C.CL_QUEUE_CONTEXT: ptrs(r.addr(o.ctx.handle)),
            C.CL_QUEUE_DEVICE: ptrs(r.addr(r.device)),
            C.CL_QUEUE_PROPERTIES: u64(o.props),
        }[param]
    if isinstance(o, VMem):
        return _mem_info(r, o, param)
    if isinstance(o, VProgram):
        return _program_info(r, o, param, cls, c)
    if isinstance(o, VKernel):
        return _kernel_info(r, o, param, cls, int(c.u.info.arg))
    if isinstance(o, VEvent):
        return _event_info(r, o, param, cls)
    raise CLError(C.CL_INVALID_VALUE)


def _mem_info(r: Route, o: VMem, param: int) -> bytes:
    par = o.parent
    return {
        C.CL_MEM_TYPE: u32(C.CL_MEM_OBJECT_BUFFER),
        C.CL_MEM_FLAGS: u64(o.flags),
        C.CL_MEM_SIZE: size_t(o.size),
        C.CL_MEM_HOST_PTR: ptrs(o.host_ptr if o.flags & MEM_USE_HOST_PTR else 0),
        C.CL_MEM_MAP_COUNT: u32(len(o.maps)),
        C.CL_MEM_CONTEXT: ptrs(r.addr(o.ctx.handle)),
        C.CL_MEM_ASSOCIATED_MEMOBJECT: ptrs(r.addr(par.handle) if par else 0),
        C.CL_MEM_OFFSET: size_t(o.origin),
        C.CL_MEM_USES_SVM_POINTER: u32(C.CL_FALSE),
    }[param]


def _program_info(r: Route, o: VProgram, param: int, cls: int, c: Any) -> bytes:
    if cls == r.lib.RT_INFO_BUILD:
        return {
            C.CL_PROGRAM_BUILD_STATUS: i32(o.status),
            C.CL_PROGRAM_BUILD_OPTIONS: cstr(o.options),
            C.CL_PROGRAM_BUILD_LOG: cstr(o.log),
            C.CL_PROGRAM_BINARY_TYPE: u32(o.binary_type),
            C.CL_PROGRAM_BUILD_GLOBAL_VARIABLE_TOTAL_SIZE: size_t(0),
        }[param]
    ffi = r.ffi
    if param == C.CL_PROGRAM_BINARIES:  # fill the application's buffers
        data = binary(o)
        if c.dst != ffi.NULL and c.u.info.size >= PTR:
            dst = ffi.cast("unsigned char **", c.dst)
            if dst[0] != ffi.NULL:
                ffi.memmove(dst[0], data, len(data))
        return b"\0" * PTR
    if param in (C.CL_PROGRAM_NUM_KERNELS, C.CL_PROGRAM_KERNEL_NAMES) and (
        o.status != C.CL_BUILD_SUCCESS or o.binary_type != C.CL_PROGRAM_BINARY_TYPE_EXECUTABLE
    ):
        raise CLError(C.CL_INVALID_PROGRAM_EXECUTABLE)
    if param == C.CL_PROGRAM_BINARY_SIZES:
        return size_t(len(binary(o)))
    return {
        C.CL_PROGRAM_CONTEXT: lambda: ptrs(r.addr(o.ctx.handle)),
        C.CL_PROGRAM_NUM_DEVICES: lambda: u32(1),
        C.CL_PROGRAM_DEVICES: lambda: ptrs(r.addr(r.device)),
        C.CL_PROGRAM_SOURCE: lambda: cstr("" if o.from_binary else o.source),
        C.CL_PROGRAM_NUM_KERNELS: lambda: size_t(len(o.kernels)),
        C.CL_PROGRAM_KERNEL_NAMES: lambda: cstr(";".join(o.kernels)),
    }[param]()


def _kernel_info(r: Route, k: VKernel, param: int, cls: int, arg: int) -> bytes:
    lib = r.lib
    if cls == lib.RT_INFO_KERNEL_WG:
        argv = k.argv
        local_args = sum(
            int(argv[i].size) for i in range(len(k.gens)) if argv[i].kind == lib.RT_SET_LOCAL
        )
        v = kernel_wg_info(k.meta, param, r.vdev.limit("max_work_group_size"), local_args)
        if v is None:
            raise CLError(C.CL_INVALID_VALUE, f"clGetKernelWorkGroupInfo param {param:#x}")
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
        C.CL_KERNEL_CONTEXT: lambda: ptrs(r.addr(k.prog.ctx.handle)),
        C.CL_KERNEL_PROGRAM: lambda: ptrs(r.addr(k.prog.handle)),
        C.CL_KERNEL_ATTRIBUTES: lambda: cstr(k.meta.attrs),
    }[param]()


def _event_info(r: Route, e: VEvent, param: int, cls: int) -> bytes:
    if cls == r.lib.RT_INFO_PROFILING:
        if (
            e.queue is None
            or not e.queue.props & C.CL_QUEUE_PROFILING_ENABLE
            or not e.complete()
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
        C.CL_EVENT_COMMAND_QUEUE: lambda: ptrs(r.addr(e.queue.handle) if e.queue else 0),
        C.CL_EVENT_COMMAND_TYPE: lambda: u32(CMD.get(e.kind, C.CL_COMMAND_MARKER)),
        C.CL_EVENT_COMMAND_EXECUTION_STATUS: lambda: i32(e.exec_status()),
        C.CL_EVENT_CONTEXT: lambda: ptrs(r.addr(ctx.handle) if ctx else 0),
    }[param]()
