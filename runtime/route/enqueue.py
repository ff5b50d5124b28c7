"""Kernel launches on the virtual platform (clEnqueueNDRangeKernel, clEnqueueTask).

Why here: a launch takes in the arguments the application set (route.c kept them; only the
changed ones are read), checks them and the work-group size, and is placed by the broker
under its record signature (program hash, kernel, NDRange, scalar arguments), so that a
projection computed for a record (project mode) and posted with
:func:`clproj.runtime.route.platform.post_projection` reaches the broker under the key it
places by. With ``CLPROJ_HOOKS`` set, the first launch of each signature is also made
into a :class:`intercept.record.LaunchRecord` and handed to the hooks, as in project
mode; with --split the launch may be split across devices (runtime.partition).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from clproj import cl_names as C
from clproj.runtime.route.events import event
from clproj.runtime.route.held import maybe_hold
from clproj.runtime.route.objects import VKernel, VMem, VQueue

if TYPE_CHECKING:
    from clproj.runtime.route.state import Route

SIGS_MAX = 100_000  # cached launch signatures before the cache starts over
FAMILIES_MAX = 10_000


def sync_args(r: Route, k: VKernel) -> int:
    """Take in the arguments the app set since the last launch (route.c answered each
    clSetKernelArg and kept the value; ``gen`` says which changed). An argument never
    set, or naming a buffer released since: CL_INVALID_KERNEL_ARGS."""
    lib, ffi = r.lib, r.ffi
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
        if kind == lib.RT_SET_BYTES:
            data = ffi.unpack(ffi.cast("char *", a.bytes), int(a.size))
            remote[i] = data
            k.scalars[i] = data
        else:
            k.scalars.pop(i, None)
            if kind == lib.RT_SET_MEM:
                m = r.objs.get(a.id)
                if not isinstance(m, VMem):
                    return C.CL_INVALID_KERNEL_ARGS
                remote[i] = m.arg()
            elif kind == lib.RT_SET_LOCAL:
                from clproj.runtime.cluster.client.platform import LocalMemory

                remote[i] = LocalMemory(int(a.size))
            else:
                remote[i] = None
        gens[i] = g
    return C.CL_SUCCESS


def signature(r: Route, k: VKernel, g: list[int], lo: list[int] | None) -> tuple[str, str]:
    """The launch's record signature (the placement key: program, kernel, NDRange,
    scalar arguments) and its family (the same without the scalars' values)."""
    scal = tuple(k.scalars[i] for i in sorted(k.scalars))
    key = (id(k.prog.remote), k.name, tuple(g), lo and tuple(lo), scal)
    sig = r.sigs.get(key)
    if sig is None:
        from clproj.intercept.identity import launch_signature, placement_family, program_hash

        if not k.prog.hash:
            k.prog.hash = program_hash(k.prog.source, k.prog.options)
        ph = k.prog.hash
        fam = r.families.get(key[:4])
        if fam is None:  # once per kernel and NDRange, not per scalar value
            fam = placement_family(ph, k.name, len(g), g, lo, len(scal))
            if len(r.families) > FAMILIES_MAX:
                r.families.clear()
            r.families[key[:4]] = fam
        sig = (launch_signature(ph, k.name, len(g), g, lo, list(scal)), fam)
        if len(r.sigs) > SIGS_MAX:
            r.sigs.clear()
        r.sigs[key] = sig
    return sig


def _args_snapshot(k: VKernel) -> AbstractContextManager[Any]:
    """The kernel's arguments as they are now, for a launch held back: set again
    when it runs (clSetKernelArg after the enqueue must not change it)."""
    args, scal = dict(k.remote.args), dict(k.scalars)

    @contextlib.contextmanager
    def swap() -> Iterator[None]:
        old = (k.remote.args, k.scalars)
        k.remote.args, k.scalars = args, scal
        try:
            yield
        finally:
            k.remote.args, k.scalars = old

    return swap()


def _wg_too_large(r: Route, lo: list[int]) -> bool:
    wg = 1
    for x in lo:
        wg *= x
    limits = r.vdev.limits.get("max_work_item_sizes") or lo
    return wg > r.vdev.limit("max_work_group_size") or any(
        x > m for x, m in zip(lo, limits, strict=False)
    )


def _fits_required(k: VKernel, lo: list[int]) -> bool:
    """A local size the kernel's ``reqd_work_group_size`` allows (every one if it has none):
    exactly that size, checked at the enqueue as a driver does (the node would refuse it
    only when the command runs, after the app was told it was enqueued)."""
    reqd = [int(x) for x in k.meta.wg.get("COMPILE_WORK_GROUP_SIZE") or ()]
    if not any(reqd):
        return True
    return lo == [*reqd, 1, 1, 1][: len(lo)]


def launch(r: Route, c: Any) -> int:  # noqa: C901
    """clEnqueueNDRangeKernel."""
    ffi = r.ffi
    q = r.get(int(c.queue), VQueue)
    k = r.get(c.id, VKernel)
    la = c.u.launch
    dim = int(la.dim)
    g = [int(la.global_size[i]) for i in range(dim)]
    lo = [int(la.local_size[i]) for i in range(dim)] if la.local_size != ffi.NULL else None
    off = [int(la.global_offset[i]) for i in range(dim)] if la.global_offset != ffi.NULL else None
    if not r.in_held:  # a held launch runs with the arguments of its enqueue
        bad = sync_args(r, k)
        if bad:
            return bad
    args = k.remote.args
    # Every argument set: sync_args keeps only indices below the kernel's count, so equal
    # counts mean all of them; the client's own "argument not set" cannot arise.
    if len(args) != len(k.meta.args):
        return C.CL_INVALID_KERNEL_ARGS
    if lo is not None and (_wg_too_large(r, lo) or not _fits_required(k, lo)):
        return C.CL_INVALID_WORK_GROUP_SIZE
    held = maybe_hold(r, c, q, "launch", launch, lambda: _args_snapshot(k))
    if held is not None:
        return held
    from clproj.runtime.cluster.client.platform import SubRegion

    sig, fam = signature(r, k, g, lo)
    first = r.hooks and sig not in r.seen_sigs
    if first:
        if len(r.seen_sigs) >= SIGS_MAX:  # a new signature every launch
            r.seen_sigs.clear()
        r.seen_sigs.add(sig)
        _notify_hooks(r, k, g, lo, off)
    plan = None
    split = r.split
    if split is not None and not any(isinstance(v, SubRegion) for v in args.values()):
        plan = split.plan(sig, k.remote, first)  # (a sub-buffer argument: unsplit)
    # the split's measured check: this launch alone, from issue to completion
    timed = split is not None and split.timing(sig, plan is not None)
    if timed:
        _settled(r, list(r.p.pending.values()))
        t0 = time.perf_counter()
    if plan is not None:
        ev = r.p.enqueue_split_launch(k.remote, g, lo, off, plan, key=sig)
    else:
        ev = r.p.enqueue_launch(k.remote, g, lo, off, key=sig, family=fam)
    if timed and _settled(r, ev.reqs):
        split.observe(sig, time.perf_counter() - t0, plan is not None)
    req = ev.reqs[-1]
    r.stats.add(k.name, plan.label if plan is not None else req.dev, req, r.p.dead)
    event(r, c, q, "launch", ev, req)
    return C.CL_SUCCESS


def _settled(r: Route, reqs: list[Any]) -> bool:
    """Every request in ``reqs`` completed without error; their errors stay for the
    app's own wait (unlike RemoteEvent.wait). False if one failed or on timeout."""
    return r.p.settle(reqs) and not any(q.err for q in reqs)


def _snapshot_args(r: Route, args: list[Any], bufs: dict[int, Any], rec: Any) -> None:
    """Read each buffer argument of a launch to record back from its node, into ``rec``."""
    from clproj.intercept.last_snapshots import all_zero
    from clproj.intercept.shim_runtime import SCRATCH_MIN_BYTES
    from clproj.runtime.cluster.client.platform import SubRegion

    for a in args:
        if a.index in bufs:
            b = bufs[a.index]
            if isinstance(b, SubRegion):
                data, _ = r.p.enqueue_read(b.buf, offset=b.offset, size=b.size, blocking=True)
            else:
                data, _ = r.p.enqueue_read(b, blocking=True)
            # as project mode records (intercept.shim_runtime): a snapshot of 1 MiB or more
            # that is all zeros is no blob (read as zeros), neither hashed nor stored; any
            # other is hashed and written by the record writer, off the app's thread
            if len(data) >= SCRATCH_MIN_BYTES and all_zero(data):
                a.blob = None
            else:
                a.blob = rec.add_blob(data)


def _notify_hooks(
    r: Route, k: VKernel, g: list[int], lo: list[int] | None, off: list[int] | None
) -> None:
    """The first launch of a signature, for the hooks (projection in route mode).

    Its buffers are read back and a full record saved only when the reuse cache will
    emulate it (the admission the projection hook registers, as in project mode); otherwise
    the hook projects its metadata from the cache's anchors (at most every few
    tens of milliseconds per kernel family)."""
    from clproj.intercept import hooks
    from clproj.intercept.record import ArgRecord, LaunchRecord, new_id
    from clproj.intercept.record_writer import save_later
    from clproj.intercept.shim_runtime import (
        record_dir,
        settle,
        within_record_budget,
    )
    from clproj.runtime.cluster.client.platform import LocalMemory, RemoteBuffer, SubRegion

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
    if not hooks.admit("route", rec):
        return
    # the same budget as project mode's records (CLPROJ_RECORD_MAX_BYTES, the disk's free
    # space floor): a full disk stops recording with one line, never the app's call
    need = sum(int(a.size or 0) for a in args if a.kind == "buffer")
    if not within_record_budget(need, record_dir()):
        return
    try:
        _snapshot_args(r, args, bufs, rec)
    except BaseException:
        settle(need, 0)
        raise
    rec.id = new_id(k.name, record_dir())
    save_later(rec, record_dir(), then=hooks.notify, after=lambda rr: settle(need, rr.stored_bytes))
