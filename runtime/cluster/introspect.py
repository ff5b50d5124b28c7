"""What a node tells clients about its real OpenCL objects: devices, programs, kernels.

Why: the virtual platform of route mode (runtime/route/platform.py) must answer every
query the way the real device would: a kernel's number of arguments, their address
spaces, type names and accepted sizes, its work-group limits, a program's kernel names
and build log, a device's capabilities. Guessing them from the source (a regex over the
kernel signatures, as before) got pyopencl's generated kernels wrong (macros, typedefs,
structs, attributes), and a wrong argument count or kind broke every elementwise kernel.
So the node asks its real driver once, when a program is built, and the answer travels
back with the build's reply (``res``) to be cached by the client.

Everything here runs on the node, in the node's pyopencl. Values are plain msgpack types.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import glob
import os
import re
from typing import Any

# A kernel argument's kind, as the client needs it for clSetKernelArg.
ARG_SCALAR = "s"  # by value (private address space): bytes, size checked against ``sizes``
ARG_POINTER = "p"  # __global / __constant pointer: a buffer or NULL
ARG_LOCAL = "l"  # __local pointer: a size, NULL value
ARG_OTHER = "x"  # image, pipe, sampler, device queue: not part of the virtual platform

# Bytes of the OpenCL C built-in scalar types (vectors: element x width, 3 counts as 4).
_ELEM_BYTES = {
    "char": 1,
    "uchar": 1,
    "bool": 1,
    "short": 2,
    "ushort": 2,
    "half": 2,
    "int": 4,
    "uint": 4,
    "float": 4,
    "long": 8,
    "ulong": 8,
    "double": 8,
}
_VECTOR = re.compile(r"([a-z]+?)(2|3|4|8|16)?")
MAX_PROBE = 4096  # largest by-value argument probed (CL_DEVICE_MAX_PARAMETER_SIZE is ~1 KiB)
ANY_SIZE = 8  # more sizes accepted than this: the driver does not check (PoCL's structs)

# Device info reported to clients (pyopencl attribute names), the real values.
DEVICE_CAPS = (
    "type",
    "vendor_id",
    "max_compute_units",
    "max_work_item_dimensions",
    "max_work_item_sizes",
    "max_work_group_size",
    "preferred_vector_width_char",
    "preferred_vector_width_short",
    "preferred_vector_width_int",
    "preferred_vector_width_long",
    "preferred_vector_width_float",
    "preferred_vector_width_double",
    "preferred_vector_width_half",
    "native_vector_width_char",
    "native_vector_width_short",
    "native_vector_width_int",
    "native_vector_width_long",
    "native_vector_width_float",
    "native_vector_width_double",
    "native_vector_width_half",
    "max_clock_frequency",
    "address_bits",
    "max_mem_alloc_size",
    "image_support",
    "max_parameter_size",
    "mem_base_addr_align",
    "min_data_type_align_size",
    "single_fp_config",
    "double_fp_config",
    "global_mem_cache_type",
    "global_mem_cacheline_size",
    "global_mem_cache_size",
    "global_mem_size",
    "max_constant_buffer_size",
    "max_constant_args",
    "local_mem_type",
    "local_mem_size",
    "error_correction_support",
    "host_unified_memory",
    "profiling_timer_resolution",
    "endian_little",
    "available",
    "compiler_available",
    "linker_available",
    "execution_capabilities",
    "printf_buffer_size",
    "preferred_interop_user_sync",
    "extensions",
    "name",
    "vendor",
    "version",
    "driver_version",
    "opencl_c_version",
    "profile",
)


def _plain(v: Any) -> Any:
    if isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    return int(v)  # pyopencl enums / numpy ints


def device_caps(dev: Any) -> dict[str, Any]:
    """The real device's answers to the queries in DEVICE_CAPS (those it answers)."""
    out: dict[str, Any] = {}
    for name in DEVICE_CAPS:
        try:
            out[name] = _plain(getattr(dev, name))
        except Exception:  # not supported by this device / driver / pyopencl
            continue
    return out


class _SetArg:
    """clSetKernelArg through ctypes, for probing the sizes a by-value argument accepts
    (pyopencl raises an exception per refusal: ~25 us each, ~1 us this way)."""

    def __init__(self) -> None:
        self.fn: Any = None
        import pyopencl

        here = os.path.dirname(pyopencl.__file__)
        # the ICD loader pyopencl itself uses (already loaded: dlopen returns it)
        paths = sorted(glob.glob(os.path.join(here, ".libs", "libOpenCL*")))
        paths += sorted(
            glob.glob(os.path.join(os.path.dirname(here), "pyopencl.libs", "libOpenCL*"))
        )
        name = ctypes.util.find_library("OpenCL")
        if name:
            paths.append(name)
        for p in paths:
            with contextlib.suppress(OSError, AttributeError):
                fn = ctypes.CDLL(p).clSetKernelArg
                fn.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p]
                fn.restype = ctypes.c_int
                self.fn = fn
                break
        self.zero = ctypes.create_string_buffer(MAX_PROBE)

    def ok(self, kern: Any, index: int, size: int) -> bool:
        if self.fn is not None:
            return self.fn(kern.int_ptr, index, size, self.zero) == 0
        try:
            kern.set_arg(index, bytes(size))
        except Exception:
            return False
        return True

    def null_ok(self, kern: Any, index: int, size: int) -> bool:
        """clSetKernelArg(kern, index, size, NULL) succeeds."""
        if self.fn is not None:
            return self.fn(kern.int_ptr, index, size, None) == 0
        return False


_SETARG: _SetArg | None = None


def _setarg() -> _SetArg:
    global _SETARG
    if _SETARG is None:
        _SETARG = _SetArg()
    return _SETARG


def _builtin_sizes(type_name: str) -> list[int] | None:
    """Sizes the OpenCL C rules give a built-in scalar/vector type (3-vectors: 3 and 4
    elements), or None for any other type name (struct, union, typedef, enum)."""
    m = _VECTOR.fullmatch(type_name.strip())
    if m is None or m.group(1) not in _ELEM_BYTES:
        return None
    elem, width = _ELEM_BYTES[m.group(1)], int(m.group(2) or 1)
    if width == 3:
        return [3 * elem, 4 * elem]
    return [elem * width]


def scalar_sizes(kern: Any, index: int, type_name: str, limit: int) -> list[int] | None:
    """The sizes clSetKernelArg accepts for by-value argument ``index`` (None: any).

    A built-in type's sizes are confirmed with the driver (its own size accepted, one byte
    more refused); anything else is probed 1..limit. Every probe sets the argument of a
    kernel object made for this purpose only."""
    sa = _setarg()
    limit = max(1, min(limit, MAX_PROBE))
    want = _builtin_sizes(type_name)
    if want is not None:
        got = [s for s in want if sa.ok(kern, index, s)]
        if got and not sa.ok(kern, index, max(want) + 1):
            return got
    accepted: list[int] = []
    for s in range(1, limit + 1):
        if sa.ok(kern, index, s):
            accepted.append(s)
            if len(accepted) > ANY_SIZE:
                return None  # the driver takes any size for this argument
    return accepted


def _arg_info(cl: Any, kern: Any, i: int) -> list[Any] | None:
    """[address, access, type name, type qualifier, name] of argument ``i``, or None when
    the driver has no argument info (program built without -cl-kernel-arg-info)."""
    ai = cl.kernel_arg_info
    try:
        return [
            int(kern.get_arg_info(i, ai.ADDRESS_QUALIFIER)),
            int(kern.get_arg_info(i, ai.ACCESS_QUALIFIER)),
            str(kern.get_arg_info(i, ai.TYPE_NAME)),
            int(kern.get_arg_info(i, ai.TYPE_QUALIFIER)),
            str(kern.get_arg_info(i, ai.NAME)),
        ]
    except cl.Error:
        return None


def _arg_kind(cl: Any, kern: Any, i: int, info: list[Any] | None) -> str:
    aq = cl.kernel_arg_address_qualifier
    if info is not None:
        addr, tname = info[0], info[2]
        if addr == aq.LOCAL:
            return ARG_LOCAL
        if addr in (aq.GLOBAL, aq.CONSTANT):
            return ARG_POINTER if "*" in tname else ARG_OTHER
        if tname in ("sampler_t", "queue_t", "clk_event_t", "reserve_id_t"):
            return ARG_OTHER
        return ARG_SCALAR
    # no argument info: the clSetKernelArg rules tell the kinds apart (a NULL value is
    # refused for a by-value argument; a pointer needs sizeof(cl_mem), __local any size)
    sa = _setarg()
    psize = ctypes.sizeof(ctypes.c_void_p)
    if not sa.null_ok(kern, i, psize):
        return ARG_SCALAR
    return ARG_LOCAL if sa.null_ok(kern, i, psize - 1) else ARG_POINTER


def kernel_meta(cl: Any, kern: Any, name: str, device: Any, limit: int) -> dict[str, Any]:
    """One kernel of a built program: its real argument count, per argument
    ``[kind, address, access, type name, type qualifier, name, sizes]`` (the middle five
    None without argument info; sizes: by-value arguments only, None = any), attributes
    and work-group info (``wg``: param name -> value, only those the driver answers)."""
    args = []
    for i in range(int(kern.num_args)):
        info = _arg_info(cl, kern, i)
        kind = _arg_kind(cl, kern, i, info)
        sizes = (
            scalar_sizes(kern, i, info[2] if info else "", limit) if kind == ARG_SCALAR else None
        )
        args.append([kind, *(info or [None] * 5), sizes])
    wg: dict[str, Any] = {}
    wgi = cl.kernel_work_group_info
    for pname in (
        "WORK_GROUP_SIZE",
        "COMPILE_WORK_GROUP_SIZE",
        "LOCAL_MEM_SIZE",
        "PREFERRED_WORK_GROUP_SIZE_MULTIPLE",
        "PRIVATE_MEM_SIZE",
    ):
        with contextlib.suppress(cl.Error, AttributeError):
            wg[pname] = _plain(kern.get_work_group_info(getattr(wgi, pname), device))
    attrs = ""
    with contextlib.suppress(cl.Error):
        attrs = str(kern.get_info(cl.kernel_info.ATTRIBUTES))
    return {"name": name, "nargs": len(args), "args": args, "wg": wg, "attrs": attrs}


def program_meta(cl: Any, prog: Any, device: Any) -> dict[str, Any]:
    """A built program: its build log and its kernels (``kernel_meta`` each)."""
    log = ""
    with contextlib.suppress(cl.Error):
        log = str(prog.get_build_info(device, cl.program_build_info.LOG))
    names: list[str] = []
    with contextlib.suppress(cl.Error):
        names = [n for n in str(prog.get_info(cl.program_info.KERNEL_NAMES)).split(";") if n]
    limit = MAX_PROBE
    with contextlib.suppress(Exception):
        limit = int(device.max_parameter_size)
    kernels = [kernel_meta(cl, cl.Kernel(prog, n), n, device, limit) for n in names]
    return {"log": log[:200000], "kernels": kernels}


ARG_INFO_OPTION = "-cl-kernel-arg-info"


def with_arg_info(options: str) -> str:
    """Build options plus -cl-kernel-arg-info (what the introspection needs; the client
    still answers CL_KERNEL_ARG_INFO_NOT_AVAILABLE when the app did not ask for it)."""
    return options if ARG_INFO_OPTION in options.split() else f"{options} {ARG_INFO_OPTION}".strip()


def build_log(cl: Any, prog: Any, device: Any) -> str:
    with contextlib.suppress(Exception):
        return str(prog.get_build_info(device, cl.program_build_info.LOG))
    return ""
