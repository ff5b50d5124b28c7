"""What route mode knows of a real kernel: its arguments and work-group info, and the
answers of clGetKernelArgInfo / clGetKernelWorkGroupInfo made from them.

Why: a faithful virtual platform reports what the kernel built for it actually is. The
node sends each built program's real kernels (runtime.cluster.introspect.kernel_meta:
argument count, kinds, type names, accepted by-value sizes, work-group info); they are
kept here once per program, and route.c checks clSetKernelArg against them in C.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clproj import cl_names as C
from clproj.runtime.route.encode import cstr, size_t, u32, u64

# kinds as runtime.cluster.introspect names them
ARG_SCALAR, ARG_POINTER, ARG_LOCAL, ARG_OTHER = "s", "p", "l", "x"


@dataclass(frozen=True)
class KArg:
    """One argument of a real kernel (runtime.cluster.introspect.kernel_meta)."""

    kind: str
    addr: int | None
    access: int | None
    type_name: str | None
    type_qual: int | None
    name: str | None
    sizes: tuple[int, ...] | None  # by-value sizes clSetKernelArg accepts (None: any)


@dataclass(frozen=True)
class KMeta:
    """A real kernel as its node described it."""

    name: str
    args: tuple[KArg, ...]
    wg: dict[str, Any]
    attrs: str

    @classmethod
    def from_wire(cls, m: dict[str, Any]) -> KMeta:
        args = []
        for a in m.get("args") or []:
            kind, addr, access, tname, tqual, aname, sizes = (list(a) + [None] * 7)[:7]
            args.append(
                KArg(
                    str(kind),
                    addr,
                    access,
                    tname,
                    tqual,
                    aname,
                    tuple(int(s) for s in sizes) if isinstance(sizes, list) else None,
                )
            )
        return cls(str(m["name"]), tuple(args), dict(m.get("wg") or {}), str(m.get("attrs") or ""))

    def kinds(self, lib: Any) -> bytes:
        """route.c's RT_ARG_* of each argument (``lib``: the shim's cffi lib)."""
        rt_arg = {
            ARG_SCALAR: lib.RT_ARG_SCALAR,
            ARG_POINTER: lib.RT_ARG_POINTER,
            ARG_LOCAL: lib.RT_ARG_LOCAL,
            ARG_OTHER: lib.RT_ARG_OTHER,
        }
        return bytes(
            lib.RT_ARG_SAMPLER
            if a.type_name == "sampler_t"
            else rt_arg.get(a.kind, lib.RT_ARG_UNKNOWN)
            for a in self.args
        )

    def sizes(self, per_arg: int) -> list[int]:
        """``per_arg`` (route.c's RT_ARG_SIZES) accepted by-value sizes per argument,
        0-padded (all 0: any size)."""
        out: list[int] = []
        for a in self.args:
            ok = list(a.sizes or ())[:per_arg] if a.kind == ARG_SCALAR else []
            out += ok + [0] * (per_arg - len(ok))
        return out


def kernel_arg_info(a: KArg, param: int) -> bytes:
    """clGetKernelArgInfo of one argument (KeyError: a parameter not answered)."""
    table = {
        C.CL_KERNEL_ARG_ADDRESS_QUALIFIER: lambda: u32(a.addr or C.CL_KERNEL_ARG_ADDRESS_PRIVATE),
        C.CL_KERNEL_ARG_ACCESS_QUALIFIER: lambda: u32(a.access or C.CL_KERNEL_ARG_ACCESS_NONE),
        C.CL_KERNEL_ARG_TYPE_NAME: lambda: cstr(a.type_name or ""),
        C.CL_KERNEL_ARG_TYPE_QUALIFIER: lambda: u64(a.type_qual or 0),
        C.CL_KERNEL_ARG_NAME: lambda: cstr(a.name or ""),
    }
    if param not in table:
        raise KeyError(param)
    return table[param]()


def kernel_wg_info(m: KMeta, param: int, max_wg: int, local_args: int = 0) -> bytes | None:
    """clGetKernelWorkGroupInfo from the real kernel (None: the driver did not answer).
    The work-group size is also bounded by the virtual device's (every device's) limit;
    the local memory adds ``local_args``, the bytes of the ``__local`` arguments the app has
    set (the node described the kernel before any was set; a driver counts them)."""
    wg = m.wg
    if param == C.CL_KERNEL_WORK_GROUP_SIZE:
        return size_t(min(int(wg.get("WORK_GROUP_SIZE") or max_wg), max_wg))
    if param == C.CL_KERNEL_COMPILE_WORK_GROUP_SIZE:
        v = wg.get("COMPILE_WORK_GROUP_SIZE") or [0, 0, 0]
        return size_t(*[*list(v), 0, 0, 0][:3])
    if param == C.CL_KERNEL_LOCAL_MEM_SIZE:
        return u64(int(wg.get("LOCAL_MEM_SIZE") or 0) + local_args)
    if param == C.CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE:
        return size_t(wg.get("PREFERRED_WORK_GROUP_SIZE_MULTIPLE") or 1)
    if param == C.CL_KERNEL_PRIVATE_MEM_SIZE:
        return u64(wg.get("PRIVATE_MEM_SIZE") or 0)
    return None
