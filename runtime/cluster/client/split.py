"""One launch of the virtual platform split across devices (route mode ``--split``).

Why a module of its own: the split is a different shape of launch (several sub-launches
and a merge) that uses the client's building blocks (``ensure_on``, ``cmd``, ``wait``,
``logged_launch``, the replay log) without changing the single-device launch path, which
stays as it is.

How it runs (docs/advisor.md, "Route mode: --split"):

1. The whole launch goes into the replay log as one ordinary launch entry: a replay after
   a node failure re-runs it **unsplit** on the survivor (kernels are deterministic given
   their inputs; a split and an unsplit run write the same bytes), so the log never needs
   to know about shares.
2. Every buffer argument is made valid on every device of the split (``ensure_on``),
   except, on the devices other than the *primary* (the one with the largest share),
   outputs whose share interval the kernel writes densely and never reads: those are only
   allocated there.
3. Each share is launched on its device as a sub-range: global offset at its first slab,
   global size its slabs (``partition_safety.sub_record`` does the same for emulation).
4. Merge into the primary's copy: the primary had the buffer's full old content, its own
   share wrote its interval in place; every other share's written byte interval of every
   written argument (``WrittenArg.region``: slab interval + k * stride, disjoint from the
   other shares' by the safety rule) is read back from its device and written into the
   primary's copy. Bytes that no share wrote keep their old content (the primary had it).
   Cost: one read and one write of the non-primary shares' written bytes, no full-buffer
   copies. The host waits for the non-primary shares (their intervals must arrive before
   they can be written on), so a split launch is synchronous for the host up to the
   slowest non-primary share.
5. Bookkeeping: buffers bound to a written argument are valid on the primary only, with
   no host copy; every other buffer (read-only or not) stays valid wherever it was
   copied: the safety check found no store to it, the same trust the merge puts in the
   written set. Reads, later launches and migrations then behave as after any launch on
   the primary.

A node lost while the split is in flight: the client's recovery replays the log (this
launch included, whole) on a survivor; the split notices (``recoveries`` changed), drops
its merge and marks written buffers valid on the survivor only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from clproj.runtime.cluster.client.coherence import RemoteBuffer
from clproj.runtime.cluster.client.requests import RemoteEvent, Request

if TYPE_CHECKING:
    from clproj.runtime.cluster.client.platform import RemotePlatform
    from clproj.runtime.cluster.client.programs import RemoteKernel
    from clproj.runtime.cluster.client.recovery import LaunchEntry
    from clproj.runtime.partition.safety import WrittenArg


@dataclasses.dataclass
class SplitPlan:
    """How launches of one kernel key are split: device ids and slab runs, in order."""

    devices: list[str]
    first: list[int]
    counts: list[int]
    dim: int
    slab_items: int  # work-items per slab along ``dim``
    written: list[WrittenArg]
    skip_upload: set[int]  # args non-primary devices only allocate (dense, unread, covered)
    sizes: dict[int, int]  # buffer arg -> bytes, as analysed (other sizes run unsplit)

    def shares(self) -> list[tuple[str, int, int]]:
        return list(zip(self.devices, self.first, self.counts, strict=True))

    @property
    def label(self) -> str:
        """What the route summary shows in its device column."""
        total = max(1, sum(self.counts))
        parts = [f"{d} {n / total:.0%}" for d, n in zip(self.devices, self.counts, strict=True)]
        return "split " + " + ".join(parts)


def _sub_range(
    gsize: Sequence[int], goff: Sequence[int] | None, plan: SplitPlan, first: int, n: int
) -> tuple[list[int], list[int]]:
    """Global size and offset of ``n`` slabs starting at slab ``first``."""
    size, off = list(gsize), list(goff or [0] * len(gsize))
    off[plan.dim] += first * plan.slab_items
    size[plan.dim] = n * plan.slab_items
    return size, off


def _share_fields(entry: LaunchEntry, size: list[int], off: list[int]) -> dict[str, Any]:
    """The launch command of one share. Its key is the launch's with ``#share``: the node
    learns measured times per key, and a share's time is not the whole launch's."""
    fields = dataclasses.replace(entry, gsize=size, goff=off).fields()
    fields["key"] = f"{entry.key}#share"
    if len(fields["key"]) > 256:  # protocol.MAX_ID
        del fields["key"]
    return fields


def _recovered(p: RemotePlatform, bufs: list[RemoteBuffer]) -> RemoteEvent:
    """A node was lost during the split: the replay ran the launch whole on the survivor."""
    target = p.default_target()
    for b in bufs:
        if not b.read_only:
            b.written_on(target)
    return RemoteEvent(p, [Request(target, "launch", done=True)])


def split_launch(  # noqa: C901
    p: RemotePlatform,
    k: RemoteKernel,
    gsize: Sequence[int],
    lsize: Sequence[int] | None,
    goff: Sequence[int] | None,
    plan: SplitPlan,
    key: str,
) -> RemoteEvent:
    """Run ``k`` over ``gsize`` as ``plan``'s shares and merge (see the module docstring).

    The returned event's last request is the primary share's launch (route mode reads the
    kernel time from it)."""
    entry, bufs = p.logged_launch(k, gsize, lsize, goff, key)
    shares = [(d, f, n) for d, f, n in plan.shares() if n]
    if len(shares) < 2 or any(d in p.dead or d not in p.devices for d, _, _ in shares):
        dev = p.place(key, bufs)  # a device went away since the decision: unsplit
        return RemoteEvent(p, p.launch_on(dev, entry, bufs))
    before = p.recoveries
    primary = max(shares, key=lambda s: s[2])[0]
    # buffers a non-primary device only needs allocated (every arg binding them skips upload)
    bound: dict[int, set[int]] = {}
    for i, v in k.args.items():
        if isinstance(v, RemoteBuffer):
            bound.setdefault(v.h, set()).add(i)
    alloc_only = {h for h, idx in bound.items() if idx <= plan.skip_upload}
    reqs: list[Request] = []
    # biggest share first: a device whose enqueue runs the kernel inline (PoCL basic in
    # the node's serving thread) then does so while the others already run
    for dev, _, _ in sorted(shares, key=lambda s: -s[2]):
        p.ensure_built(k.program, dev)
        for b in bufs:
            if dev != primary and b.h in alloc_only:
                if dev not in b.allocated:
                    reqs.append(
                        p.cmd(dev, "buf_create", {"h": b.h, "size": b.size, "flags": b.flags})
                    )
                    b.allocated.add(dev)
            else:
                reqs.extend(p.ensure_on(b, dev))
    if p.recoveries != before:
        return _recovered(p, bufs)
    launches: dict[str, Request] = {}
    for dev, first, n in sorted(shares, key=lambda s: -s[2]):
        size, off = _sub_range(gsize, goff, plan, first, n)
        launches[dev] = p.cmd(dev, "launch", _share_fields(entry, size, off))
    # read the other shares' written intervals (each queued after its share's launch)
    pieces: list[tuple[RemoteBuffer, int, int, dict[str, Any], Request]] = []
    for dev, first, n in shares:
        if dev == primary:
            continue
        for w in plan.written:
            b = k.args[w.arg]
            lo, hi = w.region(first, n, b.size)
            if hi <= lo:
                continue
            got: dict[str, Any] = {}

            def keep(frame: Any, got: dict[str, Any] = got) -> None:
                got["frame"] = frame  # keeps the zmq frame / shm file alive until written

            req = p.cmd(dev, "buf_read", {"h": b.h, "off": lo, "n": hi - lo}, on_done=keep)
            pieces.append((b, lo, hi, got, req))
    p.wait([r for *_, r in pieces] + [r for d, r in launches.items() if d != primary])
    if p.recoveries != before:
        return _recovered(p, bufs)
    for b, lo, hi, got, _ in pieces:
        reqs.append(
            p.cmd(primary, "buf_write", {"h": b.h, "off": lo, "n": hi - lo}, got["frame"].buffer)
        )
    for b in {k.args[w.arg] for w in plan.written}:
        b.written_on(primary)
    p.default_device = primary
    reqs.extend(r for d, r in launches.items() if d != primary)
    reqs.append(launches[primary])
    return RemoteEvent(p, reqs)
