"""Fast launches: a repeated launch on a same-host node as a 24-byte frame.

Why a module of its own: the node (runtime.cluster.node.nodelink) can hold a *slot* per
launch shape (program, kernel, buffer and local arguments, scalar sizes, NDRange) and run
a launch from a small frame in its C thread alone, the scalar values travelling in the
frame. The client asks for a slot the second time it sees a shape, remembers the slots
it was granted, and forgets them whenever the node may have dropped them.
``CLPROJ_FAST_LAUNCH=0`` keeps every launch a full command (benchmarks compare both).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clproj.intercept import identity
from clproj.runtime.cluster import unixlink
from clproj.runtime.cluster.client.requests import Request
from clproj.runtime.cluster.node import nodelink

if TYPE_CHECKING:
    from clproj.runtime.cluster.client.platform import RemotePlatform
    from clproj.runtime.cluster.client.recovery import LaunchEntry

FAST_MAX_SCALAR = 256  # bytes of one scalar in a fast-launch frame (NL_MAX_SCALAR, nodelink.c)


class FastLaunch:
    """The slots granted per device (``slots``: device -> launch shape -> (slot, the
    placement key it was made with)) and the shapes seen once."""

    def __init__(self, p: RemotePlatform, enabled: bool) -> None:
        self.p = p
        self.enabled = enabled
        self.slots: dict[str, dict[tuple[Any, ...], tuple[int, str]]] = {}
        self._seen: dict[str, dict[tuple[Any, ...], int]] = {}  # device -> launch -> 0/1
        self._epoch: dict[str, int] = {}  # bumped whenever a device's slots are dropped

    def drop(self, dev: str) -> None:
        """Forget ``dev``'s slots (a superset of what the node drops, see
        runtime.cluster.node.nodelink)."""
        self.slots.pop(dev, None)
        self._seen.pop(dev, None)
        self._epoch[dev] = self._epoch.get(dev, 0) + 1

    def drop_all(self) -> None:
        """Forget every device's slots (a same-host link closed: they lived on its node)."""
        for dev in list(self.slots):
            self.drop(dev)

    def launch(self, dev: str, entry: LaunchEntry) -> Request:
        """The launch command: a fast frame when the node holds a slot for this launch's
        shape, else the full command, asking for a slot the second time the shape is seen.

        Why the second time: a slot costs the node a dedicated kernel object, worth it for
        a launch that repeats (launch loops, also with a changing step index), not for
        one-offs."""
        p = self.p
        fields = entry.fields()
        if not self.enabled:
            return p.cmd(dev, "launch", fields)
        sock = p.transport.sock_for(dev)
        fast = p.transport.fast_link_for(dev) if isinstance(sock, unixlink.Link) else None
        if fast is None:
            return p.cmd(dev, "launch", fields)
        args = entry.args
        if any(a[0] == "s" and len(a[1]) > FAST_MAX_SCALAR for a in args):
            return p.cmd(dev, "launch", fields)  # the fast frame carries <= 256 bytes
        sig = identity.launch_shape(
            entry.prog.h, entry.kernel, args, entry.gsize, entry.lsize, entry.goff
        )
        slots = self.slots.setdefault(dev, {})
        got = slots.get(sig)
        if got is not None:
            slot, slot_key = got
            req = Request(dev, "launch")
            rid = p.requests.register(req)
            scalars = [(i, a[1]) for i, a in enumerate(args) if a[0] == "s"]
            after = getattr(sock, "last_rid", 0)
            p.transport.send_fast(
                fast, nodelink.fast_frame(slot, rid, after, scalars, entry.key == slot_key)
            )
            sock.fast_last = rid  # the command link's next commands follow this frame
            return req
        seen = self._seen.setdefault(dev, {})
        times = seen.get(sig, 0)
        if times != 1:  # first sighting, or a slot already asked for
            if not times:
                if len(seen) >= 4096:
                    seen.clear()
                seen[sig] = 1
            return p.cmd(dev, "launch", fields)
        seen[sig] = 2  # asked: not again until the answer (or a drop) comes
        epoch = self._epoch.get(dev, 0)
        req = p.cmd(dev, "launch", {**fields, "slot": True})

        def granted(_frame: Any) -> None:
            n = (req.res or {}).get("slot")
            if isinstance(n, int) and self._epoch.get(dev, 0) == epoch and len(slots) < 256:
                slots[sig] = (n, entry.key)

        req.on_done = granted
        return req
