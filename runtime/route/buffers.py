"""Memory objects of the virtual platform: buffers and sub-buffers (clCreateBuffer,
clCreateSubBuffer), with OpenCL's checks in PoCL's order.

Why: a buffer lives on the cluster (a RemoteBuffer that follows the kernels using it); a
sub-buffer is a region of its buffer's content: transfers are the buffer's at an offset,
a kernel argument is the region (a real sub-buffer on the node).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clproj import cl_names as C
from clproj.runtime.route.objects import (
    MEM_ACCESS,
    MEM_ALLOC_HOST_PTR,
    MEM_COPY_HOST_PTR,
    MEM_HOST_ACCESS,
    MEM_USE_HOST_PTR,
    VContext,
    VMem,
)

if TYPE_CHECKING:
    from clproj.runtime.route.state import Route


def create_buffer(r: Route, c: Any) -> int:
    """clCreateBuffer (host memory copied or used per the flags)."""
    args = c.u.create_buffer
    flags, size, host = int(args.flags), int(args.size), c.src
    ctx = r.get(c.id, VContext)
    access, host_access = flags & MEM_ACCESS, flags & MEM_HOST_ACCESS
    if (
        access & (access - 1)
        or host_access & (host_access - 1)  # one CL_MEM_HOST_* at most
        or flags
        & ~(
            MEM_ACCESS | MEM_USE_HOST_PTR | MEM_ALLOC_HOST_PTR | MEM_COPY_HOST_PTR | MEM_HOST_ACCESS
        )
        or (flags & MEM_USE_HOST_PTR and flags & (MEM_COPY_HOST_PTR | MEM_ALLOC_HOST_PTR))
    ):
        return C.CL_INVALID_VALUE
    if size == 0 or size > r.vdev.limit("max_mem_alloc_size"):
        return C.CL_INVALID_BUFFER_SIZE
    uses = flags & (MEM_USE_HOST_PTR | MEM_COPY_HOST_PTR)
    if bool(uses) != (host != r.ffi.NULL):
        return C.CL_INVALID_HOST_PTR
    hostbuf = r.ffi.buffer(host, size) if uses else None
    buf = r.p.create_buffer(size, access or C.CL_MEM_READ_WRITE, hostbuf=hostbuf)
    m = VMem(ctx, flags, size, buf, r.addr(host) if uses else 0)
    c.ret = r.new(r.lib.RT_MEM, m, ctx)
    return C.CL_SUCCESS


def _host_access_conflicts(mine: int, parent: int) -> bool:
    """A sub-buffer's CL_MEM_HOST_* flags that are more than one, or allow what its buffer's
    forbid (a host read of a host-write-only buffer, any access to a no-access one)."""
    if mine & (mine - 1):
        return True
    if parent == C.CL_MEM_HOST_NO_ACCESS:
        return bool(mine & (C.CL_MEM_HOST_READ_ONLY | C.CL_MEM_HOST_WRITE_ONLY))
    if parent == C.CL_MEM_HOST_WRITE_ONLY:
        return mine == C.CL_MEM_HOST_READ_ONLY
    return parent == C.CL_MEM_HOST_READ_ONLY and mine == C.CL_MEM_HOST_WRITE_ONLY


def create_subbuffer(r: Route, c: Any) -> int:
    """clCreateSubBuffer: a region of a buffer (the OpenCL checks, in PoCL's order)."""
    parent = r.get(c.id, VMem)
    args = c.u.create_subbuf
    flags, origin, size = int(args.flags), int(args.origin), int(args.size)
    if parent.parent is not None:
        return C.CL_INVALID_MEM_OBJECT
    access = flags & MEM_ACCESS
    pacc = parent.flags & MEM_ACCESS or C.CL_MEM_READ_WRITE
    if (
        access & (access - 1)
        or _host_access_conflicts(flags & MEM_HOST_ACCESS, parent.flags & MEM_HOST_ACCESS)
        or flags & (MEM_USE_HOST_PTR | MEM_ALLOC_HOST_PTR | MEM_COPY_HOST_PTR)
        or flags & ~(MEM_ACCESS | MEM_HOST_ACCESS)
        or (pacc == C.CL_MEM_WRITE_ONLY and access & (C.CL_MEM_READ_WRITE | C.CL_MEM_READ_ONLY))
        or (pacc == C.CL_MEM_READ_ONLY and access & (C.CL_MEM_READ_WRITE | C.CL_MEM_WRITE_ONLY))
    ):
        return C.CL_INVALID_VALUE
    if size == 0:
        return C.CL_INVALID_BUFFER_SIZE
    if origin + size > parent.size:
        return C.CL_INVALID_VALUE
    if origin % max(1, r.vdev.limit("mem_base_addr_align") // 8):
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
    c.ret = r.new(r.lib.RT_MEM, m, parent)
    return C.CL_SUCCESS
