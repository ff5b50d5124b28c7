"""Transfers between the application's memory and the virtual platform's buffers:
read / write / copy / fill, their rectangular forms, and map / unmap.

Why: a buffer's content lives on the cluster (and in the client's host copy); each
transfer is one or a few RemoteBuffer commands. Rectangular transfers move only the
covering byte span, in as few contiguous runs as the layout allows; maps are host copies
written back at unmap (or the application's own memory with CL_MEM_USE_HOST_PTR).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clproj import cl_names as C
from clproj.runtime.route.events import event
from clproj.runtime.route.held import maybe_hold
from clproj.runtime.route.objects import MEM_USE_HOST_PTR, VMem, VQueue, host_may

if TYPE_CHECKING:
    from clproj.runtime.route.state import Route


# ---- rectangular layouts --------------------------------------------------------------
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


# ---- linear transfers -----------------------------------------------------------------
def read_write(r: Route, c: Any) -> int:
    """clEnqueueReadBuffer / clEnqueueWriteBuffer."""
    ffi = r.ffi
    q = r.get(int(c.queue), VQueue)
    m = r.get(c.id, VMem)
    args = c.u.rw
    off, n, blocking = int(args.offset), int(args.size), bool(args.blocking)
    write = c.op == r.lib.RT_OP_WRITE
    if not host_may(m, not write, write):
        return C.CL_INVALID_OPERATION
    if off + n > m.size:
        return C.CL_INVALID_VALUE
    held = maybe_hold(r, c, q, "write" if write else "read", read_write)
    if held is not None:
        return held
    if write:
        ev = r.p.enqueue_write(
            m.buf, ffi.buffer(c.src, n), offset=m.origin + off, blocking=blocking
        )
        event(r, c, q, "write", ev)
    else:
        _, ev = r.p.enqueue_read(
            m.buf, out=ffi.buffer(c.dst, n), offset=m.origin + off, size=n, blocking=blocking
        )
        event(r, c, q, "read", ev)
    return C.CL_SUCCESS


def copy(r: Route, c: Any) -> int:
    """clEnqueueCopyBuffer (id2: the destination)."""
    q = r.get(int(c.queue), VQueue)
    m = r.get(c.id, VMem)
    args = c.u.copy
    so, do, n = int(args.src_offset), int(args.dst_offset), int(args.size)
    dst = r.get(c.id2, VMem)
    if n == 0 or so + n > m.size or do + n > dst.size:
        return C.CL_INVALID_VALUE
    if m.buf is dst.buf and _overlap(m.origin + so, dst.origin + do, n):
        return C.CL_MEM_COPY_OVERLAP
    held = maybe_hold(r, c, q, "copy", copy)
    if held is not None:
        return held
    ev = r.p.enqueue_copy_buffer(m.buf, dst.buf, n, m.origin + so, dst.origin + do)
    event(r, c, q, "copy", ev)
    return C.CL_SUCCESS


def fill(r: Route, c: Any) -> int:
    """clEnqueueFillBuffer (src: the pattern)."""
    q = r.get(int(c.queue), VQueue)
    m = r.get(c.id, VMem)
    args = c.u.fill
    ps, off, n = int(args.pattern_size), int(args.offset), int(args.size)
    if ps & (ps - 1) or n == 0 or off % ps or n % ps or off + n > m.size:
        return C.CL_INVALID_VALUE
    held = maybe_hold(r, c, q, "fill", fill)
    if held is not None:
        return held
    ev = r.p.enqueue_fill(m.buf, bytes(r.ffi.buffer(c.src, ps)), m.origin + off, n)
    event(r, c, q, "fill", ev)
    return C.CL_SUCCESS


# ---- rectangular transfers ------------------------------------------------------------
def transfer_rect(r: Route, c: Any) -> int:  # noqa: C901
    """clEnqueueRead/Write/CopyBufferRect (route.c checked the pitches and resolved 0).

    Reads fetch the covering byte span of the buffer and scatter its rows into the
    app's memory when the read completes; writes gather the rows and write the span
    (a buffer side with gaps is read first, so the bytes between rows keep their
    content); copies stay on the devices, one copy per run of contiguous rows."""
    lib, ffi = r.lib, r.ffi
    q = r.get(int(c.queue), VQueue)
    m = r.get(c.id, VMem)
    rc = c.u.rect
    region = [int(rc.region[i]) for i in range(3)]
    a_org = [int(rc.a_origin[i]) for i in range(3)]
    b_org = [int(rc.b_origin[i]) for i in range(3)]
    a_row, a_slice, b_row, b_slice = int(rc.a_row), int(rc.a_slice), int(rc.b_row), int(rc.b_slice)
    a_rows = rect_rows(a_org, region, a_row, a_slice)
    b_rows = rect_rows(b_org, region, b_row, b_slice)
    w = region[0]
    lo, hi = a_rows[0], a_rows[-1] + w
    if hi > m.size:
        return C.CL_INVALID_VALUE
    if c.op == lib.RT_OP_COPY_RECT:
        return _copy_rect(r, c, q, m, (a_org, b_org, region), a_rows, b_rows)
    read = c.op == lib.RT_OP_READ_RECT
    if not host_may(m, read, not read):
        return C.CL_INVALID_OPERATION
    held = maybe_hold(r, c, q, "read_rect" if read else "write_rect", transfer_rect)
    if held is not None:
        return held
    base = m.origin  # a sub-buffer's rows are its buffer's, from its origin
    ptr = c.dst if read else c.src
    host = memoryview(ffi.buffer(ffi.cast("char *", ptr), b_rows[-1] + w))
    blocking = bool(rc.blocking)
    pieces = runs(a_rows, b_rows, w)
    if not read:
        if len(pieces) == 1:  # contiguous on both sides: the app's memory as it is
            _, ho, n = pieces[0]
            ev = r.p.enqueue_write(m.buf, host[ho : ho + n], offset=base + lo, blocking=blocking)
        else:
            if len(runs(a_rows, a_rows, w)) == 1:  # the buffer side is contiguous
                span = bytearray(hi - lo)
            else:  # keep the bytes between the rows: read the span first
                span, _ = r.p.enqueue_read(m.buf, offset=base + lo, size=hi - lo, blocking=True)
            mv = memoryview(span)
            for ao, ho, n in pieces:
                mv[ao - lo : ao - lo + n] = host[ho : ho + n]
            ev = r.p.enqueue_write(m.buf, mv, offset=base + lo, blocking=blocking)
        event(r, c, q, "write_rect", ev)
        return C.CL_SUCCESS
    if len(pieces) == 1:  # contiguous on both sides: straight into the app's memory
        _, ho, n = pieces[0]
        _, ev = r.p.enqueue_read(
            m.buf, out=host[ho : ho + n], offset=base + lo, size=n, blocking=blocking
        )
        event(r, c, q, "read_rect", ev)
        return C.CL_SUCCESS
    tmp = bytearray(hi - lo)

    def scatter() -> None:
        src = memoryview(tmp)
        for ao, ho, n in pieces:
            host[ho : ho + n] = src[ao - lo : ao - lo + n]

    _, ev = r.p.enqueue_read(m.buf, out=tmp, offset=base + lo, size=hi - lo, blocking=False)
    if ev.reqs:
        ev.reqs[-1].then(scatter)
    else:  # served from the host copy: already in tmp
        scatter()
    if blocking:
        ev.wait()
        r.p.raise_async()
    event(r, c, q, "read_rect", ev)
    return C.CL_SUCCESS


def _copy_rect(
    r: Route,
    c: Any,
    q: VQueue,
    m: VMem,
    box: tuple[list[int], list[int], list[int]],
    a_rows: list[int],
    b_rows: list[int],
) -> int:
    """clEnqueueCopyBufferRect: ``box`` is (source origin, destination origin, region)."""
    a_org, b_org, region = box
    rc = c.u.rect
    w = region[0]
    dst = r.get(c.id2, VMem)
    if b_rows[-1] + w > dst.size:
        return C.CL_INVALID_VALUE
    if dst is m:  # PoCL's order: pitches must agree, then no overlap
        if rc.a_row != rc.b_row or rc.a_slice != rc.b_slice:
            return C.CL_INVALID_VALUE
        if copy_overlap(a_org, b_org, region, int(rc.a_row), int(rc.a_slice)):
            return C.CL_MEM_COPY_OVERLAP
    held = maybe_hold(r, c, q, "copy_rect", transfer_rect)
    if held is not None:
        return held
    from clproj.runtime.cluster.client.platform import RemoteEvent

    reqs = []
    so0, do0 = m.origin, dst.origin
    for so, do, n in runs(a_rows, b_rows, w):
        reqs += r.p.enqueue_copy_buffer(m.buf, dst.buf, n, so0 + so, do0 + do).reqs
    event(r, c, q, "copy_rect", RemoteEvent(r.p, reqs))
    return C.CL_SUCCESS


# ---- maps -----------------------------------------------------------------------------
def map_buffer(r: Route, c: Any) -> int:
    """clEnqueueMapBuffer: the region in host memory (c.ret), read first unless the map
    invalidates it; the application's own memory with CL_MEM_USE_HOST_PTR."""
    ffi = r.ffi
    q = r.get(int(c.queue), VQueue)
    m = r.get(c.id, VMem)
    args = c.u.map
    off, n, flags = int(args.offset), int(args.size), int(args.flags)
    writes = C.CL_MAP_WRITE | C.CL_MAP_WRITE_INVALIDATE_REGION
    if not host_may(m, bool(flags & C.CL_MAP_READ), bool(flags & writes)):
        return C.CL_INVALID_OPERATION
    if n == 0 or off + n > m.size:
        return C.CL_INVALID_VALUE
    held = maybe_hold(r, c, q, "map", map_buffer)
    if held is not None:
        return held
    if m.flags & MEM_USE_HOST_PTR:
        keep = None
        ptr = ffi.cast("char *", m.host_ptr) + off
    else:
        keep = ffi.new("char[]", n)
        ptr = keep
    if not flags & C.CL_MAP_WRITE_INVALIDATE_REGION:
        r.p.enqueue_read(
            m.buf, out=ffi.buffer(ptr, n), offset=m.origin + off, size=n, blocking=True
        )
    write = bool(flags & (C.CL_MAP_WRITE | C.CL_MAP_WRITE_INVALIDATE_REGION))
    m.maps[r.addr(ptr)] = (keep, off, n, write)
    c.ret = ptr
    event(r, c, q, "map", None)
    return C.CL_SUCCESS


def unmap(r: Route, c: Any) -> int:
    """clEnqueueUnmapMemObject (src: the mapped pointer): a map for writing is written
    back."""
    q = r.get(int(c.queue), VQueue)
    m = r.get(c.id, VMem)
    if r.addr(c.src) not in m.maps:
        return C.CL_INVALID_VALUE
    held = maybe_hold(r, c, q, "unmap", unmap)
    if held is not None:
        return held
    _keep, off, n, write = m.maps.pop(r.addr(c.src))
    ev = None
    if write:
        ev = r.p.enqueue_write(
            m.buf,
            r.ffi.buffer(r.ffi.cast("char *", c.src), n),
            offset=m.origin + off,
            blocking=False,
        )
    event(r, c, q, "unmap", ev)
    return C.CL_SUCCESS
